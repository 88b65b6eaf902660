//! `/preempt`: of the victims kube-scheduler proposes on each node, keep
//! only the GPU holders whose removal really lets the pod's GPUs fit, as few
//! and as low in priority as possible; drop nodes where removing every
//! proposed victim still does not make room.
//!
//! Victims that hold no GPU on the node are kept as proposed: kube-scheduler
//! chose them for resources gpugate does not judge (CPU, memory, ports).

use crate::cluster::{ClusterView, pod_name};
use crate::config::Config;
use crate::engine::{Allocation, PodPlan};

use super::wire::{MetaPod, MetaVictims, PreemptionArgs, PreemptionResult};

pub fn preempt(
    view: &ClusterView,
    config: &Config,
    args: &PreemptionArgs,
) -> Result<PreemptionResult, String> {
    let plan = PodPlan::from_pod(&args.pod, config)
        .map_err(|e| format!("pod {}: {e}", pod_name(&args.pod)))?;
    let mut result = PreemptionResult::default();
    for (node, proposed) in &args.victims {
        if !plan.request.has_gpus() {
            result.node_name_to_meta_victims.insert(
                node.clone(),
                meta(proposed.uids.iter().cloned(), proposed.pdb_violations),
            );
            continue;
        }
        let (mut gpu, other): (Vec<(&str, &Allocation)>, Vec<&str>) = {
            let mut gpu = Vec::new();
            let mut other = Vec::new();
            for uid in &proposed.uids {
                match view.held_allocation(uid) {
                    Some(a) if a.node == *node => gpu.push((uid.as_str(), a)),
                    _ => other.push(uid.as_str()),
                }
            }
            (gpu, other)
        };
        // Lowest priority first; UID breaks ties so the answer is stable.
        gpu.sort_by_key(|(uid, _)| (view.held_priority(uid).unwrap_or(0), *uid));
        let Some(chosen) = fewest_victims(view, &plan, node, &gpu) else {
            continue;
        };
        let uids = other
            .into_iter()
            .map(str::to_string)
            .chain(chosen.into_iter().map(str::to_string));
        result
            .node_name_to_meta_victims
            .insert(node.clone(), meta(uids, proposed.pdb_violations));
    }
    Ok(result)
}

/// Removes victims in order until the pod fits, then gives back (highest
/// priority first) every victim the pod does not need gone. `None` when even
/// all of them are not enough.
fn fewest_victims<'a>(
    view: &ClusterView,
    plan: &PodPlan,
    node: &str,
    ordered: &[(&'a str, &Allocation)],
) -> Option<Vec<&'a str>> {
    let fits = |set: &[(&'a str, &Allocation)]| {
        let removed: Vec<&Allocation> = set.iter().map(|(_, a)| *a).collect();
        view.state().fit_without(plan, node, &removed).is_ok()
    };
    let mut taken: Vec<(&'a str, &Allocation)> = Vec::new();
    let mut rest = ordered.iter();
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
    Some(taken.into_iter().map(|(uid, _)| uid).collect())
}

fn meta(uids: impl Iterator<Item = String>, pdb_violations: i64) -> MetaVictims {
    MetaVictims {
        pods: uids.map(|uid| MetaPod { uid }).collect(),
        num_pdb_violations: pdb_violations,
    }
}
