//! The examples of examples/ through `simulate`: HAMi's four scheduler-policy
//! stories, its topology example and the demo cluster.

use std::path::Path;
use std::process::Command;

use gpugate::cluster::Snapshot;
use gpugate::config::Config;
use gpugate::engine::{GpuPolicy, NodePolicy};
use gpugate::simulate::{Report, simulate};
use jiff::Timestamp;

mod support {
    pub mod process;
}

fn load(path: &str) -> Snapshot {
    Snapshot::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).expect(path)
}

fn run(cluster: &str, pods: &str, node: NodePolicy, gpu: GpuPolicy) -> Report {
    let mut config = Config::default();
    config.scheduler.node_scheduler_policy = node;
    config.scheduler.gpu_scheduler_policy = gpu;
    let report = simulate(&load(cluster), &load(pods).pods, &config, Timestamp::now());
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    report
}

/// (pod, node, GPU UUIDs) of every placement.
fn placed(report: &Report) -> Vec<(String, String, Vec<String>)> {
    report
        .placements
        .iter()
        .map(|p| {
            (
                p.pod.clone(),
                p.node.clone(),
                p.devices.iter().map(|d| d.uuid.clone()).collect(),
            )
        })
        .collect()
}

fn p(pod: &str, node: &str, gpus: &[&str]) -> (String, String, Vec<String>) {
    (
        pod.to_string(),
        node.to_string(),
        gpus.iter().map(|g| g.to_string()).collect(),
    )
}

const STORIES: &str = "examples/stories/cluster.yaml";

#[test]
fn story_1_node_binpack_puts_both_pods_on_one_node() {
    let r = run(
        STORIES,
        "examples/stories/whole-gpu-pods.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    assert_eq!(
        placed(&r),
        [
            p("default/pod1", "node1", &["GPU-node1-0"]),
            p("default/pod2", "node1", &["GPU-node1-1"]),
        ]
    );
    // nvidia.com/gpu: 1 alone is one whole, exclusive GPU.
    assert_eq!(
        (
            r.placements[0].devices[0].mem_mib,
            r.placements[0].devices[0].cores
        ),
        (40960, 100)
    );
}

#[test]
fn story_2_node_spread_puts_pods_on_different_nodes() {
    let r = run(
        STORIES,
        "examples/stories/whole-gpu-pods.yaml",
        NodePolicy::Spread,
        GpuPolicy::Spread,
    );
    assert_eq!(
        placed(&r),
        [
            p("default/pod1", "node1", &["GPU-node1-0"]),
            p("default/pod2", "node2", &["GPU-node2-0"]),
        ]
    );
}

#[test]
fn story_3_gpu_binpack_shares_one_gpu() {
    let r = run(
        STORIES,
        "examples/stories/slice-pods.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Binpack,
    );
    assert_eq!(
        placed(&r),
        [
            p("default/pod1", "node1", &["GPU-node1-0"]),
            p("default/pod2", "node1", &["GPU-node1-0"]),
        ]
    );
    // 20% of a 40960 MiB GPU, and 20 cores.
    assert_eq!(
        (
            r.placements[1].devices[0].mem_mib,
            r.placements[1].devices[0].cores
        ),
        (8192, 20)
    );
}

#[test]
fn story_4_gpu_spread_uses_different_gpus() {
    let r = run(
        STORIES,
        "examples/stories/slice-pods.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    assert_eq!(
        placed(&r),
        [
            p("default/pod1", "node1", &["GPU-node1-0"]),
            p("default/pod2", "node1", &["GPU-node1-1"]),
        ]
    );
}

#[test]
fn topology_one_gpu_takes_a_least_connected_card() {
    let r = run(
        "examples/topology/cluster.yaml",
        "examples/topology/one-gpu-pod.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    // gpu0 and gpu1 both sum 400; the lowest index wins.
    assert_eq!(placed(&r), [p("default/one-gpu", "topo", &["GPU-topo-0"])]);
}

#[test]
fn topology_three_gpus_take_a_best_set() {
    let r = run(
        "examples/topology/cluster.yaml",
        "examples/topology/three-gpu-pod.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    // {gpu1,gpu2,gpu3} and {gpu0,gpu2,gpu3} both sum 500; gpugate takes the
    // lexicographically smallest set of indexes (docs/policies.md).
    assert_eq!(
        placed(&r),
        [p(
            "default/three-gpus",
            "topo",
            &["GPU-topo-0", "GPU-topo-2", "GPU-topo-3"]
        )]
    );
}

#[test]
fn demo_cluster_places_what_fits_and_explains_the_rest() {
    let config = Config::default();
    let r = simulate(
        &load("examples/demo/cluster.yaml"),
        &load("examples/demo/pods.yaml").pods,
        &config,
        Timestamp::now(),
    );
    // cpu-1 has no GPUs registered.
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("cpu-1"));
    let nodes: Vec<(&str, &str)> = r
        .placements
        .iter()
        .map(|p| (p.pod.as_str(), p.node.as_str()))
        .collect();
    assert!(
        nodes.contains(&("serving/t4-only", "gpu-t4-1")),
        "{nodes:?}"
    );
    assert!(
        nodes.contains(&("ml/train-2gpu", "gpu-a100-1")),
        "{nodes:?}"
    );
    // The two GPUs of train-2gpu share a NUMA node (GPUs 2 and 3: GPU 0 is in use).
    let train = r
        .placements
        .iter()
        .find(|p| p.pod == "ml/train-2gpu")
        .unwrap();
    let uuids: Vec<&str> = train.devices.iter().map(|d| d.uuid.as_str()).collect();
    assert_eq!(uuids, ["GPU-a100-1-2", "GPU-a100-1-3"]);
    // The T4 GPU 1 is cordoned and GPU 0 is free again (report-0 has finished).
    let t4 = r
        .placements
        .iter()
        .find(|p| p.pod == "serving/t4-only")
        .unwrap();
    assert_eq!(t4.devices[0].uuid, "GPU-t4-1-0");

    let unschedulable: Vec<&str> = r.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    assert_eq!(
        unschedulable,
        ["serving/a10-wanted", "ml/too-big", "default/greedy"]
    );
    let a10 = &r.unschedulable[0].reasons;
    assert_eq!(a10["gpu-a100-1"], "4/4 CardTypeMismatch");
    assert_eq!(a10["cpu-1"], "node unregistered");
    let greedy = r.unschedulable[2].error.as_deref().unwrap();
    assert!(
        greedy.contains("nvidia.com/gpucores") && greedy.contains("150"),
        "{greedy}"
    );
    assert_eq!(r.skipped, ["default/web"]);
}

#[test]
fn binary_prints_one_json_object() {
    let out = support::process::succeeds(
        Command::new(env!("CARGO_BIN_EXE_gpugate"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "simulate",
                "--cluster",
                STORIES,
                "--pods",
                "examples/stories/slice-pods.yaml",
                "--gpu-policy",
                "binpack",
                "--output",
                "json",
            ]),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["placements"][1]["devices"][0]["uuid"], "GPU-node1-0");
    assert_eq!(v["placements"][1]["devices"][0]["memMiB"], 8192);
    assert_eq!(v["unschedulable"], serde_json::json!([]));
}

#[test]
fn binary_refuses_bad_input_with_a_clear_message() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpugate"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .expect("runs");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = run(&["simulate", "--cluster", "missing.yaml", "--pods", STORIES]);
    assert!(e.contains("missing.yaml"), "{e}");
    let e = run(&["simulate", "--cluster", STORIES, "--pods", STORIES]);
    assert!(e.contains("nodes belong in --cluster"), "{e}");
    let e = run(&[
        "simulate",
        "--cluster",
        STORIES,
        "--pods",
        STORIES,
        "--gpu-policy",
        "fastest",
    ]);
    assert!(e.contains("unknown GPU policy \"fastest\""), "{e}");
    let e = run(&["simulate", "--cluster", "Cargo.toml", "--pods", STORIES]);
    assert!(e.contains("Cargo.toml"), "{e}");
}

const TWO_GPU_NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: small
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-s-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA-Tesla T4","health":true},{"id":"GPU-s-1","index":1,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA-Tesla T4","health":true}]'
"#;

fn whole_gpu_pod(meta: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n{meta}\nspec:\n  containers:\n    - name: c\n      image: busybox\n      resources:\n        limits:\n          nvidia.com/gpu: 1\n"
    )
}

#[test]
fn pods_without_uid_or_name_never_share_a_ledger_entry() {
    let cluster = Snapshot::from_yaml(TWO_GPU_NODE, "cluster").unwrap();
    let pods = [0, 1, 2]
        .map(|_| whole_gpu_pod("  generateName: worker-"))
        .join("---\n");
    let pods = Snapshot::from_yaml(&pods, "pods").unwrap();
    let r = simulate(&cluster, &pods.pods, &Config::default(), Timestamp::now());
    assert_eq!(r.placements.len(), 2, "{:?}", placed(&r));
    assert_eq!(r.placements[0].pod, "default/worker-*");
    assert_eq!(r.unschedulable.len(), 1);
    assert_eq!(
        r.unschedulable[0].reasons["small"],
        "2/2 CardInsufficientMemory"
    );
}

#[test]
fn a_running_pod_keeps_its_gpu_when_a_new_pod_has_its_name() {
    let running = format!(
        "{TWO_GPU_NODE}---\n{}",
        whole_gpu_pod(
            "  name: p\n  annotations:\n    hami.io/vgpu-node: small\n    hami.io/vgpu-devices-allocated: 'GPU-s-0,NVIDIA,16384,100:;'"
        )
    );
    let cluster = Snapshot::from_yaml(&running, "cluster").unwrap();
    let pods = [0, 1, 2].map(|_| whole_gpu_pod("  name: p")).join("---\n");
    let pods = Snapshot::from_yaml(&pods, "pods").unwrap();
    let r = simulate(&cluster, &pods.pods, &Config::default(), Timestamp::now());
    assert_eq!(placed(&r), [p("default/p", "small", &["GPU-s-1"])]);
    assert_eq!(r.unschedulable.len(), 2);
}

#[test]
fn duplicate_uids_in_a_snapshot_are_reported_not_merged() {
    let pod = |gpu: &str| {
        whole_gpu_pod(&format!(
            "  name: p\n  uid: 11111111-2222-3333-4444-555555555555\n  annotations:\n    hami.io/vgpu-node: small\n    hami.io/vgpu-devices-allocated: '{gpu},NVIDIA,16384,100:;'"
        ))
    };
    let text = format!(
        "{TWO_GPU_NODE}---\n{}---\n{}",
        pod("GPU-s-0"),
        pod("GPU-s-1")
    );
    let (state, report) = Snapshot::from_yaml(&text, "cluster").unwrap().to_state();
    assert_eq!(state.allocations().count(), 1);
    assert_eq!(report.unaccounted_pods.len(), 1);
    assert!(
        report.unaccounted_pods[0].contains("appears twice"),
        "{:?}",
        report.unaccounted_pods
    );
}

/// A gang group among the pods to place is placed all or nothing, as the
/// extender places it: two members of a group of two fit on the two GPUs;
/// a group of three does not, and none of its members is placed.
#[test]
fn gang_groups_among_the_pods_are_placed_all_or_nothing() {
    let cluster = Snapshot::from_yaml(TWO_GPU_NODE, "cluster").unwrap();
    let member = |group: &str, size: u32, i: u32| {
        whole_gpu_pod(&format!(
            "  name: {group}-{i}\n  uid: {group}-{i}\n  labels:\n    pod-group.scheduling.sigs.k8s.io/name: {group}\n    pod-group.scheduling.sigs.k8s.io/min-available: \"{size}\""
        ))
    };
    let run = |group: &str, size: u32| {
        let pods: Vec<String> = (0..size).map(|i| member(group, size, i)).collect();
        let pods = Snapshot::from_yaml(&pods.join("---\n"), "pods").unwrap();
        simulate(&cluster, &pods.pods, &Config::default(), Timestamp::now())
    };
    let two = run("pair", 2);
    assert_eq!(two.placements.len(), 2, "{:?}", two.unschedulable);
    let three = run("trio", 3);
    assert!(three.placements.is_empty(), "{:?}", placed(&three));
    assert_eq!(three.unschedulable.len(), 3);
    for u in &three.unschedulable {
        assert!(
            u.reasons.values().all(|r| r.starts_with("GangNotFit")),
            "{u:?}"
        );
    }
}

/// HAMi v2.10's chains (hami-compat.md 6.2: keys in the order written;
/// `spread` score descending, `binpack` ascending, `numa` NUMA id
/// ascending, index ascending last; HAMi tries the sorted GPUs from the
/// end), read from each pod's annotation against a default of `spread`.
#[test]
fn numa_chains_place_as_hami_v2_10() {
    let r = run(
        "examples/numa-chains/cluster.yaml",
        "examples/numa-chains/pods.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    assert_eq!(
        placed(&r),
        [
            p("default/spread-numa", "numa", &["GPU-numa-3"]),
            p("default/binpack-numa", "numa", &["GPU-numa-3"]),
            p("default/numa-only", "numa", &["GPU-numa-3"]),
            p(
                "default/spread-numa-2",
                "numa",
                &["GPU-numa-2", "GPU-numa-1"]
            ),
        ]
    );
    // The same pods under plain spread take the lowest index first.
    let mut plain = load("examples/numa-chains/pods.yaml").pods;
    for pod in &mut plain {
        pod.metadata.annotations = None;
    }
    let report = simulate(
        &load("examples/numa-chains/cluster.yaml"),
        &plain,
        &Config::default(),
        Timestamp::now(),
    );
    assert_eq!(placed(&report)[0].2, ["GPU-numa-0"]);
}

/// docs/policies.md's NUMA example: Guaranteed pods get one zone with
/// their CPUs and GPU; the Burstable one is not aligned; the zones' CPUs
/// taken by the placements count for the next pods, and a pod no zone
/// can hold gets each node's zone reasons.
#[test]
fn numa_alignment_example() {
    let r = run(
        "examples/numa-alignment/cluster.yaml",
        "examples/numa-alignment/pods.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    assert_eq!(
        placed(&r),
        [
            p("ml/train-8cpu", "gpu-b", &["GPU-b-1"]),
            p("ml/burstable", "gpu-b", &["GPU-b-0"]),
            p("ml/serve-4cpu", "gpu-b", &["GPU-b-0"]),
        ]
    );
    let zones: Vec<Vec<(String, i32)>> = r
        .placements
        .iter()
        .map(|p| p.numa_zones.clone().into_iter().collect())
        .collect();
    assert_eq!(
        zones,
        [
            vec![("trainer".to_string(), 1)],
            vec![],
            vec![("server".to_string(), 0)],
        ]
    );
    assert_eq!(r.unschedulable.len(), 1);
    let reasons: Vec<(&str, &str)> = r.unschedulable[0]
        .reasons
        .iter()
        .map(|(n, why)| (n.as_str(), why.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "gpu-a",
                "1/2 NumaZoneInsufficientCPU, 1/2 NumaZoneInsufficientGPU (one NUMA zone for container trainer)"
            ),
            (
                "gpu-b",
                "2/2 NumaZoneInsufficientCPU (one NUMA zone for container trainer)"
            ),
        ]
    );
    // The table has a NUMA column, and JSON a numaZones map.
    let table = r.to_table();
    assert!(
        table.contains("NUMA")
            && table
                .lines()
                .any(|l| l.contains("train-8cpu") && l.trim_end().ends_with(" 1")),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["placements"][0]["numaZones"]["trainer"], 1);
    assert!(json["placements"][1].get("numaZones").is_none());
}

/// examples/mig (docs/policies.md, "MIG"): a mixed fleet of MIG and
/// hami-core A100s, HAMi v2.10's default policies (node binpack, GPU
/// spread): each MIG pod gets the smallest profile that holds it on a free
/// placement of the least used MIG GPU, the hami-core pod its slice, and
/// a pod that needs a whole 7g.40gb finds no GPU with that much memory
/// free (HAMi's memory check comes before the MIG placement).
#[test]
fn mig_example_places_instances_as_hami_does() {
    let r = run(
        "examples/mig/cluster.yaml",
        "examples/mig/pods.yaml",
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    let instances: Vec<(String, String, Option<String>)> = r
        .placements
        .iter()
        .map(|p| {
            (
                p.pod.clone(),
                p.devices[0].uuid.clone(),
                p.devices[0].mig.clone(),
            )
        })
        .collect();
    let i = |pod: &str, gpu: &str, mig: Option<&str>| {
        (pod.to_string(), gpu.to_string(), mig.map(str::to_string))
    };
    assert_eq!(
        instances,
        [
            i("ml/small-mig", "GPU-mig-1-1", Some("1g.5gb@6-6")),
            i("ml/medium-mig", "GPU-mig-1-1", Some("1g.10gb@4-5")),
            i("ml/large-mig", "GPU-mig-1-1", Some("3g.20gb@0-3")),
            i("ml/sliced", "GPU-core-1-0", None),
        ]
    );
    assert_eq!(r.unschedulable.len(), 1);
    let whole = &r.unschedulable[0];
    assert_eq!(whole.pod, "ml/whole-a100");
    assert_eq!(whole.reasons["mig-1"], "2/2 CardInsufficientMemory");
    assert_eq!(whole.reasons["core-1"], "1/1 CardTypeMismatch");
}

/// A running pod's allocation in HAMi master's five-field form
/// (`uuid,vendor,mem,cores,slots`) counts what it holds; one the decoder
/// refuses blocks its GPU (fail closed). Before, both freed the GPU: a
/// 16,384 MiB GPU holding 12,000 MiB took another 8,000 MiB pod.
#[test]
fn allocations_gpugate_cannot_read_do_not_free_their_gpu() {
    let cluster = |devices: &str| {
        Snapshot::from_yaml(
            &format!(
                r#"
apiVersion: v1
kind: Node
metadata:
  name: n1
  annotations:
    hami.io/node-nvidia-register: '[{{"id":"g0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA Tesla T4","health":true}}]'
---
apiVersion: v1
kind: Pod
metadata: {{name: running, namespace: ml, uid: u-running, annotations: {{hami.io/vgpu-node: n1, hami.io/vgpu-devices-allocated: "{devices}"}}}}
spec: {{nodeName: n1, containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "12000", nvidia.com/gpucores: "30"}}}}}}]}}
status: {{phase: Running}}
"#
            ),
            "inline",
        )
        .unwrap()
    };
    let pending = |mib: u32| {
        Snapshot::from_yaml(
            &format!(
                r#"
apiVersion: v1
kind: Pod
metadata: {{name: new-{mib}, namespace: ml}}
spec: {{containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "{mib}"}}}}}}]}}
"#
            ),
            "inline",
        )
        .unwrap()
        .pods
    };
    let config = Config::default();
    let five = cluster("g0,NVIDIA,12000,30,1:;");
    let r = simulate(&five, &pending(8000), &config, Timestamp::now());
    assert!(r.placements.is_empty(), "{:?}", r.placements);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let r = simulate(&five, &pending(4000), &config, Timestamp::now());
    assert_eq!(r.placements.len(), 1);

    let garbled = cluster("g0,NVIDIA,12000,thirty:;");
    let r = simulate(&garbled, &pending(1000), &config, Timestamp::now());
    assert!(r.placements.is_empty(), "{:?}", r.placements);
    let why = format!("{:?}", r.unschedulable);
    assert!(why.contains("CardAllocationUnreadable"), "{why}");
    assert!(
        r.warnings.iter().any(|w| w.contains("cores \"thirty\"")),
        "{:?}",
        r.warnings
    );
}
