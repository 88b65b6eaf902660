//! Enflame GCUs split into DRS slices (../shared/hami-vendors.md section
//! 9, cited by subsection below): the plugin's own register JSON, the
//! profile a request takes, a profile's slices of one GCU, a HAMi v2.10
//! list read back as its profile's slices, `ModeNotFit` in words, the
//! webhook's mirroring and refusals, the `enflame` config section. Real
//! Node and Pod fixtures (tests/fixtures/enflame-drs/cluster.yaml). What
//! bind writes is in tests/bind_api.rs.

mod support {
    pub mod vendor;
}

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::cluster::Snapshot;
use gpugate::cluster::convert::{pod_plan, pod_request};
use gpugate::config::Config;
use gpugate::devices::KindId;
use gpugate::devices::enflame::decode_drs_capacity;
use gpugate::engine::request::{GpuRequest, Memory};
use gpugate::engine::{Reason, Rejection};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn snapshot() -> Snapshot {
    support::vendor::fixture("enflame-drs")
}

fn pod(name: &str, limits: Value) -> Pod {
    support::vendor::one_container_pod(
        name,
        json!({"hami.io/gpu-scheduler-policy": "binpack"}),
        limits,
    )
}

/// The GCU index `limits` takes on drs-1, and its slices.
fn place(limits: Value) -> Result<(u32, u32), Rejection> {
    place_on("drs-1", limits)
}

/// The GCU index `limits` takes on `node`, and its slices.
fn place_on(node: &str, limits: Value) -> Result<(u32, u32), Rejection> {
    let (view, _) = snapshot().to_view();
    let plan = pod_plan(&pod("p", limits), &Config::default()).unwrap();
    let a = view.state().assign(&plan, node)?;
    let n = view.state().node(node).unwrap();
    let g = &a.containers[0][0];
    Ok((support::vendor::index_of(n, &g.uuid), g.slots))
}

#[test]
fn gcus_and_profiles_are_read_from_the_plugins_json() {
    // 9.2: `<node>-enflame-drs-<index>` (the position when the index is
    // not a number), slices as capacity (number or string), the largest
    // profile's memory; minor, else the index. A v2.10 list (four fields)
    // counts its profile's slices (9.7: HAMi counts one after a restart).
    let (view, report) = snapshot().to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let n = view.state().node("drs-1").unwrap();
    let ids: Vec<&str> = n.gpus.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(ids, ["drs-1-enflame-drs-0", "drs-1-enflame-drs-1"]);
    assert!(n.gpus.iter().all(|g| g.kind == KindId::ENFLAME_DRS));
    let cap = n.gpus[1].capacity;
    // Six slices of 17 cores each: 102, so that all six fit (9.7).
    assert_eq!((cap.slots, cap.mem_mib, cap.cores), (6, 40960, 102));
    let used = n.usage[0];
    assert_eq!((used.slots, used.mem_mib, used.cores), (3, 20480, 50));
    let names: Vec<(&str, u32, u32, u32)> = n
        .profiles()
        .profiles
        .iter()
        .map(|p| (p.name.as_str(), p.slices, p.mem_mib, p.cores))
        .collect();
    assert_eq!(
        names,
        [
            ("1g.6gb", 1, 6144, 17),
            ("3g.20gb", 3, 20480, 50),
            ("6g.40gb", 6, 40960, 100)
        ]
    );
    assert_eq!(n.profiles().minor("drs-1-enflame-drs-0"), "8");
    // Two containers' four-field entries on one GCU: each counts its own
    // profile's slices (3 + 1), not one each.
    let two = view.state().node("drs-two").unwrap().usage[0];
    assert_eq!((two.slots, two.mem_mib, two.cores), (4, 26624, 67));
    assert_eq!(n.profiles().minor("drs-1-enflame-drs-1"), "1");
    // A register that cannot be read leaves the node's other kinds placed.
    let mixed = view.state().node("mixed-1").unwrap();
    assert_eq!(mixed.gpus.len(), 1);
    assert_eq!(mixed.gpus[0].kind, KindId::NVIDIA);
    assert!(
        report
            .unregistered_nodes
            .iter()
            .any(|r| r.contains("mixed-1") && r.contains("enflame.com/gcu-drs-capacity")),
        "{report:?}"
    );
}

#[test]
fn a_register_that_is_not_the_plugins_json_says_why() {
    // 9.2, table: what HAMi refuses and what gpugate reads more leniently.
    let ok = |text: &str| decode_drs_capacity("n", text).map(|i| i.devices.len());
    assert_eq!(
        ok(r#"{"devices":[{"index":0,"minor":3,"capacity":"4"}],"profiles":{"2G.10GB":2}}"#),
        Ok(1),
        "numbers for strings, any case"
    );
    for (text, problem) in [
        ("{", "not the DRS capacity JSON"),
        (r#"{"devices":[{"capacity":6}]}"#, "no profile"),
        (
            r#"{"devices":[{"capacity":6}],"profiles":{"1g.6g":"0","6gg.40gb":"1"}}"#,
            "no profile named <slices>g.<GB>gb with both numbers",
        ),
        (
            r#"{"devices":[{"capacity":6}],"profiles":{"big":"0"}}"#,
            "no profile",
        ),
        (r#"{"devices":[],"profiles":{"1g.6gb":"0"}}"#, "no devices"),
        (
            r#"{"devices":[{"capacity":0}],"profiles":{"1g.6gb":"0"}}"#,
            "capacity 0",
        ),
        (
            r#"{"devices":[{"capacity":1.5}],"profiles":{"1g.6gb":"0"}}"#,
            "capacity 1.5",
        ),
        (
            r#"{"devices":[{"capacity":"many"}],"profiles":{"1g.6gb":"0"}}"#,
            "capacity \"many\"",
        ),
        (
            r#"{"devices":[{"index":"1","capacity":6},{"index":"1","capacity":6}],"profiles":{"1g.6gb":"0"}}"#,
            "index 1 given twice",
        ),
        (
            r#"{"devices":[{"capacity":6}],"profiles":{"1g.9999999gb":"0"}}"#,
            "more memory than a device holds",
        ),
        (
            r#"{"devices":[{"capacity":6}],"profiles":{"5000g.6gb":"0"}}"#,
            "5000 slices",
        ),
    ] {
        let e = decode_drs_capacity("n", text).unwrap_err();
        assert!(e.contains(problem), "{text}: {e}");
    }
    // A profile whose GB is not a number still counts for the slices.
    let i = decode_drs_capacity(
        "n",
        r#"{"devices":[{"capacity":4}],"profiles":{"4g.x":"9","1g.5gb":"0"}}"#,
    )
    .unwrap();
    assert_eq!(i.profiles.len(), 1);
    assert_eq!(i.profiles[0].cores, 25, "1 of 4 slices");
}

#[test]
fn requests_are_a_size_or_memory_and_cores() {
    // 9.1: `drs-gcu: n` is one GCU of n slices; otherwise memory and
    // cores, either or both, one GCU. 9.4's refusals.
    let config = Config::default();
    let read = |l| pod_request(&pod("p", l), &config).map(|r| r.containers[0].gpu);
    assert_eq!(
        read(json!({"enflame.com/drs-gcu": "3", "enflame.com/gcu-memory": "40"})),
        Ok(Some(GpuRequest {
            count: 1,
            memory: Memory::Slices(3),
            cores: 0
        }))
    );
    assert_eq!(
        read(json!({"enflame.com/gcu-memory": "20", "enflame.com/gcu-core": "30"})),
        Ok(Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(20),
            cores: 30
        }))
    );
    for (limits, resource, problem) in [
        (
            json!({"enflame.com/drs-gcu": "0"}),
            "drs-gcu",
            "0: allowed 1..=",
        ),
        (json!({"enflame.com/gcu-memory": "0"}), "gcu-memory", "0"),
        (json!({"enflame.com/gcu-core": "101"}), "gcu-core", "101"),
        (json!({"enflame.com/gcu-core": "0"}), "gcu-core", "0"),
        (
            json!({"enflame.com/gcu-memory": "20Gi"}),
            "gcu-memory",
            "20Gi is bytes",
        ),
    ] {
        let e = read(limits.clone()).unwrap_err();
        assert!(
            e.resource.ends_with(resource)
                && e.problem.contains(problem.split(' ').next().unwrap()),
            "{limits}: {e}"
        );
        if problem.contains("bytes") {
            assert!(e.problem.contains("is bytes"), "{e}");
        }
    }
}

#[test]
fn a_profile_takes_its_slices_of_one_gcu() {
    // 9.5: the profile by size, or the smallest holding memory (GB, or MiB
    // above twice the largest GB) and cores. Binpack: GCU 0 (3 of 6 slices
    // used) first. A profile needs all its slices free (HAMi v2.10 asks
    // for one, 9.7): six slices go to GCU 1.
    assert_eq!(place(json!({"enflame.com/drs-gcu": "3"})), Ok((0, 3)));
    assert_eq!(place(json!({"enflame.com/drs-gcu": "6"})), Ok((1, 6)));
    assert_eq!(place(json!({"enflame.com/gcu-memory": "7"})), Ok((0, 3)));
    assert_eq!(
        place(json!({"enflame.com/gcu-memory": "20481"})),
        Ok((1, 6)),
        "20481 MiB is 21 GB"
    );
    assert_eq!(place(json!({"enflame.com/gcu-core": "17"})), Ok((0, 1)));
    // Only the slices are short: a GCU of four slices has the memory and
    // cores of 6g.40gb (HAMi v2.10 would place it there).
    match place_on("drs-small", json!({"enflame.com/drs-gcu": "6"})) {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(
                counts.get(Reason::CardTimeSlicingExhausted),
                1,
                "{counts:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        place_on("drs-small", json!({"enflame.com/drs-gcu": "3"})),
        Ok((0, 3))
    );
    // No profile of 2 slices, nor of 41 GB: HAMi's ModeNotFit.
    for limits in [
        json!({"enflame.com/drs-gcu": "2"}),
        json!({"enflame.com/gcu-memory": "41"}),
    ] {
        match place(limits.clone()) {
            Err(Rejection::ModeNotFit { profiles, .. }) => {
                assert_eq!(profiles, "1g.6gb, 3g.20gb, 6g.40gb")
            }
            other => panic!("{limits}: {other:?}"),
        }
    }
}

#[test]
fn six_one_slice_profiles_fill_a_gcu_and_a_seventh_is_refused() {
    // 9.7: HAMi counts 100 cores and refuses the sixth (5 × 17 = 85); the
    // plugin splits a GCU into six. gpugate fits six, then refuses.
    let (view, _) = snapshot().to_view();
    let mut state = view.state().clone();
    let mut plan = pod_plan(
        &pod("p", json!({"enflame.com/drs-gcu": "1"})),
        &Config::default(),
    )
    .unwrap();
    plan.selection.use_uuids = vec!["drs-1-enflame-drs-1".to_string()];
    for i in 0..6 {
        let a = state
            .assign(&plan, "drs-1")
            .unwrap_or_else(|e| panic!("{i}: {e}"));
        assert_eq!(a.containers[0][0].uuid, "drs-1-enflame-drs-1");
        state.apply(&format!("u{i}"), a).unwrap();
    }
    let used = state.node("drs-1").unwrap().usage[1];
    assert_eq!((used.slots, used.mem_mib, used.cores), (6, 36864, 102));
    match state.assign(&plan, "drs-1") {
        Err(Rejection::Devices { counts, .. }) => {
            assert_eq!(
                counts.get(Reason::CardTimeSlicingExhausted),
                1,
                "{counts:?}"
            );
            assert_eq!(counts.get(Reason::CardUuidMismatch), 1, "{counts:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn explain_says_which_profiles_the_node_has() {
    let mut snap = snapshot();
    snap.pods
        .push(pod("two-slices", json!({"enflame.com/drs-gcu": "2"})));
    let e = gpugate::explain::explain(
        &snap,
        "ml",
        "two-slices",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    let drs = e
        .nodes
        .iter()
        .find(|n| n.node == "drs-1")
        .unwrap_or_else(|| panic!("{e:#?}"));
    let r = drs.refusal.as_ref().unwrap();
    assert_eq!(r.code, "ModeNotFit");
    assert_eq!(
        r.words,
        "container main asks for a profile of 2 slices, and no profile the node's GCUs split \
         into (1g.6gb, 3g.20gb, 6g.40gb) gives it"
    );
}

#[test]
fn the_webhook_mirrors_requests_into_limits_and_refuses_hamis_errors() {
    // 9.4: the slice count, or memory and cores, written into the limits
    // of a container that gives only requests.
    let mut only_requests = serde_json::to_value(pod("p", json!({}))).unwrap();
    only_requests["spec"]["containers"][0]["resources"] =
        json!({"requests": {"enflame.com/gcu-memory": "20", "enflame.com/gcu-core": "50"}});
    let Mutation::Patch(ops) = mutate_pod(&only_requests, &Config::default(), None) else {
        panic!("not a patch");
    };
    let ops = serde_json::to_string(&ops).unwrap();
    for want in [
        r#""path":"/spec/containers/0/resources/limits","value":{"enflame.com/gcu-core":"50","enflame.com/gcu-memory":"20"}"#,
        r#""value":"hami-scheduler""#,
    ] {
        assert!(ops.contains(want), "{want} in {ops}");
    }
    match mutate_pod(
        &serde_json::to_value(pod("p", json!({"enflame.com/gcu-core": "120"}))).unwrap(),
        &Config::default(),
        None,
    ) {
        Mutation::Deny(d) => {
            let d = format!("{d:?}");
            assert!(
                d.contains("enflame.com/gcu-core") && d.contains("1..=100"),
                "{d}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_enflame_section_names_both_backends() {
    // 9.1: `resourceNameDRSGCU`, `resourceNameGCUMemory`,
    // `resourceNameGCUCore` are the DRS kind's; `resourceNameGCU` the
    // whole GCU's.
    let c = Config::from_yaml(
        "enflame:\n  resourceNameGCU: enflame.com/gcu\n  resourceNameDRSGCU: example.org/drs\n  \
         resourceNameGCUMemory: example.org/mem\n  resourceNameGCUCore: example.org/core\n  \
         resourceNameVGCU: enflame.com/vgcu\n",
        "t",
    )
    .unwrap();
    let drs = c.enflame.second();
    assert_eq!(drs.kind, KindId::ENFLAME_DRS);
    assert_eq!(
        (
            drs.resource_count_name.as_str(),
            drs.resource_memory_name.as_str(),
            drs.resource_core_name.as_str()
        ),
        ("example.org/drs", "example.org/mem", "example.org/core")
    );
    assert_eq!(c.enflame.resource_count_name, "enflame.com/gcu");
}
