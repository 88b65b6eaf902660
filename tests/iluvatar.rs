//! Iluvatar GPUs (../shared/hami-vendors.md section 6, cited by subsection
//! below): one kind per chip of HAMi's chart, the legacy text register,
//! requests in 256 MiB units, the shared slice-fit loop, several GPUs made
//! whole by the webhook's cores (clamped to 100 per GPU), the `iluvatars`
//! config section and `SOL_CONTINER_NAME`. Real Node and Pod fixtures
//! (tests/fixtures/iluvatar/cluster.yaml). What bind writes is in
//! tests/bind_api.rs.

mod support {
    pub mod vendor;
}

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::cluster::Snapshot;
use gpugate::cluster::convert::{pod_plan, pod_request};
use gpugate::config::Config;
use gpugate::devices::{KindId, iluvatar};
use gpugate::engine::request::{GpuRequest, Memory};
use gpugate::engine::{Reason, Rejection};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn snapshot() -> Snapshot {
    support::vendor::fixture("iluvatar")
}

fn pod(annotations: Value, limits: Value) -> Pod {
    support::vendor::one_container_pod("p", annotations, limits)
}

/// BI-V150 limits: count, memory units, cores.
fn v150(count: &str, units: Option<&str>, cores: Option<&str>) -> Value {
    let mut l = json!({"iluvatar.ai/BI-V150-vgpu": count});
    if let Some(u) = units {
        l["iluvatar.ai/BI-V150.vMem"] = json!(u);
    }
    if let Some(c) = cores {
        l["iluvatar.ai/BI-V150.vCore"] = json!(c);
    }
    l
}

/// The indexes of the GPUs `limits` takes on `node` (binpack).
fn place(limits: Value, node: &str) -> Result<Vec<u32>, Rejection> {
    let (view, _) = snapshot().to_view();
    let plan = pod_plan(
        &pod(json!({"hami.io/gpu-scheduler-policy": "binpack"}), limits),
        &Config::default(),
    )
    .unwrap();
    let a = view.state().assign(&plan, node)?;
    let n = view.state().node(node).unwrap();
    Ok(a.gpu_uuids()
        .iter()
        .map(|u| support::vendor::index_of(n, u))
        .collect())
}

#[test]
fn each_chip_is_a_kind_read_from_its_legacy_text_register() {
    // 6.2: `hami.io/node-<cw>-register`, HAMi's legacy text (7 or 9
    // fields); the list HAMi wrote counts on BI-V150-0.
    let (view, report) = snapshot().to_view();
    assert!(report.unregistered_nodes.is_empty(), "{report:?}");
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let n = view.state().node("il-1").unwrap();
    let words: Vec<&str> = iluvatar::CHIPS.iter().map(|k| k.vendor).collect();
    assert_eq!(words, ["MR-V100", "MR-V50", "BI-V150", "BI-V100"]);
    let v150 = KindId::at(KindId::ILUVATAR_FIRST.index() + 2).unwrap();
    assert_eq!(v150.kind().vendor, "BI-V150");
    assert!(n.gpus.iter().all(|g| g.kind == v150));
    assert_eq!(n.gpus[0].capacity.mem_mib, 32768);
    let used = n.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (1, 4096, 25));
    let m = view.state().node("il-2").unwrap();
    assert_eq!(m.gpus.len(), 2);
    assert!(!m.gpus[1].healthy);
}

#[test]
fn requests_are_in_256_mib_units_with_no_default_cores() {
    // 6.1: vMem × 256; cores 0 unless given; no memory is the whole GPU.
    let config = Config::default();
    let read = |limits| pod_request(&pod(json!({}), limits), &config).map(|r| r.containers[0].gpu);
    assert_eq!(
        read(v150("1", Some("16"), Some("25"))),
        Ok(Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(4096),
            cores: 25
        }))
    );
    assert_eq!(
        read(v150("1", None, None)),
        Ok(Some(GpuRequest {
            count: 1,
            memory: Memory::Percent(100),
            cores: 0
        }))
    );
    // 6.4, 1.11 step 7: the webhook's 100 per GPU of a multi-GPU
    // container is read as 100 per GPU, not refused.
    assert_eq!(
        read(v150("3", None, Some("300"))).map(|g| g.map(|g| g.cores)),
        Ok(Some(100))
    );
    let e = read(v150("1", Some("x"), None)).unwrap_err();
    assert_eq!(e.resource, "iluvatar.ai/BI-V150.vMem");
}

#[test]
fn slices_fit_by_the_shared_loop() {
    // 6.5: Template T. BI-V150-0 holds 4,096 MiB and 25 cores: binpack
    // stacks a slice there; a GPU of 30,000 MiB fits only the others.
    assert_eq!(
        place(v150("1", Some("16"), Some("25")), "il-1"),
        Ok(vec![0])
    );
    assert_eq!(
        place(v150("1", Some("118"), Some("10")), "il-1").map(|v| v.len()),
        Ok(1)
    );
    assert_ne!(
        place(v150("1", Some("118"), Some("10")), "il-1"),
        Ok(vec![0])
    );
    // Four whole GPUs (the webhook's 400 cores, read as 100 each): one is
    // held, so three fit and four do not.
    match place(v150("4", None, Some("400")), "il-1") {
        Err(Rejection::Devices { counts, .. }) => assert_eq!(
            counts.iter().collect::<Vec<_>>(),
            [
                (Reason::AllocatedCardsInsufficientRequest, 3),
                (Reason::CardInsufficientMemory, 1)
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        place(v150("3", None, Some("300")), "il-1"),
        Ok(vec![1, 2, 3])
    );
    // il-2's unhealthy GPU takes nothing; another chip's request sees
    // BI-V150s as another type (1.3).
    let mr = json!({"iluvatar.ai/MR-V100-vgpu": "2"});
    match place(mr.clone(), "il-2") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardNotHealth), 1, "{counts:?}")
        }
        other => panic!("{other:?}"),
    }
    match place(mr, "il-1") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(counts.get(Reason::CardTypeMismatch), 4, "{counts:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_iluvatars_section_reads_each_chip_by_common_word() {
    // 6.1: a list of chips; an entry gives only what differs.
    let c = Config::from_yaml(
        "iluvatars:\n  - chipName: BI-V150\n    commonWord: BI-V150\n    resourceCountName: example.org/v150\n",
        "t",
    )
    .unwrap();
    let v150 = KindId::at(KindId::ILUVATAR_FIRST.index() + 2).unwrap();
    let cfg = c.device_config(v150);
    assert_eq!(cfg.resource_count_name, "example.org/v150");
    assert_eq!(cfg.resource_memory_name, "iluvatar.ai/BI-V150.vMem");
    assert_eq!(cfg.memory_factor, 256);
    for (yaml, want) in [
        (
            "iluvatars:\n  - commonWord: BI-V200\n",
            "not a chip gpugate places",
        ),
        (
            "iluvatars:\n  - commonWord: MR-V50\n  - commonWord: MR-V50\n",
            "comes twice",
        ),
        ("iluvatars:\n  - chipName: MR-V50\n", "has no commonWord"),
        (
            "iluvatars:\n  - commonWord: MR-V50\n    templates: []\n    memoryAllocatable: 1\n",
            "vnpus keys",
        ),
    ] {
        let e = Config::from_yaml(yaml, "t").unwrap_err().to_string();
        assert!(e.contains(want), "{yaml}: {e}");
    }
}

#[test]
fn the_webhook_makes_several_gpus_whole_and_names_the_container() {
    // 6.4: count > 1 in limits → vCore = count × 100; SOL_CONTINER_NAME
    // (HAMi's spelling) unless set.
    let patch = |limits: Value, env: Value| {
        let mut p = serde_json::to_value(pod(json!({}), limits)).unwrap();
        p["spec"]["containers"][0]["env"] = env;
        match mutate_pod(&p, &Config::default(), None) {
            Mutation::Patch(ops) => serde_json::to_string(&ops).unwrap(),
            other => panic!("{other:?}"),
        }
    };
    let ops = patch(v150("2", None, None), json!([]));
    assert!(
        ops.contains(
            r#"{"op":"add","path":"/spec/containers/0/resources/limits/iluvatar.ai~1BI-V150.vCore","value":"200"}"#
        ),
        "{ops}"
    );
    assert!(
        ops.contains(r#"{"name":"SOL_CONTINER_NAME","value":"main"}"#),
        "{ops}"
    );
    assert!(ops.contains("/spec/schedulerName"), "{ops}");
    // One GPU: cores as written; a container that sets the name keeps it.
    let ops = patch(
        v150("1", Some("16"), Some("30")),
        json!([{"name": "SOL_CONTINER_NAME", "value": "mine"}]),
    );
    assert!(!ops.contains("vCore") && !ops.contains("SOL_"), "{ops}");
}
