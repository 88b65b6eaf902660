//! `gpugate explain` on the snapshot in tests/fixtures/explain: every reason
//! code gpugate gives shows on some node there, and each one's words are
//! asserted; the nearest node and its shortfall; the pods whose eviction
//! makes room; quota and namespace-policy refusals; pods that are not
//! pending. And the command line, as `gpugate` and as `kubectl-gpugate`.

use std::collections::BTreeSet;
use std::process::Command;

use gpugate::cluster::Snapshot;
use gpugate::config::Config;
use gpugate::explain::{Explanation, explain};
use gpugate::placement::ReasonCode;

mod support {
    pub mod kubectl_plugin;
    pub mod mig_snapshot;
    pub mod process;
}
use support::mig_snapshot::{holder, mig_node};

const CLUSTER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/explain/cluster.yaml"
);

/// The moment the fixture's node lock (taken at 12:00:00) is 30 s old.
fn now() -> jiff::Timestamp {
    "2026-11-25T12:00:30Z".parse().unwrap()
}

fn snapshot() -> Snapshot {
    Snapshot::load(std::path::Path::new(CLUSTER)).unwrap()
}

fn explained(pod: &str) -> Explanation {
    explained_with(pod, &Config::default())
}

fn explained_with(pod: &str, config: &Config) -> Explanation {
    let (ns, name) = pod.split_once('/').unwrap();
    explain(&snapshot(), ns, name, config, now()).unwrap()
}

/// `(code, words)` of `node` in the explanation of `pod`.
fn verdict(e: &Explanation, node: &str) -> (String, String) {
    let n = e
        .nodes
        .iter()
        .find(|n| n.node == node)
        .unwrap_or_else(|| panic!("{node} not in {e:#?}"));
    let r = n
        .refusal
        .as_ref()
        .unwrap_or_else(|| panic!("{node} fits {}: {e:#?}", e.pod));
    (r.code.clone(), r.words.clone())
}

const MODEL: &str = "are of a model or mode the pod excludes or does not name (nvidia.com/use-gputype, nvidia.com/nouse-gputype, nvidia.com/vgpu-mode), or in MIG mode without a usable profile";

/// Every code, each from a pod and node of the fixture, with its words.
/// (`NotBestNode` is `/filter`'s under `filterMode: best` and
/// `NumaTopologiesListing` a server's while it lists; explain gives
/// neither: their words are asserted in `placement::words`' tests, as are
/// those of `CardMigTopologyInfeasible`, which this fixture has no MIG GPU
/// for: `tests/mig.rs` gives it.)
#[test]
fn every_reason_code_in_words() {
    let per_node: &[(&str, &str, &str, &str)] = &[
        (
            "ml/big",
            "shared-1",
            "CardInsufficientMemory",
            "for container main, 2 of 2 GPUs have too little free GPU memory",
        ),
        (
            "ml/big",
            "cores-1",
            "CardInsufficientCore",
            "for container main, 1 of 1 GPUs have too few free cores (nvidia.com/gpucores)",
        ),
        (
            "ml/big",
            "sick-1",
            "CardCordoned",
            "for container main, 1 of 2 GPUs are cordoned (hami.io/device-cordon on the node); \
             1 of 2 GPUs are reported unhealthy by the device plugin, or hold a pod whose MIG instance is inconsistent with the GPU (a MigInconsistent event on that pod says which)",
        ),
        (
            "ml/big",
            "slices-1",
            "CardTimeSlicingExhausted",
            "for container main, 1 of 1 GPUs have every slice taken (as many pods as the device \
             plugin's split count)",
        ),
        (
            "ml/big",
            "a10-1",
            "CardTypeMismatch",
            &format!("for container main, 2 of 2 GPUs {MODEL}"),
        ),
        (
            "ml/big",
            "cpu-1",
            "NodeUnregistered",
            "the node has no GPUs registered by HAMi's device plugin (no readable \
             hami.io/node-nvidia-register annotation). If kube-scheduler offers it anyway, \
             its GPUs may come through DRA (a DeviceClass whose extendedResourceName is the \
             pod's GPU resource): gpugate places slices only on GPUs HAMi's device plugin \
             registers",
        ),
        (
            "ml/big",
            "numa-1",
            "NumaZoneInsufficientCPU",
            "the node's kubelet puts a Guaranteed pod's CPUs, memory and GPUs on one NUMA zone, \
             and for container main, 2 of 2 zones lack the free CPUs",
        ),
        (
            "ml/numa-mem",
            "numa-1",
            "NumaZoneInsufficientMemory",
            "the node's kubelet puts a Guaranteed pod's CPUs, memory and GPUs on one NUMA zone, \
             and for container main, 2 of 2 zones lack the free memory",
        ),
        (
            "ml/numa-gpu",
            "numa-1",
            "NumaZoneInsufficientGPU",
            "the node's kubelet puts a Guaranteed pod's CPUs, memory and GPUs on one NUMA zone, \
             and for container main, 2 of 2 zones lack GPUs that can hold the slices",
        ),
        (
            "ml/small",
            "cores-1",
            "CardComputeUnitsExhausted",
            "for container main, 1 of 1 GPUs have all their cores given out, so a pod asking for \
             no cores cannot share them",
        ),
        (
            "ml/whole",
            "shared-2",
            "ExclusiveDeviceAllocateConflict",
            "for container main, 1 of 1 GPUs already hold other pods, and this pod needs a GPU to \
             itself (gpucores 100, or an exclusive GPU policy)",
        ),
        (
            "ml/pair-bound",
            "a10-1",
            "NumaNotFit",
            "for container main, 2 of 2 GPUs could hold a slice, but not enough of them sit on one \
             NUMA node (nvidia.com/numa-bind)",
        ),
        (
            "ml/pair-bound",
            "shared-2",
            "NodeInsufficientDevice",
            "container main asks for 2 GPUs and the node has 1",
        ),
        (
            "ml/pair",
            "shared-1",
            "AllocatedCardsInsufficientRequest",
            "for container main, 1 of 2 GPUs could hold a slice, fewer than the container asks \
             for; 1 of 2 GPUs have too little free GPU memory",
        ),
        (
            "ml/by-uuid",
            "shared-1",
            "CardUuidMismatch",
            "for container main, 2 of 2 GPUs are excluded by UUID (nvidia.com/use-gpuuuid, \
             nvidia.com/nouse-gpuuuid)",
        ),
        (
            "ml/small",
            "unreadable-1",
            "CardAllocationUnreadable",
            "for container main, 1 of 1 GPUs hold a pod whose allocation annotations cannot be \
             read (an AllocationUnreadable event on that pod says why), so what is free there is \
             unknown; they take no new pod until the annotations can be read or the pod is gone",
        ),
        (
            "ml/gang-ok-1",
            "a10-1",
            "GangPlacement",
            "its gang group is placed together, and this member's place in it is node shared-2",
        ),
    ];
    let everywhere: &[(&str, &str, &str)] = &[
        (
            "capped/over",
            "ResourceQuotaNotFit",
            "the namespace's ResourceQuota gpu has no room for it: GPU memory 8000 MiB requested, \
             0 MiB of 4000 MiB already used; wait for pods the quota covers to finish, or raise \
             the quota",
        ),
        (
            "ml/gang-bad",
            "GangInvalid",
            "its gang group labels cannot be read (label \
             pod-group.scheduling.sigs.k8s.io/name=bad needs \
             pod-group.scheduling.sigs.k8s.io/min-available (how many members must run \
             together)); fix the labels and recreate the pod",
        ),
        (
            "ml/gang-wait-0",
            "GangIncomplete",
            "its gang group ml/wait has 1 of the 3 members that must start together; it waits \
             until the rest are created",
        ),
        (
            "ml/gang-huge-0",
            "GangNotFit",
            "its gang group ml/huge needs 3 members running together; 0 are placed and only 2 \
             more fit now, so none of the rest is placed",
        ),
    ];
    let all: BTreeSet<String> = ReasonCode::all()
        .filter(|c| {
            !matches!(
                c,
                // Places held for moved pods exist only in a live view.
                ReasonCode::NotBestNode
                    | ReasonCode::MoveDestination
                    | ReasonCode::NumaTopologiesListing
                    | ReasonCode::Card(gpugate::engine::Reason::CardMigTopologyInfeasible)
                    // Kunlunxin vXPUs': in tests/kunlun.rs.
                    | ReasonCode::Card(gpugate::engine::Reason::CardTemplateMismatch)
                    // Enflame DRS's: in tests/enflame_drs.rs.
                    | ReasonCode::ModeNotFit
                    // Metax sGPU's: in tests/metax_sgpu.rs.
                    | ReasonCode::Card(gpugate::engine::Reason::CardAppClassMismatch)
                    | ReasonCode::Card(gpugate::engine::Reason::CardQosPolicyMismatch)
                    // Moore Threads': in tests/mthreads.rs.
                    | ReasonCode::Card(gpugate::engine::Reason::CardNotFoundCustomFilterRule)
            )
        })
        .map(|c| c.to_string())
        .collect();
    let mut seen = BTreeSet::new();
    for (pod, node, code, words) in per_node {
        let e = explained(pod);
        assert_eq!(
            verdict(&e, node),
            (code.to_string(), words.to_string()),
            "{pod} on {node}"
        );
        // Every code the node's text names (sick-1's names two).
        let text = &e.nodes.iter().find(|n| n.node == *node).unwrap();
        let text = &text.refusal.as_ref().unwrap().reason;
        seen.extend(
            text.split([' ', ',', '('])
                .filter(|w| all.contains(*w))
                .map(str::to_string),
        );
        seen.insert(code.to_string());
    }
    // locked-1's lock is one hold ahead: within `queueDepth: auto`'s depth
    // for a binpack pod (1), beyond depth 0.
    assert!(
        explained("ml/small")
            .nodes
            .iter()
            .any(|n| n.node == "locked-1" && n.refusal.is_none())
    );
    let mut depth_zero = Config::default();
    depth_zero.scheduler.node_lock.queue_depth = gpugate::config::QueueDepth::Holds(0);
    assert_eq!(
        verdict(&explained_with("ml/small", &depth_zero), "locked-1"),
        (
            "NodeLockBusy".to_string(),
            "a bind here would wait (hami.io/mutex.lock held by pod ml/other), and other nodes \
             have fewer lock holds ahead"
                .to_string()
        )
    );
    seen.insert("NodeLockBusy".to_string());
    // stuck-1's lock expired 15 minutes ago, and is kept: its holder is
    // bound there and still waits for its device plugin.
    assert_eq!(
        verdict(&explained("ml/small"), "stuck-1"),
        (
            "NodeLockAwaitingAllocation".to_string(),
            "node stuck-1 is waiting for its device plugin to admit pod ml/stuck for 20 min: its \
             hami.io/mutex.lock (taken 2026-11-25T11:40:00Z) is kept past its expiry, because \
             HAMi's device plugin finds the pod an Allocate is for through the lock, so no other \
             pod binds there until ml/stuck is admitted (hami.io/bind-phase no longer allocating) \
             or gone; check the kubelet and the device plugin on stuck-1; a pod placed there \
             before that would not get its own devices"
                .to_string()
        )
    );
    seen.insert("NodeLockAwaitingAllocation".to_string());
    for (pod, code, words) in everywhere {
        let e = explained(pod);
        let r = e.everywhere.as_ref().unwrap_or_else(|| panic!("{e:#?}"));
        assert_eq!(
            (r.code.as_str(), r.words.as_str()),
            (*code, *words),
            "{pod}"
        );
        assert_eq!(e.summary, format!("no node can hold it: {words}"));
        assert!(e.nodes.is_empty());
        seen.insert(code.to_string());
    }
    assert_eq!(seen, all, "codes without an example in the fixture");
}

/// A pod that fits nowhere: the node nearest to holding it with what it
/// lacks in numbers, and on each node the fewest lowest-priority pods
/// whose eviction makes room; with preemptionPolicy Never, none.
#[test]
fn the_nearest_node_and_whom_to_evict() {
    let e = explained("ml/big");
    assert_eq!(e.status, "pending");
    assert_eq!(e.priority, 1000);
    assert_eq!(e.asks, ["container main: 1 GPU with 8000 MiB and 30 cores"]);
    assert!(e.nodes.iter().all(|n| !n.fits), "{e:#?}");
    // shared-1 lacks 2,000 MiB on its freest GPU; cores-1 30 cores;
    // shared-2 7,000 MiB; locked-1's GPU is too small even empty.
    assert_eq!(e.nearest, ["shared-1", "cores-1", "shared-2"]);
    let shared = e.nodes.iter().find(|n| n.node == "shared-1").unwrap();
    assert_eq!(
        shared.missing.as_deref(),
        Some(
            "needs 8000 MiB and 30 cores free on one GPU; the freest has 6000 MiB and 100 cores \
             free (GPU-shared-1-1); 0 of the 2 GPUs it may use can take a slice now"
        )
    );
    // low-a (priority 50) frees GPU 0; low-b (100) would too, but costs more.
    let victims: Vec<(&str, i32, &str)> = shared
        .preempt
        .iter()
        .map(|v| (v.pod.as_str(), v.priority, v.holds.as_str()))
        .collect();
    assert_eq!(
        victims,
        [("batch/low-a", 50, "12000 MiB, 20 cores on GPU-shared-1-0")]
    );
    // No eviction helps where the pod may use no GPU, or the GPU is too small.
    for node in ["a10-1", "sick-1", "locked-1", "stuck-1", "cpu-1"] {
        let n = e.nodes.iter().find(|n| n.node == node).unwrap();
        assert!(n.preempt.is_empty(), "{node}: {n:?}");
    }
    assert!(
        e.summary.starts_with("no node can hold it now (11 nodes: 1 CardAllocationUnreadable, 1 CardCordoned, 1 CardInsufficientCore, 4 CardInsufficientMemory,"),
        "{}",
        e.summary
    );
    assert!(
        e.summary
            .contains("nearest is shared-1, which needs 8000 MiB")
            && e.summary
                .ends_with("evicting lower-priority pods would make room (see PREEMPT); defragmentation: no GPU holder could move, even if every namespace opted in (7 not recreated by a ReplicaSet or StatefulSet)"),
        "{}",
        e.summary
    );
    let table = e.to_table();
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")
                == "shared-1 batch/low-a 50 12000 MiB, 20 cores on GPU-shared-1-0"),
        "{table}"
    );

    let never = explained("ml/never");
    assert!(!never.preempts);
    assert!(never.nodes.iter().all(|n| n.preempt.is_empty()));
    assert!(never.to_table().contains("preemptionPolicy Never"));
}

/// PodDisruptionBudgets, as `/preempt` weighs them: a pod whose eviction
/// breaks one is named only where no other set makes room, and flagged.
#[test]
fn victims_keep_disruption_budgets_where_they_can() {
    let mut cluster = snapshot();
    for (name, pod) in [("a", "low-a"), ("c", "low-c")] {
        cluster.budgets.push(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "batch"},
                "spec": {"selector": {"matchLabels": {"app": pod}}},
                "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                           "expectedPods": 1},
            }))
            .unwrap(),
        );
    }
    for pod in cluster.pods.iter_mut() {
        let name = pod.metadata.name.clone().unwrap_or_default();
        pod.metadata.labels = Some([("app".to_string(), name)].into());
    }
    let e = explain(&cluster, "ml", "big", &Config::default(), now()).unwrap();
    let victims = |node: &str| -> Vec<(String, bool)> {
        e.nodes
            .iter()
            .find(|n| n.node == node)
            .unwrap()
            .preempt
            .iter()
            .map(|v| (v.pod.clone(), v.breaks_budget))
            .collect()
    };
    // low-a is cheaper but kept by its budget: low-b instead.
    assert_eq!(victims("shared-1"), [("batch/low-b".to_string(), false)]);
    // Only low-c makes room on shared-2: named, and flagged.
    assert_eq!(victims("shared-2"), [("batch/low-c".to_string(), true)]);
    assert!(
        e.to_table()
            .contains("15000 MiB, 0 cores on GPU-shared-2-0 (breaks a PodDisruptionBudget)")
    );
}

/// Nodes kube-scheduler never offers to gpugate for the pod (here, by its
/// nodeSelector) are named as such, and not judged.
#[test]
fn nodes_kube_scheduler_leaves_out() {
    let e = explained("ml/pinned");
    let a10 = e.nodes.iter().find(|n| n.node == "a10-1").unwrap();
    assert_eq!(
        a10.excluded.as_deref(),
        Some(
            "the pod's nodeSelector kubernetes.io/hostname=shared-1 does not match the node's labels"
        )
    );
    assert!(a10.refusal.is_none() && !a10.fits);
    assert_eq!(verdict(&e, "shared-1").0, "CardInsufficientMemory");
    assert_eq!(e.nearest, ["shared-1"]);
    assert!(
        e.summary
            .starts_with("no node can hold it now (11 nodes: 1 CardInsufficientMemory, 10 excluded by kube-scheduler's checks)"),
        "{}",
        e.summary
    );
}

/// The validating webhook's verdict now, beside the placement's: the
/// namespace's quota (both say so), and a namespace policy only admission
/// enforces.
#[test]
fn quota_and_namespace_policy() {
    let e = explained("capped/over");
    assert_eq!(
        e.admission.as_deref(),
        Some(
            "namespace capped is over its GPU quota (ResourceQuota limits.nvidia.com/gpumem): \
             GPU memory 8000 MiB requested, 0 MiB of 4000 MiB already used (ResourceQuota gpu)"
        )
    );
    let config = Config::from_yaml(
        "namespacePolicies:\n  - name: ml-team\n    namespaces: [ml]\n    limits:\n      gpumemPerPod: 4000\n",
        "test",
    )
    .unwrap();
    let e = explained_with("ml/big", &config);
    assert_eq!(
        e.admission.as_deref(),
        Some(
            "namespace policy \"ml-team\": the pod holds 8000 MiB of GPU memory at once; at most \
             4000 MiB per pod"
        )
    );
    assert!(
        e.to_table()
            .contains("THE VALIDATING WEBHOOK WOULD REFUSE IT NOW")
    );
    assert_eq!(explained("ml/big").admission, None);
}

/// Pods that are not pending on gpugate's account say so; a pod that is
/// not there is an error.
#[test]
fn pods_that_are_not_pending_here() {
    let e = explained("batch/low-a");
    assert_eq!(
        (e.status.as_str(), e.node.as_deref()),
        ("bound", Some("shared-1"))
    );
    assert!(e.nodes.is_empty());
    let e = explained("ml/small");
    assert_eq!(e.status, "pending");
    assert!(
        e.summary
            .starts_with("5 of 11 nodes can hold it now; gpugate ranks"),
        "{}",
        e.summary
    );
    let err = explain(&snapshot(), "ml", "nope", &Config::default(), now()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "pod ml/nope is not in the cluster (give it as NAMESPACE/NAME)"
    );
}

/// The command line, as `gpugate` and as the kubectl plugin: JSON for
/// tools, and a bad pod name refused.
#[test]
fn explain_as_gpugate_and_as_a_kubectl_plugin() {
    let plugin = support::kubectl_plugin::KubectlPlugin::new("explain-cli");
    for bin in plugin.both() {
        let out = support::process::succeeds(Command::new(&bin).args([
            "explain",
            "ml/pair-bound",
            "--cluster",
            CLUSTER,
            "--output",
            "json",
        ]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["pod"], "ml/pair-bound", "{bin:?}");
        let a10 = json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == "a10-1")
            .unwrap_or_else(|| panic!("{json}"));
        assert_eq!(a10["fits"], false);
        assert_eq!(a10["code"], "NumaNotFit");
        assert_eq!(a10["reason"], "2/2 NumaNotFit");
        assert_eq!(
            a10["missing"],
            "needs 2 GPUs on one NUMA node (nvidia.com/numa-bind); the GPUs that could hold a \
             slice are spread over NUMA nodes 0, 1"
        );
    }
    for (pod, said) in [
        ("pair-bound", "give the pod as NAMESPACE/NAME"),
        ("ml/nope", "pod ml/nope is not in the cluster"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gpugate"))
            .args(["explain", pod, "--cluster", CLUSTER])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{err}");
    }
}

/// A pod no GPU of the cluster could hold even empty gets that said with
/// the numbers, not "too little free GPU memory" on every node and a
/// nearest node that could never take it: the request, the largest GPU,
/// the largest MIG profile. A pod that some GPU could hold once freed
/// keeps its nearest node.
#[test]
fn a_pod_no_gpu_could_ever_hold_says_so_with_the_numbers() {
    let yaml = r#"
apiVersion: v1
kind: Node
metadata:
  name: t4
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-t4","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA Tesla T4","health":true}]'
---
apiVersion: v1
kind: Node
metadata:
  name: mig
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-mig","index":0,"count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","health":true,"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":0,"size":1}]},{"name":"3g.20gb","memoryMB":19968,"core":43,"sliceCount":4,"placements":[{"start":0,"size":4},{"start":4,"size":4}]}]}]'
---
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: ml}
spec:
  schedulerName: hami-scheduler
  containers:
  - name: main
    image: x
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "20000"}
---
apiVersion: v1
kind: Pod
metadata: {name: fits-once-free, namespace: ml}
spec:
  schedulerName: hami-scheduler
  containers:
  - name: main
    image: x
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "16000"}
---
apiVersion: v1
kind: Pod
metadata:
  name: holder
  namespace: ml
  annotations:
    hami.io/vgpu-node: t4
    hami.io/vgpu-devices-allocated: "GPU-t4,NVIDIA,8000,0:;"
spec:
  schedulerName: hami-scheduler
  nodeName: t4
  containers:
  - name: main
    image: x
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "8000"}
status: {phase: Running}
"#;
    let snapshot = Snapshot::from_yaml(yaml, "inline").unwrap();
    let config = Config::default();
    let e = explain(&snapshot, "ml", "huge", &config, now()).unwrap();
    let never = e.never.as_deref().expect("never fits");
    for part in [
        "container main asks 1 GPU with 20000 MiB",
        "the largest GPU it may use has 16384 MiB and 100 cores (NVIDIA Tesla T4)",
        "the largest MIG profile it may use has 19968 MiB (3g.20gb)",
    ] {
        assert!(never.contains(part), "{part:?} not in {never:?}");
    }
    assert!(
        e.summary
            .contains("no GPU in the cluster could ever hold it"),
        "{}",
        e.summary
    );
    assert!(
        e.nearest.is_empty(),
        "no nearest node for a pod nothing holds: {e:#?}"
    );
    let json: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
    assert_eq!(json["never"], never);

    // 16,000 MiB fits the T4 once its 8,000 MiB holder is gone: no
    // "never", and the T4 is the nearest node.
    let e = explain(&snapshot, "ml", "fits-once-free", &config, now()).unwrap();
    assert_eq!(e.never, None, "{e:#?}");
    assert_eq!(e.nearest.first().map(String::as_str), Some("t4"), "{e:#?}");
}

/// On a MIG GPU with no free placement for the profile that would hold
/// the pod, explain names the profile and says its placements overlap
/// (rather than only "no free instance").
#[test]
fn a_mig_gpu_without_a_free_placement_is_explained_by_profile() {
    let yaml = format!(
        r#"{}{}{}---
apiVersion: v1
kind: Pod
metadata: {{name: big, namespace: ml}}
spec:
  schedulerName: hami-scheduler
  containers:
  - name: main
    image: x
    resources:
      limits: {{nvidia.com/gpu: "1", nvidia.com/gpumem: "15000"}}
"#,
        mig_node(&[0, 4]),
        holder("low", 0, 0),
        holder("high", 4, 0)
    );
    let snapshot = Snapshot::from_yaml(&yaml, "inline").unwrap();
    let e = explain(&snapshot, "ml", "big", &Config::default(), now()).unwrap();
    assert_eq!(e.never, None, "3g.20gb holds it once freed: {e:#?}");
    let (code, _) = verdict(&e, "mig");
    assert_eq!(code, "CardMigTopologyInfeasible");
    let missing = e
        .nodes
        .iter()
        .find(|n| n.node == "mig")
        .and_then(|n| n.missing.clone())
        .unwrap_or_default();
    assert!(
        missing.contains("on GPU-mig 3g.20gb would hold 15000 MiB, but each of its 2 placements overlaps an instance there"),
        "{missing}"
    );
}
