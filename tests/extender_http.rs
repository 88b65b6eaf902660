//! The extender verbs over real TLS with kube-scheduler's wire JSON (Go
//! field names, as k8s.io/kube-scheduler/extender/v1 encodes them), in
//! standalone mode on tests/fixtures/cluster/extender.yaml.

mod support {
    pub mod https;
}

use std::path::Path;
use std::sync::Arc;

use gpugate::cluster::{SharedCluster, Snapshot};
use gpugate::config::Config;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use gpugate::server::serve_tls::Timeouts;
use serde_json::{Value, json};
use support::https::{Server, post, start};

const LOW: &str = "0b4f3f2e-0000-4000-8000-00000000a001";
const HIGH: &str = "0b4f3f2e-0000-4000-8000-00000000a002";

async fn server(config: Config) -> Server {
    let snapshot = Snapshot::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cluster/extender.yaml"),
    )
    .unwrap();
    let (view, _) = snapshot.to_view();
    let cluster = Arc::new(SharedCluster::new(view, true));
    let state = AppState::with_cluster(config, Metrics::new(None), Some(cluster));
    start(state, Timeouts::default()).await
}

/// A pending pod as kube-scheduler sends it (after gpugate's mutation).
fn pod(ns: &str, name: &str, uid: &str, limits: Value, priority: i64) -> Value {
    json!({
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {
            "schedulerName": "hami-scheduler",
            "priority": priority,
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]
        },
        "status": {"phase": "Pending"}
    })
}

fn whole_gpu(ns: &str, name: &str, uid: &str) -> Value {
    pod(
        ns,
        name,
        uid,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}),
        0,
    )
}

async fn call(s: &Server, verb: &str, body: Value) -> Value {
    let (status, bytes) = post(s, verb, body.to_string().as_bytes()).await;
    assert_eq!(status, 200, "{verb}: {}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn filter_answers_the_feasible_names_and_every_reason() {
    let s = server(Config::default()).await;
    let out = call(
        &s,
        "/filter",
        json!({"Pod": whole_gpu("ml", "p", "u-1"), "Nodes": null,
               "NodeNames": ["gpu-1", "gpu-2", "cpu-1", "gone-1"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!(["gpu-2"]));
    // Memory is checked before exclusivity, in HAMi's order.
    assert_eq!(out["FailedNodes"]["gpu-1"], "2/2 CardInsufficientMemory");
    assert_eq!(
        out["FailedAndUnresolvableNodes"]["cpu-1"],
        "node unregistered"
    );
    assert_eq!(
        out["FailedAndUnresolvableNodes"]["gone-1"],
        "node unregistered"
    );
    assert!(out.get("Error").is_none(), "{out}");
}

#[tokio::test]
async fn filter_with_full_nodes_answers_full_nodes() {
    let s = server(Config::default()).await;
    let node = |n: &str| json!({"metadata": {"name": n, "labels": {"zone": "a"}}});
    let out = call(
        &s,
        "/filter",
        json!({"pod": whole_gpu("ml", "p", "u-1"),
               "nodes": {"items": [node("gpu-1"), node("gpu-2")]}}),
    )
    .await;
    assert_eq!(out["Nodes"]["items"].as_array().unwrap().len(), 1);
    assert_eq!(out["Nodes"]["items"][0]["metadata"]["name"], "gpu-2");
    assert_eq!(out["Nodes"]["items"][0]["metadata"]["labels"]["zone"], "a");
    assert!(out.get("NodeNames").is_none());
}

#[tokio::test]
async fn filter_mode_best_keeps_only_the_best_node() {
    let mut config = Config::default();
    config.scheduler.filter_mode = gpugate::config::FilterMode::Best;
    let s = server(config).await;
    let small = pod(
        "ml",
        "p",
        "u-1",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        0,
    );
    // Binpack (the default) prefers gpu-2, the fuller node that can hold it.
    let out = call(
        &s,
        "/filter",
        json!({"Pod": small, "NodeNames": ["gpu-1", "gpu-2"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!(["gpu-2"]));
    assert_eq!(out["FailedNodes"].as_object().unwrap().len(), 1);
}

#[tokio::test]
async fn a_namespace_over_quota_is_told_so_on_every_node() {
    let s = server(Config::default()).await;
    // capped uses 6000 of 8000 MiB.
    let over = pod(
        "capped",
        "p",
        "u-1",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}),
        0,
    );
    let out = call(&s, "/filter", json!({"Pod": over, "NodeNames": ["gpu-2"]})).await;
    assert_eq!(out["NodeNames"], json!([]));
    let reason = out["FailedNodes"]["gpu-2"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "ResourceQuotaNotFit (GPU memory 3000 MiB requested, 6000 MiB of 8000 MiB"
        ),
        "{reason}"
    );
    let fits = pod(
        "capped",
        "q",
        "u-2",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}),
        0,
    );
    let out = call(&s, "/filter", json!({"Pod": fits, "NodeNames": ["gpu-2"]})).await;
    assert_eq!(out["NodeNames"], json!(["gpu-2"]));
}

#[tokio::test]
async fn prioritize_scores_every_candidate_in_order() {
    let s = server(Config::default()).await;
    let small = pod(
        "ml",
        "p",
        "u-1",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        0,
    );
    let out = call(
        &s,
        "/prioritize",
        json!({"Pod": small, "NodeNames": ["gpu-2", "cpu-1", "gpu-1"]}),
    )
    .await;
    let list = out.as_array().unwrap();
    let hosts: Vec<&str> = list.iter().map(|h| h["Host"].as_str().unwrap()).collect();
    assert_eq!(hosts, ["gpu-2", "cpu-1", "gpu-1"]);
    let score = |i: usize| list[i]["Score"].as_i64().unwrap();
    assert!((1..=10).contains(&score(0)), "{out}");
    assert_eq!(score(1), 0, "a node that cannot hold the pod scores 0");
    assert_eq!(score(2), 0);
}

#[tokio::test]
async fn bind_commits_to_the_ledger_and_the_next_filter_sees_it() {
    let s = server(Config::default()).await;
    for (name, uid) in [("a", "u-a"), ("b", "u-b")] {
        let out = call(
            &s,
            "/filter",
            json!({"Pod": whole_gpu("ml", name, uid), "NodeNames": ["gpu-2"]}),
        )
        .await;
        assert_eq!(out["NodeNames"], json!(["gpu-2"]), "{name}");
    }
    let bind = |name: &str, uid: &str| json!({"PodName": name, "PodNamespace": "ml", "PodUID": uid, "Node": "gpu-2"});
    let out = call(&s, "/bind", bind("a", "u-a")).await;
    assert_eq!(out, json!({}), "bind succeeded");
    // A retried bind of the same pod to the same node is not a second allocation.
    assert_eq!(call(&s, "/bind", bind("a", "u-a")).await, json!({}));
    // gpu-2 had one whole GPU free; b filtered before a was bound, so its
    // bind must fail against the ledger, not over-commit.
    let out = call(&s, "/bind", bind("b", "u-b")).await;
    let e = out["Error"].as_str().unwrap();
    assert!(e.starts_with("pod ml/b does not fit on node gpu-2:"), "{e}");
    let out = call(
        &s,
        "/filter",
        json!({"Pod": whole_gpu("ml", "b", "u-b"), "NodeNames": ["gpu-2"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!([]));
    let view = s.state.cluster.as_ref().unwrap().read();
    assert_eq!(view.held_allocation("u-a").unwrap().node, "gpu-2");
    assert!(view.held_allocation("u-b").is_none());
}

#[tokio::test]
async fn bind_refuses_what_it_cannot_check() {
    let s = server(Config::default()).await;
    let out = call(
        &s,
        "/bind",
        json!({"PodName": "x", "PodNamespace": "ml", "PodUID": "never-filtered", "Node": "gpu-2"}),
    )
    .await;
    assert!(
        out["Error"]
            .as_str()
            .unwrap()
            .contains("not seen in a filter call"),
        "{out}"
    );
    call(
        &s,
        "/filter",
        json!({"Pod": whole_gpu("ml", "a", "u-a"), "NodeNames": ["gpu-2"]}),
    )
    .await;
    let out = call(
        &s,
        "/bind",
        json!({"PodName": "other", "PodNamespace": "ml", "PodUID": "u-a", "Node": "gpu-2"}),
    )
    .await;
    assert!(
        out["Error"]
            .as_str()
            .unwrap()
            .contains("belongs to pod ml/a"),
        "{out}"
    );
    let out = call(
        &s,
        "/bind",
        json!({"PodName": "a", "PodNamespace": "ml", "PodUID": "u-a"}),
    )
    .await;
    assert_eq!(out["Error"], "ExtenderBindingArgs: Node is missing");
}

#[tokio::test]
async fn preempt_keeps_the_fewest_lowest_priority_gpu_victims() {
    let s = server(Config::default()).await;
    let args = json!({
        "Pod": pod("ml", "urgent", "u-1", json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}), 2000),
        "NodeNameToVictims": null,
        "NodeNameToMetaVictims": {
            // Either victim frees a whole GPU: the lower-priority one is kept;
            // a victim without GPUs (kube-scheduler's own choice) stays.
            "gpu-1": {"Pods": [{"UID": HIGH}, {"UID": LOW}, {"UID": "cpu-only-pod"}], "NumPDBViolations": 0},
            // Nothing on cpu-1 can make room for a GPU: the node is dropped.
            "cpu-1": {"Pods": [{"UID": "cpu-only-pod"}], "NumPDBViolations": 0}
        }
    });
    let out = call(&s, "/preempt", args).await;
    let nodes = out["NodeNameToMetaVictims"].as_object().unwrap();
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["gpu-1"]);
    let uids: Vec<&str> = nodes["gpu-1"]["Pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["UID"].as_str().unwrap())
        .collect();
    assert_eq!(uids, ["cpu-only-pod", LOW]);
}

#[tokio::test]
async fn every_bad_body_gets_http_200_with_a_clear_error() {
    let s = server(Config::default()).await;
    for (verb, body, want) in [
        ("/filter", "not json", "invalid JSON"),
        (
            "/filter",
            "{\"Pod\": 7, \"NodeNames\": []}",
            "ExtenderArgs.Pod",
        ),
        ("/bind", "[]", "not a JSON object"),
    ] {
        let (status, bytes) = post(&s, verb, body.as_bytes()).await;
        assert_eq!(status, 200);
        let out: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(
            out["Error"].as_str().unwrap().contains(want),
            "{verb}: {out}"
        );
    }
    let (status, bytes) = post(&s, "/prioritize", b"{").await;
    assert_eq!((status, bytes.as_slice()), (200, &b"[]"[..]));
    let (status, bytes) = post(&s, "/preempt", b"{").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap(),
        json!({"NodeNameToMetaVictims": {}})
    );
}

#[tokio::test]
async fn without_cluster_state_the_extender_says_how_to_get_it() {
    let state = AppState::new(Config::default(), Metrics::new(None));
    let s = start(state, Timeouts::default()).await;
    let out = call(&s, "/filter", json!({"Pod": {}, "NodeNames": []})).await;
    assert!(
        out["Error"].as_str().unwrap().contains("--cluster"),
        "{out}"
    );
}
