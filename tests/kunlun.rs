//! Kunlunxin vXPUs (../shared/hami-vendors.md section 8, cited by
//! subsection below): the JSON inventory, the three sizes with cores by
//! share, one size per card, the eight-card board's wings and links, the
//! `kunlun` config section and `explain`. Real Node and Pod fixtures
//! (tests/fixtures/kunlun/cluster.yaml). What bind writes is in
//! tests/bind_api.rs.

use std::path::Path;

use gpugate::cluster::Snapshot;
use gpugate::cluster::convert::{pod_plan, pod_request};
use gpugate::config::Config;
use gpugate::devices::KindId;
use gpugate::engine::Rejection;
use gpugate::engine::request::{GpuRequest, Memory};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn snapshot() -> Snapshot {
    Snapshot::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kunlun/cluster.yaml"),
    )
    .unwrap()
}

fn pod(name: &str, annotations: Value, limits: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "kunlun",
                                 "resources": {"limits": limits}}]}
    }))
    .unwrap()
}

fn vxpus(count: &str, memory: Option<&str>) -> Value {
    let mut limits = json!({"kunlunxin.com/vxpu": count});
    if let Some(m) = memory {
        limits["kunlunxin.com/vxpu-memory"] = json!(m);
    }
    limits
}

/// The card indexes the pod gets on `node`, or the rejection.
fn place(limits: Value, node: &str, gpu_policy: &str) -> Result<Vec<u32>, Rejection> {
    let config = Config::default();
    let (view, _) = snapshot().to_view();
    let p = pod(
        "p",
        json!({"hami.io/gpu-scheduler-policy": gpu_policy}),
        limits,
    );
    let plan = pod_plan(&p, &config).unwrap();
    let a = view.state().assign(&plan, node)?;
    let n = view.state().node(node).unwrap();
    let mut indexes: Vec<u32> = a
        .gpu_uuids()
        .iter()
        .map(|u| n.gpus.iter().find(|g| &g.uuid == u).unwrap().index)
        .collect();
    indexes.sort_unstable();
    Ok(indexes)
}

#[test]
fn cards_hold_four_quarters_whatever_the_split_count_says() {
    // 8.2 and 8.8: HAMi does not read the split count (1 here); a 96 GiB
    // card holds four quarters.
    let (view, report) = snapshot().to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    let n = view.state().node("xpu-1").unwrap();
    assert!(n.gpus.iter().all(|g| g.kind == KindId::KUNLUN_VXPU));
    let cap = n.gpus[0].capacity;
    assert_eq!((cap.slots, cap.mem_mib, cap.cores), (4, 98304, 100));
    let used = n.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 24576, 25));
}

#[test]
fn requests_take_a_quarter_a_half_or_the_card() {
    // 8.1: memory rounded up to 24,576, 49,152 or 98,304 MiB; cores the
    // same share; no memory is the whole card.
    let config = Config::default();
    let read = |limits: Value| {
        pod_request(&pod("p", json!({}), limits), &config)
            .map(|r| (r.device_kind, r.containers[0].gpu.unwrap()))
    };
    let x = |count, mib, cores| {
        Ok((
            KindId::KUNLUN_VXPU,
            GpuRequest {
                count,
                memory: Memory::Mib(mib),
                cores,
            },
        ))
    };
    assert_eq!(read(vxpus("1", None)), x(1, 98304, 100));
    assert_eq!(read(vxpus("1", Some("10000"))), x(1, 24576, 25));
    assert_eq!(read(vxpus("2", Some("24576"))), x(2, 24576, 25));
    assert_eq!(read(vxpus("1", Some("30000"))), x(1, 49152, 50));
    assert_eq!(read(vxpus("1", Some("60000"))), x(1, 98304, 100));
    // Above a card: refused (HAMi takes a card and the pod runs short).
    let e = read(vxpus("1", Some("200000"))).unwrap_err();
    assert_eq!(e.resource, "kunlunxin.com/vxpu-memory");
    assert!(e.problem.contains("98304 MiB"), "{e}");
    // Whole XPUs are another kind (tests/whole_devices.rs): a pod asking
    // for both takes each under its own rules on one node.
    let r = pod_request(
        &pod(
            "p",
            json!({}),
            json!({"kunlunxin.com/xpu": "1", "kunlunxin.com/vxpu": "1"}),
        ),
        &config,
    )
    .unwrap();
    assert_eq!(r.device_kinds(), [KindId::KUNLUN_VXPU, KindId::KUNLUN_XPU]);
}

#[test]
fn a_card_holds_one_size_at_a_time() {
    // 8.5: on a used card the average used memory per vXPU must equal the
    // request. xpu-1's card 0 holds a quarter: a half goes elsewhere, a
    // quarter may join it.
    let config = Config::default();
    let (view, _) = snapshot().to_view();
    let plan = pod_plan(&pod("h", json!({}), vxpus("8", Some("40000"))), &config).unwrap();
    match view.state().assign(&plan, "xpu-1") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(gpugate::engine::Reason::CardTemplateMismatch), 1)
        }
        other => panic!("{other:?}"),
    }
    // Binpack fills the used card first with a quarter; a half never.
    assert_eq!(
        place(vxpus("1", Some("20000")), "xpu-1", "binpack"),
        Ok(vec![0])
    );
    assert_ne!(
        place(vxpus("1", Some("40000")), "xpu-1", "binpack"),
        Ok(vec![0])
    );
}

#[test]
fn the_board_takes_one_wing_or_links_across() {
    // 8.5 on xpu-2 (cards 1, 2 and 5 unhealthy: left wing fits 0 and 3,
    // right wing 4, 6 and 7), by card index (HAMi counts places in its
    // sorted list, 8.8).
    for policy in ["binpack", "spread"] {
        // Two: the wing with exactly two fitting cards.
        assert_eq!(
            place(vxpus("2", None), "xpu-2", policy),
            Ok(vec![0, 3]),
            "{policy}"
        );
        // Four: no wing has four; the first linked group that fits.
        assert_eq!(
            place(vxpus("4", None), "xpu-2", policy),
            Ok(vec![0, 3, 4, 7]),
            "{policy}"
        );
        // One: a wing with exactly one, else three (HAMi's order 1, 3, 2, 4):
        // the right wing, keeping the left wing's pair.
        let one = place(vxpus("1", None), "xpu-2", policy).unwrap();
        assert!([4, 6, 7].contains(&one[0]), "{policy}: {one:?}");
        // Three: five cards fit, but no board takes three (NumaNotFit, as
        // HAMi says); eight: only five cards fit.
        for (n, reason) in [
            ("3", gpugate::engine::Reason::NumaNotFit),
            ("8", gpugate::engine::Reason::CardNotHealth),
        ] {
            match place(vxpus(n, None), "xpu-2", policy) {
                Err(Rejection::Devices { counts, .. }) => {
                    assert!(counts.get(reason) > 0, "{n}: {counts:?}")
                }
                other => panic!("{n}: {other:?}"),
            }
        }
    }
    // A whole healthy board takes eight.
    let config = Config::default();
    let (view, _) = snapshot().to_view();
    let plan = pod_plan(&pod("e", json!({}), vxpus("8", Some("20000"))), &config).unwrap();
    assert_eq!(
        view.state()
            .assign(&plan, "xpu-1")
            .unwrap()
            .gpu_uuids()
            .len(),
        8
    );
}

#[test]
fn the_kunlun_section_reads_hamis_key_names() {
    // 8.1: resourceVCountName and resourceVMemoryName name the vXPU
    // resources; resourceCountName (whole XPUs) is accepted and ignored.
    let c = Config::from_yaml(
        "kunlun:\n  resourceCountName: kunlunxin.com/xpu\n  resourceVCountName: example.org/vxpu\n  resourceVMemoryName: example.org/vxpu-mem\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.kunlun.resource_count_name, "example.org/vxpu");
    assert_eq!(c.kunlun.resource_memory_name, "example.org/vxpu-mem");
    assert_eq!(c.kunlun.kind, KindId::KUNLUN_VXPU);
    let d = Config::default();
    assert_eq!(d.kunlun.resource_count_name, "kunlunxin.com/vxpu");
    // HAMi's whole-XPU name never becomes the vXPU count: it is the
    // whole XPUs' (tests/whole_devices.rs).
    let c = Config::from_yaml("kunlun:\n  resourceCountName: kunlunxin.com/xpu\n", "t").unwrap();
    assert_eq!(c.kunlun.resource_count_name, "kunlunxin.com/vxpu");
    assert_eq!(c.kunlun.second().kind, KindId::KUNLUN_XPU);
    let e = Config::from_yaml("kunlun:\n  resourceVCountNmae: x\n", "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("resourceVCountNmae"), "{e}");
}

#[test]
fn explain_shows_the_board_and_the_size_rule() {
    let e = gpugate::explain::explain(
        &snapshot(),
        "ml",
        "three",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    assert!(
        e.asks[0].contains("3 XPUs with 98304 MiB and 100 cores each")
            && e.asks[0]
                .contains("boards of eight cards in two wings (0-3, 4-7): 3 must be 1, 2, 4 or 8"),
        "{:?}",
        e.asks
    );
    // A size another pod's size blocks, in words.
    let mut s = snapshot();
    s.pods
        .push(pod("halves", json!({}), vxpus("8", Some("40000"))));
    let e = gpugate::explain::explain(
        &s,
        "ml",
        "halves",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    let words = e
        .nodes
        .iter()
        .find(|n| n.node == "xpu-1")
        .and_then(|n| n.refusal.as_ref())
        .map(|r| r.words.clone())
        .unwrap_or_default();
    assert!(
        words.contains("1 of 8 XPUs hold slices of another size"),
        "{words}"
    );
    assert!(e.asks[0].contains("template half of XPU"), "{:?}", e.asks);
}

#[test]
fn the_webhook_rounds_a_given_memory_only() {
    // 8.4: a `vxpu-memory` limit is rounded and written to limits and
    // requests; a container without it gets none (its plugin may not
    // advertise the resource).
    use gpugate::admission::mutate::{Mutation, mutate_pod};
    let config = Config::default();
    let raw = |limits: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "x", "namespace": "ml"},
               "spec": {"containers": [{"name": "main", "image": "kunlun",
                                        "resources": {"limits": limits}}]}})
    };
    let Mutation::Patch(ops) = mutate_pod(&raw(vxpus("1", Some("40000"))), &config, None) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        ops.contains(r#""path":"/spec/containers/0/resources/limits/kunlunxin.com~1vxpu-memory","value":"49152""#)
            && ops.contains(r#""path":"/spec/containers/0/resources/requests","value":{"kunlunxin.com/vxpu-memory":"49152"}"#),
        "{ops}"
    );
    let Mutation::Patch(ops) = mutate_pod(&raw(vxpus("2", None)), &config, None) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    assert!(
        !ops.contains("vxpu-memory") && ops.contains("schedulerName"),
        "{ops}"
    );
}
