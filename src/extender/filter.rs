//! `/filter` and `/prioritize`: the engine's verdict on the candidate nodes,
//! read from the cluster view. No side effects: nothing is reserved until
//! bind.

use std::collections::HashSet;

use jiff::Timestamp;

use crate::cluster::{ClusterView, pod_name};
use crate::config::{Config, FilterMode};
use crate::engine::PodPlan;
use crate::placement::{self, NodeReason, Verdict};

use super::error::ExtenderError;
use super::wire::{Candidates, ExtenderArgs, FilterResult, HostPriority, NodeList, node_name};

/// `/filter`'s answer, and the typed reason of every node it turns down
/// (for events and metrics).
#[derive(Debug, Default)]
pub struct Filtered {
    pub answer: FilterResult,
    pub rejected: Vec<(String, NodeReason)>,
}

/// Which candidates can hold the pod, and why the others cannot.
pub fn filter(
    view: &ClusterView,
    config: &Config,
    args: &ExtenderArgs,
    now: Timestamp,
) -> Filtered {
    let names = args.candidates.name_list();
    let plan = match crate::cluster::convert::pod_plan(&args.pod, config) {
        Ok(plan) => plan,
        Err(source) => {
            let e = ExtenderError::Plan {
                pod: pod_name(&args.pod),
                source,
            };
            return Filtered {
                answer: FilterResult::error(e.to_string()),
                rejected: Vec::new(),
            };
        }
    };
    let (feasible, rejected) =
        match placement::judge(view, config, &args.pod, &plan, Some(&names), now) {
            // Not a GPU pod: nothing for gpugate to judge.
            Verdict::NoGpus => (names.to_vec(), Vec::new()),
            Verdict::Everywhere(reason) => (
                Vec::new(),
                names.iter().map(|n| (n.clone(), reason.clone())).collect(),
            ),
            Verdict::Nodes(mut verdicts) => {
                let best = match config.scheduler.filter_mode {
                    FilterMode::All => None,
                    FilterMode::Best => Some(verdicts.best().map(|b| b.node.clone())),
                };
                let mut feasible = Vec::with_capacity(verdicts.feasible.len());
                for f in std::mem::take(&mut verdicts.feasible) {
                    match &best {
                        Some(best) if best.as_ref() != Some(&f.node) => verdicts
                            .rejected
                            .push((f.node, NodeReason::NotBestNode(plan.node_policy))),
                        _ => feasible.push(f.node),
                    }
                }
                (feasible, verdicts.rejected)
            }
        };
    let mut answer = FilterResult::default();
    // Many nodes often share one reason (the quota, the group, not the
    // best): its text is made once.
    let mut last: Option<(&NodeReason, String)> = None;
    for (node, reason) in &rejected {
        let text = match &last {
            Some((r, text)) if *r == reason => text.clone(),
            _ => reason.to_string(),
        };
        // Preempting other pods cannot fix these.
        let target = if reason.is_unresolvable() {
            &mut answer.failed_and_unresolvable_nodes
        } else {
            &mut answer.failed_nodes
        };
        target.insert(node.clone(), text.clone());
        last = Some((reason, text));
    }
    Filtered {
        answer: finish(answer, &args.candidates, feasible),
        rejected,
    }
}

/// Answers the feasible nodes in the form they were asked in.
fn finish(
    mut result: FilterResult,
    candidates: &Candidates,
    feasible: Vec<String>,
) -> FilterResult {
    match candidates {
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

/// What `/prioritize` answers, and the node kube-scheduler will most
/// likely choose (the first of those ranked highest), with the pod's plan.
#[derive(Debug)]
pub struct Prioritized {
    pub scores: Vec<HostPriority>,
    pub likely: Option<(String, PodPlan)>,
}

/// 0..=10 per candidate, in the order given: the node policy's priority for
/// nodes that can hold the pod (sharpened at the top, see
/// [`placement::NodeVerdicts::priorities`]), 0 for the others; and the
/// likely node.
pub fn prioritize(
    view: &ClusterView,
    config: &Config,
    args: &ExtenderArgs,
    now: Timestamp,
) -> Result<Prioritized, ExtenderError> {
    let names = args.candidates.names();
    let plan = crate::cluster::convert::pod_plan(&args.pod, config).map_err(|source| {
        ExtenderError::Plan {
            pod: pod_name(&args.pod),
            source,
        }
    })?;
    // A pod that no node can take gets no preference.
    let Verdict::Nodes(verdicts) =
        placement::judge(view, config, &args.pod, &plan, Some(&names), now)
    else {
        return Ok(Prioritized {
            scores: names
                .into_iter()
                .map(|host| HostPriority { host, score: 0 })
                .collect(),
            likely: None,
        });
    };
    let priority: std::collections::HashMap<&str, u8> = verdicts.priorities().collect();
    let scores = names
        .iter()
        .map(|host| HostPriority {
            host: host.clone(),
            score: priority.get(host.as_str()).map_or(0, |p| i64::from(*p)),
        })
        .collect();
    let likely = verdicts.best().map(|b| (b.node.clone(), plan));
    Ok(Prioritized { scores, likely })
}
