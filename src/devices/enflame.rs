//! Enflame GCUs as HAMi v2.10 schedules them (hami-vendors.md section 9,
//! the `GCU` backend): no register annotation; one GCU per unit of the
//! node capacity of `enflame.com/gcu` (9.2), each taken whole by one
//! container (100 "MiB" of 100 and 100 cores, as HAMi accounts it),
//! written to the pod as `hami.io/enflame-gcu-devices-to-allocate` and
//! `-allocated` under the vendor word `GCU`. No node lock (9.2). DRS
//! slices (the `Enflame` backend, `enflame.com/drs-gcu`) are not placed.

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, NO_RESOURCES, NodeLockStyle,
    PodLists, VENDOR_DEFAULTS, whole_devices,
};

/// The vendor word in pod device lists, and every GCU's type.
pub const VENDOR: &str = "GCU";
/// Node capacity: whole GCUs.
pub const GCU: &str = "enflame.com/gcu";

/// Enflame GCUs, whole.
pub static ENFLAME_GCU: DeviceKind = DeviceKind {
    name: "enflame",
    vendor: VENDOR,
    capacity: Some(&CapacityInventory {
        resources: &[GCU],
        id_word: VENDOR,
        ring_label: None,
        devices: gcus,
    }),
    // HAMi reads no selection annotation for whole GCUs (9.3).
    noun: "Enflame GCU",
    pod_lists: PodLists {
        to_allocate: "hami.io/enflame-gcu-devices-to-allocate",
        allocated: "hami.io/enflame-gcu-devices-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: GCU,
        // 9.1: `Memreq` 100 of a `devmem` 100, `Coresreq` 100.
        default_cores: 100,
        ..NO_RESOURCES
    },
    // HAMi's `enflame` section (9.1): the GCU count under its own key; the
    // DRS names are accepted and not read as the GCU's.
    section_keys: &[
        ("resourceNameGCU", Some("resourceCountName")),
        ("resourceCountName", None),
        ("resourceNameDRSGCU", None),
        ("resourceNameGCUMemory", None),
        ("resourceNameGCUCore", None),
        ("resourceNameVGCU", None),
        ("resourceNameVGCUPercentage", None),
    ],
    node_lock: NodeLockStyle::None,
    ..VENDOR_DEFAULTS
};

/// One whole GCU per unit of capacity, `devmem` 100 (9.2).
fn gcus(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    whole_devices(capacity, GCU, 100, VENDOR)
}
