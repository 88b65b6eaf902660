//! Metax GPUs shared as sGPUs (../shared/hami-vendors.md section 5, cited
//! by subsection below): the plugin's own register JSON, HAMi's reading of
//! requests, the app class and QoS rules between the pods of a device, the
//! order a latency-sensitive pod takes devices in, MetaLink zones for
//! whole devices, the ledger's classes, explain's words, the webhook and
//! the `metax` config section. Real Node and Pod fixtures
//! (tests/fixtures/metax-sgpu/cluster.yaml). What bind writes is in
//! tests/bind_api.rs.

mod support {
    pub mod vendor;
}

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::cluster::Snapshot;
use gpugate::cluster::convert::{pod_plan, pod_request};
use gpugate::config::Config;
use gpugate::devices::metax::{decode_sgpu_devices, sgpu_extras};
use gpugate::devices::{ExtraDevice, ExtrasContainer, ExtrasInput, KindId};
use gpugate::engine::request::{GpuRequest, Memory};
use gpugate::engine::tenancy::AppClass;
use gpugate::engine::{Reason, Rejection};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn snapshot() -> Snapshot {
    support::vendor::fixture("metax-sgpu")
}

fn pod(name: &str, annotations: Value, limits: Value) -> Pod {
    support::vendor::one_container_pod(name, annotations, limits)
}

/// The devices (UUIDs) a pod with `annotations` and `limits` takes on
/// `node`, and the cores of its first grant.
fn place(node: &str, annotations: Value, limits: Value) -> Result<(Vec<String>, u32), Rejection> {
    let (view, _) = snapshot().to_view();
    let plan = pod_plan(&pod("p", annotations, limits), &Config::default()).unwrap();
    let a = view.state().assign(&plan, node)?;
    let mut uuids: Vec<String> = a.containers[0].iter().map(|g| g.uuid.clone()).collect();
    uuids.sort();
    Ok((uuids, a.containers[0][0].cores))
}

fn refused(node: &str, annotations: Value, limits: Value) -> gpugate::engine::reason::ReasonCounts {
    match place(node, annotations, limits) {
        Err(Rejection::Devices { counts, .. }) => counts,
        other => panic!("{other:?}"),
    }
}

/// A device as read: UUID, index, sGPUs, MiB, cores, NUMA node, MetaLink
/// zone and QoS policy.
type DeviceRead<'a> = (&'a str, u32, u32, u32, u32, i32, Option<u16>, &'a str);

#[test]
fn devices_are_read_from_the_plugins_json() {
    // 5.2: id = uuid, index = position, count = totalDevCount, devmem =
    // totalVRam, devcore = totalCompute, numa, health; QoS policy and
    // MetaLink zone kept.
    let (view, report) = snapshot().to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let n = view.state().node("sg-1").unwrap();
    let read: Vec<DeviceRead> = n
        .gpus
        .iter()
        .map(|g| {
            (
                g.uuid.as_str(),
                g.index,
                g.capacity.slots,
                g.capacity.mem_mib,
                g.capacity.cores,
                g.numa,
                g.network(),
                g.mode(),
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            ("GPU-a", 0, 16, 65536, 100, 0, Some(1), "best-effort"),
            ("GPU-b", 1, 16, 65536, 100, 0, Some(1), "best-effort"),
            ("GPU-c", 2, 16, 65536, 100, 1, Some(2), "fixed-share"),
            ("GPU-d", 3, 16, 65536, 100, 1, Some(2), "burst-share"),
        ]
    );
    assert!(n.gpus.iter().all(|g| g.kind == KindId::METAX_SGPU));
    // The pods on them, and their classes (5.5: HAMi's PodInfos).
    let used: Vec<(u32, u32, u32)> = n
        .usage
        .iter()
        .map(|u| (u.slots, u.mem_mib, u.cores))
        .collect();
    assert_eq!(
        used,
        [(1, 8192, 0), (1, 16384, 100), (1, 8192, 30), (0, 0, 0)]
    );
    let classes: Vec<(u16, u16)> = (0..4)
        .map(|i| (n.tenants(i).online, n.tenants(i).offline))
        .collect();
    assert_eq!(classes, [(1, 0), (0, 1), (0, 0), (0, 0)]);
    // A device the plugin reports unhealthy is kept, and takes no pod.
    let zones = view.state().node("sg-zones").unwrap();
    assert!(!zones.gpus[2].healthy);
    // A register that cannot be read leaves the node's other kinds placed.
    let bad = view.state().node("sg-bad").unwrap();
    assert_eq!(bad.gpus.len(), 1);
    assert_eq!(bad.gpus[0].kind, KindId::NVIDIA);
    assert!(
        report
            .unregistered_nodes
            .iter()
            .any(|r| r.contains("sg-bad") && r.contains("metax-tech.com/node-gpu-devices")),
        "{report:?}"
    );
}

#[test]
fn a_register_that_is_not_the_plugins_json_says_why() {
    // 5.2: HAMi refuses a register without devices ("no sdevice found on
    // node"); Go's `omitempty` reads an absent number as 0 and an absent
    // `healthy` as false.
    let one = decode_sgpu_devices("n", r#"[{"uuid":"G","totalDevCount":4}]"#).unwrap();
    let d = &one.devices[0];
    assert_eq!(
        (d.slots, d.mem_mib, d.cores, d.healthy, d.network),
        (4, 0, 0, false, None)
    );
    let zone0 = decode_sgpu_devices("n", r#"[{"uuid":"G","linkZone":0}]"#).unwrap();
    assert_eq!(zone0.devices[0].network, None, "zone 0 is no zone");
    let negative = decode_sgpu_devices("n", r#"[{"uuid":"G","linkZone":-3}]"#).unwrap();
    assert_eq!(negative.devices[0].network, None, "HAMi: 0 or less is none");
    for (text, problem) in [
        ("{", "not a JSON array of Metax sGPU devices"),
        (r#"{"uuid":"G"}"#, "not a JSON array"),
        ("[]", "no devices"),
        (r#"[{"totalDevCount":4}]"#, "device 0 has no uuid"),
        (r#"[{"uuid":"G"},{"uuid":"G"}]"#, "\"G\" is listed twice"),
        (
            r#"[{"uuid":"G","totalDevCount":-1}]"#,
            "totalDevCount -1 is out of range (0 to 1024)",
        ),
        (
            r#"[{"uuid":"G","totalDevCount":5000}]"#,
            "totalDevCount 5000 is out of range",
        ),
        (
            r#"[{"uuid":"G","totalCompute":3000000000}]"#,
            "totalCompute 3000000000 is out of range",
        ),
        (r#"[{"uuid":"G","linkZone":40000}]"#, "linkZone 40000"),
        (r#"[{"uuid":"G","totalVRam":"64"}]"#, "not a JSON array"),
    ] {
        let e = decode_sgpu_devices("n", text).unwrap_err();
        assert!(e.contains(problem), "{text}: {e}");
    }
}

#[test]
fn requests_are_read_as_hami_reads_them() {
    // 5.1: count from limits; vcore default 100; vmemory a bare number
    // GiB, a quantity with a letter bytes; no memory is the whole device.
    let config = Config::default();
    let read = |l| pod_request(&pod("p", json!({}), l), &config).map(|r| r.containers[0].gpu);
    let req = |memory, cores| {
        Ok(Some(GpuRequest {
            count: 1,
            memory,
            cores,
        }))
    };
    assert_eq!(
        read(json!({"metax-tech.com/sgpu": "1"})),
        req(Memory::Percent(100), 100)
    );
    assert_eq!(
        read(
            json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "30"})
        ),
        req(Memory::Mib(4096), 30)
    );
    assert_eq!(
        read(json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4Gi"})),
        req(Memory::Mib(4096), 100)
    );
    assert_eq!(
        read(json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4G"})),
        req(Memory::Mib(3814), 100),
        "5.7: 4G is 4e9 bytes"
    );
    // Less than a MiB would be the whole device to HAMi: refused.
    let e =
        read(json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "100Ki"})).unwrap_err();
    assert!(
        e.resource == "metax-tech.com/vmemory" && e.problem.contains("is bytes"),
        "{e}"
    );
    let e = read(json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "120"})).unwrap_err();
    assert!(e.problem.contains("0..=100"), "{e}");
}

#[test]
fn a_device_in_use_takes_pods_of_its_class_only() {
    // 5.5 (`checkAppClass`, `checkDeviceQos`), on sg-1: GPU-a runs an
    // online pod, GPU-b an exclusive offline one, GPU-c an unclassed
    // fixed-share one, GPU-d nothing.
    let small = json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "10"});
    let not_d = |mut a: Value| {
        a["metax-tech.com/nouse-gpuuuid"] = json!("GPU-d");
        a
    };
    // An unclassed best-effort pod: not beside classed pods, not beside
    // fixed-share ones. (GPU-b's cores are all taken: gpugate counts the
    // per-device checks first, HAMi the class.)
    let c = refused(
        "sg-1",
        not_d(json!({"metax-tech.com/sgpu-qos-policy": "best-effort"})),
        small.clone(),
    );
    assert_eq!(c.get(Reason::CardAppClassMismatch), 1, "{c:?}");
    assert_eq!(c.get(Reason::CardQosPolicyMismatch), 1, "{c:?}");
    assert_eq!(c.get(Reason::CardInsufficientCore), 1, "{c:?}");
    // Fixed-share joins GPU-c.
    assert_eq!(
        place(
            "sg-1",
            not_d(json!({"metax-tech.com/sgpu-qos-policy": "fixed-share"})),
            small.clone()
        ),
        Ok((vec!["GPU-c".to_string()], 10))
    );
    // An offline pod: never beside an online one; GPU-b's cores are all
    // taken.
    let c = refused(
        "sg-1",
        not_d(json!({"metax-tech.com/sgpu-app-class": "offline",
                     "metax-tech.com/sgpu-qos-policy": "best-effort"})),
        small.clone(),
    );
    assert_eq!(c.get(Reason::CardAppClassMismatch), 2, "{c:?}");
    assert_eq!(c.get(Reason::CardInsufficientCore), 1, "{c:?}");
    // An online pod joins the exclusive offline pod (its cores are not
    // checked, and it takes none: the plugin suspends the offline pod).
    assert_eq!(
        place(
            "sg-1",
            json!({"metax-tech.com/sgpu-app-class": "online", "metax-tech.com/use-gpuuuid": "GPU-b"}),
            small.clone()
        ),
        Ok((vec!["GPU-b".to_string()], 0))
    );
    // Given the choice, an idle device, then the one with the fewest
    // online pods, and one with offline pods only last (HAMi's
    // `prioritizeOnlineDevices`).
    assert_eq!(
        place(
            "sg-1",
            json!({"metax-tech.com/sgpu-app-class": "online"}),
            small.clone()
        ),
        Ok((vec!["GPU-d".to_string()], 0))
    );
    assert_eq!(
        place(
            "sg-1",
            not_d(json!({"metax-tech.com/sgpu-app-class": "online"})),
            small
        ),
        Ok((vec!["GPU-a".to_string()], 0))
    );
}

#[test]
fn the_ledger_counts_each_pods_class_until_it_is_gone() {
    // 5.5 (`AddResourceUsage`): a pod placed counts on its device until
    // it is forgotten; two offline pods on GPU-d, then one, then none.
    let (view, _) = snapshot().to_view();
    let mut state = view.state().clone();
    let plan = |name: &str, annotations: Value| {
        pod_plan(
            &pod(
                name,
                annotations,
                json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "20"}),
            ),
            &Config::default(),
        )
        .unwrap()
    };
    let offline = plan(
        "p",
        json!({"metax-tech.com/sgpu-app-class": "offline", "metax-tech.com/sgpu-qos-policy": "burst-share",
               "metax-tech.com/use-gpuuuid": "GPU-d"}),
    );
    assert_eq!(offline.tenancy().class, AppClass::Offline);
    for uid in ["u-off-1", "u-off-2"] {
        let a = state.assign(&offline, "sg-1").unwrap();
        assert_eq!(a.containers[0][0].uuid, "GPU-d");
        state.apply(uid, a).unwrap();
    }
    let d = state.node("sg-1").unwrap().tenants(3);
    assert_eq!((d.online, d.offline), (0, 2));
    // GPU-d is an offline device: an unclassed pod is refused it, while
    // one offline pod is left.
    let unclassed = plan(
        "q",
        json!({"metax-tech.com/sgpu-qos-policy": "burst-share", "metax-tech.com/use-gpuuuid": "GPU-d"}),
    );
    let class_refused =
        |state: &gpugate::engine::state::ClusterState| match state.assign(&unclassed, "sg-1") {
            Err(Rejection::Devices { counts, .. }) => counts.get(Reason::CardAppClassMismatch) == 1,
            other => panic!("{other:?}"),
        };
    assert!(class_refused(&state));
    // Preemption's question: with both gone, it fits.
    let a1 = state
        .allocations()
        .find(|(k, _)| *k == "u-off-1")
        .unwrap()
        .1
        .clone();
    let a2 = state
        .allocations()
        .find(|(k, _)| *k == "u-off-2")
        .unwrap()
        .1
        .clone();
    assert!(
        state
            .fit_without(&unclassed, "sg-1", &[("u-off-1", &a1), ("u-off-2", &a2)])
            .is_ok()
    );
    state.remove("u-off-1");
    assert!(class_refused(&state));
    state.remove("u-off-2");
    assert_eq!(state.node("sg-1").unwrap().tenants(3), Default::default());
    // "Could it ever fit": nothing placed, no class counted.
    let empty = view.state().emptied();
    assert_eq!(empty.node("sg-1").unwrap().tenants(0), Default::default());
    assert_eq!(empty.node("sg-1").unwrap().tenants(1), Default::default());
}

#[test]
fn a_pods_own_containers_share_a_device_under_its_policy() {
    // 5.5: HAMi sets the device's policy to the pod's between containers,
    // so two fixed-share containers share GPU-d, which the plugin
    // registered under burst-share.
    let containers: Vec<Value> = (0..2)
        .map(|i| {
            json!({"name": format!("c{i}"), "image": "app",
                   "resources": {"limits": {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4",
                                            "metax-tech.com/vcore": "30"}}})
        })
        .collect();
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "two", "namespace": "ml", "annotations": {
            "metax-tech.com/sgpu-qos-policy": "fixed-share", "metax-tech.com/use-gpuuuid": "GPU-d"}},
        "spec": {"containers": containers}
    }))
    .unwrap();
    let (view, _) = snapshot().to_view();
    let a = view
        .state()
        .assign(&pod_plan(&p, &Config::default()).unwrap(), "sg-1")
        .unwrap();
    let on: Vec<&str> = a
        .containers
        .iter()
        .flatten()
        .map(|g| g.uuid.as_str())
        .collect();
    assert_eq!(on, ["GPU-d", "GPU-d"]);
}

#[test]
fn an_online_pod_chooses_among_equal_devices_by_the_gpu_policy() {
    // 5.5 (`prioritizeOnlineDevices`): GPU-a and GPU-d each hold one online
    // pod; HAMi's candidates come in its GPU policy's order and its sort
    // keeps equal ones in order, so binpack takes the fuller device and
    // spread the emptier one. An online pod's QoS policy is not read.
    let (view, _) = snapshot().to_view();
    let mut state = view.state().clone();
    let online = |policy: &str, limits: Value| {
        pod_plan(
            &pod(
                "o",
                json!({"metax-tech.com/sgpu-app-class": "online", "hami.io/gpu-scheduler-policy": policy,
                       "metax-tech.com/sgpu-qos-policy": "guaranteed"}),
                limits,
            ),
            &Config::default(),
        )
        .unwrap()
    };
    let mut big = online(
        "binpack",
        json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "40"}),
    );
    big.selection.use_uuids = vec!["GPU-d".to_string()];
    let a = state.assign(&big, "sg-1").unwrap();
    state.apply("u-big", a).unwrap();
    let small = json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4"});
    for (policy, want) in [("binpack", "GPU-d"), ("spread", "GPU-a")] {
        let a = state
            .assign(&online(policy, small.clone()), "sg-1")
            .unwrap();
        assert_eq!(a.containers[0][0].uuid, want, "{policy}");
    }
}

#[test]
fn whole_devices_come_from_one_metalink_zone() {
    // 5.5 (`prioritizeExclusiveDevices`), on sg-zones: zone 1 holds one
    // device, zone 2 two healthy ones, zone 3 three.
    let whole = |n: &str| json!({"metax-tech.com/sgpu": n});
    let uuids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        place("sg-zones", json!({}), whole("2")).map(|p| p.0),
        Ok(uuids(&["GPU-z2a", "GPU-z2b"])),
        "the smallest zone that holds two"
    );
    assert_eq!(
        place("sg-zones", json!({}), whole("3")).map(|p| p.0),
        Ok(uuids(&["GPU-z3a", "GPU-z3b", "GPU-z3c"]))
    );
    assert_eq!(
        place("sg-zones", json!({}), whole("4")).map(|p| p.0),
        Ok(uuids(&["GPU-z1a", "GPU-z2a", "GPU-z2b", "GPU-z3a"])),
        "no zone holds four: zone by zone, the smallest first"
    );
    // A shared slice is the GPU policy's choice alone: the lowest indexes
    // among idle devices, across zones.
    assert_eq!(
        place(
            "sg-zones",
            json!({"metax-tech.com/sgpu-qos-policy": "best-effort"}),
            json!({"metax-tech.com/sgpu": "2", "metax-tech.com/vcore": "10"}),
        )
        .map(|p| p.0),
        Ok(uuids(&["GPU-z1a", "GPU-z2a"]))
    );
}

#[test]
fn explain_says_which_class_a_device_holds() {
    let mut snap = snapshot();
    snap.pods.push(pod(
        "plain",
        json!({"metax-tech.com/sgpu-qos-policy": "best-effort", "metax-tech.com/nouse-gpuuuid": "GPU-d"}),
        json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "10"}),
    ));
    let e = gpugate::explain::explain(
        &snap,
        "ml",
        "plain",
        &Config::default(),
        jiff::Timestamp::now(),
    )
    .unwrap();
    let node = e
        .nodes
        .iter()
        .find(|n| n.node == "sg-1")
        .unwrap_or_else(|| panic!("{e:#?}"));
    let words = &node.refusal.as_ref().unwrap().words;
    for want in [
        "1 of 4 sGPUs hold pods of another app class (metax-tech.com/sgpu-app-class",
        "1 of 4 sGPUs are shared under another QoS policy than the pod's (metax-tech.com/sgpu-qos-policy",
    ] {
        assert!(words.contains(want), "{want:?} in {words}");
    }
}

#[test]
fn what_the_plugin_reads_beside_the_lists() {
    // 5.3: each container's devices, `[]` for one without, compute and
    // vRam left out when 0 (Go's `omitempty`), and the time in ns.
    let device = |uuid: &str, mem_mib, cores| ExtraDevice {
        index: 0,
        uuid: uuid.to_string(),
        mem_mib,
        cores,
        slots: 1,
        profile: None,
        minor: String::new(),
    };
    let input = ExtrasInput {
        node: "sg-1",
        core_resource: "metax-tech.com/vcore",
        now_unix_nanos: 1_700_000_000_123_456_789,
        containers: vec![
            ExtrasContainer::default(),
            ExtrasContainer {
                name: "main".into(),
                count_in_limits: true,
                devices: vec![device("GPU-a", 4096, 0), device("GPU-b", 65536, 100)],
            },
        ],
    };
    assert_eq!(
        sgpu_extras(&input),
        [
            (
                "metax-tech.com/gpu-devices-allocated",
                r#"[[],[{"uuid":"GPU-a","vRam":4096},{"uuid":"GPU-b","compute":100,"vRam":65536}]]"#
                    .to_string()
            ),
            (
                "metax-tech.com/predicate-time",
                "1700000000123456789".to_string()
            ),
        ]
    );
    let none = ExtrasInput {
        containers: vec![ExtrasContainer::default()],
        ..input
    };
    assert!(sgpu_extras(&none).is_empty());
}

#[test]
fn the_webhook_sets_the_qos_policy_and_refuses_hamis_errors() {
    // 5.4: no class and no policy → best-effort; online → nothing; a
    // class other than online/offline, a class with more than one device,
    // or an unknown policy → refused.
    let review = |annotations: Value, count: &str| {
        let p = pod("p", annotations, json!({"metax-tech.com/sgpu": count}));
        mutate_pod(&serde_json::to_value(p).unwrap(), &Config::default(), None)
    };
    let ops = |m: Mutation| match m {
        Mutation::Patch(ops) => serde_json::to_string(&ops).unwrap(),
        other => panic!("{other:?}"),
    };
    let plain = ops(review(json!({}), "2"));
    assert!(
        plain.contains(r#"sgpu-qos-policy","value":"best-effort""#)
            && plain.contains(r#""value":"hami-scheduler""#),
        "{plain}"
    );
    let online = ops(review(
        json!({"metax-tech.com/sgpu-app-class": "online"}),
        "1",
    ));
    assert!(!online.contains("qos-policy"), "{online}");
    let fixed = ops(review(
        json!({"metax-tech.com/sgpu-qos-policy": "fixed-share"}),
        "1",
    ));
    assert!(!fixed.contains("best-effort"), "{fixed}");
    for (annotations, count, problem) in [
        (
            json!({"metax-tech.com/sgpu-app-class": "gold"}),
            "1",
            "\"gold\": allowed \"online\" or \"offline\"",
        ),
        (
            json!({"metax-tech.com/sgpu-app-class": "offline"}),
            "2",
            "asks for one device",
        ),
        (
            json!({"metax-tech.com/sgpu-qos-policy": "gold"}),
            "1",
            "allowed best-effort, fixed-share, burst-share",
        ),
    ] {
        match review(annotations.clone(), count) {
            Mutation::Deny(d) => {
                assert!(d.message.contains(problem), "{annotations}: {}", d.message);
            }
            other => panic!("{annotations}: {other:?}"),
        }
    }
    // The extender refuses the same bad class, never places it.
    let e = pod_plan(
        &pod(
            "p",
            json!({"metax-tech.com/sgpu-app-class": "gold"}),
            json!({"metax-tech.com/sgpu": "1"}),
        ),
        &Config::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("metax-tech.com/sgpu-app-class"),
        "{e}"
    );
}
