//! A node's NUMA layout as the kubelet's Topology Manager sees it, read
//! from its NodeResourceTopology object at the edge
//! (`crate::cluster::node_topology`): the policy and scope, and per NUMA
//! zone the CPUs and memory still available.
//!
//! It also reads what a pod asks of a zone ([`NumaRequest`]): whether the
//! kubelet aligns it at all (QoS class Guaranteed) and each container's CPU
//! and memory.
//!
//! The alignment rule built on this model is in [`super::align`], the
//! ranking of nodes by their zones in [`super::numa_score`].

use super::lifecycle::{ContainerKind, pod_peak};
use super::quantity::{parse_milli, parse_whole};
use super::request::ContainerSpec;

/// The kubelet's `--topology-manager-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopologyPolicy {
    /// No alignment (`none`), or a policy gpugate does not know.
    #[default]
    None,
    /// Prefers, never refuses (`best-effort`).
    BestEffort,
    /// Refuses what cannot get its preferred alignment (`restricted`).
    Restricted,
    /// Refuses what does not fit in one NUMA node (`single-numa-node`).
    SingleNumaNode,
}

/// The kubelet's `--topology-manager-scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopologyScope {
    /// Each container aligned on its own (the kubelet's default).
    #[default]
    Container,
    /// The pod's containers aligned together.
    Pod,
}

impl TopologyPolicy {
    /// The kubelet's flag value (`single-numa-node`), any letter case.
    pub fn from_flag(value: &str) -> Self {
        match value.trim().to_ascii_lowercase().as_str() {
            "best-effort" => TopologyPolicy::BestEffort,
            "restricted" => TopologyPolicy::Restricted,
            "single-numa-node" => TopologyPolicy::SingleNumaNode,
            _ => TopologyPolicy::None,
        }
    }

    /// Whether the kubelet refuses a pod whose resources cannot come from
    /// one NUMA node.
    pub fn refuses_across_zones(self) -> bool {
        matches!(
            self,
            TopologyPolicy::SingleNumaNode | TopologyPolicy::Restricted
        )
    }
}

impl TopologyScope {
    /// The kubelet's flag value (`container`, `pod`), any letter case.
    pub fn from_flag(value: &str) -> Self {
        if value.trim().eq_ignore_ascii_case("pod") {
            TopologyScope::Pod
        } else {
            TopologyScope::Container
        }
    }
}

/// One NUMA node of a node: what is still available there, and what it
/// offers to pods at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumaZone {
    /// The NUMA id, as HAMi's register annotation gives it per GPU.
    pub id: i32,
    /// What is not assigned to containers yet (the object's `available`).
    pub available: CpuMemory,
    /// What the zone offers to pods (the object's `allocatable`; its
    /// `available` when the object gives no `allocatable`).
    pub allocatable: CpuMemory,
}

/// A node's NUMA layout and availability.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeTopology {
    pub policy: TopologyPolicy,
    pub scope: TopologyScope,
    /// By NUMA id, ascending.
    pub zones: Vec<NumaZone>,
}

impl NodeTopology {
    pub fn zone(&self, id: i32) -> Option<&NumaZone> {
        self.zones.iter().find(|z| z.id == id)
    }
}

/// CPUs (millicores) and memory (bytes): of one container, or of a zone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CpuMemory {
    pub cpu_milli: u64,
    pub memory_bytes: u64,
}

impl CpuMemory {
    /// Whether `self` holds `need` (both resources).
    pub fn holds(&self, need: &CpuMemory) -> bool {
        need.cpu_milli <= self.cpu_milli && need.memory_bytes <= self.memory_bytes
    }

    /// What is left of `self` after `other` (never below zero).
    pub fn minus(self, other: CpuMemory) -> CpuMemory {
        CpuMemory {
            cpu_milli: self.cpu_milli.saturating_sub(other.cpu_milli),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == CpuMemory::default()
    }
}

impl super::lifecycle::Amount for CpuMemory {
    fn plus(self, other: Self) -> Self {
        CpuMemory {
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    fn larger(self, other: Self) -> Self {
        CpuMemory {
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }
}

/// What a pod asks of NUMA zones: whether its QoS class is Guaranteed (the
/// kubelet's Topology Manager aligns only such pods' CPUs and memory) and,
/// by container in the order of [`super::request::PodRequest`] (init
/// containers, then app containers), its CPU and memory limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaRequest {
    pub guaranteed: bool,
    pub containers: Vec<CpuMemory>,
}

impl NumaRequest {
    /// Kubernetes' QoS rule (every container, init containers included,
    /// has CPU and memory limits, and requests equal to them; an absent
    /// request defaults to the limit), and each container's limits. A
    /// quantity that cannot be read makes the pod not Guaranteed.
    pub fn from_containers<'c, C: ContainerSpec + 'c>(
        init: impl IntoIterator<Item = &'c C>,
        app: impl IntoIterator<Item = &'c C>,
    ) -> Self {
        let mut guaranteed = true;
        let mut containers = Vec::new();
        for c in init.into_iter().chain(app) {
            let amount = |resource: &str, parse: fn(&str) -> Result<u64, _>| {
                let limit = parse(c.limit(resource)?).ok()?;
                match c.request(resource).map(parse) {
                    None => Some(limit),
                    Some(Ok(request)) if request == limit => Some(limit),
                    Some(_) => None,
                }
            };
            let cpu = amount("cpu", parse_milli);
            let memory = amount("memory", parse_whole);
            guaranteed &= cpu.is_some() && memory.is_some();
            containers.push(CpuMemory {
                cpu_milli: cpu.unwrap_or(0),
                memory_bytes: memory.unwrap_or(0),
            });
        }
        NumaRequest {
            guaranteed: guaranteed && !containers.is_empty(),
            containers,
        }
    }
}

/// Which resource a zone lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneResource {
    Cpu,
    Memory,
}

/// A container whose CPU or memory its zone cannot give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneShortfall {
    /// Index in pod order.
    pub container: usize,
    pub zone: i32,
    pub resource: ZoneResource,
}

impl NodeTopology {
    /// Whether containers placed on `zones` (one NUMA id per container, in
    /// pod order) get their CPU and memory from those zones, by
    /// Kubernetes' rule of who runs together: sidecars and app containers
    /// add up on their zones for the pod's whole life; an init container
    /// runs beside the sidecars started before it. All on one zone is the
    /// pod scope. The first container that does not fit is the answer.
    pub fn zones_hold(
        &self,
        kinds: &[ContainerKind],
        need: &[CpuMemory],
        zones: &[i32],
    ) -> Result<(), ZoneShortfall> {
        self.containers_hold(
            kinds
                .iter()
                .zip(need)
                .zip(zones)
                .enumerate()
                .map(|(i, ((k, n), z))| (i, *k, *n, *z)),
        )
    }

    /// [`Self::zones_hold`] for (index, kind, need, zone) of containers in
    /// pod order (some may be left out); the shortfall names the index.
    pub fn containers_hold(
        &self,
        containers: impl IntoIterator<Item = (usize, ContainerKind, CpuMemory, i32)>,
    ) -> Result<(), ZoneShortfall> {
        // What sidecars and app containers placed so far take, per zone.
        let mut running: Vec<(i32, CpuMemory)> = Vec::new();
        for (i, kind, n, zone) in containers {
            let shortfall = |resource| ZoneShortfall {
                container: i,
                zone,
                resource,
            };
            let z = self.zone(zone).ok_or(shortfall(ZoneResource::Cpu))?;
            let before = running
                .iter()
                .find(|(id, _)| *id == zone)
                .map_or(CpuMemory::default(), |(_, taken)| *taken);
            if before.cpu_milli.saturating_add(n.cpu_milli) > z.available.cpu_milli {
                return Err(shortfall(ZoneResource::Cpu));
            }
            if before.memory_bytes.saturating_add(n.memory_bytes) > z.available.memory_bytes {
                return Err(shortfall(ZoneResource::Memory));
            }
            if kind != ContainerKind::Init {
                let sum = super::lifecycle::Amount::plus(before, n);
                match running.iter_mut().find(|(id, _)| *id == zone) {
                    Some(entry) => entry.1 = sum,
                    None => running.push((zone, sum)),
                }
            }
        }
        Ok(())
    }
}

/// Where an aligned pod's containers run on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NumaGrant {
    /// Per container in pod order (init containers first): its zone, or
    /// `None` when the kubelet does not align it (`restricted`, for a
    /// container no single zone could ever hold).
    pub zones: Vec<Option<i32>>,
    /// What the pod takes of each zone while it exists (Kubernetes' pod
    /// rule over its containers there), by zone id ascending.
    pub takes: Vec<(i32, CpuMemory)>,
}

impl NumaGrant {
    /// The grant of containers on `zones`, needing `need` each.
    pub fn new(zones: Vec<Option<i32>>, kinds: &[ContainerKind], need: &[CpuMemory]) -> Self {
        let mut ids: Vec<i32> = zones.iter().flatten().copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let takes = ids
            .into_iter()
            .map(|zone| {
                let on_zone = kinds.iter().zip(need).zip(&zones).map(|((k, n), z)| {
                    (
                        *k,
                        if *z == Some(zone) {
                            *n
                        } else {
                            CpuMemory::default()
                        },
                    )
                });
                (zone, pod_peak(on_zone))
            })
            .collect();
        NumaGrant { zones, takes }
    }

    /// The zones used, ascending, without repeats.
    pub fn zone_ids(&self) -> impl Iterator<Item = i32> + '_ {
        self.takes.iter().map(|(z, _)| *z)
    }
}

/// Zones and topologies for tests (`align`, `numa_score`).
#[cfg(test)]
pub(crate) mod test_zones {
    use super::*;

    /// `cpu` CPUs and `gib` GiB.
    pub fn cm(cpu: u64, gib: u64) -> CpuMemory {
        CpuMemory {
            cpu_milli: cpu * 1000,
            memory_bytes: gib << 30,
        }
    }

    /// Zone `id` with `cpu` CPUs and `gib` GiB available (64 CPUs and
    /// 256 GiB allocatable).
    pub fn zone(id: i32, cpu: u64, gib: u64) -> NumaZone {
        NumaZone {
            id,
            available: cm(cpu, gib),
            allocatable: cm(64, 256),
        }
    }

    /// A `single-numa-node` topology under `scope`.
    pub fn topology(scope: TopologyScope, zones: Vec<NumaZone>) -> NodeTopology {
        NodeTopology {
            policy: TopologyPolicy::SingleNumaNode,
            scope,
            zones,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A container of (resource, limit) and (resource, request) pairs.
    struct C {
        limits: BTreeMap<&'static str, &'static str>,
        requests: BTreeMap<&'static str, &'static str>,
    }

    impl ContainerSpec for C {
        fn name(&self) -> &str {
            "c"
        }
        fn restart_policy(&self) -> Option<&str> {
            None
        }
        fn limit(&self, r: &str) -> Option<&str> {
            self.limits.get(r).copied()
        }
        fn request(&self, r: &str) -> Option<&str> {
            self.requests.get(r).copied()
        }
        fn resource_names(&self) -> Vec<&str> {
            self.limits
                .keys()
                .chain(self.requests.keys())
                .copied()
                .collect()
        }
    }

    fn c(limits: &[(&'static str, &'static str)], requests: &[(&'static str, &'static str)]) -> C {
        C {
            limits: limits.iter().copied().collect(),
            requests: requests.iter().copied().collect(),
        }
    }

    fn qos(init: &[C], app: &[C]) -> NumaRequest {
        NumaRequest::from_containers(init, app)
    }

    #[test]
    fn guaranteed_as_kubernetes_decides_it() {
        let whole = c(&[("cpu", "8"), ("memory", "16Gi")], &[]);
        let r = qos(&[], std::slice::from_ref(&whole));
        assert!(r.guaranteed);
        assert_eq!(
            r.containers,
            [CpuMemory {
                cpu_milli: 8000,
                memory_bytes: 16 << 30
            }]
        );
        // Requests equal to the limits, however written.
        let same = c(
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1000m"), ("memory", "1073741824")],
        );
        assert!(qos(&[], &[same]).guaranteed);
        // Burstable: a request below its limit, or a limit missing.
        let burstable = c(&[("cpu", "2"), ("memory", "1Gi")], &[("cpu", "1")]);
        assert!(!qos(&[], &[burstable]).guaranteed);
        let no_memory = c(&[("cpu", "2")], &[]);
        assert!(!qos(&[], &[no_memory]).guaranteed);
        // Init containers count too.
        let init = c(&[("cpu", "1")], &[("cpu", "1")]);
        let r = qos(&[init], &[c(&[("cpu", "8"), ("memory", "16Gi")], &[])]);
        assert!(!r.guaranteed);
        assert_eq!(r.containers.len(), 2);
        // BestEffort, and no containers at all.
        assert!(!qos(&[], &[c(&[], &[])]).guaranteed);
        assert!(!qos(&[], &[]).guaranteed);
        // An unreadable quantity is not Guaranteed.
        assert!(!qos(&[], &[c(&[("cpu", "lots"), ("memory", "1Gi")], &[])]).guaranteed);
    }

    #[test]
    fn flags_are_read_like_the_kubelets() {
        assert_eq!(
            TopologyPolicy::from_flag("single-numa-node"),
            TopologyPolicy::SingleNumaNode
        );
        assert_eq!(
            TopologyPolicy::from_flag(" Restricted "),
            TopologyPolicy::Restricted
        );
        assert_eq!(
            TopologyPolicy::from_flag("best-effort"),
            TopologyPolicy::BestEffort
        );
        assert_eq!(TopologyPolicy::from_flag("bogus"), TopologyPolicy::None);
        assert!(TopologyPolicy::Restricted.refuses_across_zones());
        assert!(!TopologyPolicy::BestEffort.refuses_across_zones());
        assert_eq!(TopologyScope::from_flag("pod"), TopologyScope::Pod);
        assert_eq!(TopologyScope::from_flag(""), TopologyScope::Container);
    }

    fn zone(id: i32, cpu: u64, gib: u64) -> NumaZone {
        let amount = CpuMemory {
            cpu_milli: cpu * 1000,
            memory_bytes: gib << 30,
        };
        NumaZone {
            id,
            available: amount,
            allocatable: amount,
        }
    }

    fn need(cpu: u64, gib: u64) -> CpuMemory {
        CpuMemory {
            cpu_milli: cpu * 1000,
            memory_bytes: gib << 30,
        }
    }

    /// Two zones: 8 CPUs and 16 GiB on zone 0, 4 CPUs and 64 GiB on zone 1.
    fn two_zones() -> NodeTopology {
        NodeTopology {
            policy: TopologyPolicy::SingleNumaNode,
            scope: TopologyScope::Container,
            zones: vec![zone(0, 8, 16), zone(1, 4, 64)],
        }
    }

    #[test]
    fn zones_hold_by_who_runs_together() {
        use ContainerKind::{App, Init, Sidecar};
        let t = two_zones();
        // Two app containers of 6 CPUs cannot share zone 0; on two zones
        // the second lacks CPUs on zone 1.
        let apps = [App, App];
        let n = [need(6, 1), need(6, 1)];
        let short = |container, zone, resource| ZoneShortfall {
            container,
            zone,
            resource,
        };
        assert_eq!(
            t.zones_hold(&apps, &n, &[0, 0]),
            Err(short(1, 0, ZoneResource::Cpu))
        );
        assert_eq!(
            t.zones_hold(&apps, &n, &[0, 1]),
            Err(short(1, 1, ZoneResource::Cpu))
        );
        // An init container's CPUs are free again for the app containers.
        assert_eq!(t.zones_hold(&[Init, App], &n, &[0, 0]), Ok(()));
        // A sidecar's are not.
        assert_eq!(
            t.zones_hold(&[Sidecar, App], &n, &[0, 0]),
            Err(short(1, 0, ZoneResource::Cpu))
        );
        // Memory: 20 GiB only on zone 1.
        assert_eq!(
            t.zones_hold(&[App], &[need(2, 20)], &[0]),
            Err(short(0, 0, ZoneResource::Memory))
        );
        assert_eq!(t.zones_hold(&[App], &[need(2, 20)], &[1]), Ok(()));
        // A zone the node does not have.
        assert_eq!(
            t.zones_hold(&[App], &[need(1, 1)], &[7]),
            Err(short(0, 7, ZoneResource::Cpu))
        );
    }

    proptest::proptest! {
        /// Against the rule written per phase of the pod's life (the
        /// running phase: sidecars and app containers; each init container
        /// beside the sidecars before it): a zone assignment holds exactly
        /// when no phase asks a zone for more than it has.
        #[test]
        fn zones_hold_agrees_with_the_phases(
            zones in proptest::collection::vec((0u64..12, 0u64..32), 1..4),
            containers in proptest::collection::vec(
                (0u8..3, 0u64..8, 0u64..20, 0usize..4), 1..5),
        ) {
            let t = NodeTopology {
                policy: TopologyPolicy::SingleNumaNode,
                scope: TopologyScope::Container,
                zones: zones.iter().enumerate().map(|(i, &(c, g))| zone(i as i32, c, g)).collect(),
            };
            let mut kinds: Vec<ContainerKind> = containers.iter().map(|c| match c.0 {
                0 => ContainerKind::Init,
                1 => ContainerKind::Sidecar,
                _ => ContainerKind::App,
            }).collect();
            kinds.sort_by_key(|k| !k.is_init_list());
            let n: Vec<CpuMemory> = containers.iter().map(|c| need(c.1, c.2)).collect();
            let on: Vec<i32> = containers.iter().map(|c| (c.3 % (zones.len() + 1)) as i32).collect();
            // Phases: which containers run at once.
            let mut phases: Vec<Vec<usize>> = vec![(0..kinds.len()).filter(|&i| kinds[i] != ContainerKind::Init).collect()];
            for i in (0..kinds.len()).filter(|&i| kinds[i] == ContainerKind::Init) {
                let mut p: Vec<usize> = (0..i).filter(|&j| kinds[j] == ContainerKind::Sidecar).collect();
                p.push(i);
                phases.push(p);
            }
            let fits = on.iter().all(|z| t.zone(*z).is_some()) && phases.iter().all(|p| {
                t.zones.iter().all(|z| {
                    let (cpu, mem) = p.iter().filter(|&&i| on[i] == z.id)
                        .fold((0, 0), |(c, m), &i| (c + n[i].cpu_milli, m + n[i].memory_bytes));
                    cpu <= z.available.cpu_milli && mem <= z.available.memory_bytes
                })
            });
            proptest::prop_assert_eq!(t.zones_hold(&kinds, &n, &on).is_ok(), fits);
        }
    }
}
