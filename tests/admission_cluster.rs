//! The webhooks with a cluster view, over TLS: the namespace GPU quota
//! (ResourceQuota `limits.nvidia.com/gpumem`) and namespace policies
//! selected by labels, on tests/fixtures/cluster/extender.yaml (namespace
//! `capped`, labelled team=research, uses 6000 of 8000 MiB).

mod support {
    pub mod https;
}

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use gpugate::cluster::{SharedCluster, Snapshot};
use gpugate::config::Config;
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use serde_json::{Value, json};
use support::https::{Server, post, start};

async fn server(config: Config, with_cluster: bool) -> Server {
    let cluster = with_cluster.then(|| {
        let snapshot = Snapshot::load(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cluster/extender.yaml"),
        )
        .unwrap();
        Arc::new(SharedCluster::new(snapshot.to_view().0, true))
    });
    start(
        AppState::with_cluster(config, Metrics::new(None), cluster),
        Limits::default(),
    )
    .await
}

fn review(ns: &str, limits: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "3f6c2d1e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": ns,
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": ns},
                "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]}
            }
        }
    })
}

async fn answer(s: &Server, path: &str, body: Value) -> Value {
    let (status, bytes) = post(s, path, body.to_string().as_bytes()).await;
    assert_eq!(status, 200);
    serde_json::from_slice::<Value>(&bytes).unwrap()["response"].clone()
}

#[tokio::test]
async fn validate_denies_a_pod_over_its_namespace_gpu_quota() {
    let s = server(Config::default(), true).await;
    let over = answer(
        &s,
        "/validate",
        review(
            "capped",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}),
        ),
    )
    .await;
    assert_eq!(over["allowed"], false);
    assert_eq!(
        over["status"]["message"],
        "namespace capped is over its GPU quota (ResourceQuota limits.nvidia.com/gpumem): GPU memory 3000 MiB requested, 6000 MiB of 8000 MiB already used (ResourceQuota gpu)"
    );
    // 2 GPUs of 1000 MiB each: 2000 MiB, which fits.
    let fits = answer(
        &s,
        "/validate",
        review(
            "capped",
            json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}),
        ),
    )
    .await;
    assert_eq!(fits["allowed"], true, "{fits}");
    // Other namespaces have no quota.
    let other = answer(
        &s,
        "/validate",
        review(
            "ml",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}),
        ),
    )
    .await;
    assert_eq!(other["allowed"], true);
}

#[tokio::test]
async fn without_a_cluster_the_quota_is_not_known_and_not_checked() {
    let s = server(Config::default(), false).await;
    let out = answer(
        &s,
        "/validate",
        review(
            "capped",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}),
        ),
    )
    .await;
    assert_eq!(out["allowed"], true);
}

#[tokio::test]
async fn policies_select_namespaces_by_their_labels() {
    let config = Config::from_yaml(
        "namespacePolicies:\n  - name: research\n    namespaceSelector:\n      matchLabels: {team: research}\n    defaults:\n      gpucores: 30\n      gpuSchedulerPolicy: binpack\n",
        "test.yaml",
    )
    .unwrap();
    let s = server(config, true).await;
    let patch_of = |out: &Value| -> Value {
        let b64 = out["patch"].as_str().unwrap_or("");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    let labelled = answer(
        &s,
        "/mutate",
        review(
            "capped",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        ),
    )
    .await;
    let ops = patch_of(&labelled);
    assert!(
        ops.as_array().unwrap().contains(&json!({
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
            "value": "30"
        })),
        "{ops}"
    );
    assert!(
        ops.as_array().unwrap().contains(&json!({
            "op": "add",
            "path": "/metadata/annotations",
            "value": {"hami.io/gpu-scheduler-policy": "binpack"}
        })),
        "{ops}"
    );
    let unlabelled = answer(
        &s,
        "/mutate",
        review(
            "ml",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        ),
    )
    .await;
    let ops = patch_of(&unlabelled).to_string();
    assert!(
        !ops.contains("gpucores") && !ops.contains("gpu-scheduler-policy"),
        "{ops}"
    );
}
