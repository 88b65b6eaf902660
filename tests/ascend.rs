//! Huawei Ascend NPUs, one device kind per chip (../shared/hami-vendors.md
//! section 2, cited by subsection below): the JSON inventory with network
//! groups, the template rounding and the soft split, the 910C card rule,
//! the network-group rule, the webhook's rewrite and refusals, the `vnpus`
//! config section and `explain`. Real Node and Pod fixtures
//! (tests/fixtures/ascend/cluster.yaml); `/filter` over real TLS. What bind
//! writes is in tests/bind_api.rs.

mod support {
    pub mod https;
}

use std::path::Path;
use std::sync::Arc;

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::admission::validate::{Validation, validate_pod};
use gpugate::cluster::convert::pod_request;
use gpugate::cluster::{SharedCluster, Snapshot};
use gpugate::config::Config;
use gpugate::devices::{KindId, ascend};
use gpugate::engine::request::{GpuRequest, Memory};
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use support::https::{Server, post_json, start};

const NODES: [&str; 5] = ["b3-1", "b3-soft", "c-1", "p-1", "gpu-only"];

fn snapshot() -> Snapshot {
    Snapshot::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ascend/cluster.yaml"),
    )
    .unwrap()
}

fn kind(common_word: &str) -> KindId {
    gpugate::devices::kinds()
        .find(|(_, k)| k.vendor == common_word)
        .map(|(id, _)| id)
        .unwrap()
}

/// A pod of one container with these limits.
fn pod(name: &str, annotations: Value, limits: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "ascend",
                                 "resources": {"limits": limits}}]}
    })
}

async fn server() -> Server {
    let (view, report) = snapshot().to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let cluster = Arc::new(SharedCluster::new(view, true));
    let state = AppState::with_cluster(Config::default(), Metrics::new(None), Some(cluster));
    start(state, Limits::default()).await
}

/// The nodes `/filter` keeps for `pod`, and every dropped node's reason.
async fn filter(s: &Server, pod: &Value) -> (Vec<String>, Value) {
    let out = post_json(s, "/filter", json!({"Pod": pod, "NodeNames": NODES})).await;
    let mut kept: Vec<String> = out["NodeNames"]
        .as_array()
        .map(|a| a.iter().map(|n| n.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    kept.sort();
    let mut failed = serde_json::Map::new();
    for key in ["FailedNodes", "FailedAndUnresolvableNodes"] {
        if let Some(m) = out[key].as_object() {
            failed.extend(m.clone());
        }
    }
    (kept, Value::Object(failed))
}

#[test]
fn json_registers_read_as_one_kind_per_chip() {
    // 2.2: the plugin's JSON, `type` the common word, NetworkID in
    // custominfo on 910 chips; hami-vnpu-core marks a soft-split node.
    let (view, report) = snapshot().to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    let state = view.state();
    let b3 = state.node("b3-1").unwrap();
    assert_eq!(b3.gpus.len(), 8);
    assert!(b3.gpus.iter().all(|g| g.kind == kind("Ascend910B3")));
    let networks: Vec<Option<u16>> = b3.gpus.iter().map(|g| g.network()).collect();
    assert_eq!(networks, [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
    // Soft-split cores are percent of an NPU: every NPU offers 100 (template
    // pods take none); memory and the split count as registered.
    let g = &b3.gpus[0];
    assert_eq!(
        (g.capacity.slots, g.capacity.mem_mib, g.capacity.cores),
        (4, 65536, 100)
    );
    assert_eq!(g.mode_or_default(), ascend::TEMPLATE);
    let soft = state.node("b3-soft").unwrap();
    assert!(
        soft.gpus
            .iter()
            .all(|g| g.mode() == ascend::HAMI_CORE && g.network() == Some(0))
    );
    let p = state.node("p-1").unwrap();
    assert!(
        p.gpus
            .iter()
            .all(|g| g.kind == kind("Ascend310P") && g.network().is_none())
    );
    // The pod HAMi placed holds its template, read from HAMi's list.
    let used = b3.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 16384, 0));
    // A register that is not an array of devices fails the node, named.
    let bad: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": "bad", "annotations": {"hami.io/node-register-Ascend910B3": "{\"id\":1}"}}
    }))
    .unwrap();
    let e = gpugate::cluster::node_from_k8s(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hami.io/node-register-Ascend910B3"), "{e}");
}

#[test]
fn requests_become_what_the_chip_makes() {
    // 2.1 and 2.4: memory rounded up to the smallest template (trimMemory),
    // the whole NPU without memory or above every template, refused above
    // the NPU; cores only in the soft split; several NPUs whole only;
    // 910C by cards (1 becomes 2, odd refused).
    let config = Config::default();
    let read = |annotations: Value, limits: Value| {
        let p: Pod = serde_json::from_value(pod("p", annotations, limits)).unwrap();
        pod_request(&p, &config).map(|r| (r.device_kind, r.containers[0].gpu.unwrap()))
    };
    let npu = |count, mib| GpuRequest {
        count,
        memory: Memory::Mib(mib),
        cores: 0,
    };
    let b3 = kind("Ascend910B3");
    let soft = json!({"huawei.com/vnpu-mode": "hami-core"});
    for (annotations, limits, want) in [
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "1"}),
            (b3, npu(1, 65536)),
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"}),
            (b3, npu(1, 16384)),
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16385"}),
            (b3, npu(1, 32768)),
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "40000"}),
            (b3, npu(1, 65536)),
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "4", "huawei.com/Ascend910B3-memory": "65536"}),
            (b3, npu(4, 65536)),
        ),
        (
            soft.clone(),
            json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000",
                   "huawei.com/Ascend910B3-core": "30"}),
            (
                b3,
                GpuRequest {
                    count: 1,
                    memory: Memory::Mib(10000),
                    cores: 30,
                },
            ),
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910C": "1"}),
            (kind("Ascend910C"), npu(2, 65536)),
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "5000"}),
            (kind("Ascend310P"), npu(1, 6144)),
        ),
        // 310P: above every template but within memoryCapacity (24,576
        // MiB) is the whole NPU, memoryAllocatable (21,527 MiB).
        (
            json!({}),
            json!({"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "24000"}),
            (kind("Ascend310P"), npu(1, 21527)),
        ),
    ] {
        assert_eq!(read(annotations, limits.clone()), Ok(want), "{limits}");
    }
    for (annotations, limits, resource, needle) in [
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "70000"}),
            "huawei.com/Ascend910B3-memory",
            "more than one Ascend 910B3 NPU (65536 MiB)",
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "5"}),
            "huawei.com/Ascend910B3-core",
            "only in the soft split",
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910B3": "2", "huawei.com/Ascend910B3-memory": "16384"}),
            "huawei.com/Ascend910B3-memory",
            "several NPUs are whole NPUs only",
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910C": "3"}),
            "huawei.com/Ascend910C",
            "cards of two",
        ),
        (
            json!({}),
            json!({"huawei.com/Ascend910B3-memory": "16384"}),
            "huawei.com/Ascend910B3-memory",
            "huawei.com/Ascend910B3",
        ),
    ] {
        let e = read(annotations, limits.clone()).unwrap_err();
        assert_eq!(e.resource, resource, "{limits}");
        assert!(e.problem.contains(needle), "{limits}: {e}");
    }
}

#[tokio::test]
async fn templates_soft_splits_and_kinds_pick_their_nodes() {
    let s = server().await;
    // 1.3: a chip's request sees only its chip's NPUs.
    let template = pod(
        "t",
        json!({}),
        json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}),
    );
    let (kept, failed) = filter(&s, &template).await;
    assert_eq!(kept, ["b3-1", "b3-soft"], "{failed}");
    // The reasons, answered when no node is feasible.
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": template, "NodeNames": ["c-1"]}),
    )
    .await;
    assert!(
        out["FailedAndUnresolvableNodes"]["c-1"]
            .as_str()
            .unwrap_or_default()
            .contains("3/4 CardTypeMismatch"),
        "{out}"
    );
    // 2.5, the mode gate: a soft-split pod only where the plugin splits
    // softly.
    let soft = pod(
        "s",
        json!({"huawei.com/vnpu-mode": "hami-core"}),
        json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "3000",
               "huawei.com/Ascend910B3-core": "40"}),
    );
    let (kept, failed) = filter(&s, &soft).await;
    assert_eq!(kept, ["b3-soft"], "{failed}");
    // 1.11 step 9 in MiB: the used NPU has 49,152 MiB left, so eight whole
    // NPUs do not fit b3-1; seven do.
    let whole = |n: &str| pod("w", json!({}), json!({"huawei.com/Ascend910B3": n}));
    let (kept, failed) = filter(&s, &whole("8")).await;
    assert!(kept.is_empty(), "{failed}");
    assert!(
        failed["b3-1"]
            .as_str()
            .unwrap()
            .contains("1/8 CardInsufficientMemory"),
        "{failed}"
    );
    let (kept, _) = filter(&s, &whole("7")).await;
    assert_eq!(kept, ["b3-1"]);
    // 2.5, 910C: cards of two; card 0 has an unhealthy NPU, so one card
    // (NPU-C-2, NPU-C-3) is all c-1 gives.
    let c = |n: &str| pod("c", json!({}), json!({"huawei.com/Ascend910C": n}));
    let (kept, _) = filter(&s, &c("1")).await;
    assert_eq!(kept, ["c-1"]);
    let (kept, failed) = filter(&s, &c("4")).await;
    assert!(kept.is_empty(), "{failed}");
    let reason = failed["c-1"].as_str().unwrap();
    assert!(
        reason.contains("AllocatedCardsInsufficientRequest"),
        "{reason}"
    );
}

#[test]
fn devices_sit_together_by_network_group_and_by_card() {
    // 2.5: several NPUs come from the largest network group of fitting
    // NPUs (b3-1: NPU 0 is partly used, so group 0 has three fitting NPUs
    // and group 1 four); 910C NPUs by whole cards.
    let config = Config::default();
    let (view, _) = snapshot().to_view();
    let place = |limits: Value, node: &str| -> Vec<String> {
        let p: Pod = serde_json::from_value(pod("p", json!({}), limits)).unwrap();
        let plan = gpugate::cluster::convert::pod_plan(&p, &config).unwrap();
        let a = view.state().assign(&plan, node).expect("fits");
        let mut uuids = a.gpu_uuids();
        uuids.sort();
        uuids
    };
    assert_eq!(
        place(json!({"huawei.com/Ascend910B3": "4"}), "b3-1"),
        ["NPU-B3-1-4", "NPU-B3-1-5", "NPU-B3-1-6", "NPU-B3-1-7"]
    );
    // Three fit in either group: the largest (group 1) is taken.
    assert_eq!(
        place(json!({"huawei.com/Ascend910B3": "3"}), "b3-1")
            .iter()
            .filter(|u| u.as_str() >= "NPU-B3-1-4")
            .count(),
        3
    );
    assert_eq!(
        place(json!({"huawei.com/Ascend910C": "2"}), "c-1"),
        ["NPU-C-2", "NPU-C-3"]
    );
}

#[test]
fn the_webhook_writes_the_template_and_refuses_what_no_chip_makes() {
    // 2.4: memory into limits and requests (HAMi writes both), 910C's 1
    // made 2, the scheduler name; refusals with the reason, never a 500.
    let config = Config::default();
    let Mutation::Patch(ops) = mutate_pod(
        &pod(
            "t",
            json!({}),
            json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"}),
        ),
        &config,
        None,
    ) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        ops.contains(r#"{"op":"add","path":"/spec/containers/0/resources/limits/huawei.com~1Ascend910B3-memory","value":"16384"}"#),
        "{ops}"
    );
    assert!(
        ops.contains(r#"{"op":"add","path":"/spec/containers/0/resources/requests","value":{"huawei.com/Ascend910B3-memory":"16384"}}"#),
        "{ops}"
    );
    assert!(ops.contains("/spec/schedulerName"), "{ops}");
    // The rewritten pod needs nothing more: a second pass adds nothing
    // but nothing is lost either (reinvocation).
    let mut rewritten = pod(
        "t",
        json!({}),
        json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}),
    );
    rewritten["spec"]["containers"][0]["resources"]["requests"] =
        json!({"huawei.com/Ascend910B3-memory": "16384"});
    rewritten["spec"]["schedulerName"] = json!("hami-scheduler");
    assert_eq!(
        mutate_pod(&rewritten, &config, None),
        Mutation::Patch(vec![])
    );
    let Mutation::Patch(ops) = mutate_pod(
        &pod("c", json!({}), json!({"huawei.com/Ascend910C": "1"})),
        &config,
        None,
    ) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        ops.contains(
            r#""path":"/spec/containers/0/resources/limits/huawei.com~1Ascend910C","value":"2""#
        ),
        "{ops}"
    );
    for limits in [
        json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "5"}),
        json!({"huawei.com/Ascend910C": "3"}),
    ] {
        match mutate_pod(&pod("bad", json!({}), limits.clone()), &config, None) {
            Mutation::Deny(d) => assert!(
                d.message.contains("resource huawei.com/Ascend910"),
                "{}",
                d.message
            ),
            other => panic!("{limits}: {other:?}"),
        }
        match validate_pod(&pod("bad", json!({}), limits.clone()), &config, None) {
            Validation::Deny(d) => assert!(
                d.message.contains("resource huawei.com/Ascend910"),
                "{}",
                d.message
            ),
            other => panic!("{limits}: {other:?}"),
        }
    }
}

#[test]
fn the_vnpus_section_reads_hamis_configs_by_chip() {
    // 2.1: HAMi's `vnpus` section; `resourceName` is the count; a chip
    // left out keeps the chart's values.
    let c = Config::from_yaml(
        "vnpus:\n  hamiVnpuCore: true\n  configs:\n  - chipName: 910B3\n    commonWord: Ascend910B3\n    resourceName: example.org/npu\n    resourceMemoryName: example.org/npu-memory\n    memoryAllocatable: 65536\n    memoryCapacity: 65536\n    aiCore: 20\n    aiCPU: 7\n    templates:\n    - name: quarter\n      memory: 16384\n      aiCore: 5\n      aiCPU: 1\n",
        "t",
    )
    .unwrap();
    assert!(c.vnpus.hami_vnpu_core);
    let b3 = c.device_config(kind("Ascend910B3"));
    assert_eq!(b3.resource_count_name, "example.org/npu");
    assert_eq!(b3.resource_core_name, "huawei.com/Ascend910B3-core");
    assert_eq!(b3.vnpu.trim(10000), Some((16384, "quarter")));
    assert_eq!(b3.vnpu.trim(20000), Some((65536, "")));
    assert_eq!(c.device_config(kind("Ascend910C")).vnpu.templates.len(), 2);
    for (text, needle) in [
        (
            "vnpus:\n  configs:\n  - commonWord: Ascend950\n",
            "not a chip gpugate places",
        ),
        (
            "vnpus:\n  configs:\n  - commonWord: Ascend910B3\n  - commonWord: Ascend910B3\n",
            "comes twice",
        ),
        ("vnpus:\n  configs:\n  - chipName: 910B3\n", "no commonWord"),
        (
            "vnpus:\n  configs:\n  - commonWord: Ascend910B3\n    memoryAllocatable: 90000\n",
            "memoryAllocatable",
        ),
        (
            "vnpus:\n  configs:\n  - commonWord: Ascend910B3\n    templates:\n    - name: big\n      memory: 99999\n",
            "template \"big\"",
        ),
        (
            "nvidia:\n  templates:\n  - name: x\n    memory: 1\n",
            "not for NVIDIA GPUs",
        ),
        ("vnpus:\n  hamiVnpuCores: true\n", "hamiVnpuCores"),
    ] {
        let e = Config::from_yaml(text, "t").unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn explain_shows_the_template_and_the_card_rule() {
    // `gpugate explain` on the pending 910C pod: its request in NPUs,
    // with the card rule in words, and c-1's refusal.
    let e = gpugate::explain::explain(
        &snapshot(),
        "ml",
        "c-four",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    let json = serde_json::to_string(&e).unwrap();
    assert!(!json.contains("nvidia.com"), "{json}");
    assert!(
        e.asks[0].contains("4 NPUs with 65536 MiB and 0 cores each, whole NPUs (no template")
            && e.asks[0].contains("NPUs come by cards of two: 2 whole cards"),
        "{:?}",
        e.asks
    );
    // A template pod's request names its template.
    let mut pods = snapshot();
    let p: Pod = serde_json::from_value(pod(
        "small",
        json!({}),
        json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "20000"}),
    ))
    .unwrap();
    pods.pods.push(p);
    let e = gpugate::explain::explain(
        &pods,
        "ml",
        "small",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    assert!(
        e.asks[0]
            .contains("1 NPU with 32768 MiB and 0 cores, template vir10_3c_32g of Ascend910B3"),
        "{:?}",
        e.asks
    );
}

#[test]
fn simulate_shows_why_in_the_chips_words() {
    // `gpugate simulate`: a pod that fits nowhere is listed with its
    // request in words (the card rule here) and each node's reason.
    let p: Pod = serde_json::from_value(pod(
        "cards",
        json!({}),
        json!({"huawei.com/Ascend910C": "4"}),
    ))
    .unwrap();
    let report = gpugate::simulate::simulate(
        &snapshot(),
        &[p],
        &Config::default(),
        jiff::Timestamp::now(),
    );
    let u = &report.unschedulable[0];
    assert!(
        u.asks[0].contains("Ascend910C NPUs come by cards of two: 2 whole cards"),
        "{:?}",
        u.asks
    );
    assert!(
        u.reasons["c-1"].contains("AllocatedCardsInsufficientRequest"),
        "{:?}",
        u.reasons
    );
    let table = report.to_table();
    assert!(
        table.contains("(asks)") && table.contains("cards of two"),
        "{table}"
    );
}
