//! Annotation and label keys shared with HAMi (hami-compat.md 3.1, 4.1) that
//! every device kind uses; a kind's own (its register annotation, its
//! selection annotations) are in [`crate::devices`].

/// Node: liveness handshake between scheduler and device plugin.
pub const NODE_HANDSHAKE: &str = "hami.io/node-handshake";
/// Node: the node lock taken by bind and released by the device plugin.
pub const NODE_LOCK: &str = "hami.io/mutex.lock";
/// Node: comma-separated GPU UUIDs excluded from new allocations.
pub const DEVICE_CORDON: &str = "hami.io/device-cordon";

/// Pod (annotation and label): the node chosen for the pod.
pub const VGPU_NODE: &str = "hami.io/vgpu-node";
/// Pod: Unix seconds of the allocation.
pub const VGPU_TIME: &str = "hami.io/vgpu-time";
/// Pod: NVIDIA's device lists (what the device plugin still hands out;
/// what the pod holds). Every kind's are its `devices::PodLists`.
pub use crate::devices::nvidia::{
    DEVICES_ALLOCATED as VGPU_DEVICES_ALLOCATED, DEVICES_TO_ALLOCATE as VGPU_DEVICES_TO_ALLOCATE,
};
/// Pod: the MIG instance of each MIG grant (JSON, HAMi v2.10); the device
/// plugin adds the instance's runtime ids.
pub const VGPU_MIG_ALLOCATIONS: &str = "hami.io/vgpu-mig-allocations";
/// Pod: `allocating`, then `success` or `failed` (device plugin).
pub const BIND_PHASE: &str = "hami.io/bind-phase";
/// Pod: Unix seconds of the bind.
pub const BIND_TIME: &str = "hami.io/bind-time";

/// Pod: node placement policy override (`binpack` / `spread`).
pub const NODE_SCHEDULER_POLICY: &str = "hami.io/node-scheduler-policy";
/// Pod: GPU placement policy override (`binpack` / `spread` / `topology-aware` / `mutex`).
pub const GPU_SCHEDULER_POLICY: &str = "hami.io/gpu-scheduler-policy";

/// Pod: weights of HAMi's device score, `slot=…,core=…,memory=…`.
pub const DEVICE_SCORING_WEIGHTS: &str = "hami.io/device-scoring-weights";

/// Whether a pod annotation or label key under `hami.io/` is written only
/// by the scheduler and the device plugin, never by a pod's author: every
/// `hami.io/vgpu-*` and `hami.io/bind-*` key (node, time, device lists,
/// MIG instances, bind phase and time), and each vendor's device lists
/// (`hami.io/<vendor>-devices-to-allocate`, `hami.io/<vendor>-devices-allocated`,
/// Kunlun's `hami.io/kunlun-allocated`). HAMi master refuses the same keys
/// on CREATE (#3042) and on UPDATE by anyone but its components (#3074);
/// gpugate's validating webhook refuses them on CREATE and its
/// ValidatingAdmissionPolicy (deploy/) on UPDATE, with the same rule.
pub fn is_scheduler_owned(key: &str) -> bool {
    // Ascend's `huawei.com/<chip>`: the template each NPU is split into
    // (hami-vendors.md 2.3); rewritten, the device plugin would make a
    // larger vNPU than the scheduler counted.
    if key.starts_with("huawei.com/Ascend") {
        return true;
    }
    // Cambricon's dynamic-SMLU profile (4.3): rewritten, the plugin would
    // set up another MLU, or more of one, than the scheduler counted.
    if key.starts_with("CAMBRICON_DSMLU_") {
        return true;
    }
    // What AWS's Neuron plugin reads of the allocation (10.3); not
    // `NEURON_ALLOCATED`, which the plugin itself sets.
    if matches!(
        key,
        "AWS_NEURON_IDS"
            | "NEURON_RESOURCE_TYPE"
            | "NEURON_ALLOC_TIME"
            | "aws.amazon.com/predicate-node"
    ) {
        return true;
    }
    // Kunlunxin's plugin hands out whole XPUs by these indexes (8.3):
    // rewritten, it would hand out another pod's.
    if key == "BAIDU_COM_DEVICE_IDX" {
        return true;
    }
    // What Moore Threads' plugin reads of the allocation (7.3).
    if matches!(
        key,
        "mthreads.com/gpu-index" | "mthreads.com/predicate-node" | "mthreads.com/predicate-time"
    ) {
        return true;
    }
    // What Enflame's DRS plugin reads of the allocation (9.3): the GCU,
    // the slices and each container's profile. Rewritten, it would make
    // another GCU's slices, or a larger profile, than the scheduler
    // counted. Not `gcu-assigned` and its time, which the plugin sets.
    if matches!(
        key,
        "enflame.com/gcu-assigned-index"
            | "enflame.com/gcu-assigned-id"
            | "enflame.com/gcu-assigned-minor"
            | "enflame.com/gcu-request-size"
            | "assigned-containers"
    ) {
        return true;
    }
    // What Metax's sGPU plugin reads of the allocation (5.3): rewritten,
    // it would hand out other devices, or more of them, than the
    // scheduler counted.
    if matches!(
        key,
        "metax-tech.com/gpu-devices-allocated" | "metax-tech.com/predicate-time"
    ) {
        return true;
    }
    let Some(rest) = key.strip_prefix("hami.io/") else {
        return false;
    };
    rest.starts_with("vgpu-")
        || rest.starts_with("bind-")
        || rest.ends_with("-devices-to-allocate")
        || rest.ends_with("-devices-allocated")
        || rest == "kunlun-allocated"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_owned_keys() {
        for owned in [
            VGPU_NODE,
            VGPU_TIME,
            VGPU_DEVICES_TO_ALLOCATE,
            VGPU_DEVICES_ALLOCATED,
            VGPU_MIG_ALLOCATIONS,
            BIND_PHASE,
            BIND_TIME,
            "hami.io/cambricon-mlu-devices-to-allocate",
            "huawei.com/Ascend910B3",
            "hami.io/dcu-devices-allocated",
            "hami.io/Ascend910B-devices-allocated",
            "hami.io/aws-neuron-devices-allocated",
            "hami.io/kunlun-allocated",
            "BAIDU_COM_DEVICE_IDX",
            "mthreads.com/gpu-index",
            "hami.io/metax-gpu-devices-allocated",
            "hami.io/Vastai-devices-to-allocate",
            "hami.io/enflame-vgpu-devices-allocated",
            "enflame.com/gcu-request-size",
            "assigned-containers",
        ] {
            assert!(is_scheduler_owned(owned), "{owned}");
        }
        for not in [
            NODE_SCHEDULER_POLICY,
            GPU_SCHEDULER_POLICY,
            DEVICE_SCORING_WEIGHTS,
            NODE_LOCK,
            "hami.io/webhook",
            "hami.io/numa-alignment",
            "nvidia.com/vgpu-devices-allocated",
            "hami.io",
            "huawei.com/vnpu-mode",
            "enflame.com/gcu-assigned",
        ] {
            assert!(!is_scheduler_owned(not), "{not}");
        }
    }
}
