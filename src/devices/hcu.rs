//! Hygon HCUs, HAMi master's rename of its DCU backend after v2.10
//! (hami-vendors.md 3.8; HAMi master's `pkg/device/hygon`, which replaced
//! the DCU backend): the same slices and rules as [`super::hygon`] under
//! new names: register `hami.io/node-hcu-register`, pod lists
//! `hami.io/hcu-devices-to-allocate` and `-allocated` under the vendor
//! word `HCU`, resources `hygon.com/hcunum`, `hcumem`, `hcucores`, type
//! annotations `hygon.com/use-hcutype` and `nouse-hcutype` (the UUID
//! annotations keep their DCU names).

use super::{ConfigDefaults, DeviceKind, Entries, PodLists, SelectionKeys, Sharing, WebhookEnv};

/// Node: the HCU inventory (HAMi's legacy text or JSON form).
pub const NODE_REGISTER: &str = "hami.io/node-hcu-register";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "HCU";
/// Pod: the devices Hygon's HCU device plugin hands out.
pub const DEVICES_TO_ALLOCATE: &str = "hami.io/hcu-devices-to-allocate";
/// Pod: the devices the pod holds.
pub const DEVICES_ALLOCATED: &str = "hami.io/hcu-devices-allocated";

/// Hygon HCUs.
pub static HCU: DeviceKind = DeviceKind {
    name: "hcu",
    vendor: VENDOR,
    register_key: NODE_REGISTER,
    score_key: None,
    selection: SelectionKeys {
        use_type: "hygon.com/use-hcutype",
        nouse_type: "hygon.com/nouse-hcutype",
        use_uuid: super::hygon::USE_UUID,
        nouse_uuid: super::hygon::NOUSE_UUID,
        mode: "",
        numa_bind: "",
    },
    modes: &[],
    default_mode: "",
    other_modes: Some(Sharing::Slices),
    env: WebhookEnv {
        hide_devices: ("", ""),
        core_policy: "",
        task_priority: "",
    },
    hami_core: false,
    noun: "Hygon HCU",
    pod_lists: PodLists {
        to_allocate: DEVICES_TO_ALLOCATE,
        allocated: DEVICES_ALLOCATED,
    },
    // As for DCUs: entries for the asking containers only, which a plugin
    // that skips empty entries reads either way (docs/policies.md says
    // this is assumed from the DCU backend it replaced).
    entries: Entries::AskingContainers,
    config: ConfigDefaults {
        resource_count_name: "hygon.com/hcunum",
        resource_memory_name: "hygon.com/hcumem",
        resource_memory_percentage_name: "",
        resource_core_name: "hygon.com/hcucores",
        resource_priority_name: "",
        default_cores: 100,
        default_gpu_num: 0,
    },
};
