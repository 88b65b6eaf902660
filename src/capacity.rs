//! What the cluster can still take, per node and kind of device, in
//! numbers a person, an autoscaler or a quota system (Kueue) can compare
//! with a request: free memory and cores, the largest slice one device can
//! still take, and whole devices free. Pure: computed from the placement
//! state, the same the extender places with; shown by `gpugate capacity`,
//! `gpugate top` and the `gpugate_capacity_*` gauges.
//!
//! A device counts only if a pod could be given a share of it now: the
//! placement engine's own per-device check (`engine::checks`) takes an
//! empty share of it (healthy, not cordoned, in a mode gpugate shares,
//! with a free slot and cores left, no pod on it whose allocation is
//! unreadable or inconsistent). Quotas, NUMA alignment, pod selectors and the node lock are a
//! pod's, not the device's, and are left to `gpugate explain`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::engine::checks::check_gpu;
use crate::engine::request::{GpuRequest, Memory};
use crate::engine::selection::Selection;
use crate::engine::state::ClusterState;
use crate::engine::{Gpu, Usage};

/// One share of one device: memory (MiB) and cores (percent of it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Slice {
    #[serde(rename = "memMiB")]
    pub mem_mib: u64,
    pub cores: u64,
}

/// What one node's devices of one kind can still take.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    pub node: String,
    /// The kind's short name (`nvidia`).
    pub kind: &'static str,
    /// Devices of the kind on the node, and of those how many can take a
    /// share now.
    pub devices: usize,
    pub usable: usize,
    /// Usable devices no pod holds a share of.
    pub whole_free: usize,
    /// Free memory and cores summed over the usable devices.
    #[serde(rename = "freeMemMiB")]
    pub free_mem_mib: u64,
    pub free_cores: u64,
    /// The largest share one device can still give (most memory, then
    /// most cores); none when no device is usable. On a MIG device, the
    /// largest profile with a free placement.
    pub largest_slice: Option<Slice>,
}

/// The largest share `gpu` can still give with `used` taken, or `None`
/// when it can give none: when the engine's per-device check refuses even
/// an empty share of it (unhealthy, cordoned, a mode gpugate does not
/// share, no free slot or core, a pod on it it cannot read).
pub fn free_slice(gpu: &Gpu, used: &Usage) -> Option<Slice> {
    let empty = GpuRequest {
        count: 1,
        memory: Memory::Mib(0),
        cores: 0,
    };
    let any_pod = Selection {
        kind: gpu.kind,
        ..Selection::default()
    };
    check_gpu(gpu, used, &empty, &any_pod, false).ok()?;
    let cap = &gpu.capacity;
    if gpu.is_mig() {
        // The largest profile (the list is in order of memory) with a
        // placement free of the instances taken.
        return gpu
            .mig_profiles()
            .iter()
            .rev()
            .find(|(_, masks)| masks.iter().any(|m| m & used.slices == 0))
            .map(|(p, _)| Slice {
                mem_mib: u64::from(p.memory_mib),
                cores: u64::from(p.cores),
            });
    }
    let mut cores = cap.cores.saturating_sub(used.cores);
    // All of a 100-core GPU is exclusive: not to be had beside another pod.
    if cap.cores == 100 && used.slots > 0 {
        cores = cores.min(99);
    }
    Some(Slice {
        mem_mib: u64::from(cap.mem_mib.saturating_sub(used.mem_mib)),
        cores: u64::from(cores),
    })
}

/// Every node with devices, per kind, in node then kind order.
pub fn capacity(state: &ClusterState) -> Vec<NodeCapacity> {
    let mut out = Vec::new();
    for node in state.nodes().filter(|n| !n.gpus.is_empty()) {
        let mut by_kind: BTreeMap<crate::devices::KindId, NodeCapacity> = BTreeMap::new();
        for (gpu, used) in node.gpus.iter().zip(&node.usage) {
            let row = by_kind.entry(gpu.kind).or_insert_with(|| NodeCapacity {
                node: node.name.clone(),
                kind: gpu.kind.kind().name,
                ..NodeCapacity::default()
            });
            row.devices += 1;
            let Some(slice) = free_slice(gpu, used) else {
                continue;
            };
            row.usable += 1;
            if used.slots == 0 {
                row.whole_free += 1;
            }
            row.free_mem_mib += u64::from(gpu.capacity.mem_mib.saturating_sub(used.mem_mib));
            row.free_cores += u64::from(gpu.capacity.cores.saturating_sub(used.cores));
            row.largest_slice = row.largest_slice.max(Some(slice));
        }
        out.extend(by_kind.into_values());
    }
    out
}

/// The cluster's capacity per kind: sums, and the largest slice of any
/// node.
pub fn totals(rows: &[NodeCapacity]) -> Vec<NodeCapacity> {
    let mut by_kind: BTreeMap<&'static str, NodeCapacity> = BTreeMap::new();
    for r in rows {
        let t = by_kind.entry(r.kind).or_insert_with(|| NodeCapacity {
            node: String::new(),
            kind: r.kind,
            ..NodeCapacity::default()
        });
        t.devices += r.devices;
        t.usable += r.usable;
        t.whole_free += r.whole_free;
        t.free_mem_mib += r.free_mem_mib;
        t.free_cores += r.free_cores;
        t.largest_slice = t.largest_slice.max(r.largest_slice);
    }
    by_kind.into_values().collect()
}

/// `gpugate capacity`: the totals per kind, then every node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapacityReport {
    /// Per kind, over all nodes (`node` empty).
    pub kinds: Vec<NodeCapacity>,
    pub nodes: Vec<NodeCapacity>,
}

impl CapacityReport {
    pub fn of(state: &ClusterState) -> CapacityReport {
        let nodes = capacity(state);
        CapacityReport {
            kinds: totals(&nodes),
            nodes,
        }
    }

    /// Exactly one JSON object.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings and numbers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Two tables for a person: per kind, then per node.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "KINDS ({})", self.kinds.len());
        out.push_str(&table(&self.kinds, false));
        let _ = writeln!(out, "\nNODES ({})", self.nodes.len());
        out.push_str(&table(&self.nodes, true));
        out
    }
}

/// The rows as a table, with the node column or without.
pub fn table(rows: &[NodeCapacity], with_node: bool) -> String {
    let mut head = vec![
        "KIND",
        "DEVICES",
        "USABLE",
        "WHOLE FREE",
        "FREE MEM(MiB)",
        "FREE CORES",
        "LARGEST SLICE",
    ];
    if with_node {
        head.insert(0, "NODE");
    }
    let mut table = vec![head.into_iter().map(str::to_string).collect::<Vec<_>>()];
    for r in rows {
        let mut row = vec![
            r.kind.to_string(),
            r.devices.to_string(),
            r.usable.to_string(),
            r.whole_free.to_string(),
            r.free_mem_mib.to_string(),
            r.free_cores.to_string(),
            r.largest_slice.map_or("none".to_string(), |s| {
                format!("{} MiB, {} cores", s.mem_mib, s.cores)
            }),
        ];
        if with_node {
            row.insert(0, r.node.clone());
        }
        table.push(row);
    }
    crate::simulate::render(&table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;

    fn example(name: &str) -> Vec<NodeCapacity> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name)
            .join("cluster.yaml");
        let (view, _) = Snapshot::load(&path).unwrap().to_view();
        capacity(view.state())
    }

    /// The demo cluster: training-0 holds 20,000 MiB and 50 cores of one
    /// A100; the T4 node's second GPU is cordoned; cpu-1 has no devices.
    #[test]
    fn the_demo_cluster() {
        let rows = example("demo");
        assert_eq!(rows.len(), 2, "{rows:?}");
        let a100 = &rows[0];
        assert_eq!(
            (a100.node.as_str(), a100.kind, a100.devices, a100.usable),
            ("gpu-a100-1", "nvidia", 4, 4)
        );
        assert_eq!(a100.whole_free, 3);
        assert_eq!(a100.free_mem_mib, 4 * 40960 - 20000);
        assert_eq!(a100.free_cores, 350);
        assert_eq!(
            a100.largest_slice,
            Some(Slice {
                mem_mib: 40960,
                cores: 100
            })
        );
        let t4 = &rows[1];
        assert_eq!(
            (t4.node.as_str(), t4.devices, t4.usable),
            ("gpu-t4-1", 2, 1)
        );
        assert_eq!(
            (t4.whole_free, t4.free_mem_mib, t4.free_cores),
            (1, 15360, 100)
        );
        let all = totals(&rows);
        assert_eq!(all.len(), 1);
        assert_eq!(
            (all[0].devices, all[0].usable, all[0].whole_free),
            (6, 5, 4)
        );
        assert_eq!(all[0].free_mem_mib, 4 * 40960 - 20000 + 15360);
        assert_eq!(all[0].largest_slice, a100.largest_slice);
    }

    /// examples/mig: the largest slice of a MIG GPU is the largest
    /// profile that still has a free placement.
    #[test]
    fn a_mig_gpu_offers_its_largest_free_profile() {
        let rows = example("mig");
        let mig = rows.iter().find(|r| r.node == "mig-1").expect("mig-1");
        let largest = mig.largest_slice.expect("a free profile");
        assert!(largest.mem_mib > 0 && largest.mem_mib <= 40960, "{mig:?}");
    }

    fn request(mem_mib: u64, cores: u32) -> GpuRequest {
        GpuRequest {
            count: 1,
            memory: Memory::Mib(mem_mib),
            cores,
        }
    }

    proptest::proptest! {
        /// The largest slice is what the placement engine's own per-GPU
        /// check grants, and no more: a request of exactly it fits, one
        /// MiB or one core more does not, and a GPU with no slice takes
        /// no request at all.
        #[test]
        fn the_largest_slice_is_what_the_engine_grants(
            slots in 1u32..6,
            mem in 1u32..50_000,
            cores in proptest::prop_oneof![proptest::strategy::Just(100u32), 0u32..300],
            used_slots in 0u32..6,
            used_mem_share in proptest::prop_oneof![
                proptest::strategy::Just(0u32),
                proptest::strategy::Just(100),
                0u32..=100
            ],
            used_cores_share in proptest::prop_oneof![
                proptest::strategy::Just(0u32),
                proptest::strategy::Just(100),
                0u32..=100
            ],
            healthy in proptest::bool::weighted(0.9),
            cordoned in proptest::bool::weighted(0.1),
            unreadable in proptest::bool::weighted(0.05),
        ) {
            let mut gpu = Gpu::new("GPU-p", 0, "NVIDIA A100", Usage {
                slots,
                mem_mib: mem,
                cores,
                ..Usage::default()
            });
            gpu.healthy = healthy;
            gpu.cordoned = cordoned;
            let used = Usage {
                slots: used_slots.min(slots),
                mem_mib: (u64::from(mem) * u64::from(used_mem_share) / 100) as u32,
                cores: (u64::from(cores) * u64::from(used_cores_share) / 100) as u32,
                unreadable: u8::from(unreadable),
                ..Usage::default()
            };
            let check = |r: GpuRequest| {
                check_gpu(&gpu, &used, &r, &Selection::default(), false).is_ok()
            };
            match free_slice(&gpu, &used) {
                Some(s) => {
                    let c = u32::try_from(s.cores).unwrap();
                    proptest::prop_assert!(check(request(s.mem_mib, c)), "{s:?} {used:?}");
                    proptest::prop_assert!(!check(request(s.mem_mib + 1, 0)), "{s:?} {used:?}");
                    proptest::prop_assert!(!check(request(0, c + 1)), "{s:?} {used:?}");
                }
                None => {
                    for r in [request(0, 0), request(1, 0), request(0, 1), request(1, 1)] {
                        proptest::prop_assert!(!check(r), "{r:?} {used:?}");
                    }
                }
            }
        }
    }
}
