//! Biren GPUs (../shared/hami-vendors.md section 12, cited by subsection
//! below): the JSON inventory, devices taken by count alone (shared as
//! many times as the registered count), the `biren` config section and the
//! webhook. Real Node and Pod fixtures (tests/fixtures/biren/cluster.yaml).
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
    support::vendor::fixture("biren")
}

fn pod(annotations: Value, limits: Value) -> Pod {
    support::vendor::one_container_pod("p", annotations, limits)
}

#[test]
fn gpus_are_read_from_the_json_register() {
    // 12.2: JSON, `count` the sharing; the list HAMi wrote counts one slot
    // of BR-1-0 and nothing else.
    let (view, report) = snapshot().to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let n = view.state().node("br-1").unwrap();
    assert!(n.gpus.iter().all(|g| g.kind == KindId::BIREN));
    assert_eq!(n.gpus[0].capacity.slots, 1);
    let used = n.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 0, 0));
    assert_eq!(view.state().node("br-2").unwrap().gpus[0].capacity.slots, 2);
}

#[test]
fn a_request_is_the_count_alone() {
    // 12.1: `Memreq` 0, `Coresreq` 0, whatever else the container gives.
    let config = Config::default();
    let r = pod_request(&pod(json!({}), json!({"birentech.com/gpu": "2"})), &config).unwrap();
    assert_eq!(r.device_kind, KindId::BIREN);
    assert_eq!(
        r.containers[0].gpu,
        Some(GpuRequest {
            count: 2,
            memory: Memory::Mib(0),
            cores: 0
        })
    );
    let r = pod_request(&pod(json!({}), json!({"birentech.com/gpu": "0"})), &config).unwrap();
    assert!(!r.has_gpus());
    let e = pod_request(&pod(json!({}), json!({"birentech.com/gpu": "x"})), &config).unwrap_err();
    assert_eq!(e.resource, "birentech.com/gpu");
}

#[test]
fn a_gpu_takes_as_many_pods_as_its_count() {
    // 12.5: health, UUID, `Count <= Used`, mutex, accept.
    let (view, _) = snapshot().to_view();
    let place = |annotations: Value, limits: Value, node: &str| {
        let plan = pod_plan(&pod(annotations, limits), &Config::default()).unwrap();
        view.state().assign(&plan, node).map(|a| a.gpu_uuids())
    };
    // br-1's BR-1-0 is taken (count 1): four GPUs leave three.
    match place(json!({}), json!({"birentech.com/gpu": "4"}), "br-1") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardTimeSlicingExhausted), 1)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        place(json!({}), json!({"birentech.com/gpu": "3"}), "br-1").map(|u| u.len()),
        Ok(3)
    );
    match place(
        json!({"birentech.com/use-gpuuuid": "BR-1-0"}),
        json!({"birentech.com/gpu": "1"}),
        "br-1",
    ) {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardUuidMismatch), 3);
            assert_eq!(counts.get(Reason::CardTimeSlicingExhausted), 1);
        }
        other => panic!("{other:?}"),
    }
    // br-2's GPUs (count 2) take a pod each under spread, two under binpack.
    assert_eq!(
        place(
            json!({"hami.io/gpu-scheduler-policy": "binpack"}),
            json!({"birentech.com/gpu": "1"}),
            "br-2"
        ),
        Ok(vec!["BR-2-0".to_string()])
    );
    // mutex: a used GPU is refused.
    let mut state = view.into_state();
    let plan = pod_plan(
        &pod(json!({}), json!({"birentech.com/gpu": "1"})),
        &Config::default(),
    )
    .unwrap();
    let a = state.assign(&plan, "br-2").unwrap();
    state.apply("u-1", a).unwrap();
    let mutex = pod_plan(
        &pod(
            json!({"hami.io/gpu-scheduler-policy": "mutex"}),
            json!({"birentech.com/gpu": "2"}),
        ),
        &Config::default(),
    )
    .unwrap();
    match state.assign(&mutex, "br-2") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::ExclusiveDeviceAllocateConflict), 1)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_biren_section_and_the_webhook() {
    // 12.1 and 12.4: `resourceCountName`; the webhook routes the pod and
    // writes nothing else.
    let c = Config::from_yaml("biren:\n  resourceCountName: example.org/brgpu\n", "t").unwrap();
    assert_eq!(c.biren.resource_count_name, "example.org/brgpu");
    let Mutation::Patch(ops) = mutate_pod(
        &serde_json::to_value(pod(json!({}), json!({"birentech.com/gpu": "1"}))).unwrap(),
        &Config::default(),
        None,
    ) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        ops.contains("/spec/schedulerName") && !ops.contains("resources"),
        "{ops}"
    );
}
