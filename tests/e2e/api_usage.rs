//! gpugate's API usage (issue 43, docs/operations.md "API usage"), end to
//! end: with deploy/'s defaults gpugate sets no client-side rate limit, and
//! kube-apiserver's priority and fairness classifies its requests by
//! deploy/'s FlowSchema into gpugate's own priority level.

use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use kube::Client;
use serde_json::Value;

use crate::control_plane::client_from;
use crate::fixtures::*;
use crate::http::{metrics, samples};
use crate::scenarios::Ctx;

const BIND: Duration = Duration::from_secs(60);
/// deploy/'s FlowSchema and PriorityLevelConfiguration (both `gpugate`).
const LEVEL: &str = "gpugate";
const PODS: usize = 12;

/// kube-apiserver's counters of one flow schema and priority level.
#[derive(Debug, Default, PartialEq)]
struct Classified {
    dispatched: f64,
    rejected: f64,
}

async fn classified(admin: &Client) -> anyhow::Result<Classified> {
    let req = http::Request::get("/metrics").body(vec![])?;
    let text = admin.request_text(req).await?;
    let sum = |name: &str| {
        samples(&text, name)
            .iter()
            .filter(|s| s.label("flow_schema") == LEVEL && s.label("priority_level") == LEVEL)
            .map(|s| s.value)
            .sum::<f64>()
    };
    Ok(Classified {
        dispatched: sum("apiserver_flowcontrol_dispatched_requests_total"),
        rejected: sum("apiserver_flowcontrol_rejected_requests_total"),
    })
}

/// gpugate's `gpugate_api_client_wait_seconds`: (requests, seconds waited).
async fn client_waits(port: u16) -> anyhow::Result<(f64, f64)> {
    let text = metrics(port).await?;
    let one = |name: &str| {
        samples(&text, name)
            .first()
            .map(|s| s.value)
            .ok_or_else(|| anyhow!("gpugate's /metrics has no {name}"))
    };
    Ok((
        one("gpugate_api_client_wait_seconds_count")?,
        one("gpugate_api_client_wait_seconds_sum")?,
    ))
}

/// The FlowSchema and PriorityLevelConfiguration UIDs kube-apiserver's
/// answer names (`X-Kubernetes-PF-*-UID`) for a request made with
/// gpugate's own credentials.
async fn classified_as(client: &Client) -> anyhow::Result<(String, String)> {
    let req = http::Request::get("/api/v1/namespaces/gpugate/pods?limit=1").body(vec![])?;
    let answer = client.send(req.map(kube::client::Body::from)).await?;
    let header = |name: &str| {
        answer
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| anyhow!("kube-apiserver's answer has no {name} header"))
    };
    Ok((
        header("X-Kubernetes-PF-FlowSchema-UID")?,
        header("X-Kubernetes-PF-PriorityLevel-UID")?,
    ))
}

async fn uid_of(admin: &Client, path: &str) -> anyhow::Result<String> {
    let req = http::Request::get(path).body(vec![])?;
    let object: Value = serde_json::from_str(&admin.request_text(req).await?)?;
    let status = &object["status"]["conditions"];
    ensure!(
        !status.as_array().is_some_and(|c| c
            .iter()
            .any(|c| c["type"] == "Dangling" && c["status"] == "True")),
        "{path} is dangling (its priority level is missing): {status}"
    );
    object["metadata"]["uid"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("{path} has no uid"))
}

pub async fn flow_control(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let flow_schema = uid_of(
        admin,
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/gpugate",
    )
    .await
    .context("deploy/'s FlowSchema")?;
    let level = uid_of(
        admin,
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/gpugate",
    )
    .await
    .context("deploy/'s PriorityLevelConfiguration")?;
    // gpugate's credentials (its ServiceAccount's token, as it runs here).
    let as_gpugate = client_from(&ctx.cp.dir.join("gpugate.kubeconfig")).await?;
    let (fs, pl) = classified_as(&as_gpugate).await?;
    ensure!(
        (fs.as_str(), pl.as_str()) == (flow_schema.as_str(), level.as_str()),
        "a request with gpugate's credentials was classified as FlowSchema {fs}, priority \
         level {pl}; deploy/'s gpugate objects are {flow_schema} and {level}"
    );

    ctx.nodes(
        scenario,
        &[gpu_node("fc-1", 4, 10, 16384, "NVIDIA Tesla T4")],
    )
    .await?;
    let before = classified(admin).await?;
    let (requests_before, waited_before) = client_waits(ctx.cp.gpugate_admin_port).await?;
    for i in 0..PODS {
        let pod = gpu_pod(
            &format!("fc-{i}"),
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "1000")],
        );
        create_pod(admin, ns, &pod).await?;
    }
    for i in 0..PODS {
        wait_bound(admin, ns, &format!("fc-{i}"), BIND).await?;
    }
    let after = classified(admin).await?;
    let (requests_after, waited_after) = client_waits(ctx.cp.gpugate_admin_port).await?;
    let sent = requests_after - requests_before;
    let dispatched = after.dispatched - before.dispatched;
    // Each bind takes the node's lock and posts the Binding: two requests
    // of gpugate's own at least, all of them in its level (which also
    // holds its kube-scheduler's, under the same ServiceAccount).
    ensure!(
        sent >= (2 * PODS) as f64,
        "gpugate counted {sent} requests for {PODS} binds (gpugate_api_client_wait_seconds_count)"
    );
    ensure!(
        dispatched >= sent,
        "kube-apiserver dispatched {dispatched} requests in FlowSchema {LEVEL} while gpugate \
         sent {sent}"
    );
    ensure!(
        after.rejected == before.rejected,
        "kube-apiserver rejected {} of gpugate's requests",
        after.rejected - before.rejected
    );
    ensure!(
        waited_after == waited_before,
        "gpugate waited {} s for a client-side limit deploy/ does not set",
        waited_after - waited_before
    );
    println!(
        "    {PODS} binds: gpugate sent {sent} requests (0 s waiting on a client limit); \
         kube-apiserver dispatched {dispatched} in FlowSchema/priority level {LEVEL}"
    );
    Ok(())
}
