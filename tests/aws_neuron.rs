//! AWS Neuron devices (../shared/hami-vendors.md section 10, cited by
//! subsection below): devices read from node capacity, requests by device
//! or by NeuronCore, a core as the free bit of a device's mask, windows of
//! consecutive idle devices (a ring on Inferentia, aligned elsewhere), the
//! `awsneuron` config section and the webhook. Real Node and Pod fixtures
//! (tests/fixtures/aws_neuron/cluster.yaml). What bind writes is in
//! tests/bind_api.rs.

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
    support::vendor::fixture("aws_neuron")
}

fn pod(name: &str, annotations: Value, limits: Value) -> Pod {
    support::vendor::one_container_pod(name, annotations, limits)
}

/// The (device index, core mask) of each device the pod gets on `node`
/// under `gpu_policy`, or the rejection.
fn place(limits: Value, node: &str, gpu_policy: &str) -> Result<Vec<(u32, u32)>, Rejection> {
    let (view, _) = snapshot().to_view();
    let p = pod(
        "p",
        json!({"hami.io/gpu-scheduler-policy": gpu_policy}),
        limits,
    );
    let plan = pod_plan(&p, &Config::default()).unwrap();
    let a = view.state().assign(&plan, node)?;
    let n = view.state().node(node).unwrap();
    Ok(a.containers
        .iter()
        .flatten()
        .map(|d| {
            let g = n.gpus.iter().find(|g| g.uuid == d.uuid).unwrap();
            (g.index, d.cores)
        })
        .collect())
}

#[test]
fn devices_are_read_from_node_capacity_two_cores_each() {
    // 10.2: `<node>-AWSNeuron-<i>`, a slot per core, the mask 3 as cores,
    // no memory; the lists HAMi wrote count (masks add up).
    let (view, report) = snapshot().to_view();
    let trn = view.state().node("trn-1").unwrap();
    assert_eq!(trn.gpus.len(), 16);
    assert_eq!(trn.gpus[15].uuid, "trn-1-AWSNeuron-15");
    assert!(trn.gpus.iter().all(|g| g.kind == KindId::AWS_NEURON));
    let cap = trn.gpus[0].capacity;
    assert_eq!((cap.slots, cap.cores, cap.mem_mib), (2, 3, 0));
    assert_eq!((trn.usage[0].slots, trn.usage[0].cores), (1, 1));
    assert!(trn.gpus.iter().all(|g| g.network().is_none()));
    let inf = view.state().node("inf-1").unwrap();
    // A ring: one network group.
    assert!(inf.gpus.iter().all(|g| g.network() == Some(0)));
    assert_eq!((inf.usage[1].slots, inf.usage[1].cores), (1, 3));
    // Four cores a device (inf1): nothing registered, and why.
    assert!(view.state().node("inf1-bad").unwrap().gpus.is_empty());
    assert_eq!(report.unregistered_nodes.len(), 1, "{report:?}");
    assert!(
        report.unregistered_nodes[0].contains("2 NeuronCores"),
        "{report:?}"
    );
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
}

#[test]
fn requests_are_devices_or_cores() {
    // 10.1: the count is whole devices; else cores: 1 is one core, a
    // multiple of two whole devices, anything else refused.
    let config = Config::default();
    let read = |limits: Value| {
        pod_request(&pod("p", json!({}), limits), &config)
            .map(|r| (r.device_kind, r.containers[0].gpu))
    };
    let x = |count, cores| {
        Ok((
            KindId::AWS_NEURON,
            Some(GpuRequest {
                count,
                memory: Memory::Mib(0),
                cores,
            }),
        ))
    };
    assert_eq!(read(json!({"aws.amazon.com/neuron": "2"})), x(2, 3));
    assert_eq!(read(json!({"aws.amazon.com/neuroncore": "1"})), x(1, 1));
    assert_eq!(read(json!({"aws.amazon.com/neuroncore": "2"})), x(1, 3));
    assert_eq!(read(json!({"aws.amazon.com/neuroncore": "8"})), x(4, 3));
    // The count wins when both are given (HAMi reads it first).
    assert_eq!(
        read(json!({"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "1"})),
        x(1, 3)
    );
    let e = read(json!({"aws.amazon.com/neuroncore": "3"})).unwrap_err();
    assert_eq!(e.resource, "aws.amazon.com/neuroncore");
    assert!(e.problem.contains("1 or a multiple of 2"), "{e}");
    let e =
        read(json!({"aws.amazon.com/neuron": "0", "aws.amazon.com/neuroncore": "1"})).unwrap_err();
    assert_eq!(e.resource, "aws.amazon.com/neuron");
}

#[test]
fn a_core_is_the_free_bit_of_its_device() {
    // 10.5: on a device holding core 0 (mask 1) the next core is bit 2.
    // Neuron devices have no memory, so HAMi's device score is 0 for all
    // of them (1.4): the policy does not order them, the lowest index
    // goes first (HAMi: its list's last).
    for policy in ["binpack", "spread"] {
        assert_eq!(
            place(json!({"aws.amazon.com/neuroncore": "1"}), "trn-1", policy),
            Ok(vec![(0, 2)]),
            "{policy}"
        );
    }
    // On a free device a core is bit 1 (inf-1's device 0).
    assert_eq!(
        place(json!({"aws.amazon.com/neuroncore": "1"}), "inf-1", "spread"),
        Ok(vec![(0, 1)])
    );
    // A whole device never shares device 0.
    let whole = place(json!({"aws.amazon.com/neuron": "1"}), "trn-1", "binpack").unwrap();
    assert_eq!(whole.len(), 1);
    assert_ne!(whole[0].0, 0);
    assert_eq!(whole[0].1, 3);
    // inf-1's device 1 is held whole: a core never goes there.
    match place(
        json!({"aws.amazon.com/neuroncore": "1"}),
        "inf-1",
        "binpack",
    ) {
        Ok(v) => assert_ne!(v[0].0, 1),
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn several_devices_take_a_window_of_idle_ones() {
    // 10.5 on trn-1 (not a ring; device 0 holds a core): 4 devices start
    // at a multiple of 4, so 4-7; 2 is no window size there.
    for policy in ["binpack", "spread"] {
        assert_eq!(
            place(json!({"aws.amazon.com/neuron": "4"}), "trn-1", policy),
            Ok(vec![(4, 3), (5, 3), (6, 3), (7, 3)]),
            "{policy}"
        );
        match place(json!({"aws.amazon.com/neuron": "2"}), "trn-1", policy) {
            Err(Rejection::Devices { counts, .. }) => {
                assert_eq!(counts.get(Reason::NumaNotFit), 1, "{counts:?}")
            }
            other => panic!("{other:?}"),
        }
        // Sixteen: device 0's free core is not a whole device.
        match place(json!({"aws.amazon.com/neuron": "16"}), "trn-1", policy) {
            Err(Rejection::Devices { counts, .. }) => {
                assert_eq!(counts.get(Reason::CardInsufficientCore), 1, "{counts:?}");
                assert_eq!(counts.get(Reason::AllocatedCardsInsufficientRequest), 15);
            }
            other => panic!("{other:?}"),
        }
        // inf-1 is a ring (device 1 held): a window starts anywhere.
        assert_eq!(
            place(json!({"aws.amazon.com/neuroncore": "4"}), "inf-1", policy),
            Ok(vec![(2, 3), (3, 3)]),
            "{policy}"
        );
        assert_eq!(
            place(json!({"aws.amazon.com/neuron": "3"}), "inf-1", policy).map(|v| v.len()),
            Ok(3)
        );
    }
}

#[test]
fn the_awsneuron_section_keeps_the_capacity_names() {
    // 10.1: both names are what the node's capacity is read from.
    let c = Config::from_yaml(
        "awsneuron:\n  resourceCountName: aws.amazon.com/neuron\n  resourceCoreName: aws.amazon.com/neuroncore\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.awsneuron.resource_core_name, "aws.amazon.com/neuroncore");
    let e = Config::from_yaml("awsneuron:\n  resourceCountName: example.org/neuron\n", "t")
        .unwrap_err();
    assert!(e.to_string().contains("node capacity"), "{e}");
}

#[test]
fn the_webhook_routes_neuron_pods_and_refuses_what_no_device_takes() {
    // 10.4: found when the count or the cores are valid; a core count that
    // is neither 1 nor a multiple of two is refused with the reason.
    let config = Config::default();
    let Mutation::Patch(ops) = mutate_pod(
        &serde_json::to_value(pod(
            "t",
            json!({}),
            json!({"aws.amazon.com/neuroncore": "1"}),
        ))
        .unwrap(),
        &config,
        None,
    ) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(ops.contains("/spec/schedulerName"), "{ops}");
    match mutate_pod(
        &serde_json::to_value(pod(
            "t",
            json!({}),
            json!({"aws.amazon.com/neuroncore": "3"}),
        ))
        .unwrap(),
        &config,
        None,
    ) {
        Mutation::Deny(d) => assert!(d.message.contains("1 or a multiple of 2"), "{d:?}"),
        other => panic!("{other:?}"),
    }
}
