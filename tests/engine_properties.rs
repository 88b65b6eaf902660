//! Invariants of the placement engine over random clusters and pods.

use std::collections::BTreeMap;

use gpugate::engine::{
    Allocation, ClusterState, ContainerKind, Gpu, GpuPolicy, GpuRequest, Memory, Node, NodePolicy,
    PodPlan, PodRequest, Usage, request::ContainerRequest,
};
use proptest::prelude::*;

fn arb_gpu(node: usize, index: u32) -> impl Strategy<Value = Gpu> {
    (
        prop_oneof![Just(1u32), Just(2), Just(4), Just(10)],
        prop_oneof![Just(8192u64), Just(16384), Just(40960)],
        prop_oneof![Just(100u32), Just(200)],
        0i32..2,
        prop::bool::weighted(0.9),
    )
        .prop_map(move |(slots, mem_mib, cores, numa, healthy)| {
            let mut g = Gpu::new(
                format!("GPU-{node}-{index}"),
                index,
                "NVIDIA A100-SXM4-40GB",
                Usage {
                    slices: 0,
                    unreserved: 0,
                    unreadable: 0,
                    slots,
                    mem_mib: u32::try_from(mem_mib).unwrap(),
                    cores,
                },
            );
            g.numa = numa;
            g.healthy = healthy;
            g
        })
}

fn arb_node(node: usize) -> impl Strategy<Value = Node> {
    (1u32..6)
        .prop_flat_map(move |n| (0..n).map(|i| arb_gpu(node, i)).collect::<Vec<_>>())
        .prop_map(move |gpus| Node::new(format!("node-{node:02}"), gpus))
}

fn arb_cluster() -> impl Strategy<Value = Vec<Node>> {
    (1usize..6).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
}

fn arb_request() -> impl Strategy<Value = GpuRequest> {
    arb_request_of(1..4)
}

/// A GPU request of `count` GPUs.
fn arb_request_of(count: std::ops::Range<u32>) -> impl Strategy<Value = GpuRequest> {
    (
        count,
        prop_oneof![
            (1u64..20000).prop_map(Memory::Mib),
            (1u32..=100).prop_map(Memory::Percent)
        ],
        prop_oneof![Just(0u32), 1u32..100, Just(100u32)],
    )
        .prop_map(|(count, memory, cores)| GpuRequest {
            count,
            memory,
            cores,
        })
}

/// Containers named c0, c1, … in pod order: init containers (sidecars
/// among them) first, as in a pod spec.
fn pod_containers(containers: Vec<(ContainerKind, Option<GpuRequest>)>) -> Vec<ContainerRequest> {
    let mut containers: Vec<ContainerRequest> = containers
        .into_iter()
        .enumerate()
        .map(|(i, (kind, gpu))| ContainerRequest {
            name: format!("c{i}"),
            kind,
            gpu,
        })
        .collect();
    containers.sort_by_key(|c| !c.kind.is_init_list());
    containers
}

fn arb_plan() -> impl Strategy<Value = PodPlan> {
    (
        prop::collection::vec(
            (
                prop_oneof![
                    Just(ContainerKind::Init),
                    Just(ContainerKind::Sidecar),
                    Just(ContainerKind::App)
                ],
                prop::option::weighted(0.8, arb_request()),
            ),
            1..4,
        ),
        prop_oneof![Just(NodePolicy::Binpack), Just(NodePolicy::Spread)],
        prop_oneof![
            Just(GpuPolicy::Binpack),
            Just(GpuPolicy::Spread),
            Just(GpuPolicy::TopologyAware),
            Just(GpuPolicy::Mutex),
            Just("binpack,numa".parse().unwrap()),
            Just("spread,numa".parse().unwrap()),
            Just("numa".parse().unwrap()),
            Just("mutex,numa".parse().unwrap())
        ],
        any::<bool>(),
    )
        .prop_map(|(containers, node_policy, gpu_policy, numa_bind)| {
            let containers = pod_containers(containers);
            let mut plan = PodPlan::new(
                PodRequest {
                    device_kind: Default::default(),
                    also: Vec::new(),
                    containers,
                },
                node_policy,
                gpu_policy,
            );
            plan.selection.numa_bind = numa_bind;
            plan
        })
}

fn state_of(nodes: &[Node]) -> ClusterState {
    let mut s = ClusterState::new();
    for n in nodes {
        s.upsert_node(n.clone());
    }
    s
}

fn assert_within_capacity(state: &ClusterState) -> Result<(), TestCaseError> {
    for node in state.nodes() {
        for (g, u) in node.gpus.iter().zip(&node.usage) {
            prop_assert!(
                u.slots <= g.capacity.slots,
                "{}: slots {u:?} > {:?}",
                g.uuid,
                g.capacity
            );
            prop_assert!(
                u.mem_mib <= g.capacity.mem_mib,
                "{}: mem {u:?} > {:?}",
                g.uuid,
                g.capacity
            );
            prop_assert!(
                u.cores <= g.capacity.cores,
                "{}: cores {u:?} > {:?}",
                g.uuid,
                g.capacity
            );
        }
    }
    Ok(())
}

/// What an allocation puts on each GPU in each phase of the pod's life,
/// worked out here from the containers' kinds without the engine's rule:
/// the running phase (every sidecar and app container at once) and, for
/// each init container, itself beside the sidecars listed before it.
fn phases(a: &Allocation) -> Vec<BTreeMap<String, Usage>> {
    let on_gpus = |containers: &[usize]| {
        let mut m: BTreeMap<String, Usage> = BTreeMap::new();
        for &i in containers {
            for d in &a.containers[i] {
                m.entry(d.uuid.clone()).or_default().add(&Usage {
                    slices: 0,
                    unreserved: 0,
                    unreadable: 0,
                    slots: 1,
                    mem_mib: u32::try_from(d.mem_mib).unwrap(),
                    cores: d.cores,
                });
            }
        }
        m
    };
    let all: Vec<usize> = (0..a.containers.len()).collect();
    let running: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&i| a.kind(i) != ContainerKind::Init)
        .collect();
    let mut out = vec![on_gpus(&running)];
    for &i in all.iter().filter(|&&i| a.kind(i) == ContainerKind::Init) {
        let mut beside: Vec<usize> = (0..i)
            .filter(|&j| a.kind(j) == ContainerKind::Sidecar)
            .collect();
        beside.push(i);
        out.push(on_gpus(&beside));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// What the ledger counts for a pod covers every phase of its life, so
    /// a ledger within capacity means GPUs within capacity in reality.
    #[test]
    fn the_ledger_covers_every_phase(nodes in arb_cluster(), plans in prop::collection::vec(arb_plan(), 1..10)) {
        let state = state_of(&nodes);
        for plan in &plans {
            let Ok(a) = state.place(plan) else { continue };
            let counted: BTreeMap<&str, Usage> = a.usage_by_gpu().into_iter().collect();
            for phase in phases(&a) {
                for (uuid, u) in phase {
                    let c = counted.get(uuid.as_str()).copied().unwrap_or_default();
                    prop_assert!(
                        u.mem_mib <= c.mem_mib && u.cores <= c.cores && u.slots <= c.slots,
                        "{uuid}: phase uses {u:?}, ledger counts {c:?} ({a:?})"
                    );
                }
            }
        }
    }

    /// Placing pods one after another never over-commits a GPU.
    #[test]
    fn no_gpu_is_ever_over_committed(nodes in arb_cluster(), plans in prop::collection::vec(arb_plan(), 1..25)) {
        let mut state = state_of(&nodes);
        for (i, plan) in plans.iter().enumerate() {
            if let Ok(a) = state.place(plan) {
                // every GPU of a container is distinct
                for grants in &a.containers {
                    let mut uuids: Vec<_> = grants.iter().map(|g| &g.uuid).collect();
                    uuids.sort();
                    uuids.dedup();
                    prop_assert_eq!(uuids.len(), grants.len());
                }
                state.apply(&format!("pod-{i}"), a).unwrap();
            }
            assert_within_capacity(&state)?;
        }
    }

    /// Binpack picks a node at least as used as any feasible node; spread at most.
    #[test]
    fn node_policy_orders_by_utilisation(nodes in arb_cluster(), warmup in prop::collection::vec(arb_plan(), 0..10), plan in arb_plan()) {
        let mut state = state_of(&nodes);
        for (i, p) in warmup.iter().enumerate() {
            if let Ok(a) = state.place(p) {
                state.apply(&format!("w{i}"), a).unwrap();
            }
        }
        // Utilisation computed here, independently of the engine's score:
        // used/capacity of slots, cores and memory, summed over the node.
        let utilisation = |name: &str| -> f64 {
            let n = state.node(name).unwrap();
            let (mut us, mut s, mut uc, mut c, mut um, mut m) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
            for (g, u) in n.gpus.iter().zip(&n.usage) {
                us += f64::from(u.slots);
                s += f64::from(g.capacity.slots);
                uc += f64::from(u.cores);
                c += f64::from(g.capacity.cores);
                um += u.mem_mib as f64;
                m += g.capacity.mem_mib as f64;
            }
            if s == 0.0 || c == 0.0 || m == 0.0 { 0.0 } else { us / s + uc / c + um / m }
        };
        let eval = state.evaluate(&plan, None);
        if let Some(best) = eval.best() {
            let b = utilisation(best.node);
            for f in &eval.feasible {
                let u = utilisation(f.node);
                match plan.node_policy {
                    NodePolicy::Binpack => prop_assert!(b >= u - 1e-9, "binpack chose {} ({b}) over {} ({u})", best.node, f.node),
                    NodePolicy::Spread => prop_assert!(b <= u + 1e-9, "spread chose {} ({b}) over {} ({u})", best.node, f.node),
                }
                if (u - b).abs() < 1e-12 {
                    prop_assert!(best.node <= f.node, "tie must go to the lowest name");
                }
            }
        } else {
            prop_assert!(eval.feasible.is_empty());
        }
        prop_assert_eq!(eval.feasible.len() + eval.rejected.len(), nodes.len());
    }

    /// The same input gives the same output, whatever order nodes were
    /// registered in, allocations were applied in and candidates are named in.
    #[test]
    fn deterministic(nodes in arb_cluster(), warmup in prop::collection::vec(arb_plan(), 0..12), plan in arb_plan(), seed in any::<u64>()) {
        // Place the warm-up pods once to get a set of allocations.
        let mut base = state_of(&nodes);
        let mut allocations = Vec::new();
        for (i, p) in warmup.iter().enumerate() {
            if let Ok(a) = base.place(p) {
                base.apply(&format!("pod-{i}"), a.clone()).unwrap();
                allocations.push((format!("pod-{i}"), a));
            }
        }
        // Rebuild the same state in a shuffled order.
        let shuffle = |len: usize, salt: u64| {
            let mut order: Vec<usize> = (0..len).collect();
            order.sort_by_key(|i| (*i as u64 ^ seed ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            order
        };
        let mut other = ClusterState::new();
        for i in shuffle(nodes.len(), 1) {
            other.upsert_node(nodes[i].clone());
        }
        for i in shuffle(allocations.len(), 2) {
            other.apply(&allocations[i].0, allocations[i].1.clone()).unwrap();
        }
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let shuffled: Vec<String> = shuffle(names.len(), 3).into_iter().map(|i| names[i].clone()).collect();
        let render = |e: gpugate::engine::Evaluation<'_>| {
            let feasible: Vec<String> = e.feasible.iter().map(|f| format!("{} {} {}", f.node, f.score, f.priority)).collect();
            let rejected: Vec<String> = e.rejected.iter().map(|(n, r)| format!("{n}: {r}")).collect();
            (feasible, rejected, e.best().map(|b| b.node.to_string()))
        };
        let expected = render(base.evaluate(&plan, None));
        prop_assert_eq!(&render(other.evaluate(&plan, None)), &expected);
        prop_assert_eq!(&render(other.evaluate(&plan, Some(&shuffled))), &expected);
        if let Some(best) = &expected.2 {
            prop_assert_eq!(base.assign(&plan, best), other.assign(&plan, best));
        }
    }

    /// Removing an allocation restores the state exactly.
    #[test]
    fn apply_then_remove_restores(nodes in arb_cluster(), plans in prop::collection::vec(arb_plan(), 1..12)) {
        let mut state = state_of(&nodes);
        let mut placed = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            if let Ok(a) = state.place(p) {
                state.apply(&format!("pod-{i}"), a).unwrap();
                placed.push(format!("pod-{i}"));
            }
        }
        for uid in &placed {
            prop_assert!(state.remove(uid).is_some());
        }
        let fresh = state_of(&nodes);
        for (a, b) in state.nodes().zip(fresh.nodes()) {
            prop_assert_eq!(a, b);
        }
    }
}

/// A small node and a pod of two or three GPU containers, for the joint
/// placement's comparison with brute force.
fn arb_small_case() -> impl Strategy<Value = (Node, PodPlan)> {
    let node = (1u32..5)
        .prop_flat_map(|n| (0..n).map(|i| arb_gpu(0, i)).collect::<Vec<_>>())
        .prop_map(|gpus| Node::new("small", gpus));
    let request = arb_request_of(1..3);
    let containers = prop::collection::vec(
        (
            prop_oneof![
                Just(ContainerKind::Init),
                Just(ContainerKind::Sidecar),
                Just(ContainerKind::App),
                Just(ContainerKind::App)
            ],
            request,
        ),
        2..4,
    );
    (
        node,
        containers,
        prop_oneof![
            Just(GpuPolicy::Binpack),
            Just(GpuPolicy::Spread),
            Just(GpuPolicy::Mutex)
        ],
        prop::bool::weighted(0.2),
        prop::collection::vec(arb_request(), 0..5),
    )
        .prop_map(|(node, containers, policy, numa_bind, warmup)| {
            // Some GPUs in use already: single-container pods placed first.
            let mut state = state_of(std::slice::from_ref(&node));
            for (i, req) in warmup.into_iter().enumerate() {
                let warm = PodPlan::new(
                    PodRequest {
                        device_kind: Default::default(),
                        also: Vec::new(),
                        containers: vec![ContainerRequest {
                            name: "w".into(),
                            kind: ContainerKind::App,
                            gpu: Some(req),
                        }],
                    },
                    NodePolicy::Binpack,
                    GpuPolicy::Spread,
                );
                if let Ok(a) = state.place(&warm) {
                    state.apply(&format!("w{i}"), a).unwrap();
                }
            }
            let node = state.node("small").unwrap().clone();
            let containers = pod_containers(
                containers
                    .into_iter()
                    .map(|(kind, gpu)| (kind, Some(gpu)))
                    .collect(),
            );
            let mut plan = PodPlan::new(
                PodRequest {
                    device_kind: Default::default(),
                    also: Vec::new(),
                    containers,
                },
                NodePolicy::Binpack,
                policy,
            );
            plan.selection.numa_bind = numa_bind;
            (node, plan)
        })
}

/// Whether GPU sets `sets` (one per container, positions) pass every
/// check when the containers start in pod order: sidecars and app
/// containers add up, an init container runs beside the node's usage and
/// the sidecars started before it. Written here from the rules, apart from
/// the engine's search.
fn valid_assignment(node: &Node, plan: &PodPlan, sets: &[Vec<usize>]) -> bool {
    let mut running = node.usage.clone();
    for (c, set) in plan.request.containers.iter().zip(sets) {
        let req = c.gpu.as_ref().unwrap();
        let one_numa = set
            .windows(2)
            .all(|w| node.gpus[w[0]].numa == node.gpus[w[1]].numa);
        if plan.selection.numa_bind && !one_numa {
            return false;
        }
        let mut after = running.clone();
        for &p in set {
            match gpugate::engine::fit::check_gpu(
                &node.gpus[p],
                &running[p],
                req,
                &plan.selection,
                plan.gpu_policy.is_mutex(),
            ) {
                Ok(take) => after[p].add(&take),
                Err(_) => return false,
            }
        }
        if c.kind != ContainerKind::Init {
            running = after;
        }
    }
    true
}

/// Every `k`-subset of `0..m`.
fn subsets(m: usize, k: usize) -> Vec<Vec<usize>> {
    (0u32..(1 << m))
        .filter(|s| s.count_ones() as usize == k)
        .map(|s| (0..m).filter(|i| s & (1 << i) != 0).collect())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A node takes a pod of several GPU containers exactly when some
    /// assignment of GPUs to its containers passes every check (brute
    /// force over all of them), and the GPUs it gives are such an
    /// assignment.
    #[test]
    fn several_containers_fit_exactly_when_an_assignment_exists((node, plan) in arb_small_case()) {
        let m = node.gpus.len();
        let mut choices: Vec<Vec<Vec<usize>>> = Vec::new();
        for c in &plan.request.containers {
            choices.push(subsets(m, c.gpu.as_ref().unwrap().count as usize));
        }
        // The cartesian product of every container's subsets.
        let mut exists = false;
        let mut idx = vec![0usize; choices.len()];
        if choices.iter().all(|c| !c.is_empty()) {
            loop {
                let sets: Vec<Vec<usize>> = idx.iter().zip(&choices).map(|(&i, c)| c[i].clone()).collect();
                if valid_assignment(&node, &plan, &sets) {
                    exists = true;
                    break;
                }
                let mut k = 0;
                while k < idx.len() {
                    idx[k] += 1;
                    if idx[k] < choices[k].len() { break; }
                    idx[k] = 0;
                    k += 1;
                }
                if k == idx.len() { break; }
            }
        }
        let state = state_of(std::slice::from_ref(&node));
        let got = state.assign(&plan, "small");
        prop_assert_eq!(got.is_ok(), exists, "{:?}", got);
        if let Ok(a) = got {
            let sets: Vec<Vec<usize>> = a
                .containers
                .iter()
                .map(|grants| {
                    grants
                        .iter()
                        .map(|g| node.gpus.iter().position(|x| x.uuid == g.uuid).unwrap())
                        .collect()
                })
                .collect();
            prop_assert!(valid_assignment(&node, &plan, &sets), "{:?}", sets);
        }
    }
}
