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
                continue;
            };
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

/// With `removed` gone, adds entries of `extra` in order until the pod fits,
/// then gives back (highest priority first) every added one it does not
/// need. `None` when even all of them are not enough.
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
    Some(taken.into_iter().map(|(_, uid, _)| uid).collect())
}
