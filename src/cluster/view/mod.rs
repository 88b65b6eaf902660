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
//!
//! Nodes and namespaces are here; the ledger (`ledger.rs`), gpugate's own
//! reservations (`reservations.rs`), quotas (`quotas.rs`), gang groups
//! (`gangs.rs`) and the nodes' lock annotations (`seen_locks.rs`) each have
//! a file.

mod budgets;
mod destinations;
mod gangs;
mod ledger;
mod nominations;
mod numa;
mod quotas;
mod reservations;
mod seen_locks;
mod served;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Namespace, Node as K8sNode, Pod, ResourceQuota};

use crate::engine::gang::GangKey;
use crate::engine::{Allocation, ClusterState, KindAmounts, Node};

use super::convert::{node_from_k8s, pod_namespace, pod_own_name, pod_priority};

pub use budgets::{BudgetedPod, Budgets, PackedLabels};
pub use destinations::{TakenDestination, gang_moves};
pub use gangs::{GangHold, Gangs};
pub use quotas::Quotas;
pub use reservations::{BindInProgress, Expired, PromisedWork, Reservation, TakenHolds};
pub use seen_locks::{AwaitedLock, SeenLock, SeenLocks};
use served::Served;

/// A pod the ledger knows to hold GPUs (applied or unaccounted).
#[derive(Debug, Clone, PartialEq)]
struct HeldPod {
    namespace: String,
    /// The pod's own name, without its namespace.
    name: String,
    /// `spec.priority`, for choosing preemption victims.
    priority: i32,
    /// The pod's labels, for the PodDisruptionBudgets that select it.
    labels: PackedLabels,
    /// `spec.nodeName` is set: only such pods can be preemption victims.
    bound: bool,
    /// `spec.nodeName` names another node than the allocation: not a live
    /// holder of the allocation node's lock.
    bound_elsewhere: bool,
    /// Bound, `Pending` with `hami.io/bind-phase: allocating`: the kubelet
    /// has not admitted it, and its device plugin will find it through the
    /// node lock it holds, which is kept for it past its expiry.
    awaiting_allocation: bool,
    /// `status.startTime`: when the kubelet admitted the pod (it has
    /// assigned its CPUs and memory to NUMA zones by then).
    started: Option<jiff::Timestamp>,
    amount: KindAmounts,
    /// What ResourceQuota scopes see of the pod: which quotas count
    /// `amount`.
    scope: crate::engine::ScopeFacts,
    /// Why the allocation is not in the engine's state, when it is not.
    unaccounted: Option<String>,
    /// The pod's allocation annotations cannot be read: why, and what is
    /// known of where (`allocation` is then [`Allocation::unreadable`]:
    /// it blocks those GPUs).
    unreadable: Option<Box<Unreadable>>,
    allocation: Option<Allocation>,
    stage: Stage,
    /// The [`Reservation`] that made it (0 for anything else): only that
    /// handle changes it.
    ticket: u64,
    /// Its MIG instances the device plugin reports created (with their
    /// runtime ids), for HAMi's `hami_node_gpu_mig_instance_info`.
    mig_ready: Box<[crate::hami::mig::MigAllocation]>,
}

/// What is known of an allocation that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unreadable {
    problem: String,
    /// The node it names (`hami.io/vgpu-node`, else `spec.nodeName`).
    node: String,
    /// The device uuids its list names.
    uuids: Vec<String>,
}

/// Where a bind of the pod stands. A reserved allocation is gpugate's own
/// choice, made before the pod carries it: watch events that do not show it
/// yet (the pod as it was before the patch, a re-list without it) must not
/// drop it, or a second bind could take the same GPUs meanwhile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Stage {
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

/// Whether `pod` is bound to another node than its `allocation`'s.
fn bound_elsewhere(pod: &Pod, allocation: Option<&Allocation>) -> bool {
    let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    matches!((on, allocation), (Some(on), Some(a)) if on != a.node)
}

impl HeldPod {
    /// What `pod` holds: `allocation` (none when it cannot be read), with
    /// why it is not on a node when it is not.
    fn of(
        pod: &Pod,
        allocation: Option<Allocation>,
        unaccounted: Option<String>,
        stage: Stage,
    ) -> Self {
        HeldPod {
            namespace: pod_namespace(pod).to_string(),
            name: pod_own_name(pod).into_owned(),
            priority: pod_priority(pod),
            labels: PackedLabels::pack(pod.metadata.labels.as_ref()),
            bound: pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()),
            bound_elsewhere: bound_elsewhere(pod, allocation.as_ref()),
            awaiting_allocation: super::convert::pod_awaiting_allocation(pod),
            started: pod_started(pod),
            amount: allocation
                .as_ref()
                .map(KindAmounts::of_allocation)
                .unwrap_or_default(),
            scope: super::convert::pod_scope_facts(pod),
            unaccounted,
            unreadable: None,
            allocation,
            stage,
            ticket: 0,
            mig_ready: crate::cluster::pod_annotations::pod_mig_ready(pod),
        }
    }

    /// `namespace/name`, for messages and the name index.
    fn who(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The cluster as gpugate sees it. Not thread-safe by itself; see
/// [`super::SharedCluster`].
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    state: ClusterState,
    pods: HashMap<String, HeldPod>,
    /// `namespace/name` of each pod in `pods`: its UID (HAMi's node lock
    /// names its holder so).
    held_names: HashMap<String, String>,
    node_problems: BTreeMap<String, Vec<String>>,
    /// Nodes without a GPU inventory annotation (CPU nodes): known, quiet.
    plain_nodes: std::collections::HashSet<String>,
    /// A digest of the annotations each node was last registered from, so
    /// that node updates that do not touch them (status, heartbeats) cost
    /// nothing. A digest, not the text: the inventory and pair-score JSON
    /// of 5,000 8-GPU nodes is 13 MB.
    node_sources: HashMap<String, SourcesDigest>,
    namespace_labels: HashMap<String, BTreeMap<String, String>>,
    quotas: Quotas,
    budgets: Budgets,
    gangs: Gangs,
    /// Pods whose allocation gpugate reserved and the watch does not show
    /// yet (bind in flight, or bound a moment ago), by UID: their node.
    unsettled: HashMap<String, String>,
    seen_locks: SeenLocks,
    /// Pods gpugate preempts for, and the victims they wait for.
    nominations: nominations::Nominations,
    /// Places held for the replacements of pods defragmentation moved.
    destinations: destinations::Destinations,
    /// When each node's NodeResourceTopology was last written by its
    /// exporter, by node name; `None` while the API server does not serve
    /// the kind. The engine's state holds the topologies themselves (see
    /// `numa.rs`).
    topologies: Served<String, Option<jiff::Timestamp>>,
    /// The last [`Reservation`]'s ticket.
    next_ticket: u64,
    /// Pods found holding a MIG instance inconsistent with their GPU, or
    /// an allocation that cannot be read, not yet told (an event each);
    /// bounded by [`NOTICES_MAX`].
    notices: std::collections::VecDeque<PodNotice>,
}

/// At most this many untold [`PodNotice`]s are kept (the oldest go first).
const NOTICES_MAX: usize = 256;

/// A pod to be told about with a warning event: its MIG grants are
/// inconsistent with its GPUs' modes (`MigInconsistent`: what HAMi v2.10
/// marks a device unhealthy for), or its allocation cannot be read
/// (`AllocationUnreadable`: its GPUs take no new pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNotice {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The event's reason.
    pub reason: &'static str,
    pub problem: String,
}

/// Counts for metrics and `/readyz` detail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ViewCounts {
    pub nodes: usize,
    pub gpus: usize,
    pub allocations: usize,
    pub unaccounted: usize,
    pub nodes_with_problems: usize,
    /// PodGroups known; `None` while the kind is not served.
    pub pod_groups: Option<usize>,
    /// NodeResourceTopology objects known; `None` while not served.
    pub node_topologies: Option<usize>,
    /// Placed pods whose NUMA zone takes still count (not shown by their
    /// node's object yet).
    pub numa_zone_takes: usize,
    /// GPUs that take no new pod because one they hold has a MIG instance
    /// inconsistent with the GPU (HAMi v2.10 marks them unhealthy).
    pub mig_inconsistent_gpus: usize,
    /// Pods whose allocation annotations cannot be read.
    pub unreadable_allocations: usize,
    /// GPUs that take no new pod because such a pod may hold them.
    pub unreadable_blocked_gpus: usize,
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
        self.seen_locks.forget(name);
        for p in self.pods.values_mut() {
            if p.allocation.as_ref().is_some_and(|a| a.node == name) {
                p.unaccounted = Some(format!("pod {}: node {name} was deleted", p.who()));
            }
        }
    }

    /// After `node` (re-)registered: applies held allocations on it that
    /// could not be applied before, and marks those that name GPUs it no
    /// longer has (`stale`; their usage on the GPUs that remain still counts).
    fn refresh_pods_on(&mut self, node: &str, stale: &[String]) {
        // Pods whose allocation cannot be read block what the node has now.
        let mut unreadable: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.unreadable.as_ref().is_some_and(|u| u.node == node))
            .map(|(uid, _)| uid.clone())
            .collect();
        unreadable.sort();
        for uid in &unreadable {
            self.block_unreadable(uid);
        }
        let mut on_node: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.unreadable.is_none() && p.allocation.as_ref().is_some_and(|a| a.node == node)
            })
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
                    p.who()
                ))
            } else if applied {
                None
            } else {
                match p.allocation.clone() {
                    Some(a) => self
                        .state
                        .apply(&uid, a)
                        .err()
                        .map(|e| format!("pod {}: {e}", p.who())),
                    None => p.unaccounted.take(),
                }
            };
            if self.pods.get(&uid).is_some_and(|p| p.unaccounted.is_none()) {
                self.notice_mig_inconsistency(&uid);
            }
        }
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

    /// A namespace's labels; `None` when the namespace is not known (not
    /// watched, or not in the snapshot).
    pub fn namespace_labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.namespace_labels.get(name)
    }

    pub fn counts(&self) -> ViewCounts {
        ViewCounts {
            nodes: self.state.nodes().count(),
            gpus: self.state.nodes().map(|n| n.gpus.len()).sum(),
            allocations: self.pods.len(),
            unaccounted: self
                .pods
                .values()
                .filter(|p| p.unaccounted.is_some() || p.unreadable.is_some())
                .count(),
            unreadable_allocations: self
                .pods
                .values()
                .filter(|p| p.unreadable.is_some())
                .count(),
            unreadable_blocked_gpus: self
                .state
                .nodes()
                .map(|n| n.usage.iter().filter(|u| u.unreadable > 0).count())
                .sum(),
            nodes_with_problems: self.node_problems.len(),
            node_topologies: self.topologies.served().map(HashMap::len),
            numa_zone_takes: self.state.unsettled_zone_take_count(),
            mig_inconsistent_gpus: self
                .state
                .nodes()
                .map(|n| (0..n.gpus.len()).filter(|&i| n.is_inconsistent(i)).count())
                .sum(),
            pod_groups: match self.gangs.pod_groups() {
                crate::engine::gang::PodGroups::Listed(g) => Some(g.len()),
                _ => None,
            },
        }
    }

    /// Records the node's lock annotation and resourceVersion (every node
    /// event, those [`ClusterView::upsert_node`] ignores included).
    pub fn note_node_lock(&mut self, node: &K8sNode) {
        self.seen_locks.note(node, Some(jiff::Timestamp::now()));
    }

    /// How long HAMi's node locks have been held lately (the median of the
    /// last 64 seen released); `None` until 8 were.
    pub fn typical_lock_hold(&self) -> Option<std::time::Duration> {
        self.seen_locks.typical_hold()
    }

    /// [`ClusterView::note_node_lock`] for a node the watch has shown: a
    /// write's answer keeps the copy current until the watch catches up.
    /// It times no hold: only the watch, which shows a node's versions in
    /// order, does (a write's answer may be newer than the next event).
    pub fn note_node_lock_if_watched(&mut self, node: &K8sNode) {
        if node
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| self.seen_locks.knows(n))
        {
            self.seen_locks.note(node, None);
        }
    }

    /// The node's lock annotation and resourceVersion as the watch last
    /// showed them; `None` for a node never seen (standalone mode).
    /// Every node the watch showed with a lock annotation, and its value.
    pub fn held_node_locks(&self) -> Vec<(String, String)> {
        self.seen_locks.held_values()
    }

    pub fn seen_lock(&self, node: &str) -> Option<&SeenLock> {
        self.seen_locks.get(node)
    }

    /// The namespaces' quotas and what their pods use.
    pub fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    pub fn upsert_quota(&mut self, quota: &ResourceQuota) {
        self.quotas.upsert(quota);
    }

    pub fn delete_quota(&mut self, namespace: &str, name: &str) {
        self.quotas.delete(namespace, name);
    }

    /// The PodDisruptionBudgets known.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    pub fn upsert_budget(&mut self, pdb: &k8s_openapi::api::policy::v1::PodDisruptionBudget) {
        self.budgets.upsert(pdb);
    }

    pub fn delete_budget(&mut self, namespace: &str, name: &str) {
        self.budgets.delete(namespace, name);
    }

    /// For pods evicted together, in order, whether each violates a
    /// PodDisruptionBudget (kube-scheduler's count). Pods the view does not
    /// hold are counted as not violating.
    pub fn budget_violations(&self, uids: &[&str]) -> Vec<bool> {
        // Labels are unpacked only where a budget may select them.
        let pods: Vec<(&str, &str, BTreeMap<String, String>)> = uids
            .iter()
            .map(|uid| match self.pods.get(*uid) {
                Some(p) if self.budgets.any_in(&p.namespace) => {
                    (p.namespace.as_str(), p.name.as_str(), p.labels.unpack())
                }
                Some(p) => (p.namespace.as_str(), p.name.as_str(), BTreeMap::new()),
                None => ("", *uid, BTreeMap::new()),
            })
            .collect();
        self.budgets
            .violations(pods.iter().map(|(namespace, name, labels)| BudgetedPod {
                namespace,
                name,
                labels,
            }))
    }

    /// The known unfinished members of a group, by UID.
    /// What is known of PodGroups (see [`crate::engine::gang`]).
    pub fn pod_groups(&self) -> crate::engine::gang::PodGroups<'_> {
        self.gangs.pod_groups()
    }

    pub fn set_pod_groups_served(&mut self, served: bool) {
        self.gangs.pod_groups_mut().set_served(served);
    }

    /// The PodGroups' first list has completed.
    pub fn pod_groups_listed(&mut self) {
        self.gangs.pod_groups_mut().mark_listed();
    }

    pub fn upsert_pod_group(&mut self, group: GangKey, spec: crate::engine::gang::PodGroupSpec) {
        self.gangs.pod_groups_mut().upsert(group, spec);
    }

    pub fn delete_pod_group(&mut self, group: &GangKey) {
        self.gangs.pod_groups_mut().remove(group);
    }

    /// The keys (`namespace/name`) of the PodGroups known.
    pub fn pod_group_keys(&self) -> Vec<String> {
        self.gangs
            .pod_group_entries()
            .map(ToString::to_string)
            .collect()
    }

    /// The gang group pod `key` is a member of, if any.
    pub fn gang_of(&self, key: &str) -> Option<&GangKey> {
        self.gangs.group_of(key)
    }

    pub fn gang_members(&self, group: &GangKey) -> Option<&BTreeMap<String, Pod>> {
        self.gangs.members(group)
    }

    /// The engine state without what is held for `group`: its members'
    /// holds, and the places waiting for them while pods are moved for it
    /// ([`Self::hold_gang_place`]). What its members are judged on.
    pub fn state_without_gang_holds(&self, group: &GangKey) -> ClusterState {
        let mut state = self.gangs.state_without(&self.state, group);
        self.remove_gang_places(&mut state, group);
        state
    }

    /// Whether `group` has holds.
    pub fn has_gang_holds(&self, group: &GangKey) -> bool {
        self.gangs.has_holds(group)
    }

    /// Number of members capacity is held for.
    pub fn gang_hold_count(&self) -> usize {
        self.gangs.hold_count()
    }
}

/// SHA-256 of the annotations a node's GPU view is read from.
type SourcesDigest = [u8; 32];

/// The digest of the annotations (and capacities) a node's GPU view is
/// read from: each one absent, or present with its length and text.
fn node_sources(node: &K8sNode) -> SourcesDigest {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let kinds = crate::devices::kinds().flat_map(|(_, k)| {
        let (losses, scores) = match k.node_preference {
            crate::devices::NodePreference::SizeTables { losses, scores } => {
                (Some(losses), Some(scores))
            }
            _ => (None, None),
        };
        [
            Some(k.register_key),
            k.score_key,
            k.templates
                .map(|c| c.node_mode_annotation)
                .filter(|key| !key.is_empty()),
            losses,
            scores,
        ]
    });
    let mut add = |value: Option<&String>| match value {
        None => digest.update(&[0]),
        Some(v) => {
            digest.update(&[1]);
            digest.update(&(v.len() as u64).to_le_bytes());
            digest.update(v.as_bytes());
        }
    };
    for key in kinds
        .flatten()
        .filter(|k| !k.is_empty())
        .chain([crate::hami::keys::DEVICE_CORDON])
    {
        add(node.metadata.annotations.as_ref().and_then(|a| a.get(key)));
    }
    // Kinds read from node capacity (`devices::CapacityInventory`), and
    // the labels that shape them.
    let labels = node.metadata.labels.as_ref();
    for label in crate::devices::kinds().filter_map(|(_, k)| Some(k.capacity?.ring_label?.0)) {
        add(labels.and_then(|l| l.get(label)));
    }
    let capacity = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    for resource in crate::devices::kinds()
        .filter_map(|(_, k)| k.capacity)
        .flat_map(|c| c.resources)
    {
        add(capacity.and_then(|c| c.get(*resource)).map(|q| &q.0));
    }
    let mut out = [0; 32];
    out.copy_from_slice(digest.finish().as_ref());
    out
}

/// `status.startTime`, when the kubelet has acknowledged the pod.
fn pod_started(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status.as_ref()?.start_time.as_ref().map(|t| t.0)
}
