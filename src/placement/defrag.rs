//! Defragmentation's rules, as functions of the view: which pods may move
//! (docs/policies.md, "Defragmentation") and the plan for a pending pod
//! that fits nowhere, searched by `engine::defrag` on the view's state.
//! `gpugate explain`, `gpugate defrag --plan` and the controller that acts
//! (`controllers::defragmentation`) all plan through here.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::cluster::convert::{membership, pod_finished, pod_priority};
use crate::cluster::view::{BudgetedPod, Budgets};
use crate::cluster::{ClusterView, pod_name, pod_namespace};
use crate::config::Config;
use crate::config::namespace_policy::policy_for_namespace;
use crate::engine::defrag::{GangSearch, Movable, Rules, Search, search, search_gang};
use crate::engine::gang::{GangKey, group_key};
use crate::engine::{ClusterState, PodPlan};

use super::pod::{PodToPlace, plan_of};
use super::scheduler_checks;

/// A pod annotation that keeps a pod from ever being moved, whatever its
/// namespace's policy: `gpugate.io/movable: "false"`.
pub const MOVABLE: &str = "gpugate.io/movable";

/// Owner kinds whose controllers recreate an evicted pod as it was. Not
/// Jobs: an evicted Job pod is a failed attempt (it counts against
/// `backoffLimit` unless a `podFailurePolicy` ignores disruptions) and
/// starts over.
const RECREATING_OWNERS: [&str; 2] = ["ReplicaSet", "StatefulSet"];

/// Why a GPU holder may not be moved (`explain` counts them; `as_str`
/// reads after a count: "3 not recreated by …").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unmovable {
    /// Its namespace's policy does not say `movable: true`.
    NamespaceNotOptedIn,
    /// It carries `gpugate.io/movable: "false"`.
    OptedOut,
    /// No ReplicaSet or StatefulSet would recreate it (a Job's evicted pod
    /// counts against its backoffLimit and loses its progress: not a move).
    NotRecreated,
    /// It belongs to a gang group.
    GangMember,
    /// Its priority is above the pending pod's.
    HigherPriority,
    /// It was created (or moved) too recently.
    MovedRecently,
    /// It is not settled on its node (binding, terminating, a victim
    /// already, or its allocation is not counted).
    NotSettled,
    /// Its CPUs, memory and GPUs are aligned to NUMA zones (a Guaranteed
    /// pod on a node with a NodeResourceTopology object): not planned.
    NumaAligned,
}

impl Unmovable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unmovable::NamespaceNotOptedIn => "in a namespace that did not opt in",
            Unmovable::OptedOut => "annotated gpugate.io/movable: \"false\"",
            Unmovable::NotRecreated => "not recreated by a ReplicaSet or StatefulSet",
            Unmovable::GangMember => "in a gang group",
            Unmovable::HigherPriority => "of a higher priority",
            Unmovable::MovedRecently => "created or moved too recently",
            Unmovable::NotSettled => "not settled on its node",
            Unmovable::NumaAligned => "aligned to NUMA zones",
        }
    }
}

/// The controller (ReplicaSet or StatefulSet) that recreates `pod`:
/// its kind and UID.
pub fn recreating_owner(pod: &Pod) -> Option<(&str, &str)> {
    pod.metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .filter(|o| RECREATING_OWNERS.contains(&o.kind.as_str()))
        .map(|o| (o.kind.as_str(), o.uid.as_str()))
}

/// Whether the namespace's policy lets defragmentation move its pods.
pub fn namespace_movable(view: &ClusterView, config: &Config, namespace: &str) -> bool {
    policy_for_namespace(
        &config.namespace_policies,
        namespace,
        view.namespace_labels(namespace),
    )
    .is_some_and(|p| p.movable)
}

/// Whether `pod` may be moved for `pending` at `now`, as a [`Movable`].
pub fn movable(
    view: &ClusterView,
    config: &Config,
    pending: &PodToPlace,
    pod: &Pod,
    now: Timestamp,
) -> Result<Movable, Unmovable> {
    let opted_in = namespace_movable(view, config, pod_namespace(pod));
    let node = may_move(view, config, pending, pod, now, opted_in)?;
    as_movable(config, pod, node)
}

/// Every rule but the plan (which needs no view and is the costly part):
/// the node the pod may be moved from.
fn may_move(
    view: &ClusterView,
    config: &Config,
    pending: &PodToPlace,
    pod: &Pod,
    now: Timestamp,
    opted_in: bool,
) -> Result<String, Unmovable> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let namespace = pod_namespace(pod);
    let node = view
        .held_allocation(uid)
        .filter(|a| a.grant_count() > 0)
        .map(|a| a.node.clone());
    let settled = node.is_some()
        && view.held_bound(uid)
        && !view.is_reserved(uid)
        && !view.is_nominated_victim(uid)
        && view.state().allocation(uid).is_some()
        && pod.metadata.deletion_timestamp.is_none()
        && !pod_finished(pod)
        && uid != pending.uid();
    let Some(node) = node.filter(|_| settled) else {
        return Err(Unmovable::NotSettled);
    };
    // What an aligned pod takes of its zones is not given back exactly by
    // the search's remove and restore; such pods are not moved.
    if view.held_allocation(uid).is_some_and(|a| a.numa.is_some()) {
        return Err(Unmovable::NumaAligned);
    }
    if !opted_in {
        return Err(Unmovable::NamespaceNotOptedIn);
    }
    let annotations = pod.metadata.annotations.as_ref();
    if annotations
        .and_then(|a| a.get(MOVABLE))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("false"))
    {
        return Err(Unmovable::OptedOut);
    }
    if recreating_owner(pod).is_none() {
        return Err(Unmovable::NotRecreated);
    }
    if view.gang_of(uid).is_some() || group_key(namespace, membership(pod)).is_some() {
        return Err(Unmovable::GangMember);
    }
    if pod_priority(pod) > pending.priority {
        return Err(Unmovable::HigherPriority);
    }
    let window = i64::try_from(config.scheduler.defragmentation.min_seconds_between_moves)
        .unwrap_or(i64::MAX);
    if now.as_second().saturating_sub(created(pod)) < window {
        return Err(Unmovable::MovedRecently);
    }
    Ok(node)
}

/// When the pod was created (Unix seconds; never, when unknown).
fn created(pod: &Pod) -> i64 {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(i64::MAX)
}

/// `pod`, which may move from `node`, with its replacement's plan.
fn as_movable(config: &Config, pod: &Pod, node: String) -> Result<Movable, Unmovable> {
    let plan = plan_of(pod, config).map_err(|_| Unmovable::NotSettled)?;
    Ok(Movable {
        key: pod.metadata.uid.clone().unwrap_or_default(),
        node,
        plan,
        priority: pod_priority(pod),
        since: created(pod),
    })
}

/// The pods of `pods` that may move for `pending`.
pub fn movers(
    view: &ClusterView,
    config: &Config,
    pending: &PodToPlace,
    pods: &[Pod],
    now: Timestamp,
) -> Vec<Movable> {
    let held = held_movers(view, config, pending, pods, now);
    finish_movers(config, pods, held)
}

/// Which of `pods` may move as far as the view says (every rule but the
/// plan): their index in `pods` and their node. The cheap part, under the
/// view's lock in `serve`.
pub fn held_movers(
    view: &ClusterView,
    config: &Config,
    pending: &PodToPlace,
    pods: &[Pod],
    now: Timestamp,
) -> Vec<(usize, String)> {
    // The namespace policy is judged once per namespace.
    let mut opted_in: HashMap<&str, bool> = HashMap::new();
    pods.iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let ns = pod_namespace(p);
            let ok = *opted_in
                .entry(ns)
                .or_insert_with(|| namespace_movable(view, config, ns));
            Some((i, may_move(view, config, pending, p, now, ok).ok()?))
        })
        .collect()
}

/// [`held_movers`] with their replacements' plans: no view needed.
pub fn finish_movers(config: &Config, pods: &[Pod], held: Vec<(usize, String)>) -> Vec<Movable> {
    held.into_iter()
        .filter_map(|(i, node)| as_movable(config, pods.get(i)?, node).ok())
        .collect()
}

/// The place held for `pod` if it replaces a moved pod (same owner, same
/// plan): the hold's key and node.
pub fn held_destination(view: &ClusterView, pod: &PodToPlace) -> Option<(String, String)> {
    if view.destination_count() == 0 {
        return None;
    }
    let (_, owner) = recreating_owner(pod.pod())?;
    view.destination_for(owner, &pod.plan)
        .map(|(k, n)| (k.to_string(), n.to_string()))
}

/// One pod of a plan, named.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedMove {
    pub uid: String,
    /// `namespace/name`.
    pub pod: String,
    pub from: String,
    pub to: String,
    /// The controller that recreates it: kind and UID.
    pub owner: (String, String),
    /// The replacement's GPUs on `to`, as the search placed them.
    pub allocation: crate::engine::Allocation,
    /// Its replacement's plan (the same pod created again).
    pub plan: crate::engine::PodPlan,
}

/// A plan, with the pods named.
#[derive(Debug, Clone, PartialEq)]
pub struct DefragPlan {
    /// Where the pending pod goes, and its GPUs there once the moves are
    /// made.
    pub node: String,
    pub allocation: crate::engine::Allocation,
    pub moves: Vec<PlannedMove>,
}

/// What defragmentation says of a pending pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It fits now, or asks for no GPU: nothing to move.
    NotNeeded,
    /// It belongs to a gang group: gangs are not planned for.
    GangMember,
    Plan(DefragPlan),
    /// No plan of at most `maxMoves` moves (`exhaustive`: every set was
    /// tried; otherwise the search budget ran out first). `movable`
    /// counts the GPU holders that may move.
    NoPlan {
        exhaustive: bool,
        movable: usize,
    },
}

/// The plan for `pending` among `nodes` (every node when `None`), moving
/// some of `pods` (any pods; those that may not move are left out; a
/// pod's replacement lands only where `node_objects` say kube-scheduler's
/// own filters let it, when they are given).
pub fn plan(
    view: &ClusterView,
    config: &Config,
    pending: &PodToPlace,
    nodes: Option<&[String]>,
    pods: &[Pod],
    node_objects: Option<&[Node]>,
    now: Timestamp,
) -> Outcome {
    let movers = movers(view, config, pending, pods, now);
    let inputs = Inputs {
        nodes,
        pods,
        node_objects,
        barred: &[],
    };
    plan_among(view, config, pending, movers, &inputs, &|| false)
}

/// The search among `movers` on a copy of the view's state (in `serve`
/// the copy is taken under the lock and the search runs without:
/// [`plan_on`]).
pub fn plan_among(
    view: &ClusterView,
    config: &Config,
    pending: &PodToPlace,
    movers: Vec<Movable>,
    inputs: &Inputs<'_>,
    stop: &dyn Fn() -> bool,
) -> Outcome {
    let state = view
        .state()
        .copy_for_moves(movers.iter().map(|m| m.key.as_str()));
    plan_on(state, view.budgets(), config, pending, movers, inputs, stop)
}

/// What a plan is searched among, beside the state.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The pending pod's nodes (every node when `None`).
    pub nodes: Option<&'a [String]>,
    /// The pods the movers were chosen from (for their names, owners,
    /// labels and scheduling constraints).
    pub pods: &'a [Pod],
    /// Node objects, for kube-scheduler's own filters on destinations.
    pub node_objects: Option<&'a [Node]>,
    /// Pods (UID) never to land on a node.
    pub barred: &'a [(String, String)],
}

/// The search on `state` (a copy of the view's,
/// [`ClusterState::copy_for_moves`] of the movers, so that no lock is held
/// while it runs) with the view's `budgets`; `stop` ends it early (a
/// deadline).
pub fn plan_on(
    mut state: ClusterState,
    budgets: &Budgets,
    config: &Config,
    pending: &PodToPlace,
    movers: Vec<Movable>,
    inputs: &Inputs<'_>,
    stop: &dyn Fn() -> bool,
) -> Outcome {
    if !pending.plan.request.has_gpus() {
        return Outcome::NotNeeded;
    }
    if !matches!(pending.gang(), Ok(None)) {
        return Outcome::GangMember;
    }
    let found = with_rules(budgets, config, inputs, stop, |rules| {
        search(&mut state, &pending.plan, inputs.nodes, &movers, rules)
    });
    match found {
        Search::FitsNow => Outcome::NotNeeded,
        Search::NoPlan { exhaustive } => Outcome::NoPlan {
            exhaustive,
            movable: movers.len(),
        },
        Search::Found(p) => Outcome::Plan(DefragPlan {
            node: p.node,
            allocation: p.allocation,
            moves: named_moves(p.moves, inputs.pods, &movers),
        }),
    }
}

/// A gang's plan, with the pods named: every member's place (by member
/// key) once the moves are made.
#[derive(Debug, Clone, PartialEq)]
pub struct GangDefragPlan {
    pub places: Vec<(String, crate::engine::Allocation)>,
    pub moves: Vec<PlannedMove>,
}

impl GangDefragPlan {
    /// "moving 2 pods: ml/a (n1 → n2), ml/b (n1 → n3)".
    pub fn describe(&self) -> String {
        format!(
            "moving {} pod{}: {}",
            self.moves.len(),
            if self.moves.len() == 1 { "" } else { "s" },
            moves_words(&self.moves)
        )
    }
}

/// What defragmentation says of a gang that must be placed at once.
#[derive(Debug, Clone, PartialEq)]
pub enum GangOutcome {
    /// Every member fits now: nothing to move.
    NotNeeded,
    Plan(GangDefragPlan),
    /// No plan of at most `maxMoves` moves in all (see [`Outcome::NoPlan`]).
    NoPlan {
        exhaustive: bool,
        movable: usize,
    },
}

/// The plan for a gang whose members (`pending[i]`, by member key, among
/// `candidates[i]`) must all be placed at once, moving some of `movers`
/// ([`crate::engine::defrag::search_gang`]: member by member, largest
/// first; `maxMoves` and the search budget count for the whole gang), on
/// `state` (a copy, as for [`plan_on`]).
#[allow(clippy::too_many_arguments)]
pub fn plan_gang_on(
    mut state: ClusterState,
    budgets: &Budgets,
    config: &Config,
    pending: &[(String, PodPlan)],
    candidates: &[Option<&[String]>],
    movers: Vec<Movable>,
    inputs: &Inputs<'_>,
    stop: &dyn Fn() -> bool,
) -> GangOutcome {
    let found = with_rules(budgets, config, inputs, stop, |rules| {
        search_gang(&mut state, pending, candidates, &movers, rules)
    });
    match found {
        GangSearch::FitsNow => GangOutcome::NotNeeded,
        GangSearch::NoPlan { exhaustive } => GangOutcome::NoPlan {
            exhaustive,
            movable: movers.len(),
        },
        GangSearch::Found(p) => GangOutcome::Plan(GangDefragPlan {
            places: p.places,
            moves: named_moves(p.moves, inputs.pods, &movers),
        }),
    }
}

/// Whether every pod of `moves` is still where the plan found it (bound,
/// on the node it moves from); if not, which one is not.
pub fn moved_pods_in_place(view: &ClusterView, moves: &[PlannedMove]) -> Result<(), String> {
    for m in moves {
        if view.held_allocation(&m.uid).map(|a| a.node.as_str()) != Some(m.from.as_str())
            || !view.held_bound(&m.uid)
        {
            return Err(format!("{} is no longer on node {}", m.pod, m.from));
        }
        // Another plan (a pod's, a workload's) searched at the same time
        // moves it already.
        if view.is_being_moved(&m.uid) {
            return Err(format!("{} is being moved by another plan", m.pod));
        }
    }
    Ok(())
}

/// Holds, until `until`, a place for each replacement of `moves` on the
/// GPUs planned (destination group `group`), checking that each is free
/// now but those on a node another moved pod leaves (held once it has).
/// If one is not, the group's places are given back and why is returned.
pub fn hold_replacements(
    view: &mut ClusterView,
    group: &str,
    moves: &[PlannedMove],
    until: i64,
) -> Result<(), String> {
    let left: std::collections::HashSet<&str> = moves.iter().map(|m| m.from.as_str()).collect();
    for m in moves {
        let gpus = m.allocation.gpu_uuids();
        let held = view.hold_destination(group, &m.uid, &m.owner.1, &m.plan, (&m.to, &gpus), until);
        if !held && !left.contains(m.to.as_str()) {
            view.release_destinations(group, &[]);
            return Err(format!("node {} no longer has room for {}", m.to, m.pod));
        }
    }
    Ok(())
}

/// Holds, until `until`, a gang plan's replacements' places (destination
/// group `moves`, one per plan: [`crate::cluster::view::gang_moves`];
/// [`hold_replacements`]) and
/// each member's place (waiting until the moved pods are gone:
/// [`ClusterView::hold_gang_place`]), once every moved pod is checked to be
/// where it was. A member's place not free now on a node no moved pod
/// leaves means the view changed since the search: nothing is held and
/// why is returned, as when a check fails.
pub fn hold_gang_plan(
    view: &mut ClusterView,
    (group, moves): (&GangKey, &str),
    pending: &[(String, PodPlan)],
    plan: &GangDefragPlan,
    until: i64,
) -> Result<(), String> {
    moved_pods_in_place(view, &plan.moves)?;
    hold_replacements(view, moves, &plan.moves, until)?;
    view.release_gang_places(group);
    let left: std::collections::HashSet<&str> =
        plan.moves.iter().map(|m| m.from.as_str()).collect();
    for (key, allocation) in &plan.places {
        let Some((_, member)) = pending.iter().find(|(k, _)| k == key) else {
            continue;
        };
        let held = view.hold_gang_place(group, key, member, allocation, until);
        if !held && !left.contains(allocation.node.as_str()) {
            view.release_gang_places(group);
            view.release_destinations(moves, &[]);
            return Err(format!(
                "node {} no longer has room for {key}",
                allocation.node
            ));
        }
    }
    Ok(())
}

/// Runs `search` with defragmentation's [`Rules`]: the config's bounds,
/// the view's PodDisruptionBudgets over `inputs.pods`, and kube-scheduler's
/// own filters on each destination (`inputs.node_objects`, `inputs.barred`).
fn with_rules<T>(
    budgets: &Budgets,
    config: &Config,
    inputs: &Inputs<'_>,
    stop: &dyn Fn() -> bool,
    search: impl FnOnce(&Rules<'_>) -> T,
) -> T {
    let by_uid = pods_by_uid(inputs.pods);
    let node_objects: BTreeMap<&str, &Node> = inputs
        .node_objects
        .unwrap_or_default()
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let empty = BTreeMap::new();
    let breaks = |uids: &[&str]| {
        let pods = uids
            .iter()
            .filter_map(|u| by_uid.get(u))
            .map(|p| BudgetedPod {
                namespace: pod_namespace(p),
                name: p.metadata.name.as_deref().unwrap_or_default(),
                labels: p.metadata.labels.as_ref().unwrap_or(&empty),
            });
        budgets.violations(pods).contains(&true)
    };
    let may_land = |m: &Movable, node: &str| {
        if inputs
            .barred
            .iter()
            .any(|(uid, n)| *uid == m.key && n == node)
        {
            return false;
        }
        match (node_objects.get(node), by_uid.get(m.key.as_str())) {
            (Some(n), Some(p)) => scheduler_checks::excluded(p, n).is_none(),
            _ => true,
        }
    };
    let d = &config.scheduler.defragmentation;
    search(&Rules {
        max_moves: d.max_moves,
        budget: d.search_budget,
        breaks_budget: &breaks,
        may_land: &may_land,
        stop,
    })
}

fn pods_by_uid(pods: &[Pod]) -> HashMap<&str, &Pod> {
    pods.iter()
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
        .collect()
}

/// The engine's moves, with each pod's name, owner and replacement plan.
fn named_moves(
    moves: Vec<crate::engine::defrag::Move>,
    pods: &[Pod],
    movers: &[Movable],
) -> Vec<PlannedMove> {
    let by_uid = pods_by_uid(pods);
    moves
        .into_iter()
        .filter_map(|m| {
            let pod = by_uid.get(m.key.as_str());
            let owner = pod
                .and_then(|p| recreating_owner(p))
                .map(|(k, u)| (k.to_string(), u.to_string()))
                .unwrap_or_default();
            let plan = movers.iter().find(|x| x.key == m.key)?.plan.clone();
            Some(PlannedMove {
                pod: pod.map(|p| pod_name(p)).unwrap_or_default(),
                uid: m.key,
                from: m.from,
                to: m.to,
                owner,
                allocation: m.allocation,
                plan,
            })
        })
        .collect()
}

/// "ml/a (n1 → n2), ml/b (n1 → n3)".
fn moves_words(moves: &[PlannedMove]) -> String {
    moves
        .iter()
        .map(|m| format!("{} ({} → {})", m.pod, m.from, m.to))
        .collect::<Vec<_>>()
        .join(", ")
}

impl DefragPlan {
    /// "fits on node n1 after moving ml/a (n1 → n2), ml/b (n1 → n3)".
    pub fn describe(&self) -> String {
        format!(
            "fits on node {} after moving {} pod{}: {}",
            self.node,
            self.moves.len(),
            if self.moves.len() == 1 { "" } else { "s" },
            moves_words(&self.moves)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;
    use crate::placement::{NodeReason, Verdict, judge, reserve};

    /// Two one-GPU nodes (16,000 MiB), n1 with 4,000 MiB used.
    fn cluster() -> Snapshot {
        let node = |n: &str| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {n}\n  annotations:\n    hami.io/node-nvidia-register: '[{{\"id\":\"{n}-0\",\"index\":0,\"count\":10,\"devmem\":16000,\"devcore\":100,\"type\":\"T4\",\"health\":true}}]'\n"
            )
        };
        let running = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: old\n  namespace: apps\n  uid: old\n  annotations:\n    hami.io/vgpu-node: n1\n    hami.io/vgpu-devices-allocated: 'n1-0,NVIDIA,4000,0:;'\nspec:\n  nodeName: n1\n  containers: [{name: c}]\nstatus: {phase: Running}\n";
        Snapshot::from_yaml(
            &[node("n1"), node("n2"), running.into()].join("---\n"),
            "test",
        )
        .unwrap()
    }

    fn pod(name: &str, owner: Option<&str>, mib: u32) -> Pod {
        let mut p = serde_json::json!({
            "metadata": {"name": name, "namespace": "apps", "uid": name},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": mib.to_string()}}}]},
        });
        if let Some(owner) = owner {
            p["metadata"]["ownerReferences"] = serde_json::json!([{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                "uid": owner, "controller": true}]);
        }
        serde_json::from_value(p).unwrap()
    }

    /// A place held on n2 for a replacement of ReplicaSet rs: other pods
    /// do not get it; the replacement (same owner, same plan) is judged
    /// with it free and sent there; its reservation takes the place, and
    /// a failed one gives it back.
    #[test]
    fn a_held_place_is_for_the_replacement_only() {
        let (mut view, _) = cluster().to_view();
        let config = Config::default();
        let now = Timestamp::now();
        let replacement = PodToPlace::read(pod("new", Some("rs"), 12000), &config, &view).unwrap();
        assert!(view.hold_destination(
            "pending",
            "moved",
            "rs",
            &replacement.plan,
            ("n2", &[]),
            i64::MAX
        ));
        // 12,000 MiB on n2 held: a stranger of 5,000 MiB fits only on n1.
        let stranger = PodToPlace::read(pod("other", None, 5000), &config, &view).unwrap();
        let Verdict::Nodes(v) = judge(&view, &config, &stranger, None, now) else {
            panic!()
        };
        let feasible: Vec<&str> = v.feasible.iter().map(|f| f.node.as_str()).collect();
        assert_eq!(feasible, ["n1"]);
        // Same owner, another shape: not the replacement.
        let other_shape = PodToPlace::read(pod("new2", Some("rs"), 2000), &config, &view).unwrap();
        assert_eq!(held_destination(&view, &other_shape), None);
        // The replacement: only n2, n1 set aside for it.
        let Verdict::Nodes(v) = judge(&view, &config, &replacement, None, now) else {
            panic!()
        };
        let feasible: Vec<&str> = v.feasible.iter().map(|f| f.node.as_str()).collect();
        assert_eq!(feasible, ["n2"]);
        assert!(v.rejected.contains(&(
            "n1".to_string(),
            NodeReason::MoveDestination { node: "n2".into() }
        )));
        // A reservation that fails (an unknown node) gives the place back.
        assert!(reserve(&mut view, &config, &replacement, "new", "n9", now).is_err());
        assert_eq!(view.destination_count(), 1);
        let (_, r) = reserve(&mut view, &config, &replacement, "new", "n2", now).unwrap();
        r.settle(&mut view);
        assert_eq!(view.destination_count(), 0);
        // The place is the replacement's own now: nothing is held twice.
        let after = PodToPlace::read(pod("late", None, 4000), &config, &view).unwrap();
        let Verdict::Nodes(v) = judge(&view, &config, &after, Some(&["n2".to_string()]), now)
        else {
            panic!()
        };
        assert_eq!(v.feasible.len(), 1);
    }

    /// A place that is not free yet (another moved pod still holds it) is
    /// held the moment it is, and ends with its time.
    #[test]
    fn a_place_is_held_once_free_and_ends_by_time() {
        let (mut view, _) = cluster().to_view();
        let config = Config::default();
        let big = PodToPlace::read(pod("new", Some("rs"), 14000), &config, &view).unwrap();
        assert!(!view.hold_destination("pending", "moved", "rs", &big.plan, ("n1", &[]), 1_000));
        let n1 = ["n1".to_string()];
        let fits_n1 = |view: &ClusterView, mib| {
            let p = PodToPlace::read(pod("x", None, mib), &config, view).unwrap();
            matches!(judge(view, &config, &p, Some(&n1), Timestamp::now()), Verdict::Nodes(v) if !v.feasible.is_empty())
        };
        assert!(fits_n1(&view, 12000));
        view.delete_pod("old");
        assert!(!fits_n1(&view, 2001));
        assert!(fits_n1(&view, 2000));
        assert_eq!(view.expire(1_000).destinations, 1);
        assert!(fits_n1(&view, 16000));
    }

    /// Who may move: a ReplicaSet's pod of an opted-in namespace, created
    /// long enough ago; not a Job's (its evicted pod is a failed attempt),
    /// not a bare pod, not one that opted out or was created just now.
    #[test]
    fn who_may_move() {
        let yaml = |owner: &str, created: &str, extra: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: apps\n  uid: p\n  creationTimestamp: \"{created}\"\n{owner}  annotations:\n    hami.io/vgpu-node: n1\n    hami.io/vgpu-devices-allocated: 'n1-0,NVIDIA,4000,0:;'\n{extra}spec:\n  nodeName: n1\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '1', nvidia.com/gpumem: '4000'}}}}}}]\nstatus: {{phase: Running}}\n"
            )
        };
        let rs = "  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: rs, controller: true}]\n";
        let job = "  ownerReferences: [{apiVersion: batch/v1, kind: Job, name: j, uid: j, controller: true}]\n";
        let old = "2026-11-20T00:00:00Z";
        let now: Timestamp = "2026-11-25T12:00:00Z".parse().unwrap();
        let config = Config::from_yaml(
            "namespacePolicies: [{name: apps, namespaces: [apps], movable: true}]",
            "test",
        )
        .unwrap();
        let verdict = |pod_yaml: String, config: &Config| {
            let node = "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  annotations:\n    hami.io/node-nvidia-register: '[{\"id\":\"n1-0\",\"index\":0,\"count\":10,\"devmem\":16000,\"devcore\":100,\"type\":\"T4\",\"health\":true}]'\n";
            let snapshot = Snapshot::from_yaml(&format!("{node}---\n{pod_yaml}"), "test").unwrap();
            let (view, _) = snapshot.to_view();
            let pending = PodToPlace::read(pod("pending", None, 16000), config, &view).unwrap();
            movable(&view, config, &pending, &snapshot.pods[0], now).map(|m| m.node)
        };
        assert_eq!(verdict(yaml(rs, old, ""), &config), Ok("n1".to_string()));
        assert_eq!(
            verdict(yaml(job, old, ""), &config),
            Err(Unmovable::NotRecreated)
        );
        assert_eq!(
            verdict(yaml("", old, ""), &config),
            Err(Unmovable::NotRecreated)
        );
        assert_eq!(
            verdict(
                yaml(rs, old, "    gpugate.io/movable: \"false\"\n"),
                &config
            ),
            Err(Unmovable::OptedOut)
        );
        assert_eq!(
            verdict(yaml(rs, "2026-11-25T11:55:00Z", ""), &config),
            Err(Unmovable::MovedRecently)
        );
        assert_eq!(
            verdict(yaml(rs, old, ""), &Config::default()),
            Err(Unmovable::NamespaceNotOptedIn)
        );
        // A plan of maxMoves must fit in a minute's moves.
        let e = Config::from_yaml(
            "scheduler: {defragmentation: {maxMoves: 4, movesPerMinute: 3}}",
            "test",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("movesPerMinute (3) is below maxMoves (4)"),
            "{e}"
        );
    }
}
