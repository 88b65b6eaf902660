//! AMD GPUs as HAMi v2.10 schedules them (hami-vendors.md section 11):
//! registered as JSON under `hami.io/node-amd-register` by HAMi's
//! amd-device-plugin, each with its compute units as `devcore` (304 for an
//! MI300X) and its product name as `type`. A container asks for a count,
//! memory in MiB and cores as a percent of the compute units (100 unless
//! given); it takes `floor(units × percent / 100)` units of each GPU, at
//! least one (`compute_units`). Written to the pod as
//! `hami.io/amd-devices-to-allocate` and `-allocated`, whose vendor word is
//! the GPU's product name (`vendor_from_type`), with entries for the
//! asking containers only (the type is not the word, 1.5), behind HAMi's
//! node lock.

use super::{
    ConfigDefaults, DeviceKind, Entries, NO_RESOURCES, PodLists, RuleEdit, RuleInput,
    SelectionKeys, VENDOR_DEFAULTS,
};

/// Node: the inventory (JSON; 11.2).
pub const NODE_REGISTER: &str = "hami.io/node-amd-register";
/// What every AMD device type contains (HAMi's vendor key, 1.3).
pub const VENDOR: &str = "AMD";

/// AMD GPUs.
pub static AMD: DeviceKind = DeviceKind {
    name: "amd",
    vendor: VENDOR,
    register_key: NODE_REGISTER,
    selection: SelectionKeys {
        // Case-insensitive words of the product name (11.3).
        use_type: "amd.com/use-gputype",
        nouse_type: "amd.com/nouse-gputype",
        use_uuid: "amd.com/use-gpu-uuid",
        nouse_uuid: "amd.com/nouse-gpu-uuid",
        mode: "",
        numa_bind: "",
    },
    noun: "AMD GPU",
    pod_lists: PodLists {
        to_allocate: "hami.io/amd-devices-to-allocate",
        allocated: "hami.io/amd-devices-allocated",
    },
    entries: Entries::AskingContainers,
    config: ConfigDefaults {
        resource_count_name: "amd.com/gpu",
        resource_memory_name: "amd.com/gpumem",
        resource_core_name: "amd.com/gpucores",
        // 11.1: cores default to 100 (every compute unit).
        default_cores: 100,
        ..NO_RESOURCES
    },
    vendor_from_type: true,
    compute_units: true,
    webhook_rule: Some(cores_in_range),
    ..VENDOR_DEFAULTS
};

/// HAMi's webhook (11.4): with a count, cores given must be 1..=100.
fn cores_in_range(input: &RuleInput<'_>) -> Result<Vec<RuleEdit>, String> {
    match input.cores {
        Some(c) if input.count_in_limits.is_some() && !(1..=100).contains(&c) => Err(format!(
            "cores {c}: allowed 1..=100 (percent of a GPU's compute units)"
        )),
        _ => Ok(Vec::new()),
    }
}
