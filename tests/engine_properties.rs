//! Invariants of the placement engine over random clusters and pods.

use gpugate::engine::{
    ClusterState, Gpu, GpuPolicy, GpuRequest, Memory, Node, NodePolicy, PodPlan, PodRequest, Usage,
    request::ContainerRequest,
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
                    slots,
                    mem_mib,
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
    (
        1u32..4,
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

fn arb_plan() -> impl Strategy<Value = PodPlan> {
    (
        prop::collection::vec(
            (any::<bool>(), prop::option::weighted(0.8, arb_request())),
            1..4,
        ),
        prop_oneof![Just(NodePolicy::Binpack), Just(NodePolicy::Spread)],
        prop_oneof![
            Just(GpuPolicy::Binpack),
            Just(GpuPolicy::Spread),
            Just(GpuPolicy::TopologyAware),
            Just(GpuPolicy::Mutex)
        ],
        any::<bool>(),
    )
        .prop_map(|(containers, node_policy, gpu_policy, numa_bind)| {
            // init containers first, as in a pod spec
            let mut containers: Vec<ContainerRequest> = containers
                .into_iter()
                .enumerate()
                .map(|(i, (init, gpu))| ContainerRequest {
                    name: format!("c{i}"),
                    init,
                    gpu,
                })
                .collect();
            containers.sort_by_key(|c| !c.init);
            let mut plan = PodPlan::new(PodRequest { containers }, node_policy, gpu_policy);
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

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
        let eval = state.evaluate(&plan, None);
        if let Some(best) = eval.best() {
            for f in &eval.feasible {
                match plan.node_policy {
                    NodePolicy::Binpack => prop_assert!(best.score >= f.score),
                    NodePolicy::Spread => prop_assert!(best.score <= f.score),
                }
                if f.score == best.score {
                    prop_assert!(best.node <= f.node, "tie must go to the lowest name");
                }
            }
        } else {
            prop_assert!(eval.feasible.is_empty());
        }
        prop_assert_eq!(eval.feasible.len() + eval.rejected.len(), nodes.len());
    }

    /// The same input gives the same output, whatever order nodes and pods
    /// were added in.
    #[test]
    fn deterministic(nodes in arb_cluster(), plans in prop::collection::vec(arb_plan(), 1..12)) {
        let run = |nodes: Vec<Node>| {
            let mut state = state_of(&nodes);
            let mut out = Vec::new();
            for (i, p) in plans.iter().enumerate() {
                let r = state.place(p);
                if let Ok(a) = &r {
                    state.apply(&format!("pod-{i}"), a.clone()).unwrap();
                }
                out.push(r.map_err(|rej| rej.iter().map(|(n, r)| format!("{n}: {r}")).collect::<Vec<_>>()));
            }
            out
        };
        let mut reversed = nodes.clone();
        reversed.reverse();
        prop_assert_eq!(run(nodes), run(reversed));
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
