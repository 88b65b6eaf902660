//! The mutating webhook's decision (hami-compat.md 2.2 and 2.3), as a pure
//! function from the pod to JSON Patch operations.
//!
//! The patch only adds what the pod lacks (see [`super::patch`]), so fields
//! gpugate does not know are never touched, the patch is minimal, and a pod
//! that already carries the edits yields no operations (safe with
//! `reinvocationPolicy: IfNeeded`).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::config::{Config, DeviceConfig};
use crate::devices::DeviceKind;
use crate::engine::request::{ContainerResources, ContainerSpec as _};

use super::lean::Slot;
use super::patch::{ContainerEdits, PodEdits};
use super::pod::{ContainerView, PodView};
use super::validate::placement_denial;
use super::{Denial, DenyReason};
use crate::cluster::ClusterView;
use crate::config::namespace_policy::{NamespacePolicy, PolicyDefaults, policy_for_namespace};
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

/// Decides the mutation of a Pod given as a parsed JSON value (tests and
/// tools; the webhook reads the request body with [`mutate`] directly).
pub fn mutate_pod(raw: &Value, config: &Config, namespace: Option<&str>) -> Mutation {
    PodView::judge_value(
        raw,
        |pod| mutate(pod, config, namespace, None),
        Mutation::Invalid,
    )
}

/// Decides the mutation of a Pod in `namespace` (the review's; the pod's
/// own or `default` when absent).
/// With the cluster view, namespace policies may select by labels.
pub fn mutate(
    pod: &PodView<'_>,
    config: &Config,
    namespace: Option<&str>,
    cluster: Option<&ClusterView>,
) -> Mutation {
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
    match spec.scheduler_name.get().map_or("", |n| n.as_ref()) {
        "" => {}
        n if n == ours => {}
        DEFAULT_SCHEDULER if config.scheduler.force_overwrite_default_scheduler => {}
        _ => return Mutation::Skip("pod already has a different scheduler assigned"),
    }

    let nv = config.device_config_for(spec.all_containers());
    if config.left_to_another_scheduler(nv, spec.all_containers()) {
        return Mutation::Skip(
            "pod asks for devices of a kind gpugate's config leaves to another scheduler",
        );
    }
    let namespace = namespace.or(pod.namespace()).unwrap_or("default");
    let labels = cluster.and_then(|v| v.namespace_labels(namespace));
    // Namespace policies speak of HAMi-core slices (docs/configuration.md):
    // other kinds' pods are left as written.
    let policy = policy_for_namespace(&config.namespace_policies, namespace, labels)
        .filter(|_| nv.kind.kind().hami_core);
    let mut edits = PodEdits::default();
    let mut uses_gpus = false;
    let mut rule_annotations = Vec::new();
    // A pod may ask for several kinds (an NVIDIA GPU and an Ascend NPU):
    // each kind's edits, the first kind's with the namespace policy.
    let asked = config.asked_device_configs(spec.all_containers());
    let kinds: Vec<(&DeviceConfig, Option<&NamespacePolicy>, bool)> = asked
        .iter()
        .enumerate()
        .map(|(i, cfg)| {
            let soft = crate::engine::templates::soft_split(cfg.kind, pod);
            (*cfg, policy.filter(|_| i == 0), soft)
        })
        .collect();
    for (init, containers) in [(true, &spec.init_containers), (false, &spec.containers)] {
        for (i, container) in containers.iter().enumerate() {
            let mut edit = ContainerOutcome::default();
            for &(cfg, policy, soft) in &kinds {
                match container_edits(pod, container, cfg, policy, soft) {
                    Ok(more) => edit.merge(more),
                    Err(refusal) => return refusal,
                }
            }
            uses_gpus |= edit.uses_gpus;
            rule_annotations.extend(edit.annotations);
            if !edit.edits.is_empty() {
                let by_index = if init {
                    &mut edits.init_containers
                } else {
                    &mut edits.containers
                };
                by_index.insert(i, edit.edits);
            }
        }
    }
    if uses_gpus {
        if let Some(denial) = placement_denial(pod, config) {
            return Mutation::Deny(denial);
        }
        if let Some(p) = policy {
            edits.annotations = policy_annotations(pod, p, nv.kind.kind());
        }
        // A kind's rule's annotations (HAMi's webhook sets them).
        for (key, value) in rule_annotations {
            let same = pod
                .annotations()
                .and_then(|a| a.get(key))
                .is_some_and(|v| *v == *value);
            if !same {
                edits.annotations.insert(key, value);
            }
        }
        if spec.scheduler_name.get().is_none_or(|n| n != ours) {
            edits.scheduler_name = Some(ours);
        }
        let class = asked
            .iter()
            .map(|c| &c.runtime_class_name)
            .find(|c| !c.is_empty());
        if let Some(class) = class.filter(|_| matches!(spec.runtime_class_name, Slot::Absent)) {
            edits.runtime_class_name = Some(class);
        }
    }
    Mutation::Patch(edits.to_ops(pod))
}

/// One container's additions, and whether it asks for GPUs.
#[derive(Default)]
struct ContainerOutcome<'c> {
    edits: ContainerEdits<'c>,
    uses_gpus: bool,
    /// Pod annotations a kind's webhook rule writes.
    annotations: Vec<(&'static str, String)>,
}

impl<'c> ContainerOutcome<'c> {
    /// Adds another kind's additions to the same container.
    fn merge(&mut self, other: ContainerOutcome<'c>) {
        self.uses_gpus |= other.uses_gpus;
        self.edits.limits.extend(other.edits.limits);
        self.edits.requests.extend(other.edits.requests);
        self.edits.env.extend(other.edits.env);
        self.edits.env_len = self.edits.env_len.max(other.edits.env_len);
        self.annotations.extend(other.annotations);
    }
}

/// What one container gets; a refusal (`Deny` or `Invalid`) as the error.
fn container_edits<'c>(
    pod: &PodView<'_>,
    container: &ContainerView<'_>,
    nv: &'c DeviceConfig,
    policy: Option<&NamespacePolicy>,
    soft: bool,
) -> Result<ContainerOutcome<'c>, Mutation> {
    let read = ContainerResources::read(container, nv)
        .and_then(|res| res.resolve(nv).map(|gpu| (res, gpu)));
    let (mut res, gpu) =
        read.map_err(|e| Mutation::Deny(Denial::new(DenyReason::InvalidRequest, e.to_string())))?;
    let kind = nv.kind.kind();
    let env = &kind.env;
    let mut target = Target {
        container,
        env_names: None,
        edits: ContainerEdits::default(),
    };
    if kind.templates.is_some() {
        template_edits(&mut target, &res, gpu.as_ref(), nv, soft)?;
    }
    let mut annotations = Vec::new();
    if let (Some(rule), Some(_)) = (kind.webhook_rule, gpu.as_ref()) {
        rule_edits(pod, &mut target, &mut annotations, rule, &res, nv)?;
    }
    if !kind.hami_core {
        // HAMi's webhook writes nothing else into such a kind's containers
        // (hami-vendors.md, each backend's "Webhook").
        return Ok(ContainerOutcome {
            edits: target.edits,
            uses_gpus: gpu.is_some(),
            annotations,
        });
    }
    if gpu.is_some() {
        if let Some(p) = policy {
            apply_policy_defaults(&mut res, &mut target, &p.defaults, nv);
        }
        let injected = res.webhook_defaults(nv);
        if let Some(count) = injected.count {
            target.set_limit(&nv.resource_count_name, count.to_string());
        }
        let added_cores = injected
            .cores
            .or_else(|| (res.cores.is_none() && nv.default_cores > 0).then_some(nv.default_cores));
        if let Some(cores) = added_cores {
            target.set_limit(&nv.resource_core_name, cores.to_string());
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
            && nv
                .default_memory
                .is_multiple_of(u64::from(nv.memory_factor))
        {
            let units = nv.default_memory / u64::from(nv.memory_factor);
            target.set_limit(&nv.resource_memory_name, units.to_string());
        }
        if let Some(priority) = limit_text(container, &nv.resource_priority_name) {
            target.set_env(env.task_priority, priority)?;
        }
    } else if nv.overwrite_env {
        target.set_env(env.hide_devices.0, env.hide_devices.1.into())?;
    }
    if !nv.gpu_core_policy.is_empty() && nv.gpu_core_policy != "default" {
        target.set_env(env.core_policy, nv.gpu_core_policy.clone())?;
    }
    Ok(ContainerOutcome {
        edits: target.edits,
        uses_gpus: gpu.is_some(),
        annotations,
    })
}

/// A chip split into templates (hami-vendors.md 2.4): the memory the
/// chip gives the container, written into its limits and requests as
/// HAMi's webhook writes it (the template's, or the whole NPU's), and a
/// super pod's count of 1 made 2; a container without the chip's devices
/// gets `ASCEND_VISIBLE_DEVICES=""` under `overwriteEnv`. A request the
/// chip cannot split is refused with the reason.
fn template_edits<'c>(
    target: &mut Target<'_, '_, 'c>,
    res: &ContainerResources,
    gpu: Option<&crate::engine::GpuRequest>,
    nv: &'c DeviceConfig,
    soft: bool,
) -> Result<(), Mutation> {
    let Some(req) = gpu else {
        if nv.overwrite_env && res.count.is_none() {
            let (name, value) = nv.kind.kind().env.hide_devices;
            target.set_env(name, value.to_string())?;
        }
        return Ok(());
    };
    let split = crate::engine::templates::split(req, nv, soft, &res.container)
        .map_err(|e| Mutation::Deny(Denial::new(DenyReason::InvalidRequest, e.to_string())))?;
    if split.count != req.count {
        let requested = target.container.request(&nv.resource_count_name).is_some();
        target.put_quantity(&nv.resource_count_name, u64::from(split.count), requested);
    }
    let mib = split.mem_on(0);
    let factor = u64::from(nv.memory_factor.max(1));
    let writes = res.memory.is_some()
        || nv
            .kind
            .kind()
            .templates
            .is_some_and(|t| t.writes_default_memory);
    if writes && mib.is_multiple_of(factor) {
        target.put_quantity(&nv.resource_memory_name, mib / factor, true);
    }
    Ok(())
}

/// What a kind's own webhook rule writes (`DeviceKind::webhook_rule`;
/// Iluvatar's cores and container name, hami-vendors.md 6.4); a refusal
/// names the container.
fn rule_edits<'c>(
    pod: &PodView<'_>,
    target: &mut Target<'_, '_, 'c>,
    annotations: &mut Vec<(&'static str, String)>,
    rule: crate::devices::WebhookRule,
    res: &ContainerResources,
    nv: &'c DeviceConfig,
) -> Result<(), Mutation> {
    use crate::devices::{RuleEdit, RuleInput, RuleResource};
    let count_in_limits = target
        .container
        .limit(&nv.resource_count_name)
        .and_then(|q| crate::engine::quantity::parse_whole(q).ok());
    let pod_annotation = |key: &str| {
        pod.annotations()
            .and_then(|a| a.get(key))
            .map(|v| v.to_string())
    };
    let input = RuleInput {
        container: &res.container,
        pod_annotation: &pod_annotation,
        count: res.count,
        count_in_limits,
        memory: res.memory,
        cores: res.cores,
    };
    let edits = rule(&input).map_err(|problem| {
        Mutation::Deny(Denial::new(
            DenyReason::InvalidRequest,
            format!("container {:?}: {problem}", res.container),
        ))
    })?;
    for edit in edits {
        match edit {
            RuleEdit::Limit(resource, value) => {
                let name = match resource {
                    RuleResource::Count => &nv.resource_count_name,
                    RuleResource::Memory => &nv.resource_memory_name,
                    RuleResource::Cores => &nv.resource_core_name,
                };
                if !name.is_empty() {
                    // An extended resource's request must equal its limit:
                    // a request the container gives is rewritten too.
                    let requested = target.container.request(name).is_some();
                    target.put_quantity(name, value, requested);
                }
            }
            RuleEdit::Env(name, value) => target.set_env(name, value)?,
            RuleEdit::PodAnnotation(key, value) => annotations.push((key, value)),
        }
    }
    Ok(())
}

/// A container and what is being added to it.
struct Target<'v, 'a, 'c> {
    container: &'v ContainerView<'a>,
    /// The names in the container's env, read when the first variable is
    /// added.
    env_names: Option<Vec<Cow<'a, str>>>,
    edits: ContainerEdits<'c>,
}

impl<'c> Target<'_, '_, 'c> {
    /// `resources.limits[name] = value` unless present in limits already.
    fn set_limit(&mut self, name: &'c str, value: String) {
        if !self.container.has_limit(name) {
            self.edits.limits.entry(name).or_insert(value);
        }
    }

    /// `resources.limits[name] = value`, and `requests[name]` when
    /// `requests`, unless the container has that value there already.
    fn put_quantity(&mut self, name: &'c str, value: u64, requests: bool) {
        let same = |q: Option<&str>| {
            q.and_then(|q| crate::engine::quantity::parse_whole(q).ok()) == Some(value)
        };
        if !same(self.container.limit(name)) {
            self.edits.limits.insert(name, value.to_string());
        }
        if requests && !same(self.container.request(name)) {
            self.edits.requests.insert(name, value.to_string());
        }
    }

    /// Appends `name=value` to the container's env unless `name` is set;
    /// an env that cannot be read makes the pod `Invalid`.
    fn set_env(&mut self, name: &'c str, value: String) -> Result<(), Mutation> {
        let names = match &mut self.env_names {
            Some(names) => names,
            None => {
                let names = self.container.env_names().map_err(Mutation::Invalid)?;
                self.edits.env_len = names.len();
                self.env_names.insert(names)
            }
        };
        if !names.iter().any(|n| n == name) && !self.edits.env.iter().any(|(n, _)| *n == name) {
            self.edits.env.push((name, value));
        }
        Ok(())
    }
}

/// Fills what the container leaves unset from the namespace policy, both in
/// the pod and in `res` (so the exclusive-GPU rule sees the defaults).
fn apply_policy_defaults<'c>(
    res: &mut ContainerResources,
    target: &mut Target<'_, '_, 'c>,
    defaults: &PolicyDefaults,
    nv: &'c DeviceConfig,
) {
    if res.memory.is_none() && res.percentage.is_none() {
        if let Some(m) = defaults.gpumem {
            res.memory = Some(m);
            target.set_limit(&nv.resource_memory_name, m.to_string());
        } else if let Some(p) = defaults.gpumem_percentage {
            res.percentage = Some(u64::from(p));
            target.set_limit(&nv.resource_memory_percentage_name, p.to_string());
        }
    }
    if res.cores.is_none()
        && let Some(c) = defaults.gpucores
    {
        res.cores = Some(u64::from(c));
        target.set_limit(&nv.resource_core_name, c.to_string());
    }
}

/// The policy's placement and model annotations the pod does not set.
fn policy_annotations(
    pod: &PodView<'_>,
    policy: &NamespacePolicy,
    kind: &DeviceKind,
) -> BTreeMap<&'static str, String> {
    let mut wanted = BTreeMap::new();
    if let Some(p) = policy.defaults.node_scheduler_policy {
        wanted.insert(keys::NODE_SCHEDULER_POLICY, p.to_string());
    }
    if let Some(p) = policy.defaults.gpu_scheduler_policy {
        wanted.insert(keys::GPU_SCHEDULER_POLICY, p.to_string());
    }
    if !policy.limits.allowed_models.is_empty() {
        wanted.insert(
            kind.selection.use_type,
            policy.limits.allowed_models.join(","),
        );
    }
    if let [mode] = policy.limits.device_modes.as_slice() {
        wanted.insert(kind.selection.mode, mode.clone());
    }
    if !policy.limits.denied_models.is_empty() {
        wanted.insert(
            kind.selection.nouse_type,
            policy.limits.denied_models.join(","),
        );
    }
    if let Some(present) = pod.annotations() {
        wanted.retain(|key, _| !present.contains_key(key));
    }
    wanted
}

/// A container's limit as text, when it is a whole number.
fn limit_text(container: &ContainerView<'_>, name: &str) -> Option<String> {
    let q = container.limit(name)?;
    crate::engine::quantity::parse_whole(q)
        .ok()
        .map(|v| v.to_string())
}
