//! Defragmentation's plans over random small clusters, built as real
//! Kubernetes objects (Nodes registered as HAMi's device plugin does, Pods
//! carrying HAMi's allocation annotations, a PodDisruptionBudget): every
//! plan is valid, and as small as a brute force over every set of movable
//! pods and every choice of destinations finds.

use std::collections::BTreeMap;

use gpugate::cluster::Snapshot;
use gpugate::config::Config;
use gpugate::engine::{ClusterState, PodPlan};
use gpugate::placement::PodToPlace;
use gpugate::placement::defrag::{Outcome, plan};
use jiff::Timestamp;
use proptest::prelude::*;

const NOW: &str = "2026-11-25T12:00:00Z";
/// `minSecondsBetweenMoves` in the config below.
const WINDOW: i64 = 600;
const GPU_MIB: u32 = 16_000;
const MAX_MOVES: usize = 4;

#[derive(Debug, Clone)]
struct Running {
    node: usize,
    gpu: usize,
    mib: u32,
    priority: i32,
    opted_in: bool,
    owned: bool,
    old: bool,
    opted_out: bool,
    guarded: bool,
}

#[derive(Debug, Clone)]
struct Case {
    gpus: Vec<usize>,
    running: Vec<Running>,
    allowed: i32,
    pending_count: u32,
    pending_mib: u32,
    pending_priority: i32,
    /// Which nodes kube-scheduler offers the pending pod (all when none
    /// is picked): destinations may be any node.
    offered: Vec<bool>,
}

fn arb_running() -> impl Strategy<Value = Running> {
    (
        (
            0usize..3,
            0usize..2,
            prop_oneof![
                Just(2000u32),
                Just(4000),
                Just(6000),
                Just(8000),
                Just(10000)
            ],
        ),
        prop_oneof![Just(0i32), Just(10), Just(200)],
        (
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.85),
            prop::bool::weighted(0.85),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.3),
        ),
    )
        .prop_map(
            |((node, gpu, mib), priority, (opted_in, owned, old, opted_out, guarded))| Running {
                node,
                gpu,
                mib,
                priority,
                opted_in,
                owned,
                old,
                opted_out,
                guarded,
            },
        )
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1usize..=2, 2..=3),
        prop::collection::vec(arb_running(), 3..=9),
        0i32..=2,
        1u32..=2,
        prop_oneof![Just(12000u32), Just(14000), Just(16000), Just(16000)],
        prop_oneof![Just(10i32), Just(100)],
        prop::collection::vec(prop::bool::weighted(0.7), 3),
    )
        .prop_map(
            |(gpus, running, allowed, pending_count, pending_mib, pending_priority, offered)| {
                Case {
                    gpus,
                    running,
                    allowed,
                    pending_count,
                    pending_mib,
                    pending_priority,
                    offered,
                }
            },
        )
}

/// The case as objects; the running pods that found room on their GPU
/// (in order, named `p0`, `p1`, …).
fn objects(case: &Case) -> (String, Vec<Running>) {
    let mut docs = Vec::new();
    for (n, &gpus) in case.gpus.iter().enumerate() {
        let devices: Vec<String> = (0..gpus)
            .map(|g| format!(r#"{{"id":"n{n}-{g}","index":{g},"count":4,"devmem":{GPU_MIB},"devcore":100,"type":"T4","health":true}}"#))
            .collect();
        docs.push(format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n{n}\n  annotations:\n    hami.io/node-nvidia-register: '[{}]'\n",
            devices.join(",")
        ));
    }
    let mut used: BTreeMap<(usize, usize), (u32, u32)> = BTreeMap::new();
    let mut placed = Vec::new();
    for r in &case.running {
        if r.node >= case.gpus.len() || r.gpu >= case.gpus[r.node] {
            continue;
        }
        let u = used.entry((r.node, r.gpu)).or_default();
        if u.0 + r.mib > GPU_MIB || u.1 + 1 > 4 {
            continue;
        }
        u.0 += r.mib;
        u.1 += 1;
        let i = placed.len();
        let ns = if r.opted_in { "apps" } else { "fixed" };
        let created = if r.old {
            "2026-11-25T10:00:00Z"
        } else {
            "2026-11-25T11:59:00Z"
        };
        let owner = if r.owned {
            format!(
                "  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: rs{i}, uid: rs-uid-{i}, controller: true}}]\n"
            )
        } else {
            String::new()
        };
        let labels = if r.guarded {
            "  labels: {app: guarded}\n"
        } else {
            ""
        };
        let opt_out = if r.opted_out {
            "    gpugate.io/movable: \"false\"\n"
        } else {
            ""
        };
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\n  namespace: {ns}\n  uid: p{i}\n  creationTimestamp: \"{created}\"\n{owner}{labels}  annotations:\n    hami.io/vgpu-node: n{node}\n    hami.io/vgpu-devices-allocated: 'n{node}-{gpu},NVIDIA,{mib},0:;'\n{opt_out}spec:\n  nodeName: n{node}\n  priority: {priority}\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '1', nvidia.com/gpumem: '{mib}'}}}}}}]\nstatus: {{phase: Running}}\n",
            node = r.node,
            gpu = r.gpu,
            mib = r.mib,
            priority = r.priority,
        ));
        placed.push(r.clone());
    }
    for ns in ["apps", "fixed"] {
        docs.push(format!(
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: guard\n  namespace: {ns}\nspec:\n  selector: {{matchLabels: {{app: guarded}}}}\nstatus:\n  disruptionsAllowed: {}\n  currentHealthy: 3\n  desiredHealthy: 3\n  expectedPods: 3\n",
            case.allowed
        ));
    }
    docs.push(format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pending\n  namespace: jobs\n  uid: pending\nspec:\n  priority: {}\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '{}', nvidia.com/gpumem: '{}'}}}}}}]\n",
        case.pending_priority, case.pending_count, case.pending_mib
    ));
    (docs.join("---\n"), placed)
}

fn config() -> Config {
    Config::from_yaml(
        &format!(
            "scheduler:\n  defragmentation: {{maxMoves: {MAX_MOVES}, minSecondsBetweenMoves: {WINDOW}, searchBudget: 100000000}}\nnamespacePolicies:\n- name: apps\n  namespaces: [apps]\n  movable: true\n"
        ),
        "test",
    )
    .unwrap()
}

/// Whether the test's own rules let pod `i` move for the pending pod.
fn may_move(r: &Running, case: &Case) -> bool {
    r.opted_in && r.owned && r.old && !r.opted_out && r.priority <= case.pending_priority
}

/// Every GPU within its capacity.
fn within_capacity(state: &ClusterState) -> bool {
    state.nodes().all(|n| {
        n.gpus.iter().zip(&n.usage).all(|(g, u)| {
            u.slots <= g.capacity.slots
                && u.mem_mib <= g.capacity.mem_mib
                && u.cores <= g.capacity.cores
        })
    })
}

/// Whether moving `set` (indices of placed pods, in key order) lets the
/// pending pod onto some node while each moved pod lands on another node
/// than its own, over every choice of node for each.
fn brute_force_valid(
    state: &ClusterState,
    pending: &PodPlan,
    placed: &[Running],
    plans: &[PodPlan],
    set: &[usize],
    (targets, nodes): (&[String], &[String]),
) -> bool {
    let mut s = state.clone();
    for &i in set {
        s.remove(&format!("p{i}"));
    }
    let plans: Vec<PodPlan> = set.iter().map(|&i| plans[i].clone()).collect();
    fn place(
        s: &mut ClusterState,
        plans: &[PodPlan],
        origins: &[String],
        nodes: &[String],
        at: usize,
    ) -> bool {
        if at == plans.len() {
            return true;
        }
        for node in nodes.iter().filter(|n| **n != origins[at]) {
            if let Ok(a) = s.assign(&plans[at], node) {
                let key = format!("moved/{at}");
                s.apply(&key, a).unwrap();
                if place(s, plans, origins, nodes, at + 1) {
                    return true;
                }
                s.remove(&key);
            }
        }
        false
    }
    let origins: Vec<String> = set
        .iter()
        .map(|&i| format!("n{}", placed[i].node))
        .collect();
    targets.iter().any(|target| {
        let mut t = s.clone();
        let Ok(a) = t.assign(pending, target) else {
            return false;
        };
        t.apply("pending", a).unwrap();
        place(&mut t, &plans, &origins, nodes, 0)
    })
}

/// The fewest moves a brute force finds (None: none within MAX_MOVES).
fn brute_force(
    state: &ClusterState,
    pending: &PodPlan,
    placed: &[Running],
    plans: &[PodPlan],
    case: &Case,
    (targets, nodes): (&[String], &[String]),
) -> Option<usize> {
    // Key order is name order ("p10" < "p2" does not arise: at most 9).
    let eligible: Vec<usize> = (0..placed.len())
        .filter(|&i| may_move(&placed[i], case))
        .collect();
    for k in 1..=MAX_MOVES.min(eligible.len()) {
        let mut pick: Vec<usize> = (0..k).collect();
        loop {
            let set: Vec<usize> = pick.iter().map(|&p| eligible[p]).collect();
            let guarded = set.iter().filter(|&&i| placed[i].guarded).count() as i32;
            if guarded <= case.allowed
                && brute_force_valid(state, pending, placed, plans, &set, (targets, nodes))
            {
                return Some(k);
            }
            // Next combination.
            let Some(i) = (0..k).rev().find(|&i| pick[i] < eligible.len() - k + i) else {
                break;
            };
            pick[i] += 1;
            for j in i + 1..k {
                pick[j] = pick[j - 1] + 1;
            }
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn plans_are_valid_and_as_small_as_brute_force(case in arb_case()) {
        let (yaml, placed) = objects(&case);
        let snapshot = Snapshot::from_yaml(&yaml, "case").unwrap();
        let (view, _) = snapshot.to_view();
        let config = config();
        let pending_pod = snapshot.pods.iter().find(|p| p.metadata.name.as_deref() == Some("pending")).unwrap().clone();
        let pending = PodToPlace::read(pending_pod, &config, &view).unwrap();
        let now: Timestamp = NOW.parse().unwrap();
        let nodes: Vec<String> = (0..case.gpus.len()).map(|n| format!("n{n}")).collect();
        let mut offered: Vec<String> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| case.offered[*i])
            .map(|(_, n)| n.clone())
            .collect();
        if offered.is_empty() {
            offered = nodes.clone();
        }
        let outcome = plan(&view, &config, &pending, Some(&offered), &snapshot.pods, Some(&snapshot.nodes), now);
        let fits_now = view.state().evaluate(&pending.plan, Some(&offered)).best().is_some();
        // Each running pod's replacement: the same pod, read again.
        let plans: Vec<PodPlan> = (0..placed.len())
            .map(|i| {
                let pod = snapshot.pods.iter().find(|p| p.metadata.name.as_deref() == Some(format!("p{i}").as_str())).unwrap();
                PodToPlace::read(pod.clone(), &config, &view).unwrap().plan
            })
            .collect();
        let smallest = brute_force(view.state(), &pending.plan, &placed, &plans, &case, (&offered, &nodes));
        match outcome {
            Outcome::NotNeeded => prop_assert!(fits_now),
            Outcome::GangMember => prop_assert!(false, "no gangs here"),
            Outcome::NoPlan { exhaustive, .. } => {
                prop_assert!(!fits_now);
                prop_assert!(exhaustive);
                prop_assert_eq!(smallest, None);
            }
            Outcome::Plan(p) => {
                prop_assert!(!fits_now);
                prop_assert_eq!(Some(p.moves.len()), smallest, "plan {:?}", p.describe());
                // Valid: every moved pod may move, once, to another node;
                // no budget broken; the pending pod and every replacement
                // fit together, nothing over-committed.
                let mut state = view.state().clone();
                let mut seen = std::collections::HashSet::new();
                let mut guarded = 0;
                for m in &p.moves {
                    let i: usize = m.uid.trim_start_matches('p').parse().unwrap();
                    prop_assert!(may_move(&placed[i], &case), "{} may not move", m.uid);
                    prop_assert!(seen.insert(m.uid.clone()), "{} moved twice", m.uid);
                    prop_assert_ne!(&m.from, &m.to);
                    prop_assert_eq!(&m.from, &format!("n{}", placed[i].node));
                    guarded += i32::from(placed[i].guarded);
                    state.remove(&m.uid);
                }
                prop_assert!(guarded <= case.allowed, "budget broken");
                state.apply("pending", p.allocation.clone()).unwrap();
                prop_assert_eq!(&p.allocation.node, &p.node);
                prop_assert!(offered.contains(&p.node), "{} was not offered", p.node);
                for m in &p.moves {
                    prop_assert_eq!(&m.allocation.node, &m.to);
                    state.apply(&format!("moved/{}", m.uid), m.allocation.clone()).unwrap();
                }
                prop_assert!(within_capacity(&state), "over-committed: {}", p.describe());
            }
        }
    }
}
