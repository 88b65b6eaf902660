//! A pod's GPUs: what bind writes into HAMi's device-list annotations and what
//! the ledger adds to node usage.

use std::collections::BTreeMap;

use crate::hami::keys::NVIDIA_VENDOR;
use crate::hami::{ContainerDevice, PodDevices};

use super::device::Usage;

/// One GPU granted to one container.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceGrant {
    pub uuid: String,
    pub mem_mib: u64,
    pub cores: u32,
}

/// The GPUs of one pod on one node: one entry per container, init
/// containers first (an empty entry for a container without GPUs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Allocation {
    pub node: String,
    pub containers: Vec<Vec<DeviceGrant>>,
    /// How many of `containers` are init containers.
    pub init_count: usize,
}

impl Allocation {
    /// What the pod takes of each GPU while it exists (hami-compat.md 4.4):
    /// init containers run one at a time, so they count with their peak;
    /// app containers run together, so they add up; the pod holds the larger
    /// of the two, and one slot at least. Sorted by UUID.
    pub fn usage_by_gpu(&self) -> Vec<(&str, Usage)> {
        let mut init: BTreeMap<&str, Usage> = BTreeMap::new();
        let mut app: BTreeMap<&str, Usage> = BTreeMap::new();
        for (i, devices) in self.containers.iter().enumerate() {
            for d in devices {
                let u = Usage {
                    slots: 1,
                    mem_mib: d.mem_mib,
                    cores: d.cores,
                };
                if i < self.init_count {
                    let e = init.entry(&d.uuid).or_default();
                    *e = e.max(&u);
                } else {
                    app.entry(&d.uuid).or_default().add(&u);
                }
            }
        }
        for (uuid, u) in init {
            let e = app.entry(uuid).or_default();
            *e = e.max(&u);
        }
        app.into_iter()
            .map(|(k, mut u)| {
                u.slots = u.slots.max(1);
                (k, u)
            })
            .collect()
    }

    /// HAMi's device list (`hami.io/vgpu-devices-allocated`): every container
    /// has an entry, init containers first, so entry `i` is container `i`.
    pub fn to_pod_devices(&self) -> PodDevices {
        PodDevices {
            containers: self
                .containers
                .iter()
                .map(|devices| {
                    devices
                        .iter()
                        .map(|d| ContainerDevice {
                            uuid: d.uuid.clone(),
                            vendor: NVIDIA_VENDOR.to_string(),
                            // Requests are capped at i32::MAX MiB, so this never saturates
                            // for allocations the engine made.
                            mem_mib: u32::try_from(d.mem_mib).unwrap_or(u32::MAX),
                            cores: d.cores,
                        })
                        .collect()
                })
                .collect(),
        }
    }

    /// Reads HAMi's device list back. `init_count` comes from the pod spec;
    /// devices of other vendors are not gpugate's and are skipped.
    pub fn from_pod_devices(node: &str, devices: &PodDevices, init_count: usize) -> Self {
        Allocation {
            node: node.to_string(),
            containers: devices
                .containers
                .iter()
                .map(|c| {
                    c.iter()
                        .filter(|d| d.vendor == NVIDIA_VENDOR)
                        .map(|d| DeviceGrant {
                            uuid: d.uuid.clone(),
                            mem_mib: u64::from(d.mem_mib),
                            cores: d.cores,
                        })
                        .collect()
                })
                .collect(),
            init_count: init_count.min(devices.containers.len()),
        }
    }

    /// Number of GPU grants over all containers.
    pub fn grant_count(&self) -> usize {
        self.containers.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(uuid: &str, mem: u64, cores: u32) -> DeviceGrant {
        DeviceGrant {
            uuid: uuid.into(),
            mem_mib: mem,
            cores,
        }
    }

    #[test]
    fn init_peak_against_app_sum() {
        // Two init containers (800 MiB each, not at once) and an app of 500:
        // the pod holds 800 on GPU-A.
        let a = Allocation {
            node: "n".into(),
            containers: vec![
                vec![g("GPU-A", 800, 10)],
                vec![g("GPU-A", 800, 20)],
                vec![g("GPU-A", 500, 5), g("GPU-B", 100, 0)],
                vec![g("GPU-A", 200, 5)],
            ],
            init_count: 2,
        };
        let u = a.usage_by_gpu();
        assert_eq!(
            u,
            vec![
                (
                    "GPU-A",
                    Usage {
                        slots: 2,
                        mem_mib: 800,
                        cores: 20
                    }
                ),
                (
                    "GPU-B",
                    Usage {
                        slots: 1,
                        mem_mib: 100,
                        cores: 0
                    }
                ),
            ]
        );
    }

    #[test]
    fn pod_devices_round_trip() {
        let a = Allocation {
            node: "n".into(),
            containers: vec![vec![], vec![g("GPU-A", 1000, 30), g("GPU-B", 1000, 30)]],
            init_count: 0,
        };
        let pd = a.to_pod_devices();
        assert_eq!(Allocation::from_pod_devices("n", &pd, 0), a);
        assert_eq!(a.grant_count(), 2);
    }
}
