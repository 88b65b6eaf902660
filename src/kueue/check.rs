//! The admission check's answer for one Workload, as a function of the
//! view: can every GPU pod of every pod set be placed now, together, under
//! gpugate's policies, quotas and device kinds?
//!
//! - **Ready**: yes. The places found are held for the workload, as a
//!   gang's holds, and its GPU pod sets get the labels that make their pods
//!   one gang (`pod-group.scheduling.sigs.k8s.io/name` and
//!   `.../min-available`), so that the pods, when they come, are judged
//!   without those holds and take the held places.
//! - **Retry**: not now (what is free is scattered or taken), with the
//!   numbers: "largest free slice 8 GiB; 2 × 24 GiB needed".
//!   [`answer_and_gang`] also gives the gang whose room moving pods could
//!   make (the controller's defragmentation then keeps the check Pending).
//! - **Rejected**: never: not on this cluster with every device free, or
//!   the pods as written would be refused by gpugate's webhooks.
//!
//! The pods are the pod sets' templates as gpugate's mutating webhook will
//! rewrite them (namespace defaults, scheduler name), with the node labels
//! of the ResourceFlavors Kueue assigned, and placed member by member on
//! the best node under each pod's policy, among the nodes kube-scheduler
//! would offer (its nodeSelector, affinity and taints, decided by the
//! caller).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::admission::mutate::{Mutation, mutate};
use crate::admission::pod::PodView;
use crate::admission::validate::{Validation, validate};
use crate::capacity::capacity;
use crate::cluster::ClusterView;
use crate::config::Config;
use crate::engine::gang::{
    GROUP_MIN_AVAILABLE, GROUP_NAME, GangKey, GangLabel, GangShortfall, place_gang,
};
use crate::engine::request::Memory;
use crate::engine::{Allocation, ClusterState, KindAmounts, PodPlan};
use crate::placement::PodToPlace;

use super::workload::{PodSet, Workload};

/// What the check answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// No pod set asks gpugate for a device: Ready, nothing held.
    NoDevices,
    Ready(Ready),
    /// Not now; the message says why in numbers.
    Retry(String),
    /// Never, with the reason.
    Rejected(String),
}

/// A workload that fits now.
#[derive(Debug, Clone, PartialEq)]
pub struct Ready {
    /// The gang its GPU pods form.
    pub group: GangKey,
    /// How many GPU pods (the gang's min-available).
    pub members: usize,
    /// The places to hold, by hold key (one per pod not yet created).
    pub holds: Vec<(String, Allocation)>,
    /// `podSetUpdates` for the check's state: the gang labels per GPU pod
    /// set.
    pub pod_set_updates: Vec<Value>,
    /// What it takes, in words (for the message).
    pub needed: String,
}

impl Ready {
    /// The places held, by node: `kq-1 (GPU-a, GPU-b), kq-2 (GPU-c)`.
    pub fn places(&self) -> String {
        let mut by_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (_, a) in &self.holds {
            let devices = by_node.entry(a.node.as_str()).or_default();
            for g in a.containers.iter().flatten() {
                if !devices.contains(&g.uuid.as_str()) {
                    devices.push(g.uuid.as_str());
                }
            }
        }
        by_node
            .iter()
            .map(|(node, devices)| format!("{node} ({})", devices.join(", ")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Which nodes kube-scheduler would offer a pod (`None`: every node).
pub type Candidates<'c> = &'c dyn Fn(&Pod) -> Option<Vec<String>>;

/// The gang group of a workload's GPU pods: its name when that is a valid
/// label value, else one made from its UID (a label value is at most 63
/// characters; workload names may be longer).
pub fn group_of(workload: &Workload) -> GangKey {
    let name = &workload.name;
    let valid = name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    GangKey {
        namespace: workload.namespace.clone(),
        name: if valid {
            name.clone()
        } else {
            format!("workload-{}", workload.uid)
        },
    }
}

/// The hold key of pod `i` of pod set `set` (never a pod's UID).
pub fn hold_key(workload: &Workload, set: &str, i: u32) -> String {
    format!("kueue/{}/{}/{set}/{i}", workload.namespace, workload.name)
}

/// One GPU pod set, read: its plan, and the pod its templates make.
struct Member<'w> {
    set: &'w PodSet,
    pod: PodToPlace,
}

/// The pod a pod set's template makes, as gpugate's mutating webhook would
/// rewrite it; `Ok(None)` when the webhook leaves it alone (another
/// scheduler's pod).
fn templated_pod(
    view: &ClusterView,
    config: &Config,
    workload: &Workload,
    set: &PodSet,
    flavor_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<Option<Pod>, String> {
    let template = &set.template;
    let mut metadata = template.get("metadata").cloned().unwrap_or(json!({}));
    if !metadata.is_object() {
        return Err(format!(
            "pod set {}: template.metadata is not an object",
            set.name
        ));
    }
    metadata["namespace"] = json!(workload.namespace);
    metadata["name"] = json!(format!("{}-{}", workload.name, set.name));
    let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
    if !spec.is_object() {
        return Err(format!(
            "pod set {}: template.spec is not an object",
            set.name
        ));
    }
    // The API server resolves a pod's priority class into spec.priority
    // when it is created; Kueue has resolved the workload's already.
    if spec.get("priority").is_none_or(Value::is_null)
        && let Some(p) = workload.priority
    {
        spec["priority"] = json!(p);
    }
    // Kueue writes its flavors' node labels into the pods' nodeSelector
    // when it admits the workload.
    for flavor in &set.flavors {
        for (k, v) in flavor_labels.get(flavor).into_iter().flatten() {
            if !spec["nodeSelector"].is_object() {
                spec["nodeSelector"] = json!({});
            }
            spec["nodeSelector"][k] = json!(v);
        }
    }
    let mut raw = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
    let ns = Some(workload.namespace.as_str());
    let refused = |what: &str, message: &str| {
        format!(
            "pod set {}: gpugate's {what} webhook would refuse its pods: {message}",
            set.name
        )
    };
    match PodView::judge_value(
        &raw,
        |p| mutate(p, config, ns, Some(view)),
        Mutation::Invalid,
    ) {
        Mutation::Patch(ops) => {
            let ops: json_patch::Patch = serde_json::from_value(Value::Array(ops))
                .map_err(|e| format!("pod set {}: {e}", set.name))?;
            json_patch::patch(&mut raw, &ops).map_err(|e| format!("pod set {}: {e}", set.name))?;
        }
        Mutation::Skip(_) => return Ok(None),
        Mutation::Deny(d) => return Err(refused("mutating", &d.message)),
        Mutation::Invalid(e) => return Err(refused("mutating", &e)),
    }
    // The static rules only: quota is judged below, for all pods at once.
    match PodView::judge_value(&raw, |p| validate(p, config, ns, None), Validation::Invalid) {
        Validation::Allow { .. } => {}
        Validation::Deny(d) => return Err(refused("validating", &d.message)),
        Validation::Invalid(e) => return Err(refused("validating", &e)),
    }
    serde_json::from_value(raw)
        .map(Some)
        .map_err(|e| format!("pod set {}: its template is not a pod: {e}", set.name))
}

/// The pod sets whose pods ask gpugate for devices, read; or why the
/// workload can never be admitted.
fn members<'w>(
    view: &ClusterView,
    config: &Config,
    workload: &'w Workload,
    flavor_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<Vec<Member<'w>>, String> {
    let sets = workload.pod_sets.as_ref().map_err(Clone::clone)?;
    let mut out = Vec::new();
    for set in sets.iter().filter(|s| s.count > 0) {
        let Some(pod) = templated_pod(view, config, workload, set, flavor_labels)? else {
            continue;
        };
        let pod = PodToPlace::read(pod, config, view)
            .map_err(|e| format!("pod set {}: {e}", set.name))?;
        if !pod.plan.request.has_gpus() {
            continue;
        }
        match pod.gang() {
            Ok(None) => {}
            Ok(Some(label)) => {
                return Err(format!(
                    "pod set {} names its own gang group {}: gpugate's admission check places a \
                     workload's pods as one gang; remove the group label, or leave this check \
                     out of the ClusterQueue",
                    set.name, label.key
                ));
            }
            Err(e) => return Err(format!("pod set {}: {e}", set.name)),
        }
        out.push(Member { set, pod });
    }
    Ok(out)
}

/// Places `count` pods of each member as one gang
/// ([`crate::engine::gang::place_gang`]: largest first, each on the best
/// node under its policy among its candidates) on what `state` leaves.
/// Returns the places, by hold key, or how many of the pods fit at once.
fn place_all(
    state: &mut ClusterState,
    workload: &Workload,
    group: &GangKey,
    members: &[(&Member<'_>, Option<Vec<String>>)],
) -> Result<Vec<(String, Allocation)>, usize> {
    let pods = members
        .iter()
        .flat_map(|(m, c)| (0..m.set.count).map(move |i| (m, c, i)));
    let pending: Vec<(String, PodPlan)> = pods
        .clone()
        .map(|(m, _, i)| (hold_key(workload, &m.set.name, i), m.pod.plan.clone()))
        .collect();
    let candidates: Vec<Option<&[String]>> = pods.map(|(_, c, _)| c.as_deref()).collect();
    let label = GangLabel {
        key: group.clone(),
        min_available: u32::try_from(pending.len()).unwrap_or(u32::MAX),
        hold_limit_seconds: None,
    };
    place_gang(state, &label, 0, &pending, &candidates).map_err(|e| match e {
        GangShortfall::NotFit { fit, .. } => fit,
        GangShortfall::Incomplete { .. } => 0,
    })
}

/// `24 GiB` or `1500 MiB`.
fn mib_words(mib: u64) -> String {
    if mib >= 1024 && mib.is_multiple_of(1024) {
        format!("{} GiB", mib / 1024)
    } else {
        format!("{mib} MiB")
    }
}

/// The devices the GPU pods take, grouped: `2 × 24 GiB`, `4 × 8 GiB with
/// 50% cores`, `1 × 30% memory`.
fn needed_words(members: &[(&Member<'_>, Option<Vec<String>>)]) -> String {
    slices_words(members, false)
}

/// The devices the GPU pods take, grouped, for all pods or (`one_pod`)
/// for one pod of each set.
fn slices_words(members: &[(&Member<'_>, Option<Vec<String>>)], one_pod: bool) -> String {
    let mut slices: BTreeMap<(u8, u64, u32), u64> = BTreeMap::new();
    for (m, _) in members {
        for gpu in m.pod.plan.request.containers.iter().filter_map(|c| c.gpu) {
            let (unit, amount) = match gpu.memory {
                Memory::Mib(mib) => (0, mib),
                Memory::Percent(p) => (1, u64::from(p)),
                Memory::Slices(n) => (2, u64::from(n)),
            };
            let pods = if one_pod { 1 } else { u64::from(m.set.count) };
            *slices.entry((unit, amount, gpu.cores)).or_default() += u64::from(gpu.count) * pods;
        }
    }
    slices
        .iter()
        .map(|((unit, amount, cores), n)| {
            let memory = match unit {
                0 => mib_words(*amount),
                1 => format!("{amount}% memory"),
                _ => format!("{amount} slices"),
            };
            if *cores > 0 {
                format!("{n} × {memory} with {cores}% cores")
            } else {
                format!("{n} × {memory}")
            }
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The largest slice one device of the workload's kinds can still give on
/// `state`, in words.
fn largest_free_words(state: &ClusterState, kinds: &[&'static str]) -> String {
    let largest = capacity(state)
        .into_iter()
        .filter(|row| kinds.contains(&row.kind))
        .filter_map(|row| row.largest_slice)
        .max();
    match largest {
        Some(s) => format!("largest free slice {}", mib_words(s.mem_mib)),
        None => "no device can take a slice now".to_string(),
    }
}

/// A workload's GPU pods as the gang defragmentation makes room for
/// (`controllers::defragmentation::GangToPlace`).
#[derive(Debug, Clone)]
pub struct WorkloadGang {
    pub group: GangKey,
    /// Each GPU pod, by hold key, with its plan.
    pub pending: Vec<(String, PodPlan)>,
    /// The nodes kube-scheduler would offer each (`None`: every node).
    pub candidates: Vec<Option<Vec<String>>>,
    /// The first GPU pod set's pod (its priority rules who may move).
    pub first: PodToPlace,
}

/// The check's answer for `workload` on the view: its pods placed, as a
/// gang, on the state without the workload's own holds.
pub fn answer(
    view: &ClusterView,
    config: &Config,
    workload: &Workload,
    flavor_labels: &BTreeMap<String, BTreeMap<String, String>>,
    candidates: Candidates<'_>,
) -> Answer {
    answer_and_gang(view, config, workload, flavor_labels, candidates).0
}

/// [`answer`], and when it is Retry only because what is free now is
/// scattered or taken (the pods fit on the cluster with every device free,
/// within the namespace quota), the gang that moving pods could make room
/// for.
pub fn answer_and_gang(
    view: &ClusterView,
    config: &Config,
    workload: &Workload,
    flavor_labels: &BTreeMap<String, BTreeMap<String, String>>,
    candidates: Candidates<'_>,
) -> (Answer, Option<WorkloadGang>) {
    let members = match members(view, config, workload, flavor_labels) {
        Ok(m) if m.is_empty() => return (Answer::NoDevices, None),
        Ok(m) => m,
        Err(reason) => return (Answer::Rejected(reason), None),
    };
    if members
        .iter()
        .any(|m| m.pod.plan.numa.guaranteed && view.node_topologies_listing())
    {
        let wait = "NodeResourceTopology objects are still being listed; asked again once they are";
        return (Answer::Retry(wait.to_string()), None);
    }
    let members: Vec<(&Member<'_>, Option<Vec<String>>)> = members
        .iter()
        .map(|m| (m, candidates(m.pod.pod())))
        .collect();
    let group = group_of(workload);
    let total: usize = members
        .iter()
        .map(|(m, _)| usize::try_from(m.set.count).unwrap_or(usize::MAX))
        .sum();
    let needed = needed_words(&members);
    let mut kinds: Vec<&'static str> = members
        .iter()
        .map(|(m, _)| m.pod.plan.request.device_kind.kind().name)
        .collect();
    kinds.dedup();

    let mut state = view.state_without_gang_holds(&group);
    let fit_now = match place_all(&mut state, workload, &group, &members) {
        Err(fit) => fit,
        Ok(placed) => {
            let answer = match quota_refusal(view, config, workload, &members, &placed, &needed) {
                Some(refused) => refused,
                None => ready(group, &members, placed, needed),
            };
            return (answer, None);
        }
    };
    // Could it ever fit? The same placement with every device free.
    let mut empty = state.emptied();
    let placed_ever = match place_all(&mut empty, workload, &group, &members) {
        Ok(placed) => placed,
        Err(fit_ever) => {
            let alone = members
                .iter()
                .find(|(m, c)| empty.evaluate(&m.pod.plan, c.as_deref()).best().is_none());
            let reason = match alone {
                Some((m, _)) => format!(
                    "no node can ever hold a pod of pod set {} ({}), even with every device \
                     free; {needed} needed",
                    m.set.name,
                    slices_words(&[(m, None)], true),
                ),
                None => format!(
                    "{needed} needed at once, and even with every device free only {fit_ever} \
                     of {total} pods fit"
                ),
            };
            return (Answer::Rejected(reason), None);
        }
    };
    let retry = format!(
        "{}; {needed} needed ({fit_now} of {total} pods fit now)",
        largest_free_words(&state, &kinds)
    );
    // Room would not help if the quota refuses the pods: no pods are moved
    // for it, and the quota is the reason given. That placement is a
    // hypothetical one, on empty devices, so it is never Rejected for it.
    if let Some(Answer::Rejected(m) | Answer::Retry(m)) =
        quota_refusal(view, config, workload, &members, &placed_ever, &needed)
    {
        return (Answer::Retry(m), None);
    }
    let gang = WorkloadGang {
        group,
        pending: members
            .iter()
            .flat_map(|(m, _)| {
                (0..m.set.count).map(|i| (hold_key(workload, &m.set.name, i), m.pod.plan.clone()))
            })
            .collect(),
        candidates: members
            .iter()
            .flat_map(|(m, c)| (0..m.set.count).map(move |_| c.clone()))
            .collect(),
        first: members[0].0.pod.clone(),
    };
    (Answer::Retry(retry), Some(gang))
}

/// Retry (or Rejected, when the quota's limit is below what the pods ask
/// at all) if the namespace quota refuses every pod of the workload at once
/// (`placed`), against each pod set's namespace quota.
fn quota_refusal(
    view: &ClusterView,
    config: &Config,
    workload: &Workload,
    members: &[(&Member<'_>, Option<Vec<String>>)],
    placed: &[(String, Allocation)],
    needed: &str,
) -> Option<Answer> {
    let sum = placed.iter().fold(KindAmounts::default(), |s, (_, a)| {
        s.saturating_add(&KindAmounts::of_allocation(a))
    });
    for (m, _) in members {
        let kinds = sum.iter().map(|(kind, _)| kind);
        let (quota, _) = view
            .quotas()
            .pod_quota(&workload.namespace, &m.pod.scope, config, kinds);
        if let Err(e) = quota.check(&sum) {
            let message = format!(
                "{needed} needed at once; ResourceQuota {} allows no more: {}",
                e.quota,
                e.numbers()
            );
            return Some(if e.requested > e.limit {
                Answer::Rejected(message)
            } else {
                Answer::Retry(message)
            });
        }
    }
    None
}

/// Ready, with the places found.
fn ready(
    group: GangKey,
    members: &[(&Member<'_>, Option<Vec<String>>)],
    placed: Vec<(String, Allocation)>,
    needed: String,
) -> Answer {
    let total = placed.len();
    let label = json!({GROUP_NAME: group.name, GROUP_MIN_AVAILABLE: total.to_string()});
    let mut pod_set_updates: Vec<Value> = Vec::new();
    for (m, _) in members {
        if !pod_set_updates.iter().any(|u| u["name"] == m.set.name) {
            pod_set_updates.push(json!({"name": m.set.name, "labels": label}));
        }
    }
    Answer::Ready(Ready {
        group,
        members: total,
        holds: placed,
        pod_set_updates,
        needed,
    })
}
