//! Cambricon MLUs as HAMi v2.10 schedules them (hami-vendors.md section
//! 4): no register annotation; the device plugin advertises the vcore and
//! vmemory resources as node capacity, and the MLUs are read from it (100
//! vcores per MLU; 4.2). Shared by slices (the shared slice-fit loop,
//! 1.11), memory in units of 256 MiB, written to the pod as
//! `hami.io/cambricon-mlu-devices-to-allocate` and `-allocated` under the
//! vendor word `MLU`, with the dynamic-SMLU profile the plugin reads
//! (`CAMBRICON_DSMLU_*`, 4.3), behind Cambricon's own node lock
//! (`cambricon.com/dsmlu.lock`, 4.2), not HAMi's.

use std::time::Duration;

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, ExtrasInput, NO_RESOURCES,
    NO_SELECTION, NodeLockStyle, PodLists, SelectionKeys, VENDOR_DEFAULTS,
};

/// The vendor word in pod device lists, and the type of every MLU.
pub const VENDOR: &str = "MLU";
/// Node capacity: vcores (100 per MLU) and vmemory (256 MiB units).
pub const VCORE: &str = "cambricon.com/mlu.smlu.vcore";
pub const VMEMORY: &str = "cambricon.com/mlu.smlu.vmemory";
/// MiB per vmemory unit (4.1).
pub const MEMORY_UNIT_MIB: u32 = 256;
/// Node: Cambricon's lock, an RFC 3339 time (4.2).
pub const NODE_LOCK: &str = "cambricon.com/dsmlu.lock";
/// Pod: `"false"` until the plugin has set the profile up (4.3).
pub const DSMLU_ASSIGNED: &str = "CAMBRICON_DSMLU_ASSIGNED";
/// Pod: `<index>_<cores>_<memory units>` of the pod's first MLU (4.3).
pub const DSMLU_PROFILE: &str = "CAMBRICON_DSMLU_PROFILE";

/// Cambricon MLUs.
pub static CAMBRICON: DeviceKind = DeviceKind {
    name: "cambricon",
    vendor: VENDOR,
    capacity: Some(&CapacityInventory {
        resources: &[VCORE, VMEMORY],
        id_word: "cambricon-mlu",
        ring_label: None,
        devices: mlus,
    }),
    selection: SelectionKeys {
        use_uuid: "cambricon.com/use-gpuuuid",
        nouse_uuid: "cambricon.com/nouse-gpuuuid",
        ..NO_SELECTION
    },
    noun: "Cambricon MLU",
    pod_lists: PodLists {
        to_allocate: "hami.io/cambricon-mlu-devices-to-allocate",
        allocated: "hami.io/cambricon-mlu-devices-allocated",
    },
    // Every MLU's type is the vendor word, so HAMi pads the list with one
    // entry per container (1.5, the default).
    config: ConfigDefaults {
        resource_count_name: "cambricon.com/vmlu",
        resource_memory_name: VMEMORY,
        resource_core_name: VCORE,
        // A count alone takes its MLUs whole (4.7).
        default_cores: 100,
        memory_factor: MEMORY_UNIT_MIB,
        ..NO_RESOURCES
    },
    node_lock: NodeLockStyle::Own {
        key: NODE_LOCK,
        hold: Duration::from_secs(120),
    },
    bind_extras: Some(dsmlu_profile),
    ..VENDOR_DEFAULTS
};

/// The MLUs of a node whose capacity is `[vcores, vmemory units]` (4.2):
/// one per 100 vcores (a last one for a remainder), each with 100 cores
/// and its share of the memory.
fn mlus(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    let vcores = capacity.first().copied().flatten().unwrap_or(0);
    if vcores == 0 {
        return Err(format!("no {VCORE} capacity"));
    }
    let units = capacity.get(1).copied().flatten().unwrap_or(0);
    let mem_mib = units
        .saturating_mul(u64::from(MEMORY_UNIT_MIB))
        .saturating_mul(100)
        / vcores;
    let mem_mib = u32::try_from(mem_mib)
        .map_err(|_| format!("{VMEMORY} capacity {units} is beyond any MLU"))?;
    let n = vcores.div_ceil(100).min(super::MAX_CAPACITY_DEVICES);
    Ok((0..n)
        .map(|_| CapacityDevice {
            slots: 100,
            mem_mib,
            cores: 100,
            device_type: VENDOR,
        })
        .collect())
}

/// HAMi's profile of the pod's first MLU, `<index>_<cores>_<memory
/// units>`, and `CAMBRICON_DSMLU_ASSIGNED: "false"` (4.3).
fn dsmlu_profile(input: &ExtrasInput<'_>) -> Vec<(&'static str, String)> {
    let first = input.containers.iter().flat_map(|c| &c.devices).next();
    let mut out = vec![(DSMLU_ASSIGNED, "false".to_string())];
    if let Some(d) = first {
        out.push((
            DSMLU_PROFILE,
            format!(
                "{}_{}_{}",
                d.index,
                d.cores,
                d.mem_mib / u64::from(MEMORY_UNIT_MIB)
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlus_come_from_capacity_as_hami_reads_it() {
        // 4.2: `i × 100 < cards`; memory × 256 × 100 / cards.
        let two = mlus(&[Some(200), Some(128)]).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[0].mem_mib, 16384);
        assert_eq!((two[0].slots, two[0].cores), (100, 100));
        assert_eq!(mlus(&[Some(150), Some(0)]).unwrap().len(), 2);
        assert!(mlus(&[Some(0), Some(64)]).unwrap_err().contains(VCORE));
        assert!(mlus(&[None, Some(64)]).is_err());
        assert!(mlus(&[Some(100), Some(u64::MAX)]).is_err());
    }
}
