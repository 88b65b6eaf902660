//! Hygon DCUs as HAMi v2.10 schedules them (hami-vendors.md section 3):
//! registered in HAMi's legacy text form under `hami.io/node-dcu-register`
//! by Hygon's device plugin, shared by slices of memory and cores (the
//! shared slice-fit loop, 1.11), written to the pod as
//! `hami.io/dcu-devices-to-allocate` and `hami.io/dcu-devices-allocated`
//! under the vendor word `DCU`, behind the node lock every HAMi backend
//! shares (`hami.io/mutex.lock`).

use super::{ConfigDefaults, DeviceKind, Entries, PodLists, SelectionKeys, Sharing, WebhookEnv};

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
pub static HYGON: DeviceKind = DeviceKind {
    name: "hygon",
    vendor: VENDOR,
    register_key: NODE_REGISTER,
    score_key: None,
    selection: SelectionKeys {
        use_type: USE_DCU_TYPE,
        nouse_type: NOUSE_DCU_TYPE,
        use_uuid: USE_UUID,
        nouse_uuid: NOUSE_UUID,
        // No mode annotation, no NUMA binding: HAMi's DCU fit reads
        // neither (1.4, 3.5).
        mode: "",
        numa_bind: "",
    },
    // Every DCU is shared by slices, whatever mode its legacy text names
    // (HAMi's DCU backend never reads it; 3.5).
    modes: &[],
    default_mode: "",
    other_modes: Some(Sharing::Slices),
    env: WebhookEnv {
        hide_devices: ("", ""),
        core_policy: "",
        task_priority: "",
    },
    hami_core: false,
    noun: "Hygon DCU",
    pod_lists: PodLists {
        to_allocate: DEVICES_TO_ALLOCATE,
        allocated: DEVICES_ALLOCATED,
    },
    // Hygon's plugin registers types `DCU-<model>`, not the vendor word,
    // so HAMi lists only the containers with DCUs (hami-vendors.md,
    // "Hygon"); the plugin skips empty entries either way (3.6).
    entries: Entries::AskingContainers,
    config: ConfigDefaults {
        resource_count_name: "hygon.com/dcunum",
        resource_memory_name: "hygon.com/dcumem",
        resource_memory_percentage_name: "",
        resource_core_name: "hygon.com/dcucores",
        resource_priority_name: "",
        // HAMi's DCU request defaults to 100 cores: a count alone, or a
        // count with memory only, takes its DCUs whole (3.1, 3.7).
        default_cores: 100,
        // HAMi reads no DCU request without `hygon.com/dcunum` (3.1).
        default_gpu_num: 0,
    },
};
