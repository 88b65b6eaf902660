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
    let plan = match crate::cluster::convert::pod_plan(&args.pod, config) {
        Ok(plan) => plan,
        Err(e) => return FilterResult::error(format!("pod {}: {e}", pod_name(&args.pod))),
    };
    let mut result = FilterResult::default();
    // Reasons that hold for every node: the namespace quota, the gang group.
    let pod_wide = || {
        quota_check(view, &args.pod, &plan, config)
            .and_then(|()| super::gang::judge(view, config, &args.pod, &plan, &names))
    };
    let feasible: Vec<String> = if !plan.request.has_gpus() {
        // Not a GPU pod: nothing for gpugate to judge.
        names.to_vec()
    } else {
        let judged = match pod_wide() {
            Ok(judged) => judged,
            Err(reason) => {
                // Preempting other pods cannot fix a malformed group label
                // or bring missing members.
                let target =
                    if reason.starts_with("GangInvalid") || reason.starts_with("GangIncomplete") {
                        &mut result.failed_and_unresolvable_nodes
                    } else {
                        &mut result.failed_nodes
                    };
                for n in names.iter() {
                    target.insert(n.clone(), reason.clone());
                }
                return finish(result, &args.candidates, Vec::new());
            }
        };
        let mut eval = judged.state.evaluate(&plan, Some(&names[..]));
        if let Some(place) = &judged.node {
            // A group still being placed: this member goes where the
            // group's placement puts it, so that the rest still fit.
            for f in eval.feasible.iter().filter(|f| f.node != place) {
                result.failed_nodes.insert(
                    f.node.to_string(),
                    format!(
                        "GangPlacement (the group is placed together; this member's place is node {place})"
                    ),
                );
            }
            eval.retain_feasible(|f| f.node == place);
        }
        if let Some(busy) = busy_nodes(view, config, &eval.feasible) {
            eval.retain_feasible(|f| !busy.iter().any(|(n, _)| *n == f.node));
            for (node, why) in busy {
                result.failed_nodes.insert(
                    node.to_string(),
                    format!("NodeLockBusy ({why}; other nodes can hold the pod now)"),
                );
            }
        }
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
    finish(result, &args.candidates, feasible)
}

/// The feasible nodes a bind would have to wait for (HAMi's node lock held,
/// or gpugate's own binds in progress there), with why, when some other
/// feasible node is free: those the pod is steered away from. `None` when
/// steering is off or every feasible node is busy (the bind then waits).
fn busy_nodes<'a>(
    view: &ClusterView,
    config: &Config,
    feasible: &[crate::engine::FeasibleNode<'a>],
) -> Option<Vec<(&'a str, String)>> {
    let lock = &config.scheduler.node_lock;
    if !(lock.enabled && lock.steer) || feasible.len() < 2 {
        return None;
    }
    let unsettled = view.unsettled_binds();
    let now = jiff::Timestamp::now();
    let expiry = std::time::Duration::from_secs(lock.expiry_seconds);
    let busy: Vec<(&'a str, String)> = feasible
        .iter()
        .filter_map(|f| {
            view.node_busy(f.node, &unsettled, now, expiry)
                .map(|why| (f.node, why))
        })
        .collect();
    (busy.len() < feasible.len()).then_some(busy)
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

/// The codes a node's reason can start with besides the per-GPU
/// [`Reason`](crate::engine::Reason)s: every value `reason_code` returns
/// is one of these, one of those, or `Other`.
const NODE_CODES: [&str; 7] = [
    "NodeUnregistered",
    "NodeLockBusy",
    "NodeInsufficientDevice",
    "ResourceQuotaNotFit",
    "GangNotFit",
    "GangIncomplete",
    "GangInvalid",
];

/// The stable code a node's reason starts with (`CardInsufficientMemory`
/// in `2/2 CardInsufficientMemory, 1/2 CardInsufficientCore`,
/// `ResourceQuotaNotFit`, `GangNotFit`, `NodeUnregistered`, ...): for
/// grouping in events and metrics. Always from a fixed set (`Other` for
/// anything else), so that it can be a metric label.
pub fn reason_code(reason: &str) -> &'static str {
    if reason.starts_with("node unregistered") {
        return "NodeUnregistered";
    }
    let mut words = reason
        .split([' ', '(', ',', ':', ';'])
        .filter(|w| !w.is_empty());
    let first = match words.next() {
        Some(w) if w.contains('/') => words.next(),
        other => other,
    };
    let Some(word) = first else {
        return "Other";
    };
    crate::engine::Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .chain(NODE_CODES)
        .find(|code| *code == word)
        .unwrap_or("Other")
}

/// Nodes named in one event note, at most.
const NOTE_NODES: usize = 20;

/// For a pod no candidate can hold: one note per reason code (the reason's
/// first word, `CardInsufficientMemory`, `ResourceQuotaNotFit`, …) with the
/// nodes that gave it, most frequent first, for `FilteringFailed` events.
/// Nothing when some node fits or the call failed.
pub fn failure_notes(result: &FilterResult) -> Vec<String> {
    if result.feasible_count() > 0 || !result.error.is_empty() {
        return Vec::new();
    }
    let mut by_code: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (node, reason) in result
        .failed_nodes
        .iter()
        .chain(&result.failed_and_unresolvable_nodes)
    {
        let code = reason_code(reason);
        by_code.entry(code).or_default().push(node);
    }
    let mut groups: Vec<(&str, Vec<&str>)> = by_code.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    groups
        .into_iter()
        .map(|(code, mut nodes)| {
            nodes.sort_unstable();
            let shown = nodes.len().min(NOTE_NODES);
            let more = nodes.len() - shown;
            let mut note = format!(
                "{code} on {} node(s): {}",
                nodes.len(),
                nodes[..shown].join(", ")
            );
            if more > 0 {
                note.push_str(&format!(" and {more} more"));
            }
            if let Some(example) = result
                .failed_nodes
                .get(nodes[0])
                .or_else(|| result.failed_and_unresolvable_nodes.get(nodes[0]))
            {
                note.push_str(&format!(" (e.g. {}: {example})", nodes[0]));
            }
            note
        })
        .collect()
}

/// What `/prioritize` answers, and the node kube-scheduler will most
/// likely choose (the first of those ranked highest), with the pod's plan.
#[derive(Debug)]
pub struct Prioritized {
    pub scores: Vec<HostPriority>,
    pub likely: Option<(String, PodPlan)>,
}

/// 0..=10 per candidate, in the order given: the node policy's priority for
/// nodes that can hold the pod, 0 for the others; and the likely node.
pub fn prioritize(
    view: &ClusterView,
    config: &Config,
    args: &ExtenderArgs,
) -> Result<Prioritized, String> {
    let zero = |names: Vec<String>| Prioritized {
        scores: names
            .into_iter()
            .map(|host| HostPriority { host, score: 0 })
            .collect(),
        likely: None,
    };
    let names = args.candidates.names();
    let plan = crate::cluster::convert::pod_plan(&args.pod, config)
        .map_err(|e| format!("pod {}: {e}", pod_name(&args.pod)))?;
    if !plan.request.has_gpus() {
        return Ok(zero(names));
    }
    // A member of a gang group that cannot be placed gets no preference.
    let Ok(judged) = super::gang::judge(view, config, &args.pod, &plan, &names) else {
        return Ok(zero(names));
    };
    let mut eval = judged.state.evaluate(&plan, Some(&names));
    if let Some(busy) = busy_nodes(view, config, &eval.feasible) {
        eval.retain_feasible(|f| !busy.iter().any(|(n, _)| *n == f.node));
    }
    // The 0..=10 priority is coarse: under binpack a node holding one
    // slice and one holding five share a level, and kube-scheduler breaks
    // such ties with its own scores (LeastAllocated: the emptier node), so
    // a burst spread over many nodes. The node the policy ranks best keeps
    // its level; the others of that level go one below.
    let best = eval.best().map(|b| (b.score, b.priority));
    let level = |f: &crate::engine::FeasibleNode<'_>| match best {
        Some((score, top)) if f.priority == top && f.score != score && top > 0 => top - 1,
        _ => f.priority,
    };
    let priority: std::collections::HashMap<&str, u8> =
        eval.feasible.iter().map(|f| (f.node, level(f))).collect();
    let likely = eval.best().map(|b| b.node.to_string());
    let scores = names
        .iter()
        .map(|host| HostPriority {
            host: host.clone(),
            score: priority.get(host.as_str()).map_or(0, |p| i64::from(*p)),
        })
        .collect();
    Ok(Prioritized {
        scores,
        likely: likely.map(|n| (n, plan)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_codes_are_the_first_word_of_every_form() {
        for (reason, code) in [
            ("2/2 CardInsufficientMemory", "CardInsufficientMemory"),
            (
                "1/8 CardInsufficientCore, 7/8 CardNotHealth",
                "CardInsufficientCore",
            ),
            ("node unregistered", "NodeUnregistered"),
            (
                "NodeInsufficientDevice (4 GPUs requested, 2 on the node)",
                "NodeInsufficientDevice",
            ),
            (
                "ResourceQuotaNotFit (nvidia.com/gpumem: ...)",
                "ResourceQuotaNotFit",
            ),
            ("GangNotFit (group ml/g: ...)", "GangNotFit"),
            ("GangInvalid (label ...)", "GangInvalid"),
            ("", "Other"),
            ("3/3", "Other"),
            // Never a code that is not in the fixed set.
            ("SomethingNew (x)", "Other"),
            ("1/2 NotACode", "Other"),
        ] {
            assert_eq!(reason_code(reason), code, "{reason}");
        }
    }

    #[test]
    fn notes_group_nodes_by_code_most_frequent_first_only_when_nothing_fits() {
        let mut r = FilterResult::default();
        for n in ["a", "b", "c"] {
            r.failed_nodes
                .insert(n.into(), "1/1 CardInsufficientMemory".into());
        }
        r.failed_and_unresolvable_nodes
            .insert("cpu".into(), "node unregistered".into());
        r.node_names = Some(vec![]);
        let notes = failure_notes(&r);
        assert_eq!(notes.len(), 2);
        assert!(
            notes[0].starts_with("CardInsufficientMemory on 3 node(s): a, b, c (e.g. a: 1/1"),
            "{}",
            notes[0]
        );
        assert!(
            notes[1].starts_with("NodeUnregistered on 1 node(s): cpu"),
            "{}",
            notes[1]
        );
        r.node_names = Some(vec!["d".into()]);
        assert!(failure_notes(&r).is_empty());
    }
}
