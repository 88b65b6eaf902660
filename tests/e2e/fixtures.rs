//! Nodes, pods and what the API server holds about them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use gpugate::hami::keys::VGPU_NODE;
use gpugate::hami::pod_devices::{ContainerDevice, decode_pod_devices};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::wait::eventually;

/// Label on every node the suite creates, with the scenario's name.
pub const NODE_LABEL: &str = "e2e.gpugate.io/scenario";

/// The objects of one kind in an example file (examples/…), in order.
pub fn example_objects(root: &Path, file: &str, kind: &str) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(root.join(file)).with_context(|| file.to_string())?;
    Ok(crate::manifests::documents(&text)?
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect())
}

/// A node with `gpus` GPUs registered the way HAMi's device plugin does.
pub fn gpu_node(name: &str, gpus: usize, split: u32, mem_mib: u32, model: &str) -> Value {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            json!({"id": format!("GPU-{name}-{i}"), "index": i, "count": split,
                   "devmem": mem_mib, "devcore": 100, "type": model, "numa": 0,
                   "health": true, "mode": "hami-core"})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": {
            "hami.io/node-nvidia-register": serde_json::to_string(&devices).unwrap()
        }},
        "status": {"capacity": {"nvidia.com/gpu": (gpus as u32 * split).to_string()}}
    })
}

/// A node with `dcus` Hygon DCUs registered the way Hygon's device plugin
/// does (hami-vendors.md 3.2: HAMi's legacy text, 7 fields, types
/// `DCU-<model>`), and `gpus` NVIDIA T4s beside them when above 0.
pub fn dcu_node(name: &str, dcus: usize, gpus: usize) -> Value {
    let register: String = (0..dcus)
        .map(|i| format!("DCU-{name}-{i},4,65520,100,DCU-Z100L,0,true:"))
        .collect();
    let mut node = if gpus > 0 {
        gpu_node(name, gpus, 10, 16384, "NVIDIA Tesla T4")
    } else {
        plain_node(name, json!({}), json!({}))
    };
    node["metadata"]["annotations"]["hami.io/node-dcu-register"] = json!(register);
    node["status"]["capacity"]["hygon.com/dcunum"] = json!((dcus * 4).to_string());
    node
}

/// Creates a node (labelled with the scenario) and sets its status as a
/// kubelet would: Ready, with room for pods, plus the example's GPU count.
pub async fn create_node(client: &Client, scenario: &str, node: &Value) -> anyhow::Result<String> {
    let api: Api<Node> = Api::all(client.clone());
    let mut n = node.clone();
    let status = n.as_object_mut().and_then(|o| o.remove("status"));
    n["metadata"]["labels"][NODE_LABEL] = json!(scenario);
    let name = n["metadata"]["name"].as_str().unwrap_or("").to_string();
    let node: Node = serde_json::from_value(n)?;
    api.create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("create node {name}"))?;
    let mut capacity = json!({"cpu": "1000", "memory": "4Ti", "pods": "500"});
    for resource in [
        "nvidia.com/gpu",
        "hygon.com/dcunum",
        "hygon.com/hcunum",
        "huawei.com/Ascend910B3",
        "huawei.com/Ascend910C",
        "kunlunxin.com/vxpu",
        "cambricon.com/mlu.smlu.vcore",
        "cambricon.com/mlu.smlu.vmemory",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "birentech.com/gpu",
        "metax-tech.com/gpu",
        "enflame.com/gcu",
        "kunlunxin.com/xpu",
        "vastaitech.com/va",
        "iluvatar.ai/BI-V150-vgpu",
        "amd.com/gpu",
        "mthreads.com/vgpu",
        "mthreads.com/sgpu-core",
        "mthreads.com/sgpu-memory",
    ] {
        if let Some(count) = status
            .as_ref()
            .and_then(|s| s["capacity"][resource].as_str())
        {
            capacity[resource] = json!(count);
        }
    }
    let now = jiff::Timestamp::now().to_string();
    let patch = json!({"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "simulated by the e2e suite",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("node {name} status"))?;
    // The API server taints every new node not-ready; the node lifecycle
    // controller (kube-controller-manager, not run here) lifts the taint
    // once the node reports Ready. Do its part.
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": null}})),
    )
    .await
    .with_context(|| format!("node {name} taints"))?;
    Ok(name)
}

/// A pod with one container and these resource limits.
pub fn gpu_pod(name: &str, limits: &[(&str, &str)]) -> Value {
    let limits: serde_json::Map<String, Value> = limits
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
            "command": ["sleep", "infinity"], "resources": {"limits": limits}}]}
    })
}

pub async fn create_pod(client: &Client, ns: &str, pod: &Value) -> Result<Pod, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut p = pod.clone();
    p["metadata"]["namespace"] = json!(ns);
    let pod: Pod = serde_json::from_value(p).map_err(kube::Error::SerdeError)?;
    api.create(&PostParams::default(), &pod).await
}

/// The API server's refusal message for a create, or an error if it was
/// admitted.
pub async fn create_refused(client: &Client, ns: &str, pod: &Value) -> anyhow::Result<String> {
    match create_pod(client, ns, pod).await {
        Err(kube::Error::Api(s)) => Ok(s.message),
        Err(e) => Err(anyhow!("not an API refusal: {e}")),
        Ok(p) => Err(anyhow!(
            "pod {} was admitted",
            p.metadata.name.unwrap_or_default()
        )),
    }
}

/// Waits until gpugate knows a ResourceQuota (it learns quotas through its
/// watch): dry-run creates of `probe` until one is refused with `needle`
/// in the message.
pub async fn quota_known(
    client: &Client,
    ns: &str,
    probe: &Value,
    needle: &str,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut probe: Pod = serde_json::from_value(probe.clone())?;
    probe.metadata.namespace = Some(ns.to_string());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("gpugate knows the quota", Duration::from_secs(30), || {
        let (pods, probe, dry) = (pods.clone(), probe.clone(), dry.clone());
        async move {
            match pods.create(&dry, &probe).await {
                Err(kube::Error::Api(s)) if s.message.contains(needle) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await
}

/// Waits until the pod is bound (spec.nodeName) with HAMi's allocation.
pub async fn wait_bound(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(&format!("pod {ns}/{name} bound"), timeout, || {
        let api = api.clone();
        async move {
            let pod = api.get(name).await.map_err(|e| e.to_string())?;
            if is_bound(&pod) {
                Ok(pod)
            } else {
                Err(format!(
                    "nodeName {:?}, allocation {:?}",
                    node_of(&pod),
                    allocated_list(&pod)
                ))
            }
        }
    })
    .await
}

/// Waits until pod `name`, unschedulable until a pod was just deleted,
/// is bound. kube-scheduler retries an unschedulable pod when a pod is
/// deleted; once in a while (seen in scenarios 5 and 31, 2026-11-25 and
/// 2026-11-28) that retry's `/filter` comes before gpugate's watch shows
/// the deletion, and kube-scheduler then parks the pod for minutes. An
/// update of the pod (a label) makes it retry: what is tested is that
/// gpugate then finds the devices free.
pub async fn wait_bound_after_delete(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Pod> {
    if let Ok(p) = wait_bound(client, ns, name, Duration::from_secs(15)).await {
        return Ok(p);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"e2e.gpugate.io/nudge": "1"}}})),
    )
    .await?;
    wait_bound(client, ns, name, timeout).await
}

/// The namespace's pods that are bound with their allocation written.
pub async fn bound_pods(client: &Client, ns: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(is_bound)
        .collect())
}

/// A Ready-to-be node named `name` (its hostname label set) with these
/// annotations and `status.capacity` (what `create_node` copies of it).
pub fn plain_node(name: &str, annotations: Value, capacity: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                        "annotations": annotations},
           "status": {"capacity": capacity}})
}

/// Bound (spec.nodeName) and with HAMi's allocation written.
pub fn is_bound(pod: &Pod) -> bool {
    !node_of(pod).is_empty() && allocated_list(pod).is_some()
}

/// The first device kind's allocated list the pod carries
/// (`hami.io/vgpu-devices-allocated` for NVIDIA).
pub fn allocated_list(pod: &Pod) -> Option<&str> {
    gpugate::devices::kinds().find_map(|(_, kind)| annotation(pod, kind.pod_lists.allocated))
}

/// The first container's resource limits.
pub fn limits_of(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .map(|l| l.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect())
        .unwrap_or_default()
}

pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

pub fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// The devices of every container, from every device kind's allocated
/// list (`hami.io/vgpu-devices-allocated` for NVIDIA,
/// `hami.io/dcu-devices-allocated` for Hygon DCUs).
pub fn devices(pod: &Pod) -> anyhow::Result<Vec<ContainerDevice>> {
    let mut out = Vec::new();
    for (_, kind) in gpugate::devices::kinds() {
        let key = kind.pod_lists.allocated;
        if let Some(value) = annotation(pod, key) {
            let decoded =
                decode_pod_devices(key, value).map_err(|e| anyhow!("{key} {value:?}: {e}"))?;
            out.extend(decoded.containers.into_iter().flatten());
        }
    }
    if out.is_empty()
        && !gpugate::devices::kinds().any(|(_, k)| annotation(pod, k.pod_lists.allocated).is_some())
    {
        return Err(anyhow!("no device list"));
    }
    if annotation(pod, VGPU_NODE) != Some(node_of(pod)) {
        return Err(anyhow!(
            "{VGPU_NODE} is {:?} but the pod is bound to {:?}",
            annotation(pod, VGPU_NODE),
            node_of(pod)
        ));
    }
    Ok(out)
}

pub fn uuids(pod: &Pod) -> anyhow::Result<Vec<String>> {
    Ok(devices(pod)?.into_iter().map(|d| d.uuid).collect())
}

/// Reasons and messages of the events about a pod.
pub async fn events_of(
    client: &Client,
    ns: &str,
    pod: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

/// Waits for an event with this reason whose message contains `needle`.
pub async fn wait_event(
    client: &Client,
    ns: &str,
    pod: &str,
    reason: &str,
    needle: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    eventually(
        &format!("event {reason} containing {needle:?} on {ns}/{pod}"),
        timeout,
        || async move {
            let events = events_of(client, ns, pod)
                .await
                .map_err(|e| e.to_string())?;
            events
                .iter()
                .find(|(r, m)| r == reason && m.contains(needle))
                .map(|(_, m)| m.clone())
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await
}

/// Plays the kubelet for evictions: deletes the pods of `api` that are
/// being deleted with `now` (grace period 0; no kubelet runs here, so an
/// evicted pod stays terminating, its GPUs counted, until then). Returns
/// the pods not being deleted.
pub async fn finish_evictions(api: &Api<Pod>, now: &DeleteParams) -> Result<Vec<Pod>, String> {
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let (going, standing): (Vec<Pod>, Vec<Pod>) = all
        .items
        .into_iter()
        .partition(|p| p.metadata.deletion_timestamp.is_some());
    for p in going {
        let _ = api
            .delete(p.metadata.name.as_deref().unwrap_or(""), now)
            .await;
    }
    Ok(standing)
}

/// Deletes the pods `names` of `ns` now (grace period 0: no kubelet would
/// confirm).
pub async fn delete_pods(client: &Client, ns: &str, names: &[&str]) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for name in names {
        pods.delete(name, &now).await?;
    }
    Ok(())
}

/// Deletes every pod of `ns` (grace period 0: no kubelet would confirm) and
/// waits until none is left, deleting again what a late create added.
pub async fn delete_all_pods(client: &Client, ns: &str, timeout: Duration) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete_collection(&now, &ListParams::default()).await?;
    eventually(&format!("no pods left in {ns}"), timeout, || {
        let (pods, now) = (pods.clone(), now.clone());
        async move {
            let left = pods
                .list(&ListParams::default().limit(1))
                .await
                .map_err(|e| e.to_string())?;
            if left.items.is_empty() {
                Ok(())
            } else {
                let _ = pods.delete_collection(&now, &ListParams::default()).await;
                Err("pods left".to_string())
            }
        }
    })
    .await
}

/// Deletes every pod of these namespaces at once (no kubelet would confirm
/// a graceful deletion) and the scenario's nodes, then waits until the pods
/// are gone and gpugate's ledger has let go of them.
pub async fn clean(
    client: &Client,
    namespaces: &[&str],
    scenario: &str,
    metrics_port: u16,
) -> anyhow::Result<()> {
    for ns in namespaces {
        delete_all_pods(client, ns, Duration::from_secs(30)).await?;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{NODE_LABEL}={scenario}")),
        )
        .await?;
    eventually(
        "gpugate forgets the scenario",
        Duration::from_secs(30),
        || async move {
            let text = crate::http::metrics(metrics_port)
                .await
                .map_err(|e| e.to_string())?;
            let (allocations, nodes) = (
                crate::http::gauge(&text, "gpugate_ledger_allocations"),
                crate::http::gauge(&text, "gpugate_cluster_nodes"),
            );
            if allocations == Some(0.0) && nodes == Some(0.0) {
                Ok(())
            } else {
                Err(format!(
                    "ledger allocations {allocations:?}, nodes {nodes:?}"
                ))
            }
        },
    )
    .await
}

/// Per GPU: (pods, MiB, cores) allocated, from the pods' annotations.
pub fn usage_by_gpu(pods: &[Pod]) -> anyhow::Result<BTreeMap<String, (u32, u64, u64)>> {
    let mut out: BTreeMap<String, (u32, u64, u64)> = BTreeMap::new();
    for p in pods {
        for d in devices(p)? {
            let e = out.entry(d.uuid).or_default();
            e.0 += 1;
            e.1 += u64::from(d.mem_mib);
            e.2 += u64::from(d.cores);
        }
    }
    Ok(out)
}

/// Waits until gpugate's ledger, as its metrics show it
/// (`hami_vgpu_memory_allocated_bytes` of the namespace), equals the
/// annotations of these bound pods, pod by pod and GPU by GPU.
pub async fn ledger_matches(
    metrics_port: u16,
    ns: &str,
    bound: &[Pod],
    timeout: Duration,
) -> anyhow::Result<()> {
    let want: BTreeSet<(String, String, u64)> = bound
        .iter()
        .flat_map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            devices(p)
                .unwrap_or_default()
                .into_iter()
                .map(move |d| (name.clone(), d.uuid, u64::from(d.mem_mib) << 20))
        })
        .collect();
    eventually("the ledger matches the annotations", timeout, || {
        let want = &want;
        async move {
            let text = crate::http::metrics(metrics_port)
                .await
                .map_err(|e| e.to_string())?;
            let got: BTreeSet<(String, String, u64)> =
                crate::http::samples(&text, "hami_vgpu_memory_allocated_bytes")
                    .iter()
                    .filter(|s| s.label("namespace") == ns)
                    .map(|s| {
                        (
                            s.label("pod").to_string(),
                            s.label("device_uuid").to_string(),
                            s.value as u64,
                        )
                    })
                    .collect();
            if got == *want {
                Ok(())
            } else {
                let only_ledger: Vec<_> = got.difference(want).take(10).collect();
                let only_annotations: Vec<_> = want.difference(&got).take(10).collect();
                Err(format!(
                    "only in ledger {only_ledger:?}; only in annotations {only_annotations:?} \
                         (at most 10 of each shown)"
                ))
            }
        }
    })
    .await
}
