//! Placement engine benchmarks on a large cluster: 5,000 nodes x 8 GPUs with
//! 40,000 running vGPU pods. Run: `cargo bench --bench engine`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group};
use gpugate::engine::numa::{
    CpuMemory, NodeTopology, NumaRequest, NumaZone, TopologyPolicy, TopologyScope,
};
use gpugate::engine::{
    ClusterState, GpuPolicy, GpuRequest, Memory, NodePolicy, PodPlan, PodRequest,
    request::ContainerRequest,
};

#[allow(dead_code)]
#[path = "support/big_cluster.rs"]
mod big_cluster;

/// 5,000 nodes of 8 GPUs in two NUMA nodes of 4, 40,000 running pods.
fn cluster() -> ClusterState {
    cluster_of(8, 4)
}

/// `gpus_per_node` GPUs per node; pair scores 200 within groups of `group`
/// GPUs (same NUMA node / NVLink island), 100 across.
fn cluster_of(gpus_per_node: u32, group: u32) -> ClusterState {
    big_cluster::engine_state(gpus_per_node, group)
}

fn plan(count: u32, gpu_policy: GpuPolicy) -> PodPlan {
    PodPlan::new(
        PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers: vec![ContainerRequest {
                name: "main".into(),
                kind: gpugate::engine::ContainerKind::App,
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

/// Two app containers of one GPU each, 8,000 and 30,000 MiB: where the
/// first pass fails, the joint search (engine/joint.rs) runs; on this
/// cluster it finds no more nodes, so this measures what it costs when it
/// cannot help.
fn two_container_plan() -> PodPlan {
    let container = |name: &str, mem| ContainerRequest {
        name: name.into(),
        kind: gpugate::engine::ContainerKind::App,
        gpu: Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(mem),
            cores: 10,
        }),
    };
    PodPlan::new(
        PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers: vec![container("small", 8000), container("large", 30000)],
        },
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    )
}

/// Node `i`'s two zones: (i mod 16) and (i / 16 mod 16) CPUs free, 64 GiB.
fn topology(i: usize) -> NodeTopology {
    let zone = |id: i32, cpus: usize| {
        let free = CpuMemory {
            cpu_milli: cpus as u64 * 1000,
            memory_bytes: 64 << 30,
        };
        NumaZone {
            id,
            available: free,
            allocatable: free,
        }
    };
    NodeTopology {
        policy: TopologyPolicy::SingleNumaNode,
        scope: TopologyScope::Container,
        zones: vec![zone(0, i % 16), zone(1, (i / 16) % 16)],
    }
}

/// The 1-GPU pod with 4 CPUs and 8 GiB, Guaranteed or not.
fn numa_plan(guaranteed: bool) -> PodPlan {
    let mut p = plan(1, GpuPolicy::Spread);
    p.numa = NumaRequest {
        guaranteed,
        containers: vec![CpuMemory {
            cpu_milli: 4000,
            memory_bytes: 8 << 30,
        }],
    };
    p
}

/// 5,000 nodes of 8 A100-40GB GPUs in MIG mode, two instances on each
/// (2g.10gb on slices 0-1, 1g.5gb on slice 6): 80,000 pods' instances.
fn mig_cluster() -> ClusterState {
    use gpugate::engine::{Allocation, DeviceGrant, Gpu, MigInstance, Node, Usage};
    use gpugate::hami::mig::{MigPlacement, MigProfile};
    let profile = |name: &str, memory_mib, cores, size, starts: &[u32]| MigProfile {
        name: name.into(),
        memory_mib,
        cores,
        slice_count: size,
        placements: starts
            .iter()
            .map(|&start| MigPlacement { start, size })
            .collect(),
    };
    let profiles = vec![
        profile("1g.5gb", 4864, 15, 1, &[0, 1, 2, 3, 4, 5, 6]),
        profile("1g.10gb", 9856, 15, 2, &[0, 2, 4, 6]),
        profile("2g.10gb", 9984, 29, 2, &[0, 2, 4]),
        profile("3g.20gb", 19968, 43, 4, &[0, 4]),
        profile("4g.20gb", 19968, 58, 4, &[0]),
        profile("7g.40gb", 40192, 100, 8, &[0]),
    ];
    let mut state = ClusterState::new();
    let names: Vec<String> = (0..5000).map(|n| format!("mig-node-{n:05}")).collect();
    // Nodes first: a node registered after allocations re-reads them all.
    for name in &names {
        let gpus = (0..8u32)
            .map(|i| {
                let mut g = Gpu::new(
                    format!("GPU-{name}-{i}"),
                    i,
                    "NVIDIA A100-SXM4-40GB",
                    Usage {
                        slots: 7,
                        mem_mib: 40960,
                        cores: 100,
                        ..Usage::default()
                    },
                );
                g.numa = i32::from(i >= 4);
                g.set_mode("mig", profiles.clone());
                g
            })
            .collect();
        state.upsert_node(Node::new(name.clone(), gpus));
    }
    for name in &names {
        for i in 0..8 {
            for (k, (p, start)) in [(2usize, 0u32), (0, 6)].into_iter().enumerate() {
                let pr = &profiles[p];
                let allocation = Allocation {
                    node: name.clone(),
                    containers: vec![vec![DeviceGrant {
                        uuid: format!("GPU-{name}-{i}"),
                        kind: gpugate::devices::KindId::NVIDIA,
                        mem_mib: u64::from(pr.memory_mib),
                        cores: pr.cores,
                        slots: 1,
                        unreadable: false,
                        device_type: None,
                        mig: Some(MigInstance {
                            profile: pr.name.clone(),
                            placement: MigPlacement {
                                start,
                                size: pr.slice_count,
                            },
                        }),
                    }]],
                    kinds: vec![],
                    numa: None,
                    tenancy: Default::default(),
                };
                state
                    .apply(&format!("{name}-{i}-{k}"), allocation)
                    .expect("the instances fit");
            }
        }
    }
    state
}

fn benches(c: &mut Criterion) {
    let state = cluster();
    let names: Vec<String> = state.nodes().map(|n| n.name.clone()).collect();

    let mut g = c.benchmark_group("evaluate_5000x8_40000pods");
    for (label, p) in [
        ("1gpu_spread", plan(1, GpuPolicy::Spread)),
        ("1gpu_binpack", plan(1, GpuPolicy::Binpack)),
        ("4gpu_topology", plan(4, GpuPolicy::TopologyAware)),
        (
            "1gpu_binpack_numa_chain",
            plan(1, "binpack,numa".parse().expect("a chain")),
        ),
        ("2containers_8000_30000", two_container_plan()),
    ] {
        // What the plan finds, printed beside the timing.
        eprintln!(
            "{label}: {} of {} nodes feasible",
            state.evaluate(&p, None).feasible.len(),
            names.len()
        );
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

    // Every node with a single-numa-node NodeResourceTopology of two
    // zones (GPUs 0-3 on zone 0, 4-7 on zone 1), 0 to 15 CPUs free per
    // zone: the same 1-GPU pod, Guaranteed with 4 CPUs (aligned), beside
    // the pod not Guaranteed on the same state (the reference: GPUs only).
    let mut numa_state = state.clone();
    for (i, name) in names.iter().enumerate() {
        numa_state.set_topology(name, Some(topology(i)));
    }
    let mut g = c.benchmark_group("evaluate_5000x8_numa");
    let guaranteed = numa_plan(true);
    let burstable = numa_plan(false);
    for (label, p) in [
        ("guaranteed_aligned", &guaranteed),
        ("burstable_reference", &burstable),
    ] {
        eprintln!(
            "numa {label}: {} of {} nodes feasible",
            numa_state.evaluate(p, None).feasible.len(),
            names.len()
        );
        g.bench_function(format!("all_nodes/1gpu_{label}"), |b| {
            b.iter(|| black_box(numa_state.evaluate(black_box(p), None).feasible.len()))
        });
    }
    g.finish();
    drop(numa_state);

    // Every GPU in MIG mode (an A100-40GB's six profiles), each holding a
    // 2g.10gb instance on slices 0-1 and a 1g.5gb on slice 6: the same
    // 8,000 MiB pod takes a 1g.10gb or 2g.10gb instance where one is free.
    let mig = mig_cluster();
    let mut g = c.benchmark_group("evaluate_5000x8_mig");
    for (label, p) in [
        ("1gpu_spread", plan(1, GpuPolicy::Spread)),
        ("1gpu_binpack", plan(1, GpuPolicy::Binpack)),
    ] {
        eprintln!(
            "mig {label}: {} of {} nodes feasible",
            mig.evaluate(&p, None).feasible.len(),
            names.len()
        );
        g.bench_function(format!("all_nodes/{label}"), |b| {
            b.iter(|| black_box(mig.evaluate(black_box(&p), None).feasible.len()))
        });
    }
    g.finish();
    drop(mig);

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
/// With `GPUGATE_BENCH_EVALS=N`, no criterion: builds the 5,000 x 8
/// cluster and evaluates the one-GPU spread pod against every node N
/// times, then exits. For counts that do not depend on a noisy machine:
/// `valgrind --tool=cachegrind` on this mode gives instructions and cache
/// misses per evaluation (docs/benchmarks.md, "Counted, not timed").
fn fixed_evaluations(n: usize) {
    let state = cluster();
    let p = plan(1, GpuPolicy::Spread);
    let mut feasible = 0;
    for _ in 0..n {
        feasible += black_box(state.evaluate(black_box(&p), None).feasible.len());
    }
    println!("{n} evaluations, {feasible} feasible in all");
}

fn main() {
    match std::env::var("GPUGATE_BENCH_EVALS").map(|v| v.parse::<usize>()) {
        Ok(Ok(n)) => fixed_evaluations(n),
        Ok(Err(e)) => eprintln!("GPUGATE_BENCH_EVALS: {e}"),
        Err(_) => {
            engine();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
