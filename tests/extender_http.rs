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
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use serde_json::{Value, json};
use support::https::{Server, post, post_json, start};

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
    start(state, Limits::default()).await
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

/// The feasible names; the reasons of the others only when no node is
/// feasible (kube-scheduler reads them only then); every reason counted.
#[tokio::test]
async fn filter_answers_the_feasible_names_or_every_reason() {
    let s = server(Config::default()).await;
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": whole_gpu("ml", "p", "u-1"), "Nodes": null,
               "NodeNames": ["gpu-1", "gpu-2", "cpu-1", "gone-1"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!(["gpu-2"]));
    assert!(no_reasons(&out), "{out}");
    assert!(out.get("Error").is_none(), "{out}");
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": whole_gpu("ml", "p", "u-1"), "Nodes": null,
               "NodeNames": ["gpu-1", "cpu-1", "gone-1"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!([]));
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
    // Counted by reason code, for dashboards and alerts, in both calls.
    let metrics = s.state.metrics.encode();
    for line in [
        "gpugate_filter_decisions_total{result=\"feasible\"} 1",
        "gpugate_filter_rejections_total{reason=\"CardInsufficientMemory\"} 2",
        "gpugate_filter_rejections_total{reason=\"NodeUnregistered\"} 4",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

/// No node named in `FailedNodes` or `FailedAndUnresolvableNodes`.
fn no_reasons(out: &Value) -> bool {
    ["FailedNodes", "FailedAndUnresolvableNodes"]
        .iter()
        .all(|k| {
            out.get(*k)
                .is_none_or(|m| m.is_null() || m.as_object().is_some_and(|m| m.is_empty()))
        })
}

#[tokio::test]
async fn filter_with_full_nodes_answers_full_nodes() {
    let s = server(Config::default()).await;
    // Fields gpugate does not model must come back unchanged.
    let node = |n: &str| {
        json!({"metadata": {"name": n, "labels": {"zone": "a"}},
               "status": {"images": [{"names": ["busybox"], "sizeBytes": 1}]},
               "futureField": {"x": 1}})
    };
    let out = post_json(
        &s,
        "/filter",
        json!({"pod": whole_gpu("ml", "p", "u-1"),
               "nodes": {"items": [node("gpu-1"), node("gpu-2")]}}),
    )
    .await;
    assert_eq!(out["Nodes"]["items"].as_array().unwrap().len(), 1);
    assert_eq!(out["Nodes"]["items"][0]["metadata"]["name"], "gpu-2");
    assert_eq!(out["Nodes"]["items"][0], node("gpu-2"));
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
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": small, "NodeNames": ["gpu-1", "gpu-2"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!(["gpu-2"]));
    assert!(no_reasons(&out), "{out}");
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
    let out = post_json(&s, "/filter", json!({"Pod": over, "NodeNames": ["gpu-2"]})).await;
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
    let out = post_json(&s, "/filter", json!({"Pod": fits, "NodeNames": ["gpu-2"]})).await;
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
    let out = post_json(
        &s,
        "/prioritize",
        json!({"Pod": small, "NodeNames": ["gpu-2", "cpu-1", "gpu-1"]}),
    )
    .await;
    // Nodes that score 0 (here: those that cannot hold the pod) are left
    // out; kube-scheduler counts them 0.
    let list = out.as_array().unwrap();
    let hosts: Vec<&str> = list.iter().map(|h| h["Host"].as_str().unwrap()).collect();
    assert_eq!(hosts, ["gpu-2"], "{out}");
    assert!(
        (1..=10).contains(&list[0]["Score"].as_i64().unwrap()),
        "{out}"
    );
}

#[tokio::test]
async fn bind_commits_to_the_ledger_and_the_next_filter_sees_it() {
    let s = server(Config::default()).await;
    for (name, uid) in [("a", "u-a"), ("b", "u-b")] {
        let out = post_json(
            &s,
            "/filter",
            json!({"Pod": whole_gpu("ml", name, uid), "NodeNames": ["gpu-2"]}),
        )
        .await;
        assert_eq!(out["NodeNames"], json!(["gpu-2"]), "{name}");
    }
    let bind = |name: &str, uid: &str| json!({"PodName": name, "PodNamespace": "ml", "PodUID": uid, "Node": "gpu-2"});
    let out = post_json(&s, "/bind", bind("a", "u-a")).await;
    assert_eq!(out, json!({}), "bind succeeded");
    // A retried bind of the same pod to the same node is not a second allocation.
    assert_eq!(post_json(&s, "/bind", bind("a", "u-a")).await, json!({}));
    // gpu-2 had one whole GPU free; b filtered before a was bound, so its
    // bind must fail against the ledger, not over-commit.
    let out = post_json(&s, "/bind", bind("b", "u-b")).await;
    let e = out["Error"].as_str().unwrap();
    assert!(e.starts_with("pod ml/b does not fit on node gpu-2:"), "{e}");
    let out = post_json(
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
    let out = post_json(
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
    post_json(
        &s,
        "/filter",
        json!({"Pod": whole_gpu("ml", "a", "u-a"), "NodeNames": ["gpu-2"]}),
    )
    .await;
    let out = post_json(
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
    let out = post_json(
        &s,
        "/bind",
        json!({"PodName": "a", "PodNamespace": "ml", "PodUID": "u-a"}),
    )
    .await;
    assert_eq!(out["Error"], "ExtenderBindingArgs: Node is missing");
}

fn victims_of(out: &Value, node: &str) -> Vec<String> {
    out["NodeNameToMetaVictims"][node]["Pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["UID"].as_str().unwrap().to_string())
        .collect()
}

fn preemption(priority: i64, victims: Value) -> Value {
    json!({
        "Pod": pod("ml", "urgent", "u-1", json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}), priority),
        "NodeNameToVictims": null,
        "NodeNameToMetaVictims": victims,
    })
}

#[tokio::test]
async fn preempt_keeps_kube_schedulers_victims_and_adds_the_fewest_lowest_gpu_holders() {
    let s = server(Config::default()).await;
    // gpu-1's two GPUs are held whole by LOW (priority 0) and HIGH (1000).
    // kube-scheduler proposes only a CPU victim: LOW is added, the cheapest
    // GPU holder that makes room. cpu-1 can never hold a GPU: dropped.
    let out = post_json(
        &s,
        "/preempt",
        preemption(
            2000,
            json!({
                "gpu-1": {"Pods": [{"UID": "cpu-only-pod"}], "NumPDBViolations": 0},
                "cpu-1": {"Pods": [{"UID": "cpu-only-pod"}], "NumPDBViolations": 0}
            }),
        ),
    )
    .await;
    let nodes = out["NodeNameToMetaVictims"].as_object().unwrap();
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["gpu-1"]);
    assert_eq!(victims_of(&out, "gpu-1"), ["cpu-only-pod", LOW]);
}

#[tokio::test]
async fn preempt_never_drops_a_proposed_victim() {
    let s = server(Config::default()).await;
    // kube-scheduler chose HIGH itself: removing it frees a GPU, so nothing
    // is added, and nothing it needs is taken away.
    let out = post_json(
        &s,
        "/preempt",
        preemption(
            2000,
            json!({"gpu-1": {"Pods": [{"UID": HIGH}, {"UID": "cpu-only-pod"}]}}),
        ),
    )
    .await;
    assert_eq!(victims_of(&out, "gpu-1"), [HIGH, "cpu-only-pod"]);
    // gpu-2 has a free GPU already: the proposed victims stay as they are.
    let out = post_json(
        &s,
        "/preempt",
        preemption(2000, json!({"gpu-2": {"Pods": [{"UID": "cpu-only-pod"}]}})),
    )
    .await;
    assert_eq!(victims_of(&out, "gpu-2"), ["cpu-only-pod"]);
}

#[tokio::test]
async fn preempt_only_evicts_gpu_holders_of_lower_priority() {
    let s = server(Config::default()).await;
    // At priority 500 only LOW may go; at 0 nobody may: the node is dropped.
    let out = post_json(
        &s,
        "/preempt",
        preemption(500, json!({"gpu-1": {"Pods": []}})),
    )
    .await;
    assert_eq!(victims_of(&out, "gpu-1"), [LOW]);
    let out = post_json(
        &s,
        "/preempt",
        preemption(0, json!({"gpu-1": {"Pods": []}})),
    )
    .await;
    assert_eq!(out["NodeNameToMetaVictims"], json!({}));
}

#[tokio::test]
async fn a_percent_request_is_checked_against_the_quota_at_bind() {
    let s = server(Config::default()).await;
    // capped uses 6000 of 8000 MiB; 50% of a 16384 MiB T4 is 8192 MiB.
    let half = pod(
        "capped",
        "p",
        "u-half",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}),
        0,
    );
    let out = post_json(&s, "/filter", json!({"Pod": half, "NodeNames": ["gpu-2"]})).await;
    assert_eq!(
        out["NodeNames"],
        json!(["gpu-2"]),
        "the MiB are not known before a GPU is chosen"
    );
    let out = post_json(
        &s,
        "/bind",
        json!({"PodName": "p", "PodNamespace": "capped", "PodUID": "u-half", "Node": "gpu-2"}),
    )
    .await;
    let e = out["Error"].as_str().unwrap();
    assert!(
        e.contains("ResourceQuotaNotFit (GPU memory 8192 MiB requested, 6000 MiB of 8000 MiB"),
        "{e}"
    );
    assert!(
        s.state
            .cluster
            .as_ref()
            .unwrap()
            .read()
            .held_allocation("u-half")
            .is_none()
    );
}

#[tokio::test]
async fn binding_a_pod_without_gpus_records_nothing() {
    let s = server(Config::default()).await;
    let cpu = pod("ml", "c", "u-cpu", json!({"cpu": "1"}), 0);
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": cpu, "NodeNames": ["cpu-1", "gpu-1"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!(["cpu-1", "gpu-1"]));
    let out = post_json(
        &s,
        "/bind",
        json!({"PodName": "c", "PodNamespace": "ml", "PodUID": "u-cpu", "Node": "cpu-1"}),
    )
    .await;
    assert_eq!(out, json!({}));
    assert!(
        s.state
            .cluster
            .as_ref()
            .unwrap()
            .read()
            .held_allocation("u-cpu")
            .is_none()
    );
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
    ]
    .into_iter()
    .map(|(v, b, w)| (v, b.to_string(), w))
    .chain([
        // Identities longer than Kubernetes allows: the standalone ledger
        // would keep them (and HAMi's gauges would label with them).
        (
            "/filter",
            json!({"Pod": whole_gpu("ml", &"p".repeat(254), "u-long"), "NodeNames": ["gpu-2"]})
                .to_string(),
            "ExtenderArgs.Pod.metadata: name is 254 bytes long, more than Kubernetes allows (253)",
        ),
        (
            "/bind",
            json!({"PodName": "p", "PodNamespace": "n".repeat(64), "PodUID": "u", "Node": "gpu-2"})
                .to_string(),
            "PodNamespace is 64 bytes long",
        ),
        // An NVIDIA GPU and an Enflame legacy shared GCU: refused, not
        // placed with the GPU alone.
        (
            "/filter",
            json!({"Pod": pod("ml", "mixed", "u-mixed",
                        json!({"nvidia.com/gpu": "1", "enflame.com/vgcu": "1"}), 0),
                   "NodeNames": ["gpu-1", "gpu-2"]})
            .to_string(),
            "pod ml/mixed: container \"main\", resource enflame.com/vgcu: asks for Enflame \
             shared GCUs, which gpugate does not place yet",
        ),
    ]) {
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
    let s = start(state, Limits::default()).await;
    let out = post_json(&s, "/filter", json!({"Pod": {}, "NodeNames": []})).await;
    assert!(
        out["Error"].as_str().unwrap().contains("--cluster"),
        "{out}"
    );
}
