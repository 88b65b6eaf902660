//! Moore Threads GPUs as HAMi v2.10 schedules them (hami-vendors.md
//! section 7): no register annotation; the GPUs are read from the node
//! capacity of `mthreads.com/sgpu-core` (16 per GPU) and
//! `mthreads.com/sgpu-memory` (units of 512 MiB). A container's memory and
//! cores are its total, split evenly over its GPUs (`split_over_count`);
//! every container of a pod takes the same GPUs (`same_devices`: the
//! plugin hands each the last container's `mthreads.com/gpu-index`).
//! Written to the pod as `hami.io/mthreads-vgpu-devices-allocated` alone,
//! under the vendor word `Mthreads`, with `mthreads.com/gpu-index`,
//! `predicate-node` and `predicate-time`. No node lock (1.8). HAMi's
//! webhook makes several GPUs whole and checks a single GPU's memory
//! against the plugin's sizes (7.4).

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, ExtrasInput,
    MAX_CAPACITY_DEVICES, NO_RESOURCES, NO_SELECTION, NodeLockStyle, PodLists, RuleEdit, RuleInput,
    RuleResource, SelectionKeys, VENDOR_DEFAULTS,
};

/// The vendor word in pod device lists, and every GPU's type.
pub const VENDOR: &str = "Mthreads";
/// Node capacity: cores (16 per GPU) and memory units.
pub const SGPU_CORE: &str = "mthreads.com/sgpu-core";
pub const SGPU_MEMORY: &str = "mthreads.com/sgpu-memory";
/// Cores and memory units of one whole GPU (7.1).
pub const CORES_PER_GPU: u64 = 16;
pub const UNITS_PER_GPU: u64 = 96;
/// MiB per memory unit (7.1).
pub const MEMORY_UNIT_MIB: u32 = 512;
/// The memory sizes the plugin makes of one GPU, in units (7.1).
pub const LEGAL_UNITS: [u64; 7] = [2, 4, 8, 16, 32, 64, 96];
/// Pod: the indexes of the last container's GPUs (7.3).
pub const GPU_INDEX: &str = "mthreads.com/gpu-index";
/// Pod: when the scheduler allocated (Unix nanoseconds), and the node.
pub const PREDICATE_TIME: &str = "mthreads.com/predicate-time";
pub const PREDICATE_NODE: &str = "mthreads.com/predicate-node";
/// Pod: the GPUs of a multi-GPU container, written by the webhook (7.4).
pub const REQUEST_GPU_NUM: &str = "mthreads.com/request-gpu-num";

/// Moore Threads GPUs.
pub static MTHREADS: DeviceKind = DeviceKind {
    name: "mthreads",
    vendor: VENDOR,
    capacity: Some(&CapacityInventory {
        resources: &[SGPU_CORE, SGPU_MEMORY],
        id_word: "mthreads",
        ring_label: None,
        devices: gpus,
    }),
    selection: SelectionKeys {
        // `.ai`, not `.com` (7.3).
        use_uuid: "mthreads.ai/use-gpuuuid",
        nouse_uuid: "mthreads.ai/nouse-gpuuuid",
        ..NO_SELECTION
    },
    noun: "Mthreads GPU",
    pod_lists: PodLists {
        // HAMi registers a to-allocate key but never writes it (7.3).
        to_allocate: "",
        allocated: "hami.io/mthreads-vgpu-devices-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: "mthreads.com/vgpu",
        resource_memory_name: SGPU_MEMORY,
        resource_core_name: SGPU_CORE,
        memory_factor: MEMORY_UNIT_MIB,
        ..NO_RESOURCES
    },
    split_over_count: true,
    same_devices: true,
    webhook_rule: Some(whole_or_legal_size),
    node_lock: NodeLockStyle::None,
    bind_extras: Some(gpu_index),
    ..VENDOR_DEFAULTS
};

/// The GPUs of a node whose capacity is `[cores, memory units]` (7.2):
/// one per 16 cores (a last one for a remainder), 100 slots, 16 cores,
/// `units × 512 × 16 / cores` MiB each.
fn gpus(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    let cores = capacity.first().copied().flatten().unwrap_or(0);
    if cores == 0 {
        return Err(format!("no {SGPU_CORE} capacity"));
    }
    let n = cores.div_ceil(CORES_PER_GPU);
    if n > MAX_CAPACITY_DEVICES {
        return Err(format!(
            "{SGPU_CORE} capacity {cores} is more GPUs than a node holds"
        ));
    }
    let units = capacity.get(1).copied().flatten().unwrap_or(0);
    let mem_mib = units
        .saturating_mul(u64::from(MEMORY_UNIT_MIB))
        .saturating_mul(CORES_PER_GPU)
        / cores;
    let mem_mib = u32::try_from(mem_mib)
        .map_err(|_| format!("{SGPU_MEMORY} capacity {units} is beyond any GPU"))?;
    Ok((0..n)
        .map(|_| CapacityDevice {
            slots: 100,
            mem_mib,
            cores: CORES_PER_GPU as u32,
            device_type: VENDOR,
        })
        .collect())
}

/// HAMi's webhook (7.4): the count must be above 0; several GPUs are
/// whole (`16 × count` cores, `96 × count` units, and
/// `mthreads.com/request-gpu-num`); one GPU without memory is whole, and
/// one with memory must be a size the plugin makes.
fn whole_or_legal_size(input: &RuleInput<'_>) -> Result<Vec<RuleEdit>, String> {
    let Some(count) = input.count else {
        return Ok(Vec::new());
    };
    match (count, input.memory) {
        (0, _) => Err("asks for 0 Mthreads GPUs: allowed at least 1".to_string()),
        (1, Some(units)) if !LEGAL_UNITS.contains(&units) => Err(format!(
            "sGPU memory request value is invalid, valid values are {LEGAL_UNITS:?} (units of \
             512 MiB; {units} given)"
        )),
        (1, Some(_)) => Ok(Vec::new()),
        (1, None) => Ok(vec![
            RuleEdit::Limit(RuleResource::Cores, CORES_PER_GPU),
            RuleEdit::Limit(RuleResource::Memory, UNITS_PER_GPU),
        ]),
        (n, _) => Ok(vec![
            RuleEdit::Limit(RuleResource::Cores, CORES_PER_GPU.saturating_mul(n)),
            RuleEdit::Limit(RuleResource::Memory, UNITS_PER_GPU.saturating_mul(n)),
            RuleEdit::PodAnnotation(REQUEST_GPU_NUM, n.to_string()),
        ]),
    }
}

/// `mthreads.com/gpu-index` (the last container's GPU indexes), the node
/// and the time, as HAMi writes them (7.3).
fn gpu_index(input: &ExtrasInput<'_>) -> Vec<(&'static str, String)> {
    let mut out = vec![
        (PREDICATE_TIME, input.now_unix_nanos.to_string()),
        (PREDICATE_NODE, input.node.to_string()),
    ];
    out.extend(input.last_indexes().map(|idx| (GPU_INDEX, idx)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_come_from_capacity_as_hami_reads_them() {
        // 7.2: devices while i × 16 < cores; units × 512 × 16 / cores MiB.
        let two = gpus(&[Some(32), Some(192)]).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(
            (two[0].slots, two[0].mem_mib, two[0].cores),
            (100, 49152, 16)
        );
        assert_eq!(gpus(&[Some(20), Some(0)]).unwrap().len(), 2);
        assert!(gpus(&[Some(0), Some(96)]).is_err());
        assert!(gpus(&[None, Some(96)]).is_err());
        assert!(gpus(&[Some(u64::MAX), Some(1)]).is_err());
    }

    #[test]
    fn the_webhook_makes_several_gpus_whole_and_checks_one_gpus_size() {
        let input = |count, memory| RuleInput {
            container: "main",
            pod_annotation: &|_| None,
            count,
            count_in_limits: count,
            memory,
            cores: None,
        };
        assert_eq!(
            whole_or_legal_size(&input(Some(2), Some(8))).unwrap(),
            [
                RuleEdit::Limit(RuleResource::Cores, 32),
                RuleEdit::Limit(RuleResource::Memory, 192),
                RuleEdit::PodAnnotation(REQUEST_GPU_NUM, "2".into())
            ]
        );
        assert_eq!(
            whole_or_legal_size(&input(Some(1), None)).unwrap(),
            [
                RuleEdit::Limit(RuleResource::Cores, 16),
                RuleEdit::Limit(RuleResource::Memory, 96)
            ]
        );
        assert!(
            whole_or_legal_size(&input(Some(1), Some(8)))
                .unwrap()
                .is_empty()
        );
        let e = whole_or_legal_size(&input(Some(1), Some(5))).unwrap_err();
        assert!(
            e.contains("valid values are [2, 4, 8, 16, 32, 64, 96]"),
            "{e}"
        );
        assert!(whole_or_legal_size(&input(Some(0), None)).is_err());
        assert!(whole_or_legal_size(&input(None, None)).unwrap().is_empty());
    }
}
