//! A container's GPU request, read from its resources (hami-compat.md 5.4.4)
//! with the defaults the mutating webhook injects (2.3).
//!
//! Unlike HAMi, a value that cannot be honoured is an error naming the
//! container and the resource: never clamped, never silently dropped.

use crate::devices::KindId;

use super::lifecycle::ContainerKind;
use super::quantity::parse_whole;
pub use super::resources::DeviceConfig;

/// Largest MiB value HAMi's device plugin can parse (it reads int32).
pub const MAX_MEM_MIB: u64 = i32::MAX as u64;

/// Memory per GPU: MiB, or a percentage of each GPU's memory resolved
/// against the GPU it lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Memory {
    Mib(u64),
    Percent(u32),
    /// Slices of one device split into profiles the node registers
    /// (Enflame DRS, [`super::profiles`]): no memory until resolved on a
    /// node.
    Slices(u32),
}

/// What one container asks of each of its GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuRequest {
    /// Number of GPUs (vGPUs), each on a different physical GPU.
    pub count: u32,
    pub memory: Memory,
    /// Percent of one GPU's compute; 100 on a 100-core GPU is exclusive.
    pub cores: u32,
}

impl GpuRequest {
    /// MiB this request takes on a GPU with `gpu_mem_mib` of memory.
    pub fn mem_on(&self, gpu_mem_mib: u64) -> u64 {
        match self.memory {
            Memory::Mib(m) => m,
            Memory::Percent(p) => gpu_mem_mib * u64::from(p) / 100,
            Memory::Slices(_) => 0,
        }
    }
}

/// One container (init, sidecar or app) and its GPU request, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRequest {
    pub name: String,
    pub kind: ContainerKind,
    pub gpu: Option<GpuRequest>,
}

/// All containers of a pod, init containers (sidecars among them) first, in
/// the order of the spec (the order of HAMi's device lists).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRequest {
    pub containers: Vec<ContainerRequest>,
    /// The kind of device asked for (the config section whose resource
    /// names the containers use): the kind whose selection annotations
    /// apply and whose devices the pod may take.
    pub device_kind: KindId,
    /// The requests for the other kinds the pod asks for, each read with
    /// its kind's section (containers as here, with only that kind's
    /// devices): a pod may ask for an NVIDIA GPU and an Ascend NPU, and
    /// takes both on one node (hami-vendors.md 1.3). Empty for most pods.
    pub also: Vec<PodRequest>,
}

impl PodRequest {
    /// Whether any container asks for a GPU.
    pub fn has_gpus(&self) -> bool {
        self.containers.iter().any(|c| c.gpu.is_some())
    }

    /// The kinds of device it asks for (none when it asks for none).
    pub fn device_kinds(&self) -> Vec<KindId> {
        let mut out = Vec::new();
        if self.has_gpus() {
            out.push(self.device_kind);
        }
        out.extend(
            self.also
                .iter()
                .filter(|r| r.has_gpus())
                .map(|r| r.device_kind),
        );
        out
    }

    /// Each container's kind, in order.
    pub fn kinds(&self) -> Vec<ContainerKind> {
        self.containers.iter().map(|c| c.kind).collect()
    }

    /// The most GPUs any single container needs at once on one node.
    pub fn max_container_gpus(&self) -> u32 {
        self.containers
            .iter()
            .filter_map(|c| c.gpu.map(|g| g.count))
            .max()
            .unwrap_or(0)
    }

    /// Reads init containers, then app containers, from any view of them,
    /// as `cfg`'s kind. `others` are the sections of the other kinds
    /// gpugate places (read on their own, `Config::read_request`); a
    /// resource of a kind gpugate does not place refuses the pod.
    pub fn from_containers<'c, C: ContainerSpec + 'c>(
        init: impl IntoIterator<Item = &'c C>,
        app: impl IntoIterator<Item = &'c C>,
        cfg: &DeviceConfig,
        others: &[&DeviceConfig],
    ) -> Result<Self, RequestError> {
        let init = init
            .into_iter()
            .map(|c| (c, ContainerKind::of(true, c.restart_policy())));
        let app = app.into_iter().map(|c| (c, ContainerKind::App));
        let mut not_placed: Option<RequestError> = None;
        let containers = init
            .chain(app)
            .map(|(c, kind)| {
                if not_placed.is_none() {
                    not_placed = not_placed_in(c, cfg, others);
                }
                Ok(ContainerRequest {
                    name: c.name().to_string(),
                    kind,
                    gpu: ContainerResources::read(c, cfg)?.resolve(cfg)?,
                })
            })
            .collect::<Result<Vec<_>, RequestError>>()?;
        let request = PodRequest {
            containers,
            device_kind: cfg.kind,
            also: Vec::new(),
        };
        // A pod gpugate places must not lose part of its request: one that
        // also asks for a kind gpugate does not place is refused. A pod
        // that asks gpugate for nothing is not its to judge.
        match not_placed {
            Some(e) if request.has_gpus() => Err(e),
            _ => Ok(request),
        }
    }
}

/// What the engine reads of a container: its name and resource quantities
/// as written. Implemented for k8s-openapi's `Container` at the edge
/// (`cluster/convert.rs`, the scheduler side) and for the admission
/// webhooks' borrowed view of a pod, so both read requests with the same
/// code.
pub trait ContainerSpec {
    fn name(&self) -> &str;
    /// `restartPolicy`, as written (`Always` makes an init container a
    /// sidecar).
    fn restart_policy(&self) -> Option<&str>;
    /// `resources.limits[resource]`, as written.
    fn limit(&self, resource: &str) -> Option<&str>;
    /// `resources.requests[resource]`, as written.
    fn request(&self, resource: &str) -> Option<&str>;
    /// The names of its limits and requests (a name may come twice).
    fn resource_names(&self) -> Vec<&str>;
    /// The limit, else the request: what a container asks for.
    fn quantity(&self, resource: &str) -> Option<&str> {
        self.limit(resource).or_else(|| self.request(resource))
    }
}

/// The first resource of `c` of a device kind gpugate does not place
/// ([`crate::devices::NOT_PLACED`]) that it asks at least one of, as the
/// error that refuses its pod.
fn not_placed_in<C: ContainerSpec + ?Sized>(
    c: &C,
    cfg: &DeviceConfig,
    others: &[&DeviceConfig],
) -> Option<RequestError> {
    let own = cfg.gpu_resource_names();
    c.resource_names().into_iter().find_map(|name| {
        // A name the config gives gpugate's own kind is never another's.
        if name.is_empty() || own.contains(&name) {
            return None;
        }
        let asked = || asks_for(c, name);
        // Another kind gpugate places: read with its own section
        // (`Config::read_request`), never taken for an unplaced kind's.
        if others
            .iter()
            .any(|o| o.gpu_resource_names().contains(&name))
        {
            return None;
        }
        let kind = crate::devices::not_placed(name)?;
        asked().then(|| RequestError {
            container: c.name().to_string(),
            resource: name.to_string(),
            problem: format!(
                "asks for {kind}s, which gpugate does not place yet; their device plugin needs \
                 the scheduler's allocation, so the pod would not get them: ask for them in a \
                 pod of its own, scheduled by the scheduler that serves {kind}s"
            ),
        })
    })
}

/// Whether `c` asks for `resource`: a quantity above 0, or one that
/// cannot be read (so that the error about it names it).
pub fn asks_for<C: ContainerSpec + ?Sized>(c: &C, resource: &str) -> bool {
    c.quantity(resource)
        .is_some_and(|q| parse_whole(q).map_or(true, |n| n > 0))
}

/// A GPU request that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("container {container:?}, resource {resource}: {problem}")]
pub struct RequestError {
    pub container: String,
    pub resource: String,
    pub problem: String,
}

/// The GPU resources a container states, read from limits, else requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerResources {
    pub container: String,
    pub count: Option<u64>,
    pub memory: Option<u64>,
    pub percentage: Option<u64>,
    pub cores: Option<u64>,
    /// The memory quantity is written with a letter (`4Gi`, `4G`): bytes,
    /// for a kind that reads it so (`DeviceKind::memory_bytes_with_unit`).
    pub memory_with_unit: bool,
}

/// What the mutating webhook adds to a container's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InjectedDefaults {
    /// `nvidia.com/gpu` when only memory or cores were given.
    pub count: Option<u32>,
    /// `nvidia.com/gpucores: 100` when the container takes whole GPUs.
    pub cores: Option<u32>,
}

impl ContainerResources {
    /// Reads the four GPU resources of a container; malformed, negative or
    /// fractional quantities are errors.
    pub fn read<C: ContainerSpec + ?Sized>(
        c: &C,
        cfg: &DeviceConfig,
    ) -> Result<Self, RequestError> {
        let read = |name: &str| -> Result<Option<u64>, RequestError> {
            if name.is_empty() {
                return Ok(None);
            }
            c.quantity(name)
                .map(|q| {
                    parse_whole(q).map_err(|e| RequestError {
                        container: c.name().to_string(),
                        resource: name.to_string(),
                        problem: format!("{e}: allowed a whole number of at least 0"),
                    })
                })
                .transpose()
        };
        Ok(ContainerResources {
            container: c.name().to_string(),
            count: read(&cfg.resource_count_name)?,
            memory: read(&cfg.resource_memory_name)?,
            percentage: read(&cfg.resource_memory_percentage_name)?,
            cores: read(&cfg.resource_core_name)?,
            memory_with_unit: !cfg.resource_memory_name.is_empty()
                && c.quantity(&cfg.resource_memory_name)
                    .is_some_and(|q| q.bytes().any(|b| b.is_ascii_alphabetic())),
        })
    }

    pub(super) fn error(&self, resource: &str, problem: String) -> RequestError {
        RequestError {
            container: self.container.clone(),
            resource: resource.to_string(),
            problem,
        }
    }

    /// What the mutating webhook injects (hami-compat.md 2.3 steps 4 and 5).
    /// Only HAMi-core kinds get them: HAMi's webhook writes nothing into
    /// another kind's containers (hami-vendors.md, each "Webhook").
    pub fn webhook_defaults(&self, cfg: &DeviceConfig) -> InjectedDefaults {
        let mut out = InjectedDefaults::default();
        if !cfg.kind.kind().hami_core {
            return out;
        }
        let asks_slice = self.memory.is_some() || self.percentage.is_some() || self.cores.is_some();
        if self.count.is_none() && asks_slice && cfg.default_gpu_num > 0 {
            out.count = Some(cfg.default_gpu_num);
        }
        let has_count = self.count.is_some() || out.count.is_some();
        let whole_memory = match self.percentage {
            Some(p) => p == 100,
            None => cfg.resource_memory_name.is_empty() || self.memory.is_none(),
        };
        if has_count && self.cores.is_none() && whole_memory {
            out.cores = Some(100);
        }
        out
    }

    /// The container's request with the webhook's and the config's defaults
    /// applied, or `None` when it asks for no GPU.
    pub fn resolve(&self, cfg: &DeviceConfig) -> Result<Option<GpuRequest>, RequestError> {
        if cfg.kind.kind().core_masks {
            return self.resolve_core_masks(cfg);
        }
        if cfg.kind.kind().slice_profiles {
            return self.resolve_profiles(cfg);
        }
        if cfg.kind.kind().counts_only {
            // The count alone; nothing else is read (Biren, 12.1).
            return match self.count {
                None | Some(0) => Ok(None),
                Some(n) => Ok(Some(GpuRequest {
                    count: u32::try_from(n).map_err(|_| {
                        self.error(&cfg.resource_count_name, format!("{n} devices is too many"))
                    })?,
                    memory: Memory::Mib(0),
                    cores: 0,
                })),
            };
        }
        let injected = self.webhook_defaults(cfg);
        let count = match (self.count, injected.count) {
            (Some(c), _) => c,
            (None, Some(c)) => u64::from(c),
            (None, None) => {
                if let Some(name) = [
                    (self.memory, &cfg.resource_memory_name),
                    (self.percentage, &cfg.resource_memory_percentage_name),
                    (self.cores, &cfg.resource_core_name),
                ]
                .iter()
                .find_map(|(v, n)| v.map(|_| n.as_str()))
                {
                    return Err(self.error(
                        name,
                        format!(
                            "set without {} and defaultGPUNum is 0: add {} to the limits",
                            cfg.resource_count_name, cfg.resource_count_name
                        ),
                    ));
                }
                return Ok(None);
            }
        };
        let count_name = cfg.resource_count_name.as_str();
        if count == 0 {
            if self.memory.is_some() || self.percentage.is_some() || self.cores.is_some() {
                return Err(self.error(
                    count_name,
                    "is 0 but GPU memory or cores are requested: allowed at least 1".to_string(),
                ));
            }
            return Ok(None);
        }
        let count = u32::try_from(count)
            .map_err(|_| self.error(count_name, format!("{count} GPUs is too many")))?;

        // A whole GPU gets the 100 cores the webhook writes into the spec.
        // A pod that did not go through the webhook has no such value, and
        // HAMi's device plugin bounds its grant by `defaultCores` (master,
        // #3125): the 100 stands only while that is 0 (no bound).
        let injected_cores = injected.cores.filter(|_| cfg.default_cores == 0);
        // A kind whose memory and cores are the container's total takes an
        // even share of each device (Mthreads, 7.1).
        let split = |v: u64| {
            if cfg.kind.kind().split_over_count {
                v / u64::from(count)
            } else {
                v
            }
        };
        let cores = match self.cores.or(injected_cores.map(u64::from)).map(split) {
            // HAMi's loop reads more than 100 as 100 (1.11 step 7), which
            // Iluvatar's webhook relies on (6.4).
            Some(c) if c > 100 && cfg.kind.kind().cores_clamped => 100,
            Some(c) if c > 100 => {
                return Err(self.error(
                    &cfg.resource_core_name,
                    format!("{c} is more than 100: allowed 0..=100 (percent of one GPU)"),
                ));
            }
            Some(c) => c as u32,
            None => cfg.default_cores,
        };

        let percentage = match self.percentage {
            Some(p) if p > 100 => {
                return Err(self.error(
                    &cfg.resource_memory_percentage_name,
                    format!("{p} is more than 100: allowed 0..=100"),
                ));
            }
            // HAMi reads 0 as "not set".
            Some(0) | None => None,
            Some(p) => Some(p as u32),
        };

        let memory = match self.memory.filter(|m| *m > 0) {
            Some(m) if self.memory_with_unit && cfg.kind.kind().memory_bytes_with_unit => {
                // Bytes (Metax sGPU, 5.1); less than a MiB would read as
                // none, the whole device, to HAMi.
                let mib = split(m / (1024 * 1024));
                if mib == 0 || mib > MAX_MEM_MIB {
                    return Err(self.error(
                        &cfg.resource_memory_name,
                        format!(
                            "{m} bytes: allowed 1 MiB to {MAX_MEM_MIB} MiB (a quantity with a unit is \
                             bytes, a bare number GiB)"
                        ),
                    ));
                }
                Memory::Mib(mib)
            }
            Some(m) => {
                let mib = m
                    .checked_mul(u64::from(cfg.memory_factor))
                    .map(split)
                    .filter(|mib| *mib <= MAX_MEM_MIB)
                    .ok_or_else(|| {
                        self.error(
                            &cfg.resource_memory_name,
                            format!(
                                "{m} MiB (x memoryFactor {}) overflows: allowed at most {} MiB",
                                cfg.memory_factor,
                                MAX_MEM_MIB / u64::from(cfg.memory_factor.max(1))
                            ),
                        )
                    })?;
                Memory::Mib(mib)
            }
            None => match percentage {
                Some(p) => Memory::Percent(p),
                None if cfg.default_memory > 0 => Memory::Mib(cfg.default_memory),
                None => Memory::Percent(100),
            },
        };
        Ok(Some(GpuRequest {
            count,
            memory,
            cores,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container as the engine sees one: name, restart policy and the
    /// quantities of its limits and requests as written, borrowed.
    #[derive(Default)]
    struct Container<'a> {
        name: &'a str,
        restart_policy: Option<&'a str>,
        limits: &'a [(&'a str, &'a str)],
        requests: &'a [(&'a str, &'a str)],
    }

    impl ContainerSpec for Container<'_> {
        fn name(&self) -> &str {
            self.name
        }
        fn restart_policy(&self) -> Option<&str> {
            self.restart_policy
        }
        fn limit(&self, resource: &str) -> Option<&str> {
            find(self.limits, resource)
        }
        fn request(&self, resource: &str) -> Option<&str> {
            find(self.requests, resource)
        }
        fn resource_names(&self) -> Vec<&str> {
            self.limits
                .iter()
                .chain(self.requests)
                .map(|(k, _)| *k)
                .collect()
        }
    }

    fn find<'a>(pairs: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
        pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn container<'a>(
        limits: &'a [(&'a str, &'a str)],
        requests: &'a [(&'a str, &'a str)],
    ) -> Container<'a> {
        Container {
            name: "main",
            restart_policy: None,
            limits,
            requests,
        }
    }

    fn resolve(limits: &[(&str, &str)]) -> Result<Option<GpuRequest>, RequestError> {
        resolve_with(limits, &[], &DeviceConfig::default())
    }

    fn resolve_with(
        limits: &[(&str, &str)],
        requests: &[(&str, &str)],
        cfg: &DeviceConfig,
    ) -> Result<Option<GpuRequest>, RequestError> {
        ContainerResources::read(&container(limits, requests), cfg)?.resolve(cfg)
    }

    const GPU: &str = "nvidia.com/gpu";
    const MEM: &str = "nvidia.com/gpumem";
    const PCT: &str = "nvidia.com/gpumem-percentage";
    const CORES: &str = "nvidia.com/gpucores";

    fn req(count: u32, memory: Memory, cores: u32) -> Option<GpuRequest> {
        Some(GpuRequest {
            count,
            memory,
            cores,
        })
    }

    #[test]
    fn no_gpu_resources_no_request() {
        assert_eq!(resolve(&[("cpu", "1")]), Ok(None));
        assert_eq!(resolve(&[(GPU, "0")]), Ok(None));
    }

    #[test]
    fn gpu_alone_is_one_exclusive_gpu() {
        assert_eq!(
            resolve(&[(GPU, "1")]),
            Ok(req(1, Memory::Percent(100), 100))
        );
        assert_eq!(
            resolve(&[(GPU, "2")]),
            Ok(req(2, Memory::Percent(100), 100))
        );
    }

    #[test]
    fn slices_keep_shared_cores() {
        assert_eq!(
            resolve(&[(GPU, "1"), (MEM, "3000")]),
            Ok(req(1, Memory::Mib(3000), 0))
        );
        assert_eq!(
            resolve(&[(GPU, "1"), (MEM, "3000"), (CORES, "30")]),
            Ok(req(1, Memory::Mib(3000), 30))
        );
        assert_eq!(
            resolve(&[(GPU, "1"), (PCT, "50")]),
            Ok(req(1, Memory::Percent(50), 0))
        );
        assert_eq!(
            resolve(&[(GPU, "1"), (PCT, "100")]),
            Ok(req(1, Memory::Percent(100), 100))
        );
        // gpumem wins over a percentage, as in HAMi.
        assert_eq!(
            resolve(&[(GPU, "1"), (PCT, "50"), (MEM, "1000")]),
            Ok(req(1, Memory::Mib(1000), 0))
        );
    }

    #[test]
    fn count_is_defaulted_when_only_a_slice_is_given() {
        assert_eq!(resolve(&[(MEM, "2000")]), Ok(req(1, Memory::Mib(2000), 0)));
        assert_eq!(
            resolve(&[(CORES, "20"), (PCT, "20")]),
            Ok(req(1, Memory::Percent(20), 20))
        );
        let cfg = DeviceConfig {
            default_gpu_num: 0,
            ..Default::default()
        };
        let e = resolve_with(&[(MEM, "2000")], &[], &cfg).unwrap_err();
        assert_eq!(e.resource, MEM);
        assert!(e.problem.contains("defaultGPUNum"), "{e}");
    }

    #[test]
    fn requests_are_read_when_limits_are_absent() {
        assert_eq!(
            resolve_with(&[], &[(GPU, "1"), (MEM, "1024")], &DeviceConfig::default()),
            Ok(req(1, Memory::Mib(1024), 0))
        );
        // limits win per resource
        assert_eq!(
            resolve_with(&[(GPU, "2")], &[(GPU, "1")], &DeviceConfig::default()),
            Ok(req(2, Memory::Percent(100), 100))
        );
    }

    #[test]
    fn config_defaults_and_memory_factor() {
        let cfg = DeviceConfig {
            default_memory: 4096,
            default_cores: 25,
            memory_factor: 2,
            ..Default::default()
        };
        assert_eq!(
            resolve_with(&[(GPU, "1"), (MEM, "1000")], &[], &cfg),
            Ok(req(1, Memory::Mib(2000), 25))
        );
        assert_eq!(
            resolve_with(&[(GPU, "1"), (PCT, "0"), (CORES, "10")], &[], &cfg),
            Ok(req(1, Memory::Mib(4096), 10))
        );
    }

    #[test]
    fn zero_percentage_is_a_whole_card_as_in_hami() {
        assert_eq!(
            resolve(&[(GPU, "1"), (PCT, "0")]),
            Ok(req(1, Memory::Percent(100), 0))
        );
    }

    #[test]
    fn invalid_values_name_container_and_resource() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: &[Case] = &[
            (&[(GPU, "1"), (CORES, "150")], CORES, "more than 100"),
            (&[(GPU, "1"), (PCT, "101")], PCT, "more than 100"),
            (&[(GPU, "-1")], GPU, "negative"),
            (&[(GPU, "0.5")], GPU, "whole number"),
            (
                &[(GPU, "1"), (MEM, "lots")],
                MEM,
                "not a Kubernetes quantity",
            ),
            (&[(GPU, "1"), (MEM, "3500m")], MEM, "whole number"),
            (&[(GPU, "1"), (MEM, "4Gi")], MEM, "overflows"),
            (&[(GPU, "0"), (MEM, "100")], GPU, "is 0"),
            (&[(GPU, "99999999999")], GPU, "too many"),
        ];
        for (limits, resource, needle) in cases {
            let e = resolve(limits).unwrap_err();
            assert_eq!(e.container, "main");
            assert_eq!(&e.resource, resource, "{limits:?}");
            assert!(e.to_string().contains(needle), "{limits:?}: {e}");
        }
    }

    #[test]
    fn webhook_defaults_match_hami() {
        let cfg = DeviceConfig::default();
        let d = |limits: &[(&str, &str)], requests: &[(&str, &str)]| {
            ContainerResources::read(&container(limits, requests), &cfg)
                .unwrap()
                .webhook_defaults(&cfg)
        };
        assert_eq!(d(&[(GPU, "1")], &[]).cores, Some(100));
        assert_eq!(d(&[], &[(GPU, "1")]).cores, Some(100));
        assert_eq!(d(&[(GPU, "1"), (PCT, "100")], &[]).cores, Some(100));
        assert_eq!(d(&[(GPU, "1"), (PCT, "50")], &[]).cores, None);
        assert_eq!(d(&[(GPU, "1"), (CORES, "10")], &[]).cores, None);
        assert_eq!(d(&[(GPU, "1"), (MEM, "10")], &[]).cores, None);
        assert_eq!(
            d(&[(MEM, "10")], &[]),
            InjectedDefaults {
                count: Some(1),
                cores: None
            }
        );
        assert_eq!(
            d(&[(PCT, "100")], &[]),
            InjectedDefaults {
                count: Some(1),
                cores: Some(100)
            }
        );
        assert_eq!(d(&[("cpu", "1")], &[]), InjectedDefaults::default());
    }

    #[test]
    fn percentage_resolves_per_gpu() {
        let r = GpuRequest {
            count: 1,
            memory: Memory::Percent(20),
            cores: 0,
        };
        assert_eq!(r.mem_on(8000), 1600);
        assert_eq!(r.mem_on(40960), 8192);
        assert_eq!(r.mem_on(7), 1);
    }

    #[test]
    fn pod_request_orders_init_first_and_knows_sidecars() {
        let init = [
            Container {
                name: "init",
                ..container(&[(GPU, "1"), (MEM, "100")], &[])
            },
            Container {
                name: "proxy",
                restart_policy: Some("Always"),
                ..container(&[(GPU, "1"), (MEM, "200")], &[])
            },
        ];
        let app = [
            Container {
                name: "sidecar",
                ..Default::default()
            },
            container(&[(GPU, "2")], &[]),
        ];
        let r = PodRequest::from_containers(&init, &app, &DeviceConfig::default(), &[]).unwrap();
        let names: Vec<_> = r.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["init", "proxy", "sidecar", "main"]);
        use ContainerKind::{App, Init, Sidecar};
        assert_eq!(r.kinds(), [Init, Sidecar, App, App]);
        assert!(r.has_gpus());
        assert_eq!(r.max_container_gpus(), 2);
    }
}
