//! Biren GPUs as HAMi v2.10 schedules them (hami-vendors.md section 12):
//! registered as JSON under `hami.io/node-biren-register` by
//! biren-device-plugin, taken by count alone (a device is shared by as
//! many pods as its registered `count`; no memory or cores are accounted,
//! `counts_only`), written to the pod as `hami.io/Biren-devices-to-allocate`
//! and `-allocated` under the vendor word `Biren`, behind the node lock
//! every HAMi backend shares.

use super::{
    ConfigDefaults, DeviceKind, NO_RESOURCES, NO_SELECTION, PodLists, SelectionKeys,
    VENDOR_DEFAULTS,
};

/// Node: the inventory (JSON; 12.2).
pub const NODE_REGISTER: &str = "hami.io/node-biren-register";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "Biren";

/// Biren GPUs.
pub static BIREN: DeviceKind = DeviceKind {
    name: "biren",
    vendor: VENDOR,
    register_key: NODE_REGISTER,
    selection: SelectionKeys {
        use_uuid: "birentech.com/use-gpuuuid",
        nouse_uuid: "birentech.com/nouse-gpuuuid",
        ..NO_SELECTION
    },
    noun: "Biren GPU",
    pod_lists: PodLists {
        // Capital B: HAMi names the keys after the vendor word (12.3).
        to_allocate: "hami.io/Biren-devices-to-allocate",
        allocated: "hami.io/Biren-devices-allocated",
    },
    // The plugin registers `type` Biren, the vendor word: one entry per
    // container (1.5, the default).
    config: ConfigDefaults {
        resource_count_name: "birentech.com/gpu",
        ..NO_RESOURCES
    },
    counts_only: true,
    ..VENDOR_DEFAULTS
};
