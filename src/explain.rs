//! `gpugate explain NAMESPACE/POD`: why a pod is pending, for a person.
//! Through the same placement rules as the extender (`placement::judge`,
//! the namespace policy of the validating webhook, the victim search of
//! `/preempt`), on a snapshot file or the API server read once with the
//! caller's own kubeconfig: each node's verdict in words, the nodes nearest
//! to holding the pod with what they lack, and the lower-priority pods
//! whose eviction would make room.

use std::fmt::Write as _;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};
use serde::Serialize;

use crate::admission::validate::{Validation, validate};
use crate::cluster::convert::{pod_name, pod_namespace, pod_own_name};
use crate::cluster::{ClusterView, Snapshot};
use crate::config::Config;
use crate::engine::checks::{check_gpu, holds_when_empty};
use crate::engine::reason::ZoneSubject;
use crate::engine::request::GpuRequest;
use crate::engine::{Node, PodPlan, Reason, Rejection};
use crate::placement::defrag;
use crate::placement::preemption::capacity_shortage;
use crate::placement::scheduler_checks;
use crate::placement::victims::gpu_victims;
use crate::placement::words::{in_words, kind_request_words, memory_words, request_words};
use crate::placement::{self, NodeReason, PodToPlace, Verdict};
use crate::simulate::render;

/// Nodes listed under "nearest", at most.
const NEAREST: usize = 3;

/// What `explain` says of one pod, in the shape `--output json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub pod: String,
    /// `pending`, `bound`, `finished`, or `not a GPU pod`.
    pub status: String,
    /// The node it is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub priority: i32,
    /// Whether it may evict lower-priority pods (`preemptionPolicy`).
    pub preempts: bool,
    /// What each GPU container asks for, in words.
    pub asks: Vec<String>,
    /// The pod cannot be planned (its request or annotations are invalid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// The validating webhook (namespace policy, GPU quota, request rules)
    /// would refuse the pod if it were created now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<String>,
    /// A reason that holds on every node (quota, gang group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub everywhere: Option<Refusal>,
    /// Every GPU node's verdict, in name order.
    pub nodes: Vec<NodeVerdict>,
    /// Refused nodes nearest to holding the pod, nearest first.
    pub nearest: Vec<String>,
    /// No GPU in the cluster could hold the pod even empty: why, with the
    /// numbers (the request, the largest GPU, the largest MIG profile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub never: Option<String>,
    /// Defragmentation's plan, for a pod that fits nowhere: the pods
    /// whose moving lets it fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defragmentation: Option<Defragmentation>,
    /// The verdict in one sentence.
    pub summary: String,
}

/// What defragmentation would do for the pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Defragmentation {
    /// The plan in one sentence, or why there is none.
    pub verdict: String,
    /// The node the pod would go to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The pods moved, each from its node to another.
    pub moves: Vec<PlannedMoveView>,
    /// Whether gpugate acts on it: `scheduler.defragmentation.enabled`,
    /// and every moved pod's namespace opted in.
    pub enabled: bool,
    /// Namespaces that would have to opt in (`movable: true`) for the
    /// plan: none when it moves only pods of namespaces that did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub opt_in: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedMoveView {
    pub pod: String,
    pub from: String,
    pub to: String,
}

/// One reason, three ways: the stable code, the text kube-scheduler and
/// events show, and words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    pub code: String,
    pub reason: String,
    pub words: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeVerdict {
    pub node: String,
    pub fits: bool,
    /// kube-scheduler never offers this node to gpugate for the pod
    /// (nodeSelector, required node affinity, taints, cordon): why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
    /// What the node lacks, with numbers (GPU and NUMA shortfalls).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// Lower-priority pods whose eviction makes room here (the fewest,
    /// lowest priority first, as `/preempt` chooses them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preempt: Vec<Victim>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Victim {
    pub pod: String,
    pub priority: i32,
    /// What it holds on the node, e.g. `8000 MiB, 30 cores on GPU-0`.
    pub holds: String,
    /// Its eviction would break a PodDisruptionBudget (chosen only when
    /// no set of pods that breaks none makes room).
    #[serde(
        rename = "breaksDisruptionBudget",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub breaks_budget: bool,
}

/// Why explain cannot answer at all.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("pod {0} is not in the cluster (give it as NAMESPACE/NAME)")]
    NotFound(String),
}

/// Explains pod `namespace/name` of `cluster` at `now`.
pub fn explain(
    cluster: &Snapshot,
    namespace: &str,
    name: &str,
    config: &Config,
    now: Timestamp,
) -> Result<Explanation, ExplainError> {
    let pod = cluster
        .pods
        .iter()
        .find(|p| pod_namespace(p) == namespace && pod_own_name(p) == name)
        .ok_or_else(|| ExplainError::NotFound(format!("{namespace}/{name}")))?;
    let (mut view, _) = cluster.to_view();
    // The node locks as read: a held one makes a bind there wait.
    for node in &cluster.nodes {
        view.note_node_lock(node);
    }
    let mut e = explain_pod(&view, &cluster.nodes, pod, config, now);
    if e.status == "pending" && e.everywhere.is_none() && !e.nodes.iter().any(|n| n.fits) {
        e.defragmentation = defragmentation(&view, cluster, pod, config, now);
        if let Some(d) = &e.defragmentation {
            let _ = write!(e.summary, "; defragmentation: {}", d.verdict);
        }
    }
    Ok(e)
}

/// Why the GPU holders of `pods` may not move for `pending`, counted:
/// "3 not recreated by a ReplicaSet or StatefulSet, 1 in a gang
/// group".
fn unmovable_counts(
    view: &ClusterView,
    config: &Config,
    pending: &PodToPlace,
    pods: &[Pod],
    now: Timestamp,
) -> String {
    let mut why: std::collections::BTreeMap<defrag::Unmovable, usize> = Default::default();
    for p in pods {
        match defrag::movable(view, config, pending, p, now) {
            // Pods that hold no GPU on a node are not holders at all.
            Err(defrag::Unmovable::NotSettled) | Ok(_) => {}
            Err(u) => *why.entry(u).or_default() += 1,
        }
    }
    if why.is_empty() {
        return "no pod holds GPUs it could give up".to_string();
    }
    why.iter()
        .map(|(u, n)| format!("{n} {}", u.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn move_views(p: &defrag::DefragPlan) -> Vec<PlannedMoveView> {
    p.moves
        .iter()
        .map(|m| PlannedMoveView {
            pod: m.pod.clone(),
            from: m.from.clone(),
            to: m.to.clone(),
        })
        .collect()
}

/// `gpugate defrag --plan`: each pending GPU pod's plan (or the one
/// named), each for that pod alone on the cluster as it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DefragReport {
    pub pods: Vec<PodPlanView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodPlanView {
    pub pod: String,
    /// `fits now`, `invalid`, or the plan's verdict.
    pub verdict: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defragmentation: Option<Defragmentation>,
}

/// The plans for the pending GPU pods of `cluster` (or only `only`,
/// `(namespace, name)`), acting on nothing.
pub fn defrag_plans(
    cluster: &Snapshot,
    only: Option<(&str, &str)>,
    config: &Config,
    now: Timestamp,
) -> Result<DefragReport, ExplainError> {
    let (view, _) = cluster.to_view();
    if let Some((namespace, name)) = only
        && !cluster
            .pods
            .iter()
            .any(|p| pod_namespace(p) == namespace && pod_own_name(p) == name)
    {
        return Err(ExplainError::NotFound(format!("{namespace}/{name}")));
    }
    let mut pods = Vec::new();
    for pod in &cluster.pods {
        if only.is_some_and(|(ns, name)| pod_namespace(pod) != ns || pod_own_name(pod) != name) {
            continue;
        }
        let pending = pod.spec.as_ref().is_some_and(|s| s.node_name.is_none())
            && !crate::cluster::convert::pod_finished(pod);
        if !pending {
            continue;
        }
        let verdict = match PodToPlace::read(pod.clone(), config, &view) {
            Err(e) => format!("its GPU request cannot be read: {e}"),
            Ok(p) if !p.plan.request.has_gpus() => continue,
            Ok(_) => match defragmentation(&view, cluster, pod, config, now) {
                None => "fits now: nothing to move".to_string(),
                Some(d) => {
                    pods.push(PodPlanView {
                        pod: pod_name(pod),
                        verdict: d.verdict.clone(),
                        defragmentation: Some(d),
                    });
                    continue;
                }
            },
        };
        pods.push(PodPlanView {
            pod: pod_name(pod),
            verdict,
            defragmentation: None,
        });
    }
    Ok(DefragReport { pods })
}

impl DefragReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub fn to_table(&self) -> String {
        let mut out = String::new();
        if self.pods.is_empty() {
            out.push_str("no pending GPU pod\n");
            return out;
        }
        let mut rows = vec![vec![
            "PENDING".to_string(),
            "TO".into(),
            "MOVE".into(),
            "FROM".into(),
            "TO".into(),
        ]];
        for p in &self.pods {
            let d = p.defragmentation.as_ref();
            let moves = d.map(|d| d.moves.as_slice()).unwrap_or_default();
            if moves.is_empty() {
                continue;
            }
            for (i, m) in moves.iter().enumerate() {
                rows.push(vec![
                    if i == 0 { p.pod.clone() } else { String::new() },
                    if i == 0 {
                        d.and_then(|d| d.node.clone()).unwrap_or_default()
                    } else {
                        String::new()
                    },
                    m.pod.clone(),
                    m.from.clone(),
                    m.to.clone(),
                ]);
            }
        }
        if rows.len() > 1 {
            out.push_str(&render(&rows));
            out.push('\n');
        }
        for p in &self.pods {
            let _ = writeln!(out, "{}: {}", p.pod, p.verdict);
        }
        out
    }
}

/// Defragmentation's plan for the pending `pod` among the nodes
/// kube-scheduler would offer it, moving pods of `cluster`.
pub fn defragmentation(
    view: &ClusterView,
    cluster: &Snapshot,
    pod: &Pod,
    config: &Config,
    now: Timestamp,
) -> Option<Defragmentation> {
    let placing = PodToPlace::read(pod.clone(), config, view).ok()?;
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .filter(|n| scheduler_checks::excluded(pod, n).is_none())
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let outcome = defrag::plan(
        view,
        config,
        &placing,
        Some(&nodes),
        &cluster.pods,
        Some(&cluster.nodes),
        now,
    );
    let enabled = config.scheduler.defragmentation.enabled;
    // Without a plan from the namespaces that opted in: the plan if every
    // namespace did, and which ones it needs.
    let mut opt_in: Vec<String> = Vec::new();
    let mut why_not = String::new();
    let outcome = match outcome {
        defrag::Outcome::NoPlan { .. } => {
            let mut every = config.clone();
            for p in &mut every.namespace_policies {
                p.movable = true;
            }
            every.namespace_policies.push(
                serde_yaml_ng::from_str(
                    "{name: every-namespace, namespaces: ['*'], movable: true}",
                )
                .ok()?,
            );
            match defrag::plan(
                view,
                &every,
                &placing,
                Some(&nodes),
                &cluster.pods,
                Some(&cluster.nodes),
                now,
            ) {
                defrag::Outcome::Plan(p) => {
                    opt_in = p
                        .moves
                        .iter()
                        .filter_map(|m| m.pod.split_once('/').map(|(ns, _)| ns))
                        .filter(|ns| !defrag::namespace_movable(view, config, ns))
                        .map(str::to_string)
                        .collect();
                    opt_in.sort();
                    opt_in.dedup();
                    defrag::Outcome::Plan(p)
                }
                what_if => {
                    why_not = unmovable_counts(view, &every, &placing, &cluster.pods, now);
                    what_if
                }
            }
        }
        other => other,
    };
    let (verdict, node, moves) = match outcome {
        defrag::Outcome::NotNeeded => return None,
        defrag::Outcome::GangMember => (
            "not planned for gang members (a gang is placed whole)".to_string(),
            None,
            Vec::new(),
        ),
        defrag::Outcome::NoPlan { movable: 0, .. } => (
            format!("no GPU holder could move, even if every namespace opted in ({why_not})"),
            None,
            Vec::new(),
        ),
        defrag::Outcome::NoPlan {
            exhaustive,
            movable,
        } => (
            format!(
                "no set of at most {} moves of the {movable} pods that may move makes room{}",
                config.scheduler.defragmentation.max_moves,
                if exhaustive {
                    ""
                } else {
                    " within the search budget"
                }
            ),
            None,
            Vec::new(),
        ),
        defrag::Outcome::Plan(p) if !opt_in.is_empty() => (
            format!(
                "it {} if namespace{} {} opted in (namespace policy movable: true); nothing moves until then",
                p.describe(),
                if opt_in.len() == 1 { "" } else { "s" },
                opt_in.join(", ")
            ),
            Some(p.node.clone()),
            move_views(&p),
        ),
        defrag::Outcome::Plan(p) => (p.describe(), Some(p.node.clone()), move_views(&p)),
    };
    Some(Defragmentation {
        verdict,
        node,
        moves,
        enabled: enabled && opt_in.is_empty(),
        opt_in,
    })
}

/// Explains `pod` on the view of `nodes`.
pub fn explain_pod(
    view: &ClusterView,
    nodes: &[K8sNode],
    pod: &Pod,
    config: &Config,
    now: Timestamp,
) -> Explanation {
    let spec = pod.spec.as_ref();
    let priority = spec.and_then(|s| s.priority).unwrap_or(0);
    let preempts = spec.and_then(|s| s.preemption_policy.as_deref()) != Some("Never");
    let mut out = Explanation {
        pod: pod_name(pod),
        status: "pending".into(),
        node: spec.and_then(|s| s.node_name.clone()),
        priority,
        preempts,
        asks: Vec::new(),
        invalid: None,
        admission: None,
        everywhere: None,
        nodes: Vec::new(),
        nearest: Vec::new(),
        never: None,
        defragmentation: None,
        summary: String::new(),
    };
    let placing = match PodToPlace::read(pod.clone(), config, view) {
        Ok(p) => p,
        Err(e) => {
            out.summary = format!("the pod's GPU request cannot be read: {e}");
            out.invalid = Some(e.to_string());
            return out;
        }
    };
    let plan = &placing.plan;
    out.asks = request_words(plan, config);
    if crate::cluster::convert::pod_finished(pod) {
        out.status = "finished".into();
        out.summary = "the pod has finished; it holds no GPUs".into();
        return out;
    }
    if let Some(node) = &out.node {
        out.status = "bound".into();
        out.summary = format!("the pod is bound to node {node}; it is not pending");
        return out;
    }
    out.admission = admission_refusal(view, pod, config);
    let mut candidates: Vec<String> = Vec::new();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        match scheduler_checks::excluded(pod, node) {
            Some(why) => out.nodes.push(NodeVerdict {
                node: name,
                fits: false,
                excluded: Some(why),
                refusal: None,
                missing: None,
                preempt: Vec::new(),
            }),
            None => candidates.push(name),
        }
    }
    let verdicts = match placement::judge(view, config, &placing, Some(&candidates), now) {
        Verdict::NoGpus => {
            out.nodes.clear();
            out.admission = None;
            out.status = "not a GPU pod".into();
            out.summary =
                "the pod asks for no GPU: gpugate does not place it; kube-scheduler's own events say why it is pending".into();
            return out;
        }
        Verdict::Everywhere(reason) => {
            out.nodes.clear();
            let cfg = config.device_config(plan.request.device_kind);
            out.summary = format!("no node can hold it: {}", in_words(&reason, cfg));
            out.everywhere = Some(refusal(&reason, cfg));
            return out;
        }
        Verdict::Nodes(v) => v,
    };
    let mut nearness: Vec<(Shortfall, String)> = Vec::new();
    for f in &verdicts.feasible {
        out.nodes.push(NodeVerdict {
            node: f.node.clone(),
            fits: true,
            excluded: None,
            refusal: None,
            missing: None,
            preempt: Vec::new(),
        });
    }
    for (node, reason) in &verdicts.rejected {
        let (missing, short) = view
            .state()
            .node(node)
            .map(|n| shortfall(view, n, plan, reason))
            .unwrap_or_default();
        let preempt = if preempts && capacity_shortage(reason) {
            victims(view, plan, node, priority)
        } else {
            Vec::new()
        };
        if let Some(s) = short.filter(|_| !reason.is_unresolvable()) {
            nearness.push((s, node.clone()));
        }
        out.nodes.push(NodeVerdict {
            node: node.clone(),
            fits: false,
            excluded: None,
            refusal: Some(refusal(
                reason,
                config.device_config(plan.request.device_kind),
            )),
            missing,
            preempt,
        });
    }
    out.nodes.sort_by(|a, b| a.node.cmp(&b.node));
    nearness.sort();
    out.nearest = nearness.into_iter().take(NEAREST).map(|(_, n)| n).collect();
    if verdicts.best().is_none() {
        out.never = never_fits(view, plan);
        if out.never.is_some() {
            out.nearest.clear();
        }
    }
    out.summary = summary(&out, verdicts.best().map(|b| b.node.as_str()));
    out
}

/// Why no GPU of the cluster could ever hold a GPU container of the pod,
/// even with nothing on it: no node has as many GPUs the pod accepts
/// (model, mode, UUID) that each hold one slice when empty (its memory
/// and cores; on a MIG GPU, an allowed profile with that much memory).
/// `None` when some node could, once freed, or when the pod accepts no GPU
/// at all (the per-node reasons say that).
fn never_fits(view: &ClusterView, plan: &PodPlan) -> Option<String> {
    let nodes: Vec<&Node> = view.state().nodes().collect();
    let accepted = |gpu: &crate::engine::Gpu| {
        plan.selection.accepts_model(gpu) && plan.selection.accepts_uuid(gpu)
    };
    for c in &plan.request.containers {
        let Some(g) = c.gpu else { continue };
        let holds = |gpu: &crate::engine::Gpu| holds_when_empty(gpu, &g, &plan.selection);
        // A MIG GPU may give one container several instances.
        let grants = |n: &Node| -> usize {
            n.gpus
                .iter()
                .filter(|gpu| accepted(gpu) && holds(gpu))
                .map(|gpu| gpu.most_grants() as usize)
                .sum()
        };
        let some_node_could = nodes.iter().any(|n| grants(n) >= g.count as usize);
        let any_accepted = nodes.iter().flat_map(|n| n.gpus.iter()).any(&accepted);
        if some_node_could || !any_accepted {
            continue;
        }
        let kind = plan.request.device_kind.kind();
        let unit = kind.unit();
        let mut text = format!("container {} asks {}", c.name, kind_request_words(&g, kind));
        let sliced = nodes
            .iter()
            .flat_map(|n| n.gpus.iter())
            .filter(|gpu| accepted(gpu) && !gpu.is_mig())
            .max_by_key(|gpu| (gpu.capacity.mem_mib, gpu.capacity.cores));
        if let Some(gpu) = sliced {
            let _ = write!(
                text,
                "; the largest {unit} it may use has {} MiB and {} cores ({})",
                gpu.capacity.mem_mib, gpu.capacity.cores, gpu.model
            );
        }
        let profile = nodes
            .iter()
            .flat_map(|n| n.gpus.iter())
            .filter(|gpu| accepted(gpu))
            .flat_map(|gpu| plan.selection.mig_profiles_holding(gpu, 0).map(|(p, _)| p))
            .max_by_key(|p| (p.memory_mib, std::cmp::Reverse(p.slice_count)));
        if let Some(p) = profile {
            let _ = write!(
                text,
                "; the largest MIG profile it may use has {} MiB ({})",
                p.memory_mib, p.name
            );
        }
        let most = nodes.iter().map(|n| grants(n)).max().unwrap_or(0);
        if g.count > 1 && most > 0 {
            let _ = write!(
                text,
                "; at most {most} {unit}s of one node could each hold such a slice"
            );
        }
        return Some(text);
    }
    None
}

fn refusal(reason: &NodeReason, cfg: &crate::engine::request::DeviceConfig) -> Refusal {
    Refusal {
        code: reason.code().to_string(),
        reason: reason.to_string(),
        words: in_words(reason, cfg),
    }
}

/// The validating webhook's refusal of the pod as it is now, if any.
fn admission_refusal(view: &ClusterView, pod: &Pod, config: &Config) -> Option<String> {
    let raw = serde_json::to_value(pod).ok()?;
    let namespace = pod_namespace(pod).to_string();
    let verdict = crate::admission::pod::PodView::judge_value(
        &raw,
        |p| validate(p, config, Some(&namespace), Some(view)),
        Validation::Invalid,
    );
    match verdict {
        Validation::Allow { .. } => None,
        Validation::Deny(d) => Some(d.message),
        Validation::Invalid(e) => Some(e),
    }
}

/// How far a node is from holding the pod, in thousandths of a GPU: a GPU
/// that must be emptied (no slice left, or held where the pod needs it
/// alone) counts 1,000, a GPU short of memory or cores the share of its
/// capacity missing. Lower is nearer.
type Shortfall = u64;

/// What the node lacks for the first container it refuses, in words, and
/// its distance when capacity is what it lacks.
fn shortfall(
    view: &ClusterView,
    node: &Node,
    plan: &PodPlan,
    reason: &NodeReason,
) -> (Option<String>, Option<Shortfall>) {
    match reason {
        NodeReason::Engine(Rejection::Devices {
            container, counts, ..
        }) => {
            let Some(g) = plan
                .request
                .containers
                .iter()
                .find(|c| &c.name == container)
                .and_then(|c| c.gpu)
            else {
                return (None, None);
            };
            if counts.get(Reason::NumaNotFit) > 0 {
                let mut zones: Vec<i32> = node.gpus.iter().map(|g| g.numa).collect();
                zones.sort_unstable();
                zones.dedup();
                let zones: Vec<String> = zones.iter().map(i32::to_string).collect();
                return (
                    Some(format!(
                        "needs {} GPUs on one NUMA node (nvidia.com/numa-bind); the GPUs that could hold a slice are spread over NUMA nodes {}",
                        g.count,
                        zones.join(", ")
                    )),
                    None,
                );
            }
            let (text, short) = gpu_shortfall(node, plan, &g);
            (Some(text), short)
        }
        NodeReason::Engine(Rejection::NumaZones { subject, .. }) => {
            (zone_words(view, node, plan, subject), None)
        }
        _ => (None, None),
    }
}

/// The node's GPUs under the engine's own per-GPU check: how many can take
/// one slice of `g`, the freest of those the pod may use at all (healthy,
/// not cordoned, of a model and UUID it accepts), and the distance: the
/// `g.count` nearest GPUs' shortfalls added up (`None` when the pod may
/// use too few GPUs here for freeing any to help).
fn gpu_shortfall(node: &Node, plan: &PodPlan, g: &GpuRequest) -> (String, Option<Shortfall>) {
    let mut usable: Vec<(Shortfall, u64, u32, &str)> = Vec::new();
    let mut mig_words: Vec<String> = Vec::new();
    let tenancy = plan.selection.kind.kind().tenancy;
    for (pos, (gpu, used)) in node.gpus.iter().zip(&node.usage).enumerate() {
        // A device whose pods' class refuses the pod cannot be used by it
        // (Metax sGPU's app class and QoS policy).
        if let Some(keys) = tenancy {
            let ask = (plan.selection.tenancy, g.cores);
            if node
                .tenants(pos)
                .refuses(keys, ask, used.slots == 0, gpu.mode())
                .is_some()
            {
                continue;
            }
        }
        let cap = &gpu.capacity;
        let cap_mem = u64::from(cap.mem_mib);
        let free_mem = u64::from(cap.mem_mib.saturating_sub(used.mem_mib));
        let free_cores = cap.cores.saturating_sub(used.cores);
        if g.mem_on(cap_mem) > cap_mem || g.cores > cap.cores {
            // Too small even empty.
            continue;
        }
        let short = match check_gpu(gpu, used, g, &plan.selection, plan.gpu_policy.is_mutex()) {
            Ok(_) => 0,
            Err(
                Reason::CardNotHealth
                | Reason::CardCordoned
                | Reason::CardTypeMismatch
                | Reason::CardUuidMismatch,
            ) => continue,
            Err(Reason::CardInsufficientMemory | Reason::CardInsufficientCore) => {
                let mem = g.mem_on(cap_mem).saturating_sub(free_mem);
                let cores = g.cores.saturating_sub(free_cores);
                mem * 1000 / cap_mem.max(1) + u64::from(cores) * 1000 / u64::from(cap.cores.max(1))
            }
            Err(Reason::CardMigTopologyInfeasible) => {
                mig_words.push(mig_infeasible_words(gpu, plan, g.mem_on(cap_mem)));
                1000
            }
            Err(_) => 1000,
        };
        usable.push((short, free_mem, free_cores, gpu.uuid.as_str()));
    }
    let n = g.count as usize;
    let need = memory_words(g);
    let unit = plan.request.device_kind.kind().unit();
    let on = if g.count == 1 {
        format!("one {unit}")
    } else {
        format!("each of {} {unit}s", g.count)
    };
    let mut text = format!("needs {need} and {} cores free on {on}", g.cores);
    let enough = usable.iter().filter(|u| u.0 == 0).count();
    match usable.iter().max_by_key(|u| (u.1, u.2)) {
        None => {
            let _ = write!(text, "; none of its {unit}s can be used by this pod");
        }
        Some((_, mem, cores, uuid)) => {
            let _ = write!(
                text,
                "; the freest has {mem} MiB and {cores} cores free ({uuid}); {enough} of the {} {unit}s it may use can take a slice now",
                usable.len()
            );
        }
    }
    for w in &mig_words {
        let _ = write!(text, "; {w}");
    }
    if usable.len() < n {
        return (text, None);
    }
    usable.sort_by_key(|u| u.0);
    (text, Some(usable.iter().take(n).map(|u| u.0).sum()))
}

/// Why a MIG GPU has no instance for `mem` MiB, in words: the profile
/// that would hold it and its placements all overlapping instances there,
/// or no allowed profile that large.
fn mig_infeasible_words(gpu: &crate::engine::Gpu, plan: &PodPlan, mem: u64) -> String {
    let holding = plan.selection.mig_profiles_holding(gpu, mem).next();
    match holding {
        Some((p, masks)) => format!(
            "on {} {} would hold {mem} MiB, but each of its {} placements overlaps an instance there (and so do those of every larger profile)",
            gpu.uuid,
            p.name,
            masks.len()
        ),
        None => format!("on {} no allowed MIG profile holds {mem} MiB", gpu.uuid),
    }
}

/// What each NUMA zone of the node has free, beside what the container
/// needs there.
fn zone_words(
    view: &ClusterView,
    node: &Node,
    plan: &PodPlan,
    subject: &ZoneSubject,
) -> Option<String> {
    let topology = view.state().topology(&node.name)?;
    let zones: Vec<String> = topology
        .zones
        .iter()
        .map(|z| {
            format!(
                "zone {}: {} CPUs, {} MiB",
                z.id,
                cpus(z.available.cpu_milli),
                z.available.memory_bytes >> 20
            )
        })
        .collect();
    let ZoneSubject::Container(name) = subject else {
        return Some(format!("free by zone: {}", zones.join("; ")));
    };
    let need = plan
        .request
        .containers
        .iter()
        .position(|c| &c.name == name)
        .and_then(|i| plan.numa.containers.get(i))
        .map(|c| {
            format!(
                "needs {} CPUs and {} MiB in one zone; ",
                cpus(c.cpu_milli),
                c.memory_bytes >> 20
            )
        })
        .unwrap_or_default();
    Some(format!("{need}free by zone: {}", zones.join("; ")))
}

fn cpus(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{:.1}", milli as f64 / 1000.0)
    }
}

/// The pods `/preempt` would add on `node` for the pod, as a person reads
/// them.
fn victims(view: &ClusterView, plan: &PodPlan, node: &str, below: i32) -> Vec<Victim> {
    let Some(found) = gpu_victims(view, plan, node, &[], below) else {
        return Vec::new();
    };
    let uids: Vec<&str> = found.pods.iter().map(String::as_str).collect();
    let breaks = view.budget_violations(&uids);
    found
        .pods
        .iter()
        .zip(breaks)
        .map(|(uid, breaks_budget)| {
            let holds = view
                .held_allocation(uid)
                .map(|a| {
                    a.usage_by_gpu()
                        .into_iter()
                        .map(|(gpu, u)| format!("{} MiB, {} cores on {gpu}", u.mem_mib, u.cores))
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default();
            Victim {
                pod: view.held_name(uid).unwrap_or_else(|| uid.clone()),
                priority: view.held_priority(uid).unwrap_or(0),
                holds,
                breaks_budget,
            }
        })
        .collect()
}

fn summary(e: &Explanation, best: Option<&str>) -> String {
    let fit = e.nodes.iter().filter(|n| n.fits).count();
    if let Some(best) = best {
        return format!(
            "{fit} of {} nodes can hold it now; gpugate ranks {best} best. If it is still pending, kube-scheduler's own checks (CPU, memory, taints, affinity) refuse those nodes: see its events",
            e.nodes.len()
        );
    }
    let mut by_code: std::collections::BTreeMap<&str, usize> = Default::default();
    for n in &e.nodes {
        if let Some(r) = &n.refusal {
            *by_code.entry(r.code.as_str()).or_default() += 1;
        }
        if n.excluded.is_some() {
            *by_code
                .entry("excluded by kube-scheduler's checks")
                .or_default() += 1;
        }
    }
    let codes: Vec<String> = by_code
        .iter()
        .map(|(code, n)| format!("{n} {code}"))
        .collect();
    let mut s = format!(
        "no node can hold it now ({} nodes: {})",
        e.nodes.len(),
        codes.join(", ")
    );
    if let Some(never) = &e.never {
        let _ = write!(
            s,
            "; no GPU in the cluster could ever hold it, even empty: {never}"
        );
        return s;
    }
    if let Some(near) = e.nearest.first()
        && let Some(v) = e.nodes.iter().find(|n| &n.node == near)
        && let Some(m) = &v.missing
    {
        let _ = write!(s, "; nearest is {near}, which {m}");
    }
    if e.nodes.iter().any(|n| !n.preempt.is_empty()) {
        s.push_str("; evicting lower-priority pods would make room (see PREEMPT)");
    } else if !e.preempts {
        s.push_str("; its preemptionPolicy is Never, so it evicts nobody");
    }
    s
}

impl Explanation {
    /// Exactly one JSON object.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings and numbers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// For a person: the pod, the verdict, the nearest nodes, every node.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let node = self
            .node
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "POD {} ({}{node}; priority {}{})",
            self.pod,
            self.status,
            self.priority,
            if self.preempts {
                ""
            } else {
                ", preemptionPolicy Never"
            }
        );
        for a in &self.asks {
            let _ = writeln!(out, "  asks {a}");
        }
        let _ = writeln!(out, "\n{}", self.summary);
        if let Some(a) = &self.admission {
            let _ = writeln!(out, "\nTHE VALIDATING WEBHOOK WOULD REFUSE IT NOW\n  {a}");
        }
        if let Some(r) = &self.everywhere {
            let _ = writeln!(out, "\nON EVERY NODE\n  {} ({})", r.words, r.code);
        }
        if !self.nearest.is_empty() {
            let _ = writeln!(out, "\nNEAREST");
            for name in &self.nearest {
                if let Some(n) = self.nodes.iter().find(|n| &n.node == name) {
                    let _ = writeln!(out, "  {name}: {}", n.missing.as_deref().unwrap_or("-"));
                }
            }
        }
        let preempting: Vec<&NodeVerdict> = self
            .nodes
            .iter()
            .filter(|n| !n.preempt.is_empty())
            .collect();
        if !preempting.is_empty() {
            let mut rows = vec![vec![
                "NODE".to_string(),
                "EVICT".into(),
                "PRIORITY".into(),
                "HOLDS".into(),
            ]];
            for n in preempting {
                for (i, v) in n.preempt.iter().enumerate() {
                    rows.push(vec![
                        if i == 0 {
                            n.node.clone()
                        } else {
                            String::new()
                        },
                        v.pod.clone(),
                        v.priority.to_string(),
                        if v.breaks_budget {
                            format!("{} (breaks a PodDisruptionBudget)", v.holds)
                        } else {
                            v.holds.clone()
                        },
                    ]);
                }
            }
            let _ = writeln!(
                out,
                "\nPREEMPT (lower-priority pods whose eviction makes room: kube-scheduler preempts through gpugate where its own checks need a victim too; where only GPU is short, gpugate evicts them itself, scheduler.preemption)"
            );
            out.push_str(&render(&rows));
        }
        if let Some(d) = self
            .defragmentation
            .as_ref()
            .filter(|d| !d.moves.is_empty())
        {
            let _ = writeln!(
                out,
                "\nMOVE (defragmentation: these pods are evicted and recreated by their controllers, each with its place held on its new node; {})",
                if d.enabled {
                    "gpugate acts on it when preemption cannot help"
                } else if !d.opt_in.is_empty() {
                    "not acted on: their namespaces have not opted in"
                } else {
                    "scheduler.defragmentation.enabled is false: gpugate does not act on it"
                }
            );
            let mut rows = vec![vec!["POD".to_string(), "FROM".into(), "TO".into()]];
            for m in &d.moves {
                rows.push(vec![m.pod.clone(), m.from.clone(), m.to.clone()]);
            }
            out.push_str(&render(&rows));
        }
        if !self.nodes.is_empty() {
            let mut rows = vec![vec![
                "NODE".to_string(),
                "FITS".into(),
                "CODE".into(),
                "WHY".into(),
            ]];
            for n in &self.nodes {
                rows.push(vec![
                    n.node.clone(),
                    if n.fits { "yes" } else { "no" }.into(),
                    n.refusal.as_ref().map_or_else(
                        || {
                            if n.excluded.is_some() {
                                "(kube-scheduler)"
                            } else {
                                "-"
                            }
                            .into()
                        },
                        |r| r.code.clone(),
                    ),
                    n.refusal.as_ref().map_or_else(
                        || n.excluded.clone().unwrap_or_default(),
                        |r| r.words.clone(),
                    ),
                ]);
            }
            let _ = writeln!(out, "\nNODES ({})", self.nodes.len());
            out.push_str(&render(&rows));
        }
        out
    }
}
