//! A pod's GPUs: what bind writes into HAMi's device-list annotations and what
//! the ledger adds to node usage.

use std::collections::BTreeSet;

use crate::devices::{self, KindId};
use crate::hami::{ContainerDevice, PodDevices};

use super::device::{Gpu, MigInstance, Usage, slice_mask};
use super::lifecycle::{ContainerKind, pod_peak};
use super::numa::NumaGrant;

/// One GPU granted to one container.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceGrant {
    pub uuid: String,
    /// The kind of device (its vendor word in HAMi's device lists).
    pub kind: KindId,
    pub mem_mib: u64,
    pub cores: u32,
    /// Shares of the GPU's split count taken (HAMi master's fifth
    /// device-list field; 1 for every grant gpugate makes).
    pub slots: u32,
    /// A pod's share that cannot be read (see [`Allocation::unreadable`]):
    /// it blocks the GPU.
    pub unreadable: bool,
    /// The device's registered type, for a kind whose lists carry it as
    /// the vendor word (`DeviceKind::vendor_from_type`: AMD's product
    /// names, hami-vendors.md 11.2); `None` for the kind's own word.
    pub device_type: Option<Box<str>>,
    /// On a MIG GPU, the instance granted (HAMi's
    /// `hami.io/vgpu-mig-allocations` entry).
    pub mig: Option<MigInstance>,
}

impl DeviceGrant {
    /// What the grant takes of its GPU: its slots (one at least), its
    /// memory and cores, and a MIG instance's slices.
    /// An instance whose placement no GPU has (past 16 slices, or empty)
    /// is inconsistent wherever it is: its GPU takes no new pod.
    pub fn usage(&self) -> Usage {
        let mask = self.mig.as_ref().map(|m| slice_mask(&m.placement));
        Usage {
            slots: self.slots.max(1),
            mem_mib: u32::try_from(self.mem_mib).unwrap_or(u32::MAX),
            cores: self.cores,
            slices: mask.flatten().unwrap_or(0),
            unreserved: u8::from(mask == Some(None)),
            unreadable: u8::from(self.unreadable),
        }
    }
}

/// How a grant's MIG instance disagrees with its GPU, in what HAMi v2.10
/// marks a device unhealthy for; the GPU then takes no new pod (what the
/// grant counts there: `Node::add_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigMismatch {
    /// A share of a MIG GPU without its instance.
    NoInstance,
    /// An instance on a GPU that is not in MIG mode.
    NotMigMode,
    /// An instance whose placement no GPU has (past 16 slices, or empty).
    NoSuchPlacement,
}

impl DeviceGrant {
    /// Its entry in HAMi's device list (`uuid,vendor,mem,cores`).
    pub fn to_container_device(&self) -> ContainerDevice {
        ContainerDevice {
            uuid: self.uuid.clone(),
            vendor: match &self.device_type {
                Some(t) => t.to_string(),
                None => self.kind.kind().vendor.to_string(),
            },
            // Requests are capped at i32::MAX MiB, so this never saturates
            // for allocations the engine made.
            mem_mib: u32::try_from(self.mem_mib).unwrap_or(u32::MAX),
            cores: self.cores,
            slots: self.slots,
        }
    }

    /// How the grant's MIG instance disagrees with `gpu`, its GPU.
    pub fn mig_mismatch(&self, gpu: &Gpu) -> Option<MigMismatch> {
        match (gpu.is_mig(), &self.mig) {
            (true, None) => Some(MigMismatch::NoInstance),
            (false, Some(_)) => Some(MigMismatch::NotMigMode),
            (true, Some(m)) if slice_mask(&m.placement).is_none() => {
                Some(MigMismatch::NoSuchPlacement)
            }
            _ => None,
        }
    }
}

/// The GPUs of one pod on one node: one entry per container, init
/// containers (sidecars among them) first (an empty entry for a container
/// without GPUs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Allocation {
    pub node: String,
    pub containers: Vec<Vec<DeviceGrant>>,
    /// The kind of each entry of `containers`; entries beyond its end are
    /// app containers.
    pub kinds: Vec<ContainerKind>,
    /// The NUMA zones of an aligned pod (see [`super::align`]): what it
    /// takes of each zone counts against the zone until the node's
    /// NodeResourceTopology object shows it.
    pub numa: Option<NumaGrant>,
    /// The pod's class on the devices of a kind with tenancy rules
    /// (`super::tenancy`); counted on each such device it holds.
    pub tenancy: super::tenancy::Tenancy,
}

impl Allocation {
    /// The kind of container `i`.
    pub fn kind(&self, i: usize) -> ContainerKind {
        self.kinds.get(i).copied().unwrap_or_default()
    }

    /// The kinds of the devices it holds, each once, in [`KindId`] order.
    pub fn kinds_held(&self) -> BTreeSet<KindId> {
        self.containers.iter().flatten().map(|d| d.kind).collect()
    }

    /// The GPUs it names (each once, in order).
    pub fn gpu_uuids(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for g in self.containers.iter().flatten() {
            if !out.contains(&g.uuid) {
                out.push(g.uuid.clone());
            }
        }
        out
    }

    /// What the pod takes of each GPU while it exists: per GPU, Kubernetes'
    /// pod rule ([`pod_peak`]) over what each container takes of it (init
    /// containers at their peak, each beside the sidecars started before
    /// it; app containers and sidecars added up), and one slot at least.
    /// Without sidecars this is HAMi's init/app collapse (hami-compat.md
    /// 4.4). Sorted by UUID.
    pub fn usage_by_gpu(&self) -> Vec<(&str, Usage)> {
        self.usage_with(None)
    }

    /// [`Self::usage_by_gpu`] on `node`: on a node whose devices split
    /// into profiles, a grant HAMi v2.10 wrote (four fields: no slices)
    /// counts its profile's slices, found by its memory and cores
    /// (hami-vendors.md 9.7), grant by grant.
    pub fn usage_on(&self, node: &super::device::Node) -> Vec<(&str, Usage)> {
        self.usage_with(node.has_profiles().then(|| node.profiles()))
    }

    fn usage_with(&self, profiles: Option<&super::profiles::NodeProfiles>) -> Vec<(&str, Usage)> {
        let uuids: BTreeSet<&str> = self
            .containers
            .iter()
            .flatten()
            .map(|d| d.uuid.as_str())
            .collect();
        uuids
            .into_iter()
            .map(|uuid| {
                let per_container = self.containers.iter().enumerate().map(|(i, devices)| {
                    let on_this_gpu = devices.iter().filter(|d| d.uuid == uuid).fold(
                        Usage::default(),
                        |mut sum, d| {
                            let mut u = d.usage();
                            if let Some(p) = profiles.filter(|_| u.slots == 1)
                                && d.kind.kind().slice_profiles
                                && let Some(p) = p.taken(u.mem_mib, u.cores)
                            {
                                u.slots = p.slices;
                            }
                            sum.add(&u);
                            sum
                        },
                    );
                    (self.kind(i), on_this_gpu)
                });
                let mut u = pod_peak(per_container);
                u.slots = u.slots.max(1);
                (uuid, u)
            })
            .collect()
    }

    /// HAMi's device list of every grant, whatever its kind: every
    /// container has an entry, init containers first, so entry `i` is
    /// container `i`. What bind writes is [`Allocation::device_lists`].
    pub fn to_pod_devices(&self) -> PodDevices {
        PodDevices {
            containers: self
                .containers
                .iter()
                .map(|devices| {
                    devices
                        .iter()
                        .map(DeviceGrant::to_container_device)
                        .collect()
                })
                .collect(),
        }
    }

    /// HAMi's device lists of the allocation: one per kind of device it
    /// holds, in the order of [`devices::KINDS`], each with the entries
    /// its kind's device plugin reads ([`devices::Entries`]). An
    /// allocation of no device gives the first kind's list, one empty
    /// entry per container.
    pub fn device_lists(&self) -> Vec<(KindId, PodDevices)> {
        let held = self.kinds_held();
        if held.is_empty() {
            return vec![(KindId::default(), self.to_pod_devices())];
        }
        held.into_iter()
            .map(|kind| {
                let per_container = self.containers.iter().map(|devices| {
                    devices
                        .iter()
                        .filter(|d| d.kind == kind)
                        .map(DeviceGrant::to_container_device)
                        .collect::<Vec<_>>()
                });
                let containers = match kind.kind().entries {
                    devices::Entries::EveryContainer => per_container.collect(),
                    devices::Entries::AskingContainers => {
                        per_container.filter(|c| !c.is_empty()).collect()
                    }
                };
                (kind, PodDevices { containers })
            })
            .collect()
    }

    /// The allocation as its device lists say it, which is what the ledger
    /// reads back from the pod's annotations: itself when every list has
    /// an entry per container; otherwise (a kind whose lists name the
    /// asking containers only) every entry as an app container, as
    /// [`Allocation::from_device_lists`] reads it.
    pub fn as_written(self) -> Allocation {
        let lists = self.device_lists();
        if lists
            .iter()
            .all(|(_, l)| l.containers.len() == self.containers.len())
        {
            return self;
        }
        let lists: Vec<&PodDevices> = lists.iter().map(|(_, l)| l).collect();
        let mut out = Allocation::from_device_lists(&self.node, &lists, &[]);
        out.numa = self.numa;
        out.tenancy = self.tenancy;
        out
    }

    /// Whether `read`, an allocation read back from a pod's annotations, is
    /// this one as its device lists write it ([`Allocation::as_written`]):
    /// the ledger then keeps this one, which knows each device's container.
    pub fn written_as(&self, read: &Allocation) -> bool {
        self == read || self.clone().as_written() == *read
    }

    /// Reads a pod's device lists back ([`Allocation::device_lists`]):
    /// `containers` is the pod's containers' kinds, in order. A list with
    /// an entry per container gives each container its devices; a list
    /// with fewer (HAMi's entries for the asking containers only) cannot
    /// say which entry is an init container, so then every entry counts
    /// as an app container: their sum is never less than the real usage,
    /// so nothing is over-committed. Devices of vendors no kind knows are
    /// not gpugate's and are skipped.
    pub fn from_device_lists(
        node: &str,
        lists: &[&PodDevices],
        containers: &[ContainerKind],
    ) -> Self {
        let indexed = lists.iter().all(|l| l.containers.len() == containers.len());
        if let [only] = lists {
            let kinds = if indexed { containers } else { &[] };
            return Self::from_pod_devices(node, only, kinds);
        }
        let mut out = Self::from_pod_devices(node, &PodDevices::default(), &[]);
        if indexed {
            out.containers = vec![Vec::new(); containers.len()];
            out.kinds = containers.to_vec();
        }
        for list in lists {
            let read = Self::from_pod_devices(node, list, &[]);
            if indexed {
                for (mine, theirs) in out.containers.iter_mut().zip(read.containers) {
                    mine.extend(theirs);
                }
            } else {
                out.containers.extend(read.containers);
            }
        }
        out
    }

    /// Reads HAMi's device list back. `kinds` comes from the pod spec;
    /// devices of vendors no device kind knows are not gpugate's and are
    /// skipped.
    pub fn from_pod_devices(node: &str, devices: &PodDevices, kinds: &[ContainerKind]) -> Self {
        Allocation {
            node: node.to_string(),
            containers: devices
                .containers
                .iter()
                .map(|c| {
                    c.iter()
                        .filter_map(|d| Some((d, devices::by_vendor(&d.vendor)?)))
                        .map(|(d, kind)| DeviceGrant {
                            uuid: d.uuid.clone(),
                            kind,
                            mem_mib: u64::from(d.mem_mib),
                            cores: d.cores,
                            slots: d.slots,
                            unreadable: false,
                            device_type: (d.vendor != kind.kind().vendor)
                                .then(|| d.vendor.as_str().into()),
                            mig: None,
                        })
                        .collect()
                })
                .collect(),
            kinds: kinds
                .iter()
                .copied()
                .take(devices.containers.len())
                .collect(),
            numa: None,
            tenancy: Default::default(),
        }
    }

    /// What a pod whose allocation annotations cannot be read holds on
    /// `node`, as far as it is known: a share of each GPU of the node that
    /// the annotations name (`uuids`), or of every GPU of the node when they
    /// name none of its GPUs. Each share blocks its GPU: fail closed, where
    /// HAMi frees the GPU.
    pub fn unreadable(node: &super::device::Node, uuids: &[String]) -> Allocation {
        let named: Vec<&super::device::Gpu> = node
            .gpus
            .iter()
            .filter(|g| uuids.contains(&g.uuid))
            .collect();
        let gpus = if named.is_empty() {
            node.gpus.iter().collect()
        } else {
            named
        };
        Allocation {
            node: node.name.clone(),
            containers: vec![
                gpus.into_iter()
                    .map(|g| DeviceGrant {
                        uuid: g.uuid.clone(),
                        kind: g.kind,
                        mem_mib: 0,
                        cores: 0,
                        slots: 0,
                        unreadable: true,
                        device_type: None,
                        mig: None,
                    })
                    .collect(),
            ],
            kinds: Vec::new(),
            numa: None,
            tenancy: Default::default(),
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
            kind: KindId::NVIDIA,
            mem_mib: mem,
            cores,
            slots: 1,
            unreadable: false,
            device_type: None,
            mig: None,
        }
    }

    #[test]
    fn as_written_keeps_the_pods_class() {
        // A kind listed for its asking containers only (Hygon, 1.5) makes
        // the written form differ; the pod's class must survive it, or the
        // ledger re-applies the pod on every update.
        let dcu = DeviceGrant {
            kind: KindId::HYGON,
            ..g("DCU-a", 1000, 30)
        };
        let a = Allocation {
            node: "n".into(),
            containers: vec![vec![], vec![dcu]],
            kinds: vec![],
            numa: None,
            tenancy: super::super::tenancy::Tenancy {
                class: super::super::tenancy::AppClass::Online,
                policy: 0,
            },
        };
        let written = a.clone().as_written();
        assert_ne!(written.containers, a.containers);
        assert_eq!(written.tenancy, a.tenancy);
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
            kinds: vec![ContainerKind::Init, ContainerKind::Init],
            numa: None,
            tenancy: Default::default(),
        };
        let u = a.usage_by_gpu();
        assert_eq!(
            u,
            vec![
                (
                    "GPU-A",
                    Usage {
                        slices: 0,
                        unreserved: 0,
                        unreadable: 0,
                        slots: 2,
                        mem_mib: 800,
                        cores: 20
                    }
                ),
                (
                    "GPU-B",
                    Usage {
                        slices: 0,
                        unreserved: 0,
                        unreadable: 0,
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
            kinds: vec![],
            numa: None,
            tenancy: Default::default(),
        };
        let pd = a.to_pod_devices();
        assert_eq!(Allocation::from_pod_devices("n", &pd, &[]), a);
        assert_eq!(a.grant_count(), 2);
    }

    #[test]
    fn a_sidecar_adds_to_the_app_containers() {
        use ContainerKind::{App, Init, Sidecar};
        // What containers of these kinds, each on GPU-A with (MiB, cores),
        // hold of it together.
        let on_gpu_a = |containers: &[(ContainerKind, u64, u32)]| {
            let a = Allocation {
                node: "n".into(),
                containers: containers
                    .iter()
                    .map(|(_, mem, cores)| vec![g("GPU-A", *mem, *cores)])
                    .collect(),
                kinds: containers.iter().map(|(kind, _, _)| *kind).collect(),
                numa: None,
                tenancy: Default::default(),
            };
            let usage = a.usage_by_gpu();
            assert_eq!(usage.len(), 1);
            assert_eq!(usage[0].0, "GPU-A");
            let u = usage[0].1;
            (u.slots, u.mem_mib, u.cores)
        };
        // The pod: a 10,000 MiB sidecar and a 10,000 MiB app
        // container on one GPU hold 20,000 MiB and two slots, not 10,000.
        assert_eq!(
            on_gpu_a(&[(Sidecar, 10_000, 0), (App, 10_000, 0)]),
            (2, 20_000, 0)
        );
        // An init container after the sidecar runs beside it.
        let with_init = [(Sidecar, 3_000, 10), (Init, 9_000, 50), (App, 1_000, 5)];
        assert_eq!(on_gpu_a(&with_init), (2, 12_000, 60));
    }
}
