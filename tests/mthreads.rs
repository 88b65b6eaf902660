//! Moore Threads GPUs (../shared/hami-vendors.md section 7, cited by
//! subsection below): GPUs read from node capacity, a container's memory
//! and cores split over its GPUs, every container on the first one's
//! GPUs, the webhook's rewrite and size check, the `mthreads` config
//! section. Real Node and Pod fixtures (tests/fixtures/mthreads/cluster.yaml).
//! What bind writes is in tests/bind_api.rs.

mod support {
    pub mod vendor;
}

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
    support::vendor::fixture("mthreads")
}

fn limits(count: &str, units: Option<&str>, cores: Option<&str>) -> Value {
    let mut l = json!({"mthreads.com/vgpu": count});
    if let Some(u) = units {
        l["mthreads.com/sgpu-memory"] = json!(u);
    }
    if let Some(c) = cores {
        l["mthreads.com/sgpu-core"] = json!(c);
    }
    l
}

fn pod(containers: &[Value]) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, l)| json!({"name": format!("c{i}"), "image": "musa", "resources": {"limits": l}}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml",
                     "annotations": {"hami.io/gpu-scheduler-policy": "binpack"}},
        "spec": {"containers": containers}
    }))
    .unwrap()
}

/// Per container, the GPU indexes it takes on mt-1.
fn place(containers: &[Value]) -> Result<Vec<Vec<u32>>, Rejection> {
    let (view, _) = snapshot().to_view();
    let plan = pod_plan(&pod(containers), &Config::default()).unwrap();
    let a = view.state().assign(&plan, "mt-1")?;
    let n = view.state().node("mt-1").unwrap();
    Ok(a.containers
        .iter()
        .map(|c| {
            c.iter()
                .map(|g| support::vendor::index_of(n, &g.uuid))
                .collect()
        })
        .collect())
}

#[test]
fn gpus_are_read_from_node_capacity() {
    // 7.2: one GPU per 16 cores, units × 512 × 16 / cores MiB, 100 slots;
    // the list HAMi wrote counts on GPU 0.
    let (view, report) = snapshot().to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let n = view.state().node("mt-1").unwrap();
    assert_eq!(n.gpus.len(), 2);
    assert_eq!(n.gpus[1].uuid, "mt-1-mthreads-1");
    assert!(n.gpus.iter().all(|g| g.kind == KindId::MTHREADS));
    let cap = n.gpus[0].capacity;
    assert_eq!((cap.slots, cap.mem_mib, cap.cores), (100, 49152, 16));
    let used = n.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 4096, 4));
}

#[test]
fn memory_and_cores_are_split_over_the_gpus() {
    // 7.1: memory units × 512 and cores, each divided by the count.
    let config = Config::default();
    let read = |l| pod_request(&pod(&[l]), &config).map(|r| r.containers[0].gpu);
    assert_eq!(
        read(limits("2", Some("192"), Some("32"))),
        Ok(Some(GpuRequest {
            count: 2,
            memory: Memory::Mib(49152),
            cores: 16
        }))
    );
    assert_eq!(
        read(limits("1", Some("8"), Some("4"))),
        Ok(Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(4096),
            cores: 4
        }))
    );
    let e = read(limits("1", Some("x"), None)).unwrap_err();
    assert_eq!(e.resource, "mthreads.com/sgpu-memory");
}

#[test]
fn every_container_takes_the_first_ones_gpus() {
    // 7.5: Template T, then customFilterRule: a later container only on
    // the GPUs of the ones before it. Binpack puts the first slice on GPU
    // 0 (in use), and the second follows it there.
    assert_eq!(
        place(&[
            limits("1", Some("8"), Some("4")),
            limits("1", Some("8"), Some("4"))
        ]),
        Ok(vec![vec![0], vec![0]])
    );
    // The second does not fit beside the first on GPU 0 (12 cores are
    // taken of 16): refused there, and not sent to GPU 1.
    match place(&[
        limits("1", Some("8"), Some("8")),
        limits("1", Some("8"), Some("8")),
    ]) {
        Err(Rejection::Devices {
            container, counts, ..
        }) => {
            assert_eq!(container, "c1");
            assert_eq!(
                counts.get(Reason::CardNotFoundCustomFilterRule),
                1,
                "{counts:?}"
            );
            assert_eq!(counts.get(Reason::CardInsufficientCore), 1, "{counts:?}");
        }
        other => panic!("{other:?}"),
    }
    // explain says it in words.
    let mut snap = snapshot();
    let mut two = pod(&[
        limits("1", Some("8"), Some("8")),
        limits("1", Some("8"), Some("8")),
    ]);
    two.metadata.name = Some("two".into());
    snap.pods.push(two);
    let e = gpugate::explain::explain(
        &snap,
        "ml",
        "two",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    let text = format!("{e:?}");
    assert!(
        text.contains("CardNotFoundCustomFilterRule")
            && text.contains("are not the GPUs an earlier container of the pod took"),
        "{text}"
    );
    // Two whole GPUs: GPU 0 is in use.
    match place(&[limits("2", Some("192"), Some("32"))]) {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardInsufficientMemory), 1, "{counts:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_webhook_makes_several_gpus_whole_and_checks_the_size() {
    // 7.4.
    let mutate = |l: Value| {
        mutate_pod(
            &serde_json::to_value(pod(&[l])).unwrap(),
            &Config::default(),
            None,
        )
    };
    let Mutation::Patch(ops) = mutate(limits("2", None, None)) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    for want in [
        r#""path":"/spec/containers/0/resources/limits/mthreads.com~1sgpu-core","value":"32""#,
        r#""path":"/spec/containers/0/resources/limits/mthreads.com~1sgpu-memory","value":"192""#,
        r#""path":"/metadata/annotations/mthreads.com~1request-gpu-num","value":"2""#,
    ] {
        assert!(ops.contains(want), "{want} in {ops}");
    }
    // A request the container gives is rewritten with its limit (the API
    // server wants them equal).
    let mut both = serde_json::to_value(pod(&[limits("2", Some("8"), None)])).unwrap();
    both["spec"]["containers"][0]["resources"]["requests"] =
        json!({"mthreads.com/vgpu": "2", "mthreads.com/sgpu-memory": "8"});
    let Mutation::Patch(ops) = mutate_pod(&both, &Config::default(), None) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        ops.contains(r#""path":"/spec/containers/0/resources/requests/mthreads.com~1sgpu-memory","value":"192""#)
            && ops.contains(r#""path":"/spec/containers/0/resources/limits/mthreads.com~1sgpu-memory","value":"192""#),
        "{ops}"
    );
    let Mutation::Patch(ops) = mutate(limits("1", None, None)) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        ops.contains(r#"sgpu-core","value":"16""#) && ops.contains(r#"sgpu-memory","value":"96""#),
        "{ops}"
    );
    match mutate(limits("1", Some("5"), None)) {
        Mutation::Deny(d) => assert!(
            format!("{d:?}").contains("valid values are [2, 4, 8, 16, 32, 64, 96]"),
            "{d:?}"
        ),
        other => panic!("{other:?}"),
    }
    let Mutation::Patch(ops) = mutate(limits("1", Some("8"), Some("4"))) else {
        panic!("not a patch");
    };
    assert!(!serde_json::to_string(&ops).unwrap().contains("resources"));
}

#[test]
fn the_mthreads_section_keeps_the_capacity_names() {
    let c = Config::from_yaml("mthreads:\n  resourceCountName: example.org/vgpu\n", "t").unwrap();
    assert_eq!(c.mthreads.resource_count_name, "example.org/vgpu");
    assert_eq!(c.mthreads.memory_factor, 512);
    let e = Config::from_yaml("mthreads:\n  resourceCoreName: example.org/core\n", "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("node capacity"), "{e}");
}
