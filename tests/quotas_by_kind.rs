//! Namespace quotas kind by kind, as HAMi's quota cache keys them by
//! resource name (hami-compat.md 2.5, hami-vendors.md 1.10): a Hygon DCU's
//! memory counts against `limits.hygon.com/dcumem` only, never against
//! `limits.nvidia.com/gpumem`, and a pod asking for an NVIDIA GPU and a DCU
//! must fit both. On tests/fixtures/hygon/cluster.yaml (ml/hami-placed holds
//! 8,000 MiB of DCU-1-0) with a ResourceQuota in `ml`; the webhook and
//! `/filter` over real TLS, the gauges as `/metrics` encodes them.

mod support {
    pub mod https;
}

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use gpugate::cluster::{SharedCluster, Snapshot};
use gpugate::config::Config;
use gpugate::devices::KindId;
use gpugate::engine::QuotaAmount;
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use serde_json::{Value, json};
use support::https::{Server, post, post_json, start};

/// `ml` may use 10,000 MiB of NVIDIA memory and 12,000 MiB of DCU memory.
const QUOTA: &str = "---
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpus, namespace: ml}
spec:
  hard:
    limits.nvidia.com/gpumem: \"10000\"
    limits.hygon.com/dcumem: \"12000\"
";

fn cluster() -> Arc<SharedCluster> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hygon/cluster.yaml");
    let text = std::fs::read_to_string(path).unwrap() + QUOTA;
    let (view, report) = Snapshot::from_yaml(&text, "test").unwrap().to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    Arc::new(SharedCluster::new(view, true))
}

async fn server(cluster: Arc<SharedCluster>) -> Server {
    let state = AppState::with_cluster(Config::default(), Metrics::new(None), Some(cluster));
    start(state, Limits::default()).await
}

/// A pod of `ml` with one container per entry of `limits`.
fn pod(limits: &[Value]) -> Value {
    let containers: Vec<Value> = limits
        .iter()
        .enumerate()
        .map(|(i, l)| json!({"name": format!("c{i}"), "image": "busybox", "resources": {"limits": l}}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "uid": "9b1e0000-0000-4000-8000-00000000a001"},
        "spec": {"schedulerName": "hami-scheduler", "containers": containers}
    })
}

/// The validating webhook's answer for creating `pod`.
async fn validate(s: &Server, pod: &Value) -> Value {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "3f6c2d1e-0000-4000-8000-0000000000a1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "ml",
            "userInfo": {"username": "alice"},
            "object": pod,
        }
    });
    let (status, bytes) = post(s, "/validate", review.to_string().as_bytes()).await;
    assert_eq!(status, 200);
    serde_json::from_slice::<Value>(&bytes).unwrap()["response"].clone()
}

fn gpu(mib: u32) -> Value {
    json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": mib.to_string()})
}

fn dcu(mib: u32) -> Value {
    json!({"hygon.com/dcunum": "1", "hygon.com/dcumem": mib.to_string()})
}

#[test]
fn held_devices_count_under_their_own_kind() {
    let cluster = cluster();
    let view = cluster.read();
    let used = view.quotas().used("ml");
    assert_eq!(
        used.of(KindId::HYGON),
        QuotaAmount {
            mem_mib: 8000,
            cores: 50
        }
    );
    assert_eq!(used.of(KindId::NVIDIA), QuotaAmount::default());
}

#[tokio::test]
async fn the_webhook_checks_each_kind_against_its_own_limits() {
    let s = server(cluster()).await;
    // The DCU pod's 8,000 MiB are not NVIDIA memory: 9,000 MiB of GPU
    // memory fit the 10,000 MiB limit.
    let answer = validate(&s, &pod(&[gpu(9000)])).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    // 8,000 + 5,000 MiB of DCU memory exceed 12,000.
    let answer = validate(&s, &pod(&[dcu(5000)])).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(
        answer["status"]["message"],
        "namespace ml is over its DCU quota (ResourceQuota limits.hygon.com/dcumem): \
         DCU memory 5000 MiB requested, 8000 MiB of 12000 MiB already used (ResourceQuota gpus)"
    );
    // A pod asking for both kinds fits only when both fit: its GPU fits,
    // its DCU does not.
    let answer = validate(&s, &pod(&[gpu(4000), dcu(5000)])).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    let message = answer["status"]["message"].as_str().unwrap();
    assert!(message.contains("limits.hygon.com/dcumem"), "{message}");
    let answer = validate(&s, &pod(&[gpu(4000), dcu(3000)])).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    // Its GPU over the NVIDIA limit is refused for that, with its DCU fitting.
    let answer = validate(&s, &pod(&[gpu(11000), dcu(3000)])).await;
    let message = answer["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "over its GPU quota (ResourceQuota limits.nvidia.com/gpumem): GPU memory 11000 MiB"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn filter_refuses_a_two_kind_pod_whose_second_kind_is_over_quota() {
    let s = server(cluster()).await;
    let names = json!(["dcu-1", "mixed", "gpu-only"]);
    let over = post_json(
        &s,
        "/filter",
        json!({"Pod": pod(&[gpu(4000), dcu(5000)]), "NodeNames": names}),
    )
    .await;
    assert_eq!(over["NodeNames"], json!([]), "{over}");
    let reason = over["FailedNodes"]["mixed"].as_str().unwrap();
    assert!(
        reason
            .contains("ResourceQuotaNotFit (DCU memory 5000 MiB requested, 8000 MiB of 12000 MiB"),
        "{reason}"
    );
    let fits = post_json(
        &s,
        "/filter",
        json!({"Pod": pod(&[gpu(9000), dcu(3000)]), "NodeNames": names}),
    )
    .await;
    assert_eq!(fits["NodeNames"], json!(["mixed"]), "{fits}");
}

#[test]
fn hamis_quota_gauges_carry_each_kinds_resource_names() {
    let config = Arc::new(ArcSwap::from_pointee(Config::default()));
    let metrics = Metrics::new(None).observing(cluster(), config);
    let text = metrics.encode();
    let value = |series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(str::to_string)
    };
    let used = |name: &str, limit: &str| {
        value(&format!(
            r#"hami_resource_quota_used{{zone="vGPU",namespace="ml",quota_name="{name}",limit="{limit}"}}"#
        ))
    };
    assert_eq!(used("hygon.com/dcumem", "12000").as_deref(), Some("8000"));
    assert_eq!(used("hygon.com/dcucores", "0").as_deref(), Some("50"));
    assert_eq!(used("nvidia.com/gpumem", "10000").as_deref(), Some("0"));
    // NVIDIA's cores have no limit and no use: no series.
    assert!(
        !text.contains(r#"quota_name="nvidia.com/gpucores""#),
        "{text}"
    );
    assert_eq!(
        value(
            r#"hami_resource_quota_limit{zone="vGPU",namespace="ml",quota_name="hygon.com/dcumem"}"#
        )
        .as_deref(),
        Some("12000")
    );
}
