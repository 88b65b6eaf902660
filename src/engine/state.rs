//! The cluster as the engine sees it: nodes with their GPUs and usage, and
//! the allocations that make up that usage, keyed by pod UID.
//!
//! Usage is always derived from the allocations: applying or removing one
//! touches only the GPUs it names, and re-registering a node re-derives its
//! usage, so the two cannot drift apart.

use std::collections::{BTreeMap, HashMap};

use super::align;
use super::allocation::{Allocation, DeviceGrant};
use super::device::{Node, Usage};
use super::fit::{Scratch, fit_pod};
use super::lifecycle::pod_peak;
use super::numa::{CpuMemory, NodeTopology, NumaGrant};
use super::numa_score::numa_score;
use super::plan::PodPlan;
use super::policy::{NodePolicy, node_better, node_priority, node_score};
use super::reason::Rejection;

/// Candidate lists at least 1/`WALK_RATIO` of the cluster are matched to
/// nodes by walking the node map rather than searching it per name.
const WALK_RATIO: usize = 16;

/// Nodes by name and allocations by pod UID.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    nodes: BTreeMap<String, Node>,
    allocations: HashMap<String, Allocation>,
    /// Capacity held for pods not placed yet (members of a gang group being
    /// placed), by pod UID: used like an allocation, kept apart from them.
    holds: HashMap<String, Allocation>,
    /// The NUMA layout and availability of nodes that publish a
    /// NodeResourceTopology object, by node name.
    topologies: HashMap<String, NodeTopology>,
    /// What aligned allocations and holds take of NUMA zones that the
    /// node's object does not show yet.
    zone_takes: ZoneTakes,
}

/// What gpugate placed in NUMA zones since each node's NodeResourceTopology
/// object was written: by node, then by (is a hold, pod UID), per zone.
/// Counted against the zones' availability until settled (the object has
/// caught up) or the allocation is gone.
#[derive(Debug, Clone, Default)]
struct ZoneTakes {
    by_node: HashMap<String, BTreeMap<TakeKey, ZoneTake>>,
}

/// (is a hold, pod UID).
type TakeKey = (bool, String);

/// What one pod takes of each zone, by zone id.
type ZoneTake = Vec<(i32, CpuMemory)>;

impl ZoneTakes {
    fn add(&mut self, hold: bool, key: &str, allocation: &Allocation) {
        if let Some(grant) = allocation.numa.as_ref().filter(|g| !g.takes.is_empty()) {
            self.by_node
                .entry(allocation.node.clone())
                .or_default()
                .insert((hold, key.to_string()), grant.takes.clone());
        }
    }

    fn remove(&mut self, node: &str, hold: bool, key: &str) -> bool {
        let Some(on_node) = self.by_node.get_mut(node) else {
            return false;
        };
        let removed = on_node.remove(&(hold, key.to_string())).is_some();
        if on_node.is_empty() {
            self.by_node.remove(node);
        }
        removed
    }

    /// Whether pod `key`'s take on `node` is counted.
    fn counts(&self, node: &str, key: &str) -> bool {
        self.by_node
            .get(node)
            .is_some_and(|m| m.contains_key(&(false, key.to_string())))
    }

    /// `topology` with what is taken on `node` (but `except`) off its zones.
    fn off(&self, node: &str, topology: &NodeTopology, except: &[&str]) -> NodeTopology {
        let mut t = topology.clone();
        for ((_, key), takes) in self.by_node.get(node).into_iter().flatten() {
            if except.contains(&key.as_str()) {
                continue;
            }
            for (id, take) in takes {
                if let Some(z) = t.zones.iter_mut().find(|z| z.id == *id) {
                    z.available = z.available.minus(*take);
                }
            }
        }
        t
    }
}

/// A node that can hold the pod.
#[derive(Debug, Clone, PartialEq)]
pub struct FeasibleNode<'a> {
    pub node: &'a str,
    /// HAMi's node score before placement (0..=30).
    pub score: f64,
    /// The rank in 0..=1 (higher is better): the node policy's, combined
    /// with the NUMA score for a Guaranteed pod when the cluster has
    /// NodeResourceTopology objects (see [`rank`]), behind the pod's kind's
    /// preference for the node when its kind has one
    /// (`super::node_preference`).
    pub rank: f64,
    /// The extender priority, 0..=10: the rank scaled.
    pub priority: u8,
    /// The zones of an aligned pod.
    pub numa: Option<NumaGrant>,
}

/// Whether feasible node `a` ranks before `b`: the higher rank, then the
/// node policy on HAMi's score (the lower name among equals stays first).
pub fn ranks_before(policy: NodePolicy, a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && node_better(policy, a.1, b.1))
}

/// A feasible node's rank and priority from HAMi's node score and, when
/// NUMA scoring applies (`numa`: the NUMA score and its weight), the NUMA
/// score: `(policy + weight × numa) / (1 + weight)`, the node policy's
/// part being its 0..=10 priority over 10 (binpack: fuller is higher,
/// spread: emptier). Without NUMA scoring the priority is the node
/// policy's exactly.
pub fn rank(policy: NodePolicy, score: f64, numa: Option<(f64, u32)>) -> (f64, u8) {
    let fraction = (score / 30.0).clamp(0.0, 1.0);
    let by_policy = match policy {
        NodePolicy::Binpack => fraction,
        NodePolicy::Spread => 1.0 - fraction,
    };
    match numa {
        Some((numa, weight)) if weight > 0 => {
            let w = f64::from(weight);
            let r = (f64::from(node_priority(policy, score)) / 10.0 + w * numa) / (1.0 + w);
            // `r` is within 0..=1, so the cast cannot truncate.
            (r, (r * 10.0).round().clamp(0.0, 10.0) as u8)
        }
        _ => (by_policy, node_priority(policy, score)),
    }
}

/// The verdict on every candidate node for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation<'a> {
    /// Feasible nodes in name order.
    pub feasible: Vec<FeasibleNode<'a>>,
    /// Rejected nodes in name order (unknown candidates included).
    pub rejected: Vec<(String, Rejection)>,
    /// Index into `feasible` of the best node by rank.
    best: Option<usize>,
    policy: NodePolicy,
}

impl<'a> Evaluation<'a> {
    /// The best node: highest rank, then highest score for binpack, lowest
    /// for spread, then lowest name.
    pub fn best(&self) -> Option<&FeasibleNode<'a>> {
        self.best.and_then(|i| self.feasible.get(i))
    }

    /// Keeps only the feasible nodes `keep` accepts (the others are set
    /// aside by the caller, with its own reason); the best is chosen again.
    pub fn retain_feasible(&mut self, keep: impl FnMut(&FeasibleNode<'a>) -> bool) {
        self.feasible.retain(keep);
        self.best = None;
        for (i, f) in self.feasible.iter().enumerate() {
            if self
                .best()
                .is_none_or(|b| ranks_before(self.policy, (f.rank, f.score), (b.rank, b.score)))
            {
                self.best = Some(i);
            }
        }
    }
}

/// Why an allocation could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("allocation names unknown node {node}")]
    UnknownNode { node: String },
    #[error("allocation names GPU {uuid} that node {node} does not have")]
    UnknownGpu { node: String, uuid: String },
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    pub fn allocation(&self, uid: &str) -> Option<&Allocation> {
        self.allocations.get(uid)
    }

    /// A copy for a search that only removes the allocations of `keys` and
    /// adds new ones (defragmentation's): every node with its usage, the
    /// holds, NUMA layouts and zone takes, but of the pods' allocations
    /// only those of `keys`; the others' usage stays counted on their
    /// nodes, and they cannot be removed from the copy. GPU inventories
    /// and pair scores are shared, so the copy costs the nodes' usage and
    /// the allocations of `keys`, not every pod's.
    pub fn copy_for_moves<'k>(&self, keys: impl IntoIterator<Item = &'k str>) -> ClusterState {
        ClusterState {
            nodes: self.nodes.clone(),
            allocations: keys
                .into_iter()
                .filter_map(|k| Some((k.to_string(), self.allocations.get(k)?.clone())))
                .collect(),
            holds: self.holds.clone(),
            topologies: self.topologies.clone(),
            zone_takes: self.zone_takes.clone(),
        }
    }

    /// The same nodes with nothing placed or held on them: no allocation,
    /// no hold, every GPU's usage zero, every NUMA zone's CPUs and memory
    /// available as far as it is allocatable. What "could this ever fit"
    /// is asked of.
    pub fn emptied(&self) -> ClusterState {
        let nodes = self
            .nodes
            .iter()
            .map(|(name, node)| {
                let mut node = node.clone();
                node.usage = vec![Usage::default(); node.gpus.len()];
                node.clear_tenants();
                node.totals.slots_used = 0;
                node.totals.cores_used = 0;
                node.totals.mem_used_mib = 0;
                (name.clone(), node)
            })
            .collect();
        let mut topologies = self.topologies.clone();
        for zone in topologies.values_mut().flat_map(|t| t.zones.iter_mut()) {
            zone.available = zone.allocatable;
        }
        ClusterState {
            nodes,
            allocations: HashMap::new(),
            holds: HashMap::new(),
            topologies,
            zone_takes: ZoneTakes::default(),
        }
    }

    pub fn allocations(&self) -> impl Iterator<Item = (&str, &Allocation)> {
        self.allocations.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Adds or replaces a node (registration). Its usage is re-derived from
    /// the allocations on it; the UIDs of allocations naming GPUs the node no
    /// longer has are returned (their other GPUs still count).
    pub fn upsert_node(&mut self, mut node: Node) -> Vec<String> {
        let stale = add_usage_on(&mut node, &self.allocations);
        add_usage_on(&mut node, &self.holds);
        self.nodes.insert(node.name.clone(), node);
        stale
    }

    /// Removes a node; allocations on it stay and count again if it returns.
    pub fn remove_node(&mut self, name: &str) -> Option<Node> {
        self.nodes.remove(name)
    }

    /// Records a pod's allocation and adds it to the node's usage, replacing
    /// any earlier allocation of the same pod. Refused whole when the node or
    /// any GPU is unknown. Cost: proportional to the GPUs it names.
    pub fn apply(&mut self, uid: &str, allocation: Allocation) -> Result<(), ApplyError> {
        record(
            &mut self.nodes,
            (&mut self.allocations, false),
            &mut self.zone_takes,
            uid,
            allocation,
        )
    }

    /// Forgets a pod's allocation and frees its GPUs.
    pub fn remove(&mut self, uid: &str) -> Option<Allocation> {
        forget(
            &mut self.nodes,
            (&mut self.allocations, false),
            &mut self.zone_takes,
            uid,
        )
    }

    /// Holds capacity for a pod that is not placed yet, as [`Self::apply`]
    /// does for a placed one; the hold is not the pod's allocation.
    pub fn apply_hold(&mut self, uid: &str, allocation: Allocation) -> Result<(), ApplyError> {
        record(
            &mut self.nodes,
            (&mut self.holds, true),
            &mut self.zone_takes,
            uid,
            allocation,
        )
    }

    /// Drops the capacity held for a pod and frees its GPUs.
    pub fn remove_hold(&mut self, uid: &str) -> Option<Allocation> {
        forget(
            &mut self.nodes,
            (&mut self.holds, true),
            &mut self.zone_takes,
            uid,
        )
    }

    /// Judges every candidate node (all nodes when `candidates` is `None`).
    /// Pure: the state is not changed.
    pub fn evaluate<'a>(&'a self, plan: &PodPlan, candidates: Option<&[String]>) -> Evaluation<'a> {
        let mut scratch = Scratch::default();
        // Every candidate lands in one of the two lists: reserved once, so
        // that growing them does not copy them over and over (586,000
        // instructions of a 5,000-node evaluation went to those copies;
        // docs/benchmarks.md, "Counted, not timed").
        let n = candidates.map_or(self.nodes.len(), <[String]>::len);
        let mut eval = Evaluation {
            feasible: Vec::with_capacity(n),
            rejected: Vec::with_capacity(n),
            best: None,
            policy: plan.node_policy,
        };
        // NUMA scoring: a Guaranteed pod in a cluster with topologies.
        let scoring =
            plan.numa.guaranteed && plan.numa_scoring.weight > 0 && !self.topologies.is_empty();
        let pod_cpu_memory = pod_peak(
            plan.request
                .containers
                .iter()
                .map(|c| c.kind)
                .zip(plan.numa.containers.iter().copied()),
        );
        let mut judge = |node: &'a Node, eval: &mut Evaluation<'a>| match self.fit_on_with(
            node,
            plan,
            &[],
            &mut scratch,
        ) {
            Ok((numa, free)) => {
                let score = node_score(node.totals());
                let numa_part = scoring.then(|| {
                    let s = numa_score(
                        plan.numa_scoring.strategy,
                        free.as_ref(),
                        numa.as_ref(),
                        &pod_cpu_memory,
                    );
                    (s, plan.numa_scoring.weight)
                });
                let (rank, priority) = rank(plan.node_policy, score, numa_part);
                let better = eval.best().is_none_or(|b| {
                    ranks_before(plan.node_policy, (rank, score), (b.rank, b.score))
                });
                eval.feasible.push(FeasibleNode {
                    node: &node.name,
                    score,
                    rank,
                    priority,
                    numa,
                });
                if better {
                    eval.best = Some(eval.feasible.len() - 1);
                }
            }
            Err(r) => eval.rejected.push((node.name.clone(), r)),
        };
        match candidates {
            None => {
                for node in self.nodes.values() {
                    judge(node, &mut eval);
                }
            }
            Some(names) => {
                let walk = names.len().saturating_mul(WALK_RATIO) >= self.nodes.len();
                for (name, node) in self.candidate_nodes(names, walk) {
                    match node {
                        Some(node) => judge(node, &mut eval),
                        None => eval
                            .rejected
                            .push((name.clone(), Rejection::NodeUnregistered)),
                    }
                }
            }
        }
        // A kind's preference among nodes (`super::node_preference`): a
        // second pass over the feasible nodes, so that the first one, which
        // every NVIDIA evaluation runs, is not changed by it.
        if std::iter::once(plan).chain(&plan.also).any(|p| {
            p.selection.kind.kind().node_preference != crate::devices::NodePreference::None
        }) {
            self.prefer_feasible(plan, &mut eval);
        }
        eval
    }

    /// Ranks the feasible nodes of `eval` by the pod's kind's preference
    /// ahead of their rank (`super::node_preference`), from the devices the
    /// fit chooses on each (fitted again: the first pass keeps no grants),
    /// and gives them the priorities that follow; the best is chosen again.
    #[cold]
    #[inline(never)]
    fn prefer_feasible<'a>(&'a self, plan: &PodPlan, eval: &mut Evaluation<'a>) {
        use super::node_preference::{band_priorities, prefer, preference};
        let mut scratch = Scratch::default();
        let mut banded = false;
        for f in eval.feasible.iter_mut() {
            let Some(node) = self.nodes.get(f.node) else {
                continue;
            };
            let plans = std::iter::once(plan).chain(&plan.also);
            if self.fit_on_with(node, plan, &[], &mut scratch).is_ok()
                && let Some(p) = preference(node, plans, &scratch.grants, plan.node_policy)
            {
                f.rank = prefer(p, f.rank);
                banded = true;
            }
        }
        if banded {
            band_priorities(&mut eval.feasible, |f| f.rank, |f| &mut f.priority);
        }
        eval.retain_feasible(|_| true);
    }

    /// The candidates in name order without repeats, each with its node
    /// when known. With `walk`, one merge walk along the node map (both are
    /// in name order) instead of a tree search per name: kube-scheduler
    /// sends most of the cluster's names, and each search compares a name
    /// with a dozen or more node names scattered over the heap, where the
    /// walk compares it with one or two.
    fn candidate_nodes<'s, 'n>(
        &'s self,
        names: &'n [String],
        walk: bool,
    ) -> Vec<(&'n String, Option<&'s Node>)> {
        let mut names: Vec<&String> = names.iter().collect();
        names.sort_unstable();
        names.dedup();
        if !walk {
            return names.into_iter().map(|n| (n, self.nodes.get(n))).collect();
        }
        let mut nodes = self.nodes.iter().peekable();
        names
            .into_iter()
            .map(|name| {
                while nodes.next_if(|(n, _)| *n < name).is_some() {}
                (
                    name,
                    nodes.next_if(|(n, _)| *n == name).map(|(_, node)| node),
                )
            })
            .collect()
    }

    /// The GPUs the pod would get on `node` now (what bind commits).
    pub fn assign(&self, plan: &PodPlan, node: &str) -> Result<Allocation, Rejection> {
        let n = self.nodes.get(node).ok_or(Rejection::NodeUnregistered)?;
        let mut scratch = Scratch::default();
        let numa = self.fit_on(n, plan, &[], &mut scratch)?;
        let mut containers = vec![Vec::new(); plan.request.containers.len()];
        for &(ci, pos, take) in &scratch.grants {
            if let (Some(list), Some(gpu)) = (containers.get_mut(ci), n.gpus.get(pos)) {
                list.push(DeviceGrant {
                    uuid: gpu.uuid.clone(),
                    kind: gpu.kind,
                    mem_mib: u64::from(take.mem_mib),
                    cores: take.cores,
                    slots: take.slots.max(1),
                    unreadable: false,
                    device_type: gpu
                        .kind
                        .kind()
                        .vendor_from_type
                        .then(|| gpu.model.as_str().into()),
                    mig: gpu.mig_instance(&take),
                });
            }
        }
        Ok(Allocation {
            node: node.to_string(),
            containers,
            kinds: plan.request.kinds(),
            numa,
            tenancy: plan.tenancy(),
        })
    }

    /// Fits the pod on `node` (its GPUs; and its NUMA zones where the
    /// node's kubelet aligns it, with `back` given back to the zones):
    /// the zones when aligned. `scratch.grants` holds the GPUs.
    fn fit_on(
        &self,
        node: &Node,
        plan: &PodPlan,
        back: &[(&str, &Allocation)],
        scratch: &mut Scratch,
    ) -> Result<Option<NumaGrant>, Rejection> {
        self.fit_on_with(node, plan, back, scratch)
            .map(|(grant, _)| grant)
    }

    /// [`Self::fit_on`], with the node's topology as placement saw it.
    fn fit_on_with(
        &self,
        node: &Node,
        plan: &PodPlan,
        back: &[(&str, &Allocation)],
        scratch: &mut Scratch,
    ) -> Result<(Option<NumaGrant>, Option<NodeTopology>), Rejection> {
        let free = if self.topologies.is_empty() || !plan.numa.guaranteed {
            None
        } else {
            self.free_topology(&node.name, back)
        };
        match free {
            Some(free) if align::applies(&free, plan) => {
                match align::align(node, &free, plan, scratch) {
                    Ok(grant) => Ok((Some(grant), Some(free))),
                    // When the GPUs fit nowhere on the node, their own
                    // reasons say more than the zones'.
                    Err(zones) => Err(fit_pod(node, plan, scratch).err().unwrap_or(zones)),
                }
            }
            free => fit_pod(node, plan, scratch).map(|()| (None, free)),
        }
    }

    /// `node`'s topology as placement sees it: the object's availability
    /// less what gpugate counts there, with what the pods of `back` take
    /// given back (preemption's question: their own counts, or, once the
    /// object shows them, their zone takes, up to each zone's allocatable).
    fn free_topology(&self, node: &str, back: &[(&str, &Allocation)]) -> Option<NodeTopology> {
        let topology = self.topologies.get(node)?;
        let except: Vec<&str> = back.iter().map(|(uid, _)| *uid).collect();
        let mut free = self.zone_takes.off(node, topology, &except);
        for (uid, a) in back {
            let counted = self.zone_takes.counts(node, uid);
            let Some(grant) = a.numa.as_ref().filter(|_| !counted && a.node == node) else {
                continue;
            };
            for (id, take) in &grant.takes {
                if let Some(z) = free.zones.iter_mut().find(|z| z.id == *id) {
                    let back = super::lifecycle::Amount::plus(z.available, *take);
                    z.available = CpuMemory {
                        cpu_milli: back.cpu_milli.min(z.allocatable.cpu_milli),
                        memory_bytes: back.memory_bytes.min(z.allocatable.memory_bytes),
                    };
                }
            }
        }
        Some(free)
    }

    /// Whether the pod would fit on `node` if the given allocations (on that
    /// node) were gone: preemption's question. Only that node is copied.
    pub fn fit_without(
        &self,
        plan: &PodPlan,
        node: &str,
        removed: &[(&str, &Allocation)],
    ) -> Result<(), Rejection> {
        let mut n = self
            .nodes
            .get(node)
            .ok_or(Rejection::NodeUnregistered)?
            .clone();
        for (_, a) in removed.iter().filter(|(_, a)| a.node == node) {
            for (uuid, u) in a.usage_on(&n) {
                if let Some(pos) = n.position(uuid) {
                    n.sub_usage(pos, &u);
                    n.count_tenant(pos, a.tenancy, u.cores, false);
                }
            }
        }
        self.fit_on(&n, plan, removed, &mut Scratch::default())
            .map(|_| ())
    }

    /// Sets the NUMA layout and availability of `node` from its
    /// NodeResourceTopology object (`None`: it has none).
    pub fn set_topology(&mut self, node: &str, topology: Option<NodeTopology>) {
        match topology {
            Some(t) => self.topologies.insert(node.to_string(), t),
            None => self.topologies.remove(node),
        };
    }

    pub fn topology(&self, node: &str) -> Option<&NodeTopology> {
        self.topologies.get(node)
    }

    /// UIDs of the placed pods whose NUMA zone takes on `node` still count
    /// (the node's object does not show them yet).
    pub fn unsettled_zone_takes(&self, node: &str) -> Vec<String> {
        self.zone_takes
            .by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter(|((hold, _), _)| !hold)
            .map(|((_, uid), _)| uid.clone())
            .collect()
    }

    /// How many placed pods' zone takes still count, over all nodes.
    pub fn unsettled_zone_take_count(&self) -> usize {
        self.zone_takes
            .by_node
            .values()
            .flat_map(|m| m.keys())
            .filter(|(hold, _)| !hold)
            .count()
    }

    /// The node's object now shows what pod `uid` takes of its zones: stop
    /// counting it. False when nothing was counted.
    pub fn settle_zone_take(&mut self, uid: &str) -> bool {
        let Some(node) = self.allocations.get(uid).map(|a| a.node.clone()) else {
            return false;
        };
        self.zone_takes.remove(&node, false, uid)
    }

    /// Evaluates, picks the best node and assigns GPUs there: HAMi's
    /// single-node answer.
    pub fn place(&self, plan: &PodPlan) -> Result<Allocation, Vec<(String, Rejection)>> {
        let eval = self.evaluate(plan, None);
        match eval.best() {
            Some(best) => self
                .assign(plan, best.node)
                .map_err(|r| vec![(best.node.to_string(), r)]),
            None => Err(eval.rejected),
        }
    }
}

/// Adds to `node`'s usage what the `held` allocations on it take; returns
/// the keys of those naming GPUs the node does not have (their other GPUs
/// still count).
fn add_usage_on(node: &mut Node, held: &HashMap<String, Allocation>) -> Vec<String> {
    let mut stale = Vec::new();
    let mut keys: Vec<&String> = held
        .iter()
        .filter(|(_, a)| a.node == node.name)
        .map(|(key, _)| key)
        .collect();
    keys.sort();
    for key in keys {
        let mut missing = false;
        let a = &held[key];
        for (uuid, u) in a.usage_on(node) {
            match node.position(uuid) {
                Some(pos) => {
                    node.add_usage(pos, &u);
                    node.count_tenant(pos, a.tenancy, u.cores, true);
                }
                None => missing = true,
            }
        }
        if missing {
            stale.push(key.clone());
        }
    }
    stale
}

/// Records `allocation` in `held` under `key` and adds it to its node's
/// usage, replacing what `key` held. Refused whole when the node or any
/// GPU is unknown.
fn record(
    nodes: &mut BTreeMap<String, Node>,
    (held, hold): (&mut HashMap<String, Allocation>, bool),
    zones: &mut ZoneTakes,
    key: &str,
    allocation: Allocation,
) -> Result<(), ApplyError> {
    let node = nodes
        .get(&allocation.node)
        .ok_or_else(|| ApplyError::UnknownNode {
            node: allocation.node.clone(),
        })?;
    let usage = allocation.usage_on(node);
    let mut positions = Vec::with_capacity(usage.len());
    for (uuid, u) in &usage {
        let pos = node.position(uuid).ok_or_else(|| ApplyError::UnknownGpu {
            node: allocation.node.clone(),
            uuid: uuid.to_string(),
        })?;
        positions.push((pos, *u));
    }
    forget(nodes, (held, hold), zones, key);
    if let Some(node) = nodes.get_mut(&allocation.node) {
        for (pos, u) in &positions {
            node.add_usage(*pos, u);
            node.count_tenant(*pos, allocation.tenancy, u.cores, true);
        }
    }
    zones.add(hold, key, &allocation);
    held.insert(key.to_string(), allocation);
    Ok(())
}

/// Forgets what `key` holds in `held` and frees its GPUs.
fn forget(
    nodes: &mut BTreeMap<String, Node>,
    (held, hold): (&mut HashMap<String, Allocation>, bool),
    zones: &mut ZoneTakes,
    key: &str,
) -> Option<Allocation> {
    let allocation = held.remove(key)?;
    zones.remove(&allocation.node, hold, key);
    if let Some(node) = nodes.get_mut(&allocation.node) {
        for (uuid, u) in allocation.usage_on(node) {
            if let Some(pos) = node.position(uuid) {
                node.sub_usage(pos, &u);
                node.count_tenant(pos, allocation.tenancy, u.cores, false);
            }
        }
    }
    Some(allocation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::{Gpu, Usage};
    use crate::engine::plan::whole_gpu_plan;
    use crate::engine::policy::NodePolicy;

    fn node(name: &str, gpus: u32) -> Node {
        Node::new(
            name,
            (0..gpus)
                .map(|i| {
                    Gpu::new(
                        format!("GPU-{name}-{i}"),
                        i,
                        "NVIDIA A100-SXM4-40GB",
                        Usage {
                            slices: 0,
                            unreserved: 0,
                            unreadable: 0,
                            slots: 10,
                            mem_mib: 40960,
                            cores: 100,
                        },
                    )
                })
                .collect(),
        )
    }

    fn state_with(used: &[(&str, u32, u32)]) -> ClusterState {
        let mut s = ClusterState::new();
        for (name, gpus, busy) in used {
            s.upsert_node(node(name, *gpus));
            for i in 0..*busy {
                let a = s
                    .assign(&whole_gpu_plan(NodePolicy::Binpack), name)
                    .unwrap();
                s.apply(&format!("{name}-pod-{i}"), a).unwrap();
            }
        }
        s
    }

    /// "Could it ever fit" asks a state with the same nodes and nothing
    /// on them: no allocation, no hold, no usage.
    #[test]
    fn an_emptied_state_has_the_nodes_and_nothing_on_them() {
        let mut s = state_with(&[("node1", 2, 2), ("node2", 1, 0)]);
        let a = s
            .assign(&whole_gpu_plan(NodePolicy::Binpack), "node2")
            .unwrap();
        s.apply_hold("held", a).unwrap();
        assert!(
            s.evaluate(&whole_gpu_plan(NodePolicy::Binpack), None)
                .best()
                .is_none()
        );
        let e = s.emptied();
        assert_eq!(e.nodes().count(), 2);
        assert_eq!(e.allocations().count(), 0);
        assert!(
            e.nodes()
                .all(|n| n.usage.iter().all(|u| *u == Usage::default())
                    && n.totals().slots_used == 0
                    && n.totals().mem_used_mib == 0
                    && n.totals().cores_used == 0)
        );
        let fits = e.evaluate(&whole_gpu_plan(NodePolicy::Binpack), None);
        assert_eq!(fits.feasible.len(), 2);
        // The original is untouched.
        assert_eq!(s.allocations().count(), 2);
    }

    #[test]
    fn design_document_node_example() {
        // node1 has 3 of 4 GPUs in use, node2 2 of 4 (HAMi's 10 vs 7.5).
        let s = state_with(&[("node1", 4, 3), ("node2", 4, 2)]);
        let bin = s.evaluate(&whole_gpu_plan(NodePolicy::Binpack), None);
        assert_eq!(bin.best().unwrap().node, "node1");
        let spread = s.evaluate(&whole_gpu_plan(NodePolicy::Spread), None);
        assert_eq!(spread.best().unwrap().node, "node2");
        assert!(bin.feasible[0].priority > bin.feasible[1].priority);
        assert!(spread.feasible[0].priority < spread.feasible[1].priority);
    }

    #[test]
    fn ties_go_to_the_lowest_node_name() {
        let s = state_with(&[("b", 4, 0), ("a", 4, 0), ("c", 4, 0)]);
        for p in [NodePolicy::Binpack, NodePolicy::Spread] {
            assert_eq!(
                s.evaluate(&whole_gpu_plan(p), None).best().unwrap().node,
                "a"
            );
        }
    }

    #[test]
    fn candidates_unknown_and_full_nodes_are_rejected_with_reasons() {
        let s = state_with(&[("full", 2, 2), ("free", 2, 0)]);
        let names = vec!["ghost".to_string(), "full".to_string(), "free".to_string()];
        let e = s.evaluate(&whole_gpu_plan(NodePolicy::Binpack), Some(&names));
        assert_eq!(e.feasible.len(), 1);
        assert_eq!(e.feasible[0].node, "free");
        let rejected: Vec<(String, String)> = e
            .rejected
            .iter()
            .map(|(n, r)| (n.clone(), r.to_string()))
            .collect();
        assert_eq!(
            rejected,
            [
                ("full".to_string(), "2/2 CardInsufficientMemory".to_string()),
                ("ghost".to_string(), "node unregistered".to_string()),
            ]
        );
    }

    /// The merge walk and the per-name search find the same nodes.
    fn walk_matches_search(nodes: &[String], candidates: &[String]) {
        let mut s = ClusterState::new();
        for n in nodes {
            s.upsert_node(node(n, 1));
        }
        let names = |walk: bool| -> Vec<(String, Option<String>)> {
            s.candidate_nodes(candidates, walk)
                .into_iter()
                .map(|(n, node)| (n.clone(), node.map(|x| x.name.clone())))
                .collect()
        };
        assert_eq!(names(true), names(false), "{nodes:?} {candidates:?}");
    }

    #[test]
    fn candidates_are_found_the_same_by_walk_and_by_search() {
        let v = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        walk_matches_search(&v(&["b", "d"]), &v(&[]));
        walk_matches_search(&v(&[]), &v(&["a", "b"]));
        walk_matches_search(
            &v(&["b", "bb", "d", "f"]),
            &v(&["g", "a", "b", "b", "c", "bb", "ba", "f", "", "d"]),
        );
        let s = state_with(&[("x", 1, 0), ("y", 1, 0)]);
        let all = v(&["y", "x", "y"]);
        let walked = s.candidate_nodes(&all, true);
        assert_eq!(walked.len(), 2);
        assert_eq!(walked[0].1.unwrap().name, "x");
        // Whether the walk is used does not change the verdict.
        let plan = whole_gpu_plan(NodePolicy::Binpack);
        let few = v(&["y", "ghost"]);
        assert!(few.len() * WALK_RATIO >= s.nodes.len());
        let e = s.evaluate(&plan, Some(&few));
        assert_eq!(e.feasible[0].node, "y");
        assert_eq!(e.rejected[0].0, "ghost");
    }

    proptest::proptest! {
        #[test]
        fn walk_and_search_agree(
            nodes in proptest::collection::vec("[a-c]{0,3}", 0..12),
            candidates in proptest::collection::vec("[a-c]{0,3}", 0..12),
        ) {
            walk_matches_search(&nodes, &candidates);
        }
    }

    #[test]
    fn apply_and_remove_are_inverse() {
        let mut s = state_with(&[("n", 4, 0)]);
        let before = s.node("n").unwrap().clone();
        let a = s.assign(&whole_gpu_plan(NodePolicy::Binpack), "n").unwrap();
        s.apply("uid-1", a.clone()).unwrap();
        assert_ne!(s.node("n").unwrap(), &before);
        // Re-applying the same pod replaces, never doubles.
        s.apply("uid-1", a.clone()).unwrap();
        assert_eq!(s.node("n").unwrap().totals().cores_used, 100);
        assert_eq!(s.remove("uid-1"), Some(a));
        assert_eq!(s.node("n").unwrap(), &before);
        assert_eq!(s.remove("uid-1"), None);
    }

    #[test]
    fn apply_refuses_unknown_nodes_and_gpus_whole() {
        let mut s = state_with(&[("n", 1, 0)]);
        let mut a = s.assign(&whole_gpu_plan(NodePolicy::Binpack), "n").unwrap();
        a.containers[0].push(DeviceGrant {
            uuid: "GPU-gone".into(),
            kind: crate::devices::KindId::NVIDIA,
            mem_mib: 1,
            cores: 0,
            slots: 1,
            unreadable: false,
            device_type: None,
            mig: None,
        });
        assert_eq!(
            s.apply("u", a.clone()),
            Err(ApplyError::UnknownGpu {
                node: "n".into(),
                uuid: "GPU-gone".into()
            })
        );
        assert_eq!(s.node("n").unwrap().totals().slots_used, 0);
        a.node = "elsewhere".into();
        assert!(matches!(
            s.apply("u", a),
            Err(ApplyError::UnknownNode { .. })
        ));
    }

    #[test]
    fn re_registering_a_node_keeps_its_usage() {
        let mut s = state_with(&[("n", 2, 1)]);
        let used = *s.node("n").unwrap().totals();
        assert!(s.upsert_node(node("n", 2)).is_empty());
        assert_eq!(*s.node("n").unwrap().totals(), used);
        // A GPU disappears: the allocation on it is reported stale.
        assert_eq!(s.upsert_node(node("n", 0)), vec!["n-pod-0".to_string()]);
        // The node leaves and returns: its usage returns with it.
        s.remove_node("n");
        assert!(s.upsert_node(node("n", 2)).is_empty());
        assert_eq!(*s.node("n").unwrap().totals(), used);
    }

    #[test]
    fn holds_count_as_used_apart_from_the_pods_allocations() {
        let mut s = state_with(&[("n", 1, 0)]);
        let before = s.node("n").unwrap().clone();
        let plan = whole_gpu_plan(NodePolicy::Binpack);
        let a = s.assign(&plan, "n").unwrap();
        s.apply_hold("member", a.clone()).unwrap();
        // The one GPU is held: the pod under the same UID is not placed, and
        // another pod finds no room.
        assert_eq!(s.allocation("member"), None);
        assert_eq!(s.allocations().count(), 0);
        assert!(s.assign(&plan, "n").is_err());
        // A hold survives the node's re-registration, as allocations do.
        assert!(s.upsert_node(node("n", 1)).is_empty());
        assert!(s.assign(&plan, "n").is_err());
        assert_eq!(
            s.remove("member"),
            None,
            "a hold is not the pod's allocation"
        );
        assert_eq!(s.remove_hold("member"), Some(a));
        assert_eq!(s.node("n").unwrap(), &before);
    }

    /// Two nodes of one GPU on zone 0, each with a `single-numa-node`
    /// object; `a` has 8 CPUs free on the zone, `b` 32.
    fn numa_state() -> (ClusterState, PodPlan) {
        use crate::engine::numa::{
            CpuMemory, NumaRequest, NumaZone, TopologyPolicy, TopologyScope,
        };
        let mut s = state_with(&[("a", 1, 0), ("b", 1, 0)]);
        for (name, cpus) in [("a", 8), ("b", 32)] {
            let free = CpuMemory {
                cpu_milli: cpus * 1000,
                memory_bytes: 64 << 30,
            };
            s.set_topology(
                name,
                Some(NodeTopology {
                    policy: TopologyPolicy::SingleNumaNode,
                    scope: TopologyScope::Container,
                    zones: vec![NumaZone {
                        id: 0,
                        available: free,
                        allocatable: free,
                    }],
                }),
            );
        }
        let mut plan = whole_gpu_plan(NodePolicy::Binpack);
        plan.numa = NumaRequest {
            guaranteed: true,
            containers: vec![CpuMemory {
                cpu_milli: 4000,
                memory_bytes: 8 << 30,
            }],
        };
        (s, plan)
    }

    /// The NUMA score joins the node policy's: both nodes are equal for
    /// binpack (empty), so the strategy decides; weight 0 leaves the node
    /// policy (and the lowest name) alone.
    #[test]
    fn numa_scoring_ranks_equal_nodes_by_their_zones() {
        use crate::engine::numa_score::{NumaScoring, NumaStrategy};
        let (s, mut plan) = numa_state();
        let best = |plan: &PodPlan| s.evaluate(plan, None).best().unwrap().node.to_string();
        plan.numa_scoring = NumaScoring {
            strategy: NumaStrategy::LeastAllocated,
            weight: 1,
        };
        assert_eq!(best(&plan), "b");
        let e = s.evaluate(&plan, None);
        assert!(e.feasible[1].priority > e.feasible[0].priority, "{e:?}");
        assert_eq!(e.feasible[1].numa.as_ref().unwrap().zones, [Some(0)]);
        plan.numa_scoring.strategy = NumaStrategy::MostAllocated;
        assert_eq!(best(&plan), "a");
        plan.numa_scoring.weight = 0;
        assert_eq!(best(&plan), "a");
        plan.numa_scoring = NumaScoring {
            strategy: NumaStrategy::LeastAllocated,
            weight: 0,
        };
        assert_eq!(best(&plan), "a");
        // A pod that is not Guaranteed is neither aligned nor NUMA-scored.
        plan.numa.guaranteed = false;
        plan.numa_scoring.weight = 1;
        let e = s.evaluate(&plan, None);
        assert!(e.feasible.iter().all(|f| f.numa.is_none()));
        assert_eq!(e.best().unwrap().node, "a");
    }

    /// What bind commits carries the zones; applying it counts its take
    /// against the zone until settled, and preemption's question gives
    /// the take back for the pods it would remove.
    #[test]
    fn zone_takes_follow_allocations() {
        let (mut s, plan) = numa_state();
        let mut big = plan.clone();
        big.numa.containers[0].cpu_milli = 6000;
        let a = s.assign(&big, "a").unwrap();
        assert_eq!(a.numa.as_ref().unwrap().zone_ids().collect::<Vec<_>>(), [0]);
        s.apply("first", a.clone()).unwrap();
        assert_eq!(s.unsettled_zone_takes("a"), ["first"]);
        // GPU 0 of `a` is taken whole too: free a GPU for the question.
        let e = s.assign(&plan, "a").unwrap_err();
        assert!(matches!(e, Rejection::Devices { .. }), "{e}");
        assert!(s.fit_without(&plan, "a", &[("first", &a)]).is_ok());
        // The pod leaves; the object shows its CPUs free again.
        let mut freed = s.topology("a").unwrap().clone();
        freed.zones[0].available.cpu_milli = 8000;
        s.set_topology("a", Some(freed));
        assert!(s.settle_zone_take("first"));
        assert!(s.unsettled_zone_takes("a").is_empty());
        assert!(!s.settle_zone_take("first"));
        // Settled: the object is taken to show its 6 CPUs (as it would,
        // 8 - 6 = 2 left); preemption's question gives them back.
        let mut shown = s.topology("a").unwrap().clone();
        shown.zones[0].available.cpu_milli = 2000;
        s.set_topology("a", Some(shown));
        assert!(s.fit_without(&plan, "a", &[]).is_err());
        assert!(s.fit_without(&plan, "a", &[("first", &a)]).is_ok());
        // The pod leaves; the object shows its CPUs free again.
        let mut freed = s.topology("a").unwrap().clone();
        freed.zones[0].available.cpu_milli = 8000;
        s.set_topology("a", Some(freed));
        // Holds count too, and go with the hold: a slice of 6 CPUs held,
        // a second slice of 4 CPUs finds room on the GPU but not the zone.
        s.remove("first");
        let slice = |cpus: u64| {
            let mut p = plan.clone();
            p.request.containers[0].gpu = Some(crate::engine::GpuRequest {
                count: 1,
                memory: crate::engine::Memory::Mib(100),
                cores: 0,
            });
            p.numa.containers[0].cpu_milli = cpus * 1000;
            p
        };
        let held = s.assign(&slice(6), "a").unwrap();
        s.apply_hold("member", held).unwrap();
        assert!(
            s.unsettled_zone_takes("a").is_empty(),
            "holds are not pods' takes"
        );
        let e = s.assign(&slice(4), "a").unwrap_err();
        assert_eq!(
            e.to_string(),
            "1/1 NumaZoneInsufficientCPU (one NUMA zone for container c)"
        );
        s.remove_hold("member");
        assert!(s.assign(&slice(4), "a").is_ok());
    }
}
