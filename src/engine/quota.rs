//! Namespace GPU quotas: how much of `limits.nvidia.com/gpumem` and
//! `limits.nvidia.com/gpucores` a pod takes, and whether it still fits.
//!
//! A pod's amount is GPU count x per-GPU amount per container, combined by
//! Kubernetes' pod rule ([`super::lifecycle::pod_peak`]): init containers
//! at their peak (each beside the sidecars started before it), app
//! containers and sidecars added up. A request in percent of a GPU's memory
//! has no MiB value before a GPU is chosen and counts 0 MiB at admission, as
//! in HAMi; its allocation counts in full once it is placed.

use super::allocation::Allocation;
use super::lifecycle::{Amount, pod_peak};
use super::request::{Memory, PodRequest};

/// GPU memory (MiB) and compute (percent of a GPU) counted against quotas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaAmount {
    pub mem_mib: u64,
    pub cores: u64,
}

impl QuotaAmount {
    pub fn is_zero(&self) -> bool {
        self.mem_mib == 0 && self.cores == 0
    }

    pub fn saturating_add(self, other: QuotaAmount) -> QuotaAmount {
        QuotaAmount {
            mem_mib: self.mem_mib.saturating_add(other.mem_mib),
            cores: self.cores.saturating_add(other.cores),
        }
    }

    pub fn saturating_sub(self, other: QuotaAmount) -> QuotaAmount {
        QuotaAmount {
            mem_mib: self.mem_mib.saturating_sub(other.mem_mib),
            cores: self.cores.saturating_sub(other.cores),
        }
    }

    /// What a pod asks for, before placement.
    pub fn of_request(request: &PodRequest) -> QuotaAmount {
        pod_peak(request.containers.iter().map(|c| {
            let amount = c.gpu.map_or(QuotaAmount::default(), |gpu| {
                let count = u64::from(gpu.count);
                QuotaAmount {
                    mem_mib: match gpu.memory {
                        Memory::Mib(m) => m.saturating_mul(count),
                        Memory::Percent(_) => 0,
                    },
                    cores: u64::from(gpu.cores).saturating_mul(count),
                }
            });
            (c.kind, amount)
        }))
    }

    /// What a placed pod holds.
    pub fn of_allocation(allocation: &Allocation) -> QuotaAmount {
        allocation
            .usage_by_gpu()
            .iter()
            .fold(QuotaAmount::default(), |sum, (_, u)| {
                sum.saturating_add(QuotaAmount {
                    mem_mib: u64::from(u.mem_mib),
                    cores: u64::from(u.cores),
                })
            })
    }
}

impl Amount for QuotaAmount {
    fn plus(self, other: Self) -> Self {
        self.saturating_add(other)
    }

    fn larger(self, other: Self) -> Self {
        QuotaAmount {
            mem_mib: self.mem_mib.max(other.mem_mib),
            cores: self.cores.max(other.cores),
        }
    }
}

/// The hard limits of one namespace, the tightest over its ResourceQuotas
/// (Kubernetes enforces every quota of a namespace, so the smallest wins).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    pub mem_mib: Option<u64>,
    pub cores: Option<u64>,
}

impl QuotaLimits {
    pub fn is_empty(&self) -> bool {
        self.mem_mib.is_none() && self.cores.is_none()
    }

    /// The tighter of two sets of limits, key by key.
    pub fn tightest(self, other: QuotaLimits) -> QuotaLimits {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        QuotaLimits {
            mem_mib: min(self.mem_mib, other.mem_mib),
            cores: min(self.cores, other.cores),
        }
    }

    /// The memory limit as requests count it: scaled by `memoryFactor`.
    pub fn memory_limit_mib(&self, memory_factor: u64) -> Option<u64> {
        self.mem_mib.map(|l| l.saturating_mul(memory_factor.max(1)))
    }

    /// Whether `add` still fits beside `used`. The memory limit is in the
    /// units users request and is scaled by `memory_factor` (config
    /// `memoryFactor`), as requests are.
    pub fn check(
        &self,
        used: QuotaAmount,
        add: QuotaAmount,
        memory_factor: u64,
    ) -> Result<(), QuotaExceeded> {
        if let Some(limit) = self.memory_limit_mib(memory_factor)
            && add.mem_mib > 0
            && used.mem_mib.saturating_add(add.mem_mib) > limit
        {
            return Err(QuotaExceeded {
                resource: QuotaResource::Memory,
                used: used.mem_mib,
                requested: add.mem_mib,
                limit,
            });
        }
        if let Some(limit) = self.cores
            && add.cores > 0
            && used.cores.saturating_add(add.cores) > limit
        {
            return Err(QuotaExceeded {
                resource: QuotaResource::Cores,
                used: used.cores,
                requested: add.cores,
                limit,
            });
        }
        Ok(())
    }
}

/// One namespace's quota as a pod is judged against it: the limits, what
/// its pods hold, and `memoryFactor` (which scales the memory limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceQuota {
    pub limits: QuotaLimits,
    pub used: QuotaAmount,
    pub memory_factor: u64,
}

impl NamespaceQuota {
    /// Whether `add` still fits.
    pub fn check(&self, add: QuotaAmount) -> Result<(), QuotaExceeded> {
        self.limits.check(self.used, add, self.memory_factor)
    }

    /// The memory limit in MiB as requests count it (scaled by
    /// `memoryFactor`), when there is one.
    pub fn memory_limit_mib(&self) -> Option<u64> {
        self.limits.memory_limit_mib(self.memory_factor)
    }
}

/// Which quota a pod would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaResource {
    Memory,
    Cores,
}

/// A pod that does not fit its namespace's quota, with the numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{} {requested}{unit} requested, {used}{unit} of {limit}{unit} already used", self.what(), unit = self.unit())]
pub struct QuotaExceeded {
    pub resource: QuotaResource,
    pub used: u64,
    pub requested: u64,
    pub limit: u64,
}

impl QuotaExceeded {
    fn what(&self) -> &'static str {
        match self.resource {
            QuotaResource::Memory => "GPU memory",
            QuotaResource::Cores => "GPU cores",
        }
    }

    fn unit(&self) -> &'static str {
        match self.resource {
            QuotaResource::Memory => " MiB",
            QuotaResource::Cores => "%",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::lifecycle::ContainerKind;
    use crate::engine::request::{ContainerRequest, GpuRequest};
    use crate::engine::{DeviceGrant, Memory};

    fn container(init: bool, count: u32, memory: Memory, cores: u32) -> ContainerRequest {
        kind_container(ContainerKind::of(init, None), count, memory, cores)
    }

    fn kind_container(
        kind: ContainerKind,
        count: u32,
        memory: Memory,
        cores: u32,
    ) -> ContainerRequest {
        ContainerRequest {
            name: "c".into(),
            kind,
            gpu: Some(GpuRequest {
                count,
                memory,
                cores,
            }),
        }
    }

    /// MiB and cores a pod of these containers counts against quota.
    fn counted(containers: Vec<ContainerRequest>) -> (u64, u64) {
        let a = QuotaAmount::of_request(&PodRequest {
            device_kind: Default::default(),
            containers,
        });
        (a.mem_mib, a.cores)
    }

    #[test]
    fn init_containers_count_as_their_maximum_and_apps_as_their_sum() {
        // init: max(9000, 2000) MiB, max(10, 100) cores; app: 7000 MiB, 50 cores.
        let pod = vec![
            container(true, 1, Memory::Mib(9000), 10),
            container(true, 2, Memory::Mib(1000), 50),
            container(false, 2, Memory::Mib(3000), 20),
            container(false, 1, Memory::Mib(1000), 10),
        ];
        assert_eq!(counted(pod), (9000, 100));
    }

    #[test]
    fn sidecars_count_beside_the_app_containers() {
        use ContainerKind::{App, Init, Sidecar};
        let c = |kind, mib, cores| kind_container(kind, 1, Memory::Mib(mib), cores);
        // A 10,000 MiB sidecar and a 10,000 MiB app container: 20,000.
        assert_eq!(
            counted(vec![c(Sidecar, 10_000, 0), c(App, 10_000, 0)]).0,
            20_000
        );
        // An init container after a sidecar counts with it.
        let pod = vec![c(Sidecar, 4_000, 10), c(Init, 9_000, 50), c(App, 1_000, 10)];
        assert_eq!(counted(pod), (13_000, 60));
    }

    #[test]
    fn percent_memory_counts_zero_before_placement() {
        let request = PodRequest {
            device_kind: Default::default(),
            containers: vec![container(false, 2, Memory::Percent(50), 30)],
        };
        assert_eq!(
            QuotaAmount::of_request(&request),
            QuotaAmount {
                mem_mib: 0,
                cores: 60
            }
        );
    }

    #[test]
    fn allocations_count_their_collapsed_usage() {
        let grant = |uuid: &str, mem_mib, cores| DeviceGrant {
            uuid: uuid.into(),
            kind: crate::devices::KindId::NVIDIA,
            mem_mib,
            cores,
            slots: 1,
            mig: None,
        };
        let a = Allocation {
            node: "n".into(),
            containers: vec![
                vec![grant("g0", 8000, 50)],
                vec![grant("g0", 2000, 10), grant("g1", 2000, 10)],
            ],
            kinds: vec![ContainerKind::Init],
            numa: None,
        };
        // g0: max(init 8000/50, app 2000/10); g1: 2000/10.
        assert_eq!(
            QuotaAmount::of_allocation(&a),
            QuotaAmount {
                mem_mib: 10000,
                cores: 60
            }
        );
    }

    #[test]
    fn check_names_the_exceeded_resource_with_numbers() {
        let limits = QuotaLimits {
            mem_mib: Some(10000),
            cores: Some(100),
        };
        let used = QuotaAmount {
            mem_mib: 8000,
            cores: 50,
        };
        let ok = QuotaAmount {
            mem_mib: 2000,
            cores: 50,
        };
        assert_eq!(limits.check(used, ok, 1), Ok(()));
        let e = limits
            .check(
                used,
                QuotaAmount {
                    mem_mib: 2001,
                    cores: 0,
                },
                1,
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "GPU memory 2001 MiB requested, 8000 MiB of 10000 MiB already used"
        );
        let e = limits
            .check(
                used,
                QuotaAmount {
                    mem_mib: 0,
                    cores: 51,
                },
                1,
            )
            .unwrap_err();
        assert_eq!(e.resource, QuotaResource::Cores);
        // memoryFactor scales the limit as it scales requests.
        assert_eq!(
            limits.check(
                used,
                QuotaAmount {
                    mem_mib: 12000,
                    cores: 0
                },
                2
            ),
            Ok(())
        );
    }

    #[test]
    fn a_zero_limit_blocks_every_request_but_not_an_empty_one() {
        let limits = QuotaLimits {
            mem_mib: Some(0),
            cores: Some(0),
        };
        let one = QuotaAmount {
            mem_mib: 1,
            cores: 0,
        };
        assert!(limits.check(QuotaAmount::default(), one, 1).is_err());
        assert_eq!(
            limits.check(QuotaAmount::default(), QuotaAmount::default(), 1),
            Ok(())
        );
    }

    #[test]
    fn the_tightest_limit_of_several_quotas_wins() {
        let a = QuotaLimits {
            mem_mib: Some(100),
            cores: None,
        };
        let b = QuotaLimits {
            mem_mib: Some(50),
            cores: Some(30),
        };
        assert_eq!(
            a.tightest(b),
            QuotaLimits {
                mem_mib: Some(50),
                cores: Some(30)
            }
        );
    }
}
