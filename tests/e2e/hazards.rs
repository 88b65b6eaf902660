//! The protocol's hazards (issue 39, docs/operations.md "Protocol
//! hazards"), end to end: a lock kept past its expiry while its holder
//! waits for its device plugin, an init-container-only pod beside a
//! regular one, the scheduler-owned keys guarded on UPDATE, and a scoped
//! ResourceQuota. The simulated device plugin finds the pod an Allocate is
//! for through the node lock, as HAMi's does, and records what each
//! container got.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::device_plugin::DevicePlugin;
use crate::fixtures::*;
use crate::http::{metrics, samples};
use crate::scenarios::Ctx;
use crate::wait::eventually;

const BIND: Duration = Duration::from_secs(60);
const T4: &str = "NVIDIA Tesla T4";

/// A change to gpugate's config file for one scenario, put back when
/// dropped (gpugate polls the file every second and takes a version once
/// it reads the same twice).
struct ConfigChange<'a> {
    ctx: &'a Ctx,
}

impl<'a> ConfigChange<'a> {
    /// Writes the suite's config with `edit` applied and waits until
    /// gpugate has it in force.
    async fn apply(ctx: &'a Ctx, edit: impl Fn(&str) -> String) -> anyhow::Result<Self> {
        let changed = edit(&ctx.cp.gpugate_config);
        ensure!(
            changed != ctx.cp.gpugate_config,
            "the config edit changed nothing"
        );
        let before = loaded_at(ctx).await?;
        std::fs::write(ctx.cp.dir.join("gpugate.yaml"), &changed)?;
        let change = ConfigChange { ctx };
        eventually(
            "gpugate loads the changed config",
            Duration::from_secs(20),
            || async {
                match loaded_at(ctx).await {
                    Ok(t) if t > before => Ok(()),
                    Ok(t) => Err(format!("loaded at {t}")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await?;
        Ok(change)
    }
}

impl Drop for ConfigChange<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.ctx.cp.dir.join("gpugate.yaml"),
            &self.ctx.cp.gpugate_config,
        );
    }
}

/// When gpugate loaded the config in force (Unix seconds).
async fn loaded_at(ctx: &Ctx) -> anyhow::Result<f64> {
    let text = metrics(ctx.cp.gpugate_admin_port).await?;
    samples(&text, "gpugate_config_loaded_timestamp_seconds")
        .first()
        .map(|s| s.value)
        .context("no gpugate_config_loaded_timestamp_seconds")
}

/// Puts the device plugin's Allocate delay back when dropped.
struct Delay<'a>(&'a DevicePlugin, Duration);

impl Drop for Delay<'_> {
    fn drop(&mut self) {
        self.0.set_delay(self.1);
    }
}

/// The non-empty entries of the pod's `hami.io/vgpu-devices-allocated`,
/// in container order: what its containers must be given.
fn own_entries(pod: &Pod) -> Vec<String> {
    gpugate::devices::kinds()
        .filter_map(|(_, kind)| annotation(pod, kind.pod_lists.allocated))
        .flat_map(|list| list.split(';'))
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

/// Until the simulated kubelet has admitted the pod; then each of its GPU
/// containers must have its own entry, from its own pod's list.
pub async fn admitted_with_own_devices(
    plugin: &DevicePlugin,
    client: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<()> {
    let served = eventually(
        &format!("{ns}/{name} admitted by the simulated kubelet"),
        Duration::from_secs(30),
        || async {
            let s = plugin.served(ns, name);
            if s.is_empty() {
                Err("not yet".to_string())
            } else {
                Ok(s)
            }
        },
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods.get(name).await?;
    let want = own_entries(&pod);
    let got: Vec<String> = served.iter().map(|s| s.entry.clone()).collect();
    ensure!(
        served.iter().all(|s| s.from == format!("{ns}/{name}")) && got == want,
        "{ns}/{name}'s containers got {served:?}; its own devices are {want:?}"
    );
    Ok(())
}

/// Plays a cluster event every 2 s until `done`: kube-scheduler retries
/// a pod from its unschedulable queue on one (a node label changes).
async fn poke_until<T, F, Fut>(
    client: &Client,
    node: &str,
    what: &str,
    timeout: Duration,
    mut probe: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    let mut n = 0u32;
    loop {
        let last = match probe().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{what}: not after {} s (last seen: {last})",
                timeout.as_secs()
            );
        }
        n += 1;
        let label = json!({"metadata": {"labels": {"e2e.gpugate.io/poke": n.to_string()}}});
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(label))
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The pod stays unbound for `seconds` (looked at every second).
async fn stays_unbound(
    client: &Client,
    ns: &str,
    name: &str,
    seconds: u32,
    while_: &str,
) -> anyhow::Result<()> {
    for _ in 0..seconds {
        ensure!(
            !bound_now(client, ns, name).await?,
            "{name} was bound {while_}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

fn slice(name: &str, mib: &str) -> Value {
    gpu_pod(name, &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", mib)])
}

async fn bound_now(client: &Client, ns: &str, name: &str) -> anyhow::Result<bool> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(is_bound(&pods.get(name).await?))
}

// 25 ------------------------------------------------------------------------

/// A pod bound and waiting for its device plugin (its kubelet held back)
/// keeps its node's lock past the lock's expiry (6 s here): a second pod is
/// not bound there meanwhile (FailedScheduling with
/// `NodeLockAwaitingAllocation`), the gauge and a warning event on the
/// holder say so; once the holder is admitted, with its own devices, the
/// second pod binds and gets its own.
pub async fn expired_lock_kept(
    ctx: &Ctx,
    plugin: &DevicePlugin,
    ns: &str,
    scenario: &str,
) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let _config =
        ConfigChange::apply(ctx, |c| c.replace("expirySeconds: 300", "expirySeconds: 6")).await?;
    let node = "hz-lock-1";
    ctx.nodes(scenario, &[gpu_node(node, 1, 10, 16384, T4)])
        .await?;
    plugin.hold(ns, "holder");
    create_pod(admin, ns, &slice("holder", "1000")).await?;
    wait_bound(admin, ns, "holder", BIND).await?;
    // Past the lock's expiry, with room to spare.
    tokio::time::sleep(Duration::from_secs(8)).await;
    create_pod(admin, ns, &slice("second", "1000")).await?;
    wait_event(
        admin,
        ns,
        "second",
        "FailedScheduling",
        "NodeLockAwaitingAllocation",
        Duration::from_secs(30),
    )
    .await?;
    let told = wait_event(
        admin,
        ns,
        "holder",
        "NodeLockAwaitingAllocation",
        &format!("node {node} is waiting for its device plugin to admit pod {ns}/holder"),
        Duration::from_secs(20),
    )
    .await?;
    let port = ctx.cp.gpugate_admin_port;
    let waited = eventually(
        "the awaiting-allocation gauge",
        Duration::from_secs(15),
        || async {
            let text = metrics(port).await.map_err(|e| e.to_string())?;
            samples(&text, "gpugate_node_lock_awaiting_allocation_seconds")
                .into_iter()
                .find(|s| s.label("node") == node && s.label("pod") == format!("{ns}/holder"))
                .map(|s| s.value)
                .ok_or_else(|| "no sample".to_string())
        },
    )
    .await?;
    // Whole seconds, set by a sweep every 5 s after the 6 s expiry.
    ensure!(waited >= 6.0, "gauge {waited} s");
    // Held back for as long again: the second pod stays unbound.
    stays_unbound(admin, ns, "second", 8, "while the holder still waited").await?;
    plugin.let_go(ns, "holder");
    admitted_with_own_devices(plugin, admin, ns, "holder").await?;
    poke_until(admin, node, "the second pod bound", BIND, || async {
        if bound_now(admin, ns, "second")
            .await
            .map_err(|e| e.to_string())?
        {
            Ok(())
        } else {
            Err("unbound".to_string())
        }
    })
    .await?;
    admitted_with_own_devices(plugin, admin, ns, "second").await?;
    // HAMi master's scheduler metrics tell the same story.
    let text = metrics(port).await?;
    let value = |name: &str, labels: &[(&str, &str)]| {
        samples(&text, name)
            .into_iter()
            .find(|s| labels.iter().all(|(k, v)| s.label(k) == *v))
            .map(|s| s.value)
    };
    ensure!(
        value("hami_scheduler_is_leader", &[]) == Some(1.0),
        "not the leader:\n{text}"
    );
    ensure!(value("hami_scheduler_cache_synced", &[]) == Some(1.0));
    ensure!(
        value(
            "hami_scheduler_allocations_total",
            &[("device_type", "NVIDIA")]
        ) >= Some(2.0)
    );
    ensure!(
        value(
            "hami_scheduler_allocation_failures_total",
            &[
                ("phase", "filter"),
                ("failure_reason", "NodeLockAwaitingAllocation")
            ]
        ) >= Some(1.0),
        "no filter failure for the kept lock"
    );
    println!("    {told}");
    Ok(())
}

// 26 ------------------------------------------------------------------------

/// A pod whose only GPU is in an init container, created while a regular
/// pod holds the node's lock (its kubelet slow): it binds only after the
/// regular pod is admitted, under its own lock, and each container gets
/// its own pod's devices.
pub async fn init_only_beside_regular(
    ctx: &Ctx,
    plugin: &DevicePlugin,
    ns: &str,
    scenario: &str,
) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let node = "hz-init-1";
    ctx.nodes(scenario, &[gpu_node(node, 2, 10, 16384, T4)])
        .await?;
    let _delay = Delay(plugin, plugin.delay());
    plugin.set_delay(Duration::from_millis(300));
    plugin.hold(ns, "regular");
    create_pod(admin, ns, &slice("regular", "3000")).await?;
    wait_bound(admin, ns, "regular", BIND).await?;
    let mut init_only = gpu_pod("init-only", &[]);
    init_only["spec"]["initContainers"] = json!([{
        "name": "prepare", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
        "command": ["true"],
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5000"}},
    }]);
    create_pod(admin, ns, &init_only).await?;
    // While the regular pod holds the lock, the init-only pod is not bound.
    stays_unbound(
        admin,
        ns,
        "init-only",
        4,
        "while another pod held the node's lock",
    )
    .await?;
    plugin.let_go(ns, "regular");
    admitted_with_own_devices(plugin, admin, ns, "regular").await?;
    wait_bound(admin, ns, "init-only", BIND).await?;
    admitted_with_own_devices(plugin, admin, ns, "init-only").await?;
    let served = plugin.served(ns, "init-only");
    ensure!(
        served.len() == 1 && served[0].container == "prepare",
        "Allocate was called for {served:?}"
    );
    Ok(())
}

// 27 ------------------------------------------------------------------------

/// HAMi's components as they are deployed: a ServiceAccount each, with the
/// ClusterRoles HAMi v2.10's chart gives its device plugin and scheduler.
fn hami_rbac(ns: &str) -> Vec<Value> {
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules})
    };
    let bind = |name: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})
    };
    let account = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": ns}})
    };
    vec![
        account("e2e-hami-device-plugin"),
        // charts/hami/templates/device-plugin/monitorrole.yaml
        role(
            "e2e-hami-device-plugin",
            json!([
                {"apiGroups": [""], "resources": ["pods"],
                 "verbs": ["get", "create", "watch", "list", "update", "patch"]},
                {"apiGroups": [""], "resources": ["nodes"],
                 "verbs": ["get", "update", "list", "patch"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "create", "update"]},
            ]),
        ),
        bind("e2e-hami-device-plugin"),
        account("e2e-hami-scheduler"),
        // charts/hami/templates/scheduler/clusterrole.yaml
        role(
            "e2e-hami-scheduler",
            json!([
                {"apiGroups": [""], "resources": ["pods", "configmaps"],
                 "verbs": ["get", "list", "watch", "patch"]},
                {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["nodes"],
                 "verbs": ["get", "list", "patch", "watch"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "list"]},
                {"apiGroups": [""], "resources": ["resourcequotas"],
                 "verbs": ["get", "list", "watch"]},
            ]),
        ),
        bind("e2e-hami-scheduler"),
        // A namespace editor: Kubernetes' built-in `edit` role is the
        // aggregation of `system:aggregate-to-edit` (and `-view`), which
        // kube-controller-manager assembles; without it here, the parts
        // are bound directly.
        editor_binding(ns, "system:aggregate-to-edit"),
        editor_binding(ns, "system:aggregate-to-view"),
    ]
}

fn editor_binding(ns: &str, role: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": format!("e2e-editor-{}", role.trim_start_matches("system:")), "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "e2e-editor"}]})
}

/// A merge patch of one annotation (or label) of a pod; the API server's
/// refusal, if any.
async fn patch_key(
    client: &Client,
    ns: &str,
    pod: &str,
    field: &str,
    key: &str,
    value: Value,
) -> Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {field: {key: value}}});
    match pods
        .patch(pod, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(format!("{} {}", s.code, s.message)),
        Err(e) => Err(e.to_string()),
    }
}

/// deploy/'s ValidatingAdmissionPolicy: a namespace editor (the built-in
/// `edit` ClusterRole) is refused every change of a scheduler-owned key
/// on a bound pod still waiting for its device plugin, with the key and
/// who may write it; other annotations stay theirs. HAMi's device plugin
/// (its ServiceAccount and ClusterRole as HAMi's chart has them) marks
/// the pod and releases the lock, HAMi's own scheduler writes an
/// allocation on a pending pod (a migration), gpugate binds.
pub async fn scheduler_owned_keys(
    ctx: &Ctx,
    plugin: &DevicePlugin,
    ns: &str,
    scenario: &str,
) -> anyhow::Result<()> {
    use gpugate::hami::keys::{
        BIND_PHASE, BIND_TIME, NODE_LOCK, VGPU_DEVICES_ALLOCATED, VGPU_DEVICES_TO_ALLOCATE,
        VGPU_MIG_ALLOCATIONS, VGPU_NODE, VGPU_TIME,
    };
    let admin = &ctx.cp.admin;
    let discovery = kube::discovery::Discovery::new(admin.clone()).run().await?;
    for o in hami_rbac(ns) {
        crate::manifests::apply(admin, &discovery, &o, false).await?;
    }
    let node = "hz-keys-1";
    ctx.nodes(scenario, &[gpu_node(node, 1, 10, 16384, T4)])
        .await?;
    plugin.hold(ns, "victim");
    create_pod(admin, ns, &slice("victim", "1000")).await?;
    let victim = wait_bound(admin, ns, "victim", BIND).await?;
    let editor = ctx
        .cp
        .client_as_user("e2e-editor", &["system:authenticated"])
        .await?;
    let whole = format!("GPU-{node}-0,NVIDIA,16384,100:;");
    // The policy reaches the API server through an informer: the first
    // refusal is waited for.
    let first = eventually(
        "the editor's forged update refused",
        Duration::from_secs(30),
        || async {
            match patch_key(
                &editor,
                ns,
                "victim",
                "annotations",
                VGPU_DEVICES_TO_ALLOCATE,
                json!(whole),
            )
            .await
            {
                Err(e) => Ok(e),
                Ok(()) => Err("admitted".to_string()),
            }
        },
    )
    .await?;
    ensure!(
        first.starts_with("403")
            && first.contains(VGPU_DEVICES_TO_ALLOCATE)
            && first.contains("may be written only by the GPU scheduler")
            && first.contains("e2e-editor")
            && first.contains("patch nodes"),
        "{first}"
    );
    let forged: [(&str, &str, Value); 12] = [
        ("annotations", VGPU_DEVICES_ALLOCATED, json!(whole)),
        ("annotations", VGPU_DEVICES_ALLOCATED, Value::Null),
        ("annotations", BIND_PHASE, json!("success")),
        ("annotations", BIND_TIME, json!("1")),
        ("annotations", VGPU_NODE, json!("elsewhere")),
        ("annotations", VGPU_TIME, json!("1")),
        ("annotations", VGPU_MIG_ALLOCATIONS, json!("[]")),
        (
            "annotations",
            "hami.io/cambricon-mlu-devices-to-allocate",
            json!("MLU-0,MLU,1,0:;"),
        ),
        ("annotations", "gpugate.io/numa-zones", json!("0")),
        ("annotations", "gpugate.io/preemption", json!(node)),
        ("labels", VGPU_NODE, json!("elsewhere")),
        // Fixed once the pod is bound: Metax's plugin set the device up
        // for the pod's QoS policy, and the ledger counts it (5.5).
        (
            "annotations",
            "metax-tech.com/sgpu-qos-policy",
            json!("fixed-share"),
        ),
    ];
    for (field, key, value) in forged {
        let refused = patch_key(&editor, ns, "victim", field, key, value.clone()).await;
        match refused {
            Err(e) if e.starts_with("403") && e.contains(key) => {}
            other => bail!("the editor's {field} {key}={value}: {other:?}"),
        }
    }
    // The editor keeps every other key of their pod.
    patch_key(
        &editor,
        ns,
        "victim",
        "annotations",
        "team.example.com/owner",
        json!("ml"),
    )
    .await
    .map_err(|e| anyhow::anyhow!("an ordinary annotation: {e}"))?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let now = pods.get("victim").await?;
    for key in [
        VGPU_DEVICES_TO_ALLOCATE,
        VGPU_DEVICES_ALLOCATED,
        BIND_PHASE,
        VGPU_NODE,
    ] {
        ensure!(
            annotation(&now, key) == annotation(&victim, key),
            "{key} changed: {:?} → {:?}",
            annotation(&victim, key),
            annotation(&now, key)
        );
    }

    // HAMi's device plugin, as deployed: erases what it handed out, marks
    // the pod, releases the lock.
    let device_plugin = ctx
        .cp
        .client_as_service_account(ns, "e2e-hami-device-plugin")
        .await?;
    let rest = ";".repeat(own_entries(&victim).len());
    patch_key(
        &device_plugin,
        ns,
        "victim",
        "annotations",
        VGPU_DEVICES_TO_ALLOCATE,
        json!(rest),
    )
    .await
    .map_err(|e| anyhow::anyhow!("device plugin, to-allocate: {e}"))?;
    patch_key(
        &device_plugin,
        ns,
        "victim",
        "annotations",
        BIND_PHASE,
        json!("success"),
    )
    .await
    .map_err(|e| anyhow::anyhow!("device plugin, bind-phase: {e}"))?;
    let nodes: Api<Node> = Api::all(device_plugin.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {NODE_LOCK: null}}})),
        )
        .await
        .context("device plugin, the node lock")?;
    plugin.let_go(ns, "victim");

    // HAMi's own scheduler (a migration, both running): its Filter writes
    // the allocation on a pod it has not bound yet.
    let mut pending = slice("hami-placed", "2000");
    pending["spec"]["nodeSelector"] = json!({"e2e.gpugate.io/nowhere": "true"});
    create_pod(admin, ns, &pending).await?;
    let hami = ctx
        .cp
        .client_as_service_account(ns, "e2e-hami-scheduler")
        .await?;
    let entry = format!("GPU-{node}-0,NVIDIA,2000,0:;");
    for (key, value) in [
        (VGPU_NODE, node.to_string()),
        (VGPU_TIME, "1700000000".to_string()),
        (VGPU_DEVICES_TO_ALLOCATE, entry.clone()),
        (VGPU_DEVICES_ALLOCATED, entry),
    ] {
        patch_key(&hami, ns, "hami-placed", "annotations", key, json!(value))
            .await
            .map_err(|e| anyhow::anyhow!("HAMi's scheduler, {key}: {e}"))?;
    }
    patch_key(&hami, ns, "hami-placed", "labels", VGPU_NODE, json!(node))
        .await
        .map_err(|e| anyhow::anyhow!("HAMi's scheduler, the label: {e}"))?;

    // gpugate still binds (pods/binding carries the keys).
    create_pod(admin, ns, &slice("after", "1000")).await?;
    wait_bound(admin, ns, "after", BIND).await?;
    admitted_with_own_devices(plugin, admin, ns, "after").await?;
    println!("    {first}");
    Ok(())
}

// 28 ------------------------------------------------------------------------

/// A ResourceQuota whose `scopeSelector` names PriorityClass `e2e-gpu-high`
/// (4,000 MiB of GPU memory) covers only the pods of that class: a pod of
/// no class asking 8,000 MiB is admitted and bound, a high pod of 3,000 MiB
/// too, and a second high pod of 2,000 MiB is refused naming that quota.
/// (HAMi v2.10 applied it to every pod of the namespace; HAMi master skips
/// it.)
pub async fn scoped_quota(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let admin = &ctx.cp.admin;
    let discovery = kube::discovery::Discovery::new(admin.clone()).run().await?;
    let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": "e2e-gpu-high"}, "value": 500});
    crate::manifests::apply(admin, &discovery, &class, false).await?;
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "gpu-high", "namespace": ns},
        "spec": {
            "hard": {"limits.nvidia.com/gpumem": "4000"},
            "scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["e2e-gpu-high"]}]},
        }
    }))?;
    Api::<ResourceQuota>::namespaced(admin.clone(), ns)
        .create(&kube::api::PostParams::default(), &quota)
        .await?;
    ctx.nodes(scenario, &[gpu_node("hz-quota-1", 2, 10, 16384, T4)])
        .await?;
    let high = |name: &str, mib: &str| {
        let mut p = slice(name, mib);
        p["spec"]["priorityClassName"] = json!("e2e-gpu-high");
        p
    };
    quota_known(admin, ns, &high("probe", "5000"), "gpu-high").await?;
    create_pod(admin, ns, &slice("plain", "8000")).await?;
    create_pod(admin, ns, &high("high-1", "3000")).await?;
    for name in ["plain", "high-1"] {
        wait_bound(admin, ns, name, BIND).await?;
    }
    let refused = create_refused(admin, ns, &high("high-2", "2000")).await?;
    ensure!(
        refused.contains("is over its GPU quota")
            && refused.contains("GPU memory 2000 MiB requested, 3000 MiB of 4000 MiB already used")
            && refused.contains("(ResourceQuota gpu-high)"),
        "{refused}"
    );
    // A pod of no class still fits: the scoped quota does not cover it.
    create_pod(admin, ns, &slice("plain-2", "4000")).await?;
    wait_bound(admin, ns, "plain-2", BIND).await?;
    println!("    {refused}");
    Ok(())
}
