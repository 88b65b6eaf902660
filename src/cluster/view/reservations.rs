//! Allocations gpugate chose before the pod carries them: a bind's
//! reservation (in flight, then bound until the watch shows the pod with
//! it) and `/prioritize`'s assumption (until the pod's bind or its time).
//! Watch events that do not show them yet must not drop them, or a second
//! bind could take the same GPUs meanwhile. Nodes with such binds are
//! busy: a new bind there would wait.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use crate::engine::{Allocation, ApplyError};

use super::{ClusterView, HeldPod, Reservation};

impl ClusterView {
    /// Records an allocation that gpugate chose (bind) for a pod that does
    /// not carry it yet, replacing whatever the pod held before. Refused when
    /// the node or a GPU is unknown; the caller chose it against this view,
    /// under the same lock. Until [`ClusterView::mark_bound`] or
    /// [`ClusterView::release_reservation`], watch events of the pod that do
    /// not show it are ignored.
    pub fn reserve(
        &mut self,
        key: &str,
        pod: &Pod,
        allocation: Allocation,
    ) -> Result<(), ApplyError> {
        self.place(key, pod, allocation, Reservation::InFlight)
    }

    /// Holds an allocation on the node kube-scheduler is likely to choose
    /// for a pod that holds nothing yet, until `until_ms` (Unix ms) or its
    /// bind, whichever comes first (the bind replaces it with its own
    /// choice). Returns whether it was made.
    pub fn assume(&mut self, key: &str, pod: &Pod, allocation: Allocation, until_ms: i64) -> bool {
        if self.pods.contains_key(key) {
            return false;
        }
        self.place(key, pod, allocation, Reservation::Assumed { until_ms })
            .is_ok()
    }

    /// Whether any pod holds an assumed allocation (cheap: only unsettled
    /// pods are looked at).
    pub fn has_assumed(&self) -> bool {
        self.unsettled.keys().any(|k| self.is_assumed(k))
    }

    /// Whether the pod holds an assumed allocation.
    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods
            .get(key)
            .is_some_and(|p| matches!(p.reservation, Reservation::Assumed { .. }))
    }

    /// Drops the pod's assumed allocation (a new scheduling cycle of the
    /// pod began). Returns whether there was one.
    pub fn drop_assumed(&mut self, key: &str) -> bool {
        let assumed = self.is_assumed(key);
        if assumed {
            self.forget_allocation(key);
        }
        assumed
    }

    /// Drops assumed allocations whose time is up: no bind confirmed them.
    /// Returns how many.
    pub fn expire_assumed(&mut self, now_ms: i64) -> usize {
        let ended: Vec<String> = self
            .unsettled
            .keys()
            .filter(|k| {
                self.pods.get(*k).is_some_and(|p| {
                    matches!(p.reservation, Reservation::Assumed { until_ms } if until_ms <= now_ms)
                })
            })
            .cloned()
            .collect();
        for k in &ended {
            self.forget_allocation(k);
        }
        ended.len()
    }

    /// Holds `allocation` for the pod under `key` with the given
    /// reservation, replacing whatever it held.
    fn place(
        &mut self,
        key: &str,
        pod: &Pod,
        allocation: Allocation,
        reservation: Reservation,
    ) -> Result<(), ApplyError> {
        let old = self.pods.remove(key);
        if let Some(old) = &old {
            self.state.remove(key);
            self.quotas.release_used(&old.namespace, old.amount);
            self.unsettled.remove(key);
        }
        let node = allocation.node.clone();
        if let Err(e) = self.state.apply(key, allocation.clone()) {
            if let Some(old) = old {
                // Put back what was there.
                if let Some(a) = old.allocation.clone() {
                    let _ = self.state.apply(key, a);
                }
                if old.reservation != Reservation::Settled
                    && let Some(a) = &old.allocation
                {
                    self.unsettled.insert(key.to_string(), a.node.clone());
                }
                self.hold(key, old);
            }
            return Err(e);
        }
        self.hold(key, HeldPod::of(pod, Some(allocation), None, reservation));
        self.unsettled.insert(key.to_string(), node);
        Ok(())
    }

    /// The pod of a reservation is bound: the allocation stays held until
    /// the watch shows the pod carrying it.
    pub fn mark_bound(&mut self, key: &str) {
        if let Some(p) = self
            .pods
            .get_mut(key)
            .filter(|p| p.reservation == Reservation::InFlight)
        {
            p.reservation = Reservation::Bound;
        }
    }

    /// The reservation is the truth from now on (standalone mode, where no
    /// watch will show the pod).
    pub fn settle(&mut self, key: &str) {
        if let Some(p) = self.pods.get_mut(key) {
            p.reservation = Reservation::Settled;
        }
        self.unsettled.remove(key);
    }

    /// Undoes a reservation whose bind failed. Returns whether there was
    /// one in flight.
    pub fn release_reservation(&mut self, key: &str) -> bool {
        let in_flight = self
            .pods
            .get(key)
            .is_some_and(|p| p.reservation == Reservation::InFlight);
        if in_flight {
            self.forget_allocation(key);
        }
        in_flight
    }

    /// Whether a bind of the pod is in flight.
    pub fn is_binding(&self, key: &str) -> bool {
        self.pods
            .get(key)
            .is_some_and(|p| p.reservation == Reservation::InFlight)
    }

    /// Whether gpugate reserved the pod's allocation (in flight, or bound
    /// and not yet seen on the pod).
    pub fn is_reserved(&self, key: &str) -> bool {
        self.pods
            .get(key)
            .is_some_and(|p| p.reservation != Reservation::Settled)
    }

    /// How many of gpugate's binds to each node are unsettled (running, or
    /// bound and not yet seen by the watch). Small: only nodes with some.
    pub fn unsettled_binds(&self) -> HashMap<&str, u32> {
        let mut out: HashMap<&str, u32> = HashMap::new();
        for node in self.unsettled.values() {
            *out.entry(node.as_str()).or_default() += 1;
        }
        out
    }

    /// Why a new bind to `node` would have to wait, if it would: binds of
    /// gpugate's running or just done there (`unsettled`, from
    /// [`ClusterView::unsettled_binds`]), or HAMi's node lock held by a pod
    /// (and not expired) as the watch last showed it.
    pub fn node_busy(
        &self,
        node: &str,
        unsettled: &HashMap<&str, u32>,
        now: jiff::Timestamp,
        expiry: std::time::Duration,
    ) -> Option<String> {
        if let Some(n) = unsettled.get(node) {
            return Some(format!(
                "{n} pod(s) being bound there by gpugate, not yet confirmed"
            ));
        }
        self.seen_locks.held(node, now, expiry)
    }
}
