//! Enflame GCUs as HAMi v2.10 schedules them (hami-vendors.md section 9,
//! the `GCU` backend): no register annotation; one GCU per unit of the
//! node capacity of `enflame.com/gcu` (9.2), each taken whole by one
//! container (100 "MiB" of 100 and 100 cores, as HAMi accounts it),
//! written to the pod as `hami.io/enflame-gcu-devices-to-allocate` and
//! `-allocated` under the vendor word `GCU`. No node lock (9.2).
//!
//! DRS slices (HAMi's `Enflame` backend, 9.1 to 9.6): GCUs registered as
//! JSON under `enflame.com/gcu-drs-capacity` (each GCU's slices, the
//! node's profiles `<n>g.<m>gb`), a container taking one profile of one
//! GCU (`enflame.com/drs-gcu: <slices>`, or `enflame.com/gcu-memory` and
//! `enflame.com/gcu-core` that the smallest profile holding both gives),
//! written to the pod as `hami.io/enflame-vgpu-devices-allocated` under
//! the vendor word `Enflame`, with what Enflame's plugin reads beside it
//! ([`drs_extras`]). No node lock.

use std::collections::BTreeMap;

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, ExtrasInput, NO_RESOURCES,
    NO_SELECTION, NodeLockStyle, OwnDevice, OwnInventory, PodLists, ProfileSpec, RuleEdit,
    RuleInput, RuleResource, SelectionKeys, VENDOR_DEFAULTS, whole_devices,
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

/// The vendor word of DRS lists, and every DRS GCU's type (9.2).
pub const DRS_VENDOR: &str = "Enflame";
/// Node: the DRS GCUs and their profiles (9.2).
pub const DRS_CAPACITY: &str = "enflame.com/gcu-drs-capacity";
/// Pod: what Enflame's plugin reads beside the list (9.3).
pub const GCU_ASSIGNED: &str = "enflame.com/gcu-assigned";
pub const GCU_ASSIGNED_TIME: &str = "enflame.com/gcu-assigned-time";
pub const GCU_ASSIGNED_INDEX: &str = "enflame.com/gcu-assigned-index";
pub const GCU_ASSIGNED_ID: &str = "enflame.com/gcu-assigned-id";
pub const GCU_ASSIGNED_MINOR: &str = "enflame.com/gcu-assigned-minor";
pub const GCU_REQUEST_SIZE: &str = "enflame.com/gcu-request-size";
/// Written without a prefix, as HAMi writes it (9.3).
pub const ASSIGNED_CONTAINERS: &str = "assigned-containers";

/// Enflame GCUs split into DRS slices.
pub static ENFLAME_DRS: DeviceKind = DeviceKind {
    name: "enflame-drs",
    vendor: DRS_VENDOR,
    register_key: DRS_CAPACITY,
    own_register: Some(decode_drs_capacity),
    selection: SelectionKeys {
        use_uuid: "enflame.com/use-gpuuuid",
        nouse_uuid: "enflame.com/nouse-gpuuuid",
        ..NO_SELECTION
    },
    noun: "Enflame DRS GCU",
    pod_lists: PodLists {
        // HAMi writes the allocated list only (9.3).
        to_allocate: "",
        allocated: "hami.io/enflame-vgpu-devices-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: "enflame.com/drs-gcu",
        resource_memory_name: "enflame.com/gcu-memory",
        resource_core_name: "enflame.com/gcu-core",
        ..NO_RESOURCES
    },
    // HAMi's `enflame` section names both backends (9.1): the DRS names
    // under their own keys; the whole GCU's and the legacy shared names are
    // accepted and not read as the DRS kind's.
    section_keys: &[
        ("resourceNameDRSGCU", Some("resourceCountName")),
        ("resourceNameGCUMemory", Some("resourceMemoryName")),
        ("resourceNameGCUCore", Some("resourceCoreName")),
        ("resourceCountName", None),
        ("resourceMemoryName", None),
        ("resourceCoreName", None),
        ("resourceNameGCU", None),
        ("resourceNameVGCU", None),
        ("resourceNameVGCUPercentage", None),
    ],
    slice_profiles: true,
    webhook_rule: Some(drs_webhook),
    node_lock: NodeLockStyle::None,
    bind_extras: Some(drs_extras),
    ..VENDOR_DEFAULTS
};

/// `enflame.com/gcu-drs-capacity` as Enflame's plugin writes it (9.2):
/// `{"devices":[{"index":"0","minor":"0","capacity":6}],
/// "profiles":{"1g.6gb":"0","6g.40gb":"2"}}`. HAMi's reading, and more
/// lenient where Go's decoder would refuse the whole annotation: an index,
/// minor or profile id may be a number.
#[derive(Debug, serde::Deserialize)]
struct DrsCapacity {
    #[serde(default)]
    devices: Vec<DrsDevice>,
    #[serde(default)]
    profiles: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, serde::Deserialize)]
struct DrsDevice {
    #[serde(default)]
    index: serde_json::Value,
    #[serde(default)]
    minor: serde_json::Value,
    #[serde(default)]
    capacity: serde_json::Value,
}

/// A JSON string or number as text (`None` for anything else).
fn text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A profile name's slices and GB: `<n>g.<m>gb`, any case (9.2); 0 for a
/// part that is not a number.
pub fn parse_profile(name: &str) -> (u32, u32) {
    let lower = name.trim().to_lowercase();
    let mut parts = lower.split('.');
    let (Some(size), Some(mem)) = (parts.next(), parts.next()) else {
        return (0, 0);
    };
    let size = size.trim();
    let Ok(size) = size.strip_suffix('g').unwrap_or(size).parse::<u32>() else {
        return (0, 0);
    };
    let mem = mem.trim();
    let mem = mem
        .strip_suffix("gb")
        .unwrap_or(mem)
        .parse::<u32>()
        .unwrap_or(0);
    (size, mem)
}

/// The most slices a register may give one GCU: beyond it the value is
/// garbage, not a device.
pub const MAX_SLICES: u32 = 1024;

/// Reads `enflame.com/gcu-drs-capacity` (9.2): one GCU per entry, named
/// `<node>-enflame-drs-<index>` (the position when the index is not a
/// number), holding `capacity` slices and the largest profile's memory;
/// each profile's cores are its share of the largest profile's slices,
/// rounded up (HAMi's `ceil(size × 100 / maxSlice)`, 9.5). A GCU offers
/// the cores its slices add up to (102 for six slices of 17), so that a
/// GCU holds as many slices as it has, as Enflame's plugin splits it (HAMi
/// counts 100 and refuses the sixth one-slice profile, 9.7).
pub fn decode_drs_capacity(node: &str, text_in: &str) -> Result<OwnInventory, String> {
    let spec: DrsCapacity =
        serde_json::from_str(text_in).map_err(|e| format!("not the DRS capacity JSON: {e}"))?;
    let named: Vec<(String, String, u32, u32)> = spec
        .profiles
        .iter()
        .map(|(name, id)| {
            let (size, gb) = parse_profile(name);
            (name.clone(), text(id).unwrap_or_default(), size, gb)
        })
        .collect();
    let max_slice = named.iter().map(|p| p.2).max().unwrap_or(0);
    if max_slice == 0 {
        return Err("no profile named <slices>g.<GB>gb".to_string());
    }
    if max_slice > MAX_SLICES {
        return Err(format!(
            "a profile of {max_slice} slices: at most {MAX_SLICES}"
        ));
    }
    let max_gb = match named.iter().map(|p| p.3).max().unwrap_or(0) {
        0 => max_slice,
        gb => gb,
    };
    let mib = |gb: u32| {
        gb.checked_mul(1024)
            .filter(|m| i32::try_from(*m).is_ok())
            .ok_or_else(|| format!("a profile of {gb} GB: more memory than a device holds"))
    };
    let device_mem = mib(max_gb)?;
    let share = |size: u32| (size * 100).div_ceil(max_slice);
    let device_cores = share(1).saturating_mul(max_slice).max(100);
    let mut profiles = Vec::new();
    for (name, id, size, gb) in named {
        if size == 0 || gb == 0 {
            continue;
        }
        profiles.push(ProfileSpec {
            name,
            id,
            slices: size,
            mem_mib: mib(gb)?,
            cores: share(size),
        });
    }
    if profiles.is_empty() {
        // HAMi finds no profile to choose (`ModeNotFit` for every pod);
        // devices without one would be taken with no profile at all.
        return Err("no profile named <slices>g.<GB>gb with both numbers".to_string());
    }
    profiles.sort_by(|a, b| (a.slices, a.mem_mib, &a.name).cmp(&(b.slices, b.mem_mib, &b.name)));
    let mut devices: Vec<OwnDevice> = Vec::new();
    for (position, d) in spec.devices.iter().enumerate() {
        let index = text(&d.index)
            .and_then(|t| t.parse::<u32>().ok())
            .unwrap_or(u32::try_from(position).unwrap_or(u32::MAX));
        let capacity = text(&d.capacity)
            .and_then(|t| t.trim().parse::<f64>().ok())
            .filter(|c| c.fract() == 0.0 && *c >= 1.0 && *c <= f64::from(MAX_SLICES))
            .ok_or_else(|| {
                format!(
                    "device {index}: capacity {} is not a number of slices from 1 to \
                     {MAX_SLICES}",
                    d.capacity
                )
            })? as u32;
        if devices.iter().any(|o| o.index == index) {
            return Err(format!("device index {index} given twice"));
        }
        let minor = text(&d.minor)
            .map(|m| m.trim().to_string())
            .filter(|m| !m.is_empty())
            .unwrap_or(index.to_string());
        devices.push(OwnDevice {
            id: format!("{node}-enflame-drs-{index}"),
            index,
            slots: capacity,
            mem_mib: device_mem,
            cores: device_cores,
            device_type: DRS_VENDOR,
            minor,
            numa: 0,
            healthy: true,
            mode: String::new(),
            network: None,
        });
    }
    if devices.is_empty() {
        return Err("no devices".to_string());
    }
    Ok(OwnInventory { devices, profiles })
}

/// The webhook (9.4): a container's slice count, or its memory and cores,
/// is mirrored into its limits (and its requests, where it gives them),
/// so that a container giving only requests is valid. The values were
/// checked when the request was read (`engine::profiles`).
fn drs_webhook(input: &RuleInput<'_>) -> Result<Vec<RuleEdit>, String> {
    if let Some(n) = input.count {
        return Ok(vec![RuleEdit::Limit(RuleResource::Count, n)]);
    }
    let mut edits = Vec::new();
    if let Some(m) = input.memory {
        edits.push(RuleEdit::Limit(RuleResource::Memory, m));
    }
    if let Some(c) = input.cores {
        edits.push(RuleEdit::Limit(RuleResource::Cores, c));
    }
    Ok(edits)
}

/// What Enflame's plugin reads beside the list (9.3): `gcu-assigned`
/// `false`, the time in nanoseconds, `assigned-containers` (each
/// container with devices: `{"allocated":false,"request":<slices>,
/// "profileID","profileName"}`, by name, as Go's encoder orders a map),
/// and the first such container's device index (as `gcu-assigned-index`
/// and `-id`), minor and slices.
pub fn drs_extras(input: &ExtrasInput<'_>) -> Vec<(&'static str, String)> {
    let with_devices: Vec<_> = input
        .containers
        .iter()
        .filter_map(|c| Some((c, c.devices.first()?)))
        .collect();
    let Some((_, first)) = with_devices.first() else {
        return Vec::new();
    };
    let mut assigned: BTreeMap<&str, String> = BTreeMap::new();
    for (c, d) in &with_devices {
        let mut o = format!("{{\"allocated\":false,\"request\":{}", d.slots.max(1));
        if let Some((name, id)) = &d.profile {
            if !id.is_empty() {
                o.push_str(&format!(
                    ",\"profileID\":{}",
                    serde_json::Value::from(id.as_str())
                ));
            }
            if !name.is_empty() {
                o.push_str(&format!(
                    ",\"profileName\":{}",
                    serde_json::Value::from(name.as_str())
                ));
            }
        }
        o.push('}');
        assigned.insert(c.name.as_str(), o);
    }
    let assigned: Vec<String> = assigned
        .iter()
        .map(|(name, o)| format!("{}:{o}", serde_json::Value::from(*name)))
        .collect();
    let mut out = vec![
        (GCU_ASSIGNED, "false".to_string()),
        (GCU_ASSIGNED_TIME, input.now_unix_nanos.to_string()),
        (ASSIGNED_CONTAINERS, format!("{{{}}}", assigned.join(","))),
        (GCU_ASSIGNED_INDEX, first.index.to_string()),
        (GCU_ASSIGNED_ID, first.index.to_string()),
    ];
    if !first.minor.is_empty() {
        out.push((GCU_ASSIGNED_MINOR, first.minor.clone()));
    }
    out.push((GCU_REQUEST_SIZE, first.slots.max(1).to_string()));
    out
}

/// One whole GCU per unit of capacity, `devmem` 100 (9.2).
fn gcus(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    whole_devices(capacity, GCU, 100, VENDOR)
}
