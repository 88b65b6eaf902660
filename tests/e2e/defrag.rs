//! Scenario 24: defragmentation on the real control plane, with
//! kube-controller-manager running only its replicaset, deployment and
//! disruption controllers (so that a Deployment recreates what is moved,
//! and PodDisruptionBudgets get their status).
//!
//! Nodes df-1 and df-2 have two 16,384 MiB GPUs each; a Deployment of four
//! 9,000 MiB slices takes one GPU each (two never fit on one GPU). Then
//! df-3 arrives with one 10,000 MiB GPU: room for one slice, too small for
//! the pending pod of 16,384 MiB (a whole GPU, same priority 0), which fits
//! nowhere. The one plan: move one slice to df-3.
//!
//! 1. Namespace not opted in: nothing moves; `gpugate explain` shows the
//!    plan it would take.
//! 2. Opted in, a PodDisruptionBudget at zero over the slices: nothing
//!    moves.
//! 3. Opted in, the budget gone: the pod binds after exactly the planned
//!    move, the Deployment's replacement binds on the held destination,
//!    nothing is over-committed, gpugate's ledger equals the annotations.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::control_plane::ensure_namespace;
use crate::fixtures::{
    create_node, create_pod, delete_all_pods, gpu_node, gpu_pod, is_bound, ledger_matches,
    usage_by_gpu, wait_event,
};
use crate::http::{gauge, metrics};
use crate::procs::{Proc, free_port};
use crate::scenarios::Ctx;
use crate::wait::eventually;

/// The namespace that does not opt in (the suite's config opts the
/// scenario's own namespace in).
pub const NOT_OPTED_IN: &str = "e2e-defrag-off";
const T4: &str = "NVIDIA Tesla T4";
const SLICE_MIB: &str = "9000";
const WHOLE_MIB: &str = "16384";
/// Long enough for preemption's grace (5 s) and a plan, several times.
const NOTHING_MOVES_FOR: Duration = Duration::from_secs(15);

pub async fn defragmentation(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let kcm = controller_manager(ctx, "replicaset,deployment,disruption")?;
    let result = async {
        ensure_namespace(&ctx.cp.admin, NOT_OPTED_IN).await?;
        for n in ["df-1", "df-2"] {
            create_node(&ctx.cp.admin, scenario, &gpu_node(n, 2, 10, 16384, T4)).await?;
        }
        not_opted_in(ctx, scenario).await?;
        opted_in(ctx, ns, scenario).await
    }
    .await;
    drop(kcm);
    let cleaned = teardown(ctx, NOT_OPTED_IN).await;
    result?;
    cleaned
}

/// kube-controller-manager with only these controllers (comma-separated);
/// stopped (by PID) when dropped.
pub fn controller_manager(ctx: &Ctx, controllers: &str) -> anyhow::Result<Proc> {
    let p = |n: &str| ctx.cp.pki.path(n).display().to_string();
    let kubeconfig = ctx.cp.dir.join("admin.kubeconfig");
    let mut cmd = Command::new(ctx.bin.join("kube-controller-manager"));
    cmd.args([
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--controllers={controllers}"),
        "--leader-elect=false".into(),
        "--use-service-account-credentials=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", free_port()?),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        "--authentication-skip-lookup=true".into(),
        "--v=2".into(),
    ]);
    Proc::spawn("kube-controller-manager", &mut cmd, &ctx.cp.dir)
}

/// The Deployment of four 9,000 MiB slices (one per 16,384 MiB GPU).
fn deployment(ns: &str) -> anyhow::Result<Deployment> {
    let mut pod = gpu_pod(
        "template",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", SLICE_MIB)],
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(0);
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "slices", "namespace": ns},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "slices"}},
            "template": {"metadata": {"labels": {"app": "slices"}}, "spec": pod["spec"]},
        },
    }))?)
}

/// The slices of `ns`, bound, one per GPU of df-1 and df-2; then df-3.
async fn fragment(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<Vec<Pod>> {
    let client = &ctx.cp.admin;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments
        .create(&PostParams::default(), &deployment(ns)?)
        .await
        .context("create the Deployment")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let slices = eventually("four slices bound", Duration::from_secs(90), || {
        let pods = pods.clone();
        async move {
            let bound: Vec<Pod> = slices_of(&pods)
                .await?
                .into_iter()
                .filter(is_bound)
                .collect();
            if bound.len() == 4 {
                Ok(bound)
            } else {
                Err(format!("{} bound", bound.len()))
            }
        }
    })
    .await?;
    let gpus: BTreeSet<String> = usage_by_gpu(&slices)?.into_keys().collect();
    ensure!(gpus.len() == 4, "the slices share GPUs: {gpus:?}");
    create_node(client, scenario, &gpu_node("df-3", 1, 10, 10000, T4)).await?;
    let port = ctx.cp.gpugate_admin_port;
    eventually(
        "gpugate sees df-3",
        Duration::from_secs(30),
        || async move {
            let text = metrics(port).await.map_err(|e| e.to_string())?;
            match gauge(&text, "gpugate_cluster_nodes") {
                Some(3.0) => Ok(()),
                n => Err(format!("{n:?} nodes")),
            }
        },
    )
    .await?;
    Ok(slices)
}

/// The Deployment's pods not being deleted.
async fn slices_of(pods: &Api<Pod>) -> Result<Vec<Pod>, String> {
    Ok(pods
        .list(&ListParams::default().labels("app=slices"))
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

fn whole(name: &str) -> serde_json::Value {
    let mut p = gpu_pod(
        name,
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", WHOLE_MIB)],
    );
    p["spec"]["terminationGracePeriodSeconds"] = json!(0);
    p
}

/// `gpugate_defrag_plans_total{outcome}`.
async fn plans(ctx: &Ctx, outcome: &str) -> anyhow::Result<f64> {
    let text = metrics(ctx.cp.gpugate_admin_port).await?;
    Ok(crate::ha::counter(
        &text,
        "gpugate_defrag_plans_total",
        ("outcome", outcome),
    ))
}

/// Waits `NOTHING_MOVES_FOR`, then checks that every slice is the one
/// there was, that `pod` is still pending, and that gpugate did look for a
/// plan (and found none to act on) meanwhile.
async fn nothing_moves(ctx: &Ctx, ns: &str, pod: &str, slices: &[Pod]) -> anyhow::Result<()> {
    let before = plans(ctx, "no_plan").await?;
    let moved = plans(ctx, "moved").await?;
    tokio::time::sleep(NOTHING_MOVES_FOR).await;
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    let now: BTreeSet<String> = slices_of(&pods)
        .await
        .map_err(anyhow::Error::msg)?
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let was: BTreeSet<String> = slices
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    ensure!(now == was, "slices changed: {was:?} → {now:?}");
    ensure!(!is_bound(&pods.get(pod).await?), "{pod} was placed");
    let after = plans(ctx, "no_plan").await?;
    ensure!(
        after > before,
        "no plan was looked for ({before} → {after})"
    );
    ensure!(plans(ctx, "moved").await? == moved, "something was moved");
    Ok(())
}

/// 1: the namespace did not opt in.
async fn not_opted_in(ctx: &Ctx, scenario: &str) -> anyhow::Result<()> {
    let ns = NOT_OPTED_IN;
    let slices = fragment(ctx, ns, scenario).await?;
    create_pod(&ctx.cp.admin, ns, &whole("whole")).await?;
    nothing_moves(ctx, ns, "whole", &slices).await?;
    // explain, as an operator runs it against the live cluster.
    let config = ctx.cp.dir.join("defrag-explain.yaml");
    std::fs::write(&config, &ctx.cp.gpugate_config)?;
    let out = Command::new(&ctx.cp.gpugate_bin)
        .args(["explain", &format!("{ns}/whole"), "--kubeconfig"])
        .arg(ctx.cp.dir.join("admin.kubeconfig"))
        .arg("--config")
        .arg(&config)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        text.contains("after moving 1 pod: e2e-defrag-off/slices-")
            && text.contains("→ df-3) if namespace e2e-defrag-off opted in"),
        "explain does not show the plan:\n{text}"
    );
    teardown(ctx, ns).await?;
    let nodes: Api<Node> = Api::all(ctx.cp.admin.clone());
    nodes.delete("df-3", &DeleteParams::default()).await?;
    Ok(())
}

/// 2 and 3: the namespace opted in; a budget at zero, then none.
async fn opted_in(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let client = &ctx.cp.admin;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "slices", "namespace": ns},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "slices"}}},
    }))?;
    budgets.create(&PostParams::default(), &pdb).await?;
    let slices = fragment(ctx, ns, scenario).await?;
    create_pod(client, ns, &whole("whole-budget")).await?;
    nothing_moves(ctx, ns, "whole-budget", &slices).await?;

    // 3: the budget gone, a new pending pod.
    budgets.delete("slices", &DeleteParams::default()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("whole-budget", &now).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let moved_before = plans(ctx, "moved").await?;
    let created = std::time::Instant::now();
    create_pod(client, ns, &whole("whole")).await?;
    let plan = wait_event(
        client,
        ns,
        "whole",
        "Defragmenting",
        "after moving",
        Duration::from_secs(60),
    )
    .await?;
    // "fits on node df-1 after moving 1 pod: ns/slices-x (df-1 → df-3); …"
    let target = plan
        .strip_prefix("fits on node ")
        .and_then(|s| s.split_once(' '))
        .map(|(n, _)| n.to_string())
        .with_context(|| format!("no node in {plan:?}"))?;
    let moves: Vec<(String, String, String)> = plan
        .split_once(": ")
        .map(|(_, rest)| rest.split(';').next().unwrap_or(""))
        .unwrap_or("")
        .split("), ")
        .filter_map(|m| {
            let (pod, route) = m.split_once(" (")?;
            let (from, to) = route.trim_end_matches(')').split_once(" → ")?;
            Some((
                pod.rsplit('/').next()?.to_string(),
                from.to_string(),
                to.to_string(),
            ))
        })
        .collect();
    ensure!(
        moves.len() == 1 && moves[0].2 == "df-3" && moves[0].1 == target,
        "the plan is not the one move to df-3: {plan:?}"
    );
    // Play the kubelet: evicted pods go at once; then the pending pod and
    // the replacement bind.
    let moved: BTreeSet<String> = moves.iter().map(|(p, ..)| p.clone()).collect();
    let kept: BTreeSet<String> = slices
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .filter(|n| !moved.contains(n))
        .collect();
    let bound = eventually(
        "the pending pod and the replacement bound",
        Duration::from_secs(120),
        || {
            let (pods, now) = (pods.clone(), now.clone());
            async move {
                let standing = crate::fixtures::finish_evictions(&pods, &now).await?;
                let whole_bound = standing
                    .iter()
                    .any(|p| p.metadata.name.as_deref() == Some("whole") && is_bound(p));
                let slices_bound = standing
                    .iter()
                    .filter(|p| p.metadata.name.as_deref() != Some("whole"))
                    .filter(|p| is_bound(p))
                    .count();
                if whole_bound && slices_bound == 4 {
                    Ok(standing)
                } else {
                    Err(format!(
                        "whole bound {whole_bound}, {slices_bound} slices bound"
                    ))
                }
            }
        },
    )
    .await?;
    let node_of = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let names: BTreeSet<String> = bound
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    // Exactly the planned pod went; every other slice stayed where it was.
    for m in &moved {
        ensure!(
            !names.contains(m),
            "{m} was planned to move and is still there"
        );
    }
    for k in &kept {
        ensure!(names.contains(k), "{k} was not planned to move and is gone");
    }
    let whole = bound
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("whole"))
        .context("whole")?;
    ensure!(
        node_of(whole) == target,
        "whole on {}, planned {target}",
        node_of(whole)
    );
    let replacements: Vec<&Pod> = bound
        .iter()
        .filter(|p| {
            let n = p.metadata.name.clone().unwrap_or_default();
            n != "whole" && !kept.contains(&n)
        })
        .collect();
    ensure!(
        replacements.len() == 1 && node_of(replacements[0]) == "df-3",
        "the replacement is not on its held place df-3: {:?}",
        replacements
            .iter()
            .map(|p| (p.metadata.name.clone(), node_of(p)))
            .collect::<Vec<_>>()
    );
    // Nothing over-committed: df-3's GPU has 10,000 MiB, the others 16,384.
    for (gpu, (_, mib, _)) in usage_by_gpu(&bound)? {
        let capacity = if gpu.starts_with("GPU-df-3-") {
            10000
        } else {
            16384
        };
        ensure!(mib <= capacity, "{gpu} over-committed: {mib} MiB");
    }
    ensure!(
        plans(ctx, "moved").await? == moved_before + 1.0,
        "not exactly one plan acted on"
    );
    ledger_matches(
        ctx.cp.gpugate_admin_port,
        ns,
        &bound,
        Duration::from_secs(30),
    )
    .await?;
    println!(
        "    defragmentation: {plan:?}; the pod and the replacement bound {:.1} s after the pod's create (grace 5 s included)",
        created.elapsed().as_secs_f64()
    );
    teardown(ctx, ns).await
}

/// The Deployment, its ReplicaSets (no garbage collector runs) and every
/// pod of `ns`.
/// Deletes the namespace's Deployments, ReplicaSets and pods.
pub async fn teardown(ctx: &Ctx, ns: &str) -> anyhow::Result<()> {
    let client = &ctx.cp.admin;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let _ = deployments
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = sets
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    delete_all_pods(client, ns, Duration::from_secs(30)).await
}
