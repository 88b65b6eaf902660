//! AMD GPUs (../shared/hami-vendors.md section 11, cited by subsection
//! below): the JSON register with compute units and product names, cores
//! asked as a percent and taken as compute units, the product name as the
//! lists' vendor word, the `amd` config section and the webhook. Real Node
//! and Pod fixtures (tests/fixtures/amd/cluster.yaml). What bind writes is
//! in tests/bind_api.rs.

mod support {
    pub mod vendor;
}

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::cluster::Snapshot;
use gpugate::cluster::convert::{pod_plan, pod_request};
use gpugate::config::Config;
use gpugate::devices::{KindId, by_vendor};
use gpugate::engine::request::{GpuRequest, Memory};
use gpugate::engine::{Reason, Rejection};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn snapshot() -> Snapshot {
    support::vendor::fixture("amd")
}

fn pod(annotations: Value, limits: Value) -> Pod {
    support::vendor::one_container_pod("p", annotations, limits)
}

/// What `limits` takes on `node` under binpack: (index, MiB, units) per GPU.
fn place(annotations: Value, limits: Value, node: &str) -> Result<Vec<(u32, u64, u32)>, Rejection> {
    let (view, _) = snapshot().to_view();
    let mut annotations = annotations;
    annotations["hami.io/gpu-scheduler-policy"] = json!("binpack");
    let plan = pod_plan(&pod(annotations, limits), &Config::default()).unwrap();
    let a = view.state().assign(&plan, node)?;
    let n = view.state().node(node).unwrap();
    Ok(a.containers
        .iter()
        .flatten()
        .map(|g| {
            let index = support::vendor::index_of(n, &g.uuid);
            (index, g.mem_mib, g.cores)
        })
        .collect())
}

#[test]
fn gpus_are_read_with_compute_units_and_product_names() {
    // 11.2: `devcore` is the compute units; the list HAMi wrote, whose
    // vendor word is the product name, counts 76 units of GPU 0.
    let (view, report) = snapshot().to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let n = view.state().node("amd-1").unwrap();
    assert!(n.gpus.iter().all(|g| g.kind == KindId::AMD));
    assert_eq!(n.gpus[0].capacity.cores, 304);
    assert_eq!(n.gpus[0].model, "AMD Instinct MI300X VF");
    let used = n.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 16384, 76));
    // 1.3: a product name is read back as AMD's by the word it contains;
    // another vendor's exact word is never taken for it.
    assert_eq!(by_vendor("AMD Instinct MI300X VF"), Some(KindId::AMD));
    assert_eq!(by_vendor("amd instinct mi210"), Some(KindId::AMD));
    assert_eq!(by_vendor("NVIDIA"), Some(KindId::NVIDIA));
    assert_eq!(by_vendor("Radeon"), None);
}

#[test]
fn requests_are_a_count_mib_and_a_percent_of_the_units() {
    // 11.1: cores default to 100; memory in MiB, none = the whole GPU.
    let config = Config::default();
    let read = |limits| pod_request(&pod(json!({}), limits), &config).map(|r| r.containers[0].gpu);
    assert_eq!(
        read(json!({"amd.com/gpu": "1", "amd.com/gpumem": "16384", "amd.com/gpucores": "25"})),
        Ok(Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(16384),
            cores: 25
        }))
    );
    assert_eq!(
        read(json!({"amd.com/gpu": "2"})),
        Ok(Some(GpuRequest {
            count: 2,
            memory: Memory::Percent(100),
            cores: 100
        }))
    );
    let e = read(json!({"amd.com/gpu": "1", "amd.com/gpucores": "150"})).unwrap_err();
    assert_eq!(e.resource, "amd.com/gpucores");
}

#[test]
fn cores_take_compute_units_of_each_gpu() {
    // 11.5: floor(devcore × pct / 100), at least 1; free units checked;
    // no exclusive rule. GPU 0 holds 76 of 304: binpack stacks there.
    let limits = |mem: &str, cores: &str| json!({"amd.com/gpu": "1", "amd.com/gpumem": mem, "amd.com/gpucores": cores});
    assert_eq!(
        place(json!({}), limits("16384", "25"), "amd-1"),
        Ok(vec![(0, 16384, 76)])
    );
    // 76% is 231 units: GPU 0 has 228 free, so GPU 1.
    assert_eq!(
        place(json!({}), limits("1024", "76"), "amd-1"),
        Ok(vec![(1, 1024, 231)])
    );
    // 1% of the MI210's 104 units is 1.
    assert_eq!(
        place(json!({}), limits("1024", "1"), "amd-2"),
        Ok(vec![(0, 1024, 1)])
    );
    // Memory alone takes every unit (11.7): GPU 0 has units taken.
    match place(
        json!({}),
        json!({"amd.com/gpu": "2", "amd.com/gpumem": "1024"}),
        "amd-1",
    ) {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardInsufficientCore), 1, "{counts:?}")
        }
        other => panic!("{other:?}"),
    }
    // Type words, case-insensitive (11.3).
    match place(
        json!({"amd.com/use-gputype": "mi210"}),
        limits("1024", "10"),
        "amd-1",
    ) {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardTypeMismatch), 2, "{counts:?}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        place(
            json!({"amd.com/nouse-gputype": "MI300X"}),
            limits("1024", "10"),
            "amd-2"
        ),
        Ok(vec![(0, 1024, 10)])
    );
}

#[test]
fn the_amd_section_and_the_webhook() {
    // 11.1 and 11.4: HAMi's names; cores given with a count must be 1..=100.
    let c = Config::from_yaml("amd:\n  resourceCountName: example.org/amdgpu\n", "t").unwrap();
    assert_eq!(
        c.device_config(KindId::AMD).resource_count_name,
        "example.org/amdgpu"
    );
    let mutate = |limits: Value| {
        mutate_pod(
            &serde_json::to_value(pod(json!({}), limits)).unwrap(),
            &Config::default(),
            None,
        )
    };
    let Mutation::Patch(ops) = mutate(json!({"amd.com/gpu": "1", "amd.com/gpucores": "30"})) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        ops.contains("/spec/schedulerName") && !ops.contains("resources"),
        "{ops}"
    );
    match mutate(json!({"amd.com/gpu": "1", "amd.com/gpucores": "0"})) {
        Mutation::Deny(d) => assert!(format!("{d:?}").contains("allowed 1..=100"), "{d:?}"),
        other => panic!("{other:?}"),
    }
}
