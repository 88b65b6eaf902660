//! Allocations gpugate chose before the pod carries them: a bind's
//! reservation (in flight, then bound until the watch shows the pod with
//! it) and `/prioritize`'s assumption (until the pod's bind or its time).
//! Watch events that do not show them yet must not drop them, or a second
//! bind could take the same GPUs meanwhile. Nodes with such binds are
//! busy: a new bind there would wait.
//!
//! This module owns their life, and that of the capacity held for gang
//! members. A bind's reservation is changed only through the
//! [`Reservation`] that [`ClusterView::reserve`] returns (bound, settled,
//! released); an assumption has no holder and ends by its time
//! ([`ClusterView::expire`]), by its pod's next scheduling cycle
//! ([`ClusterView::drop_assumed`]) or when its bind reserves. A gang
//! group's holds are replaced whole ([`ClusterView::replace_gang_holds`])
//! or taken out while a member is placed and put back if that fails
//! ([`TakenHolds`]). The transitions themselves are private to the view.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use crate::engine::gang::GangKey;
use crate::engine::{Allocation, ApplyError};

use super::{ClusterView, GangHold, HeldPod, Stage};

/// A bind's reservation of a pod's GPUs, made by
/// [`ClusterView::reserve`]: the only way to change it. Each transition
/// consumes it, and acts only on the reservation it was made for (not on
/// one a later bind of the same pod made).
#[derive(Debug)]
#[must_use = "a reservation is bound, settled or released"]
pub struct Reservation {
    uid: String,
    ticket: u64,
}

impl Reservation {
    /// The Binding is written: the allocation stays held until the watch
    /// shows the pod carrying it.
    pub fn bound(self, view: &mut ClusterView) {
        view.mark_bound(&self.uid, self.ticket);
    }

    /// The reservation is the truth from now on (standalone mode, where no
    /// watch will show the pod).
    pub fn settle(self, view: &mut ClusterView) {
        view.settle_reservation(&self.uid, self.ticket);
    }

    /// The bind failed: the GPUs are free again. Whether the reservation
    /// was still in flight (a watch event may have settled or dropped it
    /// meanwhile).
    pub fn release(self, view: &mut ClusterView) -> bool {
        view.release_reservation(&self.uid, self.ticket)
    }
}

/// A gang group's holds, taken out of the state while one of its members
/// is placed: put back with [`TakenHolds::restore`] if that fails, or
/// dropped once [`ClusterView::replace_gang_holds`] has recomputed them.
#[derive(Debug)]
#[must_use = "taken holds are restored, or dropped once replaced"]
pub struct TakenHolds {
    group: GangKey,
    holds: Vec<GangHold>,
}

impl TakenHolds {
    /// Puts the holds back (those that still fit).
    pub fn restore(self, view: &mut ClusterView) {
        for (key, allocation, until) in self.holds {
            let _ = view.hold_for_gang(&key, &self.group, allocation, until);
        }
    }
}

/// What [`ClusterView::expire`] ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// `/prioritize`'s assumptions no bind came for.
    pub assumed: usize,
    /// Capacity held for gang members.
    pub gang_holds: usize,
    /// Pods gpugate's preemption had freed GPUs for.
    pub nominations: usize,
    /// Places held for the replacements of moved pods.
    pub destinations: usize,
}

/// Another bind of the pod holds a reservation in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindInProgress;

impl ClusterView {
    /// Records an allocation that gpugate chose (bind) for a pod that does
    /// not carry it yet, replacing whatever the pod held before. Refused when
    /// the node or a GPU is unknown; the caller chose it against this view,
    /// under the same lock. Until the returned reservation is bound,
    /// settled or released, watch events of the pod that do not show it
    /// are ignored.
    pub fn reserve(
        &mut self,
        key: &str,
        pod: &Pod,
        allocation: Allocation,
    ) -> Result<Reservation, ApplyError> {
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.place(key, pod, allocation, Stage::InFlight, ticket)?;
        Ok(Reservation {
            uid: key.to_string(),
            ticket,
        })
    }

    /// A bind of the pod, read unbound, begins: refused while another
    /// holds a reservation in flight; otherwise whatever the ledger holds
    /// for the pod (annotations of a bind that failed, HAMi's filter, an
    /// assumption) is on no node and is forgotten.
    pub fn begin_bind(&mut self, key: &str) -> Result<(), BindInProgress> {
        if self.is_binding(key) {
            return Err(BindInProgress);
        }
        self.forget_allocation(key);
        Ok(())
    }

    /// Ends what is due at `now_ms` (Unix ms): assumptions, gang holds and
    /// preemption nominations whose time is up.
    pub fn expire(&mut self, now_ms: i64) -> Expired {
        Expired {
            assumed: self.expire_assumed(now_ms),
            gang_holds: self.expire_gang_holds(now_ms),
            nominations: self.expire_nominations(now_ms),
            destinations: self.expire_destinations(now_ms),
        }
    }

    /// The holds of `group`, taken out of the state: its members are placed
    /// without them.
    pub fn take_gang_holds(&mut self, group: &GangKey) -> TakenHolds {
        TakenHolds {
            group: group.clone(),
            holds: self.gangs.take(&mut self.state, group),
        }
    }

    /// Replaces the holds of `group` with `holds` (member UID and
    /// allocation), each until `until_ms` (Unix ms). Returns how many were
    /// made (an allocation the state refuses is left out).
    pub fn replace_gang_holds(
        &mut self,
        group: &GangKey,
        holds: Vec<(String, Allocation)>,
        until_ms: i64,
    ) -> usize {
        let _ = self.gangs.take(&mut self.state, group);
        holds
            .into_iter()
            .filter(|(key, allocation)| {
                self.hold_for_gang(key, group, allocation.clone(), until_ms)
                    .is_ok()
            })
            .count()
    }

    /// Holds capacity for a member that is not bound yet, until `until_ms`
    /// (Unix ms). Other pods see it as used; members of the group do not.
    pub(super) fn hold_for_gang(
        &mut self,
        key: &str,
        group: &GangKey,
        allocation: Allocation,
        until_ms: i64,
    ) -> Result<(), ApplyError> {
        self.gangs
            .hold(&mut self.state, key, group, allocation, until_ms)
    }

    /// Drops the capacity held for a member (it is being bound, or gone).
    pub(super) fn release_gang_hold(&mut self, key: &str) {
        self.gangs.release(&mut self.state, key);
    }

    /// Drops holds that ended at or before `now_ms`; returns how many.
    pub(super) fn expire_gang_holds(&mut self, now_ms: i64) -> usize {
        self.gangs.expire(&mut self.state, now_ms)
    }

    /// Whether anything may be due: assumptions, gang holds or
    /// nominations (cheap: a sweep is skipped when nothing is held).
    pub fn has_expiring(&self) -> bool {
        self.has_assumed()
            || self.gang_hold_count() > 0
            || self.nomination_count() > 0
            || self.destination_count() > 0
    }

    /// Holds an allocation on the node kube-scheduler is likely to choose
    /// for a pod that holds nothing yet, until `until_ms` (Unix ms) or its
    /// bind, whichever comes first (the bind replaces it with its own
    /// choice). Returns whether it was made.
    pub fn assume(&mut self, key: &str, pod: &Pod, allocation: Allocation, until_ms: i64) -> bool {
        if self.pods.contains_key(key) {
            return false;
        }
        self.place(key, pod, allocation, Stage::Assumed { until_ms }, 0)
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
            .is_some_and(|p| matches!(p.stage, Stage::Assumed { .. }))
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
    pub(super) fn expire_assumed(&mut self, now_ms: i64) -> usize {
        let ended: Vec<String> = self
            .unsettled
            .keys()
            .filter(|k| {
                self.pods.get(*k).is_some_and(
                    |p| matches!(p.stage, Stage::Assumed { until_ms } if until_ms <= now_ms),
                )
            })
            .cloned()
            .collect();
        for k in &ended {
            self.forget_allocation(k);
        }
        ended.len()
    }

    /// Holds `allocation` for the pod under `key` at the given stage
    /// (under `ticket`, for a bind's reservation), replacing whatever it
    /// held.
    fn place(
        &mut self,
        key: &str,
        pod: &Pod,
        allocation: Allocation,
        stage: Stage,
        ticket: u64,
    ) -> Result<(), ApplyError> {
        let old = self.unhold(key);
        if let Some(old) = &old {
            self.state.remove(key);
            self.quotas
                .release_used(&old.namespace, &old.scope, &old.amount);
            self.unsettled.remove(key);
        }
        let node = allocation.node.clone();
        if let Err(e) = self.state.apply(key, allocation.clone()) {
            if let Some(old) = old {
                // Put back what was there.
                if let Some(a) = old.allocation.clone() {
                    let _ = self.state.apply(key, a);
                }
                if old.stage != Stage::Settled
                    && let Some(a) = &old.allocation
                {
                    self.unsettled.insert(key.to_string(), a.node.clone());
                }
                self.hold(key, old);
            }
            return Err(e);
        }
        let mut held = HeldPod::of(pod, Some(allocation), None, stage);
        held.ticket = ticket;
        self.hold(key, held);
        self.unsettled.insert(key.to_string(), node);
        Ok(())
    }

    /// The reservation `ticket` of the pod is bound: the allocation stays
    /// held until the watch shows the pod carrying it.
    fn mark_bound(&mut self, key: &str, ticket: u64) {
        if let Some(p) = self
            .pods
            .get_mut(key)
            .filter(|p| p.stage == Stage::InFlight && p.ticket == ticket)
        {
            p.stage = Stage::Bound;
        }
    }

    /// The reservation `ticket` of the pod is the truth from now on.
    fn settle_reservation(&mut self, key: &str, ticket: u64) {
        if let Some(p) = self.pods.get_mut(key).filter(|p| p.ticket == ticket) {
            p.stage = Stage::Settled;
            self.unsettled.remove(key);
        }
    }

    /// Undoes the reservation `ticket` of the pod, whose bind failed.
    /// Returns whether it was in flight.
    fn release_reservation(&mut self, key: &str, ticket: u64) -> bool {
        let in_flight = self
            .pods
            .get(key)
            .is_some_and(|p| p.stage == Stage::InFlight && p.ticket == ticket);
        if in_flight {
            self.forget_allocation(key);
        }
        in_flight
    }

    /// Whether a bind of the pod is in flight.
    pub fn is_binding(&self, key: &str) -> bool {
        self.pods
            .get(key)
            .is_some_and(|p| p.stage == Stage::InFlight)
    }

    /// Whether gpugate reserved the pod's allocation (in flight, or bound
    /// and not yet seen on the pod).
    pub fn is_reserved(&self, key: &str) -> bool {
        self.pods
            .get(key)
            .is_some_and(|p| p.stage != Stage::Settled)
    }

    /// What is already promised to each node, which a new bind there would
    /// wait behind: gpugate's binds running, just done or assumed there,
    /// and HAMi's node lock held by a pod (and not expired) as the watch
    /// last showed it. A node not in it has nothing promised. Built from
    /// the few nodes with binds or a held lock, so that `/filter` looks its
    /// candidates up in a small map.
    pub fn promised_nodes(
        &self,
        now: jiff::Timestamp,
        expiry: std::time::Duration,
    ) -> HashMap<&str, PromisedWork<'_>, foldhash::fast::RandomState> {
        // Looked up once per feasible node by each /filter (5,000 at
        // scale): a fast hasher, seeded per process.
        let mut out: HashMap<&str, PromisedWork, _> = HashMap::default();
        for node in self.unsettled.values() {
            out.entry(node.as_str()).or_default().binds += 1;
        }
        for (node, lock) in self.seen_locks.all_locks(now, expiry, false) {
            out.entry(node).or_default().lock = Some(lock);
        }
        out
    }
}

/// What a node is already promised: each is one lock hold (HAMi's device
/// plugin allocates one pod at a time per node) before a new bind there
/// gets the lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromisedWork<'v> {
    /// gpugate's binds to the node running, bound and not yet seen by the
    /// watch, or assumed by `/filter` or `/prioritize` (kube-scheduler's
    /// bind is on its way).
    pub binds: u32,
    /// HAMi's node lock, when a pod holds it (its holder may be one of
    /// `binds`, counted once more: the lock then has that much longer to
    /// run, on average, than a bind not yet started).
    pub lock: Option<&'v std::sync::Arc<crate::hami::NodeLock>>,
}

impl PromisedWork<'_> {
    /// Lock holds ahead of a new bind.
    pub fn holds(&self) -> u32 {
        self.binds + u32::from(self.lock.is_some())
    }

    /// Why a bind there would wait, if it would.
    pub fn describe(&self) -> Option<String> {
        let binds = (self.binds > 0).then(|| {
            format!(
                "{} pod(s) promised there by gpugate (assumed or being bound), not yet confirmed",
                self.binds
            )
        });
        let holder = self.lock.map(|l| super::seen_locks::holder_text(l));
        match (binds, holder) {
            (Some(binds), Some(holder)) => Some(format!("{binds}; {holder}")),
            (binds, holder) => binds.or(holder),
        }
    }
}
