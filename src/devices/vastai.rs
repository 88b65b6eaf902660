//! Vastai devices as HAMi v2.10 schedules them in card mode
//! (hami-vendors.md section 13): registered as JSON under
//! `hami.io/node-va-register`, taken by count alone (a device is shared by
//! as many pods as its registered `count`, `counts_only`), written to the
//! pod as `hami.io/Vastai-devices-to-allocate` and `-allocated` under the
//! vendor word `Vastai`, behind the node lock every HAMi backend shares.
//! A node registering dies (die mode, `custominfo.DeviceStrategy` `die`)
//! has each die placed as a device, its card (`AIC`) as its network
//! group: a container's dies come from the largest card first, and nodes
//! rank by the share of a container's dies on one card (13.5).

use super::{
    ConfigDefaults, DeviceKind, Grouping, NO_RESOURCES, NO_SELECTION, NodePreference, PodLists,
    SelectionKeys, VENDOR_DEFAULTS,
};

/// Node: the inventory (JSON; 13.2).
pub const NODE_REGISTER: &str = "hami.io/node-va-register";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "Vastai";

/// Vastai devices.
pub static VASTAI: DeviceKind = DeviceKind {
    name: "vastai",
    vendor: VENDOR,
    register_key: NODE_REGISTER,
    selection: SelectionKeys {
        use_uuid: "vastaitech.com/use-gpuuuid",
        nouse_uuid: "vastaitech.com/nouse-gpuuuid",
        ..NO_SELECTION
    },
    noun: "Vastai device",
    pod_lists: PodLists {
        // Named after the vendor word (13.3).
        to_allocate: "hami.io/Vastai-devices-to-allocate",
        allocated: "hami.io/Vastai-devices-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: "vastaitech.com/va",
        ..NO_RESOURCES
    },
    counts_only: true,
    // Die mode (13.5): a container's dies from the largest card first,
    // nodes by the share of a container's dies on one card; a node in
    // card mode registers no cards, and neither rule applies.
    grouping: Grouping::NetworkGroups,
    node_preference: NodePreference::NetworkShare,
    ..VENDOR_DEFAULTS
};
