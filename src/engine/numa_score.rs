//! Ranking feasible nodes by their NUMA zones, for Guaranteed pods in a
//! cluster with NodeResourceTopology objects: the strategies of
//! scheduler-plugins' NodeResourceTopologyMatch (`LeastAllocated`,
//! `MostAllocated`, `BalancedAllocation`, `LeastNUMANodes`) and their
//! weight beside the node policy (combined in [`super::state::rank`]).

use super::numa::{CpuMemory, NodeTopology, NumaGrant};

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
    // Up to 8 zones (the Topology Manager's own limit): every subset;
    // more, the freest first (an upper bound).
    if zones.len() > 8 {
        let mut by_cpu: Vec<CpuMemory> = zones.iter().map(|z| z.available).collect();
        by_cpu.sort_by_key(|z| std::cmp::Reverse(z.cpu_milli));
        let mut sum = CpuMemory::default();
        for (k, z) in by_cpu.into_iter().enumerate() {
            sum = super::lifecycle::Amount::plus(sum, z);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::lifecycle::ContainerKind::App;
    use crate::engine::numa::TopologyScope;

    use crate::engine::numa::test_zones::{cm, topology, zone};

    #[test]
    fn scores_follow_the_strategy() {
        let t = topology(
            TopologyScope::Container,
            vec![zone(0, 8, 64), zone(1, 16, 64)],
        );
        let on = |zone| NumaGrant::new(vec![Some(zone)], &[App], &[cm(4, 16)]);
        let pod = cm(4, 16);
        let score = |s, z| numa_score(s, Some(&t), Some(&on(z)), &pod);
        use NumaStrategy::*;
        // Zone 0: half its CPUs, a quarter of its memory; zone 1: a quarter of both.
        assert_eq!(score(LeastAllocated, 0), 1.0 - 0.75 / 2.0);
        assert!(score(LeastAllocated, 1) > score(LeastAllocated, 0));
        assert!(score(MostAllocated, 0) > score(MostAllocated, 1));
        assert_eq!(score(BalancedAllocation, 1), 1.0);
        assert!(score(BalancedAllocation, 0) < 1.0);
        assert_eq!(score(LeastNumaNodes, 0), 1.0);
        // Not aligned: LeastNUMANodes counts the zones the pod needs.
        assert_eq!(numa_score(LeastNumaNodes, Some(&t), None, &cm(20, 16)), 0.5);
        assert_eq!(numa_score(LeastNumaNodes, Some(&t), None, &cm(30, 16)), 0.0);
        assert_eq!(numa_score(LeastAllocated, None, None, &pod), 0.0);
        assert_eq!(
            "LeastNUMANodes".parse::<NumaStrategy>(),
            Ok(NumaStrategy::LeastNumaNodes)
        );
        assert!(
            "Fastest"
                .parse::<NumaStrategy>()
                .unwrap_err()
                .contains("LeastNUMANodes")
        );
    }
}
