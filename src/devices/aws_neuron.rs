//! AWS Neuron devices as HAMi v2.10 schedules them (hami-vendors.md
//! section 10): no register annotation; the devices are read from the
//! node capacity of `aws.amazon.com/neuron` (devices) and
//! `aws.amazon.com/neuroncore` (cores). A container takes whole devices
//! (the count) or NeuronCores (one core of a device, or whole devices for
//! a multiple of two), its cores a bit mask of the device's two cores
//! (`core_masks`); several devices from a window of consecutive idle ones
//! (`Grouping::Windows`). Written to the pod as
//! `hami.io/aws-neuron-devices-allocated` under the vendor word
//! `AWSNeuron`, with the keys AWS's device plugin reads
//! (`AWS_NEURON_IDS`, `NEURON_ALLOC_TIME`, `NEURON_ALLOCATED`,
//! `aws.amazon.com/predicate-node`; 10.3). No node lock (1.8).

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, ExtrasInput, Grouping,
    NO_RESOURCES, NO_SELECTION, NodeLockStyle, PodLists, SelectionKeys, VENDOR_DEFAULTS,
};

/// The vendor word in pod device lists, and every device's type.
pub const VENDOR: &str = "AWSNeuron";
/// Node capacity: devices, and NeuronCores over all of them.
pub const NEURON: &str = "aws.amazon.com/neuron";
pub const NEURONCORE: &str = "aws.amazon.com/neuroncore";
use super::{MASK_CORES as CORES_PER_DEVICE, WHOLE_MASK};
/// Pod: the devices (count) or cores the plugin hands out, comma list.
pub const NEURON_IDS: &str = "AWS_NEURON_IDS";
/// Pod: the cores resource, when `NEURON_IDS` lists cores.
pub const RESOURCE_TYPE: &str = "NEURON_RESOURCE_TYPE";
/// Pod: when the scheduler allocated (Unix nanoseconds).
pub const ALLOC_TIME: &str = "NEURON_ALLOC_TIME";
/// Pod: `"false"` until the plugin has allocated.
pub const ALLOCATED: &str = "NEURON_ALLOCATED";
/// Pod: the node.
pub const PREDICATE_NODE: &str = "aws.amazon.com/predicate-node";

/// AWS Neuron devices.
pub static AWS_NEURON: DeviceKind = DeviceKind {
    name: "awsneuron",
    vendor: VENDOR,
    capacity: Some(&CapacityInventory {
        resources: &[NEURON, NEURONCORE],
        id_word: VENDOR,
        // Inferentia instances' devices form a ring (10.5).
        ring_label: Some(("node.kubernetes.io/instance-type", &["inf", "Inf"])),
        devices: neuron_devices,
    }),
    selection: SelectionKeys {
        use_uuid: "aws.amazon.com/use-neuron-uuid",
        nouse_uuid: "aws.amazon.com/nouse-neuron-uuid",
        ..NO_SELECTION
    },
    noun: "AWS Neuron device",
    pod_lists: PodLists {
        // HAMi writes the allocated list only (10.3).
        to_allocate: "",
        allocated: "hami.io/aws-neuron-devices-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: NEURON,
        resource_core_name: NEURONCORE,
        ..NO_RESOURCES
    },
    grouping: Grouping::Windows,
    core_masks: true,
    node_lock: NodeLockStyle::None,
    bind_extras: Some(neuron_ids),
    ..VENDOR_DEFAULTS
};

/// The devices of a node whose capacity is `[devices, cores]` (10.2): each
/// with two slots (one per core), no memory and the whole mask as cores.
/// HAMi's masks hold two cores, so a node with another number of cores per
/// device registers nothing (HAMi would misplace its cores).
fn neuron_devices(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    let devices = capacity.first().copied().flatten().unwrap_or(0);
    if devices == 0 {
        return Err(format!("no {NEURON} capacity"));
    }
    let cores = capacity.get(1).copied().flatten().unwrap_or(0);
    if cores != devices * CORES_PER_DEVICE {
        return Err(format!(
            "{cores} {NEURONCORE} over {devices} {NEURON}: gpugate places devices of \
             {CORES_PER_DEVICE} NeuronCores (HAMi's core masks hold two)"
        ));
    }
    Ok((0..devices.min(1024))
        .map(|_| CapacityDevice {
            slots: CORES_PER_DEVICE as u32,
            mem_mib: 0,
            cores: WHOLE_MASK,
            device_type: VENDOR,
        })
        .collect())
}

/// What AWS's plugin reads (10.3): the device indexes of containers whose
/// limits give the count, else the core indexes of each mask bit
/// (`2 × index`, `2 × index + 1`, with `NEURON_RESOURCE_TYPE`); the time,
/// `NEURON_ALLOCATED: "false"` and the node. The list runs on across
/// containers.
fn neuron_ids(input: &ExtrasInput<'_>) -> Vec<(&'static str, String)> {
    let mut ids: Vec<String> = Vec::new();
    let mut by_core = false;
    for c in &input.containers {
        for d in &c.devices {
            if c.count_in_limits {
                ids.push(d.index.to_string());
                continue;
            }
            let first = u64::from(d.index) * CORES_PER_DEVICE;
            for (bit, core) in [(1, first), (2, first + 1)] {
                if d.cores & bit != 0 {
                    ids.push(core.to_string());
                    by_core = true;
                }
            }
        }
    }
    if ids.is_empty() {
        return Vec::new();
    }
    let mut out = vec![
        (NEURON_IDS, ids.join(",")),
        (ALLOC_TIME, input.now_unix_nanos.to_string()),
        (ALLOCATED, "false".to_string()),
        (PREDICATE_NODE, input.node.to_string()),
    ];
    if by_core {
        out.push((RESOURCE_TYPE, input.core_resource.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{ExtraDevice, ExtrasContainer};

    #[test]
    fn devices_come_from_capacity_with_two_cores_each() {
        // 10.2: count = capacity of the devices; the whole mask is 3.
        let d = neuron_devices(&[Some(4), Some(8)]).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!((d[0].slots, d[0].cores, d[0].mem_mib), (2, 3, 0));
        assert!(neuron_devices(&[Some(0), Some(8)]).is_err());
        assert!(neuron_devices(&[None, Some(8)]).is_err());
        // inf1 (4 cores a device) and trn2 (8): refused with the reason.
        let e = neuron_devices(&[Some(4), Some(16)]).unwrap_err();
        assert!(e.contains("2 NeuronCores"), "{e}");
    }

    #[test]
    fn ids_are_devices_for_a_count_and_cores_for_cores() {
        let device = |index, cores| ExtraDevice {
            index,
            uuid: format!("n-AWSNeuron-{index}"),
            mem_mib: 0,
            cores,
            slots: 1,
            profile: None,
            minor: String::new(),
        };
        let input = ExtrasInput {
            node: "n",
            core_resource: NEURONCORE,
            now_unix_nanos: 17,
            containers: vec![
                ExtrasContainer::default(),
                ExtrasContainer {
                    name: "a".into(),
                    count_in_limits: true,
                    devices: vec![device(4, 3), device(5, 3)],
                },
                ExtrasContainer {
                    name: "b".into(),
                    count_in_limits: false,
                    devices: vec![device(1, 2)],
                },
            ],
        };
        let out = neuron_ids(&input);
        assert_eq!(
            out,
            [
                (NEURON_IDS, "4,5,3".to_string()),
                (ALLOC_TIME, "17".to_string()),
                (ALLOCATED, "false".to_string()),
                (PREDICATE_NODE, "n".to_string()),
                (RESOURCE_TYPE, NEURONCORE.to_string()),
            ]
        );
        let none = ExtrasInput {
            containers: vec![ExtrasContainer::default()],
            ..input
        };
        assert!(neuron_ids(&none).is_empty());
    }
}
