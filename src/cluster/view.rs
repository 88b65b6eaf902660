//! What gpugate knows of the cluster: GPU nodes, the allocation ledger keyed
//! by pod UID, namespace labels and GPU quotas. It is fed the same way from
//! a snapshot file (standalone mode) and from the API server's watch events,
//! one object at a time, so both modes share every rule:
//!
//! - a pod holds GPUs while it carries `hami.io/vgpu-node` and
//!   `hami.io/vgpu-devices-allocated` and has not finished; terminating pods
//!   keep them until deleted;
//! - an allocation that names an unknown node or GPU, or cannot be read, is
//!   kept aside as *unaccounted* (reported, counted against its namespace's
//!   quota, and applied as soon as its node registers), never dropped;
//! - a node whose GPU inventory cannot be read stays known with no GPUs, so
//!   GPU pods are told why it cannot hold them.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Namespace, Node as K8sNode, Pod, ResourceQuota};

use crate::config::NvidiaConfig;
use crate::engine::gang::{GangKey, gang_label};
use crate::engine::quantity::parse_whole;
use crate::engine::{Allocation, ClusterState, NamespaceQuota, Node, QuotaAmount, QuotaLimits};

use super::convert::{node_from_k8s, pod_allocation, pod_finished, pod_name};

/// A pod the ledger knows to hold GPUs (applied or unaccounted).
#[derive(Debug, Clone, PartialEq)]
struct HeldPod {
    name: String,
    /// `spec.priority`, for choosing preemption victims.
    priority: i32,
    namespace: String,
    amount: QuotaAmount,
    /// Why the allocation is not in the engine's state, when it is not.
    unaccounted: Option<String>,
    allocation: Option<Allocation>,
    reservation: Reservation,
}

/// Where a bind of the pod stands. A reserved allocation is gpugate's own
/// choice, made before the pod carries it: watch events that do not show it
/// yet (the pod as it was before the patch, a re-list without it) must not
/// drop it, or a second bind could take the same GPUs meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Reservation {
    /// Read from the pod's annotations: the pod is the truth.
    #[default]
    Settled,
    /// Chosen by a bind that is still writing to the API server.
    InFlight,
    /// Written and bound; held until the watch shows the pod carrying it.
    Bound,
    /// The node `/prioritize` ranked first, held until the pod's bind
    /// arrives (kube-scheduler has chosen a node, and the next pod must not
    /// be given the same GPUs meanwhile) or until the time (Unix ms).
    Assumed { until_ms: i64 },
}

/// The cluster as gpugate sees it. Not thread-safe by itself; see
/// [`super::SharedCluster`].
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    state: ClusterState,
    pods: HashMap<String, HeldPod>,
    node_problems: BTreeMap<String, Vec<String>>,
    /// Nodes without a GPU inventory annotation (CPU nodes): known, quiet.
    plain_nodes: std::collections::HashSet<String>,
    /// A digest of the annotations each node was last registered from, so
    /// that node updates that do not touch them (status, heartbeats) cost
    /// nothing. A digest, not the text: the inventory and pair-score JSON
    /// of 5,000 8-GPU nodes is 13 MB.
    node_sources: HashMap<String, SourcesDigest>,
    namespace_labels: HashMap<String, BTreeMap<String, String>>,
    /// `spec.hard` entries named `limits.*`, by namespace and quota name.
    quotas: HashMap<String, BTreeMap<String, BTreeMap<String, String>>>,
    quota_used: HashMap<String, QuotaAmount>,
    /// Unfinished pods of gang groups, by group and UID (trimmed copies).
    gangs: HashMap<GangKey, BTreeMap<String, Pod>>,
    member_gang: HashMap<String, GangKey>,
    /// Capacity held for members of groups being placed, by member UID:
    /// the group and when the hold ends (Unix ms).
    gang_holds: HashMap<String, (GangKey, i64)>,
    /// Pods whose allocation gpugate reserved and the watch does not show
    /// yet (bind in flight, or bound a moment ago), by UID: their node.
    unsettled: HashMap<String, String>,
    /// Each node's `hami.io/mutex.lock` value and resourceVersion as the
    /// watch last showed them, so that bind waits for a lock without
    /// polling the API server and `/filter` can steer around held locks.
    node_locks: HashMap<String, SeenLock>,
}

/// A node's lock annotation and resourceVersion, as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenLock {
    /// The `hami.io/mutex.lock` value, when the node carries one.
    pub value: Option<String>,
    pub resource_version: Option<String>,
}

/// Counts for metrics and `/readyz` detail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ViewCounts {
    pub nodes: usize,
    pub gpus: usize,
    pub allocations: usize,
    pub unaccounted: usize,
    pub nodes_with_problems: usize,
}

impl ClusterView {
    pub fn new() -> Self {
        Self::default()
    }

    /// The engine's state, for filter, prioritize and bind.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// The engine's state, without the rest.
    pub fn into_state(self) -> ClusterState {
        self.state
    }

    /// Registers or re-registers a node. Returns the problems found, which
    /// are also kept for [`ClusterView::node_problems`].
    pub fn upsert_node(&mut self, node: &K8sNode) -> Vec<String> {
        let name = node.metadata.name.clone().unwrap_or_default();
        if self.node_unchanged(node) {
            return self.node_problems.get(&name).cloned().unwrap_or_default();
        }
        self.node_sources.insert(name.clone(), node_sources(node));
        self.plain_nodes.remove(&name);
        let (inventory, problems) = match node_from_k8s(node) {
            Ok((n, warnings)) => (n, warnings.iter().map(ToString::to_string).collect()),
            // Known but without usable GPUs: every GPU pod is told
            // "node unregistered" for it. A node that never registered GPUs
            // is a plain CPU node, not a problem.
            Err(e @ crate::cluster::NodeError::Unregistered { .. }) => {
                tracing::debug!(node = %name, "{e}");
                self.plain_nodes.insert(name.clone());
                (Node::new(name.clone(), Vec::new()), vec![e.to_string()])
            }
            Err(e) => (Node::new(name.clone(), Vec::new()), vec![e.to_string()]),
        };
        let stale = self.state.upsert_node(inventory);
        self.refresh_pods_on(&name, &stale);
        if problems.is_empty() || self.plain_nodes.contains(&name) {
            self.node_problems.remove(&name);
        } else {
            self.node_problems.insert(name, problems.clone());
        }
        problems
    }

    /// Whether the node is known with exactly these GPU annotations (an
    /// update that [`ClusterView::upsert_node`] would ignore).
    pub fn node_unchanged(&self, node: &K8sNode) -> bool {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        self.state.node(name).is_some() && self.node_sources.get(name) == Some(&node_sources(node))
    }

    /// Records the node's lock annotation and resourceVersion (every node
    /// event, those [`ClusterView::upsert_node`] ignores included).
    pub fn note_node_lock(&mut self, node: &K8sNode) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        let seen = SeenLock {
            value: node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::hami::keys::NODE_LOCK))
                .cloned(),
            resource_version: node.metadata.resource_version.clone(),
        };
        match self.node_locks.get_mut(name) {
            Some(old) => *old = seen,
            None => {
                self.node_locks.insert(name.to_string(), seen);
            }
        }
    }

    /// [`ClusterView::note_node_lock`] for a node the watch has shown: a
    /// write's answer keeps the copy current until the watch catches up.
    pub fn note_node_lock_if_watched(&mut self, node: &K8sNode) {
        let known = node
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| self.node_locks.contains_key(n));
        if known {
            self.note_node_lock(node);
        }
    }

    /// The node's lock annotation and resourceVersion as the watch last
    /// showed them; `None` for a node never seen (standalone mode).
    pub fn seen_lock(&self, node: &str) -> Option<&SeenLock> {
        self.node_locks.get(node)
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
        let value = self.node_locks.get(node)?.value.as_deref()?;
        let lock = crate::hami::node_lock::decode_node_lock(value).ok()?;
        if lock.is_expired(now, expiry) {
            return None;
        }
        Some(match &lock.holder {
            Some(h) => format!("hami.io/mutex.lock held by pod {}/{}", h.namespace, h.name),
            None => "hami.io/mutex.lock held".to_string(),
        })
    }

    /// Whether the node is known and has no GPU inventory annotation.
    pub fn is_plain_node(&self, name: &str) -> bool {
        self.plain_nodes.contains(name)
    }

    /// Forgets a deleted node. Allocations on it stay in the ledger and count
    /// again if it comes back.
    pub fn delete_node(&mut self, name: &str) {
        self.state.remove_node(name);
        self.node_problems.remove(name);
        self.plain_nodes.remove(name);
        self.node_sources.remove(name);
        self.node_locks.remove(name);
        for p in self.pods.values_mut() {
            if p.allocation.as_ref().is_some_and(|a| a.node == name) {
                p.unaccounted = Some(format!("pod {}: node {name} was deleted", p.name));
            }
        }
    }

    /// Records a pod under `key` (its UID). Returns the problem when its
    /// allocation cannot be counted on a node.
    pub fn upsert_pod(&mut self, key: &str, pod: &Pod) -> Option<String> {
        self.track_gang_member(key, pod);
        let name = pod_name(pod);
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
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
                .is_some_and(|p| p.reservation != Reservation::Settled);
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
                    // Status updates of a running pod: nothing changes. A
                    // reservation of a bound pod is now carried by the pod.
                    if !reserved {
                        held.reservation = Reservation::Settled;
                        self.unsettled.remove(key);
                    }
                    return held.unaccounted.clone();
                }
                if reserved {
                    // The pod as it was before bind wrote its annotations.
                    return None;
                }
                self.forget_allocation(key);
                let amount = QuotaAmount::of_allocation(&allocation);
                let unaccounted = self
                    .state
                    .apply(key, allocation.clone())
                    .err()
                    .map(|e| format!("pod {name}: {e}"));
                self.hold(
                    key,
                    HeldPod {
                        name,
                        priority: pod_priority(pod),
                        namespace,
                        amount,
                        unaccounted,
                        allocation: Some(allocation),
                        reservation: Reservation::Settled,
                    },
                )
            }
            Err(_) if reserved => None,
            Err(e) => {
                self.forget_allocation(key);
                // Unreadable: nothing to place on a node, but the pod is
                // reported and its namespace is not told it has room it may
                // not have.
                self.hold(
                    key,
                    HeldPod {
                        name,
                        priority: pod_priority(pod),
                        namespace,
                        amount: QuotaAmount::default(),
                        unaccounted: Some(e.to_string()),
                        allocation: None,
                        reservation: Reservation::Settled,
                    },
                )
            }
        }
    }

    fn hold(&mut self, key: &str, pod: HeldPod) -> Option<String> {
        let used = self.quota_used.entry(pod.namespace.clone()).or_default();
        *used = used.saturating_add(pod.amount);
        let unaccounted = pod.unaccounted.clone();
        self.pods.insert(key.to_string(), pod);
        unaccounted
    }

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
    ) -> Result<(), crate::engine::ApplyError> {
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
    ) -> Result<(), crate::engine::ApplyError> {
        let amount = QuotaAmount::of_allocation(&allocation);
        let old = self.pods.remove(key);
        if let Some(old) = &old {
            self.state.remove(key);
            self.release_quota(old);
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
        self.hold(
            key,
            HeldPod {
                name: pod_name(pod),
                priority: pod_priority(pod),
                namespace: pod
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".to_string()),
                amount,
                unaccounted: None,
                allocation: Some(allocation),
                reservation,
            },
        );
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

    /// A complete list lacks the pod: it was deleted while the watch was
    /// down, unless a bind of it is in flight (the list may predate it; the
    /// bind itself fails and releases if the pod is gone).
    pub fn pod_missing_from_list(&mut self, key: &str) {
        if !self.is_binding(key) {
            self.delete_pod(key);
        }
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

    /// UIDs of every pod the view keeps: those holding GPUs and unbound
    /// gang members.
    pub fn tracked_pods(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.pods.keys().cloned().collect();
        keys.extend(
            self.member_gang
                .keys()
                .filter(|k| !self.pods.contains_key(*k))
                .cloned(),
        );
        keys
    }

    /// The holds of `group`, taken out of the state (to be put back with
    /// [`ClusterView::restore_gang_holds`] if what replaces them fails).
    pub fn take_gang_holds(&mut self, group: &GangKey) -> Vec<(String, Allocation, i64)> {
        let keys: Vec<(String, i64)> = self
            .gang_holds
            .iter()
            .filter(|(_, (g, _))| g == group)
            .map(|(k, (_, until))| (k.clone(), *until))
            .collect();
        let mut out = Vec::new();
        for (k, until) in keys {
            self.gang_holds.remove(&k);
            if let Some(a) = self.state.remove(&gang_hold_key(&k)) {
                out.push((k, a, until));
            }
        }
        out
    }

    /// Puts back holds taken with [`ClusterView::take_gang_holds`] (those
    /// that still fit).
    pub fn restore_gang_holds(&mut self, group: &GangKey, holds: Vec<(String, Allocation, i64)>) {
        for (k, a, until) in holds {
            let _ = self.hold_for_gang(&k, group, a, until);
        }
    }

    /// The pod was listed without an allocation (a re-list keeps only the
    /// UIDs of such pods), or is missing from a list (which may lag behind
    /// a pod just created): frees what it held, unless gpugate reserved it.
    pub fn pod_holds_nothing(&mut self, key: &str) {
        // Gang members are listed whole, so this pod is in no group.
        self.untrack_gang_member(key);
        if !self
            .pods
            .get(key)
            .is_some_and(|p| p.reservation != Reservation::Settled)
        {
            self.forget_allocation(key);
        }
    }

    /// The priority of a held pod (0 when unknown).
    pub fn held_priority(&self, key: &str) -> Option<i32> {
        self.pods.get(key).map(|p| p.priority)
    }

    fn release_quota(&mut self, old: &HeldPod) {
        if let Some(used) = self.quota_used.get_mut(&old.namespace) {
            *used = used.saturating_sub(old.amount);
            if used.is_zero() {
                self.quota_used.remove(&old.namespace);
            }
        }
    }

    /// Forgets a deleted pod: its GPUs, quota, group membership and the
    /// capacity held for it.
    pub fn delete_pod(&mut self, key: &str) {
        self.forget_allocation(key);
        self.untrack_gang_member(key);
        self.release_gang_hold(key);
    }

    /// Frees what a pod holds (GPUs and quota); the pod itself may live on.
    pub fn forget_allocation(&mut self, key: &str) {
        self.unsettled.remove(key);
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        self.state.remove(key);
        self.release_quota(&old);
    }

    /// After `node` (re-)registered: applies held allocations on it that
    /// could not be applied before, and marks those that name GPUs it no
    /// longer has (`stale`; their usage on the GPUs that remain still counts).
    fn refresh_pods_on(&mut self, node: &str, stale: &[String]) {
        let mut on_node: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.allocation.as_ref().is_some_and(|a| a.node == node))
            .map(|(uid, _)| uid.clone())
            .collect();
        on_node.sort();
        for uid in on_node {
            let applied = self.state.allocation(&uid).is_some();
            let Some(p) = self.pods.get_mut(&uid) else {
                continue;
            };
            p.unaccounted = if stale.contains(&uid) {
                Some(format!(
                    "pod {}: holds a GPU that node {node} no longer reports",
                    p.name
                ))
            } else if applied {
                None
            } else {
                match p.allocation.clone() {
                    Some(a) => self
                        .state
                        .apply(&uid, a)
                        .err()
                        .map(|e| format!("pod {}: {e}", p.name)),
                    None => p.unaccounted.take(),
                }
            };
        }
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

    /// Nodes whose inventory, cordon list or pair scores could not be read.
    pub fn node_problems(&self) -> &BTreeMap<String, Vec<String>> {
        &self.node_problems
    }

    pub fn upsert_namespace(&mut self, ns: &Namespace) {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let labels = ns.metadata.labels.clone().unwrap_or_default();
        self.namespace_labels.insert(name, labels);
    }

    pub fn delete_namespace(&mut self, name: &str) {
        self.namespace_labels.remove(name);
    }

    /// Names of every namespace the view knows.
    pub fn namespace_names(&self) -> Vec<String> {
        self.namespace_labels.keys().cloned().collect()
    }

    /// `namespace/name` of every ResourceQuota the view knows.
    pub fn quota_keys(&self) -> Vec<String> {
        self.quotas
            .iter()
            .flat_map(|(ns, q)| q.keys().map(move |name| format!("{ns}/{name}")))
            .collect()
    }

    /// A namespace's labels; `None` when the namespace is not known (not
    /// watched, or not in the snapshot).
    pub fn namespace_labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.namespace_labels.get(name)
    }

    pub fn upsert_quota(&mut self, quota: &ResourceQuota) {
        let ns = quota
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let name = quota.metadata.name.clone().unwrap_or_default();
        let hard: BTreeMap<String, String> = quota
            .spec
            .as_ref()
            .and_then(|s| s.hard.as_ref())
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("limits."))
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        self.quotas.entry(ns).or_default().insert(name, hard);
    }

    pub fn delete_quota(&mut self, namespace: &str, name: &str) {
        if let Some(q) = self.quotas.get_mut(namespace) {
            q.remove(name);
            if q.is_empty() {
                self.quotas.remove(namespace);
            }
        }
    }

    /// The namespace's GPU limits for the resources named `memory` and
    /// `cores` (`nvidia.com/gpumem`, `nvidia.com/gpucores`), tightest over its
    /// quotas, with a message for each value that is not a whole number
    /// (such a value is ignored, as the quota controller cannot count
    /// against it either).
    pub fn quota_limits(
        &self,
        namespace: &str,
        memory: &str,
        cores: &str,
    ) -> (QuotaLimits, Vec<String>) {
        let mut limits = QuotaLimits::default();
        let mut problems = Vec::new();
        let Some(quotas) = self.quotas.get(namespace) else {
            return (limits, problems);
        };
        let mem_key = format!("limits.{memory}");
        let cores_key = format!("limits.{cores}");
        for (name, hard) in quotas {
            let mut read = |key: &str| match hard.get(key).map(|v| (v, parse_whole(v))) {
                None => None,
                Some((_, Ok(n))) => Some(n),
                Some((v, Err(e))) => {
                    problems.push(format!(
                        "ResourceQuota {namespace}/{name}: {key}={v:?} is ignored: {e}"
                    ));
                    None
                }
            };
            let q = QuotaLimits {
                mem_mib: read(&mem_key),
                cores: read(&cores_key),
            };
            limits = limits.tightest(q);
        }
        (limits, problems)
    }

    /// The namespace's quota under the config's resource names and
    /// `memoryFactor`, with a message for each quota value that is ignored.
    pub fn quota(&self, namespace: &str, nv: &NvidiaConfig) -> (NamespaceQuota, Vec<String>) {
        let (limits, problems) =
            self.quota_limits(namespace, &nv.resource_memory_name, &nv.resource_core_name);
        let quota = NamespaceQuota {
            limits,
            used: self.quota_used(namespace),
            memory_factor: u64::from(nv.memory_factor),
        };
        (quota, problems)
    }

    /// GPU memory and cores held by the namespace's pods.
    pub fn quota_used(&self, namespace: &str) -> QuotaAmount {
        self.quota_used.get(namespace).copied().unwrap_or_default()
    }

    pub fn counts(&self) -> ViewCounts {
        ViewCounts {
            nodes: self.state.nodes().count(),
            gpus: self.state.nodes().map(|n| n.gpus.len()).sum(),
            allocations: self.pods.len(),
            unaccounted: self
                .pods
                .values()
                .filter(|p| p.unaccounted.is_some())
                .count(),
            nodes_with_problems: self.node_problems.len(),
        }
    }

    /// UIDs of every pod the ledger holds GPUs for.
    pub fn held_pods(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// The allocation held under `key`, applied or not.
    pub fn held_allocation(&self, key: &str) -> Option<&Allocation> {
        self.pods.get(key).and_then(|p| p.allocation.as_ref())
    }

    /// Keeps the pod as a member of its gang group while it is unfinished
    /// and labelled with a readable group (see [`crate::engine::gang`]).
    fn track_gang_member(&mut self, key: &str, pod: &Pod) {
        let finished = pod_finished(pod);
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let label = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| gang_label(namespace, l).ok().flatten());
        match label.filter(|_| !finished) {
            Some(label) => {
                if self.member_gang.get(key) != Some(&label.key) {
                    self.untrack_gang_member(key);
                }
                let mut slim = pod.clone();
                slim.metadata.managed_fields = None;
                slim.status = None;
                self.member_gang.insert(key.to_string(), label.key.clone());
                self.gangs
                    .entry(label.key)
                    .or_default()
                    .insert(key.to_string(), slim);
            }
            None => self.untrack_gang_member(key),
        }
    }

    fn untrack_gang_member(&mut self, key: &str) {
        if let Some(group) = self.member_gang.remove(key)
            && let Some(members) = self.gangs.get_mut(&group)
        {
            members.remove(key);
            if members.is_empty() {
                self.gangs.remove(&group);
            }
        }
    }

    /// The known unfinished members of a group, by UID.
    pub fn gang_members(&self, group: &GangKey) -> Option<&BTreeMap<String, Pod>> {
        self.gangs.get(group)
    }

    /// Holds capacity for a member that is not bound yet, until `until_ms`
    /// (Unix ms). Other pods see it as used; members of the group do not.
    pub fn hold_for_gang(
        &mut self,
        key: &str,
        group: &GangKey,
        allocation: Allocation,
        until_ms: i64,
    ) -> Result<(), crate::engine::ApplyError> {
        self.release_gang_hold(key);
        self.state.apply(&gang_hold_key(key), allocation)?;
        self.gang_holds
            .insert(key.to_string(), (group.clone(), until_ms));
        Ok(())
    }

    /// Drops the capacity held for a member (it is being bound, or gone).
    pub fn release_gang_hold(&mut self, key: &str) {
        if self.gang_holds.remove(key).is_some() {
            self.state.remove(&gang_hold_key(key));
        }
    }

    /// The engine state without the holds of `group`: what its members are
    /// judged on.
    pub fn state_without_gang_holds(&self, group: &GangKey) -> ClusterState {
        let mut state = self.state.clone();
        for (k, (g, _)) in &self.gang_holds {
            if g == group {
                state.remove(&gang_hold_key(k));
            }
        }
        state
    }

    /// Whether `group` has holds.
    pub fn has_gang_holds(&self, group: &GangKey) -> bool {
        self.gang_holds.values().any(|(g, _)| g == group)
    }

    /// Drops holds that ended at or before `now_ms`; returns how many.
    pub fn expire_gang_holds(&mut self, now_ms: i64) -> usize {
        let ended: Vec<String> = self
            .gang_holds
            .iter()
            .filter(|(_, (_, until))| *until <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &ended {
            self.release_gang_hold(k);
        }
        ended.len()
    }

    /// Number of members capacity is held for.
    pub fn gang_hold_count(&self) -> usize {
        self.gang_holds.len()
    }

    /// Namespaces with at least one ResourceQuota (with or without GPU
    /// limits), in no particular order.
    pub fn quota_namespaces(&self) -> impl Iterator<Item = &str> {
        self.quotas.keys().map(String::as_str)
    }

    /// Namespaces whose held pods count against quota (see
    /// [`ClusterView::quota_used`]; the amount may be zero), in no
    /// particular order.
    pub fn quota_used_namespaces(&self) -> impl Iterator<Item = &str> {
        self.quota_used.keys().map(String::as_str)
    }

    /// `(namespace, pod name, allocation)` of every held pod whose
    /// allocation could be read, applied or not, in no particular order.
    /// The pod name is without its namespace.
    pub fn held_pod_allocations(&self) -> impl Iterator<Item = (&str, &str, &Allocation)> {
        self.pods.values().filter_map(|p| {
            let name = p
                .name
                .strip_prefix(p.namespace.as_str())
                .and_then(|n| n.strip_prefix('/'))
                .unwrap_or(&p.name);
            p.allocation
                .as_ref()
                .map(|a| (p.namespace.as_str(), name, a))
        })
    }
}

/// The engine-state key of a gang hold (never a pod UID).
fn gang_hold_key(key: &str) -> String {
    format!("gang-hold/{key}")
}

/// SHA-256 of the annotations a node's GPU view is read from.
type SourcesDigest = [u8; 32];

/// The digest of the annotations a node's GPU view is read from: each one
/// absent, or present with its length and text.
fn node_sources(node: &K8sNode) -> SourcesDigest {
    use crate::hami::keys;
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for key in [
        keys::NODE_NVIDIA_REGISTER,
        keys::NODE_NVIDIA_SCORE,
        keys::DEVICE_CORDON,
    ] {
        match node.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
            None => digest.update(&[0]),
            Some(v) => {
                digest.update(&[1]);
                digest.update(&(v.len() as u64).to_le_bytes());
                digest.update(v.as_bytes());
            }
        }
    }
    let mut out = [0; 32];
    out.copy_from_slice(digest.finish().as_ref());
    out
}

fn pod_priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hami::keys;
    use k8s_openapi::api::core::v1::ResourceQuotaSpec;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    const REGISTER: &str = r#"[{"id":"GPU-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true},{"id":"GPU-1","index":1,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}]"#;

    fn node(name: &str, register: &str) -> K8sNode {
        let mut n = K8sNode::default();
        n.metadata.name = Some(name.into());
        n.metadata.annotations =
            Some([(keys::NODE_NVIDIA_REGISTER.to_string(), register.to_string())].into());
        n
    }

    fn pod(ns: &str, name: &str, node: &str, devices: &str, phase: &str) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": phase},
        }))
        .unwrap();
        p.metadata.annotations = Some(
            [
                (keys::VGPU_NODE.to_string(), node.to_string()),
                (
                    keys::VGPU_DEVICES_ALLOCATED.to_string(),
                    devices.to_string(),
                ),
            ]
            .into(),
        );
        p
    }

    fn quota(ns: &str, name: &str, hard: &[(&str, &str)]) -> ResourceQuota {
        let mut q = ResourceQuota::default();
        q.metadata.name = Some(name.into());
        q.metadata.namespace = Some(ns.into());
        q.spec = Some(ResourceQuotaSpec {
            hard: Some(
                hard.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            ),
            ..Default::default()
        });
        q
    }

    fn used_mem(view: &ClusterView, node: &str, gpu: usize) -> u64 {
        view.state().node(node).unwrap().usage[gpu].mem_mib
    }

    #[test]
    fn pods_take_and_free_gpus_and_quota() {
        let mut v = ClusterView::new();
        assert!(v.upsert_node(&node("n1", REGISTER)).is_empty());
        let p = pod("team", "a", "n1", "GPU-1,NVIDIA,4000,30:;", "Running");
        assert_eq!(v.upsert_pod("uid-a", &p), None);
        assert_eq!(used_mem(&v, "n1", 1), 4000);
        assert_eq!(
            v.quota_used("team"),
            QuotaAmount {
                mem_mib: 4000,
                cores: 30
            }
        );
        // A status update changes nothing; finishing frees everything.
        assert_eq!(v.upsert_pod("uid-a", &p), None);
        assert_eq!(used_mem(&v, "n1", 1), 4000);
        let done = pod("team", "a", "n1", "GPU-1,NVIDIA,4000,30:;", "Succeeded");
        v.upsert_pod("uid-a", &done);
        assert_eq!(used_mem(&v, "n1", 1), 0);
        assert_eq!(v.quota_used("team"), QuotaAmount::default());
        assert_eq!(v.counts().allocations, 0);
    }

    #[test]
    fn terminating_pods_keep_their_gpus_until_deleted() {
        let mut v = ClusterView::new();
        v.upsert_node(&node("n1", REGISTER));
        let mut p = pod("team", "a", "n1", "GPU-0,NVIDIA,1000,0:;", "Running");
        v.upsert_pod("uid-a", &p);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        v.upsert_pod("uid-a", &p);
        assert_eq!(used_mem(&v, "n1", 0), 1000);
        v.delete_pod("uid-a");
        assert_eq!(used_mem(&v, "n1", 0), 0);
    }

    #[test]
    fn allocations_on_unknown_nodes_wait_and_count_when_the_node_registers() {
        let mut v = ClusterView::new();
        let p = pod("team", "a", "late", "GPU-0,NVIDIA,2000,10:;", "Running");
        let why = v.upsert_pod("uid-a", &p).unwrap();
        assert!(why.contains("unknown node late"), "{why}");
        assert_eq!(v.unaccounted().len(), 1);
        // Quota still counts what the pod holds.
        assert_eq!(v.quota_used("team").mem_mib, 2000);
        v.upsert_node(&node("late", REGISTER));
        assert!(v.unaccounted().is_empty());
        assert_eq!(used_mem(&v, "late", 0), 2000);
    }

    #[test]
    fn a_node_that_loses_a_gpu_reports_the_pods_on_it() {
        let mut v = ClusterView::new();
        v.upsert_node(&node("n1", REGISTER));
        v.upsert_pod(
            "uid-a",
            &pod("team", "a", "n1", "GPU-1,NVIDIA,2000,10:;", "Running"),
        );
        let one_gpu = r#"[{"id":"GPU-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}]"#;
        v.upsert_node(&node("n1", one_gpu));
        let unaccounted = v.unaccounted();
        assert_eq!(unaccounted.len(), 1);
        assert!(unaccounted[0].1.contains("no longer reports"));
        // Back again: counted again.
        v.upsert_node(&node("n1", REGISTER));
        assert_eq!(used_mem(&v, "n1", 1), 2000);
    }

    #[test]
    fn unreadable_allocations_are_reported_not_dropped() {
        let mut v = ClusterView::new();
        v.upsert_node(&node("n1", REGISTER));
        let why = v
            .upsert_pod("uid-a", &pod("team", "a", "n1", "garbage", "Running"))
            .unwrap();
        assert!(why.contains("team/a"), "{why}");
        assert_eq!(v.counts().unaccounted, 1);
        v.delete_pod("uid-a");
        assert_eq!(v.counts().unaccounted, 0);
    }

    #[test]
    fn node_updates_that_keep_the_gpu_annotations_are_unchanged() {
        let mut v = ClusterView::new();
        let n = node("n1", REGISTER);
        assert!(!v.node_unchanged(&n));
        v.upsert_node(&n);
        let mut status_only = n.clone();
        status_only.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert!(v.node_unchanged(&status_only));
        let mut cordoned = n.clone();
        cordoned
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(keys::DEVICE_CORDON.to_string(), String::new());
        assert!(
            !v.node_unchanged(&cordoned),
            "an empty annotation is not none"
        );
        let one_gpu = REGISTER.split("},{").next().unwrap().to_string() + "}]";
        assert!(!v.node_unchanged(&node("n1", &one_gpu)));
        v.delete_node("n1");
        assert!(!v.node_unchanged(&n));
    }

    #[test]
    fn garbled_inventory_keeps_the_node_known_without_gpus() {
        let mut v = ClusterView::new();
        let problems = v.upsert_node(&node("n1", "not a register"));
        assert_eq!(problems.len(), 1);
        assert!(v.state().node("n1").unwrap().gpus.is_empty());
        assert!(v.node_problems().contains_key("n1"));
        v.upsert_node(&node("n1", REGISTER));
        assert!(v.node_problems().is_empty());
        v.delete_node("n1");
        assert!(v.state().node("n1").is_none());
    }

    #[test]
    fn pods_on_a_deleted_node_are_reported_until_it_returns() {
        let mut v = ClusterView::new();
        v.upsert_node(&node("n1", REGISTER));
        v.upsert_pod(
            "uid-a",
            &pod("team", "a", "n1", "GPU-0,NVIDIA,2000,10:;", "Running"),
        );
        v.delete_node("n1");
        assert!(v.unaccounted()[0].1.contains("was deleted"));
        v.upsert_node(&node("n1", REGISTER));
        assert!(v.unaccounted().is_empty());
        assert_eq!(used_mem(&v, "n1", 0), 2000);
    }

    #[test]
    fn quota_limits_are_the_tightest_and_bad_values_are_named() {
        let mut v = ClusterView::new();
        v.upsert_quota(&quota(
            "team",
            "big",
            &[
                ("limits.nvidia.com/gpumem", "40000"),
                ("limits.nvidia.com/gpucores", "abc"),
                ("requests.nvidia.com/gpumem", "1"),
            ],
        ));
        v.upsert_quota(&quota(
            "team",
            "small",
            &[("limits.nvidia.com/gpumem", "20000")],
        ));
        let (limits, problems) = v.quota_limits("team", "nvidia.com/gpumem", "nvidia.com/gpucores");
        assert_eq!(
            limits,
            QuotaLimits {
                mem_mib: Some(20000),
                cores: None
            }
        );
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("team/big") && problems[0].contains("\"abc\""));
        v.delete_quota("team", "small");
        v.delete_quota("team", "big");
        assert!(
            v.quota_limits("team", "nvidia.com/gpumem", "nvidia.com/gpucores")
                .0
                .is_empty()
        );
    }

    #[test]
    fn a_reservation_survives_events_that_do_not_show_it_yet() {
        let mut view = ClusterView::new();
        view.upsert_node(&node("n1", REGISTER));
        let mut p = pod("ns", "p", "n1", "GPU-0,NVIDIA,1000,10:;", "Pending");
        let allocation = crate::cluster::pod_allocation(&p).unwrap().unwrap();
        let before = p.clone();
        p.metadata.annotations = None;
        view.reserve("uid-p", &p, allocation.clone()).unwrap();
        // The pod as it was before the patch, and a re-list without it.
        assert_eq!(view.upsert_pod("uid-p", &p), None);
        view.pod_holds_nothing("uid-p");
        view.pod_missing_from_list("uid-p");
        assert_eq!(view.held_allocation("uid-p"), Some(&allocation));
        // Bound: still held until the pod shows it, then settled.
        view.mark_bound("uid-p");
        view.pod_missing_from_list("uid-p");
        assert!(view.held_allocation("uid-p").is_none());
        view.reserve("uid-p", &p, allocation.clone()).unwrap();
        view.mark_bound("uid-p");
        view.upsert_pod("uid-p", &p);
        assert_eq!(view.held_allocation("uid-p"), Some(&allocation));
        // The pod shows the annotations, unbound: still ours. Bound: settled,
        // and from then on the pod is the truth.
        view.upsert_pod("uid-p", &before);
        assert!(view.is_reserved("uid-p"));
        let mut bound_before = before.clone();
        bound_before.spec.as_mut().unwrap().node_name = Some("n1".into());
        view.upsert_pod("uid-p", &bound_before);
        assert!(!view.is_reserved("uid-p"));
        assert_eq!(view.held_allocation("uid-p"), Some(&allocation));
        view.upsert_pod("uid-p", &p);
        assert!(
            view.held_allocation("uid-p").is_none(),
            "settled: the pod is the truth"
        );
        // A failed bind releases only an in-flight reservation.
        view.reserve("uid-p", &p, allocation.clone()).unwrap();
        assert!(view.release_reservation("uid-p"));
        assert!(!view.release_reservation("uid-p"));
        assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 0);
        // Bound, then the pod fails before the watch showed it bound: freed.
        view.reserve("uid-p", &p, allocation.clone()).unwrap();
        view.mark_bound("uid-p");
        let mut failed = before.clone();
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        view.upsert_pod("uid-p", &failed);
        assert!(view.held_allocation("uid-p").is_none());
        // In flight, and the pod shows up bound: the pod is the truth.
        view.reserve("uid-p", &p, allocation.clone()).unwrap();
        let mut bound = p.clone();
        bound.spec.as_mut().unwrap().node_name = Some("n1".into());
        view.upsert_pod("uid-p", &bound);
        assert!(view.held_allocation("uid-p").is_none());
        assert!(!view.is_reserved("uid-p"));
    }

    #[test]
    fn assumed_allocations_count_until_a_bind_replaces_them_or_they_expire() {
        let mut view = ClusterView::new();
        view.upsert_node(&node("n1", REGISTER));
        view.upsert_node(&node("n2", REGISTER));
        let mut p = pod("ns", "p", "n1", "GPU-0,NVIDIA,1000,10:;", "Pending");
        let on_n1 = crate::cluster::pod_allocation(&p).unwrap().unwrap();
        p.metadata.annotations = None;
        let none = HashMap::new();
        let now = jiff::Timestamp::now();
        let expiry = std::time::Duration::from_secs(300);
        assert_eq!(view.node_busy("n1", &none, now, expiry), None);

        assert!(view.assume("uid-p", &p, on_n1.clone(), 1_000));
        assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 1);
        let unsettled = view.unsettled_binds();
        assert_eq!(unsettled.get("n1"), Some(&1));
        assert!(view.node_busy("n1", &unsettled, now, expiry).is_some());
        assert_eq!(view.node_busy("n2", &unsettled, now, expiry), None);
        // Only a pod that holds nothing is assumed; watch events of the
        // unbound pod keep it.
        assert!(!view.assume("uid-p", &p, on_n1.clone(), 2_000));
        view.upsert_pod("uid-p", &p);
        view.pod_holds_nothing("uid-p");
        assert!(view.is_assumed("uid-p"));
        assert!(view.has_assumed());
        // Not yet due; then due: dropped, nothing left.
        assert_eq!(view.expire_assumed(999), 0);
        assert_eq!(view.expire_assumed(1_000), 1);
        assert!(view.held_allocation("uid-p").is_none());
        assert!(view.unsettled_binds().is_empty());
        assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 0);

        // The bind chooses another node: its reservation replaces the
        // assumption, and confirming it leaves nothing unsettled.
        assert!(view.assume("uid-p", &p, on_n1.clone(), 1_000));
        let mut on_n2 = on_n1.clone();
        on_n2.node = "n2".into();
        view.reserve("uid-p", &p, on_n2.clone()).unwrap();
        assert!(!view.is_assumed("uid-p"));
        assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 0);
        assert_eq!(view.unsettled_binds().get("n2"), Some(&1));
        assert_eq!(view.expire_assumed(i64::MAX), 0, "a bind is not assumed");
        view.settle("uid-p");
        assert!(view.unsettled_binds().is_empty());

        // A new cycle of the pod drops what its last prioritize assumed.
        let q = pod("ns", "q", "n1", "", "Pending");
        assert!(view.assume("uid-q", &q, on_n1.clone(), 1_000));
        assert!(view.drop_assumed("uid-q"));
        assert!(!view.drop_assumed("uid-q"));
        assert!(!view.has_assumed());
    }

    #[test]
    fn a_node_is_busy_while_its_lock_is_held_and_not_expired() {
        let mut view = ClusterView::new();
        let mut n = node("n1", REGISTER);
        n.metadata.resource_version = Some("7".into());
        view.upsert_node(&n);
        view.note_node_lock(&n);
        let seen = view.seen_lock("n1").unwrap();
        assert_eq!(seen.value, None);
        assert_eq!(seen.resource_version.as_deref(), Some("7"));
        let none = HashMap::new();
        let expiry = std::time::Duration::from_secs(300);
        let now = jiff::Timestamp::now();
        let lock = |value: &str| {
            let mut n = n.clone();
            n.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(keys::NODE_LOCK.into(), value.into());
            n
        };
        view.note_node_lock(&lock(&format!("{now},ml,holder")));
        let why = view.node_busy("n1", &none, now, expiry).unwrap();
        assert!(why.contains("ml/holder"), "{why}");
        // Expired, or unreadable (bind reports it): not steered around.
        view.note_node_lock(&lock("2020-01-01T00:00:00Z,ml,old"));
        assert_eq!(view.node_busy("n1", &none, now, expiry), None);
        view.note_node_lock(&lock("garbage"));
        assert_eq!(view.node_busy("n1", &none, now, expiry), None);
        // A write's answer updates only nodes the watch has shown.
        view.note_node_lock_if_watched(&lock(&format!("{now},ml,other")));
        assert!(view.node_busy("n1", &none, now, expiry).is_some());
        let mut stranger = lock(&format!("{now},ml,other"));
        stranger.metadata.name = Some("n9".into());
        view.note_node_lock_if_watched(&stranger);
        assert!(view.seen_lock("n9").is_none());
        view.delete_node("n1");
        assert!(view.seen_lock("n1").is_none());
    }

    #[test]
    fn gang_members_and_holds_follow_their_pods() {
        let mut view = ClusterView::new();
        view.upsert_node(&node("n1", REGISTER));
        let member = |name: &str, phase: &str| {
            let mut p = pod("ns", name, "n1", "", phase);
            p.metadata.annotations = None;
            p.metadata.labels = Some(
                [
                    (crate::engine::gang::GROUP_NAME.to_string(), "g".to_string()),
                    (
                        crate::engine::gang::GROUP_MIN_AVAILABLE.to_string(),
                        "2".to_string(),
                    ),
                ]
                .into(),
            );
            p
        };
        let group = GangKey {
            namespace: "ns".into(),
            name: "g".into(),
        };
        view.upsert_pod("uid-a", &member("a", "Pending"));
        view.upsert_pod("uid-b", &member("b", "Pending"));
        assert_eq!(view.gang_members(&group).unwrap().len(), 2);
        let a = pod("ns", "a", "n1", "GPU-1,NVIDIA,16384,100:;", "Pending");
        let alloc = crate::cluster::pod_allocation(&a).unwrap().unwrap();
        view.hold_for_gang("uid-a", &group, alloc, 1_000).unwrap();
        assert_eq!(view.state().node("n1").unwrap().usage[1].mem_mib, 16384);
        assert_eq!(
            view.state_without_gang_holds(&group)
                .node("n1")
                .unwrap()
                .usage[1]
                .mem_mib,
            0
        );
        // Finished and deleted members leave the group; holds go with them.
        view.upsert_pod("uid-b", &member("b", "Succeeded"));
        assert_eq!(view.gang_members(&group).unwrap().len(), 1);
        view.delete_pod("uid-a");
        assert!(view.gang_members(&group).is_none());
        assert_eq!(view.gang_hold_count(), 0);
        assert_eq!(view.state().node("n1").unwrap().usage[1].mem_mib, 0);
        // Holds end at their time.
        let a = pod("ns", "a", "n1", "GPU-1,NVIDIA,16384,100:;", "Pending");
        let alloc = crate::cluster::pod_allocation(&a).unwrap().unwrap();
        view.hold_for_gang("uid-a", &group, alloc, 1_000).unwrap();
        assert_eq!(view.expire_gang_holds(999), 0);
        assert_eq!(view.expire_gang_holds(1_000), 1);
        assert_eq!(view.state().node("n1").unwrap().usage[1].mem_mib, 0);
    }
}
