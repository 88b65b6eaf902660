//! Kubernetes `Node` and `Pod` objects into engine types.

use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};

use crate::engine::{Allocation, Gpu, Node, Usage};
use crate::hami::cordon::decode_device_cordon;
use crate::hami::pair_scores::decode_pair_scores;
use crate::hami::pod_devices::decode_pod_devices;
use crate::hami::register::decode_node_devices;
use crate::hami::{DecodeError, keys};

/// A node whose GPUs cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error("node {node}: no {annotation} annotation (HAMi's device plugin has not registered it)")]
    Unregistered {
        node: String,
        annotation: &'static str,
    },
    #[error("node {node}: {source}")]
    Annotation { node: String, source: DecodeError },
}

/// The engine's view of a node: GPUs from `hami.io/node-nvidia-register`,
/// pair scores from `hami.io/node-nvidia-score`, cordoned GPUs from
/// `hami.io/device-cordon`. Pair scores naming unknown GPUs are ignored.
pub fn node_from_k8s(node: &K8sNode) -> Result<Node, NodeError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let annotations = node.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let wrap = |source| NodeError::Annotation {
        node: name.clone(),
        source,
    };
    let register = get(keys::NODE_NVIDIA_REGISTER).ok_or_else(|| NodeError::Unregistered {
        node: name.clone(),
        annotation: keys::NODE_NVIDIA_REGISTER,
    })?;
    let devices = decode_node_devices(register).map_err(wrap)?;
    let cordon = get(keys::DEVICE_CORDON)
        .map(decode_device_cordon)
        .transpose()
        .map_err(wrap)?
        .unwrap_or_default();
    let gpus = devices
        .into_iter()
        .map(|d| {
            let mut g = Gpu::new(
                d.id,
                d.index,
                d.device_type,
                Usage {
                    slots: d.count,
                    mem_mib: u64::from(d.devmem),
                    cores: d.devcore,
                },
            );
            g.numa = d.numa;
            g.healthy = d.health;
            g.mode = d.mode;
            g.cordoned = cordon.contains(&g.uuid);
            g
        })
        .collect();
    let mut out = Node::new(name.clone(), gpus);
    if let Some(scores) = get(keys::NODE_NVIDIA_SCORE) {
        let scores = decode_pair_scores(scores).map_err(wrap)?;
        for (a, b, s) in scores.iter() {
            out.set_pair_score(a, b, s);
        }
    }
    Ok(out)
}

/// A pod whose allocation annotations cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod}: {source}")]
pub struct PodAllocationError {
    pub pod: String,
    pub source: DecodeError,
}

/// The identity of a pod in the ledger: its UID, or `namespace/name` for
/// objects that have none yet (files, tests).
pub fn pod_key(pod: &Pod) -> String {
    match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => pod_name(pod),
    }
}

/// `namespace/name` (namespace `default` when absent).
pub fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The GPUs a pod holds, from `hami.io/vgpu-node` and
/// `hami.io/vgpu-devices-allocated`. `None` for pods that hold none: no
/// allocation annotations, or finished (Succeeded / Failed). Terminating pods
/// still hold their GPUs.
pub fn pod_allocation(pod: &Pod) -> Result<Option<Allocation>, PodAllocationError> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Ok(None);
    }
    let annotations = pod.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let (Some(node), Some(devices)) = (get(keys::VGPU_NODE), get(keys::VGPU_DEVICES_ALLOCATED))
    else {
        return Ok(None);
    };
    let devices = decode_pod_devices(keys::VGPU_DEVICES_ALLOCATED, devices).map_err(|source| {
        PodAllocationError {
            pod: pod_name(pod),
            source,
        }
    })?;
    let spec = pod.spec.as_ref();
    let inits = spec
        .and_then(|s| s.init_containers.as_ref())
        .map_or(0, Vec::len);
    let apps = spec.map_or(0, |s| s.containers.len());
    // gpugate writes one entry per container, so entry i is container i.
    // HAMi writes entries only for containers with GPUs; then which entries
    // are init containers is unknown, and all are counted as app containers:
    // their sum is never less than the real usage, so nothing is over-committed.
    let init_count = if devices.containers.len() == inits + apps {
        inits
    } else {
        0
    };
    Ok(Some(Allocation::from_pod_devices(
        node, &devices, init_count,
    )))
}
