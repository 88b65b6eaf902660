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
//! them, and gpugate judges them on their GPUs alone. How feasible nodes
//! are ranked by their zones is in [`super::numa_score`].

use super::device::Node;
use super::fit::{Scratch, ZoneRule, fit_pod_in};
use super::lifecycle::{ContainerKind, pod_peak};
use super::numa::{
    CpuMemory, NodeTopology, NumaGrant, TopologyPolicy, TopologyScope, ZoneResource,
};
use super::plan::PodPlan;
use super::reason::{Reason, ReasonCounts, Rejection, ZoneSubject};

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
            let gpus = pod_peak(
                containers
                    .iter()
                    .map(|c| (c.kind, u64::from(c.gpu.map_or(0, |g| g.count)))),
            );
            let gpus = u32::try_from(gpus).unwrap_or(u32::MAX);
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
            let subject = match topology.scope {
                TopologyScope::Pod => ZoneSubject::Pod,
                TopologyScope::Container => {
                    ZoneSubject::Container(containers[group[0]].name.clone())
                }
            };
            return Err(Rejection::NumaZones {
                subject,
                zones: u32::try_from(topology.zones.len()).unwrap_or(u32::MAX),
                counts,
            });
        }
    }
    // Every rule set: the GPUs of the whole pod, unless the last check
    // fitted them under these rules already.
    let last_fitted = groups
        .last()
        .is_some_and(|g| g.iter().any(|&i| containers[i].gpu.is_some()));
    if !last_fitted {
        fit_pod_in(node, plan, &rules, scratch)?;
    }
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
    let placed =
        (0..zones.len()).filter_map(|i| Some((i, kinds[i], plan.numa.containers[i], zones[i]?)));
    if let Err(short) = topology.containers_hold(placed) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::checks::check_gpu;
    use crate::engine::device::{Gpu, Usage};
    use crate::engine::numa::NumaRequest;
    use crate::engine::policy::{GpuPolicy, NodePolicy};
    use crate::engine::request::{ContainerRequest, GpuRequest, Memory, PodRequest};

    use crate::engine::numa::test_zones::{cm, topology, zone};

    /// GPUs of 40,960 MiB, 10 slots, 100 cores, on the given NUMA ids.
    fn node(numas: &[i32]) -> Node {
        let gpus = numas
            .iter()
            .enumerate()
            .map(|(i, &numa)| {
                let mut g = Gpu::new(
                    format!("GPU-{i}"),
                    i as u32,
                    "NVIDIA A100",
                    Usage {
                        slices: 0,
                        unreserved: 0,
                        unreadable: 0,
                        slots: 10,
                        mem_mib: 40960,
                        cores: 100,
                    },
                );
                g.numa = numa;
                g
            })
            .collect();
        Node::new("n", gpus)
    }

    /// (kind, CPU, GiB, GPU count and MiB if any).
    type Spec = (ContainerKind, u64, u64, Option<(u32, u64)>);

    /// A Guaranteed pod of these containers.
    fn plan(containers: &[Spec]) -> PodPlan {
        let mut p = PodPlan::new(
            PodRequest {
                device_kind: Default::default(),
                also: Vec::new(),
                containers: containers
                    .iter()
                    .enumerate()
                    .map(|(i, &(kind, _, _, gpu))| ContainerRequest {
                        name: format!("c{i}"),
                        kind,
                        gpu: gpu.map(|(count, mib)| GpuRequest {
                            count,
                            memory: Memory::Mib(mib),
                            cores: 0,
                        }),
                    })
                    .collect(),
            },
            NodePolicy::Binpack,
            GpuPolicy::Spread,
        );
        p.numa = NumaRequest {
            guaranteed: true,
            containers: containers.iter().map(|c| cm(c.1, c.2)).collect(),
        };
        p
    }

    use ContainerKind::{App, Init, Sidecar};

    #[test]
    fn the_zone_with_both_cpus_and_the_gpu_wins() {
        // Zone 0 has the GPU but 4 CPUs; zone 1 has 16 CPUs but its GPU
        // is full: 8 CPUs and a GPU fit nowhere together.
        let mut n = node(&[0, 1]);
        n.add_usage(
            1,
            &Usage {
                slices: 0,
                unreserved: 0,
                unreadable: 0,
                slots: 1,
                mem_mib: 40960,
                cores: 0,
            },
        );
        let t = topology(
            TopologyScope::Container,
            vec![zone(0, 4, 64), zone(1, 16, 64)],
        );
        let p = plan(&[(App, 8, 8, Some((1, 1000)))]);
        let e = align(&n, &t, &p, &mut Scratch::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "1/2 NumaZoneInsufficientCPU, 1/2 NumaZoneInsufficientGPU (one NUMA zone for container c0)"
        );
        // With zone 0's CPUs back, zone 0 it is, and its GPU.
        let t = topology(
            TopologyScope::Container,
            vec![zone(0, 8, 64), zone(1, 16, 64)],
        );
        let mut s = Scratch::default();
        let g = align(&n, &t, &p, &mut s).unwrap();
        assert_eq!(g.zones, [Some(0)]);
        assert_eq!(g.takes, [(0, cm(8, 8))]);
        assert_eq!(s.grants.iter().map(|g| g.1).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn pod_scope_puts_every_container_on_one_zone() {
        let n = node(&[0, 1]);
        // Two containers of 6 CPUs: 12 on one zone under the pod scope.
        let p = plan(&[(App, 6, 1, Some((1, 1000))), (App, 6, 1, None)]);
        let zones = vec![zone(0, 8, 64), zone(1, 12, 64)];
        let g = align(
            &n,
            &topology(TopologyScope::Pod, zones.clone()),
            &p,
            &mut Scratch::default(),
        )
        .unwrap();
        assert_eq!(g.zones, [Some(1), Some(1)]);
        // The container scope takes the lowest zone for each.
        let g = align(
            &n,
            &topology(TopologyScope::Container, zones),
            &p,
            &mut Scratch::default(),
        )
        .unwrap();
        assert_eq!(g.zones, [Some(0), Some(1)]);
        let e = align(
            &n,
            &topology(TopologyScope::Pod, vec![zone(0, 8, 64), zone(1, 8, 64)]),
            &p,
            &mut Scratch::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "2/2 NumaZoneInsufficientCPU (one NUMA zone for the pod)"
        );
    }

    #[test]
    fn restricted_aligns_only_what_one_zone_could_hold() {
        let n = node(&[0, 1]);
        let mut t = topology(
            TopologyScope::Container,
            vec![zone(0, 8, 64), zone(1, 8, 64)],
        );
        t.policy = TopologyPolicy::Restricted;
        for z in &mut t.zones {
            z.allocatable = cm(10, 64);
        }
        // 12 CPUs: no zone could ever hold them; the kubelet spans zones.
        let big = plan(&[(App, 12, 1, Some((1, 1000)))]);
        let g = align(&n, &t, &big, &mut Scratch::default()).unwrap();
        assert_eq!(g.zones, [None]);
        assert!(g.takes.is_empty());
        // 9 CPUs fit a zone's allocatable but neither zone's available.
        let mid = plan(&[(App, 9, 1, None)]);
        assert!(align(&n, &t, &mid, &mut Scratch::default()).is_err());
        t.policy = TopologyPolicy::SingleNumaNode;
        assert!(align(&n, &t, &big, &mut Scratch::default()).is_err());
    }

    /// A GPU whose NUMA node is unknown (-1 in HAMi's register annotation)
    /// has no affinity: the kubelet aligns it with any zone.
    #[test]
    fn gpus_of_unknown_numa_go_with_any_zone() {
        let n = node(&[-1]);
        let t = topology(
            TopologyScope::Container,
            vec![zone(0, 2, 64), zone(1, 8, 64)],
        );
        let g = align(
            &n,
            &t,
            &plan(&[(App, 4, 1, Some((1, 1000)))]),
            &mut Scratch::default(),
        )
        .unwrap();
        assert_eq!(g.zones, [Some(1)]);
    }

    #[test]
    fn who_applies() {
        let t = topology(TopologyScope::Container, vec![zone(0, 8, 64)]);
        let mut p = plan(&[(App, 1, 1, None)]);
        assert!(applies(&t, &p));
        for policy in [TopologyPolicy::None, TopologyPolicy::BestEffort] {
            let t = NodeTopology {
                policy,
                ..t.clone()
            };
            assert!(!applies(&t, &p), "{policy:?}");
        }
        assert!(!applies(
            &topology(TopologyScope::Container, Vec::new()),
            &p
        ));
        p.numa.guaranteed = false;
        assert!(!applies(&t, &p));
    }

    /// The oracle's answer: the kubelet's order (each container, or the
    /// pod, takes the lowest zone that holds it beside those before it),
    /// with every fact checked by brute force: CPUs and memory per phase
    /// of the pod's life, and GPUs by trying every assignment.
    fn oracle(node: &Node, t: &NodeTopology, p: &PodPlan) -> Option<Vec<Option<i32>>> {
        let n = p.request.containers.len();
        let groups: Vec<Vec<usize>> = match t.scope {
            TopologyScope::Pod => vec![(0..n).collect()],
            TopologyScope::Container => (0..n).map(|i| vec![i]).collect(),
        };
        let mut zones: Vec<Option<i32>> = vec![None; n];
        for g in groups {
            let zone = t.zones.iter().map(|z| z.id).find(|&z| {
                let mut trial = zones.clone();
                for &i in &g {
                    trial[i] = Some(z);
                }
                cpu_memory_hold(t, p, &trial) && gpus_exist(node, p, &trial)
            })?;
            for &i in &g {
                zones[i] = Some(zone);
            }
        }
        Some(zones)
    }

    /// Per phase (the running phase: sidecars and app containers; each
    /// init container with the sidecars before it), no zone gives more
    /// than it has. Containers without a zone yet are left out.
    fn cpu_memory_hold(t: &NodeTopology, p: &PodPlan, zones: &[Option<i32>]) -> bool {
        let kinds: Vec<ContainerKind> = p.request.containers.iter().map(|c| c.kind).collect();
        let mut phases: Vec<Vec<usize>> =
            vec![(0..kinds.len()).filter(|&i| kinds[i] != Init).collect()];
        for i in (0..kinds.len()).filter(|&i| kinds[i] == Init) {
            let mut phase: Vec<usize> = (0..i).filter(|&j| kinds[j] == Sidecar).collect();
            phase.push(i);
            phases.push(phase);
        }
        phases.iter().all(|phase| {
            t.zones.iter().all(|z| {
                let (cpu, mem) =
                    phase
                        .iter()
                        .filter(|&&i| zones[i] == Some(z.id))
                        .fold((0, 0), |(c, m), &i| {
                            (
                                c + p.numa.containers[i].cpu_milli,
                                m + p.numa.containers[i].memory_bytes,
                            )
                        });
                cpu <= z.available.cpu_milli && mem <= z.available.memory_bytes
            })
        })
    }

    /// Whether some choice of GPUs for the containers with a zone (each
    /// inside it) passes every check, trying all of them.
    fn gpus_exist(node: &Node, p: &PodPlan, zones: &[Option<i32>]) -> bool {
        let containers: Vec<usize> = (0..zones.len())
            .filter(|&i| zones[i].is_some() && p.request.containers[i].gpu.is_some())
            .collect();
        fn subsets(items: &[usize], k: usize) -> Vec<Vec<usize>> {
            if k == 0 {
                return vec![Vec::new()];
            }
            let mut out = Vec::new();
            for (i, &x) in items.iter().enumerate() {
                for mut rest in subsets(&items[i + 1..], k - 1) {
                    rest.insert(0, x);
                    out.push(rest);
                }
            }
            out
        }
        let options: Vec<Vec<Vec<usize>>> = containers
            .iter()
            .map(|&i| {
                let in_zone: Vec<usize> = (0..node.gpus.len())
                    .filter(|&g| Some(node.gpus[g].numa) == zones[i])
                    .collect();
                subsets(
                    &in_zone,
                    p.request.containers[i].gpu.unwrap().count as usize,
                )
            })
            .collect();
        let mut pick = vec![0usize; containers.len()];
        if options.iter().any(Vec::is_empty) {
            return false;
        }
        loop {
            let mut app = node.usage.clone();
            let ok = containers.iter().enumerate().all(|(k, &i)| {
                let c = &p.request.containers[i];
                let req = c.gpu.unwrap();
                let base = app.clone();
                let mut takes = Vec::new();
                for &g in &options[k][pick[k]] {
                    match check_gpu(
                        &node.gpus[g],
                        &base[g],
                        &req,
                        &p.selection,
                        p.gpu_policy.is_mutex(),
                    ) {
                        Ok(take) => takes.push((g, take)),
                        Err(_) => return false,
                    }
                }
                if c.kind != Init {
                    for (g, take) in takes {
                        app[g].add(&take);
                    }
                }
                true
            });
            if ok {
                return true;
            }
            // Next combination of choices.
            let mut k = 0;
            loop {
                if k == pick.len() {
                    return false;
                }
                pick[k] += 1;
                if pick[k] < options[k].len() {
                    break;
                }
                pick[k] = 0;
                k += 1;
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// On small nodes (up to 4 GPUs on 2 or 3 zones, up to 3
        /// containers), the engine and the oracle agree on whether the
        /// pod fits and on every container's zone, and nothing the engine
        /// places crosses a zone.
        #[test]
        fn alignment_agrees_with_the_brute_force_oracle(
            gpus in proptest::collection::vec((0i32..3, 0u64..40960, 0u32..3), 1..5),
            zones in proptest::collection::vec((0u64..12, 0u64..24), 2..4),
            containers in proptest::collection::vec(
                (0u8..3, 0u64..8, 0u64..12, proptest::option::of((1u32..3, 1u64..30000))), 1..4),
            pod_scope in proptest::bool::ANY,
        ) {
            let numas: Vec<i32> = gpus.iter().map(|g| g.0 % zones.len() as i32).collect();
            let mut n = node(&numas);
            for (i, g) in gpus.iter().enumerate() {
                if g.1 > 0 {
                    n.add_usage(i, &Usage { slices: 0,
            unreserved: 0, unreadable: 0, slots: g.2.max(1), mem_mib: u32::try_from(g.1).unwrap(), cores: 0 });
                }
            }
            let t = topology(
                if pod_scope { TopologyScope::Pod } else { TopologyScope::Container },
                zones.iter().enumerate().map(|(i, &(c, g))| zone(i as i32, c, g)).collect(),
            );
            let mut specs: Vec<Spec> = containers
                .iter()
                .map(|c| (match c.0 { 0 => Init, 1 => Sidecar, _ => App }, c.1, c.2, c.3))
                .collect();
            specs.sort_by_key(|c| !c.0.is_init_list());
            let p = plan(&specs);
            let mut s = Scratch::default();
            let engine = align(&n, &t, &p, &mut s).ok();
            let want = oracle(&n, &t, &p);
            proptest::prop_assert_eq!(engine.as_ref().map(|g| g.zones.clone()), want);
            if let Some(g) = engine {
                for &(ci, pos, _) in &s.grants {
                    proptest::prop_assert_eq!(Some(n.gpus[pos].numa), g.zones[ci]);
                }
                let kinds: Vec<ContainerKind> = specs.iter().map(|c| c.0).collect();
                let on: Vec<i32> = g.zones.iter().map(|z| z.unwrap()).collect();
                proptest::prop_assert!(t.zones_hold(&kinds, &p.numa.containers, &on).is_ok());
            }
        }
    }
}
