//! Kueue's admission check over 1,000 random fragmented clusters, built
//! as real Kubernetes objects (Nodes registered as HAMi's device plugin
//! does, Pods carrying HAMi's allocation annotations, a Workload as Kueue
//! v0.17 writes it): the check answers Ready only for a workload whose
//! pods the extender's own path (`simulate`: /filter's judgement and
//! bind's reservation, pod by pod, as a gang) then places, whole; Retry
//! only for one it cannot place now but could on the same nodes with
//! every device free; Rejected only for one it could not place even then.

mod support {
    pub mod rng;
}

use std::collections::BTreeMap;

use gpugate::cluster::Snapshot;
use gpugate::config::Config;
use gpugate::kueue::check::{Answer, answer};
use gpugate::kueue::workload::Workload;
use gpugate::simulate::simulate;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use support::rng::Rng;

const GPU_MIB: u32 = 16_000;

#[derive(Debug, Clone)]
struct PodSetCase {
    count: u32,
    gpus: u32,
    mib: u32,
    policy: Option<&'static str>,
}

/// A cluster of 2 to 4 nodes of 1 to 4 GPUs, fragmented by up to 12
/// running slices, and a workload of one or two pod sets.
fn case(seed: u64) -> (String, String, Vec<PodSetCase>) {
    let mut rng = Rng::of_seed(seed);
    let nodes: Vec<u64> = (0..2 + rng.below(3)).map(|_| 1 + rng.below(4)).collect();
    let mut docs = Vec::new();
    for (n, &gpus) in nodes.iter().enumerate() {
        let devices: Vec<String> = (0..gpus)
            .map(|g| format!(r#"{{"id":"n{n}-{g}","index":{g},"count":4,"devmem":{GPU_MIB},"devcore":100,"type":"T4","health":true}}"#))
            .collect();
        docs.push(format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n{n}\n  annotations:\n    hami.io/node-nvidia-register: '[{}]'\n",
            devices.join(",")
        ));
    }
    let mut used: BTreeMap<(usize, u64), (u32, u32)> = BTreeMap::new();
    for i in 0..rng.below(13) {
        let node = rng.below(nodes.len() as u64) as usize;
        let gpu = rng.below(nodes[node]);
        let mib = rng.pick(&[2000u32, 4000, 6000, 8000, 10000]);
        let u = used.entry((node, gpu)).or_default();
        if u.0 + mib > GPU_MIB || u.1 == 4 {
            continue;
        }
        u.0 += mib;
        u.1 += 1;
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: r{i}\n  namespace: other\n  uid: r{i}\n  annotations:\n    hami.io/vgpu-node: n{node}\n    hami.io/vgpu-devices-allocated: 'n{node}-{gpu},NVIDIA,{mib},0:;'\nspec:\n  nodeName: n{node}\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '1', nvidia.com/gpumem: '{mib}'}}}}}}]\nstatus: {{phase: Running}}\n"
        ));
    }
    let sets: Vec<PodSetCase> = (0..1 + rng.below(2))
        .map(|_| PodSetCase {
            count: 1 + rng.below(3) as u32,
            gpus: rng.pick(&[1u32, 1, 1, 2]),
            mib: rng.pick(&[4000u32, 8000, 12000, 16000]),
            policy: rng.pick(&[None, Some("binpack"), Some("spread")]),
        })
        .collect();
    let nodes_only = docs
        .iter()
        .filter(|d| d.contains("kind: Node"))
        .cloned()
        .collect::<Vec<_>>()
        .join("---\n");
    (docs.join("---\n"), nodes_only, sets)
}

fn template(set: &PodSetCase, labels: Value) -> Value {
    let mut annotations = json!({});
    if let Some(p) = set.policy {
        annotations["hami.io/node-scheduler-policy"] = json!(p);
    }
    json!({
        "metadata": {"labels": labels, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {
                "nvidia.com/gpu": set.gpus.to_string(),
                "nvidia.com/gpumem": set.mib.to_string(),
            }}}],
        },
    })
}

/// The Workload Kueue v0.17 makes for a Job of these pod sets, with quota
/// reserved and gpugate's check Pending.
fn workload(sets: &[PodSetCase]) -> Value {
    let pod_sets: Vec<Value> = sets
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"name": format!("set{i}"), "count": s.count, "template": template(s, json!({}))}))
        .collect();
    let assignments: Vec<Value> = sets
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"name": format!("set{i}"), "count": s.count, "flavors": {"nvidia.com/gpu": "default-flavor"}}))
        .collect();
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-train-1a2b3", "namespace": "team", "uid": "wl-uid", "resourceVersion": "7"},
        "spec": {"podSets": pod_sets, "queueName": "lq"},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admissionChecks": [{"name": "gpugate", "state": "Pending", "message": ""}],
        },
    })
}

/// The pods the Job makes once admitted: the templates with the labels of
/// the check's podSetUpdates.
fn job_pods(sets: &[PodSetCase], updates: &[Value]) -> Vec<Pod> {
    let mut pods = Vec::new();
    for (i, s) in sets.iter().enumerate() {
        let labels = updates
            .iter()
            .find(|u| u["name"] == format!("set{i}"))
            .map(|u| u["labels"].clone())
            .unwrap_or(json!({}));
        for k in 0..s.count {
            let mut t = template(s, labels.clone());
            t["metadata"]["name"] = json!(format!("set{i}-{k}"));
            t["metadata"]["namespace"] = json!("team");
            t["metadata"]["uid"] = json!(format!("pod-{i}-{k}"));
            t["spec"]["schedulerName"] = json!("hami-scheduler");
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod"});
            pod["metadata"] = t["metadata"].clone();
            pod["spec"] = t["spec"].clone();
            pods.push(serde_json::from_value(pod).unwrap());
        }
    }
    pods
}

/// As a gang (the labels the check writes), through the extender's path.
fn all_placed(cluster: &str, sets: &[PodSetCase], updates: &[Value]) -> bool {
    let snapshot = Snapshot::from_yaml(cluster, "case").unwrap();
    let pods = job_pods(sets, updates);
    let report = simulate(&snapshot, &pods, &Config::default(), Timestamp::now());
    report.placements.len() == pods.len()
}

/// The labels the check would write, for a workload it does not admit
/// (so that the oracle places its pods as the same gang).
fn gang_updates(sets: &[PodSetCase]) -> Vec<Value> {
    let total: u32 = sets.iter().map(|s| s.count).sum();
    (0..sets.len())
        .map(|i| {
            json!({"name": format!("set{i}"), "labels": {
                "pod-group.scheduling.sigs.k8s.io/name": "job-train-1a2b3",
                "pod-group.scheduling.sigs.k8s.io/min-available": total.to_string(),
            }})
        })
        .collect()
}

#[test]
fn the_check_answers_ready_exactly_when_the_extender_places_the_workload() {
    let config = Config::default();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in 0..1000u64 {
        let (cluster, nodes_only, sets) = case(seed);
        let snapshot = Snapshot::from_yaml(&cluster, "case").unwrap();
        let (view, _) = snapshot.to_view();
        let wl = Workload::read(&workload(&sets)).unwrap();
        let got = answer(&view, &config, &wl, &BTreeMap::new(), &|_| None);
        let why = || format!("seed {seed}: {sets:?}\n{cluster}\nanswer: {got:?}");
        match &got {
            Answer::Ready(r) => {
                *counts.entry("ready").or_default() += 1;
                let total: u32 = sets.iter().map(|s| s.count).sum();
                assert_eq!(r.holds.len(), total as usize, "{}", why());
                // The places held are free now, all at once.
                let mut state = view.state().clone();
                for (k, a) in &r.holds {
                    state
                        .apply_hold(k, a.clone())
                        .unwrap_or_else(|e| panic!("{e:?}: {}", why()));
                }
                assert!(
                    state
                        .nodes()
                        .all(|n| n.gpus.iter().zip(&n.usage).all(|(g, u)| {
                            u.mem_mib <= g.capacity.mem_mib && u.slots <= g.capacity.slots
                        })),
                    "{}",
                    why()
                );
                assert!(all_placed(&cluster, &sets, &r.pod_set_updates), "{}", why());
            }
            Answer::Retry(message) => {
                *counts.entry("retry").or_default() += 1;
                assert!(message.contains("needed"), "{}", why());
                assert!(
                    !all_placed(&cluster, &sets, &gang_updates(&sets)),
                    "{}",
                    why()
                );
                assert!(
                    all_placed(&nodes_only, &sets, &gang_updates(&sets)),
                    "{}",
                    why()
                );
            }
            Answer::Rejected(_) => {
                *counts.entry("rejected").or_default() += 1;
                assert!(
                    !all_placed(&nodes_only, &sets, &gang_updates(&sets)),
                    "{}",
                    why()
                );
            }
            Answer::NoDevices => panic!("{}", why()),
        }
    }
    // Each answer is exercised, so none of the properties holds vacuously.
    for answer in ["ready", "retry", "rejected"] {
        assert!(counts.get(answer).copied().unwrap_or(0) >= 50, "{counts:?}");
    }
    eprintln!("answers over 1,000 clusters: {counts:?}");
}

/// Eight 16 GiB GPUs on four nodes, 8 GiB taken on each: 64 GiB free,
/// scattered as 8 GiB per GPU (the issue's example).
fn fragmented() -> String {
    let mut docs = Vec::new();
    for n in 0..4 {
        docs.push(format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n{n}\n  annotations:\n    hami.io/node-nvidia-register: '[{{\"id\":\"n{n}-0\",\"index\":0,\"count\":4,\"devmem\":16384,\"devcore\":100,\"type\":\"T4\",\"health\":true}},{{\"id\":\"n{n}-1\",\"index\":1,\"count\":4,\"devmem\":16384,\"devcore\":100,\"type\":\"T4\",\"health\":true}}]'\n"
        ));
        for g in 0..2 {
            docs.push(format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: r{n}{g}\n  namespace: other\n  uid: r{n}{g}\n  annotations:\n    hami.io/vgpu-node: n{n}\n    hami.io/vgpu-devices-allocated: 'n{n}-{g},NVIDIA,8192,0:;'\nspec:\n  nodeName: n{n}\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '1', nvidia.com/gpumem: '8192'}}}}}}]\nstatus: {{phase: Running}}\n"
            ));
        }
    }
    docs.join("---\n")
}

fn one_set(count: u32, limits: Value, extra: impl FnOnce(&mut Value)) -> Workload {
    let mut w = workload(&[PodSetCase {
        count,
        gpus: 1,
        mib: 1,
        policy: None,
    }]);
    let t = &mut w["spec"]["podSets"][0]["template"];
    t["spec"]["containers"][0]["resources"]["limits"] = limits;
    extra(t);
    Workload::read(&w).unwrap()
}

fn answer_on(cluster: &str, w: &Workload) -> Answer {
    let (view, _) = Snapshot::from_yaml(cluster, "case").unwrap().to_view();
    answer(&view, &Config::default(), w, &BTreeMap::new(), &|_| None)
}

#[test]
fn scattered_memory_answers_retry_in_numbers_and_what_fits_is_ready() {
    let big = one_set(
        2,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "24576"}),
        |_| {},
    );
    // 24 GiB is more than any 16 GiB GPU has: never.
    match answer_on(&fragmented(), &big) {
        Answer::Rejected(m) => assert_eq!(
            m,
            "no node can ever hold a pod of pod set set0 (1 × 24 GiB), even with every device free; 2 × 24 GiB needed"
        ),
        other => panic!("{other:?}"),
    }
    let twelve = one_set(
        2,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "12288"}),
        |_| {},
    );
    match answer_on(&fragmented(), &twelve) {
        Answer::Retry(m) => assert_eq!(
            m,
            "largest free slice 8 GiB; 2 × 12 GiB needed (0 of 2 pods fit now)"
        ),
        other => panic!("{other:?}"),
    }
    let eight = one_set(
        2,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}),
        |_| {},
    );
    match answer_on(&fragmented(), &eight) {
        Answer::Ready(r) => {
            assert_eq!(r.needed, "2 × 8 GiB");
            assert_eq!(r.members, 2);
            assert_eq!(
                r.pod_set_updates,
                [json!({"name": "set0", "labels": {
                    "pod-group.scheduling.sigs.k8s.io/name": "job-train-1a2b3",
                    "pod-group.scheduling.sigs.k8s.io/min-available": "2"}})]
            );
            // Binpack (the default node policy): one node, both its GPUs.
            assert_eq!(r.places(), "n0 (n0-0, n0-1)");
        }
        other => panic!("{other:?}"),
    }
    // Nine 8 GiB pods on eight GPUs with 8 GiB free each: not now, and
    // with every device free they would fit.
    let nine = one_set(
        9,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}),
        |_| {},
    );
    match answer_on(&fragmented(), &nine) {
        Answer::Retry(m) => assert!(m.ends_with("9 × 8 GiB needed (8 of 9 pods fit now)"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Seventeen whole GPUs on eight: never.
    let many = one_set(
        17,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16384"}),
        |_| {},
    );
    match answer_on(&fragmented(), &many) {
        Answer::Rejected(m) => assert!(m.ends_with("only 8 of 17 pods fit"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn pods_gpugate_does_not_place_or_would_refuse_are_answered_plainly() {
    let cpu = one_set(3, json!({"cpu": "1"}), |_| {});
    assert_eq!(answer_on(&fragmented(), &cpu), Answer::NoDevices);
    let privileged = one_set(1, json!({"nvidia.com/gpu": "1"}), |t| {
        t["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    });
    match answer_on(&fragmented(), &privileged) {
        Answer::Rejected(m) => assert!(m.starts_with("pod set set0: gpugate's"), "{m}"),
        other => panic!("{other:?}"),
    }
    let ganged = one_set(1, json!({"nvidia.com/gpu": "1"}), |t| {
        t["metadata"]["labels"] = json!({"pod-group.scheduling.sigs.k8s.io/name": "mine",
                                        "pod-group.scheduling.sigs.k8s.io/min-available": "1"});
    });
    match answer_on(&fragmented(), &ganged) {
        Answer::Rejected(m) => assert!(m.contains("names its own gang group team/mine"), "{m}"),
        other => panic!("{other:?}"),
    }
    let garbage = one_set(1, json!({"nvidia.com/gpu": "one"}), |_| {});
    assert!(matches!(
        answer_on(&fragmented(), &garbage),
        Answer::Rejected(_)
    ));
}

#[test]
fn a_namespace_quota_counts_every_pod_of_the_workload_at_once() {
    let quota = "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: gpu\n  namespace: team\nspec:\n  hard:\n    limits.nvidia.com/gpumem: '20000'\n";
    let cluster = format!("{}---\n{quota}", fragmented());
    let two = one_set(
        2,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}),
        |_| {},
    );
    assert!(matches!(answer_on(&cluster, &two), Answer::Ready(_)));
    let three = one_set(
        3,
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}),
        |_| {},
    );
    match answer_on(&cluster, &three) {
        Answer::Rejected(m) => assert!(m.contains("ResourceQuota gpu"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// A workload name longer than a label value may be names its gang by its
/// UID instead (Kueue refuses a podSetUpdate whose label is invalid).
#[test]
fn a_long_workload_name_gives_a_group_named_by_uid() {
    use gpugate::kueue::check::group_of;
    let mut raw = workload(&[PodSetCase {
        count: 1,
        gpus: 1,
        mib: 1000,
        policy: None,
    }]);
    assert_eq!(
        group_of(&Workload::read(&raw).unwrap()).name,
        "job-train-1a2b3"
    );
    raw["metadata"]["name"] = json!(format!("job-{}-1a2b3", "x".repeat(60)));
    let w = Workload::read(&raw).unwrap();
    let group = group_of(&w);
    assert_eq!(group.name, "workload-wl-uid");
    assert_eq!(group.namespace, "team");
    match answer_on(&fragmented(), &w) {
        Answer::Ready(r) => assert_eq!(
            r.pod_set_updates[0]["labels"]["pod-group.scheduling.sigs.k8s.io/name"],
            "workload-wl-uid"
        ),
        other => panic!("{other:?}"),
    }
}
