//! Hygon DCUs, the second device kind (../shared/hami-vendors.md section 3,
//! cited by subsection below): the legacy-text inventory, the request
//! defaults, the shared slice-fit loop (1.11) on DCUs only, and the
//! one-kind-per-pod rule. Real Node and Pod fixtures
//! (tests/fixtures/hygon/cluster.yaml, tests/fixtures/pods/dcu-*.yaml);
//! `/filter` over real TLS. What bind writes is in tests/bind_api.rs.

mod support {
    pub mod https;
}

use std::path::Path;
use std::sync::Arc;

use gpugate::admission::validate::{Validation, validate_pod};
use gpugate::cluster::convert::pod_request;
use gpugate::cluster::{SharedCluster, Snapshot};
use gpugate::config::Config;
use gpugate::devices::KindId;
use gpugate::engine::request::{GpuRequest, Memory};
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use support::https::{Server, post_json, start};

fn manifest(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn yaml(path: &str) -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(manifest(path)).unwrap()).unwrap()
}

fn snapshot() -> Snapshot {
    Snapshot::load(&manifest("tests/fixtures/hygon/cluster.yaml")).unwrap()
}

/// A pod of one container with these limits.
fn pod(name: &str, annotations: Value, limits: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": limits}}]}
    })
}

async fn server(config: Config) -> Server {
    let (view, report) = snapshot().to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let cluster = Arc::new(SharedCluster::new(view, true));
    let state = AppState::with_cluster(config, Metrics::new(None), Some(cluster));
    start(state, Limits::default()).await
}

/// The nodes `/filter` keeps for `pod` among all of the fixture's, and
/// the reasons of those it drops.
async fn filter(s: &Server, pod: &Value) -> (Vec<String>, Value) {
    let out = post_json(
        s,
        "/filter",
        json!({"Pod": pod, "NodeNames": ["dcu-1", "dcu-2", "mixed", "gpu-only", "hcu-1"]}),
    )
    .await;
    let kept = out["NodeNames"]
        .as_array()
        .map(|a| a.iter().map(|n| n.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    let mut kept: Vec<String> = kept;
    kept.sort();
    (kept, reasons(&out))
}

/// Every dropped node's reason: kube-scheduler's `FailedNodes` and
/// `FailedAndUnresolvableNodes` in one map.
fn reasons(out: &Value) -> Value {
    let mut all = serde_json::Map::new();
    for key in ["FailedNodes", "FailedAndUnresolvableNodes"] {
        if let Some(m) = out[key].as_object() {
            all.extend(m.clone());
        }
    }
    Value::Object(all)
}

#[test]
fn legacy_text_registers_read_as_dcus() {
    // 3.2: `uuid,count,devmem,devcore,type,numa,health[,index,mode]:`.
    let (view, report) = snapshot().to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    let state = view.state();
    let dcu1 = state.node("dcu-1").unwrap();
    let got: Vec<(&str, u32, KindId, u32, u32)> = dcu1
        .gpus
        .iter()
        .map(|g| {
            (
                g.uuid.as_str(),
                g.index,
                g.kind,
                g.capacity.slots,
                g.capacity.mem_mib,
            )
        })
        .collect();
    // The 7-field form has no index: the registration order is the index.
    assert_eq!(
        got,
        [
            ("DCU-1-0", 0, KindId::HYGON, 4, 65520),
            ("DCU-1-1", 1, KindId::HYGON, 4, 65520),
            ("DCU-1-2", 2, KindId::HYGON, 4, 32752),
            ("DCU-1-3", 3, KindId::HYGON, 4, 32752),
        ]
    );
    assert_eq!(dcu1.gpus[2].numa, 1);
    assert_eq!(dcu1.gpus[0].model, "DCU-Z100L");
    // The 9-field form: index and health as registered; a mode HAMi's DCU
    // backend never reads still shares by slices.
    let dcu2 = state.node("dcu-2").unwrap();
    assert_eq!(
        dcu2.gpus
            .iter()
            .map(|g| (g.index, g.healthy))
            .collect::<Vec<_>>(),
        [(0, true), (1, false)]
    );
    // A node registered by two device plugins holds both kinds.
    let mixed = state.node("mixed").unwrap();
    let mut kinds: Vec<KindId> = mixed.gpus.iter().map(|g| g.kind).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [KindId::NVIDIA, KindId::NVIDIA, KindId::HYGON, KindId::HYGON]
    );
    // The pod HAMi placed holds its slice, read from the list HAMi
    // writes (an entry for the DCU container only; 1.5).
    let a = view
        .held_allocation("6a0c1d2e-0000-4000-8000-0000000dc000")
        .unwrap();
    let grants: Vec<_> = a.containers.iter().flatten().collect();
    assert_eq!(grants.len(), 1);
    assert_eq!(
        (
            grants[0].uuid.as_str(),
            grants[0].kind,
            grants[0].mem_mib,
            grants[0].cores
        ),
        ("DCU-1-0", KindId::HYGON, 8000, 50)
    );
    let used = dcu1.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 8000, 50));
}

#[test]
fn requests_follow_hamis_dcu_defaults() {
    // 3.1: count from limits else requests; memory in MiB times
    // memoryFactor; cores default 100 (whole DCUs); no request without
    // hygon.com/dcunum.
    let config = Config::default();
    let read = |limits: Value| {
        let p: Pod = serde_json::from_value(pod("p", json!({}), limits)).unwrap();
        pod_request(&p, &config).map(|r| (r.device_kind, r.containers[0].gpu))
    };
    let dcu = |count, memory, cores| {
        Ok((
            KindId::HYGON,
            Some(GpuRequest {
                count,
                memory,
                cores,
            }),
        ))
    };
    assert_eq!(
        read(json!({"hygon.com/dcunum": "1"})),
        dcu(1, Memory::Percent(100), 100)
    );
    // 3.7: a count with memory only is exclusive too.
    assert_eq!(
        read(json!({"hygon.com/dcunum": "2", "hygon.com/dcumem": "4000"})),
        dcu(2, Memory::Mib(4000), 100)
    );
    assert_eq!(
        read(
            json!({"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "60"})
        ),
        dcu(1, Memory::Mib(2000), 60)
    );
    assert_eq!(
        read(json!({"hygon.com/dcunum": "1", "hygon.com/dcucores": "0"})),
        dcu(1, Memory::Percent(100), 0)
    );
    // Refused with the resource named where HAMi drops the request or
    // clamps it (3.1, 3.7).
    for (limits, resource, needle) in [
        (
            json!({"hygon.com/dcumem": "2000"}),
            "hygon.com/dcumem",
            "hygon.com/dcunum",
        ),
        (
            json!({"hygon.com/dcunum": "1", "hygon.com/dcucores": "150"}),
            "hygon.com/dcucores",
            "more than 100",
        ),
        (
            json!({"hygon.com/dcunum": "-1"}),
            "hygon.com/dcunum",
            "negative",
        ),
    ] {
        let e = read(limits.clone()).unwrap_err();
        assert_eq!(e.resource, resource, "{limits}");
        assert!(e.problem.contains(needle), "{limits}: {e}");
    }
    // The section's memoryFactor scales DCU memory, not NVIDIA's.
    let scaled = Config::from_yaml("hygon:\n  memoryFactor: 2\n", "t").unwrap();
    let p: Pod = serde_json::from_value(pod(
        "p",
        json!({}),
        json!({"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000"}),
    ))
    .unwrap();
    assert_eq!(
        pod_request(&p, &scaled).unwrap().containers[0]
            .gpu
            .unwrap()
            .memory,
        Memory::Mib(2000)
    );
    assert_eq!(scaled.nvidia.memory_factor, 1);
}

#[test]
fn the_hygon_section_keeps_its_own_defaults() {
    // A key left out keeps the DCU default, not NVIDIA's.
    let c = Config::from_yaml("hygon:\n  memoryFactor: 4\n", "t").unwrap();
    assert_eq!(c.hygon.resource_count_name, "hygon.com/dcunum");
    assert_eq!(c.hygon.resource_memory_name, "hygon.com/dcumem");
    assert_eq!(c.hygon.default_cores, 100);
    assert_eq!(c.hygon.kind, KindId::HYGON);
    assert_eq!(c.hygon.memory_factor, 4);
    assert_eq!(
        Config::default().hygon.resource_core_name,
        "hygon.com/dcucores"
    );
    // HAMi's section with its legacy names is taken as is.
    let renamed = Config::from_yaml(
        "hygon:\n  resourceCountName: hygon.com/gpu\n  resourceMemoryName: hygon.com/gpumem\n",
        "t",
    )
    .unwrap();
    assert_eq!(renamed.hygon.resource_count_name, "hygon.com/gpu");
    // A name two kinds would read, a typo, a bad value: refused.
    for (text, needle) in [
        (
            "hygon:\n  resourceCountName: nvidia.com/gpu\n",
            "nvidia.com/gpu is a resource of both nvidia and hygon",
        ),
        ("hygon:\n  resourceCountNmae: x\n", "resourceCountNmae"),
        ("hygon:\n  defaultCores: 101\n", "hygon.defaultCores"),
        ("hygon: [1]\n", "hygon"),
    ] {
        let e = Config::from_yaml(text, "t").unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[tokio::test]
async fn dcu_pods_take_dcus_only_and_gpu_pods_gpus_only() {
    let s = server(Config::default()).await;
    // 1.3: a request sees only its vendor's devices.
    let dcu = yaml("tests/fixtures/pods/dcu-slice.yaml");
    let (kept, failed) = filter(&s, &dcu).await;
    assert_eq!(kept, ["dcu-1", "dcu-2", "mixed"], "{failed}");
    let gpu = pod(
        "gpu",
        json!({}),
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
    );
    let (kept, failed) = filter(&s, &gpu).await;
    assert_eq!(kept, ["gpu-only", "mixed"], "{failed}");
    // The reasons, answered when no node is feasible.
    for (pod, node) in [(&dcu, "gpu-only"), (&gpu, "dcu-1")] {
        let out = post_json(&s, "/filter", json!({"Pod": pod, "NodeNames": [node]})).await;
        let reason = reasons(&out)[node].as_str().unwrap_or_default().to_string();
        assert!(
            reason.contains("2/2 CardTypeMismatch") || reason.contains("4/4 CardTypeMismatch"),
            "{out}"
        );
    }
}

#[tokio::test]
async fn the_slice_fit_loop_judges_dcus() {
    // 1.11 as 3.5 applies it.
    let s = server(Config::default()).await;
    let dcus = |count: &str, extra: Value| {
        let mut limits = json!({"hygon.com/dcunum": count});
        for (k, v) in extra.as_object().unwrap() {
            limits[k] = v.clone();
        }
        limits
    };
    // Step 10: 100 cores (the default) do not fit beside ml/hami-placed's
    // 50. dcu-1 has three idle DCUs and that used one: four DCUs of
    // 1,000 MiB at 100 cores do not fit, three do.
    let small = json!({"hygon.com/dcumem": "1000"});
    let (kept, failed) = filter(&s, &pod("four", json!({}), dcus("4", small.clone()))).await;
    assert!(kept.is_empty(), "{failed}");
    let reason = failed["dcu-1"].as_str().unwrap();
    assert!(reason.contains("1/4 CardInsufficientCore"), "{reason}");
    let (kept, _) = filter(&s, &pod("three", json!({}), dcus("3", small))).await;
    assert_eq!(kept, ["dcu-1"]);
    // Step 9 before 11: a whole DCU's memory is not free on the used one.
    let (_, failed) = filter(&s, &pod("four", json!({}), dcus("4", json!({})))).await;
    let reason = failed["dcu-1"].as_str().unwrap();
    assert!(reason.contains("1/4 CardInsufficientMemory"), "{reason}");
    // Step 1: dcu-2's second DCU is unhealthy.
    let two = pod("two", json!({}), dcus("2", json!({})));
    let out = post_json(&s, "/filter", json!({"Pod": two, "NodeNames": ["dcu-2"]})).await;
    let failed = reasons(&out);
    assert!(
        failed["dcu-2"]
            .as_str()
            .unwrap()
            .contains("1/2 CardNotHealth"),
        "{failed}"
    );
    // Step 9: memory per DCU; 70,000 MiB fits no DCU.
    let big = dcus(
        "1",
        json!({"hygon.com/dcumem": "70000", "hygon.com/dcucores": "10"}),
    );
    let (kept, failed) = filter(&s, &pod("big", json!({}), big)).await;
    assert!(kept.is_empty(), "{failed}");
    assert!(
        failed["dcu-1"]
            .as_str()
            .unwrap()
            .contains("CardInsufficientMemory"),
        "{failed}"
    );
    // Steps 2 and 4: hygon.com/use-dcutype (words of the registered type)
    // and hygon.com/use-gpuuuid (3.3).
    let slice = dcus(
        "1",
        json!({"hygon.com/dcumem": "1000", "hygon.com/dcucores": "10"}),
    );
    let (kept, _) = filter(
        &s,
        &pod(
            "k100",
            json!({"hygon.com/use-dcutype": "K100"}),
            slice.clone(),
        ),
    )
    .await;
    assert_eq!(kept, ["dcu-2"]);
    let (kept, _) = filter(
        &s,
        &pod(
            "by-uuid",
            json!({"hygon.com/use-gpuuuid": "DCU-M-1"}),
            slice.clone(),
        ),
    )
    .await;
    assert_eq!(kept, ["mixed"]);
    let (kept, _) = filter(
        &s,
        &pod(
            "not-z100l",
            json!({"hygon.com/nouse-dcutype": "Z100L"}),
            slice,
        ),
    )
    .await;
    assert_eq!(kept, ["dcu-1", "dcu-2"]);
}

#[tokio::test]
async fn a_pod_asking_for_two_kinds_takes_both_on_a_node_holding_both() {
    // hami-vendors.md 1.3: HAMi fits each vendor's request on the node's
    // devices of that vendor; a pod asking for an NVIDIA GPU and a DCU goes
    // to a node holding both.
    let two = yaml("tests/fixtures/pods/gpu-and-dcu.yaml");
    assert!(matches!(
        validate_pod(&two, &Config::default(), None),
        Validation::Allow { .. }
    ));
    let p: Pod = serde_json::from_value(two.clone()).unwrap();
    let r = pod_request(&p, &Config::default()).unwrap();
    assert_eq!(r.device_kind, KindId::NVIDIA);
    assert_eq!(r.also.len(), 1);
    assert_eq!(r.also[0].device_kind, KindId::HYGON);
    assert_eq!(r.device_kinds(), [KindId::NVIDIA, KindId::HYGON]);
    let s = server(Config::default()).await;
    let out = post_json(
        &s,
        "/filter",
        json!({"Pod": two, "NodeNames": ["dcu-1", "mixed", "gpu-only"]}),
    )
    .await;
    assert_eq!(out["NodeNames"], json!(["mixed"]), "{out}");
    // A node without DCUs is refused for its DCUs, named as such.
    let (view, _) = snapshot().to_view();
    let plan = gpugate::cluster::convert::pod_plan(&p, &Config::default()).unwrap();
    match view.state().assign(&plan, "gpu-only") {
        Err(e @ gpugate::engine::Rejection::OfKind { kind, .. }) => {
            assert_eq!(kind, KindId::HYGON);
            assert!(e.to_string().contains("Hygon DCUs"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(view.state().assign(&plan, "dcu-1").is_err());
    // On the mixed node both kinds are granted, each on its own devices.
    let a = view.state().assign(&plan, "mixed").unwrap();
    let kinds: Vec<KindId> = a.containers.iter().flatten().map(|d| d.kind).collect();
    assert_eq!(kinds, [KindId::NVIDIA, KindId::HYGON]);
    assert!(a.containers[0][0].uuid.starts_with("GPU-M-"));
    assert!(a.containers[1][0].uuid.starts_with("DCU-M-"));
    // A DCU pod that names an NVIDIA count of 0 is a DCU pod.
    let zero_gpu = pod(
        "zero",
        json!({}),
        json!({"nvidia.com/gpu": "0", "hygon.com/dcunum": "1"}),
    );
    let p: Pod = serde_json::from_value(zero_gpu).unwrap();
    let r = pod_request(&p, &Config::default()).unwrap();
    assert_eq!(r.device_kind, KindId::HYGON);
    assert!(r.has_gpus());
}

#[test]
fn the_webhook_routes_a_dcu_pod_and_leaves_its_containers_alone() {
    // 3.4: HAMi's webhook finds the pod and changes nothing in it.
    use gpugate::admission::mutate::{Mutation, mutate_pod};
    let dcu = yaml("tests/fixtures/pods/dcu-slice.yaml");
    let Mutation::Patch(ops) = mutate_pod(&dcu, &Config::default(), None) else {
        panic!("a DCU pod is patched");
    };
    assert_eq!(
        serde_json::to_value(&ops).unwrap(),
        json!([{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}])
    );
    // A count alone gets no hygon.com/dcucores (the node may not advertise
    // it); the scheduler reads the default 100.
    let whole = pod("whole", json!({}), json!({"hygon.com/dcunum": "1"}));
    let Mutation::Patch(ops) = mutate_pod(&whole, &Config::default(), None) else {
        panic!("a DCU pod is patched");
    };
    assert_eq!(
        serde_json::to_value(&ops)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(matches!(
        validate_pod(&dcu, &Config::default(), None),
        Validation::Allow { .. }
    ));
}

#[tokio::test]
async fn hcus_are_a_kind_of_their_own_under_hami_masters_names() {
    // 3.8: HAMi master renamed the backend HCU: its own register, lists,
    // resources and type annotations; the UUID annotations unchanged.
    let (view, _) = snapshot().to_view();
    let hcu1 = view.state().node("hcu-1").unwrap();
    assert!(hcu1.gpus.iter().all(|g| g.kind == KindId::HCU));
    let config = Config::default();
    let hcu = pod(
        "hcu",
        json!({}),
        json!({"hygon.com/hcunum": "1", "hygon.com/hcumem": "2000", "hygon.com/hcucores": "30"}),
    );
    let p: Pod = serde_json::from_value(hcu.clone()).unwrap();
    let r = pod_request(&p, &config).unwrap();
    assert_eq!(r.device_kind, KindId::HCU);
    assert_eq!(
        r.containers[0].gpu,
        Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(2000),
            cores: 30
        })
    );
    let s = server(config).await;
    let (kept, _) = filter(&s, &hcu).await;
    assert_eq!(kept, ["hcu-1"]);
    // A DCU pod never takes an HCU, and the other way round.
    let (kept, _) = filter(&s, &yaml("tests/fixtures/pods/dcu-slice.yaml")).await;
    assert!(!kept.contains(&"hcu-1".to_string()), "{kept:?}");
    let picky = pod(
        "picky",
        json!({"hygon.com/use-hcutype": "K100AI", "hygon.com/use-gpuuuid": "HCU-1-1"}),
        json!({"hygon.com/hcunum": "1"}),
    );
    let (kept, _) = filter(&s, &picky).await;
    assert_eq!(kept, ["hcu-1"]);
    let wrong_type = pod(
        "wrong-type",
        json!({"hygon.com/use-hcutype": "Z100"}),
        json!({"hygon.com/hcunum": "1"}),
    );
    let (kept, _) = filter(&s, &wrong_type).await;
    assert!(kept.is_empty(), "{kept:?}");
    // HAMi master's hygon section copied into gpugate's DCU section is
    // refused with where the names belong.
    let e = Config::from_yaml("hygon:\n  resourceCountName: hygon.com/hcunum\n", "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("give HCU names in the hcu section"), "{e}");
    let c = Config::from_yaml("hcu:\n  memoryFactor: 2\n", "t").unwrap();
    assert_eq!(c.hcu.resource_count_name, "hygon.com/hcunum");
    assert_eq!(c.hcu.memory_factor, 2);
}

#[test]
fn explain_speaks_of_dcus_and_their_keys() {
    // `gpugate explain` on a pending DCU pod: its request, each node's
    // reason and the summary counted in DCUs, with the DCU kind's
    // annotations and resources, never NVIDIA's.
    let e = gpugate::explain::explain(
        &snapshot(),
        "ml",
        "big-dcu",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    assert_eq!(e.status, "pending");
    let json = serde_json::to_string(&e).unwrap();
    assert!(!json.contains("nvidia.com"), "{json}");
    // What is written for a person counts DCUs (the reason codes' terse
    // texts, kube-scheduler's, keep HAMi's words).
    let mut text: Vec<String> = e.asks.clone();
    text.extend(e.never.clone());
    for n in &e.nodes {
        text.extend(n.refusal.as_ref().map(|r| r.words.clone()));
        text.extend(n.missing.clone());
    }
    for t in &text {
        assert!(!t.contains("GPU"), "{t}");
    }
    assert!(
        json.contains("4 DCUs with 40000 MiB and 100 cores each"),
        "{json}"
    );
    let words = |node: &str| {
        e.nodes
            .iter()
            .find(|n| n.node == node)
            .and_then(|n| n.refusal.as_ref())
            .map(|r| r.words.clone())
            .unwrap_or_default()
    };
    // dcu-1: only DCU-1-0 and DCU-1-1 hold 40,000 MiB, and DCU-1-0's
    // cores are half taken.
    assert!(
        words("dcu-1").contains("have too few free cores (hygon.com/dcucores)"),
        "{}",
        words("dcu-1")
    );
    // A node without DCUs has none to offer (hami-vendors.md 1.3).
    assert_eq!(
        words("gpu-only"),
        "container train asks for 4 DCUs and the node has 0"
    );
    assert!(
        words("mixed").contains("of another kind of device"),
        "{}",
        words("mixed")
    );
}

#[test]
fn a_kind_turned_off_is_left_to_another_scheduler() {
    // The switch: `scheduler.disabledDeviceKinds` leaves a kind's
    // pods to another scheduler (HAMi's, say, while a fleet moves over):
    // the mutating webhook skips them, the validating webhook admits them
    // unjudged, and `/filter` refuses them with the reason; other kinds are
    // placed as before.
    let config = Config::from_yaml("scheduler:\n  disabledDeviceKinds: [hygon]\n", "t").unwrap();
    assert!(!config.kind_enabled(KindId::HYGON));
    assert!(config.kind_enabled(KindId::NVIDIA));
    let dcu = yaml("tests/fixtures/pods/dcu-slice.yaml");
    assert!(matches!(
        gpugate::admission::mutate::mutate_pod(&dcu, &config, None),
        gpugate::admission::mutate::Mutation::Skip(_)
    ));
    // Even a request the DCU rules refuse is the other scheduler's to judge.
    let over = pod(
        "over",
        json!({}),
        json!({"hygon.com/dcunum": "1", "hygon.com/dcucores": "150"}),
    );
    assert!(matches!(
        validate_pod(&over, &config, None),
        Validation::Allow { .. }
    ));
    let p: Pod = serde_json::from_value(dcu).unwrap();
    let e = pod_request(&p, &config).unwrap_err();
    assert!(
        e.problem
            .contains("leaves to another scheduler (scheduler.disabledDeviceKinds names hygon)"),
        "{e}"
    );
    let gpu: Pod =
        serde_json::from_value(pod("gpu", json!({}), json!({"nvidia.com/gpu": "1"}))).unwrap();
    assert!(pod_request(&gpu, &config).is_ok());
    let e = Config::from_yaml("scheduler:\n  disabledDeviceKinds: [ascend]\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"ascend\", which is not a device kind: allowed nvidia, hygon"),
        "{e}"
    );
}
