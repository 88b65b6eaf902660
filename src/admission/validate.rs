//! The validating webhook's decision: refuse what cannot work, with a
//! message that names the container, the field and what is allowed; warn
//! about what is legal but probably wrong.

use serde_json::Value;

use crate::config::{Config, DeviceConfig};
use crate::engine::annotations::Annotations as _;
use crate::engine::quantity::parse_whole;
use crate::engine::request::{ContainerResources, ContainerSpec as _};
use crate::engine::{PlanError, PodPlan};

use super::lean::Pairs;
use super::limit_escapes::{env_escape, env_from_warning};
use super::pod::{ContainerView, PodView};
use super::{Denial, DenyReason};
use crate::cluster::ClusterView;
use crate::config::namespace_policy::{PolicyMode, policy_for_namespace};
use crate::engine::KindAmounts;
use crate::engine::quota::QuotaResource;

/// What the validating webhook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    Allow {
        warnings: Vec<String>,
    },
    Deny(Denial),
    /// The object could not be read (HTTP 400 in the status).
    Invalid(String),
}

/// gpugate's own annotations that only it writes, beside HAMi's
/// ([`crate::hami::keys::is_scheduler_owned`]).
pub const GPUGATE_OWNED: [&str; 4] = [
    crate::cluster::pod_annotations::NUMA_ZONES,
    crate::controllers::preemption::CLAIM,
    crate::controllers::defragmentation::CLAIM,
    crate::controllers::preemption::GPUS_FREED,
];

/// Whether a pod annotation or label key is written only by the scheduler
/// (gpugate, or HAMi's) and the device plugin, never by a pod's author.
pub fn is_scheduler_owned(key: &str) -> bool {
    crate::hami::keys::is_scheduler_owned(key) || GPUGATE_OWNED.contains(&key)
}

/// Validates a Pod given as a parsed JSON value (tests and tools; the
/// webhook reads the request body with [`validate`] directly).
pub fn validate_pod(raw: &Value, config: &Config, namespace: Option<&str>) -> Validation {
    PodView::judge_value(
        raw,
        |pod| validate(pod, config, namespace, None),
        Validation::Invalid,
    )
}

/// Validates a Pod on CREATE in `namespace` (the review's; the pod's own
/// or `default` when absent). With the cluster view, namespace policies may
/// select by labels and the namespace's GPU quota is checked.
pub fn validate(
    pod: &PodView<'_>,
    config: &Config,
    namespace: Option<&str>,
    cluster: Option<&ClusterView>,
) -> Validation {
    if let Some(key) = forged_allocation_key(pod) {
        return Validation::Deny(Denial::new(
            DenyReason::ForgedAllocation,
            format!(
                "{key} is written by the vGPU scheduler and device plugin, not by a pod's author: remove it"
            ),
        ));
    }
    let Some(spec) = pod.spec.as_ref() else {
        return Validation::Allow { warnings: vec![] };
    };
    let nv = config.device_config_for(spec.all_containers());
    // Not gpugate's pod when the config leaves its kind to another
    // scheduler (`scheduler.disabledDeviceKinds`): that one judges it.
    if config.left_to_another_scheduler(nv, spec.all_containers()) {
        return Validation::Allow { warnings: vec![] };
    }
    let mut warnings = Vec::new();
    for c in spec.all_containers() {
        if let Err(message) = check_limits_match_requests(c, nv) {
            return Validation::Deny(Denial::new(DenyReason::LimitsRequestsMismatch, message));
        }
        match ContainerResources::read(c, nv) {
            Ok(r) => warnings.extend(container_warnings(&r, nv)),
            Err(e) => {
                return Validation::Deny(Denial::new(DenyReason::InvalidRequest, e.to_string()));
            }
        }
    }
    let plan = config
        .read_request(&spec.init_containers, &spec.containers, pod)
        .map_err(PlanError::from)
        .and_then(|request| PodPlan::from_parts(request, pod, config.default_policies()));
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            return Validation::Deny(Denial::new(DenyReason::of_plan_error(&e), e.to_string()));
        }
    };
    if !plan.request.has_gpus() {
        return Validation::Allow { warnings };
    }
    if let Some(denial) = placement_denial(pod, config) {
        return Validation::Deny(denial);
    }
    let namespace = namespace.or(pod.namespace()).unwrap_or("default");
    let labels = cluster.and_then(|v| v.namespace_labels(namespace));
    let policy = policy_for_namespace(&config.namespace_policies, namespace, labels)
        .filter(|_| nv.kind.kind().hami_core);
    let allowed_env = policy.map_or(&[][..], |p| &p.limits.allow_env[..]);
    let vgpu_containers = spec
        .all_containers()
        .zip(&plan.request.containers)
        .filter(|(_, request)| request.gpu.is_some())
        .map(|(c, _)| c);
    // HAMi-core's variables mean nothing to another kind's runtime.
    let hami_core = nv.kind.kind().hami_core;
    for c in vgpu_containers.filter(|_| hami_core) {
        match env_escape(c, nv, allowed_env) {
            Ok(None) => {}
            Ok(Some(message)) => {
                return Validation::Deny(Denial::new(DenyReason::LimitEscape, message));
            }
            Err(message) => return Validation::Invalid(message),
        }
        match env_from_warning(c) {
            Ok(warning) => warnings.extend(warning),
            Err(message) => return Validation::Invalid(message),
        }
    }
    if let Some(view) = cluster {
        let facts = match pod.scope_facts() {
            Ok(facts) => facts,
            Err(message) => return Validation::Invalid(message),
        };
        let kinds = plan.request.device_kinds();
        let (quota, problems) = view.quotas().pod_quota(namespace, &facts, config, kinds);
        warnings.extend(problems);
        if let Err(e) = quota.check(&KindAmounts::of_request(&plan.request)) {
            let cfg = config.device_config(e.kind);
            let key = match e.resource {
                QuotaResource::Memory => &cfg.resource_memory_name,
                QuotaResource::Cores => &cfg.resource_core_name,
            };
            return Validation::Deny(Denial::new(
                DenyReason::QuotaExceeded,
                format!(
                    "namespace {namespace} is over its {} quota (ResourceQuota limits.{key}): {e}",
                    e.kind.kind().unit()
                ),
            ));
        }
    }
    if let Some(policy) = policy {
        let list = |key: &str| -> Vec<String> {
            pod.annotation(key)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let kind = nv.kind.kind();
        let mut violations = policy.violations(
            &plan.request.containers,
            &list(kind.selection.use_type),
            &list(kind.selection.nouse_type),
        );
        violations.extend(policy.mode_violation(kind, pod.annotation(kind.selection.mode)));
        if !violations.is_empty() {
            match policy.mode {
                PolicyMode::Enforce => {
                    return Validation::Deny(Denial::new(
                        DenyReason::PolicyLimit,
                        violations.join("; "),
                    ));
                }
                PolicyMode::Warn => warnings.extend(violations),
                PolicyMode::Audit => {
                    for v in &violations {
                        tracing::info!(namespace, policy = %policy.name, violation = %v, "namespace policy violated (audit mode)");
                    }
                }
            }
        }
    }
    let scheduler = spec.scheduler_name.get().map_or("", |n| n.as_ref());
    let taken_over = scheduler.is_empty()
        || scheduler == config.scheduler.name
        || (scheduler == "default-scheduler" && config.scheduler.force_overwrite_default_scheduler);
    if !taken_over {
        warnings.push(format!(
            "the pod asks for vGPU resources but spec.schedulerName is {scheduler:?}: only {:?} places vGPU pods and writes what HAMi's device plugin needs",
            config.scheduler.name
        ));
    }
    Validation::Allow { warnings }
}

/// What keeps a vGPU pod from being placed with its GPUs limited:
/// `spec.nodeName` (it would bypass the vGPU scheduler) and privileged
/// containers (they see every GPU of the node). Shared by both webhooks.
pub fn placement_denial(pod: &PodView<'_>, config: &Config) -> Option<Denial> {
    let spec = pod.spec.as_ref()?;
    if let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(Denial::new(
            DenyReason::NodeName,
            format!(
                "spec.nodeName is {node:?}: a vGPU pod must be placed by the {} scheduler, which chooses its GPUs; remove spec.nodeName",
                config.scheduler.name
            ),
        ));
    }
    let privileged = spec.all_containers().find(|c| c.privileged)?;
    Some(Denial::new(
        DenyReason::Privileged,
        format!(
            "container {:?}: securityContext.privileged is true: a privileged container sees every GPU of the node, so vGPU limits cannot hold; remove it",
            privileged.name
        ),
    ))
}

/// The first allocation annotation, else label, a pod's author wrote (in
/// key order, as a map lists them).
fn forged_allocation_key<'p>(pod: &'p PodView<'_>) -> Option<&'p str> {
    let forged =
        |pairs: Option<&'p Pairs<'_>>| pairs?.keys().filter(|k| is_scheduler_owned(k)).min();
    forged(pod.annotations()).or_else(|| forged(pod.labels()))
}

/// A GPU resource stated in both limits and requests must agree.
fn check_limits_match_requests(c: &ContainerView<'_>, nv: &DeviceConfig) -> Result<(), String> {
    for name in nv
        .gpu_resource_names()
        .into_iter()
        .filter(|n| !n.is_empty())
    {
        if let (Some(l), Some(r)) = (c.limit(name), c.request(name)) {
            // Compare values, not spellings ("1" and "1000m" agree).
            let same = match (parse_whole(l), parse_whole(r)) {
                (Ok(a), Ok(b)) => a == b,
                _ => l.trim() == r.trim(),
            };
            if !same {
                return Err(format!(
                    "container {:?}, resource {name}: limits {l} and requests {r} disagree: give the same value, or limits only",
                    c.name
                ));
            }
        }
    }
    Ok(())
}

fn container_warnings(r: &ContainerResources, nv: &DeviceConfig) -> Vec<String> {
    let mut out = Vec::new();
    if r.memory.is_some_and(|m| m > 0) && r.percentage.is_some() {
        out.push(format!(
            "container {:?}: both {} and {} are set; {} wins and the percentage is ignored",
            r.container,
            nv.resource_memory_name,
            nv.resource_memory_percentage_name,
            nv.resource_memory_name
        ));
    }
    if r.percentage == Some(0) {
        out.push(format!(
            "container {:?}: {} 0 means \"not set\": the container gets the GPU's whole memory",
            r.container, nv.resource_memory_percentage_name
        ));
    }
    if r.memory == Some(0) {
        out.push(format!(
            "container {:?}: {} 0 means \"not set\": the container gets the default memory",
            r.container, nv.resource_memory_name
        ));
    }
    out
}
