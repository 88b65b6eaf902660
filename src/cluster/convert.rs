//! Kubernetes `Node` and `Pod` objects into engine types.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node as K8sNode, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::config::Config;
use crate::devices::{self, KindId};
use crate::engine::gang::Membership;
use crate::engine::numa::NumaRequest;
use crate::engine::request::{ContainerSpec, RequestError};
use crate::engine::{Gpu, Node, PlanError, PodPlan, PodRequest, Usage};
use crate::hami::cordon::decode_device_cordon;
use crate::hami::pair_scores::decode_pair_scores;
use crate::hami::register::decode_node_devices;
use crate::hami::{DecodeError, keys};

/// A pod's request, read from every container (init containers first).
pub fn pod_request(pod: &Pod, config: &Config) -> Result<PodRequest, RequestError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(PodRequest::default());
    };
    let empty = BTreeMap::new();
    config.read_request(
        spec.init_containers.as_deref().unwrap_or_default(),
        &spec.containers[..],
        pod.metadata.annotations.as_ref().unwrap_or(&empty),
    )
}

/// A pod's plan: its request, selection annotations and policy overrides
/// over the config's defaults.
pub fn pod_plan(pod: &Pod, config: &Config) -> Result<PodPlan, PlanError> {
    let empty = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let mut plan = PodPlan::from_parts(
        pod_request(pod, config)?,
        annotations,
        config.default_policies(),
    )?;
    if let Some(spec) = &pod.spec {
        plan.numa =
            NumaRequest::from_containers(spec.init_containers.iter().flatten(), &spec.containers);
    }
    plan.numa_scoring = config.scheduler.numa.scoring();
    let edge = |p: &mut PodPlan| {
        p.selection.mig_allowlist = config.device_config(p.request.device_kind).mig_allowlist();
        if config.vnpus.hami_vnpu_core {
            p.selection.unmarked_mode = Some(crate::devices::ascend::HAMI_CORE);
        }
        let section = config.device_config(p.request.device_kind);
        p.links.get_or_insert(section.topology_aware);
    };
    edge(&mut plan);
    plan.also.iter_mut().for_each(edge);
    Ok(plan)
}

impl ContainerSpec for Container {
    fn name(&self) -> &str {
        &self.name
    }

    fn restart_policy(&self) -> Option<&str> {
        self.restart_policy.as_deref()
    }

    fn limit(&self, resource: &str) -> Option<&str> {
        quantity_in(self.resources.as_ref()?.limits.as_ref()?, resource)
    }

    fn request(&self, resource: &str) -> Option<&str> {
        quantity_in(self.resources.as_ref()?.requests.as_ref()?, resource)
    }

    fn resource_names(&self) -> Vec<&str> {
        let Some(r) = self.resources.as_ref() else {
            return Vec::new();
        };
        r.limits
            .iter()
            .chain(r.requests.iter())
            .flat_map(|m| m.keys().map(String::as_str))
            .collect()
    }
}

fn quantity_in<'a>(map: &'a BTreeMap<String, Quantity>, resource: &str) -> Option<&'a str> {
    map.get(resource).map(|q| q.0.as_str())
}

/// What names the pod's gang group: its labels, and
/// `spec.schedulingGroup.podGroupName`.
pub fn membership(pod: &Pod) -> Membership<'_> {
    Membership {
        labels: pod.metadata.labels.as_ref(),
        pod_group_name: pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.as_deref()),
    }
}

/// A node whose GPUs cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error("node {node}: no {annotation} annotation (HAMi's device plugin has not registered it)")]
    Unregistered { node: String, annotation: String },
    #[error("node {node}: {source}")]
    Annotation { node: String, source: DecodeError },
    #[error("node {node}: {problem}")]
    Capacity { node: String, problem: String },
}

/// Whether the node's label says its devices of a capacity kind form a
/// ring (`devices::CapacityInventory::ring_label`: AWS's instance type).
fn is_ring(node: &K8sNode, inventory: &devices::CapacityInventory) -> bool {
    inventory.ring_label.is_some_and(|(label, words)| {
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .is_some_and(|v| words.iter().any(|w| v.contains(w)))
    })
}

/// The devices of every kind read from node capacity
/// ([`devices::CapacityInventory`]) that the node advertises: a kind none
/// of whose resources is in `status.capacity` is absent; one whose
/// capacities make no device says why.
fn capacity_inventories(
    node: &K8sNode,
) -> Vec<(KindId, Result<Vec<crate::hami::DeviceInfo>, String>)> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let capacity = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    devices::kinds()
        .filter_map(|(id, kind)| {
            let inventory = kind.capacity?;
            let texts: Vec<Option<&str>> = inventory
                .resources
                .iter()
                .map(|r| capacity.and_then(|c| c.get(*r)).map(|q| q.0.as_str()))
                .collect();
            if texts.iter().all(Option::is_none) {
                return None;
            }
            let read = || -> Result<Vec<crate::hami::DeviceInfo>, String> {
                let mut values = Vec::with_capacity(texts.len());
                for (resource, text) in inventory.resources.iter().zip(&texts) {
                    values.push(match text {
                        None => None,
                        Some(t) => Some(crate::engine::quantity::parse_whole(t).map_err(|e| {
                            format!("capacity {resource}: {t:?} is not a whole number ({e})")
                        })?),
                    });
                }
                let made = (inventory.devices)(&values)
                    .map_err(|e| format!("{} from capacity: {e}", kind.noun))?;
                // Devices on a ring share one network group (Grouping::Windows).
                let network = is_ring(node, inventory).then_some(0);
                Ok(made
                    .into_iter()
                    .enumerate()
                    .map(|(i, d)| {
                        let mut info = vendor_device(
                            format!("{name}-{}-{i}", inventory.id_word),
                            u32::try_from(i).unwrap_or(u32::MAX),
                            (d.slots, d.mem_mib, d.cores),
                            d.device_type,
                        );
                        info.network_id = network;
                        info
                    })
                    .collect())
            };
            Some((id, read()))
        })
        .collect()
}

/// The devices of a register in a vendor's own format, as HAMi's; each
/// device's number for its plugin kept in `profiles`.
fn own_devices(
    own: &devices::OwnInventory,
    profiles: &mut crate::engine::profiles::NodeProfiles,
) -> Vec<crate::hami::DeviceInfo> {
    own.devices
        .iter()
        .map(|d| {
            profiles.minors.push((d.id.clone(), d.minor.clone()));
            let mut info = vendor_device(
                d.id.clone(),
                d.index,
                (d.slots, d.mem_mib, d.cores),
                d.device_type,
            );
            info.numa = d.numa;
            info.health = d.healthy;
            info.mode = d.mode.clone();
            info.network_id = d.network;
            info
        })
        .collect()
}

/// A healthy device a vendor's plugin makes known otherwise than by
/// HAMi's register (node capacity, its own format): its id, index,
/// slots, MiB and cores, and type; NUMA node 0, no mode, no network.
fn vendor_device(
    id: String,
    index: u32,
    (slots, mem_mib, cores): (u32, u32, u32),
    device_type: &str,
) -> crate::hami::DeviceInfo {
    crate::hami::DeviceInfo {
        id,
        count: slots,
        devmem: mem_mib,
        devcore: cores,
        device_type: device_type.to_string(),
        numa: 0,
        health: true,
        index,
        mode: String::new(),
        mig_profiles: Vec::new(),
        network_id: None,
        card: None,
    }
}

/// In die mode (the first device registers `custominfo.DeviceStrategy`
/// `die`, as HAMi judges it on its first candidate; Vastai,
/// hami-vendors.md 13.2, 13.5), each die's card (`AIC`) is its network
/// group, numbered by first appearance, so that a container's dies come
/// from the largest card first (`Grouping::NetworkGroups`) and nodes rank
/// by the share of a container's dies on one card
/// (`NodePreference::NetworkShare`).
fn dies_grouped_by_card(devices: &mut [crate::hami::DeviceInfo]) {
    if devices.first().is_none_or(|d| d.card.is_none()) {
        return;
    }
    let mut cards: Vec<String> = Vec::new();
    for d in devices.iter_mut() {
        let card = d.card.clone().unwrap_or_default();
        let group = match cards.iter().position(|c| *c == card) {
            Some(i) => i,
            None => {
                cards.push(card);
                cards.len() - 1
            }
        };
        d.network_id = i64::try_from(group).ok();
    }
}

/// The tables of each kind on `node` whose plugin writes them
/// (`devices::NodePreference::SizeTables`; Metax GPU, hami-vendors.md
/// 5.2), read from the annotations `get` gives. A table that cannot be
/// read is left out with a warning: the node is still placed, ranked as
/// one without it.
fn size_tables<'a>(
    node: &Node,
    get: &impl Fn(&str) -> Option<&'a str>,
    warnings: &mut Vec<NodeError>,
) -> Vec<(KindId, crate::engine::size_tables::SizeTables)> {
    let mut out = Vec::new();
    for (kind, rule) in devices::kinds().map(|(id, k)| (id, k.node_preference)) {
        let devices::NodePreference::SizeTables { losses, scores } = rule else {
            continue;
        };
        if !node.gpus.iter().any(|g| g.kind == kind) {
            continue;
        }
        let mut read = |key: &str| match get(key) {
            None => Default::default(),
            Some(text) => {
                crate::engine::size_tables::decode_size_table(text).unwrap_or_else(|problem| {
                    warnings.push(NodeError::Capacity {
                        node: node.name.clone(),
                        problem: format!(
                            "annotation {key}: {problem}; the node is ranked as one without it"
                        ),
                    });
                    Default::default()
                })
            }
        };
        let tables = crate::engine::size_tables::SizeTables {
            losses: read(losses),
            scores: read(scores),
        };
        if !tables.is_empty() {
            out.push((kind, tables));
        }
    }
    out
}

/// The engine's view of a node: the GPUs of every device kind that
/// registered it (for NVIDIA `hami.io/node-nvidia-register`, pair scores
/// from `hami.io/node-nvidia-score`), cordoned GPUs from
/// `hami.io/device-cordon`. Pair scores naming unknown GPUs are ignored.
///
/// Only an unreadable inventory fails the node. An unreadable cordon list
/// cordons every GPU of the node (the safe reading of "some GPUs must not be
/// used"), and unreadable pair scores are dropped; both come back as
/// warnings beside the node.
pub fn node_from_k8s(node: &K8sNode) -> Result<(Node, Vec<NodeError>), NodeError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let annotations = node.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let wrap = |source| NodeError::Annotation {
        node: name.clone(),
        source,
    };
    let registered: Vec<(KindId, &str)> = devices::kinds()
        .filter(|(_, kind)| !kind.register_key.is_empty())
        .filter_map(|(id, kind)| Some((id, get(kind.register_key)?)))
        .collect();
    let mut warnings = Vec::new();
    let mut inventories = Vec::new();
    let mut profiles = crate::engine::profiles::NodeProfiles::default();
    for (kind, register) in registered {
        let key = kind.kind().register_key;
        if let Some(read) = kind.kind().own_register {
            // A vendor's own format: unreadable, its devices are left out
            // and the node's other kinds still placed.
            match read(&name, register) {
                Ok(own) => {
                    let devices = own_devices(&own, &mut profiles);
                    profiles.profiles.extend(own.profiles);
                    inventories.push((kind, devices));
                }
                Err(problem) => warnings.push(NodeError::Capacity {
                    node: name.clone(),
                    problem: format!("annotation {key}: {problem}"),
                }),
            }
            continue;
        }
        inventories.push((
            kind,
            decode_node_devices(register).map_err(|e| wrap(e.in_annotation(key)))?,
        ));
    }
    for (kind, devices) in capacity_inventories(node) {
        match devices {
            Ok(devices) => inventories.push((kind, devices)),
            Err(e) => warnings.push(NodeError::Capacity {
                node: name.clone(),
                problem: e,
            }),
        }
    }
    if inventories.is_empty() && warnings.is_empty() {
        return Err(NodeError::Unregistered {
            node: name,
            annotation: devices::kinds()
                .map(|(_, k)| k.register_key)
                .filter(|k| !k.is_empty())
                .collect::<Vec<_>>()
                .join(" or "),
        });
    }
    let cordon = match get(keys::DEVICE_CORDON).map(decode_device_cordon) {
        None => Ok(Default::default()),
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => {
            warnings.push(wrap(e));
            Err(())
        }
    };
    let mut gpus = Vec::new();
    for (kind, mut devices) in inventories {
        // The 7-field legacy form has no index (every device reads as 0):
        // then the registration order is the index, so that "lowest index
        // wins" means what the device plugin listed first.
        let mut indexes: Vec<u32> = devices.iter().map(|d| d.index).collect();
        indexes.sort_unstable();
        indexes.dedup();
        if indexes.len() < devices.len() {
            for (i, d) in devices.iter_mut().enumerate() {
                d.index = u32::try_from(i).unwrap_or(u32::MAX);
            }
        }
        dies_grouped_by_card(&mut devices);
        let chip = kind.kind().templates;
        // An Ascend node says whether its plugin splits softly; a node
        // that does not say is read at placement (config
        // `vnpus.hamiVnpuCore`). Soft-split cores are percent of the NPU,
        // so every Ascend NPU offers 100; template pods take none (2.5).
        let node_mode = chip.map(|c| match get(c.node_mode_annotation).map(str::trim) {
            Some("true") => crate::devices::ascend::HAMI_CORE,
            Some(_) => crate::devices::ascend::TEMPLATE,
            None => "",
        });
        gpus.extend(devices.into_iter().map(|d| {
            let mut g = Gpu::new(
                d.id,
                d.index,
                d.device_type,
                Usage {
                    slices: 0,
                    unreserved: 0,
                    unreadable: 0,
                    // Kunlun's plugin registers a split count HAMi does
                    // not read (8.8): a card holds as many of the
                    // smallest size as its memory does.
                    slots: match chip {
                        Some(c) if c.slots_from_memory => c
                            .templates
                            .iter()
                            .map(|t| d.devmem / t.memory.max(1))
                            .max()
                            .unwrap_or(d.count)
                            .max(1),
                        _ => d.count,
                    },
                    mem_mib: d.devmem,
                    cores: if chip.is_some() { 100 } else { d.devcore },
                },
            );
            g.kind = kind;
            g.numa = d.numa;
            g.healthy = d.health;
            g.set_network(d.network_id);
            match node_mode {
                Some(mode) => g.set_mode(mode, Vec::new()),
                None => g.set_mode(d.mode, d.mig_profiles),
            }
            g.cordoned = cordon.as_ref().map_or(true, |c| c.contains(&g.uuid));
            g
        }));
    }
    let mut out = Node::new(name.clone(), gpus);
    if !profiles.profiles.is_empty() {
        out.set_profiles(profiles);
    }
    for (kind, tables) in size_tables(&out, &get, &mut warnings) {
        out.set_size_tables(kind, tables);
    }
    for (key, scores) in devices::kinds().filter_map(|(_, k)| {
        let key = k.score_key?;
        Some((key, get(key)?))
    }) {
        match decode_pair_scores(scores).map_err(|e| e.in_annotation(key)) {
            Ok(scores) => {
                for (a, b, s) in scores.iter() {
                    out.set_pair_score(a, b, s);
                }
            }
            Err(e) => warnings.push(wrap(e)),
        }
    }
    Ok((out, warnings))
}

/// The pod's namespace: `default` when the object names none (as the API
/// server would default it).
pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// The pod's own name: `generateName*` for a pod that has no name yet.
pub fn pod_own_name(pod: &Pod) -> std::borrow::Cow<'_, str> {
    match (
        pod.metadata.name.as_deref(),
        pod.metadata.generate_name.as_deref(),
    ) {
        (Some(name), _) if !name.is_empty() => name.into(),
        (_, Some(prefix)) => format!("{prefix}*").into(),
        _ => "(unnamed)".into(),
    }
}

/// `namespace/name` (namespace `default` when absent; `generateName*`
/// for a pod that has no name yet).
pub fn pod_name(pod: &Pod) -> String {
    format!("{}/{}", pod_namespace(pod), pod_own_name(pod))
}

/// `spec.priority`, 0 when unset.
pub fn pod_priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Whether the pod has finished (phase Succeeded or Failed): it holds no
/// GPUs any more.
pub fn pod_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// What ResourceQuota scopes see of a pod (Kubernetes' quota evaluator):
/// its priority class, whether it has an active deadline, whether its QoS
/// class is BestEffort (`status.qosClass` once set, else computed from CPU
/// and memory requests and limits, pod-level ones first), whether a pod
/// (anti-)affinity term names other namespaces.
pub fn pod_scope_facts(pod: &Pod) -> crate::engine::ScopeFacts {
    use crate::engine::quantity::is_positive;
    let spec = pod.spec.as_ref();
    let positive = |list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >| {
        list.is_some_and(|l| {
            l.iter()
                .any(|(k, q)| (k == "cpu" || k == "memory") && is_positive(&q.0))
        })
    };
    let best_effort = match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some(class) => class == "BestEffort",
        None => match spec.and_then(|s| s.resources.as_ref()) {
            Some(r) => !positive(r.requests.as_ref()) && !positive(r.limits.as_ref()),
            None => !spec.is_some_and(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .filter_map(|c| c.resources.as_ref())
                    .any(|r| positive(r.requests.as_ref()) || positive(r.limits.as_ref()))
            }),
        },
    };
    let cross_namespace_affinity = spec.and_then(|s| s.affinity.as_ref()).is_some_and(|a| {
        let term = |t: &k8s_openapi::api::core::v1::PodAffinityTerm| {
            t.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || t.namespace_selector.is_some()
        };
        let terms = |required: Option<&Vec<k8s_openapi::api::core::v1::PodAffinityTerm>>,
                     preferred: Option<
            &Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>,
        >| {
            required.into_iter().flatten().any(term)
                || preferred
                    .into_iter()
                    .flatten()
                    .any(|w| term(&w.pod_affinity_term))
        };
        a.pod_affinity.as_ref().is_some_and(|p| {
            terms(
                p.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                p.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
            )
        }) || a.pod_anti_affinity.as_ref().is_some_and(|p| {
            terms(
                p.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                p.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
            )
        })
    });
    crate::engine::ScopeFacts {
        priority_class: spec
            .and_then(|s| s.priority_class_name.clone())
            .filter(|c| !c.is_empty()),
        terminating: spec
            .and_then(|s| s.active_deadline_seconds)
            .is_some_and(|d| d >= 0),
        best_effort,
        cross_namespace_affinity,
    }
}

/// Whether the pod is bound and still waits for its device plugin: `Pending`
/// (or no phase yet) with `hami.io/bind-phase: allocating`. The kubelet has
/// not admitted it, and when it does, HAMi's device plugin finds it through
/// the node lock it holds (HAMi master #3127).
pub fn pod_awaiting_allocation(pod: &Pod) -> bool {
    let pending = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        None | Some("Pending")
    );
    pending
        && pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::hami::keys::BIND_PHASE))
            .is_some_and(|phase| phase == "allocating")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pod_annotations::pod_allocation;
    use crate::devices::nvidia;
    use crate::engine::ContainerKind;

    /// What quota scopes see of a real Pod, field by field.
    #[test]
    fn scope_facts_as_the_quota_controller_reads_them() {
        let facts = |v: serde_json::Value| pod_scope_facts(&serde_json::from_value(v).unwrap());
        let gpu_only = serde_json::json!({"spec": {"containers": [{"name": "c",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
        let f = facts(gpu_only.clone());
        assert!(f.best_effort && !f.terminating && !f.cross_namespace_affinity);
        assert_eq!(f.priority_class, None);
        let mut p = gpu_only.clone();
        p["spec"]["initContainers"] = serde_json::json!([{"name": "i",
            "resources": {"requests": {"memory": "1Mi"}}}]);
        p["spec"]["priorityClassName"] = serde_json::json!("high");
        p["spec"]["activeDeadlineSeconds"] = serde_json::json!(0);
        let f = facts(p.clone());
        assert!(!f.best_effort && f.terminating);
        assert_eq!(f.priority_class.as_deref(), Some("high"));
        // Zero CPU is no CPU; the status's class wins once set.
        let mut p = gpu_only.clone();
        p["spec"]["containers"][0]["resources"]["requests"] = serde_json::json!({"cpu": "0"});
        assert!(facts(p.clone()).best_effort);
        p["status"] = serde_json::json!({"qosClass": "Burstable"});
        assert!(!facts(p).best_effort);
        // Pod-level resources decide when set.
        let mut p = gpu_only.clone();
        p["spec"]["resources"] = serde_json::json!({"limits": {"cpu": "1"}});
        assert!(!facts(p).best_effort);
        for term in [
            serde_json::json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "k", "namespaces": ["other"]}]}}),
            serde_json::json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "k", "namespaceSelector": {}}}]}}),
        ] {
            let mut p = gpu_only.clone();
            p["spec"]["affinity"] = term;
            assert!(facts(p).cross_namespace_affinity);
        }
        let mut p = gpu_only;
        p["spec"]["affinity"] = serde_json::json!({"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "k", "namespaces": []}]}});
        assert!(!facts(p).cross_namespace_affinity);
    }

    /// A real Pod's QoS class and CPU and memory reach the plan.
    #[test]
    fn pod_plan_reads_the_numa_request() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {
                "initContainers": [{"name": "setup", "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi"}}}],
                "containers": [{"name": "train", "resources": {
                    "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
                    "requests": {"cpu": "8000m", "memory": "32Gi", "nvidia.com/gpu": "1"}}}]
            }
        }))
        .unwrap();
        let plan = pod_plan(&pod, &Config::default()).unwrap();
        assert!(plan.numa.guaranteed);
        assert_eq!(plan.numa.containers.len(), plan.request.containers.len());
        assert_eq!(plan.numa.containers[1].cpu_milli, 8000);
        assert_eq!(plan.numa.containers[1].memory_bytes, 32 << 30);
    }

    fn k8s_node(annotations: &[(&str, &str)]) -> K8sNode {
        let mut n = K8sNode::default();
        n.metadata.name = Some("n1".into());
        n.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n
    }

    #[test]
    fn legacy_seven_field_devices_are_indexed_in_registration_order() {
        let (n, _) = node_from_k8s(&k8s_node(&[(
            nvidia::NODE_REGISTER,
            "GPU-b,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:GPU-a,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:",
        )]))
        .unwrap();
        let order: Vec<(&str, u32)> = n.gpus.iter().map(|g| (g.uuid.as_str(), g.index)).collect();
        assert_eq!(order, [("GPU-b", 0), ("GPU-a", 1)]);
    }

    #[test]
    fn cordon_scores_and_errors() {
        let (n, warnings) = node_from_k8s(&k8s_node(&[
            (
                nvidia::NODE_REGISTER,
                r#"[{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA T4","health":true},{"id":"GPU-1","index":1,"count":10,"devmem":8192,"devcore":100,"type":"NVIDIA T4","health":false}]"#,
            ),
            (keys::DEVICE_CORDON, "GPU-1"),
            (nvidia::NODE_SCORE, r#"[{"uuid":"GPU-0","score":{"GPU-1":60,"GPU-9":5}}]"#),
        ]))
        .unwrap();
        assert!(warnings.is_empty());
        assert!(!n.gpus[0].cordoned && n.gpus[1].cordoned);
        assert!(n.gpus[0].healthy && !n.gpus[1].healthy);
        assert_eq!(n.pair_score(1, 0), 60);

        // A garbled cordon list cordons every GPU; garbled scores are dropped.
        let register = r#"[{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA T4","health":true}]"#;
        let (n, warnings) = node_from_k8s(&k8s_node(&[
            (nvidia::NODE_REGISTER, register),
            (keys::DEVICE_CORDON, "GPU-0 GPU-1"),
            (nvidia::NODE_SCORE, "{"),
        ]))
        .unwrap();
        assert!(n.gpus[0].cordoned);
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings[0].to_string().contains(keys::DEVICE_CORDON),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[1].to_string().contains(nvidia::NODE_SCORE),
            "{}",
            warnings[1]
        );

        let e = node_from_k8s(&k8s_node(&[])).unwrap_err();
        assert!(e.to_string().contains("has not registered"), "{e}");
        let e = node_from_k8s(&k8s_node(&[(nvidia::NODE_REGISTER, "[{\"id\":")])).unwrap_err();
        assert!(e.to_string().contains(nvidia::NODE_REGISTER), "{e}");
    }

    fn pod(phase: &str, annotations: &[(&str, &str)], containers: usize) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            init_containers: Some(vec![Default::default()]),
            containers: vec![Default::default(); containers],
            ..Default::default()
        });
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    #[test]
    fn pod_allocations() {
        let ann = [
            (keys::VGPU_NODE, "n1"),
            (
                keys::VGPU_DEVICES_ALLOCATED,
                "GPU-0,NVIDIA,100,10:;GPU-0,NVIDIA,300,5:;",
            ),
        ];
        // gpugate's shape: one entry per container, the first is the init container.
        let a = pod_allocation(&pod("Running", &ann, 1)).unwrap().unwrap();
        assert_eq!(a.node, "n1");
        assert_eq!(a.kinds, [ContainerKind::Init, ContainerKind::App]);
        // HAMi's shape (entries only for GPU containers): all counted as app.
        let a = pod_allocation(&pod("Pending", &ann, 2)).unwrap().unwrap();
        assert!(a.kinds.is_empty());
        assert_eq!(pod_allocation(&pod("Succeeded", &ann, 1)).unwrap(), None);
        assert_eq!(pod_allocation(&pod("Failed", &ann, 1)).unwrap(), None);
        assert_eq!(pod_allocation(&pod("Running", &[], 1)).unwrap(), None);
        let bad = [
            (keys::VGPU_NODE, "n1"),
            (keys::VGPU_DEVICES_ALLOCATED, "GPU-0,NVIDIA,x,1:;"),
        ];
        let e = pod_allocation(&pod("Running", &bad, 1)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("pod default/p: annotation hami.io/vgpu-devices-allocated"),
            "{e}"
        );
    }
}
