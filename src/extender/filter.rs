//! `/filter` and `/prioritize`: the placement verdict on the candidate
//! nodes, read from the cluster view and translated into kube-scheduler's
//! answers. Nothing here changes anything: what should follow an answer
//! (events, a note for gpugate's own preemption, `/prioritize`'s
//! assumption) is returned as a value for the caller to carry out.

use std::collections::HashSet;

use jiff::Timestamp;

use crate::cluster::ClusterView;
use crate::config::{Config, FilterMode};
use crate::placement::{self, NodeReason, PodToPlace, Verdict};

use super::error::ExtenderError;
use super::wire::{Candidates, FilterResult, HostPriority, NodeList, node_name};

/// `/filter`'s answer, the typed reason of every node it turns down (for
/// metrics), and what should follow it.
#[derive(Debug, Default)]
pub struct Filtered {
    pub answer: FilterResult,
    /// Every node turned down and why, `NotBestNode` included (counted in
    /// the metrics, left out of the answer).
    pub rejected: Vec<(String, NodeReason)>,
    pub effects: Vec<Effect>,
    /// The one node offered (`filterMode: best`, or the only feasible
    /// node), which kube-scheduler then takes without scoring or calling
    /// `/prioritize` (it skips both for a single feasible node), so the
    /// caller may hold the pod's GPUs there now, as `/prioritize` would
    /// (`placement::assume`).
    pub chosen: Option<String>,
}

impl Filtered {
    /// An answer that is only an error.
    pub fn failed(e: &ExtenderError) -> Self {
        Filtered {
            answer: FilterResult::error(e.to_string()),
            ..Filtered::default()
        }
    }
}

/// What should follow a `/filter` answer, carried out by the caller where
/// it can (events and preemption need an API server).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// An event on the pod.
    Event {
        warning: bool,
        reason: &'static str,
        note: String,
    },
    /// No node can hold the pod; these were refused for want of capacity,
    /// where evicting lower-priority pods may make room (gpugate's own
    /// preemption, when kube-scheduler does not preempt).
    Unplaced { shortage: Vec<String> },
}

/// Which candidates can hold the pod, and why the others cannot.
pub fn filter(
    view: &ClusterView,
    config: &Config,
    pod: &PodToPlace,
    candidates: &Candidates,
    now: Timestamp,
) -> Filtered {
    let names = candidates.name_list();
    let plan = &pod.plan;
    let (feasible, rejected) = match placement::judge(view, config, pod, Some(&names), now) {
        // Not a GPU pod: nothing for gpugate to judge.
        Verdict::NoGpus => (names.to_vec(), Vec::new()),
        Verdict::Everywhere(reason) => (
            Vec::new(),
            names.iter().map(|n| (n.clone(), reason.clone())).collect(),
        ),
        Verdict::Nodes(verdicts) => {
            let mode = config.scheduler.filter_mode;
            let offered = match mode {
                FilterMode::All => None,
                FilterMode::Best => Some(1),
                // At least one, whatever a config built in code says.
                FilterMode::Top => Some(config.scheduler.filter_top_nodes.max(1)),
            };
            // Fewer feasible nodes than that: all of them.
            match offered.filter(|k| *k < verdicts.feasible.len()) {
                None => (
                    verdicts.feasible.into_iter().map(|f| f.node).collect(),
                    verdicts.rejected,
                ),
                Some(k) => {
                    // Marked by position: thousands of nodes, a few kept.
                    let mut kept = vec![false; verdicts.feasible.len()];
                    for i in verdicts.top_indices(k) {
                        kept[i] = true;
                    }
                    let why = NodeReason::NotBestNode {
                        policy: plan.node_policy,
                        top: (mode == FilterMode::Top).then_some(k),
                    };
                    let (mut feasible, mut rejected) = (Vec::with_capacity(k), verdicts.rejected);
                    for (f, kept) in verdicts.feasible.into_iter().zip(kept) {
                        if kept {
                            feasible.push(f.node);
                        } else {
                            rejected.push((f.node, why.clone()));
                        }
                    }
                    (feasible, rejected)
                }
            }
        }
    };
    // kube-scheduler takes a single feasible node without `/prioritize`,
    // whichever mode offered it.
    let chosen = match feasible.as_slice() {
        [one] if pod.has_gpus() => Some(one.clone()),
        _ => None,
    };
    let mut answer = FilterResult::default();
    // Many nodes often share one reason (the quota, the group): its text is
    // made once.
    let mut last: Option<(&NodeReason, String)> = None;
    // kube-scheduler reads the reasons only when no node is feasible (its
    // FitError and preemption); otherwise they are JSON it decodes and
    // drops (about 20 KB per call at 1,000 nodes): a node not named is
    // simply not offered. gpugate's metrics and `explain` still see every
    // reason.
    let reasons = if feasible.is_empty() {
        rejected.as_slice()
    } else {
        &[]
    };
    for (node, reason) in reasons {
        // Not a failure: nodes not named are simply not offered.
        if matches!(reason, NodeReason::NotBestNode { .. }) {
            continue;
        }
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
    let mut effects = Vec::new();
    if let Some(named) = pod.unserved_group() {
        effects.push(Effect::Event {
            warning: true,
            reason: "PodGroupNotServed",
            note: format!(
                "{named}: the API server does not serve PodGroups (scheduling.x-k8s.io/v1alpha1; install the CRD), so this pod is placed on its own, not as a gang"
            ),
        });
    }
    if feasible.is_empty() && answer.error.is_empty() && pod.has_gpus() {
        let refused = rejected.iter().map(|(n, r)| (n.as_str(), r));
        for note in placement::failure_notes(refused) {
            effects.push(Effect::Event {
                warning: true,
                reason: "FilteringFailed",
                note,
            });
        }
        effects.push(Effect::Unplaced {
            shortage: rejected
                .iter()
                .filter(|(_, r)| placement::preemption::preemption_may_help(r))
                .map(|(n, _)| n.clone())
                .collect(),
        });
    }
    Filtered {
        answer: finish(answer, candidates, feasible),
        rejected,
        effects,
        chosen,
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
/// likely choose (the first of those ranked highest): the caller may hold
/// the pod's GPUs there until its bind (`placement::assume`).
#[derive(Debug)]
pub struct Prioritized {
    pub scores: Vec<HostPriority>,
    pub likely: Option<String>,
}

/// 1..=10 per candidate that scores above 0, in the order given: the node
/// policy's priority for nodes that can hold the pod (sharpened at the
/// top, see [`placement::NodeVerdicts::priorities`]), less the lowest any
/// candidate has; the others are left out (0 to kube-scheduler), except
/// when one reason turns down every candidate (the quota, the gang group)
/// or the pod asks for no GPUs: then every candidate is listed at 0 (a few
/// calls, not the common case); and the likely node.
///
/// Taking the lowest off changes no ranking: kube-scheduler adds each
/// extender's score, times a weight, to every node's own total and takes
/// the highest, so the same amount off every candidate moves every total
/// alike. It does change how equal totals are broken: kube-scheduler
/// draws a random tie-breaker only for nodes an extender lists, so a
/// listed node now wins a tie against one left out at the lowest level,
/// and with none listed it takes the first of its list (the node `/filter`
/// offered first, in name order, as [`placement::NodeVerdicts::best`]
/// breaks ties). What it buys is a short answer where the candidates share
/// the lowest level: under `filterMode: top` the few nodes offered often
/// do (spread: 3.5 bytes per answer at 1,000 nodes), and so do the nodes
/// of an evenly used cluster.
pub fn prioritize(
    view: &ClusterView,
    config: &Config,
    pod: &PodToPlace,
    candidates: &Candidates,
    now: Timestamp,
) -> Prioritized {
    let names = candidates.names();
    // A pod that no node can take gets no preference.
    let Verdict::Nodes(verdicts) = placement::judge(view, config, pod, Some(&names), now) else {
        return Prioritized {
            scores: names
                .into_iter()
                .map(|host| HostPriority { host, score: 0 })
                .collect(),
            likely: None,
        };
    };
    let priority: std::collections::HashMap<&str, u8> = verdicts.priorities().collect();
    let level = |host: &String| priority.get(host.as_str()).map_or(0, |p| i64::from(*p));
    // A candidate that cannot hold the pod (the view moved since /filter)
    // is at 0, and so is the floor then.
    let floor = names.iter().map(level).min().unwrap_or(0);
    // A node left out scores 0 to kube-scheduler (it adds up what is
    // listed): at 1,000 nodes a full answer is about 30 KB it decodes.
    let scores = names
        .iter()
        .filter_map(|host| {
            let score = level(host) - floor;
            (score > 0).then(|| HostPriority {
                host: host.clone(),
                score,
            })
        })
        .collect();
    let likely = verdicts.best().map(|b| b.node.clone());
    Prioritized { scores, likely }
}
