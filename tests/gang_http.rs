//! Gang scheduling through the extender over real TLS, in standalone mode:
//! a group that fits only as a whole is placed whole, and its capacity is
//! held from other pods meanwhile; a group that cannot fit places nobody;
//! a group with too few members waits; holds end.

mod support {
    pub mod https;
}

use std::sync::Arc;

use gpugate::cluster::{SharedCluster, Snapshot};
use gpugate::config::Config;
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use serde_json::{Value, json};
use support::https::{Server, post_json, start};

/// Two nodes with two whole T4s each (exclusive pods take one each).
fn node(name: &str) -> Value {
    let devices: Vec<Value> = (0..2)
        .map(|i| {
            json!({"id": format!("GPU-{name}-{i}"), "index": i, "count": 10, "devmem": 16384,
                   "devcore": 100, "type": "NVIDIA Tesla T4", "numa": 0, "health": true})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {
        "hami.io/node-nvidia-register": serde_json::to_string(&devices).unwrap()}}})
}

/// A pending pod asking for one whole GPU, in group `group` (min-available `min`).
fn member(name: &str, group: Option<(&str, u32)>) -> Value {
    let mut labels = json!({"app": "train"});
    if let Some((g, min)) = group {
        labels["pod-group.scheduling.sigs.k8s.io/name"] = json!(g);
        labels["pod-group.scheduling.sigs.k8s.io/min-available"] = json!(min.to_string());
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"), "labels": labels},
           "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "main", "image": "x",
               "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}}}]},
           "status": {"phase": "Pending"}})
}

async fn server(pods: &[Value]) -> (Server, Arc<SharedCluster>) {
    let mut items = vec![node("a"), node("b")];
    items.extend_from_slice(pods);
    let yaml = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .unwrap();
    let (view, _) = Snapshot::from_yaml(&yaml, "test").unwrap().to_view();
    let cluster = Arc::new(SharedCluster::new(view, true));
    let state =
        AppState::with_cluster(Config::default(), Metrics::new(None), Some(cluster.clone()));
    (start(state, Limits::default()).await, cluster)
}

async fn filter(s: &Server, pod: &Value) -> Value {
    post_json(s, "/filter", json!({"Pod": pod, "NodeNames": ["a", "b"]})).await
}

/// Filters, then binds to the first feasible node; returns the node.
async fn place(s: &Server, pod: &Value) -> Result<String, Value> {
    let out = filter(s, pod).await;
    let Some(node) = out["NodeNames"][0].as_str() else {
        return Err(out);
    };
    let m = &pod["metadata"];
    let bound = post_json(
        s,
        "/bind",
        json!({"PodName": m["name"], "PodNamespace": "ml", "PodUID": m["uid"], "Node": node}),
    )
    .await;
    assert!(bound["Error"].as_str().unwrap_or("").is_empty(), "{bound}");
    Ok(node.to_string())
}

#[tokio::test]
async fn a_gang_that_fits_only_whole_is_placed_whole_and_held_meanwhile() {
    let gang: Vec<Value> = (0..4)
        .map(|i| member(&format!("w{i}"), Some(("train", 4))))
        .collect();
    let outsider = member("outsider", None);
    let mut pods = gang.clone();
    pods.push(outsider.clone());
    let (s, cluster) = server(&pods).await;

    place(&s, &gang[0]).await.unwrap();
    // The other three members' GPUs are held: the outsider is told no.
    assert_eq!(cluster.read().gang_hold_count(), 3);
    let out = filter(&s, &outsider).await;
    assert_eq!(out["NodeNames"], json!([]), "{out}");
    // The members still get in, each on its own GPU.
    for m in &gang[1..] {
        place(&s, m).await.unwrap();
    }
    assert_eq!(cluster.read().gang_hold_count(), 0);
    let view = cluster.read();
    let mut gpus: Vec<String> = (0..4)
        .flat_map(|i| {
            view.held_allocation(&format!("uid-w{i}"))
                .unwrap()
                .containers
                .iter()
                .flatten()
                .map(|d| d.uuid.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    gpus.sort();
    gpus.dedup();
    assert_eq!(gpus.len(), 4);
}

#[tokio::test]
async fn a_gang_that_cannot_fit_places_nobody() {
    let gang: Vec<Value> = (0..5)
        .map(|i| member(&format!("w{i}"), Some(("big", 5))))
        .collect();
    let (s, cluster) = server(&gang).await;
    for m in &gang {
        let out = place(&s, m).await.unwrap_err();
        let reason = out["FailedNodes"]["a"].as_str().unwrap();
        assert!(
            reason.starts_with("GangNotFit (group ml/big: 0 member(s) placed and 4 more fit at once, min-available is 5)"),
            "{reason}"
        );
        assert_eq!(out["FailedNodes"]["b"], reason);
    }
    assert_eq!(cluster.read().counts().allocations, 0);
}

#[tokio::test]
async fn a_gang_with_too_few_members_waits_and_bad_labels_are_named() {
    let gang: Vec<Value> = (0..2)
        .map(|i| member(&format!("w{i}"), Some(("small", 3))))
        .collect();
    let (s, _) = server(&gang).await;
    // Preempting cannot bring members: unresolvable.
    let out = filter(&s, &gang[0]).await;
    let reason = out["FailedAndUnresolvableNodes"]["a"].as_str().unwrap();
    assert!(
        reason.starts_with("GangIncomplete (group ml/small has 2 member(s), min-available is 3"),
        "{reason}"
    );

    let mut bad = member("bad", Some(("g", 1)));
    bad["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io/min-available"] = json!("all");
    let out = filter(&s, &bad).await;
    let reason = out["FailedAndUnresolvableNodes"]["a"].as_str().unwrap();
    assert!(reason.starts_with("GangInvalid"), "{reason}");
}

#[tokio::test]
async fn held_capacity_is_released_when_the_hold_ends() {
    let gang: Vec<Value> = (0..3)
        .map(|i| member(&format!("w{i}"), Some(("train", 3))))
        .collect();
    // Two whole GPUs on one node: fits only where nothing is held.
    let mut outsider = member("outsider", None);
    outsider["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("2");
    let mut pods = gang.clone();
    pods.push(outsider.clone());
    let (s, cluster) = server(&pods).await;
    place(&s, &gang[0]).await.unwrap();
    assert_eq!(cluster.read().gang_hold_count(), 2);
    // One member placed and two held on 4 GPUs: one GPU left, no node has two.
    let out = filter(&s, &outsider).await;
    assert_eq!(out["NodeNames"], json!([]), "{out}");
    let now = jiff::Timestamp::now().as_millisecond();
    assert_eq!(cluster.write().expire(now).gang_holds, 0);
    assert_eq!(cluster.write().expire(now + 61_000).gang_holds, 2);
    assert_eq!(cluster.read().gang_hold_count(), 0);
    place(&s, &outsider).await.unwrap();
}
