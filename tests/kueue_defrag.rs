//! Kueue's admission check with defragmentation: a workload that fits only
//! if pods move gets a plan for all its pods at once
//! (`placement::defrag::plan_gang_on`), and once the plan is held
//! (`hold_gang_plan`) and the moved pods are gone, the check answers Ready
//! on exactly the capacity the plan made, the moved pods' replacements
//! keep their places, and nothing is over-committed. On the worked example
//! of scenario 30 (docs/e2e.md) and on 1,000 random fragmented clusters,
//! built as real Kubernetes objects (Nodes registered as HAMi's device
//! plugin does, Pods with HAMi's allocation annotations and ReplicaSet
//! owners, a Workload as Kueue v0.17 writes it).

mod support {
    pub mod rng;
}

use std::collections::BTreeMap;

use gpugate::cluster::{ClusterView, Snapshot};
use gpugate::config::Config;
use gpugate::engine::ClusterState;
use gpugate::kueue::check::{Answer, WorkloadGang, answer, answer_and_gang};
use gpugate::kueue::workload::Workload;
use gpugate::placement::PodToPlace;
use gpugate::placement::defrag::{
    GangDefragPlan, GangOutcome, Inputs, hold_gang_plan, movers, plan_gang_on,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use support::rng::Rng;

const NOW: &str = "2026-11-25T12:00:00Z";
const GPU_MIB: u32 = 16_384;
const MAX_MOVES: usize = 4;
/// The destination group of the plan's replacements (one per plan).
const MOVES: &str = "gang:team/job-moved-1a2b3/moves/1";

fn config() -> Config {
    Config::from_yaml(
        &format!(
            "scheduler:\n  defragmentation: {{maxMoves: {MAX_MOVES}, minSecondsBetweenMoves: 600, searchBudget: 100000000}}\nnamespacePolicies:\n- name: apps\n  namespaces: [apps]\n  movable: true\n"
        ),
        "test",
    )
    .unwrap()
}

fn node(name: &str, gpus: usize) -> String {
    let devices: Vec<String> = (0..gpus)
        .map(|g| format!(r#"{{"id":"{name}-{g}","index":{g},"count":4,"devmem":{GPU_MIB},"devcore":100,"type":"T4","health":true}}"#))
        .collect();
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  annotations:\n    hami.io/node-nvidia-register: '[{}]'\n",
        devices.join(",")
    )
}

/// A running pod of `mib` on GPU `gpu` of `node`: a ReplicaSet's in
/// namespace `apps` (which may move) when `movable`, else a bare pod of
/// namespace `other`.
fn running(name: &str, node: &str, gpu: usize, mib: u32, movable: bool) -> String {
    let (namespace, owner) = if movable {
        (
            "apps",
            "  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: rs-uid, controller: true}]\n",
        )
    } else {
        ("other", "")
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  uid: {name}\n  creationTimestamp: \"2026-11-20T00:00:00Z\"\n{owner}  annotations:\n    hami.io/vgpu-node: {node}\n    hami.io/vgpu-devices-allocated: '{node}-{gpu},NVIDIA,{mib},0:;'\nspec:\n  nodeName: {node}\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '1', nvidia.com/gpumem: '{mib}'}}}}}}]\nstatus: {{phase: Running}}\n"
    )
}

/// The Workload Kueue v0.17 makes for a Job of pod sets of `(count, MiB)`
/// one-GPU pods, with quota reserved and gpugate's check Pending.
fn workload(sets: &[(u32, u32)]) -> Workload {
    let pod_sets: Vec<Value> = sets
        .iter()
        .enumerate()
        .map(|(i, (count, mib))| {
            json!({"name": format!("set{i}"), "count": count, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {
                    "nvidia.com/gpu": "1", "nvidia.com/gpumem": mib.to_string()}}}],
            }}})
        })
        .collect();
    let assignments: Vec<Value> = sets
        .iter()
        .enumerate()
        .map(|(i, (count, _))| json!({"name": format!("set{i}"), "count": count, "flavors": {"nvidia.com/gpu": "default-flavor"}}))
        .collect();
    Workload::read(&json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-moved-1a2b3", "namespace": "team", "uid": "wl-uid", "resourceVersion": "7"},
        "spec": {"podSets": pod_sets, "queueName": "lq", "priority": 0},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admissionChecks": [{"name": "gpugate", "state": "Pending", "message": ""}],
        },
    }))
    .unwrap()
}

/// The plan for the gang of a Retry, as the controller searches it.
fn plan(view: &ClusterView, config: &Config, gang: &WorkloadGang, pods: &[Pod]) -> GangOutcome {
    let now: Timestamp = NOW.parse().unwrap();
    let movers = movers(view, config, &gang.first, pods, now);
    let state = view
        .state_without_gang_holds(&gang.group)
        .copy_for_moves(movers.iter().map(|m| m.key.as_str()));
    let candidates: Vec<Option<&[String]>> = gang.candidates.iter().map(|c| c.as_deref()).collect();
    let inputs = Inputs {
        nodes: None,
        pods,
        node_objects: None,
        barred: &[],
    };
    plan_gang_on(
        state,
        view.budgets(),
        config,
        &gang.pending,
        &candidates,
        movers,
        &inputs,
        &|| false,
    )
}

/// Every GPU's usage within its capacity.
fn within_capacity(state: &ClusterState) -> bool {
    state.nodes().all(|n| {
        n.gpus
            .iter()
            .zip(&n.usage)
            .all(|(g, u)| u.mem_mib <= g.capacity.mem_mib && u.slots <= g.capacity.slots)
    })
}

/// Holds the plan as the controller does, then removes the moved pods
/// from the view (their evictions done): the check must answer Ready, and
/// taking its places (as the controller does) must keep every GPU within
/// its capacity and every replacement's place held.
fn carry_out(
    view: &mut ClusterView,
    config: &Config,
    wl: &Workload,
    gang: &WorkloadGang,
    plan: &GangDefragPlan,
) -> Result<Vec<(String, String)>, String> {
    hold_gang_plan(view, (&gang.group, MOVES), &gang.pending, plan, i64::MAX)?;
    let (held, all) = view.gang_places(&gang.group);
    if all != plan.places.len() {
        return Err(format!("{all} places wait, {} planned", plan.places.len()));
    }
    // What fits now is held at once; the rest waits for the moved pods.
    if held == all && !plan.moves.is_empty() {
        // Every place free before anything moved: the plan was not needed.
        return Err("every place was free before the moves".into());
    }
    for m in &plan.moves {
        view.delete_pod(&m.uid);
    }
    if view.gang_places(&gang.group) != (all, all) {
        return Err(format!(
            "places held once the moved pods are gone: {:?} of {all}",
            view.gang_places(&gang.group)
        ));
    }
    for m in &plan.moves {
        match view.destination_for(&m.owner.1, &m.plan) {
            Some((_, node)) => {
                if !view.destination_held(&format!("defrag/{MOVES}/{}", m.uid)) {
                    return Err(format!("{}'s place on {node} is not held", m.pod));
                }
            }
            None => return Err(format!("no place for {}'s replacement", m.pod)),
        }
    }
    let Answer::Ready(ready) = answer(view, config, wl, &BTreeMap::new(), &|_| None) else {
        return Err("not Ready once the moved pods are gone".into());
    };
    view.release_gang_places(&ready.group);
    view.replace_gang_holds(&ready.group, ready.holds.clone(), i64::MAX);
    if view.gang_places(&ready.group) != (0, 0) {
        return Err("places still wait after Ready".into());
    }
    if !within_capacity(view.state()) {
        let usage: Vec<String> = view
            .state()
            .nodes()
            .map(|n| format!("{}: {:?}", n.name, n.usage))
            .collect();
        return Err(format!(
            "over-committed: {usage:?}; ready {:?}",
            ready.holds
        ));
    }
    let mut places: Vec<(String, String)> = ready
        .holds
        .iter()
        .flat_map(|(_, a)| {
            a.containers
                .iter()
                .flatten()
                .map(|g| (a.node.clone(), g.uuid.clone()))
        })
        .collect();
    places.sort();
    Ok(places)
}

/// Scenario 30's layout: two 4,000 MiB slices of a ReplicaSet share
/// kq-1-0 (8,384 MiB free); 10,000 MiB bare pods fill the other seven GPUs
/// (6,384 MiB free each). A job of two 8 GiB pods: one fits now, both
/// once the slices move, each to a GPU of its own (two 4,000 MiB do not
/// fit in 6,384).
#[test]
fn a_workload_is_admitted_after_the_planned_moves() {
    let mut docs = vec![
        node("kq-1", 2),
        node("kq-2", 2),
        node("kq-3", 2),
        node("kq-4", 2),
    ];
    docs.push(running("slice-a", "kq-1", 0, 4000, true));
    docs.push(running("slice-b", "kq-1", 0, 4000, true));
    for (i, (n, g)) in [(1, 1), (2, 0), (2, 1), (3, 0), (3, 1), (4, 0), (4, 1)]
        .iter()
        .enumerate()
    {
        docs.push(running(
            &format!("filler-{i}"),
            &format!("kq-{n}"),
            *g,
            10000,
            false,
        ));
    }
    let snapshot = Snapshot::from_yaml(&docs.join("---\n"), "case").unwrap();
    let (mut view, _) = snapshot.to_view();
    let config = config();
    let wl = workload(&[(2, 8192)]);
    let (got, gang) = answer_and_gang(&view, &config, &wl, &BTreeMap::new(), &|_| None);
    assert_eq!(
        got,
        Answer::Retry("largest free slice 8384 MiB; 2 × 8 GiB needed (1 of 2 pods fit now)".into())
    );
    let gang = gang.expect("a Retry for room gives the gang");
    assert_eq!(gang.pending.len(), 2);
    let GangOutcome::Plan(p) = plan(&view, &config, &gang, &snapshot.pods) else {
        panic!("no plan")
    };
    let mut moved: Vec<(&str, &str)> = p
        .moves
        .iter()
        .map(|m| (m.pod.as_str(), m.from.as_str()))
        .collect();
    moved.sort();
    assert_eq!(moved, [("apps/slice-a", "kq-1"), ("apps/slice-b", "kq-1")]);
    let destinations: std::collections::BTreeSet<&str> =
        p.moves.iter().map(|m| m.to.as_str()).collect();
    assert!(!destinations.contains("kq-1"), "{p:?}");
    assert!(
        p.describe().starts_with("moving 2 pods: apps/slice-"),
        "{}",
        p.describe()
    );
    // Until the slices are gone, a stranger cannot take the GPU they
    // leave: the workload's places wait for it.
    hold_gang_plan(&mut view, (&gang.group, MOVES), &gang.pending, &p, i64::MAX).unwrap();
    view.delete_pod("slice-a");
    view.delete_pod("slice-b");
    let stranger: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stranger", "namespace": "other", "uid": "stranger"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}}}]},
    }))
    .unwrap();
    let stranger = PodToPlace::read(stranger, &config, &view).unwrap();
    assert!(
        view.state().evaluate(&stranger.plan, None).best().is_none(),
        "the freed GPU went to a stranger"
    );
    // The controller's steps from a fresh view: both pods on kq-1-0.
    let (mut view, _) = snapshot.to_view();
    let places = carry_out(&mut view, &config, &wl, &gang, &p).unwrap();
    assert_eq!(
        places,
        [
            ("kq-1".to_string(), "kq-1-0".to_string()),
            ("kq-1".to_string(), "kq-1-0".to_string())
        ]
    );
}

/// Nothing may move (the slices are bare pods): Retry, and no plan.
#[test]
fn no_plan_when_nothing_may_move() {
    let mut docs = vec![node("kq-1", 2), node("kq-2", 1)];
    docs.push(running("a", "kq-1", 0, 4000, false));
    docs.push(running("b", "kq-1", 1, 4000, false));
    docs.push(running("c", "kq-2", 0, 4000, false));
    let snapshot = Snapshot::from_yaml(&docs.join("---\n"), "case").unwrap();
    let (view, _) = snapshot.to_view();
    let config = config();
    let wl = workload(&[(1, 16384)]);
    let (got, gang) = answer_and_gang(&view, &config, &wl, &BTreeMap::new(), &|_| None);
    assert!(matches!(got, Answer::Retry(_)), "{got:?}");
    let outcome = plan(&view, &config, &gang.unwrap(), &snapshot.pods);
    assert_eq!(
        outcome,
        GangOutcome::NoPlan {
            exhaustive: true,
            movable: 0
        }
    );
}

/// A workload no device could ever hold, one that fits now, or one its
/// namespace quota refuses gives no gang to make room for: moving pods
/// would not admit it.
#[test]
fn only_a_retry_for_room_gives_a_gang() {
    let snapshot = Snapshot::from_yaml(&node("kq-1", 1), "case").unwrap();
    let (view, _) = snapshot.to_view();
    let config = config();
    for sets in [vec![(1, 32768)], vec![(1, 8192)], vec![(3, 8192)]] {
        let (got, gang) =
            answer_and_gang(&view, &config, &workload(&sets), &BTreeMap::new(), &|_| {
                None
            });
        assert!(gang.is_none(), "{sets:?}: {got:?}");
    }
    // 8,384 MiB free on one GPU, 16 GiB asked, 12,000 MiB allowed.
    let quota = "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: gpu\n  namespace: team\nspec:\n  hard:\n    limits.nvidia.com/gpumem: '12000'\n";
    let cluster = [
        node("kq-1", 1),
        running("slice", "kq-1", 0, 8000, true),
        quota.to_string(),
    ]
    .join("---\n");
    let (view, _) = Snapshot::from_yaml(&cluster, "case").unwrap().to_view();
    let (got, gang) = answer_and_gang(
        &view,
        &config,
        &workload(&[(1, 16384)]),
        &BTreeMap::new(),
        &|_| None,
    );
    // Judged on a placement on empty devices: Retry with the quota's
    // numbers, never Rejected for it.
    match got {
        Answer::Retry(m) => assert!(m.contains("ResourceQuota gpu"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(gang.is_none());
}

/// 2 to 4 nodes of 1 to 3 GPUs; 3 to 14 running slices, most of them a
/// ReplicaSet's in the opted-in namespace; a workload of one or two pod
/// sets of one or two pods.
fn random_case(seed: u64) -> (String, Vec<(u32, u32)>) {
    let mut rng = Rng::of_seed(seed);
    let nodes: Vec<u64> = (0..2 + rng.below(3)).map(|_| 1 + rng.below(3)).collect();
    let mut docs: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(n, &g)| node(&format!("n{n}"), g as usize))
        .collect();
    // (MiB, pods) on each GPU: within its 16,384 MiB and 4 slots.
    let mut used: BTreeMap<(usize, u64), (u32, u32)> = BTreeMap::new();
    for i in 0..3 + rng.below(12) {
        let n = rng.below(nodes.len() as u64) as usize;
        let g = rng.below(nodes[n]);
        let mib = rng.pick(&[2000u32, 4000, 6000, 8000]);
        let u = used.entry((n, g)).or_default();
        if u.0 + mib > GPU_MIB || u.1 == 4 {
            continue;
        }
        u.0 += mib;
        u.1 += 1;
        let movable = rng.below(10) < 7;
        docs.push(running(
            &format!("r{i}"),
            &format!("n{n}"),
            g as usize,
            mib,
            movable,
        ));
    }
    let sets = (0..1 + rng.below(2))
        .map(|_| (1 + rng.below(2) as u32, rng.pick(&[8000u32, 12000, 16384])))
        .collect();
    (docs.join("---\n"), sets)
}

/// Over 1,000 random clusters: every plan found for a Retry moves only pods
/// that may move, at most maxMoves, and carried out (held, the moved pods
/// gone) turns the check Ready with every GPU within its capacity and every
/// replacement's place held.
#[test]
fn every_plan_carried_out_admits_the_workload() {
    let config = config();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in 0..1000u64 {
        let (cluster, sets) = random_case(seed);
        let snapshot = Snapshot::from_yaml(&cluster, "case").unwrap();
        let (mut view, _) = snapshot.to_view();
        let wl = workload(&sets);
        let (got, gang) = answer_and_gang(&view, &config, &wl, &BTreeMap::new(), &|_| None);
        let why = || format!("seed {seed}: {sets:?}\n{cluster}\nanswer: {got:?}");
        let Some(gang) = gang else {
            // No quota, no NodeResourceTopology: every Retry is for room.
            assert!(!matches!(got, Answer::Retry(_)), "{}", why());
            *counts.entry("no gang").or_default() += 1;
            continue;
        };
        match plan(&view, &config, &gang, &snapshot.pods) {
            GangOutcome::Plan(p) => {
                *counts.entry("plan").or_default() += 1;
                assert!(
                    !p.moves.is_empty() && p.moves.len() <= MAX_MOVES,
                    "{}",
                    why()
                );
                assert!(
                    p.moves.iter().all(|m| m.pod.starts_with("apps/")),
                    "{}",
                    why()
                );
                assert!(p.moves.iter().all(|m| m.from != m.to), "{}", why());
                carry_out(&mut view, &config, &wl, &gang, &p)
                    .unwrap_or_else(|e| panic!("{e}: {p:?}\n{}", why()));
            }
            GangOutcome::NoPlan { .. } => *counts.entry("no plan").or_default() += 1,
            GangOutcome::NotNeeded => panic!("a Retry that fits now: {}", why()),
        }
    }
    for outcome in ["plan", "no plan", "no gang"] {
        assert!(
            counts.get(outcome).copied().unwrap_or(0) >= 50,
            "{counts:?}"
        );
    }
    eprintln!("outcomes over 1,000 clusters: {counts:?}");
}
