//! `/filter` and `/prioritize`: the engine's verdict on the candidate nodes,
//! read from the cluster view. No side effects: nothing is reserved until
//! bind.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::{ClusterView, pod_name};
use crate::config::{Config, FilterMode};
use crate::engine::{Memory, PodPlan, QuotaAmount, QuotaExceeded};

use super::wire::{Candidates, ExtenderArgs, FilterResult, HostPriority, NodeList, node_name};

/// The pod's namespace quota check before a GPU is chosen, as the reason
/// every candidate is given. A request in percent of a GPU's memory has no
/// MiB yet: it is refused only when the namespace has no memory left at all
/// (bind checks the resolved MiB).
pub fn quota_check(
    view: &ClusterView,
    pod: &Pod,
    plan: &PodPlan,
    config: &Config,
) -> Result<(), String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let (quota, _) = view.quota(namespace, &config.nvidia);
    if quota.limits.is_empty() {
        return Ok(());
    }
    quota
        .check(QuotaAmount::of_request(&plan.request))
        .map_err(|e: QuotaExceeded| format!("ResourceQuotaNotFit ({e})"))?;
    let percent = plan.request.containers.iter().any(|c| {
        c.gpu
            .is_some_and(|g| matches!(g.memory, Memory::Percent(_)))
    });
    if let Some(limit) = quota.memory_limit_mib()
        && percent
        && quota.used.mem_mib >= limit
    {
        return Err(format!(
            "ResourceQuotaNotFit (GPU memory in percent of a GPU requested, {} MiB of {limit} MiB already used)",
            quota.used.mem_mib
        ));
    }
    Ok(())
}

/// Which candidates can hold the pod, and why the others cannot.
pub fn filter(view: &ClusterView, config: &Config, args: &ExtenderArgs) -> FilterResult {
    let names = args.candidates.name_list();
    let plan = match PodPlan::from_pod(&args.pod, config) {
        Ok(plan) => plan,
        Err(e) => return FilterResult::error(format!("pod {}: {e}", pod_name(&args.pod))),
    };
    let mut result = FilterResult::default();
    let feasible: Vec<String> = if !plan.request.has_gpus() {
        // Not a GPU pod: nothing for gpugate to judge.
        names.into_owned()
    } else if let Err(reason) = quota_check(view, &args.pod, &plan, config) {
        for n in names.iter() {
            result.failed_nodes.insert(n.clone(), reason.clone());
        }
        Vec::new()
    } else {
        let eval = view.state().evaluate(&plan, Some(&names[..]));
        for (node, rejection) in &eval.rejected {
            let target = if rejection.is_unresolvable() {
                &mut result.failed_and_unresolvable_nodes
            } else {
                &mut result.failed_nodes
            };
            target.insert(node.clone(), rejection.to_string());
        }
        match config.scheduler.filter_mode {
            FilterMode::All => eval.feasible.iter().map(|f| f.node.to_string()).collect(),
            FilterMode::Best => {
                let best = eval.best().map(|b| b.node.to_string());
                // One reason for all, formatted once.
                let not_best = format!(
                    "NotBestNode (filterMode best keeps only the best node under the {} node policy)",
                    plan.node_policy
                );
                for f in &eval.feasible {
                    if Some(f.node) != best.as_deref() {
                        result
                            .failed_nodes
                            .insert(f.node.to_string(), not_best.clone());
                    }
                }
                best.into_iter().collect()
            }
        }
    };
    match &args.candidates {
        Candidates::Names(_) => result.node_names = Some(feasible),
        Candidates::Nodes(nodes) => {
            let keep: HashSet<&str> = feasible.iter().map(String::as_str).collect();
            result.nodes = Some(NodeList {
                items: nodes
                    .iter()
                    .filter(|n| keep.contains(node_name(n)))
                    .cloned()
                    .collect(),
            });
        }
    }
    result
}

/// 0..=10 per candidate, in the order given: the node policy's priority for
/// nodes that can hold the pod, 0 for the others.
pub fn prioritize(
    view: &ClusterView,
    config: &Config,
    args: &ExtenderArgs,
) -> Result<Vec<HostPriority>, String> {
    let names = args.candidates.names();
    let plan = PodPlan::from_pod(&args.pod, config)
        .map_err(|e| format!("pod {}: {e}", pod_name(&args.pod)))?;
    if !plan.request.has_gpus() {
        return Ok(names
            .into_iter()
            .map(|host| HostPriority { host, score: 0 })
            .collect());
    }
    let eval = view.state().evaluate(&plan, Some(&names));
    let priority: std::collections::HashMap<&str, u8> =
        eval.feasible.iter().map(|f| (f.node, f.priority)).collect();
    Ok(names
        .iter()
        .map(|host| HostPriority {
            host: host.clone(),
            score: priority.get(host.as_str()).map_or(0, |p| i64::from(*p)),
        })
        .collect())
}
