//! Metax GPUs as HAMi v2.10 schedules them (hami-vendors.md section 5,
//! the `Metax-GPU` backend): no register annotation; one GPU per unit of
//! the node capacity of `metax-tech.com/gpu` (5.2), each taken whole (the
//! count alone; memory and cores are the whole device's), written to the
//! pod as `hami.io/metax-gpu-devices-to-allocate` and `-allocated` under
//! the vendor word `Metax-GPU`. No node lock (5.2). Metax sGPUs (the
//! `Metax-SGPU` backend, `metax-tech.com/sgpu`) are not placed.

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, NO_RESOURCES, NodeLockStyle,
    PodLists, VENDOR_DEFAULTS, whole_devices,
};

/// The vendor word in pod device lists, and every GPU's type.
pub const VENDOR: &str = "Metax-GPU";
/// Node capacity: whole GPUs.
pub const GPU: &str = "metax-tech.com/gpu";
/// MiB of every GPU: HAMi registers this whatever the card (5.7).
pub const MEMORY_MIB: u32 = 65536;

/// Metax GPUs, whole.
pub static METAX_GPU: DeviceKind = DeviceKind {
    name: "metax",
    vendor: VENDOR,
    capacity: Some(&CapacityInventory {
        resources: &[GPU],
        id_word: "metax",
        ring_label: None,
        devices: gpus,
    }),
    // HAMi reads no selection annotation for Metax GPUs (5.3).
    noun: "Metax GPU",
    pod_lists: PodLists {
        to_allocate: "hami.io/metax-gpu-devices-to-allocate",
        allocated: "hami.io/metax-gpu-devices-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: GPU,
        // A GPU is taken whole: all its memory and cores (5.1).
        default_cores: 100,
        ..NO_RESOURCES
    },
    // HAMi's `metax` section names the sGPU resources too (5.1): accepted,
    // and not read as the GPU's.
    section_keys: &[
        ("resourceVCountName", None),
        ("resourceVMemoryName", None),
        ("resourceVCoreName", None),
        ("sgpuTopologyAware", None),
    ],
    node_lock: NodeLockStyle::None,
    ..VENDOR_DEFAULTS
};

/// One whole GPU per unit of capacity (5.2).
fn gpus(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    whole_devices(capacity, GPU, MEMORY_MIB, VENDOR)
}
