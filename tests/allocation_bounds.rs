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

use gpugate::cluster::convert::pod_plan;
use gpugate::config::Config;
use gpugate::engine::request::ContainerResources;
use gpugate::engine::{ClusterState, Gpu, Node, Usage};
use proptest::prelude::*;
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn grants_never_exceed_what_the_device_plugin_allows(
        (factor, limits) in prop_oneof![Just(1u32), Just(2), Just(1024)]
            .prop_flat_map(|f| (Just(f), prop::collection::vec(arb_limits(f), 1..=2))),
        default_memory in prop_oneof![Just(0u64), Just(3000), Just(9000)],
        default_cores in prop_oneof![Just(0u32), Just(10), Just(50)],
        through_webhook in any::<bool>(),
        init_first in any::<bool>(),
    ) {
        let mut config = Config::default();
        config.nvidia.memory_factor = factor;
        config.nvidia.default_memory = default_memory;
        config.nvidia.default_cores = default_cores;
        let cfg = config.nvidia.clone();
        // What the pod spec says once gpugate's webhook has run (or not).
        let limits: Vec<serde_json::Map<String, Value>> = limits
            .into_iter()
            .map(|mut l| {
                if through_webhook {
                    let view = json!({"name": "c", "resources": {"limits": l.clone()}});
                    let c: k8s_openapi::api::core::v1::Container =
                        serde_json::from_value(view).unwrap();
                    if let Ok(r) = ContainerResources::read(&c, &cfg) {
                        let injected = r.webhook_defaults(&cfg);
                        if let Some(n) = injected.count {
                            l.insert("nvidia.com/gpu".into(), json!(n.to_string()));
                        }
                        if let Some(c) = injected.cores {
                            l.insert("nvidia.com/gpucores".into(), json!(c.to_string()));
                        }
                    }
                }
                l
            })
            .collect();
        let container = |i: usize, l: &serde_json::Map<String, Value>| {
            json!({"name": format!("c{i}"), "image": "x", "resources": {"limits": l}})
        };
        let mut spec = json!({"containers": [container(0, &limits[0])]});
        if let Some(second) = limits.get(1) {
            let c = container(1, second);
            if init_first {
                spec["initContainers"] = json!([c]);
            } else {
                spec["containers"].as_array_mut().unwrap().push(c);
            }
        }
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "u"},
            "spec": spec,
        }))
        .unwrap();
        // A request gpugate refuses is never placed: nothing to check.
        let Ok(plan) = pod_plan(&pod, &config) else { return Ok(()) };
        let mut state = ClusterState::new();
        state.upsert_node(node());
        let Ok(allocation) = state.assign(&plan, "n1") else { return Ok(()) };
        let spec = pod.spec.as_ref().unwrap();
        let order: Vec<&k8s_openapi::api::core::v1::Container> =
            spec.init_containers.iter().flatten().chain(&spec.containers).collect();
        for (grants, c) in allocation.containers.iter().zip(&order) {
            let limits: serde_json::Map<String, Value> = serde_json::to_value(
                c.resources.as_ref().and_then(|r| r.limits.clone()).unwrap_or_default(),
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
                        c.name, g.mem_mib
                    );
                }
                if let Some(cores) = cores {
                    prop_assert!(
                        u64::from(g.cores) <= cores,
                        "{}: {} cores granted, request allows {cores} ({limits:?})",
                        c.name, g.cores
                    );
                }
            }
        }
    }
}
