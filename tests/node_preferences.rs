//! Node preferences (docs/policies.md "Node preferences"): the device
//! kinds whose HAMi backend scores nodes by the devices a pod would take
//! there (hami-vendors.md 1.7) rank feasible nodes by that first, and by
//! the node policy among equals. Kunlunxin XPUs by the wings of their
//! eight-card boards (8.6), Metax GPUs by the topology tables Metax's
//! plugin writes on the node (5.2, 5.5). Real Node and Pod fixtures
//! (tests/fixtures/node-preferences/cluster.yaml); the engine's
//! evaluation, and `/filter` and `/prioritize` over real TLS.

mod support {
    pub mod https;
    pub mod vendor;
}

use std::sync::Arc;

use gpugate::cluster::SharedCluster;
use gpugate::cluster::convert::pod_plan;
use gpugate::config::Config;
use gpugate::devices::KindId;
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use serde_json::{Value, json};
use support::https::{post_json, start};

const XPUS: [&str; 3] = ["xpu-a", "xpu-b", "xpu-c"];
const METAX: [&str; 4] = ["mx-a", "mx-b", "mx-bad", "mx-c"];

/// `limits` under node policy `policy`, on one of `nodes`.
fn pod(policy: &str, limits: Value) -> k8s_openapi::api::core::v1::Pod {
    support::vendor::one_container_pod(
        "p",
        json!({"hami.io/node-scheduler-policy": policy}),
        limits,
    )
}

/// The node the engine ranks best for `limits` under `policy`, and each
/// feasible candidate's priority, in name order.
fn best(policy: &str, limits: Value, nodes: &[&str]) -> (String, Vec<u8>) {
    let (view, report) = support::vendor::fixture("node-preferences").to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let plan = pod_plan(&pod(policy, limits), &Config::default()).unwrap();
    let names: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    let eval = view.state().evaluate(&plan, Some(&names));
    let priorities = eval.feasible.iter().map(|f| f.priority).collect();
    (eval.best().unwrap().node.to_string(), priorities)
}

fn xpus(n: u32) -> Value {
    json!({"kunlunxin.com/xpu": n.to_string()})
}

fn metax(n: u32) -> Value {
    json!({"metax-tech.com/gpu": n.to_string()})
}

#[test]
fn xpus_go_where_they_leave_the_fewest_broken_wings() {
    // 8.6, bubbles before and after the pod. One XPU: on xpu-a it fills
    // the left wing (2 bubbles to 1), on xpu-b it joins the used left wing
    // (3 to 2), on the empty xpu-c it breaks a wing (1 to 3). xpu-a and
    // xpu-b are equally good, and the node policy chooses between them:
    // binpack the fuller xpu-a, spread the emptier xpu-b, never the empty
    // xpu-c (HAMi's raw score would send a spread pod there).
    assert_eq!(best("binpack", xpus(1), &XPUS).0, "xpu-a");
    let (node, priorities) = best("spread", xpus(1), &XPUS);
    assert_eq!((node.as_str(), priorities.len()), ("xpu-b", 3));
    assert!(priorities[2] < priorities[0] && priorities[2] < priorities[1]);
    // Four XPUs take a whole wing: xpu-a's and xpu-b's right wings leave
    // one bubble fewer; the empty board's left wing as many.
    assert_eq!(best("spread", xpus(4), &XPUS).0, "xpu-b");
    // Eight XPUs fit only the empty board.
    let (node, feasible) = best("binpack", xpus(8), &XPUS);
    assert_eq!((node.as_str(), feasible.len()), ("xpu-c", 1));
}

#[test]
fn metax_gpus_follow_the_plugins_tables() {
    // 5.5: under binpack the lowest loss for the pod's number of GPUs,
    // under spread the highest score.
    assert_eq!(best("binpack", metax(1), &METAX).0, "mx-b");
    assert_eq!(best("binpack", metax(2), &METAX).0, "mx-a");
    // mx-bad's scores were read: its 900 is the highest for one GPU.
    assert_eq!(best("spread", metax(1), &METAX).0, "mx-bad");
    assert_eq!(best("spread", metax(2), &METAX).0, "mx-b");
    // No table names 3: the node policy alone (spread: an empty node,
    // the first by name).
    assert_eq!(best("spread", metax(3), &METAX).0, "mx-a");
    assert_eq!(best("binpack", metax(3), &METAX).0, "mx-b");
    // A node without tables ranks after every node with one.
    let (_, priorities) = best("binpack", metax(2), &["mx-a", "mx-c"]);
    assert!(priorities[0] > priorities[1], "{priorities:?}");
}

#[test]
fn an_unreadable_table_is_named_and_the_node_still_placed() {
    let (view, _) = support::vendor::fixture("node-preferences").to_view();
    let problems = &view.node_problems()["mx-bad"];
    assert!(
        problems.iter().any(|p| p.contains(
            "annotation metax-tech.com/gpu.topology.losses: not a JSON object of device counts to numbers"
        ) && p.contains("ranked as one without it")),
        "{problems:?}"
    );
    let node = view.state().node("mx-bad").unwrap();
    assert_eq!(node.gpus.len(), 4);
    let tables = node.size_tables(KindId::METAX_GPU).unwrap();
    assert!(tables.losses.is_empty());
    assert_eq!(tables.scores.get(&1), Some(&900));
    assert!(
        view.state()
            .node("mx-c")
            .unwrap()
            .size_tables(KindId::METAX_GPU)
            .is_none()
    );
}

#[tokio::test]
async fn prioritize_gives_kube_scheduler_the_same_order() {
    let (view, _) = support::vendor::fixture("node-preferences").to_view();
    let cluster = Arc::new(SharedCluster::new(view, true));
    let state = AppState::with_cluster(Config::default(), Metrics::new(None), Some(cluster));
    let s = start(state, Limits::default()).await;
    let p = serde_json::to_value(pod("spread", xpus(1))).unwrap();
    let out = post_json(&s, "/prioritize", json!({"Pod": p, "NodeNames": XPUS})).await;
    let score = |node: &str| {
        out.as_array()
            .unwrap()
            .iter()
            .find(|h| h["Host"] == node)
            .map_or(0, |h| h["Score"].as_i64().unwrap())
    };
    // xpu-b first, xpu-a next, the empty board last (left out at 0).
    assert!(score("xpu-b") > score("xpu-a"), "{out}");
    assert!(score("xpu-a") > score("xpu-c"), "{out}");
    let p = serde_json::to_value(pod("binpack", metax(2))).unwrap();
    let out = post_json(&s, "/filter", json!({"Pod": p, "NodeNames": METAX})).await;
    assert_eq!(out["NodeNames"].as_array().unwrap().len(), 4, "{out}");
}

#[test]
fn explain_says_how_the_nodes_rank() {
    let mut s = support::vendor::fixture("node-preferences");
    s.pods.push(pod("spread", xpus(1)));
    s.pods.push(support::vendor::one_container_pod(
        "two-metax",
        json!({}),
        metax(2),
    ));
    let now = jiff::Timestamp::now();
    let e = gpugate::explain::explain(&s, "ml", "p", &Config::default(), now).unwrap();
    assert!(
        e.asks[0].contains(
            "nodes rank first by the wings their XPUs would leave partly used (the fewer the better), then by the node policy"
        ),
        "{:?}",
        e.asks
    );
    assert!(
        e.summary.contains("gpugate ranks xpu-b best"),
        "{}",
        e.summary
    );
    let e = gpugate::explain::explain(&s, "ml", "two-metax", &Config::default(), now).unwrap();
    assert!(
        e.asks[0].contains(
            "nodes rank first by the device plugin's tables for 2 GPUs (metax-tech.com/gpu.topology.losses under binpack"
        ),
        "{:?}",
        e.asks
    );
    // Binpack by default: mx-a's loss of 300 is the lowest for two GPUs.
    assert!(
        e.summary.contains("gpugate ranks mx-a best"),
        "{}",
        e.summary
    );
}

const SGPUS: [&str; 3] = ["sg-batch", "sg-free", "sg-mixed"];
const LINKED: [&str; 2] = ["sg-y-apart", "sg-z-linked"];

fn sgpu(annotations: Value, limits: Value) -> gpugate::engine::PodPlan {
    let p = support::vendor::one_container_pod("p", annotations, limits);
    pod_plan(&p, &Config::default()).unwrap()
}

/// The best of `nodes` for `plan`.
fn best_for(plan: &gpugate::engine::PodPlan, nodes: &[&str]) -> String {
    let (view, _) = support::vendor::fixture("node-preferences").to_view();
    let names: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    let eval = view.state().evaluate(plan, Some(&names));
    assert!(eval.rejected.is_empty(), "{:?}", eval.rejected);
    eval.best().unwrap().node.to_string()
}

#[test]
fn an_online_sgpu_pod_goes_where_its_devices_hold_the_fewest_pods() {
    // 5.5: −100 per batch pod on a batch-only device (sg-batch: −100),
    // −20 per latency-sensitive and −2 per batch pod otherwise (sg-mixed:
    // −22), an idle device 0. Binpack would take a busy node; the
    // preference outranks it.
    let online = json!({
        "metax-tech.com/sgpu-app-class": "online",
        "hami.io/node-scheduler-policy": "binpack",
    });
    let limits = json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4"});
    let plan = sgpu(online, limits.clone());
    assert_eq!(best_for(&plan, &SGPUS), "sg-free");
    assert_eq!(best_for(&plan, &["sg-batch", "sg-mixed"]), "sg-mixed");
    // A batch pod has no preference: binpack takes the fullest node.
    let batch = json!({
        "metax-tech.com/sgpu-app-class": "offline",
        "metax-tech.com/sgpu-qos-policy": "best-effort",
        "hami.io/node-scheduler-policy": "binpack",
    });
    let shared = json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "20"});
    let plan = sgpu(batch, shared);
    assert_eq!(best_for(&plan, &["sg-batch", "sg-free"]), "sg-batch");
}

#[test]
fn whole_sgpus_prefer_linked_devices_when_asked() {
    // 5.5: two whole devices. On sg-z-linked they keep one MetaLink pair
    // (10·10) and break none (the other pair stays whole): 100. On
    // sg-y-apart no pair: 0.
    let limits = json!({"metax-tech.com/sgpu": "2", "metax-tech.com/vcore": "100"});
    let asked = json!({"metax-tech.com/sgpu-topology-aware": "true"});
    assert_eq!(
        best_for(&sgpu(asked, limits.clone()), &LINKED),
        "sg-z-linked"
    );
    // Not asked (the chart's sgpuTopologyAware is "false"): the node
    // policy alone, equal empty nodes by name.
    assert_eq!(
        best_for(&sgpu(json!({}), limits.clone()), &LINKED),
        "sg-y-apart"
    );
    // The section's sgpuTopologyAware, as HAMi's chart writes it, turns it
    // on; the pod's annotation turns it off again.
    let on = Config::from_yaml("metax:\n  sgpuTopologyAware: \"true\"\n", "t").unwrap();
    assert!(on.device_config(KindId::METAX_SGPU).topology_aware);
    assert!(!on.device_config(KindId::METAX_GPU).topology_aware);
    let p = support::vendor::one_container_pod("p", json!({}), limits.clone());
    let plan = pod_plan(&p, &on).unwrap();
    assert_eq!(best_for(&plan, &LINKED), "sg-z-linked");
    let off = json!({"metax-tech.com/sgpu-topology-aware": "false"});
    let p = support::vendor::one_container_pod("p", off, limits.clone());
    assert_eq!(best_for(&pod_plan(&p, &on).unwrap(), &LINKED), "sg-y-apart");
    // A value that is not a boolean is refused, naming the annotation.
    let bad = json!({"metax-tech.com/sgpu-topology-aware": "yes"});
    let p = support::vendor::one_container_pod("p", bad, limits);
    let e = pod_plan(&p, &Config::default()).unwrap_err().to_string();
    assert!(
        e.contains("metax-tech.com/sgpu-topology-aware") && e.contains("not a boolean"),
        "{e}"
    );
    // Only the sGPU kind reads the key.
    let e = Config::from_yaml("nvidia:\n  topologyAware: true\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nvidia.topologyAware is read for no kind but Metax sGPUs"),
        "{e}"
    );
}

#[test]
fn ascend_npus_go_where_a_container_stays_in_one_network_group() {
    // 2.5: per container, the share of its NPUs in one NetworkID. Two NPUs
    // on npu-b-ring share a group (1.0); on npu-a-split each is alone
    // (0.5); npu-c-none registers no groups (0, as in HAMi), though
    // binpack would take it, the only node in use.
    let nodes = ["npu-a-split", "npu-b-ring", "npu-c-none"];
    let two = json!({"huawei.com/Ascend910B3": "2"});
    for policy in ["binpack", "spread"] {
        let (node, priorities) = best(policy, two.clone(), &nodes);
        assert_eq!(node, "npu-b-ring", "{policy}");
        assert!(
            priorities[1] > priorities[0] && priorities[0] > priorities[2],
            "{policy}: {priorities:?}"
        );
    }
    // One NPU is in one group wherever it goes: the node policy alone,
    // groups or none (binpack: the node in use; spread: an empty one).
    let one = json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "8192"});
    assert_eq!(best("binpack", one.clone(), &nodes).0, "npu-c-none");
    assert_eq!(best("spread", one, &nodes).0, "npu-a-split");
}
