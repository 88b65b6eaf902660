//! The allocation ledger: what each pod holds, keyed by its UID, read
//! from its annotations (or reserved by gpugate, see `reservations.rs`),
//! applied to its node's GPUs when it can be and kept aside as
//! *unaccounted* when it cannot, and counted against its namespace's quota.

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::convert::{pod_finished, pod_name};
use crate::cluster::pod_annotations::pod_allocation;
use crate::engine::allocation::MigMismatch;
use crate::engine::{Allocation, ClusterState};

use crate::hami::node_lock::{HolderState, Kept, LockRules, Takeover};

use super::{AwaitedLock, ClusterView, HeldPod, Stage};

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
                if let Some(held) = self.pods.get_mut(key).filter(|p| {
                    p.allocation
                        .as_ref()
                        .is_some_and(|a| a.written_as(&allocation))
                }) {
                    // Status updates of a running pod: nothing changes but
                    // whether the kubelet has admitted it. A reservation of
                    // a bound pod is now carried by the pod.
                    if !reserved {
                        held.stage = Stage::Settled;
                        self.unsettled.remove(key);
                    }
                    held.labels = super::PackedLabels::pack(pod.metadata.labels.as_ref());
                    held.bound = bound;
                    held.bound_elsewhere = super::bound_elsewhere(pod, Some(&allocation));
                    held.awaiting_allocation =
                        crate::cluster::convert::pod_awaiting_allocation(pod);
                    // The device plugin adds an instance's runtime ids
                    // after bind; the allocation itself is unchanged.
                    held.mig_ready = crate::cluster::pod_annotations::pod_mig_ready(pod);
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
                if unaccounted.is_none() {
                    self.notice_mig_inconsistency(key);
                }
                self.settle_if_shown(key, &node);
                unaccounted
            }
            Err(_) if reserved => None,
            Err(e) => {
                let unreadable = unreadable_of(pod, e.to_string());
                let problem = unreadable.problem.clone();
                if let Some(held) = self
                    .pods
                    .get_mut(key)
                    .filter(|p| p.unreadable.as_deref() == Some(&unreadable))
                {
                    // The same unreadable annotations again (a status update).
                    held.bound = bound;
                    held.awaiting_allocation =
                        crate::cluster::convert::pod_awaiting_allocation(pod);
                    return Some(problem);
                }
                self.forget_allocation(key);
                self.hold_unreadable(key, pod, unreadable);
                Some(problem)
            }
        }
    }

    /// Holds a pod whose allocation annotations cannot be read: fail
    /// closed. The GPUs they name on their node (every GPU of it when
    /// they name none) take no new pod until the annotations can be read
    /// or the pod is gone; a notice tells the pod why.
    fn hold_unreadable(&mut self, key: &str, pod: &Pod, unreadable: super::Unreadable) {
        let problem = unreadable.problem.clone();
        let mut held = HeldPod::of(pod, None, None, Stage::Settled);
        held.unreadable = Some(Box::new(unreadable));
        let who = held.who();
        tracing::warn!(pod = %who, %problem, "allocation cannot be read: its GPUs take no new pod");
        self.hold(key, held);
        self.block_unreadable(key);
        self.notify(key, "AllocationUnreadable", format!(
            "{problem}; the GPUs it may hold take no new pod until the annotations can be read or the pod is gone"
        ));
    }

    /// Applies what an unreadable pod blocks on its node as the node is
    /// now (its GPUs may have registered after the pod was seen).
    pub(super) fn block_unreadable(&mut self, key: &str) {
        let Some(p) = self.pods.get(key) else { return };
        let Some(u) = p.unreadable.as_deref() else {
            return;
        };
        let Some(node) = self.state.node(&u.node) else {
            let why = format!("pod {}: {}; unknown node {:?}", p.who(), u.problem, u.node);
            if let Some(p) = self.pods.get_mut(key) {
                p.unaccounted = Some(why);
            }
            return;
        };
        let blocking = Allocation::unreadable(node, &u.uuids);
        self.state.remove(key);
        let unaccounted = self
            .state
            .apply(key, blocking.clone())
            .err()
            .map(|e| format!("pod {}: {e}", p.who()));
        if let Some(p) = self.pods.get_mut(key) {
            p.allocation = Some(blocking);
            p.unaccounted = unaccounted;
        }
    }

    pub(super) fn hold(&mut self, key: &str, pod: HeldPod) -> Option<String> {
        self.quotas
            .add_used(&pod.namespace, &pod.scope, &pod.amount);
        let unaccounted = pod.unaccounted.clone();
        self.held_names.insert(pod.who(), key.to_string());
        if let Some(old) = self.pods.insert(key.to_string(), pod) {
            self.forget_name(key, &old);
        }
        unaccounted
    }

    /// Takes a pod out of the ledger (its GPUs and quota are the caller's
    /// to release).
    pub(super) fn unhold(&mut self, key: &str) -> Option<HeldPod> {
        let old = self.pods.remove(key)?;
        self.forget_name(key, &old);
        Some(old)
    }

    /// Drops `old`'s name from the index unless another UID, or `key`
    /// under its current name, has it now.
    fn forget_name(&mut self, key: &str, old: &HeldPod) {
        let who = old.who();
        let renamed = self.pods.get(key).is_none_or(|now| now.who() != who);
        if renamed && self.held_names.get(&who).is_some_and(|k| k == key) {
            self.held_names.remove(&who);
        }
    }

    /// Whether the ledger holds pod `namespace/name` on `node` (not
    /// merely assumed there by `/filter` or `/prioritize`) and the pod is
    /// bound to no other node: a live holder of that node's lock as far as
    /// the watch has shown, by the same rule the API server is asked by
    /// (it exists, has not finished, is not bound elsewhere).
    pub fn holds_on(&self, namespace: &str, name: &str, node: &str) -> bool {
        self.held_names
            .get(&format!("{namespace}/{name}"))
            .and_then(|key| self.pods.get(key))
            .is_some_and(|p| {
                !matches!(p.stage, Stage::Assumed { .. })
                    && !p.bound_elsewhere
                    && p.allocation.as_ref().is_some_and(|a| a.node == node)
            })
    }

    /// Every node lock the watch shows expired while the view shows its
    /// holder bound to the node and still waiting for its device plugin:
    /// kept for it ([`crate::hami::NodeLock::takeover`]), so the node takes no other
    /// pod until the holder is admitted or gone. Sorted by node.
    pub fn locks_awaiting_allocation(
        &self,
        now: jiff::Timestamp,
        rules: LockRules,
    ) -> Vec<AwaitedLock> {
        let mut out: Vec<AwaitedLock> = self
            .seen_locks
            .all_locks(now, rules.expiry, true)
            .filter_map(|(node, lock)| {
                let h = lock.holder.as_ref()?;
                let key = self
                    .held_names
                    .get(&format!("{}/{}", h.namespace, h.name))?;
                let p = self.pods.get(key)?;
                let here = p.bound
                    && !p.bound_elsewhere
                    && p.allocation.as_ref().is_some_and(|a| a.node == node);
                let state = HolderState::BoundHere {
                    awaiting_allocation: p.awaiting_allocation,
                };
                let kept = here
                    && lock.takeover(&state, now, rules)
                        == Takeover::Kept(Kept::AwaitingAllocation);
                kept.then(|| AwaitedLock {
                    node: node.to_string(),
                    uid: key.clone(),
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    since: lock.time,
                })
            })
            .collect();
        out.sort_by(|a, b| a.node.cmp(&b.node));
        out
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
        let Some(old) = self.unhold(key) else {
            return;
        };
        self.state.remove(key);
        self.quotas
            .release_used(&old.namespace, &old.scope, &old.amount);
        self.victim_freed(key);
        if self.destination_count() > 0 {
            self.retry_destinations();
        }
    }

    /// The ledger's allocations that are not counted on any node, or that
    /// cannot be read (their GPUs are blocked), with why.
    pub fn unaccounted(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = self
            .pods
            .iter()
            .filter_map(|(uid, p)| {
                let why = p
                    .unaccounted
                    .as_deref()
                    .or(p.unreadable.as_deref().map(|u| u.problem.as_str()))?;
                Some((uid.as_str(), why))
            })
            .collect();
        out.sort();
        out
    }

    /// Queues a notice (and logs it) when the held pod's MIG grants are
    /// inconsistent with its node's GPUs: when its allocation is applied,
    /// and again when its node re-registers (say out of MIG mode).
    pub(super) fn notice_mig_inconsistency(&mut self, key: &str) {
        let Some(p) = self.pods.get(key) else { return };
        let Some(problem) = p
            .allocation
            .as_ref()
            .and_then(|a| mig_inconsistency(&self.state, a))
        else {
            return;
        };
        tracing::warn!(pod = %p.who(), %problem, "MIG instance inconsistent with its GPU");
        self.notify(key, "MigInconsistent", problem);
    }

    /// Queues a warning event with `reason` about held pod `key`.
    fn notify(&mut self, key: &str, reason: &'static str, problem: String) {
        let Some(p) = self.pods.get(key) else { return };
        if self.notices.len() >= super::NOTICES_MAX {
            self.notices.pop_front();
        }
        let notice = super::PodNotice {
            uid: key.to_string(),
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            reason,
            problem,
        };
        self.notices.push_back(notice);
    }

    /// Pods found with MIG instances inconsistent with their GPUs, or
    /// with allocations that cannot be read, since the last call, to be
    /// told (an event each).
    pub fn take_notices(&mut self) -> Vec<super::PodNotice> {
        self.notices.drain(..).collect()
    }

    /// Whether [`Self::take_notices`] has anything.
    pub fn has_notices(&self) -> bool {
        !self.notices.is_empty()
    }

    /// Every MIG instance a held pod's device plugin reports created, with
    /// the pod's node.
    pub fn held_mig_instances(
        &self,
    ) -> impl Iterator<Item = (&str, &crate::hami::mig::MigAllocation)> {
        // A pod whose allocation cannot be read has no node to name.
        self.pods
            .values()
            .filter_map(|p| p.allocation.as_ref().map(|a| (p, a)))
            .flat_map(|(p, a)| p.mig_ready.iter().map(move |m| (a.node.as_str(), m)))
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

/// What is known of `pod`'s allocation that cannot be read (`problem`):
/// its node (`hami.io/vgpu-node`, else `spec.nodeName`) and the device
/// uuids its list names.
fn unreadable_of(pod: &Pod, problem: String) -> super::Unreadable {
    let annotations = pod.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let node = get(crate::hami::keys::VGPU_NODE)
        .filter(|n| !n.is_empty())
        .or_else(|| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()))
        .unwrap_or_default()
        .to_string();
    let uuids = crate::cluster::pod_annotations::uuids_named(pod);
    super::Unreadable {
        problem,
        node,
        uuids,
    }
}

/// What HAMi v2.10 treats as inconsistent in a pod's grants
/// ([`crate::engine::DeviceGrant::mig_mismatch`]), in words. The engine counts it against
/// the GPU (`Node::is_inconsistent`), which then takes no new pod.
fn mig_inconsistency(state: &ClusterState, allocation: &Allocation) -> Option<String> {
    let node = state.node(&allocation.node)?;
    let problems: Vec<String> = allocation
        .containers
        .iter()
        .flatten()
        .filter_map(|grant| {
            let gpu = &node.gpus[node.position(&grant.uuid)?];
            let uuid = &grant.uuid;
            Some(match (grant.mig_mismatch(gpu)?, &grant.mig) {
                (MigMismatch::NoSuchPlacement, Some(m)) => format!(
                    "{uuid} is in MIG mode and the pod's instance {} at start {}, size {} is no placement of it",
                    m.profile, m.placement.start, m.placement.size
                ),
                (MigMismatch::NotMigMode, Some(m)) => format!(
                    "{uuid} is not in MIG mode (mode {:?}) and the pod holds MIG instance {} at start {} on it",
                    gpu.mode_or_default(),
                    m.profile,
                    m.placement.start
                ),
                _ => format!(
                    "{uuid} is in MIG mode and the pod has no hami.io/vgpu-mig-allocations entry for it"
                ),
            })
        })
        .collect();
    (!problems.is_empty()).then(|| {
        format!(
            "{}; the GPU takes no new pod until this pod is gone (HAMi v2.10 marks it unhealthy)",
            problems.join("; ")
        )
    })
}
