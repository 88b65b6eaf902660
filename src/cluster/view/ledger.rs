//! The allocation ledger: what each pod holds, keyed by its UID, read
//! from its annotations (or reserved by gpugate, see `reservations.rs`),
//! applied to its node's GPUs when it can be and kept aside as
//! *unaccounted* when it cannot, and counted against its namespace's quota.

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::convert::{pod_finished, pod_name};
use crate::cluster::pod_annotations::pod_allocation;
use crate::engine::Allocation;

use super::{ClusterView, HeldPod, Stage};

impl ClusterView {
    /// Records a pod under `key` (its UID). Returns the problem when its
    /// allocation cannot be counted on a node.
    pub fn upsert_pod(&mut self, key: &str, pod: &Pod) -> Option<String> {
        self.gangs.track(key, pod);
        // A reservation is gpugate's own word only while the pod is unbound
        // and unfinished; once the API server shows it bound or finished,
        // the pod is the truth.
        let finished = pod_finished(pod);
        let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let reserved = !finished
            && !bound
            && self
                .pods
                .get(key)
                .is_some_and(|p| p.stage != Stage::Settled);
        match pod_allocation(pod) {
            Ok(None) if reserved => None,
            Ok(None) => {
                self.forget_allocation(key);
                None
            }
            Ok(Some(allocation)) => {
                if let Some(held) = self
                    .pods
                    .get_mut(key)
                    .filter(|p| p.allocation.as_ref() == Some(&allocation))
                {
                    // Status updates of a running pod: nothing changes but
                    // whether the kubelet has admitted it. A reservation of
                    // a bound pod is now carried by the pod.
                    if !reserved {
                        held.stage = Stage::Settled;
                        self.unsettled.remove(key);
                    }
                    held.labels = super::PackedLabels::pack(pod.metadata.labels.as_ref());
                    held.bound = bound;
                    let unaccounted = held.unaccounted.clone();
                    if held.started.is_none() {
                        held.started = super::pod_started(pod);
                        self.settle_if_shown(key, &allocation.node);
                    }
                    return unaccounted;
                }
                if reserved {
                    // The pod as it was before bind wrote its annotations.
                    return None;
                }
                self.forget_allocation(key);
                let unaccounted = self
                    .state
                    .apply(key, allocation.clone())
                    .err()
                    .map(|e| format!("pod {}: {e}", pod_name(pod)));
                let node = allocation.node.clone();
                let held = HeldPod::of(pod, Some(allocation), unaccounted, Stage::Settled);
                let unaccounted = self.hold(key, held);
                self.settle_if_shown(key, &node);
                unaccounted
            }
            Err(_) if reserved => None,
            Err(e) => {
                self.forget_allocation(key);
                // Unreadable: nothing to place on a node, but the pod is
                // reported and its namespace is not told it has room it may
                // not have.
                let held = HeldPod::of(pod, None, Some(e.to_string()), Stage::Settled);
                self.hold(key, held)
            }
        }
    }

    pub(super) fn hold(&mut self, key: &str, pod: HeldPod) -> Option<String> {
        self.quotas.add_used(&pod.namespace, pod.amount);
        let unaccounted = pod.unaccounted.clone();
        self.pods.insert(key.to_string(), pod);
        unaccounted
    }

    /// A complete list lacks the pod: it was deleted while the watch was
    /// down, unless a bind of it is in flight (the list may predate it; the
    /// bind itself fails and releases if the pod is gone).
    pub fn pod_missing_from_list(&mut self, key: &str) {
        if !self.is_binding(key) {
            self.delete_pod(key);
        }
    }

    /// UIDs of every pod the view keeps: those holding GPUs and unbound
    /// gang members.
    pub fn tracked_pods(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.pods.keys().cloned().collect();
        keys.extend(
            self.gangs
                .tracked()
                .filter(|k| !self.pods.contains_key(*k))
                .map(str::to_string),
        );
        keys
    }

    /// The pod was listed without an allocation (a re-list keeps only the
    /// UIDs of such pods), or is missing from a list (which may lag behind
    /// a pod just created): frees what it held, unless gpugate reserved it.
    pub fn pod_holds_nothing(&mut self, key: &str) {
        // Gang members are listed whole, so this pod is in no group.
        self.gangs.untrack(key);
        if !self
            .pods
            .get(key)
            .is_some_and(|p| p.stage != Stage::Settled)
        {
            self.forget_allocation(key);
        }
    }

    /// Whether a held pod is bound to a node (a pending pod may carry
    /// allocation annotations left by a failed bind).
    pub fn held_bound(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|p| p.bound)
    }

    /// The priority of a held pod (0 when unknown).
    pub fn held_priority(&self, key: &str) -> Option<i32> {
        self.pods.get(key).map(|p| p.priority)
    }

    /// Forgets a deleted pod: its GPUs, quota, group membership and the
    /// capacity held for it.
    pub fn delete_pod(&mut self, key: &str) {
        self.drop_nomination(key);
        self.forget_allocation(key);
        self.gangs.untrack(key);
        self.release_gang_hold(key);
    }

    /// Frees what a pod holds (GPUs and quota); the pod itself may live on.
    pub(super) fn forget_allocation(&mut self, key: &str) {
        self.unsettled.remove(key);
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        self.state.remove(key);
        self.quotas.release_used(&old.namespace, old.amount);
        self.victim_freed(key);
    }

    /// The ledger's allocations that are not counted on any node, with why.
    pub fn unaccounted(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = self
            .pods
            .iter()
            .filter_map(|(uid, p)| p.unaccounted.as_deref().map(|why| (uid.as_str(), why)))
            .collect();
        out.sort();
        out
    }

    /// `namespace/name` of a held pod.
    pub fn held_name(&self, key: &str) -> Option<String> {
        self.pods.get(key).map(HeldPod::who)
    }

    /// UIDs of every pod the ledger holds GPUs for.
    pub fn held_pods(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// The allocation held under `key`, applied or not.
    pub fn held_allocation(&self, key: &str) -> Option<&Allocation> {
        self.pods.get(key).and_then(|p| p.allocation.as_ref())
    }

    /// `(namespace, pod name, allocation)` of every held pod whose
    /// allocation could be read, applied or not, in no particular order.
    pub fn held_pod_allocations(&self) -> impl Iterator<Item = (&str, &str, &Allocation)> {
        self.pods.values().filter_map(|p| {
            p.allocation
                .as_ref()
                .map(|a| (p.namespace.as_str(), p.name.as_str(), a))
        })
    }
}
