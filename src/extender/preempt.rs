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
//! a node where even that does not make room is dropped. And gangs: a
//! member of a gang group goes only with its whole group (a proposed member
//! brings the rest, or the node is dropped; a group is added as one unit).
//!
//! kube-scheduler asks only about nodes where its own filters need a
//! victim: a pod short of GPU alone is never offered here
//! (docs/operations.md, "Preemption").

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
        // kube-scheduler's victims, each with the rest of its gang group:
        // a member goes only with its whole group.
        let mut uids: Vec<String> = Vec::new();
        let mut whole = true;
        for uid in &proposed.uids {
            match victim_unit(view, uid, node, preemptor_priority) {
                Some(unit) => {
                    for u in unit {
                        if !uids.contains(&u) {
                            uids.push(u);
                        }
                    }
                }
                None => whole = false,
            }
        }
        if !whole {
            tracing::info!(node, proposed = ?proposed.uids, "preempt: a proposed victim's gang group cannot go whole from this node; node dropped");
            continue;
        }
        if plan.request.has_gpus() {
            let taken: HashSet<&str> = uids.iter().map(String::as_str).collect();
            let removed: Vec<(&str, &Allocation)> = uids
                .iter()
                .filter_map(|uid| Some((uid.as_str(), gpu_allocation_on(view, uid, node)?)))
                .collect();
            // Further GPU holders on the node that the preemptor may evict,
            // a gang group as one unit with all its members.
            let mut extra: Vec<Unit> = Vec::new();
            let mut seen: HashSet<String> = HashSet::new();
            for uid in view.held_pods() {
                if taken.contains(uid)
                    || seen.contains(uid)
                    || gpu_allocation_on(view, uid, node).is_none()
                {
                    continue;
                }
                let Some(members) = victim_unit(view, uid, node, preemptor_priority) else {
                    continue;
                };
                seen.extend(members.iter().cloned());
                let priority = members
                    .iter()
                    .map(|m| view.held_priority(m).unwrap_or(0))
                    .max()
                    .unwrap_or(0);
                let pods: Vec<(String, Option<&Allocation>)> = members
                    .into_iter()
                    .map(|m| {
                        let a = gpu_allocation_on(view, &m, node);
                        (m, a)
                    })
                    .collect();
                extra.push(Unit { priority, pods });
            }
            // Lowest priority first, single pods before groups, then by UID,
            // so the answer is stable.
            extra.sort_by(|x, y| {
                (x.priority, x.pods.len(), &x.pods[0].0).cmp(&(
                    y.priority,
                    y.pods.len(),
                    &y.pods[0].0,
                ))
            });
            let Some(added) = fewest_extra(view, &plan, node, &removed, &extra) else {
                tracing::info!(node, proposed = ?proposed.uids, "preempt: no GPU victims make room; node dropped");
                continue;
            };
            tracing::info!(node, proposed = ?proposed.uids, added = ?added, "preempt: victims");
            uids.extend(added);
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

/// Pods evicted together: one pod, or every bound member of a gang group.
struct Unit<'v> {
    /// The highest priority among them.
    priority: i32,
    /// UIDs, with the GPUs each holds on the node.
    pods: Vec<(String, Option<&'v Allocation>)>,
}

/// The pods that must go if `uid` goes from `node`: itself, or, for a
/// gang member, every bound member of its group. `None` when that cannot
/// happen here: a member is bound to another node, or a priority is not
/// below the preemptor's.
fn victim_unit(view: &ClusterView, uid: &str, node: &str, below: i32) -> Option<Vec<String>> {
    let Some(group) = view.gang_of(uid) else {
        // (A pod gpugate does not hold, such as kube-scheduler's CPU-only
        // victim, has no priority known here: kube-scheduler chose it.)
        let lower = view.held_priority(uid).is_none_or(|p| p < below);
        return lower.then(|| vec![uid.to_string()]);
    };
    let members = view.gang_members(group)?;
    let mut unit = Vec::new();
    for (member, pod) in members {
        let spec = pod.spec.as_ref();
        let Some(bound) = spec.and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        if bound != node || priority >= below {
            return None;
        }
        unit.push(member.clone());
    }
    if !unit.iter().any(|m| m == uid) {
        unit.push(uid.to_string());
    }
    Some(unit)
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

/// With `removed` gone, the fewest units of `extra` (lowest priority
/// first) whose removal too lets the pod fit; `None` when even all of them
/// are not enough. Every set of one, then two, then three units is tried
/// in order (`extra` is sorted lowest priority first, so the first set
/// found of a size is among the cheapest); past that size, or past the
/// budget, units are added in order until the pod fits and every one it
/// does not need is given back (highest priority first). The answer is
/// the units' pods.
fn fewest_extra(
    view: &ClusterView,
    plan: &PodPlan,
    node: &str,
    removed: &[(&str, &Allocation)],
    extra: &[Unit<'_>],
) -> Option<Vec<String>> {
    let fits = |added: &[usize]| {
        let mut gone: Vec<(&str, &Allocation)> = removed.to_vec();
        for &i in added {
            gone.extend(
                extra[i]
                    .pods
                    .iter()
                    .filter_map(|(uid, a)| Some((uid.as_str(), (*a)?))),
            );
        }
        view.state().fit_without(plan, node, &gone).is_ok()
    };
    let pods = |set: &[usize]| -> Vec<String> {
        set.iter()
            .flat_map(|&i| extra[i].pods.iter().map(|(uid, _)| uid.clone()))
            .collect()
    };
    if fits(&[]) {
        return Some(Vec::new());
    }
    let mut tried = 0;
    'exact: for size in 1..=EXACT_SIZE.min(extra.len()) {
        let mut pick: Vec<usize> = (0..size).collect();
        loop {
            tried += 1;
            if tried > EXACT_BUDGET {
                break 'exact;
            }
            if fits(&pick) {
                return Some(pods(&pick));
            }
            if !next_combination(&mut pick, extra.len()) {
                break;
            }
        }
    }
    let mut taken: Vec<usize> = Vec::new();
    let mut rest = 0..extra.len();
    while !fits(&taken) {
        taken.push(rest.next()?);
    }
    let mut i = taken.len();
    while i > 0 {
        i -= 1;
        let without: Vec<usize> = taken
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, v)| *v)
            .collect();
        if fits(&without) {
            taken = without;
        }
    }
    Some(pods(&taken))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hami::keys;
    use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};
    use serde_json::{Value, json};

    /// A node of two 16,384 MiB GPUs.
    fn gpu_node(v: &mut ClusterView, name: &str) {
        let mut n = K8sNode::default();
        n.metadata.name = Some(name.into());
        n.metadata.annotations = Some(
            [(
                keys::NODE_NVIDIA_REGISTER.to_string(),
                format!(
                    r#"[{{"id":"{name}-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}},{{"id":"{name}-1","index":1,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}}]"#
                ),
            )]
            .into(),
        );
        v.upsert_node(&n);
    }

    /// A running pod `name` (its UID too) of `mib` on GPU `gpu` of `node`
    /// at `priority`, in gang `group` of two when given.
    fn running(
        v: &mut ClusterView,
        name: &str,
        node: &str,
        gpu: u32,
        mib: u32,
        priority: i32,
        group: Option<&str>,
    ) {
        let labels = match group {
            Some(g) => json!({crate::engine::gang::GROUP_NAME: g,
                              crate::engine::gang::GROUP_MIN_AVAILABLE: "2"}),
            None => json!({}),
        };
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "uid": name, "labels": labels,
                "annotations": {
                    keys::VGPU_NODE: node,
                    keys::VGPU_DEVICES_ALLOCATED: format!("{node}-{gpu},NVIDIA,{mib},0:;")}},
            "spec": {"containers": [{"name": "c"}], "priority": priority, "nodeName": node},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        assert_eq!(v.upsert_pod(name, &p), None);
    }

    /// One node of two GPUs: four 4,000 MiB pods on GPU 0, two 8,000 MiB
    /// pods on GPU 1, all of priority 0.
    fn view() -> ClusterView {
        let mut v = ClusterView::new();
        gpu_node(&mut v, "n");
        for (name, gpu, mib) in [
            ("a-1", 0, 4000),
            ("a-2", 0, 4000),
            ("a-3", 0, 4000),
            ("a-4", 0, 4000),
            ("b-1", 1, 8000),
            ("b-2", 1, 8000),
        ] {
            running(&mut v, name, "n", gpu, mib, 0, None);
        }
        v
    }

    /// The victims gpugate answers for node `n` when kube-scheduler
    /// proposes `proposed` for a pod of 8,000 MiB at priority 100 (`None`:
    /// the node was dropped).
    fn victims(v: &ClusterView, proposed: &[&str]) -> Option<Vec<String>> {
        let pods: Vec<Value> = proposed.iter().map(|u| json!({"UID": u})).collect();
        let body = json!({
            "Pod": {
                "metadata": {"name": "urgent", "namespace": "ml", "uid": "u"},
                "spec": {"priority": 100, "containers": [{"name": "c", "resources": {"limits": {
                    "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}}}]},
            },
            "NodeNameToMetaVictims": {"n": {"Pods": pods, "NumPDBViolations": 0}},
        });
        let args = PreemptionArgs::parse(body.to_string().as_bytes()).unwrap();
        let out = preempt(v, &Config::default(), &args).unwrap();
        out.node_name_to_meta_victims
            .get("n")
            .map(|m| m.pods.iter().map(|p| p.uid.clone()).collect())
    }

    /// 8,000 MiB on one GPU: one 8,000 MiB pod of GPU 1 is enough; adding
    /// pods in UID order would have taken two of GPU 0's.
    #[test]
    fn the_fewest_victims_that_make_room() {
        assert_eq!(victims(&view(), &[]), Some(vec!["b-1".to_string()]));
    }

    /// A gang member goes only with its whole group: added as a unit,
    /// never alone; a group with a member on another node, or of a
    /// priority not below the preemptor's, is never added; a proposed
    /// member brings its group, or the node is dropped.
    #[test]
    fn gang_members_go_with_their_whole_group_or_not_at_all() {
        // GPU 0: gang g (two 8,000 MiB members, priority 0); GPU 1: two
        // single pods of 8,000 MiB at priority 10.
        let mut v = ClusterView::new();
        gpu_node(&mut v, "n");
        gpu_node(&mut v, "m");
        running(&mut v, "g-1", "n", 0, 8000, 0, Some("g"));
        running(&mut v, "g-2", "n", 0, 8000, 0, Some("g"));
        running(&mut v, "s-1", "n", 1, 8000, 10, None);
        running(&mut v, "s-2", "n", 1, 8000, 10, None);
        // The cheapest unit is the whole group (priority 0): both members.
        let mut got = victims(&v, &[]).unwrap();
        got.sort();
        assert_eq!(got, ["g-1", "g-2"]);
        // kube-scheduler proposes one member: the other comes with it.
        let mut got = victims(&v, &["g-2"]).unwrap();
        got.sort();
        assert_eq!(got, ["g-1", "g-2"]);
        // A member of h on another node: h's member here is never taken,
        // and a proposal of it drops the node.
        let mut v = ClusterView::new();
        gpu_node(&mut v, "n");
        gpu_node(&mut v, "m");
        running(&mut v, "h-1", "n", 0, 8000, 0, Some("h"));
        running(&mut v, "h-2", "m", 0, 8000, 0, Some("h"));
        running(&mut v, "f-1", "n", 0, 8000, 10, None);
        running(&mut v, "s-1", "n", 1, 8000, 10, None);
        running(&mut v, "s-2", "n", 1, 8000, 10, None);
        let got = victims(&v, &[]).unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0] != "h-1", "{got:?}");
        assert_eq!(victims(&v, &["h-1"]), None);
    }
}
