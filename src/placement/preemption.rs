//! gpugate's own preemption choice, for a pod short only of GPU: where
//! kube-scheduler does not preempt (its dry run sees no victim it needs,
//! docs/operations.md "Preemption"), the nodes where evicting
//! lower-priority GPU holders lets the pod fit, best first, in
//! kube-scheduler's order of preemption candidates.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::engine::{PodPlan, Rejection};

use super::victims::{Victims, gpu_victims};
use super::{NodeReason, Verdict, gang, judge};

/// Whether preempting pods on a node refused for this reason can help:
/// the node lacks free GPU (or NUMA zone) capacity, not GPUs at all.
pub fn capacity_shortage(reason: &NodeReason) -> bool {
    matches!(
        reason,
        NodeReason::Engine(Rejection::Devices { .. } | Rejection::NumaZones { .. })
    ) && !reason.is_unresolvable()
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
/// (`preemptionPolicy: Never`), belongs to a gang group (gangs preempt
/// through kube-scheduler only), or no eviction helps.
pub fn candidates(
    view: &ClusterView,
    config: &Config,
    pod: &Pod,
    plan: &PodPlan,
    nodes: &[String],
    now: Timestamp,
) -> Vec<Candidate> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never")
        || !matches!(gang::label_of(view, pod), Ok(None))
    {
        return Vec::new();
    }
    let priority = spec.and_then(|s| s.priority).unwrap_or(0);
    let Verdict::Nodes(verdicts) = judge(view, config, pod, plan, Some(nodes), now) else {
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
            let victims = gpu_victims(view, plan, node, &[], priority)?;
            if victims.pods.is_empty() {
                return None;
            }
            let priorities = victims
                .pods
                .iter()
                .map(|uid| view.held_priority(uid).unwrap_or(0));
            Some(Candidate {
                node: node.clone(),
                top_priority: priorities.clone().max().unwrap_or(0),
                priority_sum: priorities.map(i64::from).sum(),
                victims,
            })
        })
        .collect();
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
    out
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
        let plan = crate::cluster::convert::pod_plan(pod, &config).unwrap();
        let now: Timestamp = "2026-11-25T12:00:30Z".parse().unwrap();
        let nodes: Vec<String> = view.state().nodes().map(|n| n.name.clone()).collect();
        candidates(&view, &config, pod, &plan, &nodes, now)
            .into_iter()
            .map(|c| (c.node, c.victims.pods))
            .collect()
    }

    /// The explain fixture's ml/big (8,000 MiB and 30 cores, priority
    /// 1000) fits nowhere; evicting one pod makes room on four nodes: the
    /// priority-0 ones first (cores-1's hog before slices-1's solo by
    /// name), then the priority-50 ones.
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
            ]
        );
        // Never preempts; a pod that fits somewhere needs no eviction; a
        // gang member is left to kube-scheduler.
        assert!(choose(&snapshot, "never").is_empty());
        assert!(choose(&snapshot, "small").is_empty());
        assert!(choose(&snapshot, "gang-huge-0").is_empty());
    }
}
