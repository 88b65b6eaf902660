//! Never more than the container asked for: HAMi master's device plugin
//! refuses an `Allocate` whose grant is above the container's request
//! (#3075, #3125, `ValidateContainerAllocation`), so every grant gpugate
//! writes must pass that check, for every request shape (count, memory in
//! MiB or percent or neither, cores or none), every `memoryFactor`,
//! `defaultMemory` and `defaultCores`, whether or not the pod went through
//! gpugate's mutating webhook.
//!
//! The check is modelled here from HAMi's own rules, independently of the
//! engine: the request as the device plugin reads it from the pod spec
//! (`GenerateResourceRequests`: `gpumem` × `memoryFactor`, else the
//! percentage, else `defaultMemory`, else 100 % of the card; cores, else
//! `defaultCores`), and each granted device's memory at most that (a
//! percentage resolved against the card's registered memory), its cores at
//! most the core request when that is above 0. MIG grants are exempt (a
//! profile is rounded up by design); none is generated here.

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::cluster::convert::pod_plan;
use gpugate::config::Config;
use gpugate::engine::{ClusterState, Gpu, Node, Usage};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};

/// The device plugin's bound for one device of a container: memory (MiB),
/// `None` when unbounded; cores, `None` when 0 (no bound).
fn hami_bound(
    limits: &serde_json::Map<String, Value>,
    card_mem_mib: u64,
    cfg: &gpugate::engine::request::DeviceConfig,
) -> (Option<u64>, Option<u64>) {
    let read = |k: &str| {
        limits
            .get(k)
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<u64>().ok())
    };
    let mem = read(&cfg.resource_memory_name).unwrap_or(0);
    let mem_req = mem * u64::from(cfg.memory_factor.max(1));
    let mut pct = read(&cfg.resource_memory_percentage_name)
        .filter(|p| (1..=100).contains(p))
        .unwrap_or(101);
    let mut mem_req = mem_req;
    if mem_req == 0 && pct == 101 {
        if cfg.default_memory > 0 {
            mem_req = cfg.default_memory;
        } else {
            pct = 100;
        }
    }
    let mem_bound = if mem_req > 0 {
        Some(mem_req)
    } else if (1..=100).contains(&pct) {
        Some(card_mem_mib * pct / 100)
    } else {
        None
    };
    let cores = read(&cfg.resource_core_name).unwrap_or(u64::from(cfg.default_cores));
    (mem_bound, (cores > 0).then_some(cores))
}

/// A container's limits: a count or not, memory in MiB or percent or
/// neither, cores or not.
fn arb_limits(factor: u32) -> impl Strategy<Value = serde_json::Map<String, Value>> {
    (
        prop_oneof![Just(None), (1u64..=2).prop_map(Some)],
        prop_oneof![
            Just(None),
            (1u64..=20_000 / u64::from(factor)).prop_map(Some)
        ],
        prop_oneof![Just(None), (0u64..=100).prop_map(Some)],
        prop_oneof![Just(None), (0u64..=100).prop_map(Some)],
    )
        .prop_map(|(count, mem, pct, cores)| {
            let mut l = serde_json::Map::new();
            let mut put = |k: &str, v: Option<u64>| {
                if let Some(v) = v {
                    l.insert(k.to_string(), json!(v.to_string()));
                }
            };
            put("nvidia.com/gpu", count);
            put("nvidia.com/gpumem", mem);
            put("nvidia.com/gpumem-percentage", pct);
            put("nvidia.com/gpucores", cores);
            l
        })
}

/// A node of three empty GPUs of different memory (registered, as the
/// device plugin publishes it), shared by up to 10 pods each.
fn node() -> Node {
    let gpus = [8192u32, 16384, 40960]
        .iter()
        .enumerate()
        .map(|(i, mem)| {
            Gpu::new(
                format!("GPU-{i}"),
                i as u32,
                "NVIDIA A100-SXM4-40GB",
                Usage {
                    slots: 10,
                    mem_mib: *mem,
                    cores: 100,
                    slices: 0,
                    unreserved: 0,
                    unreadable: 0,
                },
            )
        })
        .collect();
    Node::new("n1", gpus)
}

/// The case a [`Case`] describes, placed and checked; `Ok(false)` when
/// gpugate refuses the pod (nothing is written then).
fn check(case: &Case) -> Result<bool, TestCaseError> {
    let (factor, limits) = &case.limits;
    let mut config = Config::default();
    config.nvidia.memory_factor = *factor;
    config.nvidia.default_memory = case.default_memory;
    config.nvidia.default_cores = case.default_cores;
    let cfg = config.nvidia.clone();
    let container = |i: usize, l: &serde_json::Map<String, Value>| json!({"name": format!("c{i}"), "image": "x", "resources": {"limits": l}});
    let mut spec = json!({"containers": [container(0, &limits[0])]});
    if let Some(second) = limits.get(1) {
        let c = container(1, second);
        if case.init_first {
            spec["initContainers"] = json!([c]);
        } else {
            spec["containers"].as_array_mut().unwrap().push(c);
        }
    }
    let mut raw = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
        "spec": spec,
    });
    // What the pod spec says once gpugate's mutating webhook has run on it
    // (its JSON patch applied), or as created without it.
    if case.through_webhook {
        match mutate_pod(&raw, &config, Some("ml")) {
            Mutation::Patch(ops) => {
                let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
                json_patch::patch(&mut raw, &patch).unwrap();
            }
            Mutation::Deny(_) => return Ok(false),
            other => panic!("{other:?}"),
        }
    }
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(raw).unwrap();
    let Ok(plan) = pod_plan(&pod, &config) else {
        return Ok(false);
    };
    let mut state = ClusterState::new();
    state.upsert_node(node());
    let Ok(allocation) = state.assign(&plan, "n1") else {
        return Ok(false);
    };
    let spec = pod.spec.as_ref().unwrap();
    let order: Vec<&k8s_openapi::api::core::v1::Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .collect();
    for (grants, c) in allocation.containers.iter().zip(&order) {
        let limits: serde_json::Map<String, Value> = serde_json::to_value(
            c.resources
                .as_ref()
                .and_then(|r| r.limits.clone())
                .unwrap_or_default(),
        )
        .unwrap()
        .as_object()
        .cloned()
        .unwrap();
        for g in grants {
            let card = state
                .node("n1")
                .and_then(|n| n.gpus.iter().find(|gpu| gpu.uuid == g.uuid))
                .map(|gpu| u64::from(gpu.capacity.mem_mib))
                .unwrap();
            let (mem, cores) = hami_bound(&limits, card, &cfg);
            if let Some(mem) = mem {
                prop_assert!(
                    g.mem_mib <= mem,
                    "{}: {} MiB granted on a {card} MiB card, request allows {mem} ({limits:?})",
                    c.name,
                    g.mem_mib
                );
            }
            if let Some(cores) = cores {
                prop_assert!(
                    u64::from(g.cores) <= cores,
                    "{}: {} cores granted, request allows {cores} ({limits:?})",
                    c.name,
                    g.cores
                );
            }
        }
    }
    Ok(true)
}

/// One random pod and device config.
#[derive(Debug, Clone)]
struct Case {
    limits: (u32, Vec<serde_json::Map<String, Value>>),
    default_memory: u64,
    default_cores: u32,
    through_webhook: bool,
    init_first: bool,
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(1u32), Just(2), Just(1024)]
            .prop_flat_map(|f| (Just(f), prop::collection::vec(arb_limits(f), 1..=2))),
        prop_oneof![Just(0u64), Just(3000), Just(9000)],
        prop_oneof![Just(0u32), Just(10), Just(50)],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(limits, default_memory, default_cores, through_webhook, init_first)| Case {
                limits,
                default_memory,
                default_cores,
                through_webhook,
                init_first,
            },
        )
}

/// 2,000 random pods; most are placed and checked (a test that checked
/// none would pass too).
#[test]
fn grants_never_exceed_what_the_device_plugin_allows() {
    use proptest::test_runner::{Config as RunnerConfig, TestRunner};
    let mut runner = TestRunner::new(RunnerConfig::with_cases(2000));
    let checked = std::cell::Cell::new(0u32);
    runner
        .run(&arb_case(), |case| {
            if check(&case)? {
                checked.set(checked.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    assert!(
        checked.get() >= 1000,
        "only {} of 2000 placed",
        checked.get()
    );
}
