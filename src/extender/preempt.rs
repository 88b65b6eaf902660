//! `/preempt`: kube-scheduler proposes, per candidate node, the victims its
//! own checks need gone (CPU, memory, pods, ports: GPU resources are
//! `ignoredByScheduler`). Each of them was kept by its "reprieve" pass only
//! because it is needed, so gpugate keeps every proposed victim: dropping
//! one would nominate the pod to a node where kube-scheduler's own fit
//! fails, and a node with no victims left is taken at once.
//!
//! What gpugate adds is the GPU side: when removing the proposed victims
//! does not free enough GPU, the fewest further GPU holders on that node
//! with a priority below the preemptor's are added, lowest priority first;
//! a node where even that does not make room is dropped.

use std::collections::HashSet;

use crate::cluster::{ClusterView, pod_name};
use crate::config::Config;
use crate::engine::joint::next_combination;
use crate::engine::{Allocation, PodPlan};

use super::error::ExtenderError;
use super::wire::{MetaPod, MetaVictims, PreemptionArgs, PreemptionResult};

pub fn preempt(
    view: &ClusterView,
    config: &Config,
    args: &PreemptionArgs,
) -> Result<PreemptionResult, ExtenderError> {
    let plan = crate::cluster::convert::pod_plan(&args.pod, config).map_err(|source| {
        ExtenderError::Plan {
            pod: pod_name(&args.pod),
            source,
        }
    })?;
    let preemptor_priority = args.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    let mut result = PreemptionResult::default();
    for (node, proposed) in &args.victims {
        let mut uids = proposed.uids.clone();
        if plan.request.has_gpus() {
            let proposed_set: HashSet<&str> = proposed.uids.iter().map(String::as_str).collect();
            let removed: Vec<(&str, &Allocation)> = proposed
                .uids
                .iter()
                .filter_map(|uid| Some((uid.as_str(), gpu_allocation_on(view, uid, node)?)))
                .collect();
            // Further GPU holders on the node that the preemptor may evict.
            let mut extra: Vec<(i32, &str, &Allocation)> = view
                .held_pods()
                .filter(|uid| !proposed_set.contains(uid))
                .filter_map(|uid| {
                    let a = gpu_allocation_on(view, uid, node)?;
                    let priority = view.held_priority(uid).unwrap_or(0);
                    (priority < preemptor_priority).then_some((priority, uid, a))
                })
                .collect();
            // Lowest priority first; UID breaks ties so the answer is stable.
            extra.sort_by_key(|(priority, uid, _)| (*priority, *uid));
            let Some(added) = fewest_extra(view, &plan, node, &removed, &extra) else {
                tracing::info!(node, proposed = ?proposed.uids, "preempt: no GPU victims make room; node dropped");
                continue;
            };
            tracing::info!(node, proposed = ?proposed.uids, added = ?added, "preempt: victims");
            uids.extend(added.into_iter().map(str::to_string));
        }
        result.node_name_to_meta_victims.insert(
            node.clone(),
            MetaVictims {
                pods: uids.into_iter().map(|uid| MetaPod { uid }).collect(),
                num_pdb_violations: proposed.pdb_violations,
            },
        );
    }
    Ok(result)
}

/// The pod's allocation when it holds at least one GPU on `node`.
fn gpu_allocation_on<'v>(view: &'v ClusterView, uid: &str, node: &str) -> Option<&'v Allocation> {
    view.held_allocation(uid)
        .filter(|a| a.node == node && a.grant_count() > 0)
}

/// Sets of further victims up to this size are tried exhaustively.
const EXACT_SIZE: usize = 3;
/// Most sets tried exhaustively per node; beyond, the greedy pass.
const EXACT_BUDGET: usize = 20_000;

/// With `removed` gone, the fewest entries of `extra` (lowest priority
/// first) whose removal too lets the pod fit; `None` when even all of them
/// are not enough. Every set of one, then two, then three entries is tried
/// in order (`extra` is sorted lowest priority first, so the first set
/// found of a size is among the cheapest); past that size, or past the
/// budget, entries are added in order until the pod fits and every one it
/// does not need is given back (highest priority first).
fn fewest_extra<'a>(
    view: &ClusterView,
    plan: &PodPlan,
    node: &str,
    removed: &[(&str, &Allocation)],
    extra: &[(i32, &'a str, &Allocation)],
) -> Option<Vec<&'a str>> {
    let fits = |added: &[(i32, &'a str, &Allocation)]| {
        let mut gone: Vec<(&str, &Allocation)> = removed.to_vec();
        gone.extend(added.iter().map(|(_, uid, a)| (*uid, *a)));
        view.state().fit_without(plan, node, &gone).is_ok()
    };
    let uids = |set: &[(i32, &'a str, &Allocation)]| set.iter().map(|(_, uid, _)| *uid).collect();
    if fits(&[]) {
        return Some(Vec::new());
    }
    let mut tried = 0;
    for size in 1..=EXACT_SIZE.min(extra.len()) {
        let mut pick: Vec<usize> = (0..size).collect();
        loop {
            tried += 1;
            if tried > EXACT_BUDGET {
                break;
            }
            let set: Vec<_> = pick.iter().map(|&i| extra[i]).collect();
            if fits(&set) {
                return Some(uids(&set));
            }
            if !next_combination(&mut pick, extra.len()) {
                break;
            }
        }
        if tried > EXACT_BUDGET {
            break;
        }
    }
    let mut taken: Vec<(i32, &'a str, &Allocation)> = Vec::new();
    let mut rest = extra.iter();
    while !fits(&taken) {
        taken.push(*rest.next()?);
    }
    let mut i = taken.len();
    while i > 0 {
        i -= 1;
        let without: Vec<_> = taken
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, v)| *v)
            .collect();
        if fits(&without) {
            taken = without;
        }
    }
    Some(uids(&taken))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hami::keys;
    use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};
    use serde_json::json;

    /// One node of two 16,384 MiB GPUs: four 4,000 MiB pods on GPU-0, two
    /// 8,000 MiB pods on GPU-1, all of priority 0.
    fn view() -> ClusterView {
        let mut v = ClusterView::new();
        let mut n = K8sNode::default();
        n.metadata.name = Some("n".into());
        n.metadata.annotations = Some(
            [(
                keys::NODE_NVIDIA_REGISTER.to_string(),
                r#"[{"id":"GPU-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true},{"id":"GPU-1","index":1,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}]"#.to_string(),
            )]
            .into(),
        );
        v.upsert_node(&n);
        for (name, gpu, mib) in [
            ("a-1", 0, 4000),
            ("a-2", 0, 4000),
            ("a-3", 0, 4000),
            ("a-4", 0, 4000),
            ("b-1", 1, 8000),
            ("b-2", 1, 8000),
        ] {
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "uid": name, "annotations": {
                    keys::VGPU_NODE: "n",
                    keys::VGPU_DEVICES_ALLOCATED: format!("GPU-{gpu},NVIDIA,{mib},0:;")}},
                "spec": {"containers": [{"name": "c"}], "priority": 0},
                "status": {"phase": "Running"},
            }))
            .unwrap();
            assert_eq!(v.upsert_pod(name, &p), None);
        }
        v
    }

    /// 8,000 MiB on one GPU: one 8,000 MiB pod of GPU-1 is enough; adding
    /// pods in UID order would have taken two of GPU-0's.
    #[test]
    fn the_fewest_victims_that_make_room() {
        let body = json!({
            "Pod": {
                "metadata": {"name": "urgent", "namespace": "ml", "uid": "u"},
                "spec": {"priority": 100, "containers": [{"name": "c", "resources": {"limits": {
                    "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}}}]},
            },
            "NodeNameToMetaVictims": {"n": {"Pods": [], "NumPDBViolations": 0}},
        });
        let args = PreemptionArgs::parse(body.to_string().as_bytes()).unwrap();
        let out = preempt(&view(), &Config::default(), &args).unwrap();
        let victims: Vec<&str> = out.node_name_to_meta_victims["n"]
            .pods
            .iter()
            .map(|p| p.uid.as_str())
            .collect();
        assert_eq!(victims, ["b-1"]);
    }
}
