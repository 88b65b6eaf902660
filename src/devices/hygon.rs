//! Hygon DCUs as HAMi v2.10 schedules them (hami-vendors.md section 3):
//! registered in HAMi's legacy text form under `hami.io/node-dcu-register`
//! by Hygon's device plugin, shared by slices of memory and cores (the
//! shared slice-fit loop, 1.11), written to the pod as
//! `hami.io/dcu-devices-to-allocate` and `hami.io/dcu-devices-allocated`
//! under the vendor word `DCU`, behind the node lock every HAMi backend
//! shares (`hami.io/mutex.lock`).

use super::{
    ConfigDefaults, DeviceKind, Entries, NO_RESOURCES, NO_SELECTION, PodLists, SelectionKeys,
    VENDOR_DEFAULTS,
};

/// Node: the DCU inventory (legacy text, 7 or 9 fields per device; 3.2).
pub const NODE_REGISTER: &str = "hami.io/node-dcu-register";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "DCU";
/// Pod: the devices Hygon's device plugin hands out (3.3).
pub const DEVICES_TO_ALLOCATE: &str = "hami.io/dcu-devices-to-allocate";
/// Pod: the devices the pod holds (3.3).
pub const DEVICES_ALLOCATED: &str = "hami.io/dcu-devices-allocated";

/// Pod: DCU types to use / to avoid (comma lists; 3.3).
pub const USE_DCU_TYPE: &str = "hygon.com/use-dcutype";
pub const NOUSE_DCU_TYPE: &str = "hygon.com/nouse-dcutype";
/// Pod: DCU (and HCU) UUIDs to use / to avoid (comma lists; 3.3, 3.8).
pub const USE_UUID: &str = "hygon.com/use-gpuuuid";
pub const NOUSE_UUID: &str = "hygon.com/nouse-gpuuuid";

/// Hygon DCUs.
pub static HYGON: DeviceKind = hygon_kind(HygonNames {
    name: "hygon",
    vendor: VENDOR,
    noun: "Hygon DCU",
    register_key: NODE_REGISTER,
    pod_lists: PodLists {
        to_allocate: DEVICES_TO_ALLOCATE,
        allocated: DEVICES_ALLOCATED,
    },
    use_type: USE_DCU_TYPE,
    nouse_type: NOUSE_DCU_TYPE,
    resources: ["hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"],
});

/// What tells HAMi's two Hygon backends apart (DCU here, HCU in
/// [`super::hcu`]): names only; their rules are the same.
pub(super) struct HygonNames {
    pub name: &'static str,
    pub vendor: &'static str,
    pub noun: &'static str,
    pub register_key: &'static str,
    pub pod_lists: PodLists,
    pub use_type: &'static str,
    pub nouse_type: &'static str,
    /// Count, memory and cores resources.
    pub resources: [&'static str; 3],
}

/// A Hygon backend under `names`.
pub(super) const fn hygon_kind(names: HygonNames) -> DeviceKind {
    let [count, memory, cores] = names.resources;
    DeviceKind {
        name: names.name,
        vendor: names.vendor,
        register_key: names.register_key,
        // No mode annotation, no NUMA binding: HAMi's DCU fit reads
        // neither (1.4, 3.5).
        selection: SelectionKeys {
            use_type: names.use_type,
            nouse_type: names.nouse_type,
            use_uuid: USE_UUID,
            nouse_uuid: NOUSE_UUID,
            ..NO_SELECTION
        },
        // Every device is shared by slices, whatever mode its legacy text
        // names (HAMi's backend never reads it; 3.5): the default.
        noun: names.noun,
        pod_lists: names.pod_lists,
        // Hygon's plugin registers types `DCU-<model>`, not the vendor
        // word, so HAMi lists only the containers with devices
        // (hami-vendors.md, "Hygon"); the plugin skips empty entries either
        // way (3.6).
        entries: Entries::AskingContainers,
        config: ConfigDefaults {
            resource_count_name: count,
            resource_memory_name: memory,
            resource_core_name: cores,
            // HAMi's request defaults to 100 cores: a count alone, or a
            // count with memory only, takes its devices whole (3.1, 3.7).
            // HAMi reads no request without the count (3.1): no default
            // count.
            default_cores: 100,
            ..NO_RESOURCES
        },
        ..VENDOR_DEFAULTS
    }
}
