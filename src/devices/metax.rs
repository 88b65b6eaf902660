//! Metax GPUs as HAMi v2.10 schedules them (hami-vendors.md section 5,
//! the `Metax-GPU` backend): no register annotation; one GPU per unit of
//! the node capacity of `metax-tech.com/gpu` (5.2), each taken whole (the
//! count alone; memory and cores are the whole device's), written to the
//! pod as `hami.io/metax-gpu-devices-to-allocate` and `-allocated` under
//! the vendor word `Metax-GPU`. No node lock (5.2).
//!
//! Metax sGPUs (the `Metax-SGPU` backend, `metax-tech.com/sgpu`): devices
//! from the plugin's own JSON register (5.2), shared by slices under the
//! tenancy rules of `engine::tenancy` (app class and QoS policy, 5.5),
//! with MetaLink zones as network groups; lists under `Metax-SGPU`, the
//! plugin's JSON of each container's devices and the predicate time
//! (5.3); HAMi's node lock.

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, ExtrasInput, NO_RESOURCES,
    NO_SELECTION, NodeLockStyle, NodePreference, OwnDevice, OwnInventory, PodLists, RuleEdit,
    RuleInput, SelectionKeys, TenancyKeys, VENDOR_DEFAULTS, whole_devices,
};

/// The vendor word in pod device lists, and every GPU's type.
pub const VENDOR: &str = "Metax-GPU";
/// Node capacity: whole GPUs.
pub const GPU: &str = "metax-tech.com/gpu";
/// MiB of every GPU: HAMi registers this whatever the card (5.7).
pub const MEMORY_MIB: u32 = 65536;
/// Node: Metax's plugin's topology losses by number of GPUs, JSON
/// (`{"1":100,"2":200}`; 5.2): the lower, the better for a pod of that
/// many (read under binpack, 5.5).
pub const TOPOLOGY_LOSSES: &str = "metax-tech.com/gpu.topology.losses";
/// Node: the plugin's topology scores by number of GPUs (read under
/// spread, 5.5): the higher, the better.
pub const TOPOLOGY_SCORES: &str = "metax-tech.com/gpu.topology.scores";

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
    node_preference: NodePreference::SizeTables {
        losses: TOPOLOGY_LOSSES,
        scores: TOPOLOGY_SCORES,
    },
    ..VENDOR_DEFAULTS
};

/// One whole GPU per unit of capacity (5.2).
fn gpus(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    whole_devices(capacity, GPU, MEMORY_MIB, VENDOR)
}

/// The vendor word of sGPU lists, and every sGPU device's type (5.2).
pub const SGPU_VENDOR: &str = "Metax-SGPU";
/// The sGPU count resource (5.1).
pub const SGPU: &str = "metax-tech.com/sgpu";
/// The node annotation Metax's sGPU plugin registers its devices in
/// (5.2).
pub const NODE_GPU_DEVICES: &str = "metax-tech.com/node-gpu-devices";
/// What the sGPU plugin reads of the allocation (5.3): each container's
/// devices as JSON, and when the scheduler chose them.
pub const GPU_DEVICES_ALLOCATED: &str = "metax-tech.com/gpu-devices-allocated";
pub const PREDICATE_TIME: &str = "metax-tech.com/predicate-time";
/// The pod's app class and QoS policy (5.3).
pub const APP_CLASS: &str = "metax-tech.com/sgpu-app-class";
pub const QOS_POLICY: &str = "metax-tech.com/sgpu-qos-policy";
/// Pod: whether a pod taking whole sGPUs prefers nodes by their MetaLink
/// zones (a boolean; over the section's `sgpuTopologyAware`, 5.5).
pub const TOPOLOGY_AWARE: &str = "metax-tech.com/sgpu-topology-aware";
/// The QoS policy HAMi's webhook gives a pod that is not `online` (5.4).
pub const BEST_EFFORT: &str = "best-effort";

/// The app class and QoS policy of a pod on sGPUs (5.3, 5.5).
pub static SGPU_TENANCY: TenancyKeys = TenancyKeys {
    class: APP_CLASS,
    online: "online",
    offline: "offline",
    policy: QOS_POLICY,
    policies: &[BEST_EFFORT, "fixed-share", "burst-share"],
};

/// Metax GPUs shared as sGPUs (the `Metax-SGPU` backend).
pub static METAX_SGPU: DeviceKind = DeviceKind {
    name: "metax-sgpu",
    vendor: SGPU_VENDOR,
    register_key: NODE_GPU_DEVICES,
    own_register: Some(decode_sgpu_devices),
    selection: SelectionKeys {
        use_uuid: "metax-tech.com/use-gpuuuid",
        nouse_uuid: "metax-tech.com/nouse-gpuuuid",
        ..NO_SELECTION
    },
    noun: "Metax sGPU",
    pod_lists: PodLists {
        to_allocate: "hami.io/metax-sgpu-devices-to-allocate",
        allocated: "hami.io/metax-sgpu-devices-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: SGPU,
        resource_memory_name: "metax-tech.com/vmemory",
        resource_core_name: "metax-tech.com/vcore",
        // A container that gives no cores takes the whole device's (5.1).
        default_cores: 100,
        // A bare number of vmemory is GiB (5.1).
        memory_factor: 1024,
        ..NO_RESOURCES
    },
    // HAMi's `metax` section names both backends (5.1): the sGPU names
    // under their own keys; the whole GPU's name is accepted and not read
    // as the sGPU kind's.
    section_keys: &[
        ("resourceVCountName", Some("resourceCountName")),
        ("resourceVMemoryName", Some("resourceMemoryName")),
        ("resourceVCoreName", Some("resourceCoreName")),
        ("resourceCountName", None),
        ("sgpuTopologyAware", Some("topologyAware")),
    ],
    tenancy: Some(&SGPU_TENANCY),
    memory_bytes_with_unit: true,
    webhook_rule: Some(sgpu_webhook),
    node_lock: NodeLockStyle::Hami,
    bind_extras: Some(sgpu_extras),
    node_preference: NodePreference::Tenants {
        links: TOPOLOGY_AWARE,
    },
    ..VENDOR_DEFAULTS
};

/// One device of `metax-tech.com/node-gpu-devices` (5.2); the fields
/// gpugate reads. Go's `omitempty`: an absent number is 0 and an absent
/// `healthy` false.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SgpuDevice {
    #[serde(default)]
    uuid: String,
    #[serde(default)]
    total_dev_count: i64,
    #[serde(default)]
    total_compute: i64,
    #[serde(default)]
    total_v_ram: i64,
    #[serde(default)]
    numa: i64,
    #[serde(default)]
    healthy: bool,
    #[serde(default)]
    qos_policy: String,
    #[serde(default)]
    link_zone: i64,
}

/// The most sGPUs a device holds at once: beyond it the register is
/// garbage.
const MAX_SGPUS: i64 = 1024;
/// The highest MetaLink zone gpugate keeps (`Gpu::network`'s range).
const MAX_LINK_ZONE: i64 = i16::MAX as i64;

/// `metax-tech.com/node-gpu-devices` as Metax's plugin writes it (5.2):
/// device `i` of the array has index `i`, `totalDevCount` sGPUs, the MiB
/// of `totalVRam` and the cores of `totalCompute`; its `qosPolicy` is its
/// mode and its `linkZone` (above 0) its network group. Refused: no
/// device (HAMi: "no sdevice found on node"), a device without a UUID or
/// named twice, or a number out of range (negative, or above HAMi's
/// `int32`; more than 1,024 sGPUs; a zone above 32,767).
pub fn decode_sgpu_devices(_node: &str, text: &str) -> Result<OwnInventory, String> {
    let list: Vec<SgpuDevice> = serde_json::from_str(text)
        .map_err(|e| format!("not a JSON array of Metax sGPU devices: {e}"))?;
    if list.is_empty() {
        return Err("no devices".to_string());
    }
    let mut devices: Vec<OwnDevice> = Vec::with_capacity(list.len());
    for (i, d) in list.into_iter().enumerate() {
        let id = d.uuid.trim().to_string();
        if id.is_empty() {
            return Err(format!("device {i} has no uuid"));
        }
        if devices.iter().any(|o| o.id == id) {
            return Err(format!("device {id:?} is listed twice"));
        }
        let number = |name: &str, v: i64, most: i64| {
            u32::try_from(v)
                .ok()
                .filter(|n| i64::from(*n) <= most)
                .ok_or_else(|| format!("device {id:?}: {name} {v} is out of range (0 to {most})"))
        };
        let slots = number("totalDevCount", d.total_dev_count, MAX_SGPUS)?;
        let mem_mib = number("totalVRam", d.total_v_ram, i64::from(i32::MAX))?;
        let cores = number("totalCompute", d.total_compute, i64::from(i32::MAX))?;
        let numa = i32::try_from(d.numa)
            .map_err(|_| format!("device {id:?}: numa {} is out of range", d.numa))?;
        if d.link_zone > MAX_LINK_ZONE {
            return Err(format!(
                "device {id:?}: linkZone {} is out of range (at most {MAX_LINK_ZONE})",
                d.link_zone
            ));
        }
        devices.push(OwnDevice {
            id,
            index: u32::try_from(i).unwrap_or(u32::MAX),
            slots,
            mem_mib,
            cores,
            device_type: SGPU_VENDOR,
            minor: String::new(),
            numa,
            healthy: d.healthy,
            mode: d.qos_policy.trim().to_string(),
            // HAMi: a zone of 0 or less is none (5.5).
            network: (d.link_zone > 0).then_some(d.link_zone),
        });
    }
    Ok(OwnInventory {
        devices,
        profiles: Vec::new(),
    })
}

/// HAMi's webhook for a container asking for sGPUs in its limits (5.4):
/// an app class must be `online` or `offline`, and a pod with one asks
/// for one device; a pod that is not `online` gets the QoS policy
/// `best-effort` when it sets none, and one it sets must be known.
fn sgpu_webhook(input: &RuleInput<'_>) -> Result<Vec<RuleEdit>, String> {
    let Some(count) = input.count_in_limits.filter(|n| *n > 0) else {
        return Ok(Vec::new());
    };
    let keys = &SGPU_TENANCY;
    let class = (input.pod_annotation)(APP_CLASS);
    if let Some(c) = &class {
        if c != keys.online && c != keys.offline {
            return Err(format!(
                "annotation {APP_CLASS} is {c:?}: allowed {:?} or {:?}",
                keys.online, keys.offline
            ));
        }
        if count != 1 {
            return Err(format!(
                "asks for {count} {SGPU}, and a pod with an app class ({APP_CLASS}) asks for one \
                 device"
            ));
        }
    }
    if class.as_deref() == Some(keys.online) {
        return Ok(Vec::new());
    }
    match (input.pod_annotation)(QOS_POLICY) {
        None => Ok(vec![RuleEdit::PodAnnotation(
            QOS_POLICY,
            BEST_EFFORT.to_string(),
        )]),
        Some(q) if keys.policies.contains(&q.as_str()) => Ok(Vec::new()),
        Some(q) => Err(format!(
            "annotation {QOS_POLICY} is {q:?}: allowed {}",
            keys.policies.join(", ")
        )),
    }
}

/// What Metax's sGPU plugin reads beside the lists (5.3): each container's
/// devices (`[]` for one without), `{"uuid","compute","vRam"}` with a 0
/// left out as Go's `omitempty` does, and the time in nanoseconds.
pub fn sgpu_extras(input: &ExtrasInput<'_>) -> Vec<(&'static str, String)> {
    if input.containers.iter().all(|c| c.devices.is_empty()) {
        return Vec::new();
    }
    let containers: Vec<String> = input
        .containers
        .iter()
        .map(|c| {
            let devices: Vec<String> = c
                .devices
                .iter()
                .map(|d| {
                    let mut o = format!("{{\"uuid\":{}", serde_json::Value::from(d.uuid.as_str()));
                    if d.cores > 0 {
                        o.push_str(&format!(",\"compute\":{}", d.cores));
                    }
                    if d.mem_mib > 0 {
                        o.push_str(&format!(",\"vRam\":{}", d.mem_mib));
                    }
                    o.push('}');
                    o
                })
                .collect();
            format!("[{}]", devices.join(","))
        })
        .collect();
    vec![
        (GPU_DEVICES_ALLOCATED, format!("[{}]", containers.join(","))),
        (PREDICATE_TIME, input.now_unix_nanos.to_string()),
    ]
}
