//! Native sidecars (init containers with `restartPolicy: Always`) that use
//! GPUs: they run beside the app containers for the pod's life, so their
//! slices add to the app containers' everywhere a pod's need is counted
//! (filter, bind, the ledger rebuilt from annotations, namespace policy
//! limits, quota). Real Pod fixtures, extender calls over real TLS.

mod support {
    pub mod https;
}

use std::path::Path;
use std::sync::Arc;

use gpugate::admission::validate::{Validation, validate_pod};
use gpugate::admission::{Denial, DenyReason};
use gpugate::cluster::{SharedCluster, Snapshot};
use gpugate::config::Config;
use gpugate::devices::KindId;
use gpugate::engine::{ContainerKind, KindAmounts, QuotaAmount};
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use serde_json::{Value, json};
use support::https::{Server, post_json, start};

const POD_UID: &str = "6a0c1d2e-0000-4000-8000-00000000c001";
const RUNNING_UID: &str = "6a0c1d2e-0000-4000-8000-00000000c000";

fn manifest(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn sidecar_pod() -> Value {
    serde_yaml_ng::from_str(
        &std::fs::read_to_string(manifest("tests/fixtures/pods/gpu-sidecar.yaml")).unwrap(),
    )
    .unwrap()
}

fn snapshot() -> Snapshot {
    Snapshot::load(&manifest("tests/fixtures/cluster/small-gpus.yaml")).unwrap()
}

async fn server() -> (Server, Arc<SharedCluster>) {
    let (view, report) = snapshot().to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let cluster = Arc::new(SharedCluster::new(view, true));
    let state =
        AppState::with_cluster(Config::default(), Metrics::new(None), Some(cluster.clone()));
    (start(state, Limits::default()).await, cluster)
}

fn bind_args(node: &str) -> Value {
    json!({"PodName": "serve-with-proxy", "PodNamespace": "ml", "PodUID": POD_UID, "Node": node})
}

#[tokio::test]
async fn a_sidecar_and_its_app_container_never_share_a_slot_twice() {
    let (s, cluster) = server().await;
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": sidecar_pod(), "NodeNames": ["one-gpu", "two-gpus", "free-pair"]}),
    )
    .await;
    // One 16,000 MiB GPU cannot hold 10,000 + 10,000 MiB running together.
    // On two-gpus, GPU-B-0 has 4,000 MiB left (the running pod's sidecar
    // and app container hold 6,000 each), GPU-B-1 16,000: room for one
    // of the two containers only.
    assert_eq!(out["NodeNames"], json!(["free-pair"]), "{out}");
    // The reasons, answered when no node is feasible.
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": sidecar_pod(), "NodeNames": ["one-gpu", "two-gpus"]}),
    )
    .await;
    let failed = &out["FailedNodes"];
    for node in ["one-gpu", "two-gpus"] {
        let reason = failed[node].as_str().unwrap_or_default();
        assert!(
            reason.contains("CardInsufficientMemory"),
            "{node}: {reason}"
        );
    }

    // kube-scheduler's bind to the node that cannot hold it fails ...
    let out = post_json(&s, "/bind", bind_args("one-gpu")).await;
    assert!(
        out["Error"]
            .as_str()
            .unwrap_or_default()
            .contains("CardInsufficientMemory"),
        "{out}"
    );
    assert!(cluster.read().held_allocation(POD_UID).is_none());
    // ... and to the one that can gives each container its own GPU.
    let out = post_json(&s, "/bind", bind_args("free-pair")).await;
    assert!(out.get("Error").is_none(), "{out}");
    let view = cluster.read();
    let a = view.held_allocation(POD_UID).unwrap();
    assert_eq!(a.kinds, [ContainerKind::Sidecar, ContainerKind::App]);
    let (sidecar, app) = (&a.containers[0], &a.containers[1]);
    assert_eq!((sidecar.len(), app.len()), (1, 1));
    assert_ne!(sidecar[0].uuid, app[0].uuid);
    // The ledger holds both slices: 20,000 MiB on the node.
    let node = view.state().node("free-pair").unwrap();
    let used: u64 = node.usage.iter().map(|u| u64::from(u.mem_mib)).sum();
    assert_eq!(used, 20_000);
    // HAMi's device list: one entry per container, sidecar first, which
    // is the order in which the kubelet asks the device plugin.
    let devices = gpugate::hami::pod_devices::encode_pod_devices(&a.to_pod_devices());
    assert_eq!(
        devices,
        format!(
            "{},NVIDIA,10000,0:;{},NVIDIA,10000,0:;",
            sidecar[0].uuid, app[0].uuid
        )
    );
}

#[test]
fn the_ledger_rebuilt_from_annotations_counts_a_sidecar_beside_its_app() {
    let (view, _) = snapshot().to_view();
    let a = view.held_allocation(RUNNING_UID).unwrap();
    assert_eq!(a.kinds, [ContainerKind::Sidecar, ContainerKind::App]);
    let node = view.state().node("two-gpus").unwrap();
    // Both containers run on GPU-B-0 at once: 12,000 MiB and two slots,
    // not the 6,000 of an init container's peak.
    assert_eq!((node.usage[0].mem_mib, node.usage[0].slots), (12_000, 2));
    assert_eq!(node.usage[1].mem_mib, 0);
    assert_eq!(
        KindAmounts::of_allocation(a).of(KindId::NVIDIA),
        QuotaAmount {
            mem_mib: 12_000,
            cores: 0
        }
    );
    assert_eq!(view.quotas().used("ml").of(KindId::NVIDIA).mem_mib, 12_000);
}

#[test]
fn namespace_policy_and_quota_count_sidecar_gpus() {
    // The case: a 2-GPU sidecar and a 2-GPU app container hold 4
    // GPUs at once, more than gpusPerPod: 2.
    let config = Config::from_yaml(
        "namespacePolicies:\n  - name: ml\n    namespaces: [ml]\n    limits: {gpusPerPod: 2}\n",
        "test",
    )
    .unwrap();
    let mut pod = sidecar_pod();
    for path in ["initContainers", "containers"] {
        pod["spec"][path][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("2");
    }
    match validate_pod(&pod, &config, Some("ml")) {
        Validation::Deny(Denial {
            reason: DenyReason::PolicyLimit,
            message,
        }) => assert!(
            message.contains("holds 4 GPUs at once; at most 2"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // Without restartPolicy: Always it is a plain init container: it ends
    // before the app container starts, and the pod holds 2.
    pod["spec"]["initContainers"][0]
        .as_object_mut()
        .unwrap()
        .remove("restartPolicy");
    assert!(
        matches!(
            validate_pod(&pod, &config, Some("ml")),
            Validation::Allow { .. }
        ),
        "plain init container"
    );
}
