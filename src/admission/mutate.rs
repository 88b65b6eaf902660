//! The mutating webhook's decision (hami-compat.md 2.2 and 2.3), as a pure
//! function from the raw Pod to JSON Patch operations.
//!
//! The patch is the difference between the raw object kube-apiserver sent
//! and the same JSON with gpugate's edits, so fields gpugate does not know
//! are never touched, the patch is minimal, and a pod that already carries
//! the edits yields no operations (safe with `reinvocationPolicy: IfNeeded`).

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};

use crate::config::Config;
use crate::engine::request::ContainerResources;

use super::policy::{NamespacePolicy, PolicyDefaults, policy_for};
use super::validate::placement_denial;
use super::{Denial, DenyReason};
use crate::hami::keys;

/// What the mutating webhook answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Mutation {
    /// Admit with these operations (possibly none).
    Patch(Vec<Value>),
    /// Left alone: not gpugate's pod (another scheduler).
    Skip(&'static str),
    /// Refuse, with a message for the pod's author.
    Deny(Denial),
    /// The object could not be read (HTTP 400 in the status).
    Invalid(String),
}

const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Decides the mutation of a Pod given as raw JSON, in `namespace` (the
/// review's; the pod's own or `default` when absent).
pub fn mutate_pod(raw: &Value, config: &Config, namespace: Option<&str>) -> Mutation {
    let pod: Pod = match serde_json::from_value(raw.clone()) {
        Ok(p) => p,
        Err(e) => return Mutation::Invalid(format!("cannot read the Pod: {e}")),
    };
    let Some(spec) = pod.spec.as_ref() else {
        return Mutation::Deny(Denial::new(DenyReason::NoContainers, "pod has no spec"));
    };
    if spec.containers.is_empty() {
        return Mutation::Deny(Denial::new(
            DenyReason::NoContainers,
            "pod has no containers",
        ));
    }
    let ours = config.scheduler.name.as_str();
    match spec.scheduler_name.as_deref().unwrap_or("") {
        "" => {}
        n if n == ours => {}
        DEFAULT_SCHEDULER if config.scheduler.force_overwrite_default_scheduler => {}
        _ => return Mutation::Skip("pod already has a different scheduler assigned"),
    }

    let nv = &config.nvidia;
    let namespace = namespace
        .or(pod.metadata.namespace.as_deref())
        .unwrap_or("default");
    let policy = policy_for(&config.namespace_policies, namespace);
    let mut mutated = raw.clone();
    let mut uses_gpus = false;
    let groups = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", spec.containers.as_slice()),
    ];
    for (field, containers) in groups {
        for (i, container) in containers.iter().enumerate() {
            let read = ContainerResources::read(container, nv)
                .and_then(|res| res.resolve(nv).map(|gpu| (res, gpu)));
            let (mut res, gpu) = match read {
                Ok(r) => r,
                Err(e) => {
                    return Mutation::Deny(Denial::new(DenyReason::InvalidRequest, e.to_string()));
                }
            };
            let Some(target) = container_value(&mut mutated, field, i) else {
                return Mutation::Invalid(format!("spec.{field}[{i}] is not an object"));
            };
            if gpu.is_some() {
                uses_gpus = true;
                if let Some(p) = policy {
                    apply_policy_defaults(&mut res, target, &p.defaults, nv);
                }
                let injected = res.webhook_defaults(nv);
                if let Some(count) = injected.count {
                    set_limit(target, &nv.resource_count_name, count.to_string());
                }
                let added_cores = injected.cores.or_else(|| {
                    (res.cores.is_none() && nv.default_cores > 0).then_some(nv.default_cores)
                });
                if let Some(cores) = added_cores {
                    set_limit(target, &nv.resource_core_name, cores.to_string());
                }
                // Default memory is written in gpumem's unit (MiB / memoryFactor)
                // when it divides evenly, except for whole GPUs (cores 100),
                // where HAMi leaves memory to the scheduler; either way the
                // scheduler arrives at the same MiB. Deciding on the final
                // cores keeps a second pass from adding anything.
                let final_cores = res.cores.or(added_cores.map(u64::from));
                if res.memory.is_none()
                    && res.percentage.is_none()
                    && nv.default_memory > 0
                    && final_cores != Some(100)
                    && nv.default_memory % u64::from(nv.memory_factor) == 0
                {
                    let units = nv.default_memory / u64::from(nv.memory_factor);
                    set_limit(target, &nv.resource_memory_name, units.to_string());
                }
                if let Some(priority) = limit_text(container, &nv.resource_priority_name) {
                    set_env(target, "CUDA_TASK_PRIORITY", &priority);
                }
            } else if nv.overwrite_env {
                set_env(target, "NVIDIA_VISIBLE_DEVICES", "none");
            }
            if !nv.gpu_core_policy.is_empty() && nv.gpu_core_policy != "default" {
                set_env(target, "GPU_CORE_UTILIZATION_POLICY", &nv.gpu_core_policy);
            }
        }
    }
    if uses_gpus {
        if let Some(denial) = placement_denial(&pod, config) {
            return Mutation::Deny(denial);
        }
        if let Some(p) = policy {
            set_policy_annotations(&mut mutated, p);
        }
        if let Some(spec) = mutated.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("schedulerName".into(), Value::from(ours));
            if !nv.runtime_class_name.is_empty() && !spec.contains_key("runtimeClassName") {
                spec.insert(
                    "runtimeClassName".into(),
                    Value::from(nv.runtime_class_name.as_str()),
                );
            }
        }
    }
    let patch = json_patch::diff(raw, &mutated);
    match serde_json::to_value(&patch) {
        Ok(Value::Array(ops)) => Mutation::Patch(ops),
        _ => Mutation::Patch(Vec::new()),
    }
}

/// Fills what the container leaves unset from the namespace policy, both in
/// the pod and in `res` (so the exclusive-GPU rule sees the defaults).
fn apply_policy_defaults(
    res: &mut ContainerResources,
    container: &mut Map<String, Value>,
    defaults: &PolicyDefaults,
    nv: &crate::config::NvidiaConfig,
) {
    if res.memory.is_none() && res.percentage.is_none() {
        if let Some(m) = defaults.gpumem {
            res.memory = Some(m);
            set_limit(container, &nv.resource_memory_name, m.to_string());
        } else if let Some(p) = defaults.gpumem_percentage {
            res.percentage = Some(u64::from(p));
            set_limit(
                container,
                &nv.resource_memory_percentage_name,
                p.to_string(),
            );
        }
    }
    if res.cores.is_none()
        && let Some(c) = defaults.gpucores
    {
        res.cores = Some(u64::from(c));
        set_limit(container, &nv.resource_core_name, c.to_string());
    }
}

/// The policy's placement and model annotations, where the pod sets none.
fn set_policy_annotations(pod: &mut Value, policy: &NamespacePolicy) {
    let mut wanted: Vec<(&str, String)> = Vec::new();
    if let Some(p) = policy.defaults.node_scheduler_policy {
        wanted.push((keys::NODE_SCHEDULER_POLICY, p.to_string()));
    }
    if let Some(p) = policy.defaults.gpu_scheduler_policy {
        wanted.push((keys::GPU_SCHEDULER_POLICY, p.to_string()));
    }
    if !policy.limits.allowed_models.is_empty() {
        wanted.push((keys::USE_GPU_TYPE, policy.limits.allowed_models.join(",")));
    }
    if !policy.limits.denied_models.is_empty() {
        wanted.push((keys::NOUSE_GPU_TYPE, policy.limits.denied_models.join(",")));
    }
    if wanted.is_empty() {
        return;
    }
    let Some(metadata) = pod.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(annotations) = object_at(metadata, "annotations") else {
        return;
    };
    for (key, value) in wanted {
        annotations
            .entry(key.to_string())
            .or_insert(Value::from(value));
    }
}

/// The container object at `spec.<field>[i]` of the raw pod.
fn container_value<'a>(
    pod: &'a mut Value,
    field: &str,
    i: usize,
) -> Option<&'a mut Map<String, Value>> {
    pod.get_mut("spec")?
        .get_mut(field)?
        .get_mut(i)?
        .as_object_mut()
}

fn object_at<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let entry = parent
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

/// `resources.limits[name] = value` unless present in limits already.
fn set_limit(container: &mut Map<String, Value>, name: &str, value: String) {
    if let Some(limits) = object_at(container, "resources").and_then(|r| object_at(r, "limits")) {
        limits.entry(name.to_string()).or_insert(Value::from(value));
    }
}

/// Appends `name=value` to the container's env unless `name` is set.
fn set_env(container: &mut Map<String, Value>, name: &str, value: &str) {
    let env = container
        .entry("env".to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if env.is_null() {
        *env = Value::Array(Vec::new());
    }
    if let Some(list) = env.as_array_mut()
        && !list
            .iter()
            .any(|e| e.get("name").and_then(Value::as_str) == Some(name))
    {
        list.push(serde_json::json!({"name": name, "value": value}));
    }
}

/// A container's limit as text, when it is a whole number.
fn limit_text(container: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    let q = container.resources.as_ref()?.limits.as_ref()?.get(name)?;
    crate::engine::quantity::parse_whole(&q.0)
        .ok()
        .map(|v| v.to_string())
}
