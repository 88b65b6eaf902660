//! Cambricon MLUs (../shared/hami-vendors.md section 4, cited by
//! subsection below): MLUs read from node capacity, requests in 256 MiB
//! units with exclusive cores by default, the shared slice-fit loop, the
//! `cambricon` config section and the webhook. Real Node and Pod fixtures
//! (tests/fixtures/cambricon/cluster.yaml). What bind writes, and
//! Cambricon's own node lock, are in tests/bind_api.rs.

use std::path::Path;

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::cluster::Snapshot;
use gpugate::cluster::convert::{pod_plan, pod_request};
use gpugate::config::Config;
use gpugate::devices::KindId;
use gpugate::engine::request::{GpuRequest, Memory};
use gpugate::engine::{Reason, Rejection};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn snapshot() -> Snapshot {
    Snapshot::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cambricon/cluster.yaml"),
    )
    .unwrap()
}

fn pod(name: &str, annotations: Value, limits: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "cambricon",
                                 "resources": {"limits": limits}}]}
    }))
    .unwrap()
}

fn mlus(count: &str, units: Option<&str>, cores: Option<&str>) -> Value {
    let mut limits = json!({"cambricon.com/vmlu": count});
    if let Some(m) = units {
        limits["cambricon.com/mlu.smlu.vmemory"] = json!(m);
    }
    if let Some(c) = cores {
        limits["cambricon.com/mlu.smlu.vcore"] = json!(c);
    }
    limits
}

/// The MLU indexes the pod gets on `node`, or the rejection.
fn place(annotations: Value, limits: Value, node: &str) -> Result<Vec<u32>, Rejection> {
    let (view, _) = snapshot().to_view();
    let mut annotations = annotations;
    annotations["hami.io/gpu-scheduler-policy"] = json!("binpack");
    let plan = pod_plan(&pod("p", annotations, limits), &Config::default()).unwrap();
    let a = view.state().assign(&plan, node)?;
    let n = view.state().node(node).unwrap();
    Ok(a.gpu_uuids()
        .iter()
        .map(|u| n.gpus.iter().find(|g| &g.uuid == u).unwrap().index)
        .collect())
}

#[test]
fn mlus_are_read_from_node_capacity() {
    // 4.2: one MLU per 100 vcores, `<node>-cambricon-mlu-<i>`, 100 slots
    // and cores, vmemory × 256 × 100 / vcores MiB each; the list HAMi wrote
    // counts on MLU 0.
    let (view, report) = snapshot().to_view();
    let n = view.state().node("mlu-1").unwrap();
    let ids: Vec<&str> = n.gpus.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(
        ids,
        [
            "mlu-1-cambricon-mlu-0",
            "mlu-1-cambricon-mlu-1",
            "mlu-1-cambricon-mlu-2",
            "mlu-1-cambricon-mlu-3"
        ]
    );
    assert!(n.gpus.iter().all(|g| g.kind == KindId::CAMBRICON));
    let cap = n.gpus[0].capacity;
    assert_eq!((cap.slots, cap.mem_mib, cap.cores), (100, 16384, 100));
    let used = n.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 4096, 30));
    assert_eq!(
        view.state().node("mlu-2").unwrap().gpus[0].capacity.mem_mib,
        12288
    );
    // A capacity that is not a whole number registers nothing, and says so.
    assert!(view.state().node("mlu-bad").unwrap().gpus.is_empty());
    assert_eq!(report.unregistered_nodes.len(), 1, "{report:?}");
    assert!(
        report.unregistered_nodes[0].contains("cambricon.com/mlu.smlu.vcore"),
        "{report:?}"
    );
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
}

#[test]
fn requests_are_in_256_mib_units_with_exclusive_cores_by_default() {
    // 4.1: vmemory × 256 MiB; cores 100 when not given; no memory is the
    // whole MLU's.
    let config = Config::default();
    let read = |limits: Value| {
        pod_request(&pod("p", json!({}), limits), &config)
            .map(|r| (r.device_kind, r.containers[0].gpu.unwrap()))
    };
    let x = |count, memory, cores| {
        Ok((
            KindId::CAMBRICON,
            GpuRequest {
                count,
                memory,
                cores,
            },
        ))
    };
    assert_eq!(
        read(mlus("1", Some("16"), Some("30"))),
        x(1, Memory::Mib(4096), 30)
    );
    assert_eq!(
        read(mlus("2", Some("8"), None)),
        x(2, Memory::Mib(2048), 100)
    );
    assert_eq!(read(mlus("1", None, None)), x(1, Memory::Percent(100), 100));
    // A memory that is not a whole number of units is refused, named.
    let e = read(mlus("1", Some("1.5"), None)).unwrap_err();
    assert_eq!(e.resource, "cambricon.com/mlu.smlu.vmemory");
    // Whole MLUs (the plugin's non-shared resource) are not placed.
    let e = read(json!({"cambricon.com/mlu": "1", "cambricon.com/vmlu": "1"})).unwrap_err();
    assert!(e.problem.contains("Cambricon MLU"), "{e}");
}

#[test]
fn slices_fit_by_the_shared_loop() {
    // 1.11 and 4.5 on mlu-1, whose MLU 0 holds 4,096 MiB and 30 cores.
    // Binpack fills MLU 0 first.
    assert_eq!(
        place(json!({}), mlus("1", Some("16"), Some("30")), "mlu-1"),
        Ok(vec![0])
    );
    // Cores 100 (the default) on a used MLU: its 70 free cores are short
    // (step 10, before step 11's exclusive conflict).
    let one = place(json!({}), mlus("1", Some("16"), None), "mlu-1").unwrap();
    assert_ne!(one, [0]);
    match place(
        json!({"cambricon.com/use-gpuuuid": "mlu-1-cambricon-mlu-0"}),
        mlus("1", Some("16"), None),
        "mlu-1",
    ) {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardInsufficientCore), 1, "{counts:?}");
            assert_eq!(counts.get(Reason::CardUuidMismatch), 3);
        }
        other => panic!("{other:?}"),
    }
    // Above an MLU's memory (step 9): 65 units = 16,640 MiB.
    match place(json!({}), mlus("1", Some("65"), Some("10")), "mlu-1") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardInsufficientMemory), 4)
        }
        other => panic!("{other:?}"),
    }
    // Four MLUs on mlu-1, not on mlu-2 (two MLUs).
    assert_eq!(
        place(json!({}), mlus("4", Some("4"), Some("10")), "mlu-1").map(|v| v.len()),
        Ok(4)
    );
    assert!(matches!(
        place(json!({}), mlus("4", Some("4"), Some("10")), "mlu-2"),
        Err(Rejection::NodeInsufficientDevice { .. })
    ));
}

#[test]
fn the_cambricon_section_reads_hamis_names_and_keeps_the_capacity_names() {
    // 4.1: resourceCountName, resourceMemoryName, resourceCoreName.
    let c = Config::from_yaml("cambricon:\n  resourceCountName: example.org/vmlu\n", "t").unwrap();
    assert_eq!(c.cambricon.resource_count_name, "example.org/vmlu");
    assert_eq!(c.cambricon.memory_factor, 256);
    let r = pod_request(&pod("p", json!({}), json!({"example.org/vmlu": "1"})), &c).unwrap();
    assert_eq!(r.device_kind, KindId::CAMBRICON);
    // The memory and core names are what the node's capacity is read
    // from: renamed, no MLU would ever be found, so the file is refused.
    let e =
        Config::from_yaml("cambricon:\n  resourceCoreName: example.org/vcore\n", "t").unwrap_err();
    assert!(e.to_string().contains("node capacity"), "{e}");
}

#[test]
fn the_webhook_routes_mlu_pods_and_leaves_their_resources() {
    // 4.4: found when limits name the count; HAMi's webhook writes nothing
    // else for it.
    let config = Config::default();
    let Mutation::Patch(ops) = mutate_pod(
        &serde_json::to_value(pod("t", json!({}), mlus("1", Some("16"), None))).unwrap(),
        &config,
        None,
    ) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(ops.contains("/spec/schedulerName"), "{ops}");
    assert!(!ops.contains("resources"), "{ops}");
}
