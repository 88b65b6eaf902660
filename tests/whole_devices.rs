//! HAMi v2.10's whole-device backends (../shared/hami-vendors.md, cited by
//! section below): Metax GPUs (5), Kunlunxin XPUs (8), Enflame GCUs (9),
//! read from node capacity and taken whole by one container, and Vastai
//! devices (13), registered as JSON and taken by count alone. Inventories,
//! requests, the fit rules with their refusals, the config sections and
//! the webhook, on real Node and Pod fixtures
//! (tests/fixtures/whole_devices/cluster.yaml). What bind writes is in
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
    support::vendor::fixture("whole_devices")
}

fn pod(name: &str, annotations: Value, limits: Value) -> Pod {
    support::vendor::one_container_pod(name, annotations, limits)
}

/// The indexes of the devices `limits` takes on `node` (binpack).
fn place(limits: Value, node: &str) -> Result<Vec<u32>, Rejection> {
    let (view, _) = snapshot().to_view();
    let annotations = json!({"hami.io/gpu-scheduler-policy": "binpack"});
    let plan = pod_plan(&pod("p", annotations, limits), &Config::default()).unwrap();
    let a = view.state().assign(&plan, node)?;
    let n = view.state().node(node).unwrap();
    Ok(a.gpu_uuids()
        .iter()
        .map(|u| support::vendor::index_of(n, u))
        .collect())
}

/// The reasons devices were refused, with their counts.
fn reasons(r: Result<Vec<u32>, Rejection>) -> Vec<(Reason, u32)> {
    match r {
        Err(Rejection::Devices { counts, .. }) => counts.iter().collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn devices_are_read_from_capacity_and_from_the_register() {
    let (view, report) = snapshot().to_view();
    let state = view.state();
    let node = |name| state.node(name).unwrap();
    // 5.2: `<node>-metax-<i>`, one pod each, 65536 MiB whatever the card,
    // 100 cores.
    let mx = node("mx-1");
    let ids: Vec<&str> = mx.gpus.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(
        ids,
        [
            "mx-1-metax-0",
            "mx-1-metax-1",
            "mx-1-metax-2",
            "mx-1-metax-3"
        ]
    );
    assert!(mx.gpus.iter().all(|g| g.kind == KindId::METAX_GPU));
    let cap = mx.gpus[0].capacity;
    assert_eq!((cap.slots, cap.mem_mib, cap.cores), (1, 65536, 100));
    // The list HAMi wrote holds GPU 0 whole.
    let used = mx.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 65536, 100));
    // 8.2: `<node>-kunlun-<i>`, 98304 MiB; HAMi's allocated-only list.
    let xpu = node("xpu-1");
    assert_eq!(xpu.gpus.len(), 8);
    assert_eq!(xpu.gpus[7].uuid, "xpu-1-kunlun-7");
    assert!(xpu.gpus.iter().all(|g| g.kind == KindId::KUNLUN_XPU));
    assert_eq!(xpu.gpus[0].capacity.mem_mib, 98304);
    assert_eq!(xpu.usage[0].mem_mib, 98304);
    // 9.2: `<node>-GCU-<i>`, `devmem` 100.
    let gcu = node("gcu-1");
    assert_eq!(gcu.gpus[1].uuid, "gcu-1-GCU-1");
    assert_eq!(gcu.gpus[1].capacity.mem_mib, 100);
    assert!(gcu.gpus.iter().all(|g| g.kind == KindId::ENFLAME_GCU));
    // 13.2: JSON, `count` the sharing.
    let va = node("va-1");
    assert!(va.gpus.iter().all(|g| g.kind == KindId::VASTAI));
    assert_eq!(va.gpus[0].capacity.slots, 2);
    // A capacity that is not a whole number registers nothing, and says so.
    assert!(node("gcu-bad").gpus.is_empty());
    assert_eq!(report.unregistered_nodes.len(), 1, "{report:?}");
    assert!(
        report.unregistered_nodes[0].contains("enflame.com/gcu"),
        "{report:?}"
    );
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
}

#[test]
fn whole_devices_from_capacity_as_hami_counts_them() {
    use gpugate::devices::whole_devices;
    // One device per unit; none for 0 or an absent capacity; garbage
    // beyond any node is refused, not allocated.
    assert_eq!(whole_devices(&[Some(3)], "r", 100, "GCU").unwrap().len(), 3);
    assert!(whole_devices(&[Some(0)], "r", 100, "GCU").is_err());
    assert!(whole_devices(&[None], "r", 100, "GCU").is_err());
    let e = whole_devices(&[Some(u64::MAX)], "r", 100, "GCU").unwrap_err();
    assert!(e.contains("more devices than a node holds"), "{e}");
}

#[test]
fn a_count_takes_whole_devices() {
    // 5.1, 8.1, 9.1: the count alone; memory is the whole device's
    // (`MemPercentagereq` 100) and cores 100. 13.1: Vastai by count alone.
    let config = Config::default();
    for (resource, kind) in [
        ("metax-tech.com/gpu", KindId::METAX_GPU),
        ("kunlunxin.com/xpu", KindId::KUNLUN_XPU),
        ("enflame.com/gcu", KindId::ENFLAME_GCU),
    ] {
        let r = pod_request(&pod("p", json!({}), json!({resource: "2"})), &config).unwrap();
        assert_eq!(r.device_kind, kind, "{resource}");
        assert_eq!(
            r.containers[0].gpu,
            Some(GpuRequest {
                count: 2,
                memory: Memory::Percent(100),
                cores: 100
            }),
            "{resource}"
        );
        let e = pod_request(&pod("p", json!({}), json!({resource: "two"})), &config).unwrap_err();
        assert_eq!(e.resource, resource);
    }
    let r = pod_request(
        &pod("p", json!({}), json!({"vastaitech.com/va": "1"})),
        &config,
    )
    .unwrap();
    assert_eq!(r.device_kind, KindId::VASTAI);
    assert_eq!(
        r.containers[0].gpu,
        Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(0),
            cores: 0
        })
    );
}

#[test]
fn a_whole_device_takes_one_container() {
    // 5.5 (Template T), 9.5 (`Used > 0` is a conflict): mx-1's GPU 0 is
    // held, so four GPUs do not fit and three take the others.
    assert_eq!(
        reasons(place(json!({"metax-tech.com/gpu": "4"}), "mx-1")),
        [
            (Reason::AllocatedCardsInsufficientRequest, 3),
            (Reason::CardTimeSlicingExhausted, 1)
        ]
    );
    assert_eq!(
        place(json!({"metax-tech.com/gpu": "3"}), "mx-1"),
        Ok(vec![1, 2, 3])
    );
    // Two GCUs, both free; a third is more than the node has.
    assert_eq!(
        place(json!({"enflame.com/gcu": "2"}), "gcu-1"),
        Ok(vec![0, 1])
    );
    assert!(matches!(
        place(json!({"enflame.com/gcu": "3"}), "gcu-1"),
        Err(Rejection::NodeInsufficientDevice { .. })
    ));
    // A Vastai card of count 2 takes two pods; both cards, four.
    let (view, _) = snapshot().to_view();
    let mut state = view.into_state();
    let plan = pod_plan(
        &pod("p", json!({}), json!({"vastaitech.com/va": "2"})),
        &Config::default(),
    )
    .unwrap();
    for uid in ["u-1", "u-2"] {
        let a = state.assign(&plan, "va-1").unwrap();
        state.apply(uid, a).unwrap();
    }
    match state.assign(&plan, "va-1") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardTimeSlicingExhausted), 2)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn xpus_follow_the_eight_card_board() {
    // 8.5: XPU 0 is held. 1, 2 and 4 XPUs from one wing when a wing holds
    // them, the wing with the fewest fitting cards first: two from the
    // left wing's three free ones; four from the right wing; 3 is no
    // board's shape; 8 is a whole board, which XPU 0 breaks.
    assert_eq!(
        place(json!({"kunlunxin.com/xpu": "2"}), "xpu-1"),
        Ok(vec![1, 2])
    );
    assert_eq!(
        place(json!({"kunlunxin.com/xpu": "4"}), "xpu-1"),
        Ok(vec![4, 5, 6, 7])
    );
    assert_eq!(
        reasons(place(json!({"kunlunxin.com/xpu": "3"}), "xpu-1")),
        [
            (Reason::CardTimeSlicingExhausted, 1),
            (Reason::NumaNotFit, 1)
        ]
    );
    assert_eq!(
        reasons(place(json!({"kunlunxin.com/xpu": "8"}), "xpu-1")),
        [
            (Reason::AllocatedCardsInsufficientRequest, 7),
            (Reason::CardTimeSlicingExhausted, 1)
        ]
    );
    // explain says it in words.
    let mut s = snapshot();
    s.pods
        .push(pod("three", json!({}), json!({"kunlunxin.com/xpu": "3"})));
    let e = gpugate::explain::explain(
        &s,
        "ml",
        "three",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    assert!(
        e.asks[0].contains("3 XPUs")
            && e.asks[0].contains(
                "XPUs sit on boards of eight cards in two wings (0-3, 4-7): 3 must be 1, 2, 4 or 8"
            ),
        "{:?}",
        e.asks
    );
}

#[test]
fn sections_read_hamis_key_names() {
    // 8.1: one `kunlun` section names both Kunlunxin backends.
    let c = Config::from_yaml(
        "kunlun:\n  resourceCountName: kunlunxin.com/xpu\n  resourceVCountName: example.org/vxpu\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.kunlun.resource_count_name, "example.org/vxpu");
    assert_eq!(c.kunlun.second().resource_count_name, "kunlunxin.com/xpu");
    // 5.1 and 9.1: the sGPU and DRS names are read as the second kind's,
    // not the whole device's.
    let c = Config::from_yaml(
        "metax:\n  resourceCountName: metax-tech.com/gpu\n  resourceVCountName: example.org/sgpu\n  sgpuTopologyAware: \"false\"\n\
         enflame:\n  resourceNameGCU: enflame.com/gcu\n  resourceNameDRSGCU: enflame.com/drs-gcu\n  resourceNameGCUMemory: enflame.com/gcu-memory\n\
         vastai:\n  resourceCountName: example.org/va\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.metax.resource_count_name, "metax-tech.com/gpu");
    assert_eq!(c.metax.second().resource_count_name, "example.org/sgpu");
    assert_eq!(
        c.metax.second().resource_memory_name,
        "metax-tech.com/vmemory"
    );
    assert_eq!(c.enflame.resource_count_name, "enflame.com/gcu");
    assert_eq!(c.vastai.resource_count_name, "example.org/va");
    let e = pod_request(
        &pod(
            "p",
            json!({}),
            json!({"enflame.com/gcu": "1", "enflame.com/vgcu": "1"}),
        ),
        &c,
    )
    .unwrap_err();
    assert!(e.problem.contains("Enflame shared GCU"), "{e}");
    // The count of a kind read from capacity is the capacity's name: a
    // renamed one would find no device, so the file is refused.
    for yaml in [
        "enflame:\n  resourceNameGCU: example.org/gcu\n",
        "metax:\n  resourceCountName: example.org/gpu\n",
        "kunlun:\n  resourceCountName: example.org/xpu\n",
    ] {
        let e = Config::from_yaml(yaml, "t").unwrap_err().to_string();
        assert!(e.contains("node capacity"), "{yaml}: {e}");
    }
    let e = Config::from_yaml("enflame:\n  resourceNameGUC: x\n", "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("resourceNameGUC"), "{e}");
}

#[test]
fn the_webhook_routes_the_pods_and_leaves_their_resources() {
    // 5.4, 8.4, 9.4, 13.4: found when limits name the count; nothing else
    // is written.
    for resource in [
        "metax-tech.com/gpu",
        "kunlunxin.com/xpu",
        "enflame.com/gcu",
        "vastaitech.com/va",
    ] {
        let Mutation::Patch(ops) = mutate_pod(
            &serde_json::to_value(pod("t", json!({}), json!({resource: "1"}))).unwrap(),
            &Config::default(),
            None,
        ) else {
            panic!("{resource}: not a patch");
        };
        let ops = serde_json::to_string(&ops).unwrap();
        assert!(
            ops.contains("/spec/schedulerName") && !ops.contains("resources"),
            "{resource}: {ops}"
        );
    }
}

/// Vastai's die mode (hami-vendors.md 13.2, 13.5): the first device
/// registers `custominfo.DeviceStrategy` `die`, each die its card (`AIC`).
/// A container's dies come from the card with the most fitting dies
/// first, and nodes rank by the share of a container's dies on one card.
#[test]
fn vastai_dies_come_from_one_card_first() {
    let die = |node: &str, i: u32, aic: &str| {
        json!({"id": format!("VA-{node}-{i}"), "index": i, "count": 1, "devmem": 16384,
               "devcore": 100, "type": "Vastai", "health": true,
               "custominfo": {"DeviceStrategy": "die", "AIC": aic}})
    };
    let node = |name: &str, cards: &[&str]| {
        let dies: Vec<Value> = cards
            .iter()
            .enumerate()
            .map(|(i, aic)| die(name, i as u32, aic))
            .collect();
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
               "annotations": {"hami.io/node-va-register": Value::Array(dies).to_string()}}})
    };
    // va-dies: die 0 on card A, dies 1-3 on card B. va-apart: four cards.
    let nodes = [
        node("va-dies", &["A", "B", "B", "B"]),
        node("va-apart", &["A", "B", "C", "D"]),
    ];
    let text: String = nodes
        .iter()
        .map(|n| format!("---\n{}\n", serde_json::to_string(n).unwrap()))
        .collect();
    let (view, report) = gpugate::cluster::Snapshot::from_yaml(&text, "dies")
        .unwrap()
        .to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    let dies = view.state().node("va-dies").unwrap();
    let groups: Vec<Option<u16>> = dies.gpus.iter().map(|g| g.network()).collect();
    assert_eq!(groups, [Some(0), Some(1), Some(1), Some(1)]);
    let two = pod_plan(
        &pod("p", json!({}), json!({"vastaitech.com/va": "2"})),
        &Config::default(),
    )
    .unwrap();
    // Two dies from card B, not die 0 (card A) and die 1 as index order
    // would give.
    let a = view.state().assign(&two, "va-dies").unwrap();
    assert_eq!(a.gpu_uuids(), ["VA-va-dies-1", "VA-va-dies-2"]);
    // Both nodes hold them; va-dies keeps them on one card.
    let names = ["va-apart".to_string(), "va-dies".to_string()];
    let eval = view.state().evaluate(&two, Some(&names));
    assert_eq!(eval.feasible.len(), 2);
    assert_eq!(eval.best().unwrap().node, "va-dies");
    // A node in card mode registers no cards.
    let (view, _) = snapshot().to_view();
    let cards = view.state().node("va-1").unwrap();
    assert!(cards.gpus.iter().all(|g| g.network().is_none()));
}
