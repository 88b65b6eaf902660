//! The scenarios of issue 5. Each one creates its nodes and pods through
//! the API server and asserts on what the API server then holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use gpugate::engine::gang::{GROUP_MIN_AVAILABLE, GROUP_NAME, POD_GROUP_LABEL};
use gpugate::hami::keys::{GPU_SCHEDULER_POLICY, NODE_SCHEDULER_POLICY};
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use crate::burst;
use crate::control_plane::{ControlPlane, POLICY_NAMESPACE, ensure_namespace};
use crate::device_plugin::DevicePlugin;
use crate::fixtures::*;
use crate::http::{gauge, metrics, samples};
use crate::manifests;
use crate::wait::eventually;

pub struct Ctx {
    pub cp: ControlPlane,
    pub root: PathBuf,
    /// The control plane's binaries (helm beside them, in ../tools).
    pub bin: PathBuf,
    pub crds: PathBuf,
    pub variants: Vec<(String, Vec<Value>)>,
}

const BIND: Duration = Duration::from_secs(60);
const T4: &str = "NVIDIA Tesla T4";

impl Ctx {
    fn metrics_port(&self) -> u16 {
        self.cp.gpugate_admin_port
    }

    /// `gpugate ARGS --kubeconfig <the admin's> --output json`, as an
    /// operator runs it against the live cluster: its JSON, or why not.
    fn cli_json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpugate"))
            .args(args)
            .arg("--kubeconfig")
            .arg(self.cp.dir.join("admin.kubeconfig"))
            .args(["--output", "json"])
            .output()?;
        ensure!(
            out.status.success(),
            "gpugate {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    pub async fn nodes(&self, scenario: &str, nodes: &[Value]) -> anyhow::Result<()> {
        for n in nodes {
            create_node(&self.cp.admin, scenario, n).await?;
        }
        // gpugate must know the nodes before the pods reach /filter, or the
        // first pod is refused and waits for kube-scheduler's requeue.
        let want = nodes.len() as f64;
        let port = self.metrics_port();
        eventually(
            "gpugate sees the nodes",
            Duration::from_secs(30),
            || async move {
                let text = metrics(port).await.map_err(|e| e.to_string())?;
                let n = gauge(&text, "gpugate_cluster_nodes");
                if n == Some(want) {
                    Ok(())
                } else {
                    Err(format!("{n:?} nodes"))
                }
            },
        )
        .await
    }

    /// The scenario's namespace and the policy namespace (shared by all).
    pub async fn clean(&self, ns: &str, scenario: &str) -> anyhow::Result<()> {
        clean(
            &self.cp.admin,
            &[ns, POLICY_NAMESPACE],
            scenario,
            self.metrics_port(),
        )
        .await
    }
}

/// (scenario name, namespace, node label value)
pub const SCENARIOS: [(&str, &str, &str); 31] = [
    ("policy stories and topology", "e2e-stories", "stories"),
    (
        "exclusive GPU, defaults, pods without GPUs",
        "e2e-exclusive",
        "exclusive",
    ),
    ("denials with their messages", "e2e-denials", "denials"),
    (
        "over-subscription stays pending with gpugate's reasons",
        "e2e-oversub",
        "oversub",
    ),
    ("deleting a pod frees its GPUs", "e2e-free", "free"),
    (
        "gpugate restarted in the middle of a burst",
        "e2e-burst",
        "burst",
    ),
    (
        "certificate rotation while pods are created",
        "e2e-rotation",
        "rotation",
    ),
    ("gang of 4: all or nothing", "e2e-gang", "gang"),
    (
        "deploy/ accepted by the API server (dry run)",
        "e2e-dry-run",
        "dry-run",
    ),
    (
        "burst of 200 pods onto 20 nodes",
        "e2e-scale-burst",
        "scale-burst",
    ),
    (
        "deployed from the Helm chart with HAMi v2.10 values: policy stories",
        "e2e-helm",
        "helm",
    ),
    (
        "renamed resources (hami.io/*) through the Helm chart",
        "e2e-renamed",
        "renamed",
    ),
    (
        "PodGroup gangs (scheduling.x-k8s.io), before and after the CRD",
        "e2e-podgroup",
        "podgroup",
    ),
    (
        "NodeResourceTopology watched once its CRD is installed",
        "e2e-topology",
        "topology",
    ),
    (
        "NUMA alignment of GPU slices with CPUs and memory",
        "e2e-numa",
        "numa",
    ),
    (
        "priorities: kube-scheduler preempts through gpugate",
        "e2e-preempt",
        "preempt",
    ),
    (
        "MIG instances beside hami-core slices (HAMi v2.10)",
        "e2e-mig",
        "mig",
    ),
    (
        "a node whose GPUs come only through DRA is never chosen",
        "e2e-dra",
        "dra",
    ),
    (
        "HA: the leader killed in the middle of a 200-pod burst",
        "e2e-ha-kill",
        "ha-kill",
    ),
    (
        "HA: a rolling restart while pods are created (failurePolicy: Fail)",
        "e2e-ha-roll",
        "ha-roll",
    ),
    (
        "HA: the leading replica cut off from the API server",
        "e2e-ha-cut",
        "ha-cut",
    ),
    (
        "HA: watch streams cut and the watch task ended",
        "e2e-ha-watch",
        "ha-watch",
    ),
    (
        "HA: binds a dying leader left half-done",
        "e2e-ha-half",
        "ha-half",
    ),
    (
        "defragmentation: a whole-GPU pod after moving a slice of a Deployment",
        "e2e-defrag",
        "defrag",
    ),
    (
        "an expired lock is kept while its holder waits for its device plugin",
        "e2e-kept-lock",
        "kept-lock",
    ),
    (
        "an init-container-only pod beside a regular one: each gets its own devices",
        "e2e-init-only",
        "init-only",
    ),
    (
        "scheduler-owned keys: a namespace editor is refused, HAMi's components are not",
        "e2e-owned-keys",
        "owned-keys",
    ),
    (
        "a scoped ResourceQuota (PriorityClass) covers only its pods",
        "e2e-scoped-quota",
        "scoped-quota",
    ),
    (
        "gpugate's requests in its own priority level, no client-side limit",
        "e2e-flow-control",
        "flow-control",
    ),
    (
        "Kueue admits GPU jobs through gpugate's admission check",
        "e2e-kueue",
        "kueue",
    ),
    (
        "a mixed cluster: NVIDIA, Hygon DCU and HCU, Ascend 910B3 and 910C, Kunlunxin vXPU and XPU, Cambricon MLU, AWS Neuron, Biren, Metax GPU and sGPU, Enflame GCU and DRS, Vastai, Iluvatar, AMD, Mthreads; a two-kind pod",
        "e2e-vendors",
        "vendors",
    ),
];

/// The variant rendered from the Helm chart with a HAMi values file.
pub const HELM_HAMI: &str = "helm-hami-v2.10";
/// A HAMi v2.10 values file, as its users carry it.
pub const HAMI_VALUES: &str = "tests/fixtures/helm/hami-v2.10-values.yaml";

pub async fn run(ctx: &Ctx, plugin: &DevicePlugin, index: usize) -> anyhow::Result<()> {
    let (_, ns, scenario) = SCENARIOS[index];
    ensure_namespace(&ctx.cp.admin, ns).await?;
    match index {
        0 => policy_stories(ctx, ns, scenario, &json!({})).await,
        1 => exclusive_and_defaults(ctx, ns, scenario).await,
        2 => denials(ctx, ns).await,
        3 => over_subscription(ctx, ns, scenario).await,
        4 => delete_frees(ctx, ns, scenario).await,
        5 => restart_mid_burst(ctx, ns, scenario).await,
        6 => certificate_rotation(ctx, ns).await,
        7 => gang(ctx, ns, scenario, GangStyle::Labels).await,
        8 => dry_run(ctx).await,
        9 => scale_burst(ctx, plugin, ns, scenario).await,
        10 => helm_hami_values(ctx, ns, scenario).await,
        11 => renamed_resources(ctx, ns, scenario).await,
        12 => pod_group_gangs(ctx, ns, scenario).await,
        13 => node_topologies(ctx).await,
        14 => numa_alignment(ctx, ns, scenario).await,
        15 => preemption(ctx, ns, scenario).await,
        16 => mig(ctx, ns, scenario).await,
        17 => dra_only_node(ctx, ns, scenario).await,
        18 => crate::ha::leader_killed_mid_burst(ctx, plugin, ns, scenario).await,
        19 => crate::ha::rolling_restart(ctx, ns, scenario).await,
        20 => crate::ha::cut_off(ctx, ns, scenario).await,
        21 => crate::ha::watch_faults(ctx, ns, scenario).await,
        22 => crate::ha::half_done_binds(ctx, ns, scenario).await,
        23 => crate::defrag::defragmentation(ctx, ns, scenario).await,
        24 => crate::hazards::expired_lock_kept(ctx, plugin, ns, scenario).await,
        25 => crate::hazards::init_only_beside_regular(ctx, plugin, ns, scenario).await,
        26 => crate::hazards::scheduler_owned_keys(ctx, plugin, ns, scenario).await,
        27 => crate::hazards::scoped_quota(ctx, ns, scenario).await,
        28 => crate::api_usage::flow_control(ctx, ns, scenario).await,
        29 => crate::kueue::kueue(ctx, ns, scenario).await,
        30 => crate::vendors::mixed_cluster(ctx, plugin, ns, scenario).await,
        _ => bail!("no scenario {index}"),
    }
}

// 1 -------------------------------------------------------------------------

/// HAMi's four scheduler-policy stories and its topology example
/// (examples/, the same files `gpugate simulate` is tested with), end to
/// end. kube-scheduler breaks ties between equal nodes at random, so the
/// assertions name "the node the first pod got", not node1.
async fn policy_stories(
    ctx: &Ctx,
    ns: &str,
    scenario: &str,
    node_labels: &Value,
) -> anyhow::Result<()> {
    // The example nodes with these labels added.
    let nodes = |file: &str| -> anyhow::Result<Vec<Value>> {
        let mut nodes = example_objects(&ctx.root, file, "Node")?;
        for n in &mut nodes {
            for (k, v) in node_labels.as_object().into_iter().flatten() {
                n["metadata"]["labels"][k] = v.clone();
            }
        }
        Ok(nodes)
    };
    let stories = [
        (
            "1: node binpack",
            "whole-gpu-pods.yaml",
            "binpack",
            "spread",
        ),
        ("2: node spread", "whole-gpu-pods.yaml", "spread", "spread"),
        ("3: GPU binpack", "slice-pods.yaml", "binpack", "binpack"),
        ("4: GPU spread", "slice-pods.yaml", "binpack", "spread"),
    ];
    for (i, (story, file, node_policy, gpu_policy)) in stories.into_iter().enumerate() {
        ctx.nodes(scenario, &nodes("examples/stories/cluster.yaml")?)
            .await?;
        let mut placed = Vec::new();
        for mut pod in example_objects(&ctx.root, &format!("examples/stories/{file}"), "Pod")? {
            pod["metadata"]["annotations"] = json!({
                NODE_SCHEDULER_POLICY: node_policy,
                GPU_SCHEDULER_POLICY: gpu_policy,
            });
            let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
            create_pod(&ctx.cp.admin, ns, &pod).await?;
            // One after the other, as the stories (and simulate) place them.
            placed.push(wait_bound(&ctx.cp.admin, ns, &name, BIND).await?);
        }
        let [p1, p2] = &placed[..] else {
            bail!("story {story}: expected 2 pods")
        };
        let (n1, n2) = (node_of(p1), node_of(p2));
        let (g1, g2) = (uuids(p1)?, uuids(p2)?);
        let gpu = |node: &str, i: usize| vec![format!("GPU-{node}-{i}")];
        let d1 = devices(p1)?;
        let ok = match i {
            0 => {
                n1 == n2
                    && g1 == gpu(n1, 0)
                    && g2 == gpu(n1, 1)
                    && (d1[0].mem_mib, d1[0].cores) == (40960, 100)
            }
            1 => n1 != n2 && g1 == gpu(n1, 0) && g2 == gpu(n2, 0),
            2 => {
                n1 == n2
                    && g1 == gpu(n1, 0)
                    && g2 == gpu(n1, 0)
                    && (d1[0].mem_mib, d1[0].cores) == (8192, 20)
            }
            _ => n1 == n2 && g1 == gpu(n1, 0) && g2 == gpu(n1, 1),
        };
        ensure!(
            ok,
            "story {story}: pod1 on {n1} {g1:?} {d1:?}, pod2 on {n2} {g2:?}"
        );
        ctx.clean(ns, scenario).await?;
    }

    // Topology: one GPU takes a least-connected card; three take the best set.
    for (file, name, want) in [
        ("one-gpu-pod.yaml", "one-gpu", vec!["GPU-topo-0"]),
        (
            "three-gpu-pod.yaml",
            "three-gpus",
            vec!["GPU-topo-0", "GPU-topo-2", "GPU-topo-3"],
        ),
    ] {
        ctx.nodes(scenario, &nodes("examples/topology/cluster.yaml")?)
            .await?;
        for pod in example_objects(&ctx.root, &format!("examples/topology/{file}"), "Pod")? {
            create_pod(&ctx.cp.admin, ns, &pod).await?;
        }
        let pod = wait_bound(&ctx.cp.admin, ns, name, BIND).await?;
        let mut got = uuids(&pod)?;
        got.sort();
        ensure!(got == want, "topology {name}: {got:?}, want {want:?}");
        ctx.clean(ns, scenario).await?;
    }
    Ok(())
}

// 2 -------------------------------------------------------------------------

async fn admission_requests(port: u16) -> anyhow::Result<f64> {
    let text = metrics(port).await?;
    Ok(samples(&text, "gpugate_admission_requests_total")
        .iter()
        .map(|s| s.value)
        .sum())
}

async fn exclusive_and_defaults(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    ctx.nodes(scenario, &[gpu_node("excl-1", 1, 10, 16384, T4)])
        .await?;
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };

    // nvidia.com/gpu: 1 alone is one whole GPU: the webhook writes
    // gpucores 100 and routes it to hami-scheduler.
    let created = create_pod(
        &ctx.cp.admin,
        ns,
        &gpu_pod("whole", &[("nvidia.com/gpu", "1")]),
    )
    .await?;
    let spec = created.spec.as_ref().context("no spec")?;
    ensure!(
        spec.scheduler_name.as_deref() == Some("hami-scheduler"),
        "schedulerName {:?}",
        spec.scheduler_name
    );
    let limits = limits_of(&created);
    ensure!(
        limits.get("nvidia.com/gpucores").map(String::as_str) == Some("100"),
        "limits after admission: {limits:?}"
    );
    let whole = wait_bound(&ctx.cp.admin, ns, "whole", BIND).await?;
    let d = devices(&whole)?;
    ensure!(
        d.len() == 1 && (d[0].mem_mib, d[0].cores) == (16384, 100),
        "whole GPU pod got {d:?}"
    );
    pods.delete("whole", &now).await?;

    // What makes it exclusive is gpucores 100, not its memory: with only
    // 1024 MiB taken, a slice that asks no cores still may not share the
    // GPU (HAMi: CardComputeUnitsExhausted), though its memory would fit.
    create_pod(
        &ctx.cp.admin,
        ns,
        &gpu_pod(
            "exclusive",
            &[
                ("nvidia.com/gpu", "1"),
                ("nvidia.com/gpumem", "1024"),
                ("nvidia.com/gpucores", "100"),
            ],
        ),
    )
    .await?;
    wait_bound(&ctx.cp.admin, ns, "exclusive", BIND).await?;
    create_pod(
        &ctx.cp.admin,
        ns,
        &gpu_pod("slice", &[("nvidia.com/gpumem", "1000")]),
    )
    .await?;
    wait_event(
        &ctx.cp.admin,
        ns,
        "slice",
        "FailedScheduling",
        "CardComputeUnitsExhausted",
        Duration::from_secs(60),
    )
    .await?;
    ensure!(
        node_of(&pods.get("slice").await?).is_empty(),
        "a slice was placed on the exclusive GPU"
    );
    pods.delete("slice", &now).await?;
    pods.delete("exclusive", &now).await?;

    // The policy gateway: e2e-team's defaults and placement annotations.
    let team = create_pod(
        &ctx.cp.admin,
        POLICY_NAMESPACE,
        &gpu_pod("defaults", &[("nvidia.com/gpu", "1")]),
    )
    .await?;
    let team_limits = limits_of(&team);
    let q = |k: &str| team_limits.get(k).map(String::as_str);
    ensure!(
        q("nvidia.com/gpumem") == Some("4096") && q("nvidia.com/gpucores") == Some("25"),
        "defaults not injected: {team_limits:?}"
    );
    ensure!(
        annotation(&team, NODE_SCHEDULER_POLICY) == Some("spread")
            && annotation(&team, GPU_SCHEDULER_POLICY) == Some("binpack"),
        "policy annotations not injected: {:?}",
        team.metadata.annotations
    );
    let team = wait_bound(&ctx.cp.admin, POLICY_NAMESPACE, "defaults", BIND).await?;
    let d = devices(&team)?;
    ensure!(
        d.len() == 1 && (d[0].mem_mib, d[0].cores) == (4096, 25),
        "team pod got {d:?}"
    );

    // A pod without GPUs never reaches gpugate (matchConditions) and is
    // left as its author wrote it.
    let before = admission_requests(ctx.metrics_port()).await?;
    let plain: Pod = serde_json::from_value(json!({
        "metadata": {"name": "no-gpu"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"limits": {"cpu": "1"}}}]}
    }))?;
    let plain = pods.create(&PostParams::default(), &plain).await?;
    let spec = plain.spec.as_ref().context("no spec")?;
    ensure!(
        spec.scheduler_name.as_deref() == Some("default-scheduler"),
        "pod without GPUs got schedulerName {:?}",
        spec.scheduler_name
    );
    ensure!(
        plain
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| a.keys().all(|k| !k.starts_with("hami.io/"))),
        "pod without GPUs got annotations {:?}",
        plain.metadata.annotations
    );
    let after = admission_requests(ctx.metrics_port()).await?;
    ensure!(
        after == before,
        "gpugate was called for a pod without GPUs ({before} -> {after} admission requests)"
    );
    Ok(())
}

// 3 -------------------------------------------------------------------------

async fn denials(ctx: &Ctx, ns: &str) -> anyhow::Result<()> {
    let one = [("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "1024")];
    let mut node_name = gpu_pod("node-name", &one);
    node_name["spec"]["nodeName"] = json!("somewhere");
    let mut privileged = gpu_pod("privileged", &one);
    privileged["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    let cores = gpu_pod(
        "cores",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpucores", "150")],
    );
    let mut policy = gpu_pod("policy", &one);
    policy["metadata"]["annotations"] = json!({GPU_SCHEDULER_POLICY: "fastest"});
    let mut forged = gpu_pod("forged", &one);
    forged["metadata"]["annotations"] =
        json!({"hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,1024,10:;"});
    // Forged on a pod that asks for no GPU at all: the ledger reads
    // allocations from any pod, so the validating webhook sees these too.
    let forged_plain = json!({
        "metadata": {"name": "forged-plain", "annotations": {"hami.io/vgpu-node": "node1"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    });
    let cases = [
        (&node_name, "spec.nodeName"),
        (&privileged, "privileged"),
        (&cores, "gpucores"),
        (&policy, "fastest"),
        (
            &forged,
            "hami.io/vgpu-devices-allocated is written by the vGPU scheduler",
        ),
        (
            &forged_plain,
            "hami.io/vgpu-node is written by the vGPU scheduler",
        ),
    ];
    let mut wrong = Vec::new();
    for (pod, needle) in cases {
        let message = create_refused(&ctx.cp.admin, ns, pod).await?;
        if !(message.contains(needle) && message.contains(".gpugate.io\" denied the request")) {
            wrong.push(format!("{}: {message}", pod["metadata"]["name"]));
        }
    }
    ensure!(
        wrong.is_empty(),
        "unexpected messages:\n{}",
        wrong.join("\n")
    );

    // Over quota: a ResourceQuota on GPU memory, as HAMi's users write it.
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "gpu"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "2048"}}
    }))?;
    Api::<ResourceQuota>::namespaced(ctx.cp.admin.clone(), ns)
        .create(&PostParams::default(), &quota)
        .await?;
    let big = gpu_pod(
        "big",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "4096")],
    );
    quota_known(&ctx.cp.admin, ns, &big, "quota").await?;
    let message = create_refused(&ctx.cp.admin, ns, &big).await?;
    ensure!(
        message.contains("is over its GPU quota (ResourceQuota limits.nvidia.com/gpumem)")
            && message.contains("validate.gpugate.io"),
        "over quota: {message}"
    );
    Ok(())
}

// 4 -------------------------------------------------------------------------

async fn over_subscription(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    ctx.nodes(scenario, &[gpu_node("over-1", 2, 10, 16384, T4)])
        .await?;
    create_pod(
        &ctx.cp.admin,
        ns,
        &gpu_pod(
            "too-big",
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "20000")],
        ),
    )
    .await?;
    // kube-scheduler's event carries the reasons of gpugate's failedNodes.
    let message = wait_event(
        &ctx.cp.admin,
        ns,
        "too-big",
        "FailedScheduling",
        "CardInsufficientMemory",
        Duration::from_secs(60),
    )
    .await?;
    // And gpugate's own event says the same.
    wait_event(
        &ctx.cp.admin,
        ns,
        "too-big",
        "FilteringFailed",
        "CardInsufficientMemory",
        Duration::from_secs(30),
    )
    .await?;
    let pod = Api::<Pod>::namespaced(ctx.cp.admin.clone(), ns)
        .get("too-big")
        .await?;
    ensure!(
        node_of(&pod).is_empty() && pod.status.and_then(|s| s.phase).as_deref() == Some("Pending"),
        "over-subscribed pod was placed ({message})"
    );
    Ok(())
}

// 5 -------------------------------------------------------------------------

async fn delete_frees(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    ctx.nodes(scenario, &[gpu_node("free-1", 1, 10, 16384, T4)])
        .await?;
    create_pod(
        &ctx.cp.admin,
        ns,
        &gpu_pod("first", &[("nvidia.com/gpu", "1")]),
    )
    .await?;
    let first = wait_bound(&ctx.cp.admin, ns, "first", BIND).await?;
    create_pod(
        &ctx.cp.admin,
        ns,
        &gpu_pod("second", &[("nvidia.com/gpu", "1")]),
    )
    .await?;
    wait_event(
        &ctx.cp.admin,
        ns,
        "second",
        "FailedScheduling",
        "CardInsufficientMemory",
        Duration::from_secs(60),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    ensure!(
        node_of(&pods.get("second").await?).is_empty(),
        "second pod placed while the GPU was taken"
    );
    pods.delete(
        "first",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    let second = wait_bound_after_delete(&ctx.cp.admin, ns, "second", BIND).await?;
    ensure!(
        uuids(&second)? == uuids(&first)?,
        "second got {:?}, the freed GPU is {:?}",
        uuids(&second)?,
        uuids(&first)?
    );
    Ok(())
}

// 6 -------------------------------------------------------------------------

/// 24 slices that fill 6 GPUs exactly (4 × 4096 MiB of 16384 each), created
/// by 4 clients at once; gpugate is killed (SIGKILL) after the 8th and
/// started again a second later. Clients retry creates the webhook refused
/// while it was down. Exact fit means one double-counted or leaked slice
/// leaves a pod pending.
async fn restart_mid_burst(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let nodes: Vec<Value> = (1..=3)
        .map(|i| gpu_node(&format!("burst-{i}"), 2, 10, 16384, T4))
        .collect();
    ctx.nodes(scenario, &nodes).await?;
    const PODS: usize = 24;
    let created = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    // A JoinSet: if the scenario ends early, dropping it stops the
    // creators, so they cannot leak pods into the next scenario.
    let mut creators = tokio::task::JoinSet::new();
    for c in 0..4 {
        let (client, created, refused, ns) = (
            ctx.cp.admin.clone(),
            created.clone(),
            refused.clone(),
            ns.to_string(),
        );
        creators.spawn(async move {
            for i in 0..PODS / 4 {
                let pod = gpu_pod(
                    &format!("burst-{c}-{i}"),
                    &[("nvidia.com/gpumem", "4096"), ("nvidia.com/gpucores", "20")],
                );
                let mut tries = 0;
                loop {
                    match create_pod(&client, &ns, &pod).await {
                        Ok(_) => break,
                        // Refused because gpugate is down (failurePolicy:
                        // Fail): what a client sees during a restart. Any
                        // other refusal is a failure.
                        Err(kube::Error::Api(s))
                            if s.message.contains("failed calling webhook") && tries < 300 =>
                        {
                            refused.fetch_add(1, Ordering::Relaxed);
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => return Err(anyhow!("create burst-{c}-{i}: {e}")),
                    }
                }
                created.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(())
        });
    }
    let c = created.clone();
    eventually("8 pods created", Duration::from_secs(60), || {
        let c = c.clone();
        async move {
            let n = c.load(Ordering::Relaxed);
            if n >= 8 { Ok(()) } else { Err(format!("{n}")) }
        }
    })
    .await?;
    ctx.cp.kill_gpugate();
    tokio::time::sleep(Duration::from_secs(1)).await;
    ctx.cp.start_gpugate().await?;
    while let Some(done) = creators.join_next().await {
        done??;
    }

    let api: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    let bound = eventually("all 24 pods bound", Duration::from_secs(180), || {
        let api = api.clone();
        async move {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let bound: Vec<Pod> = list.items.into_iter().filter(is_bound).collect();
            if bound.len() == PODS {
                Ok(bound)
            } else {
                Err(format!("{} bound", bound.len()))
            }
        }
    })
    .await?;
    let usage = usage_by_gpu(&bound)?;
    for (gpu, (pods, mem, cores)) in &usage {
        ensure!(
            *pods <= 10 && *mem <= 16384 && *cores <= 100,
            "{gpu} over-committed: {pods} pods, {mem} MiB, {cores} cores"
        );
    }
    ensure!(usage.len() == 6, "expected 6 GPUs in use, got {usage:?}");

    // The restarted gpugate's ledger, as its metrics show it, equals the
    // annotations, pod by pod and GPU by GPU.
    ledger_matches(ctx.metrics_port(), ns, &bound, Duration::from_secs(30)).await?;
    println!(
        "    burst: {PODS} pods on 6 GPUs, {} creates refused while gpugate was down",
        refused.load(Ordering::Relaxed)
    );
    Ok(())
}

// 7 -------------------------------------------------------------------------

async fn cert_not_after(port: u16) -> anyhow::Result<f64> {
    let text = metrics(port).await?;
    gauge(&text, "gpugate_tls_cert_not_after_timestamp_seconds")
        .ok_or_else(|| anyhow!("no gpugate_tls_cert_not_after_timestamp_seconds"))
}

/// The serving certificate is replaced three times (new key, same CA, as
/// cert-manager renews) while pods are created one after another, from
/// before the first replacement until after the last; every create must be
/// admitted and mutated at the first try.
async fn certificate_rotation(ctx: &Ctx, ns: &str) -> anyhow::Result<()> {
    let client = ctx.cp.admin.clone();
    let ns_owned = ns.to_string();
    let rotations = Arc::new(AtomicUsize::new(0));
    let seen_by_creator = rotations.clone();
    // Creates one pod after another until told to stop, noting how many
    // certificates had been put in service when each was created.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut creator = tokio::task::JoinSet::new();
    creator.spawn(async move {
        let mut failures = Vec::new();
        let mut per_certificate = BTreeMap::<usize, usize>::new();
        let mut i = 0;
        while !*stopped.borrow() {
            let pod = gpu_pod(&format!("rot-{i}"), &[("nvidia.com/gpumem", "1024")]);
            let certificate = seen_by_creator.load(Ordering::Relaxed);
            match create_pod(&client, &ns_owned, &pod).await {
                Ok(p)
                    if p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref())
                        == Some("hami-scheduler") =>
                {
                    *per_certificate.entry(certificate).or_default() += 1;
                }
                Ok(_) => failures.push(format!("rot-{i}: admitted but not mutated")),
                Err(e) => failures.push(format!("rot-{i}: {e}")),
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (i, failures, per_certificate)
    });
    let port = ctx.metrics_port();
    let mut seen = vec![cert_not_after(port).await?];
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let (cert, key) = ctx.cp.pki.renew_webhook()?;
        // Each file replaced by rename, key first; gpugate refuses a
        // mismatched pair until both are in place.
        for (name, text) in [("webhook.key", &key), ("webhook.crt", &cert)] {
            let tmp = ctx.cp.pki.path(&format!("{name}.tmp"));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, ctx.cp.pki.path(name))?;
        }
        let last = *seen.last().unwrap();
        let now = eventually(
            "gpugate serves the renewed certificate",
            Duration::from_secs(15),
            || async move {
                match cert_not_after(port).await {
                    Ok(v) if v != last => Ok(v),
                    Ok(_) => Err("old certificate still in service".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await?;
        seen.push(now);
        rotations.fetch_add(1, Ordering::Relaxed);
    }
    // Keep creating for a while under the last certificate too.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _ = stop.send(true);
    let (created, failures, per_certificate) = creator
        .join_next()
        .await
        .ok_or_else(|| anyhow!("creator vanished"))??;
    ensure!(
        failures.is_empty(),
        "{} of {created} creates failed during rotation:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Pods were created under every certificate: the original and each of
    // the three renewals.
    ensure!(
        (0..=3).all(|n| per_certificate.get(&n).copied().unwrap_or(0) > 0),
        "creates per certificate in service: {per_certificate:?}"
    );
    println!("    rotation: {created} pods created, per certificate {per_certificate:?}");
    Ok(())
}

// 8 -------------------------------------------------------------------------

/// How a gang's members name their group.
#[derive(Clone, Copy)]
enum GangStyle {
    /// `pod-group.scheduling.sigs.k8s.io/name` and `.../min-available`.
    Labels,
    /// `scheduling.x-k8s.io/pod-group`, minMember from the PodGroup.
    PodGroup,
}

fn member(style: GangStyle, group: &str, i: usize, min: usize) -> Value {
    let mut p = gpu_pod(&format!("{group}-{i}"), &[("nvidia.com/gpu", "1")]);
    p["metadata"]["labels"] = match style {
        GangStyle::Labels => json!({GROUP_NAME: group, GROUP_MIN_AVAILABLE: min.to_string()}),
        GangStyle::PodGroup => json!({POD_GROUP_LABEL: group}),
    };
    p
}

/// Gang `fits`: 4 whole GPUs on 2 nodes, exactly room for 4 members. Then
/// gang `short`: 4 members, min 4, with 3 free GPUs: nobody is placed.
/// With PodGroups, both groups' PodGroup (minMember 4) exist already.
async fn gang(ctx: &Ctx, ns: &str, scenario: &str, style: GangStyle) -> anyhow::Result<()> {
    let prefix = match style {
        GangStyle::Labels => "gang",
        GangStyle::PodGroup => "pg",
    };
    ctx.nodes(
        scenario,
        &[
            gpu_node(&format!("{prefix}-1"), 2, 10, 16384, T4),
            gpu_node(&format!("{prefix}-2"), 2, 10, 16384, T4),
        ],
    )
    .await?;
    for i in 0..4 {
        create_pod(&ctx.cp.admin, ns, &member(style, "fits", i, 4)).await?;
    }
    let mut gpus = BTreeSet::new();
    for i in 0..4 {
        let p = wait_bound(
            &ctx.cp.admin,
            ns,
            &format!("fits-{i}"),
            Duration::from_secs(90),
        )
        .await?;
        gpus.extend(uuids(&p)?);
    }
    ensure!(gpus.len() == 4, "gang members share GPUs: {gpus:?}");

    let third = format!("{prefix}-3");
    create_node(&ctx.cp.admin, scenario, &gpu_node(&third, 3, 10, 16384, T4)).await?;
    for i in 0..4 {
        create_pod(&ctx.cp.admin, ns, &member(style, "short", i, 4)).await?;
    }
    // Every member is refused because the group does not fit (not only
    // because its siblings did not exist yet: that is GangIncomplete).
    // Members refused before their siblings existed wait in kube-scheduler's
    // unschedulable queue until a cluster event (or 5 minutes): a node
    // update every few seconds stands for the events of a live cluster.
    let nodes: Api<Node> = Api::all(ctx.cp.admin.clone());
    let mut last_poke = std::time::Instant::now() - Duration::from_secs(10);
    let mut pokes = 0u32;
    eventually(
        "every member refused with GangNotFit",
        Duration::from_secs(60),
        || {
            let poke = last_poke.elapsed() > Duration::from_secs(3);
            if poke {
                last_poke = std::time::Instant::now();
                pokes += 1;
            }
            let (nodes, admin, n, third) =
                (nodes.clone(), ctx.cp.admin.clone(), pokes, third.clone());
            async move {
                if poke {
                    let label =
                        json!({"metadata": {"labels": {"e2e.gpugate.io/poke": n.to_string()}}});
                    nodes
                        .patch(&third, &PatchParams::default(), &Patch::Merge(label))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let mut missing = Vec::new();
                for i in 0..4 {
                    let pod = format!("short-{i}");
                    let events = events_of(&admin, ns, &pod)
                        .await
                        .map_err(|e| e.to_string())?;
                    if !events
                        .iter()
                        .any(|(r, m)| r == "FailedScheduling" && m.contains("GangNotFit"))
                    {
                        missing.push(pod);
                    }
                }
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("not yet: {missing:?}"))
                }
            }
        },
    )
    .await?;
    // Some time for a wrong bind to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    let placed: Vec<String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("short-"))
        })
        .filter(|p| !node_of(p).is_empty())
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    ensure!(
        placed.is_empty(),
        "members of a gang that cannot fit were placed: {placed:?}"
    );
    Ok(())
}

// 9 -------------------------------------------------------------------------

/// cert-manager's CRDs (from its Go module) installed for real, then every
/// object of both variants applied as a server-side dry run with strict
/// field validation.
async fn dry_run(ctx: &Ctx) -> anyhow::Result<()> {
    let mut crds = Vec::new();
    for entry in std::fs::read_dir(&ctx.crds)? {
        crds.extend(manifests::documents(&std::fs::read_to_string(
            entry?.path(),
        )?)?);
    }
    ensure!(
        crds.len() >= 4,
        "expected cert-manager's CRDs in {}",
        ctx.crds.display()
    );
    let discovery = Discovery::new(ctx.cp.admin.clone()).run().await?;
    for crd in &crds {
        manifests::apply(&ctx.cp.admin, &discovery, crd, false).await?;
    }
    // Each CRD is established on its own: wait until every kind is served.
    let kinds: Vec<kube::core::GroupVersionKind> = crds
        .iter()
        .map(|c| {
            kube::core::GroupVersionKind::gvk(
                c["spec"]["group"].as_str().unwrap_or(""),
                "v1",
                c["spec"]["names"]["kind"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let client = ctx.cp.admin.clone();
    let discovery = eventually(
        "cert-manager's kinds are served",
        Duration::from_secs(30),
        || {
            let (client, kinds) = (client.clone(), kinds.clone());
            async move {
                let d = Discovery::new(client)
                    .run()
                    .await
                    .map_err(|e| e.to_string())?;
                match kinds.iter().find(|k| d.resolve_gvk(k).is_none()) {
                    None => Ok(d),
                    Some(k) => Err(format!("{k:?} not yet")),
                }
            }
        },
    )
    .await?;
    let mut refused = Vec::new();
    let mut counts = BTreeMap::new();
    for (variant, objects) in &ctx.variants {
        for o in objects {
            if let Err(e) = manifests::apply(&ctx.cp.admin, &discovery, o, true).await {
                refused.push(format!("{variant}: {e:#}"));
            }
        }
        counts.insert(variant.clone(), objects.len());
    }
    ensure!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    // A Deployment's dry run only warns about Pod Security; a Pod is held
    // to the namespace's `enforce: restricted` label (applied for real at
    // setup). So the pod each variant would run is dry-run created too.
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), "gpugate");
    for (variant, objects) in &ctx.variants {
        let template = &manifests::find(objects, "Deployment", "gpugate")?["spec"]["template"];
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": format!("gpugate-{variant}"),
                "labels": template["metadata"]["labels"],
            },
            "spec": template["spec"],
        }))?;
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        pods.create(&dry, &pod)
            .await
            .with_context(|| format!("{variant}: the Deployment's pod"))?;
    }
    println!("    dry run: {counts:?} objects accepted, and each variant's pod");
    Ok(())
}

// 10 ------------------------------------------------------------------------

/// The scale benchmark's load (benches/scale.rs, the same code in
/// `burst.rs`) at a size CI can afford: 200 slices of 1 GPU, 4096 MiB and
/// 20 cores created at once by 32 clients onto 20 nodes of 8 × V100 32 GB,
/// node policy binpack, with the device plugin taking 200 ms per Allocate.
/// All must be bound, no GPU over its share count, memory or cores, and
/// gpugate's ledger equal to the annotations. Throughput is printed, not
/// asserted (a noisy 2-core machine).
async fn scale_burst(
    ctx: &Ctx,
    plugin: &DevicePlugin,
    ns: &str,
    scenario: &str,
) -> anyhow::Result<()> {
    const NODES: usize = 20;
    const PODS: usize = 200;
    let names: Vec<String> = (0..NODES).map(|i| format!("sb-{i:02}")).collect();
    burst::create_nodes(&ctx.cp.admin, scenario, &names, 10).await?;
    burst::wait_gpugate_nodes(ctx.metrics_port(), NODES, Duration::from_secs(30)).await?;

    // The suite's plugin answers at once; here Allocate takes a while, as
    // it does on a node. Put back whatever happens.
    struct Restore<'a>(&'a DevicePlugin, Duration);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            self.0.set_delay(self.1);
        }
    }
    let _restore = Restore(plugin, plugin.delay());
    plugin.set_delay(Duration::from_millis(200));

    let workload = burst::Workload::Gpu {
        node_policy: "binpack".into(),
    };
    let profile = workload.profile();
    let port = ctx.metrics_port();
    let sched_before = burst::schedule_attempts(&ctx.cp.scheduler_metrics().await?, profile);
    let binds_before = burst::bind_outcomes(&metrics(port).await?);
    plugin.take_holds();
    let outcome = burst::run(
        &ctx.cp.admin,
        &burst::Burst {
            ns: ns.to_string(),
            prefix: "sb".into(),
            pods: PODS,
            creators: 32,
            workload,
            deadline: Duration::from_secs(240),
        },
    )
    .await?;
    let attempts = burst::delta(
        &burst::schedule_attempts(&ctx.cp.scheduler_metrics().await?, profile),
        &sched_before,
    );
    let binds = burst::delta(&burst::bind_outcomes(&metrics(port).await?), &binds_before);
    ensure!(
        outcome.unbound_count == 0,
        "{} of {PODS} pods not bound after 240 s, e.g. {:?}",
        outcome.unbound_count,
        outcome.unbound
    );
    let placed = burst::placement(&ctx.cp.admin, ns, true, Some(port)).await?;
    placed.check(PODS)?;
    let total: f64 = attempts.values().sum();
    let failed = total - attempts.get("scheduled").copied().unwrap_or(0.0);
    let bind_failures: BTreeMap<String, f64> = binds
        .iter()
        .filter(|(k, _)| !k.starts_with("ok/"))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let holds = plugin.take_holds();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    let hold_p50 = median(holds.iter().map(|h| h.held).collect());
    let plugin_p50 = median(holds.iter().map(|h| h.after_bound).collect());
    println!(
        "    scale burst: {} pods ({} creates retried) on {} nodes (min {}), {} GPUs, \
         in {:.1} s: {:.1} pods/s, create→bound p50 {:.2} s, p99 {:.2} s, max {:.2} s; \
         node locks held p50 {:.2} s ({:.2} s after the bind was seen); \
         scheduling attempts {:.2}/pod, failed {:.0} ({}); gpugate bind failures: {}",
        outcome.created,
        outcome.create_retries,
        placed.nodes_used,
        burst::min_nodes(PODS),
        placed.gpus_used,
        outcome.span.as_secs_f64(),
        outcome.pods_per_second(),
        outcome.quantile(0.5).as_secs_f64(),
        outcome.quantile(0.99).as_secs_f64(),
        outcome.max().as_secs_f64(),
        hold_p50.as_secs_f64(),
        plugin_p50.as_secs_f64(),
        total / PODS as f64,
        failed,
        burst::show(&attempts),
        burst::show(&bind_failures),
    );
    Ok(())
}

// 11 ------------------------------------------------------------------------

/// Runs `body` with the processes deployed from these chart objects and
/// gpugate config, then deploys deploy/'s cert-manager variant again,
/// whatever happened.
async fn on_chart<F>(ctx: &Ctx, objects: &[Value], body: F) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    let config = manifests::config_map_entry(objects, "gpugate-config", "gpugate.yaml")?;
    let result = match ctx.cp.redeploy(objects, &config).await {
        Ok(()) => body.await,
        Err(e) => Err(e.context("deploying from the chart")),
    };
    let restored = ctx
        .cp
        .redeploy(&ctx.variants[0].1, &ctx.cp.gpugate_config)
        .await
        .context("deploying deploy/cert-manager again");
    result.and(restored)
}

/// gpugate's config, its webhook configurations, RBAC and kube-scheduler's
/// configuration from the Helm chart rendered with a HAMi v2.10 values
/// file (the variant scenario 9 dry-runs), then scenario 1's stories on it.
/// The file's `nodeLabelSelector: {gpu: "on"}` becomes kube-scheduler's
/// NodeAffinity: the story nodes carry the label, and a pod whose only GPU
/// is on a node without it stays pending.
async fn helm_hami_values(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let objects = &ctx
        .variants
        .iter()
        .find(|(v, _)| v == HELM_HAMI)
        .context("no chart variant")?
        .1;
    on_chart(ctx, objects, async {
        policy_stories(ctx, ns, scenario, &json!({"gpu": "on"})).await?;
        ctx.nodes(scenario, &[gpu_node("helm-unlabelled", 1, 10, 16384, T4)])
            .await?;
        create_pod(
            &ctx.cp.admin,
            ns,
            &gpu_pod("no-gpu-label", &[("nvidia.com/gpu", "1")]),
        )
        .await?;
        wait_event(
            &ctx.cp.admin,
            ns,
            "no-gpu-label",
            "FailedScheduling",
            "node affinity",
            Duration::from_secs(60),
        )
        .await?;
        let pod = Api::<Pod>::namespaced(ctx.cp.admin.clone(), ns)
            .get("no-gpu-label")
            .await?;
        ensure!(
            node_of(&pod).is_empty(),
            "a pod was placed on a node without gpu=on"
        );
        Ok(())
    })
    .await
}

// 12 ------------------------------------------------------------------------

/// The chart with every resource renamed to hami.io/: gpugate's config,
/// the webhooks' matchConditions and kube-scheduler's managedResources
/// follow. A pod asking for hami.io/gpu is mutated and placed with HAMi's
/// annotations; one asking for nvidia.com/gpu no longer reaches gpugate.
async fn renamed_resources(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let objects = crate::control_plane::render_chart(
        &ctx.bin,
        &ctx.root,
        &[
            "--set",
            "resourceName=hami.io/gpu,resourceMem=hami.io/gpumem,\
             resourceMemPercentage=hami.io/gpumem-percentage,\
             resourceCores=hami.io/gpucores,resourcePriority=hami.io/priority",
        ],
    )?;
    on_chart(ctx, &objects, async {
        ctx.nodes(scenario, &[gpu_node("renamed-1", 2, 10, 16384, T4)])
            .await?;
        let before = admission_requests(ctx.metrics_port()).await?;
        let plain = create_pod(
            &ctx.cp.admin,
            ns,
            &gpu_pod("old-name", &[("nvidia.com/gpu", "1")]),
        )
        .await?;
        let spec = plain.spec.unwrap_or_default();
        ensure!(
            spec.scheduler_name.as_deref() == Some("default-scheduler"),
            "a pod asking for nvidia.com/gpu was sent to {:?}",
            spec.scheduler_name
        );
        ensure!(
            admission_requests(ctx.metrics_port()).await? == before,
            "the webhooks saw a pod asking only for nvidia.com/gpu"
        );
        let pod = create_pod(
            &ctx.cp.admin,
            ns,
            &gpu_pod(
                "new-name",
                &[
                    ("hami.io/gpu", "1"),
                    ("hami.io/gpumem", "3000"),
                    ("hami.io/gpucores", "30"),
                ],
            ),
        )
        .await?;
        ensure!(
            pod.spec.and_then(|s| s.scheduler_name).as_deref() == Some("hami-scheduler"),
            "the pod asking for hami.io/gpu was not routed to hami-scheduler"
        );
        let bound = wait_bound(&ctx.cp.admin, ns, "new-name", BIND).await?;
        let d = devices(&bound)?;
        ensure!(
            node_of(&bound) == "renamed-1"
                && d.len() == 1
                && (d[0].mem_mib, d[0].cores) == (3000, 30),
            "new-name: {} {d:?}",
            node_of(&bound)
        );
        // gpugate's scope check (at its start, then every minute) agrees:
        // its webhooks name its resources. (At the redeploy's restart the
        // old webhooks were still in place.)
        ctx.cp.kill_gpugate();
        ctx.cp.start_gpugate().await?;
        wait_uncovered(ctx, 0.0).await?;
        // deploy/'s webhooks (nvidia.com/) with this config (hami.io/): the
        // check, run at gpugate's start, names all four GPU resources.
        let discovery = Discovery::new(ctx.cp.admin.clone()).run().await?;
        for o in manifests::local_webhooks(
            &ctx.variants[0].1,
            ctx.cp.gpugate_port,
            &ctx.cp.pki.webhook.ca_cert_pem,
        )? {
            manifests::apply(&ctx.cp.admin, &discovery, &o, false).await?;
        }
        ctx.cp.kill_gpugate();
        ctx.cp.start_gpugate().await?;
        wait_uncovered(ctx, 4.0).await
    })
    .await
}

/// Waits until gpugate's gauge `name` satisfies `ok`.
pub async fn wait_gauge(
    ctx: &Ctx,
    name: &'static str,
    timeout: Duration,
    ok: impl Fn(f64) -> bool + Copy,
) -> anyhow::Result<()> {
    let port = ctx.metrics_port();
    eventually(name, timeout, move || async move {
        let text = metrics(port).await.map_err(|e| e.to_string())?;
        match gauge(&text, name) {
            Some(n) if ok(n) => Ok(()),
            n => Err(format!("{n:?}")),
        }
    })
    .await
}

/// Waits until gpugate reports `want` uncovered GPU resources for both
/// webhook configurations.
async fn wait_uncovered(ctx: &Ctx, want: f64) -> anyhow::Result<()> {
    let port = ctx.metrics_port();
    eventually(
        "gpugate_webhook_resources_uncovered",
        Duration::from_secs(30),
        || async move {
            let text = metrics(port).await.map_err(|e| e.to_string())?;
            let got: Vec<(String, f64)> = samples(&text, "gpugate_webhook_resources_uncovered")
                .iter()
                .map(|s| (s.label("configuration").to_string(), s.value))
                .collect();
            if got.len() == 2 && got.iter().all(|(_, v)| *v == want) {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await
}

// 13 ------------------------------------------------------------------------

/// scheduler-plugins' Coscheduling gangs, as HAMi v2.10 users label them.
/// Before the PodGroup CRD is installed, a pod with the label is placed on
/// its own, with a warning event that says why. Then the CRD
/// (tests/fixtures/crds) is installed, gpugate starts watching PodGroups
/// within its 10-second check, a member of a PodGroup that does not exist
/// is refused with that reason, and scenario 8's two gangs run with
/// PodGroups (minMember 4, scheduleTimeoutSeconds 30).
async fn pod_group_gangs(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let crd = manifests::documents(&std::fs::read_to_string(
        ctx.root
            .join("tests/fixtures/crds/scheduling.x-k8s.io_podgroups.yaml"),
    )?)?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(ctx.cp.admin.clone());
    if crds
        .get_opt("podgroups.scheduling.x-k8s.io")
        .await?
        .is_none()
    {
        ctx.nodes(scenario, &[gpu_node("pg-solo", 1, 10, 16384, T4)])
            .await?;
        let mut solo = gpu_pod("solo", &[("nvidia.com/gpu", "1")]);
        solo["metadata"]["labels"] = json!({POD_GROUP_LABEL: "nowhere"});
        create_pod(&ctx.cp.admin, ns, &solo).await?;
        wait_bound(&ctx.cp.admin, ns, "solo", BIND).await?;
        wait_event(
            &ctx.cp.admin,
            ns,
            "solo",
            "PodGroupNotServed",
            "install the CRD",
            Duration::from_secs(30),
        )
        .await?;
        ctx.clean(ns, scenario).await?;
    } else {
        println!("    the PodGroup CRD was installed already: the part without it is skipped");
    }

    let pg = kube::core::GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup");
    let discovery = install_crd(ctx, &crd, &pg).await?;
    for group in ["fits", "short"] {
        let object = json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": group, "namespace": ns},
            "spec": {"minMember": 4, "scheduleTimeoutSeconds": 30},
        });
        manifests::apply(&ctx.cp.admin, &discovery, &object, false).await?;
    }
    // gpugate notices the kind within its check (10 s) and lists both.
    wait_gauge(
        ctx,
        "gpugate_cluster_pod_groups",
        Duration::from_secs(30),
        |n| n >= 2.0,
    )
    .await?;
    // A member of a PodGroup that does not exist is refused with that reason.
    ctx.nodes(scenario, &[gpu_node("pg-probe", 1, 10, 16384, T4)])
        .await?;
    let mut orphan = gpu_pod("orphan", &[("nvidia.com/gpu", "1")]);
    orphan["metadata"]["labels"] = json!({POD_GROUP_LABEL: "missing"});
    create_pod(&ctx.cp.admin, ns, &orphan).await?;
    let nodes: Api<Node> = Api::all(ctx.cp.admin.clone());
    let mut pokes = 0u32;
    eventually(
        "a member of a missing PodGroup is refused",
        Duration::from_secs(60),
        || {
            pokes += 1;
            let (nodes, admin, n) = (nodes.clone(), ctx.cp.admin.clone(), pokes);
            async move {
                // A cluster event, so that kube-scheduler tries the pod again.
                let label = json!({"metadata": {"labels": {"e2e.gpugate.io/poke": n.to_string()}}});
                nodes
                    .patch("pg-probe", &PatchParams::default(), &Patch::Merge(label))
                    .await
                    .map_err(|e| e.to_string())?;
                let events = events_of(&admin, ns, "orphan")
                    .await
                    .map_err(|e| e.to_string())?;
                events
                    .iter()
                    .any(|(r, m)| {
                        r == "FailedScheduling"
                            && m.contains("PodGroup e2e-podgroup/missing does not exist")
                    })
                    .then_some(())
                    .ok_or_else(|| format!("{events:?}"))
            }
        },
    )
    .await?;
    let pod = Api::<Pod>::namespaced(ctx.cp.admin.clone(), ns)
        .get("orphan")
        .await?;
    ensure!(node_of(&pod).is_empty(), "the orphan member was placed");
    ctx.clean(ns, scenario).await?;
    gang(ctx, ns, scenario, GangStyle::PodGroup).await
}

// 14 ------------------------------------------------------------------------

/// The NodeResourceTopology CRD (tests/fixtures/crds, v1alpha2) installed
/// and two objects created: gpugate notices the kind within its 10-second
/// check, lists both, and forgets a deleted one. Placement does not use
/// them yet (issue 14); this shows the watch against a real API server.
async fn node_topologies(ctx: &Ctx) -> anyhow::Result<()> {
    let crd = manifests::documents(&std::fs::read_to_string(
        ctx.root
            .join("tests/fixtures/crds/topology.node.k8s.io_noderesourcetopologies.yaml"),
    )?)?;
    let gvk = kube::core::GroupVersionKind::gvk(
        "topology.node.k8s.io",
        "v1alpha2",
        "NodeResourceTopology",
    );
    let discovery = install_crd(ctx, &crd, &gvk).await?;
    let object = |name: &str| {
        json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
            "metadata": {"name": name},
            "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}],
            "zones": [
                {"name": "node-0", "type": "Node", "resources": [
                    {"name": "cpu", "capacity": "32", "allocatable": "30", "available": "8"},
                    {"name": "memory", "capacity": "128Gi", "allocatable": "126Gi", "available": "100Gi"}]},
                {"name": "node-1", "type": "Node", "resources": [
                    {"name": "cpu", "capacity": "32", "allocatable": "30", "available": "22500m"}]},
            ],
        })
    };
    for name in ["topo-a", "topo-b"] {
        manifests::apply(&ctx.cp.admin, &discovery, &object(name), false).await?;
    }
    let wait = |want: f64| {
        wait_gauge(
            ctx,
            "gpugate_cluster_node_topologies",
            Duration::from_secs(40),
            move |n| n == want,
        )
    };
    wait(2.0).await?;
    let api: Api<kube::api::DynamicObject> = Api::all_with(
        ctx.cp.admin.clone(),
        &discovery.resolve_gvk(&gvk).context("served")?.0,
    );
    api.delete("topo-b", &DeleteParams::default()).await?;
    wait(1.0).await?;
    api.delete("topo-a", &DeleteParams::default()).await?;
    Ok(())
}

// 15 ------------------------------------------------------------------------

/// A node whose GPUs sit on the given NUMA ids (16,384 MiB, 10 slices).
fn numa_gpu_node(name: &str, numas: &[i32]) -> Value {
    let mut node = gpu_node(name, numas.len(), 10, 16384, T4);
    let mut devices: Vec<Value> = serde_json::from_str(
        node["metadata"]["annotations"]["hami.io/node-nvidia-register"]
            .as_str()
            .unwrap_or("[]"),
    )
    .unwrap_or_default();
    for (d, numa) in devices.iter_mut().zip(numas) {
        d["numa"] = json!(numa);
    }
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] =
        json!(serde_json::to_string(&devices).unwrap_or_default());
    node
}

/// A NodeResourceTopology (v1alpha2) of `single-numa-node` under `scope`
/// with the CPUs available on zones 0 and 1 (64 GiB free on each).
fn numa_object(node: &str, scope: &str, cpus: [&str; 2]) -> Value {
    let zone = |id: usize| {
        json!({"name": format!("node-{id}"), "type": "Node",
               "costs": [{"name": "node-0", "value": if id == 0 { 10 } else { 20 }},
                         {"name": "node-1", "value": if id == 1 { 10 } else { 20 }}],
               "resources": [
            {"name": "cpu", "capacity": "32", "allocatable": "30", "available": cpus[id]},
            {"name": "memory", "capacity": "128Gi", "allocatable": "126Gi", "available": "64Gi"},
            {"name": "nvidia.com/gpu", "capacity": "10", "allocatable": "10", "available": "10"}]})
    };
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "topologyPolicies": ["SingleNUMANodeContainerLevel"],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": scope}],
        "zones": [zone(0), zone(1)],
    })
}

/// A pod on one of `nodes` whose containers ask (CPU limit, CPU request,
/// GPU slice MiB or none); memory 1Gi each. Requests equal to the limits
/// make it Guaranteed.
fn numa_pod(name: &str, nodes: &[&str], containers: &[(&str, &str, Option<&str>)]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, (cpu_limit, cpu_request, gpu))| {
            let mut limits = json!({"cpu": cpu_limit, "memory": "1Gi"});
            if let Some(mib) = gpu {
                limits["nvidia.com/gpu"] = json!("1");
                limits["nvidia.com/gpumem"] = json!(mib);
            }
            json!({"name": format!("c{i}"), "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                   "command": ["sleep", "infinity"],
                   "resources": {"limits": limits,
                                 "requests": {"cpu": cpu_request, "memory": "1Gi"}}})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": containers,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{
                    "key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}},
        }
    })
}

/// Issue 14's scenarios, on four nodes of two GPUs. numa-a: both GPUs on
/// zone 0, which has 4 CPUs free (zone 1: 16 CPUs, no GPU). numa-b: a GPU
/// on each zone, 4 and 10 CPUs free. numa-c: as numa-b under the pod
/// scope, 6 and 12 CPUs. numa-d: no NodeResourceTopology object.
async fn numa_alignment(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let crd = manifests::documents(&std::fs::read_to_string(
        ctx.root
            .join("tests/fixtures/crds/topology.node.k8s.io_noderesourcetopologies.yaml"),
    )?)?;
    let gvk = kube::core::GroupVersionKind::gvk(
        "topology.node.k8s.io",
        "v1alpha2",
        "NodeResourceTopology",
    );
    let discovery = install_crd(ctx, &crd, &gvk).await?;
    let objects = [
        numa_object("numa-a", "container", ["4", "16"]),
        numa_object("numa-b", "container", ["4", "10"]),
        numa_object("numa-c", "pod", ["6", "12"]),
    ];
    for o in &objects {
        manifests::apply(&ctx.cp.admin, &discovery, o, false).await?;
    }
    wait_gauge(
        ctx,
        "gpugate_cluster_node_topologies",
        Duration::from_secs(40),
        |n| n >= 3.0,
    )
    .await?;
    ctx.nodes(
        scenario,
        &[
            numa_gpu_node("numa-a", &[0, 0]),
            numa_gpu_node("numa-b", &[0, 1]),
            numa_gpu_node("numa-c", &[0, 1]),
            numa_gpu_node("numa-d", &[0, 1]),
        ],
    )
    .await?;
    let client = &ctx.cp.admin;
    let zones_of = |pod: &Pod| annotation(pod, "gpugate.io/numa-zones").map(str::to_string);

    // (1) 8 CPUs and a GPU: only numa-b's zone 1 has both.
    create_pod(
        client,
        ns,
        &numa_pod(
            "eight-cpus",
            &["numa-a", "numa-b"],
            &[("8", "8", Some("4000"))],
        ),
    )
    .await?;
    let pod = wait_bound(client, ns, "eight-cpus", BIND).await?;
    ensure!(node_of(&pod) == "numa-b", "eight-cpus on {}", node_of(&pod));
    ensure!(
        uuids(&pod)? == ["GPU-numa-b-1"],
        "eight-cpus got {:?}",
        uuids(&pod)?
    );
    ensure!(
        zones_of(&pod).as_deref() == Some("1"),
        "zones {:?}",
        zones_of(&pod)
    );

    // (2) Pod scope: two containers of 5 CPUs share one zone (zone 1, 12
    // CPUs); the container scope would have put the first on zone 0.
    create_pod(
        client,
        ns,
        &numa_pod(
            "pod-scope",
            &["numa-c"],
            &[("5", "5", Some("4000")), ("5", "5", None)],
        ),
    )
    .await?;
    let pod = wait_bound(client, ns, "pod-scope", BIND).await?;
    ensure!(
        zones_of(&pod).as_deref() == Some("1,1"),
        "zones {:?}",
        zones_of(&pod)
    );
    ensure!(
        uuids(&pod)? == ["GPU-numa-c-1"],
        "pod-scope got {:?}",
        uuids(&pod)?
    );

    // (3) Burstable (8 CPUs asked, 16 allowed): the kubelet does not align
    // it, so numa-a takes it although no zone there has 8 CPUs and a GPU.
    create_pod(
        client,
        ns,
        &numa_pod("burstable", &["numa-a"], &[("16", "8", Some("4000"))]),
    )
    .await?;
    let pod = wait_bound(client, ns, "burstable", BIND).await?;
    ensure!(
        zones_of(&pod).is_none(),
        "burstable aligned: {:?}",
        zones_of(&pod)
    );
    // The same pod Guaranteed is refused there, with the zones' reasons.
    create_pod(
        client,
        ns,
        &numa_pod("guaranteed-a", &["numa-a"], &[("8", "8", Some("4000"))]),
    )
    .await?;
    wait_event(
        client,
        ns,
        "guaranteed-a",
        "FailedScheduling",
        "NumaZoneInsufficientCPU",
        Duration::from_secs(60),
    )
    .await?;

    // (4) Two pods of 3 CPUs race for numa-b's zone 0 (4 CPUs; zone 1 has
    // 2 left after eight-cpus, which no kubelet here has admitted, so the
    // object does not show it and gpugate counts it): one lands, the
    // other waits.
    for name in ["race-1", "race-2"] {
        create_pod(
            client,
            ns,
            &numa_pod(name, &["numa-b"], &[("3", "3", Some("1000"))]),
        )
        .await?;
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let bound = eventually("one racer bound", BIND, || {
        let api = api.clone();
        async move {
            let mut bound = Vec::new();
            for name in ["race-1", "race-2"] {
                let p = api.get(name).await.map_err(|e| e.to_string())?;
                if is_bound(&p) {
                    bound.push(p);
                }
            }
            if bound.is_empty() {
                Err("none yet".to_string())
            } else {
                Ok(bound)
            }
        }
    })
    .await?;
    let (winner, loser) = if node_of(&bound[0]).is_empty() {
        bail!("not bound")
    } else if bound[0].metadata.name.as_deref() == Some("race-1") {
        ("race-1", "race-2")
    } else {
        ("race-2", "race-1")
    };
    ensure!(
        zones_of(&bound[0]).as_deref() == Some("0"),
        "{winner} zones {:?}",
        zones_of(&bound[0])
    );
    wait_event(
        client,
        ns,
        loser,
        "FailedScheduling",
        "NumaZoneInsufficientCPU",
        Duration::from_secs(60),
    )
    .await?;
    let still = api.get(loser).await?;
    ensure!(!is_bound(&still), "both racers landed on numa-b");

    // gpugate counts what it placed in the zones (eight-cpus, pod-scope,
    // the winner): no kubelet here admits the pods, so no object shows
    // them. Once the winner is admitted (status.startTime, as a kubelet
    // sets it) and numa-b's object is written again, it stops counting.
    let takes = |want: f64| {
        wait_gauge(
            ctx,
            "gpugate_numa_zone_takes_unsettled",
            Duration::from_secs(30),
            move |n| n == want,
        )
    };
    takes(3.0).await?;
    // Admitted 4 s ago: after numa-b's object was last written (at the
    // scenario's start), so that object does not show it; an object
    // written more than gpugate's 5-second margin after it does.
    let admitted = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(4);
    api.patch_status(
        winner,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"startTime": admitted.to_string()}})),
    )
    .await?;
    takes(3.0).await?;
    tokio::time::sleep(Duration::from_millis(2200)).await;
    manifests::apply(
        &ctx.cp.admin,
        &discovery,
        &numa_object("numa-b", "container", ["1", "2"]),
        false,
    )
    .await?;
    takes(2.0).await?;
    // The object now says zone 0 has 1 CPU: the loser still has no room.
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(
        !is_bound(&api.get(loser).await?),
        "{loser} landed once the winner's take was settled"
    );

    // (5) No object: judged on its GPUs alone, as before.
    create_pod(
        client,
        ns,
        &numa_pod("no-object", &["numa-d"], &[("8", "8", Some("4000"))]),
    )
    .await?;
    let pod = wait_bound(client, ns, "no-object", BIND).await?;
    ensure!(
        zones_of(&pod).is_none(),
        "no-object aligned: {:?}",
        zones_of(&pod)
    );

    let api: Api<kube::api::DynamicObject> = Api::all_with(
        ctx.cp.admin.clone(),
        &discovery.resolve_gvk(&gvk).context("served")?.0,
    );
    for name in ["numa-a", "numa-b", "numa-c"] {
        api.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

// 16 ------------------------------------------------------------------------

/// Creates a PriorityClass unless it exists.
async fn priority_class(
    ctx: &Ctx,
    name: &str,
    value: i32,
    preemption_policy: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let api: Api<PriorityClass> = Api::all(ctx.cp.admin.clone());
    let pc: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "value": value, "preemptionPolicy": preemption_policy,
    }))?;
    match api.create(&PostParams::default(), &pc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A one-GPU slice pod of `mib` and one CPU (`cpus`) on node `node` at
/// priority class `class`, gone at once when deleted (no kubelet here
/// would confirm).
fn slice_pod(name: &str, node: &str, mib: &str, cpus: &str, class: &str) -> Value {
    let mut p = gpu_pod(
        name,
        &[
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpumem", mib),
            ("cpu", cpus),
        ],
    );
    p["metadata"]["annotations"] = json!({GPU_SCHEDULER_POLICY: "binpack"});
    p["spec"]["priorityClassName"] = json!(class);
    p["spec"]["terminationGracePeriodSeconds"] = json!(0);
    p["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    p
}

/// Preemption through gpugate on the real kube-scheduler. Node pre-1 has
/// two 16,384 MiB GPUs and 7 CPUs, and six low-priority pods of one CPU:
/// two of 8,000 MiB at priority 100 (GPU 0, binpack) and four of 4,000 MiB
/// at priority 50 (GPU 1). A high-priority pod of 8,000 MiB and 2 CPUs
/// needs one CPU and 8,000 MiB on one GPU freed.
///
/// kube-scheduler (v1.36) offers `/preempt` only nodes where its own
/// filters need a victim (CPU here): it proposes one pod for the CPU, and
/// gpugate keeps it and adds the fewest further GPU holders that free
/// 8,000 MiB on one GPU (one more pod). Where only GPU capacity is short,
/// kube-scheduler does not preempt at all ("expected at least one victim
/// pod on node": docs/operations.md). The same pod with `preemptionPolicy:
/// Never` evicts nobody.
async fn preemption(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    priority_class(ctx, "e2e-lower", 50, "PreemptLowerPriority").await?;
    priority_class(ctx, "e2e-low", 100, "PreemptLowerPriority").await?;
    priority_class(ctx, "e2e-high", 1000, "PreemptLowerPriority").await?;
    priority_class(ctx, "e2e-high-never", 1000, "Never").await?;
    ctx.nodes(
        scenario,
        &[
            gpu_node("pre-1", 2, 10, 16384, T4),
            gpu_node("pre-2", 2, 10, 16384, T4),
            gpu_node("pre-3", 2, 10, 16384, T4),
            gpu_node("pre-4", 2, 10, 16384, T4),
        ],
    )
    .await?;
    let client = &ctx.cp.admin;
    let nodes: Api<Node> = Api::all(client.clone());
    let seven = json!({"cpu": "7", "memory": "4Ti", "pods": "500", "nvidia.com/gpu": "20"});
    for node in ["pre-1", "pre-2", "pre-3", "pre-4"] {
        nodes
            .patch_status(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"capacity": seven, "allocatable": seven}})),
            )
            .await?;
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lows = ["low-b1", "low-b2", "low-a1", "low-a2", "low-a3", "low-a4"];
    // One at a time, so that binpack fills GPU 0 first.
    for name in lows {
        let (mib, class) = if name.starts_with("low-b") {
            ("8000", "e2e-low")
        } else {
            ("4000", "e2e-lower")
        };
        create_pod(client, ns, &slice_pod(name, "pre-1", mib, "1", class)).await?;
        wait_bound(client, ns, name, BIND).await?;
    }
    let gpu_of = |p: &Pod| {
        uuids(p)
            .ok()
            .and_then(|u| u.first().cloned())
            .unwrap_or_default()
    };
    for name in lows {
        let want = if name.starts_with("low-b") {
            "GPU-pre-1-0"
        } else {
            "GPU-pre-1-1"
        };
        ensure!(
            gpu_of(&api.get(name).await?) == want,
            "{name} not on {want}"
        );
    }

    // preemptionPolicy Never: pending, nobody evicted.
    create_pod(
        client,
        ns,
        &slice_pod("never", "pre-1", "8000", "2", "e2e-high-never"),
    )
    .await?;
    wait_event(
        client,
        ns,
        "never",
        "FailedScheduling",
        "Insufficient cpu",
        BIND,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = standing(&api.list(&ListParams::default()).await?.items);
    ensure!(
        lows.iter().all(|n| left.contains(*n)),
        "a Never pod evicted: {left:?}"
    );
    ensure!(
        !is_bound(&api.get("never").await?),
        "the Never pod was placed"
    );
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    api.delete("never", &now).await?;

    // The high-priority pod: kube-scheduler's CPU victim plus gpugate's one
    // GPU victim, then it lands; nothing over-committed.
    create_pod(
        client,
        ns,
        &slice_pod("urgent", "pre-1", "8000", "2", "e2e-high"),
    )
    .await?;
    let urgent = bound_finishing_evictions(&api, "urgent", &now).await?;
    let pods = api.list(&ListParams::default()).await?.items;
    let left = standing(&pods);
    let evicted: Vec<&str> = lows.into_iter().filter(|n| !left.contains(*n)).collect();
    // kube-scheduler's CPU victim is one of the lowest (priority 50, GPU 1);
    // gpugate adds the cheapest pod that frees enough with it: another of
    // GPU 1's (priority 50), not one of GPU 0's 8,000 MiB pods (100).
    let priorities: Vec<(String, Option<i32>)> = pods
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.priority),
            )
        })
        .collect();
    ensure!(
        evicted.len() == 2 && evicted.iter().all(|n| n.starts_with("low-a")),
        "evicted {evicted:?}: want two 4,000 MiB pods of GPU 1 ({priorities:?})"
    );
    ensure!(
        gpu_of(&urgent) == "GPU-pre-1-1",
        "urgent on {}",
        gpu_of(&urgent)
    );
    let bound: Vec<Pod> = pods
        .into_iter()
        .filter(|p| is_bound(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    not_over_committed(&bound)?;
    ledger_matches(ctx.metrics_port(), ns, &bound, Duration::from_secs(30)).await?;
    gang_preemption(ctx, ns, &now).await
}

/// Names of the pods not being deleted.
fn standing(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// No GPU of the preemption nodes (16,384 MiB each) holds more than it has.
fn not_over_committed(bound: &[Pod]) -> anyhow::Result<()> {
    for (gpu, (_, mib, _)) in usage_by_gpu(bound)? {
        ensure!(mib <= 16384, "{gpu} over-committed: {mib} MiB");
    }
    Ok(())
}

/// Waits until pod `name` is bound, meanwhile finishing the evictions a
/// kubelet would confirm (no kubelet runs here: an evicted pod stays
/// terminating, and its GPUs counted, until deleted with grace period 0).
async fn bound_finishing_evictions(
    api: &Api<Pod>,
    name: &str,
    now: &DeleteParams,
) -> anyhow::Result<Pod> {
    eventually(
        &format!("{name} bound after preemption"),
        Duration::from_secs(90),
        || async move {
            crate::fixtures::finish_evictions(api, now).await?;
            let p = api.get(name).await.map_err(|e| e.to_string())?;
            if is_bound(&p) {
                Ok(p)
            } else {
                Err(format!(
                    "nominated {:?}",
                    p.status.and_then(|s| s.nominated_node_name)
                ))
            }
        },
    )
    .await
}

/// A gang member is evicted only with its whole group. Node pre-2 (made
/// with pre-1, 7 CPUs too);
/// gang g (two 8,000 MiB members of priority 50) fills GPU 0, four 4,000
/// MiB pods of priority 100 fill GPU 1; one CPU each. A pod of 8,000 MiB
/// and 2 CPUs at priority 1000: kube-scheduler proposes one member of g
/// (the lowest priority) for the CPU, which alone would free enough GPU;
/// gpugate adds the other member, and both go.
async fn gang_preemption(ctx: &Ctx, ns: &str, now: &DeleteParams) -> anyhow::Result<()> {
    let client = &ctx.cp.admin;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let members = ["gang-1", "gang-2"];
    for name in members {
        let mut p = slice_pod(name, "pre-2", "8000", "1", "e2e-lower");
        p["metadata"]["labels"] = json!({GROUP_NAME: "g", GROUP_MIN_AVAILABLE: "2"});
        create_pod(client, ns, &p).await?;
    }
    for name in members {
        wait_bound(client, ns, name, BIND).await?;
    }
    let singles = ["single-1", "single-2", "single-3", "single-4"];
    for name in singles {
        create_pod(
            client,
            ns,
            &slice_pod(name, "pre-2", "4000", "1", "e2e-low"),
        )
        .await?;
        wait_bound(client, ns, name, BIND).await?;
    }
    create_pod(
        client,
        ns,
        &slice_pod("urgent-2", "pre-2", "8000", "2", "e2e-high"),
    )
    .await?;
    let urgent = bound_finishing_evictions(&api, "urgent-2", now).await?;
    let pods = api.list(&ListParams::default()).await?.items;
    let left = standing(&pods);
    ensure!(
        members.iter().all(|m| !left.contains(*m)) && singles.iter().all(|s| left.contains(*s)),
        "want the whole gang evicted and no single pod: left {left:?}"
    );
    ensure!(
        uuids(&urgent)? == ["GPU-pre-2-0"],
        "urgent-2 on {:?}",
        uuids(&urgent)?
    );
    let bound: Vec<Pod> = pods
        .into_iter()
        .filter(|p| is_bound(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    not_over_committed(&bound)?;
    // `gpugate top` against the live API server with the admin's
    // kubeconfig: what it shows for pre-2 is what the pods there hold.
    let shown = ctx.cli_json(&["top"])?;
    let pre2 = shown["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == "pre-2"))
        .context("gpugate top shows no pre-2")?;
    let on_pre2: Vec<Pod> = bound
        .into_iter()
        .filter(|p| node_of(p) == "pre-2")
        .collect();
    let want: u64 = usage_by_gpu(&on_pre2)?.values().map(|u| u.1).sum();
    ensure!(
        pre2["memMiB"][0] == json!(want) && pre2["memMiB"][1] == json!(2 * 16384),
        "gpugate top shows {pre2}, the pods hold {want} MiB"
    );
    // `gpugate capacity` read the same way, and the running gpugate's
    // gauges from its own view: pre-2's free memory is what its pods
    // leave.
    let shown = ctx.cli_json(&["capacity"])?;
    let free = 2 * 16384 - want;
    let row = shown["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == "pre-2"))
        .context("gpugate capacity shows no pre-2")?;
    ensure!(
        row["kind"] == "nvidia" && row["devices"] == 2 && row["freeMemMiB"] == json!(free),
        "gpugate capacity shows {row}, the pods leave {free} MiB"
    );
    let port = ctx.metrics_port();
    eventually(
        "gpugate's capacity gauge for pre-2",
        Duration::from_secs(10),
        || async move {
            let text = metrics(port).await.map_err(|e| e.to_string())?;
            let seen = samples(&text, "gpugate_capacity_free_memory_mib")
                .into_iter()
                .find(|x| x.label("node") == "pre-2" && x.label("kind") == "nvidia")
                .map(|x| x.value);
            if seen == Some(free as f64) {
                Ok(())
            } else {
                Err(format!("{seen:?}, want {free}"))
            }
        },
    )
    .await?;
    explain_pending(ctx, ns, now).await?;
    budget_preemption(ctx, ns, now).await?;
    gang_gpu_preemption(ctx, ns, now).await
}

/// A pending gang group gets preemption for all its members or none, from
/// gpugate's own preemption (only GPU is short). Node pre-4: one 12,000
/// MiB pod of priority 50 on each GPU. First a group of three 9,000 MiB
/// members at priority 1000 (min-available 3): even with both pods gone,
/// only two members fit, so nothing is evicted. Then a group of two: both
/// pods go and both members bind, one per GPU.
async fn gang_gpu_preemption(ctx: &Ctx, ns: &str, now: &DeleteParams) -> anyhow::Result<()> {
    let client = &ctx.cp.admin;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for name in ["holder-1", "holder-2"] {
        create_pod(
            client,
            ns,
            &slice_pod(name, "pre-4", "12000", "1", "e2e-lower"),
        )
        .await?;
        wait_bound(client, ns, name, BIND).await?;
    }
    let member = |name: &str, group: &str, min: &str| {
        let mut p = slice_pod(name, "pre-4", "9000", "1", "e2e-high");
        p["metadata"]["labels"] = json!({GROUP_NAME: group, GROUP_MIN_AVAILABLE: min});
        p
    };
    let three = ["three-1", "three-2", "three-3"];
    for name in three {
        create_pod(client, ns, &member(name, "three", "3")).await?;
    }
    // The last one created is the first judged with the whole group.
    wait_event(
        client,
        ns,
        "three-3",
        "FailedScheduling",
        "GangNotFit",
        BIND,
    )
    .await?;
    // Past the grace (5 s) and an attempt: nobody evicted.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let pods = api.list(&ListParams::default()).await?.items;
    let left = standing(&pods);
    ensure!(
        left.contains("holder-1") && left.contains("holder-2"),
        "a group that cannot run evicted: left {left:?}"
    );
    ensure!(
        three.iter().all(|m| pods
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(*m) && !is_bound(p))),
        "a member of the group of three was placed"
    );
    for name in three {
        api.delete(name, now).await?;
    }
    let two = ["two-1", "two-2"];
    for name in two {
        create_pod(client, ns, &member(name, "two", "2")).await?;
    }
    // two-1 may be judged before two-2 exists (GangIncomplete, which
    // kube-scheduler parks); gpugate's nudge of both members once the
    // freed GPUs are held brings it back.
    let first = bound_finishing_evictions(&api, "two-1", now).await?;
    let second = bound_finishing_evictions(&api, "two-2", now).await?;
    let pods = api.list(&ListParams::default()).await?.items;
    let left = standing(&pods);
    ensure!(
        !left.contains("holder-1") && !left.contains("holder-2"),
        "want both holders evicted: left {left:?}"
    );
    let mut gpus = [uuids(&first)?, uuids(&second)?].concat();
    gpus.sort();
    ensure!(
        gpus == ["GPU-pre-4-0", "GPU-pre-4-1"],
        "members on {gpus:?}"
    );
    let bound: Vec<Pod> = pods
        .into_iter()
        .filter(|p| is_bound(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    not_over_committed(&bound)
}

/// PodDisruptionBudgets are kept where they can be, as kube-scheduler keeps
/// them for its own victims. Node pre-3 (7 CPUs): GPU 0 holds cheap-1 and
/// cheap-2 (8,000 MiB, priority 50) under a budget that allows no
/// disruption; GPU 1 holds dear-1 and dear-2 (8,000 MiB, priority 100)
/// under none; cpu-hog (3 CPUs, no GPU, priority 50) fills the CPUs. A pod
/// of 8,000 MiB and 2 CPUs at priority 1000: kube-scheduler proposes
/// cpu-hog (its reprieve keeps the budgeted pods first), and gpugate adds
/// one dear pod, not the cheaper cheap one whose eviction would break the
/// budget (with the budget ignored in the code, a cheap one goes and the
/// scenario fails).
async fn budget_preemption(ctx: &Ctx, ns: &str, now: &DeleteParams) -> anyhow::Result<()> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let client = &ctx.cp.admin;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "kept"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "kept"}}},
    }))?;
    budgets.create(&PostParams::default(), &budget).await?;
    // No disruption controller runs here: the status it would write.
    budgets
        .patch_status(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"disruptionsAllowed": 0, "currentHealthy": 2,
                "desiredHealthy": 2, "expectedPods": 2, "observedGeneration": 1}}),
            ),
        )
        .await?;
    for (name, class) in [
        ("cheap-1", "e2e-lower"),
        ("cheap-2", "e2e-lower"),
        ("dear-1", "e2e-low"),
        ("dear-2", "e2e-low"),
    ] {
        let mut p = slice_pod(name, "pre-3", "8000", "1", class);
        if name.starts_with("cheap") {
            p["metadata"]["labels"] = json!({"app": "kept"});
        }
        create_pod(client, ns, &p).await?;
        wait_bound(client, ns, name, BIND).await?;
    }
    create_pod(
        client,
        ns,
        &json!({
            "metadata": {"name": "cpu-hog"},
            "spec": {
                "nodeName": "pre-3",
                "priorityClassName": "e2e-lower",
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}}}],
            },
        }),
    )
    .await?;
    create_pod(
        client,
        ns,
        &slice_pod("urgent-3", "pre-3", "8000", "2", "e2e-high"),
    )
    .await?;
    let urgent = bound_finishing_evictions(&api, "urgent-3", now).await?;
    let left = standing(&api.list(&ListParams::default()).await?.items);
    let dear_left = ["dear-1", "dear-2"]
        .iter()
        .filter(|d| left.contains(**d))
        .count();
    ensure!(
        left.contains("cheap-1")
            && left.contains("cheap-2")
            && !left.contains("cpu-hog")
            && dear_left == 1,
        "want cpu-hog and one dear pod evicted, the budgeted pods kept: left {left:?}"
    );
    ensure!(
        uuids(&urgent)? == ["GPU-pre-3-1"],
        "urgent-3 on {:?}",
        uuids(&urgent)?
    );
    Ok(())
}

/// A pod short only of GPU, explained, then preempted for by gpugate
/// itself: 9,000 MiB at priority 1000 on pre-2, where GPU 0 has 4,384 MiB
/// free beside urgent-2 (priority 1000) and a 4,000 MiB bystander
/// (priority 50), and GPU 1 384 MiB beside the four 4,000 MiB pods of
/// priority 100. CPU is not short, so kube-scheduler does not preempt
/// (docs/operations.md, "Preemption").
///
/// `gpugate explain` against the live API server names the node's
/// reason, what it lacks, and the three pods whose eviction makes room;
/// every other node is left out by the pod's nodeSelector. Then gpugate
/// evicts exactly those three (the fewest: two free 8,384 MiB), not the
/// cheaper bystander whose GPU would not help, the pod
/// is tried again once they are gone and binds on GPU 1; nothing is
/// over-committed. (With `scheduler.preemption.enabled: false` the pod
/// stays pending and the scenario fails.)
async fn explain_pending(ctx: &Ctx, ns: &str, now: &DeleteParams) -> anyhow::Result<()> {
    let client = &ctx.cp.admin;
    // The cheapest pod of the node, whose GPU cannot help: evicting it
    // leaves GPU 0 at 8,384 MiB free, short of 9,000.
    create_pod(
        client,
        ns,
        &slice_pod("bystander", "pre-2", "4000", "0", "e2e-lower"),
    )
    .await?;
    wait_bound(client, ns, "bystander", BIND).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    ensure!(
        uuids(&api.get("bystander").await?)? == ["GPU-pre-2-0"],
        "bystander not on GPU 0"
    );
    create_pod(
        client,
        ns,
        &slice_pod("waiting", "pre-2", "9000", "1", "e2e-high"),
    )
    .await?;
    wait_event(
        client,
        ns,
        "waiting",
        "FailedScheduling",
        "CardInsufficientMemory",
        BIND,
    )
    .await?;
    let e = ctx.cli_json(&["explain", &format!("{ns}/waiting")])?;
    ensure!(e["status"] == "pending", "{e:#}");
    let nodes = e["nodes"].as_array().context("no nodes")?;
    let pre2 = nodes
        .iter()
        .find(|n| n["node"] == "pre-2")
        .context("explain shows no pre-2")?;
    ensure!(
        pre2["fits"] == false && pre2["code"] == "CardInsufficientMemory",
        "pre-2: {pre2:#}"
    );
    ensure!(
        pre2["missing"].as_str().is_some_and(|m| m
            .starts_with("needs 9000 MiB and 0 cores free on one GPU; the freest has 4384 MiB")),
        "pre-2 lacks: {pre2:#}"
    );
    let victims: Vec<(&str, i64)> = pre2["preempt"]
        .as_array()
        .context("no victims on pre-2")?
        .iter()
        .map(|v| {
            (
                v["pod"].as_str().unwrap_or_default(),
                v["priority"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    ensure!(
        victims.len() == 3
            && victims
                .iter()
                .all(|(p, prio)| p.starts_with(&format!("{ns}/single-")) && *prio == 100),
        "victims on pre-2: {victims:?}"
    );
    ensure!(e["nearest"][0] == "pre-2", "nearest: {}", e["nearest"]);
    ensure!(
        nodes
            .iter()
            .filter(|n| n["node"] != "pre-2")
            .all(|n| n["excluded"]
                .as_str()
                .is_some_and(|x| x.contains("nodeSelector"))),
        "nodes not left out by the nodeSelector: {e:#}"
    );
    let named: BTreeSet<String> = victims.iter().map(|(p, _)| p.to_string()).collect();

    // gpugate preempts: the same three go (not the cheaper bystander,
    // whose GPU would not help), and the pod binds on GPU 1.
    let waiting = bound_finishing_evictions(&api, "waiting", now).await?;
    let pods = api.list(&ListParams::default()).await?.items;
    let left = standing(&pods);
    let evicted: BTreeSet<String> = ["single-1", "single-2", "single-3", "single-4"]
        .iter()
        .filter(|s| !left.contains(**s))
        .map(|s| format!("{ns}/{s}"))
        .collect();
    ensure!(
        evicted == named && left.contains("bystander"),
        "gpugate evicted {evicted:?} (bystander standing: {}); explain named {named:?}",
        left.contains("bystander")
    );
    ensure!(
        uuids(&waiting)? == ["GPU-pre-2-1"],
        "waiting on {:?}",
        uuids(&waiting)?
    );
    let claimed = waiting
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("gpugate.io/preemption"))
        .cloned()
        .unwrap_or_default();
    ensure!(claimed.starts_with("pre-2,"), "claim {claimed:?}");
    let bound: Vec<Pod> = pods
        .into_iter()
        .filter(|p| is_bound(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    not_over_committed(&bound)?;
    wait_event(client, ns, "waiting", "Preempting", "pre-2", BIND).await?;
    Ok(())
}

/// Applies a CRD's objects and waits until the API server serves `kind`;
/// the discovery that resolves it.
async fn install_crd(
    ctx: &Ctx,
    crd: &[Value],
    kind: &kube::core::GroupVersionKind,
) -> anyhow::Result<Discovery> {
    let discovery = Discovery::new(ctx.cp.admin.clone()).run().await?;
    for o in crd {
        manifests::apply(&ctx.cp.admin, &discovery, o, false).await?;
    }
    let client = ctx.cp.admin.clone();
    eventually(
        &format!("{} is served", kind.kind),
        Duration::from_secs(30),
        || {
            let (client, kind) = (client.clone(), kind.clone());
            async move {
                let d = Discovery::new(client)
                    .run()
                    .await
                    .map_err(|e| e.to_string())?;
                d.resolve_gvk(&kind)
                    .map(|_| d)
                    .ok_or_else(|| "not yet".to_string())
            }
        },
    )
    .await
}

// 17 ------------------------------------------------------------------------

/// A node with one A100 in MIG mode (1g.5gb, 2g.10gb and 3g.20gb allowed,
/// as HAMi v2.10's device plugin registers them) beside a node with one
/// hami-core T4. `nvidia.com/vgpu-mode` steers pods to one or the other;
/// a MIG pod gets the smallest profile that holds it on a free placement,
/// and HAMi's MIG annotation beside the device list in the same Binding.
/// The test then does what the device plugin does once the instance
/// exists (adds its runtime ids to the annotation): the instance still
/// counts. Deleting a pod frees its instance. A higher-priority pod whose
/// only possible placement a lower-priority pod holds gets it through
/// gpugate's own preemption (that pod alone evicted). No two instances
/// overlap.
async fn mig(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let placements = |size: u32, starts: &[u32]| -> Vec<Value> {
        starts
            .iter()
            .map(|s| json!({"start": s, "size": size}))
            .collect()
    };
    let register = json!([{"id": "GPU-mig-1-0", "index": 0, "count": 7, "devmem": 40960,
        "devcore": 100, "type": "NVIDIA A100-SXM4-40GB", "numa": 0, "health": true,
        "mode": "mig", "migProfiles": [
            {"name": "1g.5gb", "memoryMB": 4864, "core": 15, "sliceCount": 1,
             "placements": placements(1, &[0, 1, 2, 3, 4, 5, 6])},
            {"name": "2g.10gb", "memoryMB": 9984, "core": 29, "sliceCount": 2,
             "placements": placements(2, &[0, 2, 4])},
            {"name": "3g.20gb", "memoryMB": 19968, "core": 43, "sliceCount": 4,
             "placements": placements(4, &[0, 4])}]}]);
    let mut mig_node = gpu_node("mig-1", 1, 7, 40960, "NVIDIA A100-SXM4-40GB");
    mig_node["metadata"]["annotations"]["hami.io/node-nvidia-register"] =
        json!(register.to_string());
    ctx.nodes(
        scenario,
        &[
            mig_node,
            gpu_node("core-1", 1, 10, 16384, "NVIDIA Tesla T4"),
        ],
    )
    .await?;
    let pod = |name: &str, mem: &str, mode: Option<&str>| {
        let mut p = gpu_pod(name, &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", mem)]);
        if let Some(mode) = mode {
            p["metadata"]["annotations"] = json!({"nvidia.com/vgpu-mode": mode});
        }
        p
    };
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    let instance = |p: &Pod| -> anyhow::Result<(String, u64, u64)> {
        let raw = annotation(p, "hami.io/vgpu-mig-allocations").ok_or_else(|| {
            anyhow!(
                "{}: no hami.io/vgpu-mig-allocations",
                p.metadata.name.as_deref().unwrap_or("")
            )
        })?;
        let v: Value = serde_json::from_str(raw)?;
        let e = &v[0];
        ensure!(
            v.as_array().map(Vec::len) == Some(1)
                && e["containerIndex"] == 0
                && e["deviceIndex"] == 0
                && e["gpuUUID"] == "GPU-mig-1-0",
            "one entry for container 0, device 0 of GPU-mig-1-0: {raw}"
        );
        Ok((
            e["profile"].as_str().unwrap_or("").to_string(),
            e["placement"]["start"].as_u64().unwrap_or(99),
            e["placement"]["size"].as_u64().unwrap_or(0),
        ))
    };
    // A MIG pod: 8,000 MiB needs 2g.10gb (1g.5gb is too small), at the
    // lowest free start; its device list carries the profile's memory.
    create_pod(&ctx.cp.admin, ns, &pod("mig-a", "8000", Some("mig"))).await?;
    let a = wait_bound(&ctx.cp.admin, ns, "mig-a", BIND).await?;
    ensure!(node_of(&a) == "mig-1", "mig-a on {}", node_of(&a));
    ensure!(
        instance(&a)? == ("2g.10gb".to_string(), 0, 2),
        "mig-a: {:?}",
        instance(&a)?
    );
    ensure!(
        annotation(&a, "hami.io/vgpu-devices-allocated") == Some("GPU-mig-1-0,NVIDIA,9984,29:;"),
        "mig-a device list {:?}",
        annotation(&a, "hami.io/vgpu-devices-allocated")
    );
    // A hami-core pod never lands on the MIG GPU, and gets no MIG entry.
    create_pod(&ctx.cp.admin, ns, &pod("core-a", "4000", Some("hami-core"))).await?;
    let c = wait_bound(&ctx.cp.admin, ns, "core-a", BIND).await?;
    ensure!(node_of(&c) == "core-1", "core-a on {}", node_of(&c));
    ensure!(
        annotation(&c, "hami.io/vgpu-mig-allocations").is_none(),
        "core-a has a MIG entry"
    );
    // The device plugin creates the instance and adds its ids (merge
    // patch guarded by resourceVersion, as HAMi's plugin writes it).
    let raw = annotation(&a, "hami.io/vgpu-mig-allocations").unwrap_or("[]");
    let mut entries: Value = serde_json::from_str(raw)?;
    entries[0]["migUUID"] = json!("MIG-e2e-a");
    entries[0]["gpuInstanceID"] = json!(3);
    entries[0]["computeInstanceID"] = json!(0);
    pods.patch(
        "mig-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "resourceVersion": a.metadata.resource_version,
            "annotations": {"hami.io/vgpu-mig-allocations": entries.to_string()}}})),
    )
    .await?;
    // The instance still counts: the next 2g.10gb goes to start 2.
    create_pod(&ctx.cp.admin, ns, &pod("mig-b", "9000", Some("mig"))).await?;
    let b = wait_bound(&ctx.cp.admin, ns, "mig-b", BIND).await?;
    ensure!(
        instance(&b)? == ("2g.10gb".to_string(), 2, 2),
        "mig-b: {:?}",
        instance(&b)?
    );
    // 1g.5gb profiles go from the highest start: slice 6.
    create_pod(&ctx.cp.admin, ns, &pod("mig-small", "4000", Some("mig"))).await?;
    let small = wait_bound(&ctx.cp.admin, ns, "mig-small", BIND).await?;
    ensure!(
        instance(&small)? == ("1g.5gb".to_string(), 6, 1),
        "mig-small: {:?}",
        instance(&small)?
    );
    // Deleting mig-a frees slices 0-1: the next 2g.10gb takes them.
    pods.delete(
        "mig-a",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await?;
    eventually("mig-a gone", Duration::from_secs(30), || {
        let pods = pods.clone();
        async move {
            match pods.get_opt("mig-a").await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err("still there".to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    create_pod(&ctx.cp.admin, ns, &pod("mig-c", "9000", Some("mig"))).await?;
    let c2 = wait_bound(&ctx.cp.admin, ns, "mig-c", BIND).await?;
    ensure!(
        instance(&c2)? == ("2g.10gb".to_string(), 0, 2),
        "mig-c: {:?}",
        instance(&c2)?
    );
    // Preemption for a placement: a 3g.20gb pod (15,000 MiB) at priority
    // 1000. 3g.20gb sits at start 0 (slices 0-3: mig-c and mig-b) or 4
    // (slices 4-7: only mig-small, on slice 6). Only a MIG placement is
    // short (kube-scheduler's own filters pass), so gpugate's own
    // preemption acts: the fewest victims are mig-small alone, and the
    // pod gets start 4 once it is gone.
    priority_class(ctx, "e2e-high", 1000, "PreemptLowerPriority").await?;
    let mut big = pod("mig-big", "15000", Some("mig"));
    big["spec"]["priorityClassName"] = json!("e2e-high");
    create_pod(&ctx.cp.admin, ns, &big).await?;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let big = bound_finishing_evictions(&pods, "mig-big", &now).await?;
    ensure!(
        instance(&big)? == ("3g.20gb".to_string(), 4, 4),
        "mig-big: {:?}",
        instance(&big)?
    );
    let left = standing(&pods.list(&ListParams::default()).await?.items);
    ensure!(
        !left.contains("mig-small") && left.contains("mig-b") && left.contains("mig-c"),
        "want mig-small alone evicted: left {left:?}"
    );
    // No two instances on the GPU overlap.
    let mut taken: Vec<(u64, u64)> = Vec::new();
    for p in pods.list(&ListParams::default()).await?.items {
        if node_of(&p) != "mig-1" || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (_, start, size) = instance(&p)?;
        for (s, z) in &taken {
            ensure!(
                !(start < s + z && *s < start + size),
                "instances overlap: {start}+{size} and {s}+{z}"
            );
        }
        taken.push((start, size));
    }
    ensure!(taken.len() == 3, "{} MIG pods on mig-1", taken.len());
    Ok(())
}

// 18 ------------------------------------------------------------------------

/// A node whose GPUs come only through DRA (Kubernetes 1.36's beta
/// DRAExtendedResource: a DeviceClass with `extendedResourceName:
/// nvidia.com/gpu` and a ResourceSlice of devices on the node, no HAMi
/// registration, no `nvidia.com/gpu` in its status). kube-scheduler (its
/// profile without DynamicResources, as deploy/ runs it) offers the node
/// to gpugate for vGPU pods; gpugate refuses it (`NodeUnregistered`), and
/// `gpugate explain` says why in words. Once a HAMi node joins, the pods
/// land there, never on the DRA node. With DynamicResources on, the same
/// DeviceClass made kube-scheduler refuse every node, HAMi's included, for
/// every vGPU pod ("cannot fit resource"): that is why deploy/ turns it off.
async fn dra_only_node(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let client = &ctx.cp.admin;
    let discovery = Discovery::new(client.clone()).run().await?;
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "e2e-dra-gpu"},
        "spec": {"extendedResourceName": "nvidia.com/gpu",
                 "selectors": [{"cel": {"expression": "device.driver == 'gpu.e2e.example.com'"}}]}});
    let slice = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "dra-1-gpus"},
        "spec": {"driver": "gpu.e2e.example.com", "nodeName": "dra-1",
                 "pool": {"name": "dra-1", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}});
    manifests::apply(client, &discovery, &class, false).await?;
    let classes = resource_api(client, "DeviceClass", "deviceclasses");
    let stored = classes.get("e2e-dra-gpu").await?;
    ensure!(
        stored.data["spec"]["extendedResourceName"] == "nvidia.com/gpu",
        "the API server dropped extendedResourceName (DRAExtendedResource off?): {:?}",
        stored.data["spec"]
    );
    let dra_node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "dra-1", "labels": {"kubernetes.io/hostname": "dra-1"}}});
    // gpugate knows it (as a node without HAMi's registration).
    ctx.nodes(scenario, &[dra_node]).await?;
    manifests::apply(client, &discovery, &slice, false).await?;

    // A whole-GPU pod (nvidia.com/gpu: 1; the webhook adds gpucores: 100)
    // and a slice pod (gpu and gpumem). gpugate's kube-scheduler profile
    // runs without DynamicResources (deploy/), so its own filters pass
    // dra-1 (the managed resources are ignoredByScheduler) and offer it to
    // gpugate, which refuses it: no GPU there is HAMi's.
    for (name, limits) in [
        ("whole", vec![("nvidia.com/gpu", "1")]),
        (
            "slice",
            vec![("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "4000")],
        ),
    ] {
        let mut p = gpu_pod(name, &limits);
        p["spec"]["nodeSelector"] = json!({NODE_LABEL: scenario});
        create_pod(client, ns, &p).await?;
        wait_event(
            client,
            ns,
            name,
            "FilteringFailed",
            "NodeUnregistered on 1 node(s): dra-1",
            BIND,
        )
        .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for name in ["whole", "slice"] {
        ensure!(
            !is_bound(&pods.get(name).await?),
            "{name} was bound to the DRA-only node"
        );
    }
    // The same verdict in words: `gpugate explain` against this API server.
    let mut explain = std::process::Command::new(&ctx.cp.gpugate_bin);
    explain
        .args([
            "explain",
            &format!("{ns}/slice"),
            "--output",
            "json",
            "--kubeconfig",
        ])
        .arg(ctx.cp.dir.join("admin.kubeconfig"));
    let out = tokio::task::spawn_blocking(move || explain.output()).await??;
    ensure!(
        out.status.success(),
        "explain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explained: Value = serde_json::from_slice(&out.stdout)?;
    let dra = explained["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|v| v["node"] == "dra-1"))
        .ok_or_else(|| anyhow!("dra-1 not in explain: {explained}"))?;
    ensure!(
        dra["code"] == "NodeUnregistered"
            && dra["words"]
                .as_str()
                .is_some_and(|w| w.contains("may come through DRA")),
        "explain on dra-1: {dra}"
    );

    // A node HAMi's device plugin registered joins (two GPUs: the whole-GPU
    // pod needs one to itself): both land there.
    create_node(client, scenario, &gpu_node("core-1", 2, 10, 16384, T4)).await?;
    burst::wait_gpugate_nodes(ctx.metrics_port(), 2, Duration::from_secs(30)).await?;
    for name in ["slice", "whole"] {
        let bound = wait_bound(client, ns, name, BIND).await?;
        ensure!(node_of(&bound) == "core-1", "{name} on {}", node_of(&bound));
    }

    let slices = resource_api(client, "ResourceSlice", "resourceslices");
    slices
        .delete("dra-1-gpus", &DeleteParams::default())
        .await?;
    classes
        .delete("e2e-dra-gpu", &DeleteParams::default())
        .await?;
    Ok(())
}

/// The API of a cluster-scoped resource.k8s.io/v1 kind.
fn resource_api(client: &kube::Client, kind: &str, plural: &str) -> Api<kube::api::DynamicObject> {
    Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("resource.k8s.io", "v1", kind),
            plural,
        ),
    )
}
