//! Placement engine benchmarks on a large cluster: 5,000 nodes x 8 GPUs with
//! 40,000 running vGPU pods. Run: `cargo bench --bench engine`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gpugate::engine::{
    Allocation, ClusterState, DeviceGrant, Gpu, GpuPolicy, GpuRequest, Memory, Node, NodePolicy,
    PodPlan, PodRequest, Usage, request::ContainerRequest,
};

const NODES: usize = 5_000;
const GPUS: u32 = 8;
const RUNNING_PODS: usize = 40_000;

fn cluster() -> ClusterState {
    cluster_of(GPUS, 4)
}

/// `NODES` nodes of `gpus` GPUs; pair scores 200 within groups of `group`
/// GPUs (same NUMA node / NVLink island), 100 across.
fn cluster_of(gpus_per_node: u32, group: u32) -> ClusterState {
    let mut state = ClusterState::new();
    for n in 0..NODES {
        let name = format!("gpu-node-{n:05}");
        let gpus = (0..gpus_per_node)
            .map(|i| {
                let mut g = Gpu::new(
                    format!("GPU-{n:05}-{i}"),
                    i,
                    "NVIDIA A100-SXM4-40GB",
                    Usage {
                        slots: 10,
                        mem_mib: 40960,
                        cores: 100,
                    },
                );
                g.numa = (i / group) as i32;
                g
            })
            .collect();
        let mut node = Node::new(name, gpus);
        let (count, group) = (gpus_per_node as usize, group as usize);
        for a in 0..count {
            for b in a + 1..count {
                let score = if a / group == b / group { 200 } else { 100 };
                node.set_pair_score(
                    &format!("GPU-{n:05}-{a}"),
                    &format!("GPU-{n:05}-{b}"),
                    score,
                );
            }
        }
        state.upsert_node(node);
    }
    // 40,000 running pods, 8 per node, of varied sizes so that nodes differ.
    for p in 0..RUNNING_PODS {
        let n = p % NODES;
        let gpu = (p / NODES) as u32 % gpus_per_node;
        let mem = 2000 + ((p * 7919) % 20) as u64 * 1000;
        let allocation = Allocation {
            node: format!("gpu-node-{n:05}"),
            containers: vec![vec![DeviceGrant {
                uuid: format!("GPU-{n:05}-{gpu}"),
                mem_mib: mem,
                cores: ((p * 31) % 50) as u32,
            }]],
            init_count: 0,
        };
        state
            .apply(&format!("pod-{p}"), allocation)
            .expect("node and GPU exist");
    }
    state
}

fn plan(count: u32, gpu_policy: GpuPolicy) -> PodPlan {
    PodPlan::new(
        PodRequest {
            containers: vec![ContainerRequest {
                name: "main".into(),
                init: false,
                gpu: Some(GpuRequest {
                    count,
                    memory: Memory::Mib(8000),
                    cores: 20,
                }),
            }],
        },
        NodePolicy::Binpack,
        gpu_policy,
    )
}

fn benches(c: &mut Criterion) {
    let state = cluster();
    let names: Vec<String> = state.nodes().map(|n| n.name.clone()).collect();

    let mut g = c.benchmark_group("evaluate_5000x8_40000pods");
    for (label, p) in [
        ("1gpu_spread", plan(1, GpuPolicy::Spread)),
        ("1gpu_binpack", plan(1, GpuPolicy::Binpack)),
        ("4gpu_topology", plan(4, GpuPolicy::TopologyAware)),
    ] {
        g.bench_function(format!("all_nodes/{label}"), |b| {
            b.iter(|| black_box(state.evaluate(black_box(&p), None).feasible.len()))
        });
    }
    let p = plan(1, GpuPolicy::Spread);
    g.bench_function("candidate_names/1gpu_spread", |b| {
        b.iter(|| black_box(state.evaluate(black_box(&p), Some(&names)).feasible.len()))
    });
    g.finish();

    // 16-GPU nodes (two NVLink islands of 8): the topology search's worst case.
    let big = cluster_of(16, 8);
    let mut g = c.benchmark_group("evaluate_5000x16_40000pods");
    for count in [4u32, 8] {
        let p = plan(count, GpuPolicy::TopologyAware);
        g.bench_function(format!("all_nodes/{count}gpu_topology"), |b| {
            b.iter(|| black_box(big.evaluate(black_box(&p), None).feasible.len()))
        });
    }
    g.finish();
    drop(big);

    let mut g = c.benchmark_group("ledger");
    for count in [1u32, 8] {
        let p = plan(count, GpuPolicy::Spread);
        let node = "gpu-node-00042";
        let allocation = state.assign(&p, node).expect("fits");
        g.bench_function(format!("assign/{count}gpu"), |b| {
            b.iter(|| black_box(state.assign(black_box(&p), node)))
        });
        // Apply then remove on one state: the pair leaves it unchanged, so
        // every iteration measures the same work.
        let mut s = state.clone();
        g.bench_function(format!("apply_remove/{count}gpu"), |b| {
            b.iter(|| {
                s.apply("bench-pod", allocation.clone()).expect("applies");
                black_box(s.remove("bench-pod"))
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = engine;
    config = Criterion::default().sample_size(30);
    targets = benches
}
criterion_main!(engine);
