//! NVIDIA GPUs as HAMi v2.10 registers them: HAMi-core (and MPS, a label
//! only in v2.10) shared by slices, MIG by instances (hami-compat.md 3.2,
//! 4.5 and "MIG in v2.10").

use super::{DeviceKind, DeviceMode, SelectionKeys, Sharing, WebhookEnv};

/// Node: the NVIDIA device inventory (JSON array, or the legacy text form).
pub const NODE_REGISTER: &str = "hami.io/node-nvidia-register";
/// Node: pairwise topology scores between GPUs (JSON).
pub const NODE_SCORE: &str = "hami.io/node-nvidia-score";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "NVIDIA";

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
    env: WebhookEnv {
        hide_devices: ("NVIDIA_VISIBLE_DEVICES", "none"),
        core_policy: "GPU_CORE_UTILIZATION_POLICY",
        task_priority: "CUDA_TASK_PRIORITY",
    },
};
