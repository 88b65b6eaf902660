//! gpugate's own preemption choice, for a pod short only of GPU: where
//! kube-scheduler does not preempt (its dry run sees no victim it needs,
//! docs/operations.md "Preemption"), the nodes where evicting
//! lower-priority GPU holders lets the pod fit, best first, in
//! kube-scheduler's order of preemption candidates.

use jiff::Timestamp;

use std::collections::BTreeMap;

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::engine::gang::GangShortfall;
use crate::engine::{ClusterState, Rejection};

use super::pod::PodToPlace;
use super::victims::{Victims, gpu_victims_on};
use super::{NodeReason, Verdict, gang, judge};

/// Whether preempting pods on a node refused for this reason can help:
/// the node lacks free GPU (or NUMA zone) capacity, not GPUs at all.
pub fn capacity_shortage(reason: &NodeReason) -> bool {
    let engine = match reason {
        NodeReason::Engine(Rejection::OfKind { rejection, .. }) => Some(&**rejection),
        NodeReason::Engine(r) => Some(r),
        _ => None,
    };
    matches!(
        engine,
        Some(Rejection::Devices { .. } | Rejection::NumaZones { .. })
    ) && !reason.is_unresolvable()
}

/// Whether preemption may help a pod refused for this reason: capacity,
/// or its gang group's members not fitting together.
pub fn preemption_may_help(reason: &NodeReason) -> bool {
    capacity_shortage(reason) || matches!(reason, NodeReason::Gang(GangShortfall::NotFit { .. }))
}

/// A candidate for `node` with these victims.
fn candidate(view: &ClusterView, node: &str, victims: Victims) -> Candidate {
    let priorities = victims
        .pods
        .iter()
        .map(|uid| view.held_priority(uid).unwrap_or(0));
    Candidate {
        node: node.to_string(),
        top_priority: priorities.clone().max().unwrap_or(0),
        priority_sum: priorities.map(i64::from).sum(),
        victims,
    }
}

/// kube-scheduler's order of preemption candidates.
fn best_first(out: &mut [Candidate]) {
    out.sort_by(|a, b| {
        (
            a.victims.violations,
            a.top_priority,
            a.priority_sum,
            a.victims.pods.len(),
            &a.node,
        )
            .cmp(&(
                b.victims.violations,
                b.top_priority,
                b.priority_sum,
                b.victims.pods.len(),
                &b.node,
            ))
    });
}

/// Evicting `victims` from `node` makes room for the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub node: String,
    pub victims: Victims,
    /// The highest priority among the victims.
    pub top_priority: i32,
    /// Their priorities added up.
    pub priority_sum: i64,
}

/// Where the pod, which fits on none of the `nodes` now (kube-scheduler's
/// candidates, which passed its own filters), would fit after evicting
/// lower-priority GPU holders: every one refused for capacity (GPU or
/// NUMA zone), with its fewest victims, best first: fewest
/// PodDisruptionBudgets broken, then the lowest highest victim priority,
/// the lowest sum of priorities, the fewest victims, and the node's name.
/// Empty when the pod fits somewhere, may not preempt
/// (`preemptionPolicy: Never`), belongs to a gang group (its group is
/// preempted for as a whole: [`gang_plan`]), or no eviction helps.
pub fn candidates(
    view: &ClusterView,
    config: &Config,
    pod: &PodToPlace,
    nodes: &[String],
    now: Timestamp,
) -> Vec<Candidate> {
    if !pod.preempts || !matches!(pod.gang(), Ok(None)) {
        return Vec::new();
    }
    let (plan, priority) = (&pod.plan, pod.priority);
    let Verdict::Nodes(verdicts) = judge(view, config, pod, Some(nodes), now) else {
        return Vec::new();
    };
    if !verdicts.feasible.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Candidate> = verdicts
        .rejected
        .iter()
        .filter(|(_, r)| capacity_shortage(r))
        .filter_map(|(node, _)| {
            let victims = gpu_victims_on(view, view.state(), plan, node, &[], priority)?;
            (!victims.pods.is_empty()).then(|| candidate(view, node, victims))
        })
        .collect();
    best_first(&mut out);
    out
}

/// A pending gang group's preemption: the victims, by node, whose
/// eviction lets `min-available` members run together, and where each
/// pending member then goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GangPreemption {
    pub victims: BTreeMap<String, Victims>,
    /// Member UIDs and their nodes, in placement order.
    pub members: Vec<(String, String)>,
}

/// All or none, for the gang group of `pod` (a member): its pending
/// members are placed one after another on the state without the group's
/// holds, among `nodes` (all when `None`); a member that fits nowhere gets
/// the best preemption candidate there, whose victims are then gone for
/// the members after it. `None` when the pod is in no group, may not
/// preempt, or some member still needed fits nowhere even so: then nothing
/// is to be evicted for any of them. Victims of one group are all below
/// the pod's priority.
pub fn gang_plan(
    view: &ClusterView,
    config: &Config,
    pod: &PodToPlace,
    nodes: Option<&[String]>,
) -> Option<GangPreemption> {
    if !pod.preempts {
        return None;
    }
    let priority = pod.priority;
    let label = pod.gang().ok()??;
    let (placed, pending) = gang::members(view, config, label, "");
    let min = label.min_members();
    if placed + pending.len() < min {
        return None;
    }
    let mut state: ClusterState = view.state_without_gang_holds(&label.key);
    let mut out = GangPreemption::default();
    for (uid, plan) in &pending {
        if placed + out.members.len() >= min {
            break;
        }
        let (fits_on, shortages): (Option<String>, Vec<String>) = {
            let eval = state.evaluate(plan, nodes);
            (
                eval.best().map(|b| b.node.to_string()),
                eval.rejected
                    .into_iter()
                    .filter(|(_, r)| capacity_shortage(&NodeReason::Engine(r.clone())))
                    .map(|(n, _)| n)
                    .collect(),
            )
        };
        let allocation = match fits_on {
            Some(node) => state.assign(plan, &node).ok()?,
            None => {
                let mut found: Vec<Candidate> = shortages
                    .iter()
                    .filter_map(|node| {
                        let v = gpu_victims_on(view, &state, plan, node, &[], priority)?;
                        Some(candidate(view, node, v))
                    })
                    .collect();
                best_first(&mut found);
                let c = found.into_iter().next()?;
                for v in &c.victims.pods {
                    state.remove(v);
                }
                let a = state.assign(plan, &c.node).ok()?;
                let entry = out.victims.entry(c.node.clone()).or_insert(Victims {
                    pods: Vec::new(),
                    violations: 0,
                });
                entry.pods.extend(c.victims.pods);
                entry.violations += c.victims.violations;
                a
            }
        };
        out.members.push((uid.clone(), allocation.node.clone()));
        state.apply(&format!("gang-trial/{uid}"), allocation).ok()?;
    }
    (placed + out.members.len() >= min).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;

    fn cluster() -> Snapshot {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/explain/cluster.yaml");
        Snapshot::load(&path).unwrap()
    }

    fn choose(snapshot: &Snapshot, pod: &str) -> Vec<(String, Vec<String>)> {
        let (view, _) = snapshot.to_view();
        let pod = snapshot
            .pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pod))
            .unwrap();
        let config = Config::default();
        let pod = PodToPlace::read(pod.clone(), &config, &view).unwrap();
        let now: Timestamp = "2026-11-25T12:00:30Z".parse().unwrap();
        let nodes: Vec<String> = view.state().nodes().map(|n| n.name.clone()).collect();
        candidates(&view, &config, &pod, &nodes, now)
            .into_iter()
            .map(|c| (c.node, c.victims.pods))
            .collect()
    }

    /// The explain fixture's ml/big (8,000 MiB and 30 cores, priority
    /// 1000) fits nowhere; evicting one pod makes room on five nodes: the
    /// priority-0 ones first (cores-1's hog before slices-1's solo by
    /// name), then the priority-50 ones (unreadable-1's garbled pod, whose
    /// allocation cannot be read, blocks its GPU until it is gone).
    #[test]
    fn candidates_in_kube_schedulers_order() {
        let snapshot = cluster();
        assert_eq!(
            choose(&snapshot, "big"),
            [
                ("cores-1".to_string(), vec!["uid-hog".to_string()]),
                ("slices-1".to_string(), vec!["uid-solo".to_string()]),
                ("shared-1".to_string(), vec!["uid-low-a".to_string()]),
                ("shared-2".to_string(), vec!["uid-low-c".to_string()]),
                ("unreadable-1".to_string(), vec!["uid-garbled".to_string()]),
            ]
        );
        // Never preempts; a pod that fits somewhere needs no eviction; a
        // gang member's group is planned whole (gang_plan).
        assert!(choose(&snapshot, "never").is_empty());
        assert!(choose(&snapshot, "small").is_empty());
        assert!(choose(&snapshot, "gang-huge-0").is_empty());
    }

    /// Two one-GPU nodes, each with a 12,000 MiB pod of priority 10 (or
    /// `second` on n2); a gang of two pending 9,000 MiB members at 100
    /// (one GPU holds one of them).
    fn gang_cluster(second: i32) -> Snapshot {
        let node = |n: &str| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {n}\n  annotations:\n    hami.io/node-nvidia-register: '[{{\"id\":\"{n}-0\",\"index\":0,\"count\":10,\"devmem\":16000,\"devcore\":100,\"type\":\"T4\",\"health\":true}}]'\n"
            )
        };
        let running = |name: &str, n: &str, priority: i32| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ml\n  uid: {name}\n  annotations:\n    hami.io/vgpu-node: {n}\n    hami.io/vgpu-devices-allocated: '{n}-0,NVIDIA,12000,0:;'\nspec:\n  nodeName: {n}\n  priority: {priority}\n  containers: [{{name: c}}]\nstatus: {{phase: Running}}\n"
            )
        };
        let member = |name: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ml\n  uid: {name}\n  labels: {{pod-group.scheduling.sigs.k8s.io/name: g, pod-group.scheduling.sigs.k8s.io/min-available: '2'}}\nspec:\n  priority: 100\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '1', nvidia.com/gpumem: '9000'}}}}}}]\n"
            )
        };
        let docs = [
            node("n1"),
            node("n2"),
            running("low-1", "n1", 10),
            running("low-2", "n2", second),
            member("m-1"),
            member("m-2"),
        ];
        Snapshot::from_yaml(&docs.join("---\n"), "test").unwrap()
    }

    /// A pending gang is preempted for all its members or none: both
    /// low pods go when that places both members; when the second low pod
    /// is above the gang's priority, the first is not evicted either.
    #[test]
    fn a_pending_gang_gets_preemption_for_all_members_or_none() {
        let config = Config::default();
        let plan_of = |snapshot: &Snapshot| {
            let (view, _) = snapshot.to_view();
            let pod = snapshot
                .pods
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some("m-1"))
                .unwrap()
                .clone();
            let pod = PodToPlace::read(pod, &config, &view).unwrap();
            gang_plan(&view, &config, &pod, None)
        };
        let all = plan_of(&gang_cluster(10)).expect("both members placed");
        let victims: Vec<(&str, &[String])> = all
            .victims
            .iter()
            .map(|(n, v)| (n.as_str(), v.pods.as_slice()))
            .collect();
        assert_eq!(
            victims,
            [
                ("n1", &["low-1".to_string()][..]),
                ("n2", &["low-2".to_string()][..])
            ]
        );
        assert_eq!(all.members.len(), 2);
        assert_eq!(plan_of(&gang_cluster(200)), None);
    }
}
