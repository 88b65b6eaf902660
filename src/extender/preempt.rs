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
//! A pending gang member preempts only when its whole group can then run
//! (`placement::preemption::gang_plan`): otherwise nothing is evicted.
//!
//! kube-scheduler asked only about nodes where its own filters need a
//! victim: a pod short of GPU alone is never offered there; gpugate
//! preempts for it itself (`controllers::preemption`, docs/operations.md,
//! "Preemption"). Since kubernetes#135486 it may also send candidates with
//! empty victim lists: gpugate adds the GPU holders that make room there,
//! keeps a node where the pod already fits as it came (empty), and leaves
//! out a node where no eviction helps.

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::placement::PodToPlace;
use crate::placement::victims::{gpu_victims, victim_unit};

use super::wire::{MetaPod, MetaVictims, PreemptionArgs, PreemptionResult};

/// kube-scheduler's victims for `pod` (read from `args.pod`), with what
/// gpugate adds or drops, per node of `args`.
pub fn preempt(
    view: &ClusterView,
    config: &Config,
    pod: &PodToPlace,
    args: &PreemptionArgs,
) -> PreemptionResult {
    let plan = &pod.plan;
    let preemptor_priority = pod.priority;
    let mut result = PreemptionResult::default();
    // A member of a gang group still short of min-available: its group
    // preempts all or none. When even evicting every lower-priority GPU
    // holder does not let enough members run together, nothing is evicted
    // for this one.
    if let Ok(Some(label)) = pod.gang() {
        let (placed, _) = crate::placement::gang::members(view, config, label, "");
        if placed < label.min_members()
            && crate::placement::preemption::gang_plan(view, config, pod, None).is_none()
        {
            tracing::info!(group = %label.key, "preempt: the pod's gang group cannot run even with preemption; nothing evicted");
            return result;
        }
    }
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
            let Some(added) = gpu_victims(view, plan, node, &uids, preemptor_priority) else {
                tracing::info!(node, proposed = ?proposed.uids, "preempt: no GPU victims make room; node dropped");
                continue;
            };
            tracing::info!(node, proposed = ?proposed.uids, added = ?added.pods, budgets_broken = added.violations, "preempt: victims");
            uids.extend(added.pods);
        }
        // kube-scheduler counted the budgets its own victims break; add
        // those broken by the pods gpugate adds (gang partners, GPU
        // holders), evicted after them.
        let all: Vec<&str> = uids.iter().map(String::as_str).collect();
        let added_breaks = view
            .budget_violations(&all)
            .into_iter()
            .zip(&all)
            .filter(|(breaks, uid)| *breaks && !proposed.uids.iter().any(|p| p == *uid))
            .count();
        let violations = proposed.pdb_violations + i64::try_from(added_breaks).unwrap_or(i64::MAX);
        result.node_name_to_meta_victims.insert(
            node.clone(),
            MetaVictims {
                pods: uids.into_iter().map(|uid| MetaPod { uid }).collect(),
                num_pdb_violations: violations,
            },
        );
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hami::keys;
    use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};
    use serde_json::{Value, json};

    /// `/preempt`'s answer for the pod of `args`.
    fn answer_of(v: &ClusterView, args: &PreemptionArgs) -> PreemptionResult {
        let config = Config::default();
        let pod = PodToPlace::read(args.pod.clone(), &config, v).unwrap();
        preempt(v, &config, &pod, args)
    }

    /// A node of two 16,384 MiB GPUs.
    fn gpu_node(v: &mut ClusterView, name: &str) {
        let mut n = K8sNode::default();
        n.metadata.name = Some(name.into());
        n.metadata.annotations = Some(
            [(
                crate::devices::nvidia::NODE_REGISTER.to_string(),
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
        running_labelled(v, name, (node, gpu, mib), priority, labels);
    }

    /// A running pod `name` with these labels holding `mib` of GPU `gpu`
    /// of `node`.
    fn running_labelled(
        v: &mut ClusterView,
        name: &str,
        (node, gpu, mib): (&str, u32, u32),
        priority: i32,
        labels: Value,
    ) {
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
        answer(v, proposed, 0).map(|(pods, _)| pods)
    }

    /// The victims and PodDisruptionBudget violations answered for node
    /// `n` when kube-scheduler proposes `proposed`, counting `violations`.
    fn answer(v: &ClusterView, proposed: &[&str], violations: i64) -> Option<(Vec<String>, i64)> {
        let pods: Vec<Value> = proposed.iter().map(|u| json!({"UID": u})).collect();
        let body = json!({
            "Pod": {
                "metadata": {"name": "urgent", "namespace": "ml", "uid": "u"},
                "spec": {"priority": 100, "containers": [{"name": "c", "resources": {"limits": {
                    "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}}}]},
            },
            "NodeNameToMetaVictims": {"n": {"Pods": pods, "NumPDBViolations": violations}},
        });
        let args = PreemptionArgs::parse(body.to_string().as_bytes()).unwrap();
        let out = answer_of(v, &args);
        out.node_name_to_meta_victims.get("n").map(|m| {
            (
                m.pods.iter().map(|p| p.uid.clone()).collect(),
                m.num_pdb_violations,
            )
        })
    }

    /// kube-scheduler now sends preemption-capable extenders candidates
    /// with empty victim lists (kubernetes#135486): nodes where its own
    /// checks need no victim. Either shape (`NodeNameToMetaVictims` with
    /// `Pods: []`, `NodeNameToVictims` with `Pods: null`) is read; a node
    /// where the pod already fits comes back empty (a placeholder), one
    /// short only of GPU gets the GPU holders whose going makes room, and
    /// one where no eviction helps is left out of the answer.
    #[test]
    fn candidates_with_empty_victim_lists() {
        let mut v = ClusterView::new();
        for n in ["free", "full", "hopeless"] {
            gpu_node(&mut v, n);
        }
        running(&mut v, "f-0", "full", 0, 12000, 10, None);
        running(&mut v, "f-1", "full", 1, 12000, 20, None);
        running(&mut v, "h-0", "hopeless", 0, 12000, 500, None);
        running(&mut v, "h-1", "hopeless", 1, 12000, 500, None);
        let pod = json!({
            "metadata": {"name": "urgent", "namespace": "ml", "uid": "u"},
            "spec": {"priority": 100, "containers": [{"name": "c", "resources": {"limits": {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}}}]},
        });
        let empty_meta = json!({"Pods": [], "NumPDBViolations": 0});
        let empty_full = json!({"Pods": null, "NumPDBViolations": 0});
        for body in [
            json!({"Pod": pod, "NodeNameToVictims": null, "NodeNameToMetaVictims": {
                "free": empty_meta, "full": empty_meta, "hopeless": empty_meta}}),
            json!({"Pod": pod, "NodeNameToVictims": {
                "free": empty_full, "full": empty_full, "hopeless": empty_full}}),
        ] {
            let args = PreemptionArgs::parse(body.to_string().as_bytes()).unwrap();
            assert!(args.victims.values().all(|v| v.uids.is_empty()), "{body}");
            let out = answer_of(&v, &args).node_name_to_meta_victims;
            let nodes: Vec<&str> = out.keys().map(String::as_str).collect();
            assert_eq!(nodes, ["free", "full"], "{body}");
            assert!(out["free"].pods.is_empty());
            let uids: Vec<&str> = out["full"].pods.iter().map(|p| p.uid.as_str()).collect();
            assert_eq!(uids, ["f-0"], "the lowest priority whose GPU makes room");
            assert_eq!(out["full"].num_pdb_violations, 0);
        }
    }

    /// Of the smallest sets that make room, the one of the lowest
    /// priorities: two priority-10 pods of one GPU, not a priority-0 and a
    /// priority-50 pod of the other, though that pair is found first.
    #[test]
    fn the_lowest_priorities_among_the_fewest_victims() {
        let mut v = ClusterView::new();
        gpu_node(&mut v, "n");
        running(&mut v, "a", "n", 0, 6000, 0, None);
        running(&mut v, "d", "n", 0, 6000, 50, None);
        running(&mut v, "b", "n", 1, 6000, 10, None);
        running(&mut v, "c", "n", 1, 6000, 10, None);
        let body = json!({
            "Pod": {
                "metadata": {"name": "urgent", "namespace": "ml", "uid": "u"},
                "spec": {"priority": 100, "containers": [{"name": "c", "resources": {"limits": {
                    "nvidia.com/gpu": "1", "nvidia.com/gpumem": "12000"}}}]},
            },
            "NodeNameToMetaVictims": {"n": {"Pods": [], "NumPDBViolations": 0}},
        });
        let args = PreemptionArgs::parse(body.to_string().as_bytes()).unwrap();
        let out = answer_of(&v, &args);
        let mut got: Vec<String> = out.node_name_to_meta_victims["n"]
            .pods
            .iter()
            .map(|p| p.uid.clone())
            .collect();
        got.sort();
        assert_eq!(got, ["b", "c"]);
    }

    /// A pending gang member preempts only if its whole group can then
    /// run: with the other GPU's holder above the gang's priority, the
    /// second member could not, so nothing is evicted for the first.
    #[test]
    fn a_pending_gang_preempts_all_or_nothing() {
        let answer_for = |other_priority: i32| {
            let mut v = ClusterView::new();
            gpu_node(&mut v, "n");
            running(&mut v, "x", "n", 0, 12000, 0, None);
            running(&mut v, "y", "n", 1, 12000, other_priority, None);
            let member = |name: &str| -> Value {
                json!({
                    "metadata": {"name": name, "namespace": "ml", "uid": name, "labels": {
                        crate::engine::gang::GROUP_NAME: "g",
                        crate::engine::gang::GROUP_MIN_AVAILABLE: "2"}},
                    "spec": {"priority": 100, "containers": [{"name": "c", "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "9000"}}}]},
                })
            };
            for name in ["m-1", "m-2"] {
                let p: Pod = serde_json::from_value(member(name)).unwrap();
                v.upsert_pod(name, &p);
            }
            let body = json!({
                "Pod": member("m-1"),
                "NodeNameToMetaVictims": {"n": {"Pods": [], "NumPDBViolations": 0}},
            });
            let args = PreemptionArgs::parse(body.to_string().as_bytes()).unwrap();
            let out = answer_of(&v, &args);
            out.node_name_to_meta_victims
                .get("n")
                .map(|m| m.pods.iter().map(|p| p.uid.clone()).collect::<Vec<_>>())
        };
        assert_eq!(answer_for(50), Some(vec!["x".to_string()]));
        assert_eq!(answer_for(500), None);
    }

    /// As kube-scheduler does for its own victims, pods whose eviction
    /// breaks a PodDisruptionBudget are chosen only when no other set
    /// makes room, and the answer counts what the added ones break.
    #[test]
    fn disruption_budgets_are_kept_where_they_can_be() {
        // GPU 0: two 8,000 MiB pods of priority 0 under a budget that
        // allows no disruption; GPU 1: two of priority 10 under none.
        let mut v = ClusterView::new();
        gpu_node(&mut v, "n");
        for (name, gpu, priority, app) in [
            ("kept-1", 0, 0, "kept"),
            ("kept-2", 0, 0, "kept"),
            ("free-1", 1, 10, "free"),
            ("free-2", 1, 10, "free"),
        ] {
            running_labelled(
                &mut v,
                name,
                ("n", gpu, 8000),
                priority,
                json!({"app": app}),
            );
        }
        // Without the budget, the cheapest: one of priority 0.
        assert_eq!(answer(&v, &[], 0), Some((vec!["kept-1".to_string()], 0)));
        let budget = |allowed: i32| -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
            serde_json::from_value(json!({
                "metadata": {"name": "kept", "namespace": "ml"},
                "spec": {"selector": {"matchLabels": {"app": "kept"}}},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 2,
                           "desiredHealthy": 2, "expectedPods": 2},
            }))
            .unwrap()
        };
        v.upsert_budget(&budget(0));
        assert_eq!(answer(&v, &[], 1), Some((vec!["free-1".to_string()], 1)));
        // Only the budgeted pods help (GPU 1's are above the preemptor):
        // one is taken, and its violation counted beside kube-scheduler's.
        let mut w = ClusterView::new();
        gpu_node(&mut w, "n");
        running_labelled(&mut w, "kept-1", ("n", 0, 8000), 0, json!({"app": "kept"}));
        running_labelled(&mut w, "kept-2", ("n", 0, 8000), 0, json!({"app": "kept"}));
        running_labelled(&mut w, "high-1", ("n", 1, 16000), 500, json!({}));
        w.upsert_budget(&budget(0));
        assert_eq!(answer(&w, &[], 2), Some((vec!["kept-1".to_string()], 3)));
        // A budget that allows one disruption is not broken by one.
        w.upsert_budget(&budget(1));
        assert_eq!(answer(&w, &[], 0), Some((vec!["kept-1".to_string()], 0)));
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
