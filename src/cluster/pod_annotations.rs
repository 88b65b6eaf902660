//! What a bind writes on a pod and the ledger reads back: HAMi's
//! allocation annotations and label (`hami::binding`), the MIG instances
//! (`hami.io/vgpu-mig-allocations`), and gpugate's own
//! `gpugate.io/numa-zones`. Built and encoded once per bind
//! ([`BindingAnnotations::of`]); read back by [`pod_allocation`] when the
//! watch (or a snapshot) shows the pod.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::config::Config;
use crate::devices::{self, PodLists};
use crate::engine::numa::{NumaGrant, NumaRequest};
use crate::engine::templates::{soft_split, template_of};
use crate::engine::{Allocation, ContainerKind, MigInstance};
use crate::hami::PodDevices;
use crate::hami::binding::binding_metadata;
use crate::hami::mig::{MigAllocation, decode_mig_allocations, encode_mig_allocations};
use crate::hami::pod_devices::{decode_pod_devices, encode_pod_devices};
use crate::hami::{DecodeError, keys};

use super::convert::{pod_finished, pod_name};

/// The annotations of one bind, encoded once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingAnnotations {
    node: String,
    /// Each device kind's list, under its kind's keys
    /// (`hami.io/vgpu-devices-allocated` and `-to-allocate` for NVIDIA).
    lists: Vec<(&'static PodLists, String)>,
    /// `hami.io/vgpu-mig-allocations`, for a pod given MIG instances.
    mig: Option<String>,
    /// [`NUMA_ZONES`], for an aligned pod.
    numa_zones: Option<String>,
    /// What a kind's device plugin reads beside its lists (Ascend's
    /// `huawei.com/<chip>`), by key.
    extras: Vec<(&'static str, String)>,
    /// Whether HAMi's `predicate-time` is written (Ascend).
    predicate_time: bool,
}

impl BindingAnnotations {
    pub fn of(allocation: &Allocation) -> Self {
        let mig = mig_allocations(allocation);
        BindingAnnotations {
            node: allocation.node.clone(),
            lists: allocation
                .device_lists()
                .iter()
                .map(|(kind, list)| (&kind.kind().pod_lists, encode_pod_devices(list)))
                .collect(),
            mig: (!mig.is_empty()).then(|| encode_mig_allocations(&mig)),
            numa_zones: allocation.numa.as_ref().map(encode_numa_zones),
            extras: Vec::new(),
            predicate_time: false,
        }
    }

    /// Adds what a template kind's device plugin reads beside its list
    /// (hami-vendors.md 2.3): `huawei.com/<chip>`, a JSON array with one
    /// object per device of every container in list order (`UUID`, the
    /// template `temp` unless the pod splits softly or takes a whole NPU,
    /// `memory` in MiB, `core`; zero values left out, as Go's
    /// `omitempty`), and `predicate-time`.
    ///
    /// Then what other kinds' plugins read beside their lists
    /// ([`devices::DeviceKind::bind_extras`]), with each device's index on
    /// `node` (the node the allocation is on; 0 for a device it does not
    /// have).
    pub fn for_device_plugin(
        mut self,
        allocation: &Allocation,
        config: &Config,
        pod: &Pod,
        node: Option<&crate::engine::Node>,
    ) -> Self {
        let empty = Default::default();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let containers: Vec<&k8s_openapi::api::core::v1::Container> = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
            .collect();
        let now_unix_nanos = jiff::Timestamp::now().as_nanosecond();
        for kind in allocation.kinds_held() {
            let Some(extras) = kind.kind().bind_extras else {
                continue;
            };
            let index = |uuid: &str| {
                node.and_then(|n| n.gpus.iter().find(|g| g.uuid == uuid))
                    .map_or(0, |g| g.index)
            };
            let cfg = config.device_config(kind);
            let profiles = node.map(|n| n.profiles());
            let count_in_limits = |i: usize| {
                containers
                    .get(i)
                    .and_then(|c| c.resources.as_ref()?.limits.as_ref())
                    .and_then(|l| l.get(&cfg.resource_count_name))
                    .is_some_and(|q| crate::engine::quantity::is_positive(&q.0))
            };
            let input = devices::ExtrasInput {
                node: &allocation.node,
                core_resource: &cfg.resource_core_name,
                now_unix_nanos,
                containers: allocation
                    .containers
                    .iter()
                    .enumerate()
                    .map(|(i, c)| devices::ExtrasContainer {
                        // HAMi's name for a container it cannot find (9.3).
                        name: containers
                            .get(i)
                            .map_or_else(|| format!("container-{i}"), |c| c.name.clone()),
                        count_in_limits: count_in_limits(i),
                        devices: c
                            .iter()
                            .filter(|d| d.kind == kind)
                            .map(|d| devices::ExtraDevice {
                                index: index(&d.uuid),
                                uuid: d.uuid.clone(),
                                mem_mib: d.mem_mib,
                                cores: d.cores,
                                slots: d.slots.max(1),
                                profile: profiles.and_then(|p| {
                                    let mem = u32::try_from(d.mem_mib).ok()?;
                                    let p = p.taken(mem, d.cores)?;
                                    Some((p.name.clone(), p.id.clone()))
                                }),
                                minor: profiles
                                    .map(|p| p.minor(&d.uuid).to_string())
                                    .unwrap_or_default(),
                            })
                            .collect(),
                    })
                    .collect(),
            };
            self.extras.extend(extras(&input));
        }
        for (kind, list) in allocation.device_lists() {
            // Only a kind whose plugin reads templates by UUID (Ascend).
            let Some(chip) = kind.kind().templates.filter(|c| !c.runtime_info.is_empty()) else {
                continue;
            };
            let cfg = config.device_config(kind);
            let soft = soft_split(kind, annotations);
            // By hand, in the fields' Go order (UUID, temp, memory, core),
            // so that the text is byte-equal to HAMi's.
            let info: Vec<String> = list
                .containers
                .iter()
                .flatten()
                .map(|d| {
                    let mut o = format!("{{\"UUID\":{}", Value::from(d.uuid.as_str()));
                    let temp = (!soft)
                        .then(|| template_of(cfg, u64::from(d.mem_mib)))
                        .flatten();
                    if let Some(t) = temp {
                        o.push_str(&format!(",\"temp\":{}", Value::from(t)));
                    }
                    if d.mem_mib > 0 {
                        o.push_str(&format!(",\"memory\":{}", d.mem_mib));
                    }
                    if d.cores > 0 {
                        o.push_str(&format!(",\"core\":{}", d.cores));
                    }
                    o.push('}');
                    o
                })
                .collect();
            self.extras
                .push((chip.runtime_info, format!("[{}]", info.join(","))));
            self.predicate_time = true;
        }
        self
    }

    /// The first device list the pod carries once bound: its annotation
    /// key (`hami.io/vgpu-devices-allocated` for NVIDIA) and value.
    pub fn carried(&self) -> (&'static str, &str) {
        self.lists
            .first()
            .map_or(("", ""), |(keys, list)| (keys.allocated, list.as_str()))
    }

    /// The device lists, as a log shows them (`DCU: uuid,DCU,2000,60:;`).
    pub fn devices(&self) -> String {
        self.lists
            .iter()
            .map(|(keys, list)| format!("{}={list}", keys.allocated))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The Binding's `metadata` (annotations and labels) at `now_unix`:
    /// kube-apiserver copies them onto the pod as it assigns the node.
    pub fn metadata(&self, now_unix: i64) -> Value {
        let lists: Vec<(&str, &str, &str)> = self
            .lists
            .iter()
            .map(|(keys, list)| (keys.to_allocate, keys.allocated, list.as_str()))
            .collect();
        let mut metadata = binding_metadata(&self.node, &lists, now_unix);
        if let Some(mig) = &self.mig {
            metadata["annotations"][keys::VGPU_MIG_ALLOCATIONS] = Value::String(mig.clone());
        }
        if let Some(zones) = &self.numa_zones {
            metadata["annotations"][NUMA_ZONES] = Value::String(zones.clone());
        }
        for (key, value) in &self.extras {
            metadata["annotations"][*key] = Value::String(value.clone());
        }
        if self.predicate_time {
            metadata["annotations"][devices::ascend::PREDICATE_TIME] =
                Value::String(now_unix.to_string());
        }
        metadata
    }
}

/// HAMi's MIG entries of an allocation: each MIG grant by its container
/// entry (the device list's, init containers first) and its place in it.
fn mig_allocations(allocation: &Allocation) -> Vec<MigAllocation> {
    let mut out = Vec::new();
    for (ci, grants) in allocation.containers.iter().enumerate() {
        for (di, grant) in grants.iter().enumerate() {
            if let Some(mig) = &grant.mig {
                out.push(MigAllocation {
                    container_index: u32::try_from(ci).unwrap_or(u32::MAX),
                    device_index: u32::try_from(di).unwrap_or(u32::MAX),
                    gpu_uuid: grant.uuid.clone(),
                    profile: mig.profile.clone(),
                    placement: mig.placement,
                    runtime: None,
                });
            }
        }
    }
    out
}

/// Puts each MIG entry's instance on the grant it names (written by
/// gpugate or by HAMi, with or without the device plugin's runtime ids).
/// An entry that names no grant of the device list, or another GPU than
/// the grant's, makes the allocation unreadable.
fn attach_mig(allocation: &mut Allocation, value: &str) -> Result<(), DecodeError> {
    for entry in decode_mig_allocations(value)? {
        let grant = usize::try_from(entry.container_index)
            .ok()
            .and_then(|ci| allocation.containers.get_mut(ci))
            .and_then(|c| {
                usize::try_from(entry.device_index)
                    .ok()
                    .and_then(|di| c.get_mut(di))
            });
        match grant {
            Some(g) if g.uuid == entry.gpu_uuid => {
                g.mig = Some(MigInstance {
                    profile: entry.profile,
                    placement: entry.placement,
                });
            }
            _ => {
                return Err(DecodeError::new(
                    keys::VGPU_MIG_ALLOCATIONS,
                    value,
                    format!(
                        "container {}, device {}: the device list has no grant of {} there",
                        entry.container_index, entry.device_index, entry.gpu_uuid
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A pod whose allocation annotations cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod}: {source}")]
pub struct PodAllocationError {
    pub pod: String,
    pub source: DecodeError,
}

/// The devices a pod holds, from `hami.io/vgpu-node` and each device
/// kind's allocated list (`hami.io/vgpu-devices-allocated` for NVIDIA).
/// `None` for pods that hold none: no allocation annotations, or finished
/// (Succeeded / Failed). Terminating pods still hold their devices.
pub fn pod_allocation(pod: &Pod) -> Result<Option<Allocation>, PodAllocationError> {
    if pod_finished(pod) {
        return Ok(None);
    }
    let annotations = pod.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let Some(node) = get(keys::VGPU_NODE) else {
        return Ok(None);
    };
    let mut lists = Vec::new();
    for (_, kind) in devices::kinds() {
        let key = kind.pod_lists.allocated;
        if let Some(value) = get(key) {
            let list = decode_pod_devices(key, value).map_err(|source| PodAllocationError {
                pod: pod_name(pod),
                source,
            })?;
            lists.push(list);
        }
    }
    if lists.is_empty() {
        return Ok(None);
    }
    // gpugate writes NVIDIA's list with one entry per container, so entry
    // i is container i; a list with fewer entries counts every entry as
    // an app container (`Allocation::from_device_lists`).
    let lists: Vec<&PodDevices> = lists.iter().collect();
    let mut allocation = Allocation::from_device_lists(node, &lists, &container_kinds(pod));
    if let Some(mig) = get(keys::VGPU_MIG_ALLOCATIONS).filter(|v| !v.trim().is_empty()) {
        attach_mig(&mut allocation, mig).map_err(|source| PodAllocationError {
            pod: pod_name(pod),
            source,
        })?;
    }
    allocation.numa = pod_numa_grant(pod);
    // The pod's class on the devices of a kind with tenancy rules (Metax
    // sGPU, hami-vendors.md 5.5), as its annotations say.
    if let Some(annotations) = annotations {
        allocation.tenancy = allocation
            .kinds_held()
            .into_iter()
            .find_map(|k| k.kind().tenancy)
            .map(|keys| crate::engine::tenancy::Tenancy::read(keys, annotations))
            .unwrap_or_default();
    }
    Ok(Some(allocation))
}

/// The device uuids a pod's allocated lists name, readable or not, for
/// a pod whose allocation cannot be read ([`crate::hami::pod_devices::uuids_named`]).
pub fn uuids_named(pod: &Pod) -> Vec<String> {
    let annotations = pod.metadata.annotations.as_ref();
    devices::kinds()
        .filter_map(|(_, kind)| annotations?.get(kind.pod_lists.allocated))
        .flat_map(|v| crate::hami::pod_devices::uuids_named(v))
        .collect()
}

/// The MIG instances of a pod that its device plugin reports created (the
/// entries of `hami.io/vgpu-mig-allocations` with their runtime ids), for
/// HAMi's `hami_node_gpu_mig_instance_info`. Empty without the annotation,
/// or when it cannot be read ([`pod_allocation`] reports that).
pub fn pod_mig_ready(pod: &Pod) -> Box<[MigAllocation]> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::VGPU_MIG_ALLOCATIONS))
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| decode_mig_allocations(v).ok())
        .map(|entries| {
            entries
                .into_iter()
                .filter(|e| e.runtime.is_some())
                .collect()
        })
        .unwrap_or_default()
}

/// gpugate's record, on a pod it aligned, of each container's NUMA zone in
/// pod order (init containers first; `-` for a container not aligned):
/// `0,0,-`. Written at bind with HAMi's annotations, read back so that
/// what the pod takes of its zones counts after a restart too.
pub const NUMA_ZONES: &str = "gpugate.io/numa-zones";

/// The value of [`NUMA_ZONES`] for `grant`.
fn encode_numa_zones(grant: &NumaGrant) -> String {
    grant
        .zones
        .iter()
        .map(|z| z.map_or_else(|| "-".to_string(), |z| z.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The NUMA zones the pod's [`NUMA_ZONES`] annotation records, with what
/// its containers take of them (from its spec). `None` without the
/// annotation, or when it does not name one zone per container (the
/// pod's GPUs still count; only its zone take is not known).
fn pod_numa_grant(pod: &Pod) -> Option<NumaGrant> {
    let text = pod.metadata.annotations.as_ref()?.get(NUMA_ZONES)?;
    let spec = pod.spec.as_ref()?;
    let zones: Vec<Option<i32>> = text
        .split(',')
        .map(|z| match z.trim() {
            "-" => Ok(None),
            z => z.parse::<i32>().map(Some),
        })
        .collect::<Result<_, _>>()
        .ok()?;
    let need =
        NumaRequest::from_containers(spec.init_containers.iter().flatten(), &spec.containers);
    if zones.len() != need.containers.len() {
        return None;
    }
    Some(NumaGrant::new(
        zones,
        &container_kinds(pod),
        &need.containers,
    ))
}

/// The kind of each container of a pod, init containers first.
fn container_kinds(pod: &Pod) -> Vec<ContainerKind> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| ContainerKind::of(true, c.restart_policy.as_deref()));
    let app = spec.containers.iter().map(|_| ContainerKind::App);
    init.chain(app).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The zones annotation round-trips, and what cannot be read (not one
    /// zone per container, not numbers) leaves the take unknown while the
    /// pod's GPUs still count.
    #[test]
    fn numa_zones_annotation() {
        let pod = |zones: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ml", "annotations": {
                    "hami.io/vgpu-node": "n1",
                    "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,1000,0:;;",
                    NUMA_ZONES: zones}},
                "spec": {"initContainers": [{"name": "setup", "resources": {
                            "limits": {"cpu": "1", "memory": "1Gi"}}}],
                         "containers": [{"name": "train", "resources": {
                            "limits": {"cpu": "8", "memory": "2Gi"}}}]},
            }))
            .unwrap()
        };
        let a = pod_allocation(&pod("1,1")).unwrap().unwrap();
        let grant = a.numa.unwrap();
        assert_eq!(grant.zones, [Some(1), Some(1)]);
        assert_eq!(encode_numa_zones(&grant), "1,1");
        // The init container's CPU is free again for the app container.
        assert_eq!(grant.takes[0].1.cpu_milli, 8000);
        let a = pod_allocation(&pod("-,0")).unwrap().unwrap();
        assert_eq!(a.numa.as_ref().unwrap().zones, [None, Some(0)]);
        assert_eq!(encode_numa_zones(a.numa.as_ref().unwrap()), "-,0");
        for garbage in ["0", "0,1,2", "a,b", ""] {
            let a = pod_allocation(&pod(garbage)).unwrap().unwrap();
            assert_eq!(a.numa, None, "{garbage:?}");
            assert_eq!(a.grant_count(), 1, "the allocation itself is read");
        }
    }
}
