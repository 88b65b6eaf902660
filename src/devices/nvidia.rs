//! NVIDIA GPUs as HAMi v2.10 registers them: HAMi-core (and MPS, a label
//! only in v2.10) shared by slices, MIG by instances (hami-compat.md 3.2,
//! 4.5 and "MIG in v2.10").

use super::{
    ConfigDefaults, DeviceKind, DeviceMode, Entries, PodLists, SelectionKeys, Sharing, WebhookEnv,
};

/// Node: the NVIDIA device inventory (JSON array, or the legacy text form).
pub const NODE_REGISTER: &str = "hami.io/node-nvidia-register";
/// Node: pairwise topology scores between GPUs (JSON).
pub const NODE_SCORE: &str = "hami.io/node-nvidia-score";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "NVIDIA";
/// Pod: devices still to hand out; consumed by the device plugin.
pub const DEVICES_TO_ALLOCATE: &str = "hami.io/vgpu-devices-to-allocate";
/// Pod: devices allocated; never changed after bind. The ledger reads this.
pub const DEVICES_ALLOCATED: &str = "hami.io/vgpu-devices-allocated";

/// Pod: GPU models to use (comma list).
pub const USE_GPU_TYPE: &str = "nvidia.com/use-gputype";
/// Pod: GPU models to avoid (comma list).
pub const NOUSE_GPU_TYPE: &str = "nvidia.com/nouse-gputype";
/// Pod: GPU UUIDs to use (comma list).
pub const USE_GPU_UUID: &str = "nvidia.com/use-gpuuuid";
/// Pod: GPU UUIDs to avoid (comma list).
pub const NOUSE_GPU_UUID: &str = "nvidia.com/nouse-gpuuuid";
/// Pod: only GPUs whose device mode contains this value (`hami-core`,
/// `mig`, `mps`; HAMi's substring rule).
pub const VGPU_MODE: &str = "nvidia.com/vgpu-mode";
/// Pod: `"true"` puts all GPUs of a container on one NUMA node.
pub const NUMA_BIND: &str = "nvidia.com/numa-bind";

/// NVIDIA GPUs.
pub static NVIDIA: DeviceKind = DeviceKind {
    name: "nvidia",
    vendor: VENDOR,
    register_key: NODE_REGISTER,
    capacity: None,
    score_key: Some(NODE_SCORE),
    selection: SelectionKeys {
        use_type: USE_GPU_TYPE,
        nouse_type: NOUSE_GPU_TYPE,
        use_uuid: USE_GPU_UUID,
        nouse_uuid: NOUSE_GPU_UUID,
        mode: VGPU_MODE,
        numa_bind: NUMA_BIND,
    },
    modes: &[
        DeviceMode {
            name: "hami-core",
            sharing: Sharing::Slices,
        },
        DeviceMode {
            name: "mig",
            sharing: Sharing::Instances,
        },
        DeviceMode {
            name: "mps",
            sharing: Sharing::Slices,
        },
    ],
    default_mode: "hami-core",
    other_modes: None,
    env: WebhookEnv {
        hide_devices: ("NVIDIA_VISIBLE_DEVICES", "none"),
        core_policy: "GPU_CORE_UTILIZATION_POLICY",
        task_priority: "CUDA_TASK_PRIORITY",
    },
    hami_core: true,
    noun: "NVIDIA GPU",
    pod_lists: PodLists {
        to_allocate: DEVICES_TO_ALLOCATE,
        allocated: DEVICES_ALLOCATED,
    },
    // HAMi's NVIDIA device plugin maps entry i to container i
    // (hami-vendors.md, "NVIDIA padding"): gpugate writes every entry.
    entries: Entries::EveryContainer,
    config: ConfigDefaults {
        resource_count_name: "nvidia.com/gpu",
        resource_memory_name: "nvidia.com/gpumem",
        resource_memory_percentage_name: "nvidia.com/gpumem-percentage",
        resource_core_name: "nvidia.com/gpucores",
        resource_priority_name: "nvidia.com/priority",
        default_cores: 0,
        default_gpu_num: 1,
        memory_factor: 1,
    },
    templates: None,
    grouping: super::Grouping::Any,
    node_lock: super::NodeLockStyle::Hami,
    // No vendor rule: no core masks or compute units, requests read as
    // given, no webhook rule, HAMi's key names, nothing beside the lists.
    ..super::VENDOR_DEFAULTS
};
