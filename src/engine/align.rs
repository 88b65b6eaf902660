//! NUMA alignment: on a node whose kubelet refuses what cannot come from
//! one NUMA node (Topology Manager `single-numa-node`, or `restricted` for
//! what fits one zone), a Guaranteed pod's CPUs, memory and GPUs must come
//! from one zone per container (scope `container`) or one zone for the
//! whole pod (scope `pod`).
//!
//! The rule follows the kubelet's own order: containers are admitted one
//! after another (init containers first, as the pod lists them), and each
//! gets the lowest-numbered zone that can hold it beside what the
//! containers before it took there: its CPUs and memory (from the zone's
//! availability, by who runs together, see [`NodeTopology::zones_hold`])
//! and its GPUs among the GPUs whose NUMA id is that zone (the node's GPU
//! policy chooses among them). Under the pod scope the whole pod takes the
//! lowest zone that holds all of it. A node passes when every container
//! gets a zone. The kubelet picks the lowest zone too (its narrowest
//! preferred hint), so the zone gpugate predicts is the zone the pod gets
//! when the CPU manager and memory manager see the availability gpugate
//! sees.
//!
//! Pods that are not Guaranteed, nodes without a topology, and policies
//! `none` and `best-effort` are not aligned: the kubelet does not refuse
//! them, and gpugate judges them on their GPUs alone.

use super::device::Node;
use super::fit::{Scratch, ZoneRule, fit_pod_in};
use super::lifecycle::{ContainerKind, pod_peak};
use super::numa::{CpuMemory, NodeTopology, TopologyPolicy, TopologyScope, ZoneResource};
use super::plan::PodPlan;
use super::reason::{Reason, ReasonCounts, Rejection};

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

/// Whether the kubelet of a node of `topology` aligns `plan`'s pod.
pub fn applies(topology: &NodeTopology, plan: &PodPlan) -> bool {
    topology.policy.refuses_across_zones()
        && !topology.zones.is_empty()
        && plan.numa.guaranteed
        && plan.numa.containers.len() == plan.request.containers.len()
}

/// The zones of `plan`'s containers on `node`, whose availability (what
/// gpugate has placed there since the object was written already taken
/// off) is `topology`; on success `scratch.grants` holds the GPUs chosen
/// inside those zones. Call only when [`applies`].
pub fn align(
    node: &Node,
    topology: &NodeTopology,
    plan: &PodPlan,
    scratch: &mut Scratch,
) -> Result<NumaGrant, Rejection> {
    let containers = &plan.request.containers;
    let kinds: Vec<ContainerKind> = containers.iter().map(|c| c.kind).collect();
    let need = &plan.numa.containers;
    let n = containers.len();
    // Containers that share one zone, in the kubelet's order.
    let groups: Vec<Vec<usize>> = match topology.scope {
        TopologyScope::Pod => {
            let all: Vec<usize> = (0..n).collect();
            let pod = pod_peak(kinds.iter().copied().zip(need.iter().copied()));
            let gpus = plan.request.max_container_gpus();
            if kubelet_aligns(topology, node, &pod, gpus) {
                vec![all]
            } else {
                Vec::new()
            }
        }
        TopologyScope::Container => (0..n)
            .filter(|&i| {
                let gpus = containers[i].gpu.map_or(0, |g| g.count);
                kubelet_aligns(topology, node, &need[i], gpus)
            })
            .map(|i| vec![i])
            .collect(),
    };
    // Containers outside every group take any GPU; those of later groups
    // are left out of the checks of earlier ones.
    let mut rules = vec![ZoneRule::Any; n];
    for &i in groups.iter().flatten() {
        rules[i] = ZoneRule::Skip;
    }
    let mut zones: Vec<Option<i32>> = vec![None; n];
    for group in &groups {
        let mut counts = ReasonCounts::default();
        let mut found = false;
        for zone in &topology.zones {
            for &i in group {
                rules[i] = ZoneRule::Only(zone.id);
                zones[i] = Some(zone.id);
            }
            match zone_holds(node, topology, plan, &kinds, &zones, &rules, group, scratch) {
                Ok(()) => {
                    found = true;
                    break;
                }
                Err(reason) => counts.add(reason, 1),
            }
        }
        if !found {
            let container = match topology.scope {
                TopologyScope::Pod => "the pod".to_string(),
                TopologyScope::Container => format!("container {}", containers[group[0]].name),
            };
            return Err(Rejection::NumaZones {
                container,
                zones: u32::try_from(topology.zones.len()).unwrap_or(u32::MAX),
                counts,
            });
        }
    }
    // Every rule set: the GPUs of the whole pod (the last check may not
    // have covered containers without GPUs after it).
    fit_pod_in(node, plan, &rules, scratch)?;
    Ok(NumaGrant::new(zones, &kinds, need))
}

/// Whether the zones chosen so far (`zones`, `None` for containers not
/// placed yet or not aligned) hold their containers' CPUs and memory, and
/// the GPUs under `rules` fit; the first reason when not.
#[allow(clippy::too_many_arguments)]
fn zone_holds(
    node: &Node,
    topology: &NodeTopology,
    plan: &PodPlan,
    kinds: &[ContainerKind],
    zones: &[Option<i32>],
    rules: &[ZoneRule],
    group: &[usize],
    scratch: &mut Scratch,
) -> Result<(), Reason> {
    let placed: Vec<usize> = (0..zones.len()).filter(|&i| zones[i].is_some()).collect();
    let placed_kinds: Vec<ContainerKind> = placed.iter().map(|&i| kinds[i]).collect();
    let placed_need: Vec<CpuMemory> = placed.iter().map(|&i| plan.numa.containers[i]).collect();
    let placed_zones: Vec<i32> = placed.iter().filter_map(|&i| zones[i]).collect();
    if let Err(short) = topology.zones_hold(&placed_kinds, &placed_need, &placed_zones) {
        return Err(match short.resource {
            ZoneResource::Cpu => Reason::NumaZoneInsufficientCPU,
            ZoneResource::Memory => Reason::NumaZoneInsufficientMemory,
        });
    }
    let has_gpus = group
        .iter()
        .any(|&i| plan.request.containers[i].gpu.is_some());
    if has_gpus && fit_pod_in(node, plan, rules, scratch).is_err() {
        return Err(Reason::NumaZoneInsufficientGPU);
    }
    Ok(())
}

/// Whether the kubelet insists that `need` and `gpus` GPUs come from one
/// zone: always under `single-numa-node`; under `restricted` only when one
/// zone could hold them at all (its allocatable CPUs and memory and GPU
/// count), since a larger request's narrowest hint spans zones and gpugate
/// does not model hints across zones.
fn kubelet_aligns(topology: &NodeTopology, node: &Node, need: &CpuMemory, gpus: u32) -> bool {
    match topology.policy {
        TopologyPolicy::SingleNumaNode => true,
        TopologyPolicy::Restricted => topology.zones.iter().any(|z| {
            let on_zone = node.gpus.iter().filter(|g| g.numa == z.id).count();
            z.allocatable.holds(need) && on_zone >= gpus as usize
        }),
        TopologyPolicy::None | TopologyPolicy::BestEffort => false,
    }
}

/// How feasible nodes are ranked by their NUMA zones, as the
/// NodeResourceTopologyMatch score plugin of kube-scheduler's
/// scheduler-plugins names its strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum NumaStrategy {
    /// Prefer zones left with the most CPUs and memory free.
    #[default]
    LeastAllocated,
    /// Prefer zones left with the least free (pack zones).
    MostAllocated,
    /// Prefer zones whose CPUs and memory are taken in equal shares.
    BalancedAllocation,
    /// Prefer nodes where the pod needs the fewest zones.
    LeastNumaNodes,
}

impl NumaStrategy {
    pub const NAMES: [&'static str; 4] = [
        "LeastAllocated",
        "MostAllocated",
        "BalancedAllocation",
        "LeastNUMANodes",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NumaStrategy::LeastAllocated => Self::NAMES[0],
            NumaStrategy::MostAllocated => Self::NAMES[1],
            NumaStrategy::BalancedAllocation => Self::NAMES[2],
            NumaStrategy::LeastNumaNodes => Self::NAMES[3],
        }
    }
}

impl std::str::FromStr for NumaStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "LeastAllocated" => Ok(NumaStrategy::LeastAllocated),
            "MostAllocated" => Ok(NumaStrategy::MostAllocated),
            "BalancedAllocation" => Ok(NumaStrategy::BalancedAllocation),
            "LeastNUMANodes" => Ok(NumaStrategy::LeastNumaNodes),
            other => Err(format!(
                "unknown NUMA scoring strategy {other:?}: allowed {}",
                Self::NAMES.join(", ")
            )),
        }
    }
}

impl TryFrom<String> for NumaStrategy {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::fmt::Display for NumaStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The NUMA part of a node's rank: the strategy and its weight beside the
/// node policy's (which weighs 1). Weight 0 leaves ranking to the node
/// policy alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumaScoring {
    pub strategy: NumaStrategy,
    pub weight: u32,
}

impl Default for NumaScoring {
    fn default() -> Self {
        NumaScoring {
            strategy: NumaStrategy::LeastAllocated,
            weight: 1,
        }
    }
}

/// A node's NUMA score in 0..=1 (higher is better) for a Guaranteed pod:
/// on an aligning node, of the zones its grant uses (each zone's share of
/// CPUs and memory the pod takes from what is available there, averaged
/// over the zones); under `LeastNUMANodes`, on any node with a topology,
/// of how few zones the pod's CPUs and memory need. 0 for a node without
/// a topology, as NodeResourceTopologyMatch scores it.
pub fn numa_score(
    strategy: NumaStrategy,
    topology: Option<&NodeTopology>,
    grant: Option<&NumaGrant>,
    pod: &CpuMemory,
) -> f64 {
    let Some(topology) = topology else {
        return 0.0;
    };
    // From the shares of CPUs and memory the pod takes of a zone.
    let of_shares: fn(f64, f64) -> f64 = match strategy {
        NumaStrategy::LeastAllocated => |cpu, memory| 1.0 - (cpu + memory) / 2.0,
        NumaStrategy::MostAllocated => |cpu, memory| (cpu + memory) / 2.0,
        // One minus the standard deviation of the two shares.
        NumaStrategy::BalancedAllocation => |cpu, memory| 1.0 - (cpu - memory).abs() / 2.0,
        NumaStrategy::LeastNumaNodes => {
            let zones = topology.zones.len().max(1) as f64;
            let needed = match grant {
                Some(g) => g.takes.len().max(1),
                None => match zones_needed(topology, pod) {
                    Some(k) => k,
                    None => return 0.0,
                },
            };
            return 1.0 - (needed as f64 - 1.0) / zones;
        }
    };
    let Some(grant) = grant.filter(|g| !g.takes.is_empty()) else {
        return 0.0;
    };
    let share = |taken: u64, free: u64| {
        if free == 0 {
            1.0
        } else {
            (taken as f64 / free as f64).min(1.0)
        }
    };
    let mut total = 0.0;
    for (id, take) in &grant.takes {
        if let Some(zone) = topology.zone(*id) {
            total += of_shares(
                share(take.cpu_milli, zone.available.cpu_milli),
                share(take.memory_bytes, zone.available.memory_bytes),
            );
        }
    }
    total / grant.takes.len() as f64
}

/// The fewest zones whose available CPUs and memory together hold `pod`,
/// or `None` when all of them do not.
pub fn zones_needed(topology: &NodeTopology, pod: &CpuMemory) -> Option<usize> {
    let zones = &topology.zones;
    // Up to 16 zones: every subset; more (never seen) are taken in order.
    if zones.len() > 16 {
        let mut sum = CpuMemory::default();
        for (k, z) in zones.iter().enumerate() {
            sum = super::lifecycle::Amount::plus(sum, z.available);
            if sum.holds(pod) {
                return Some(k + 1);
            }
        }
        return None;
    }
    (1u32..(1 << zones.len()))
        .filter(|mask| {
            let sum = zones
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .fold(CpuMemory::default(), |acc, (_, z)| {
                    super::lifecycle::Amount::plus(acc, z.available)
                });
            sum.holds(pod)
        })
        .map(|mask| mask.count_ones() as usize)
        .min()
}
