//! The namespace policy gateway: per-namespace defaults and limits for GPU
//! requests, from the config file's `namespacePolicies`.
//!
//! A policy applies to the namespaces it names (exact names, or globs with
//! `*`) and/or whose labels match its `namespaceSelector` (Kubernetes'
//! label selector: `matchLabels`, `matchExpressions`); when both are given a
//! namespace must match both. The first matching policy in file order wins. Its defaults are
//! written into pods by the mutating webhook; its limits are checked by the
//! validating webhook and, by `mode`, deny (`enforce`), admit with warnings
//! (`warn`) or are only logged (`audit`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::engine::glob::glob_match;
use crate::engine::request::MAX_MEM_MIB;
use crate::engine::{GpuPolicy, NodePolicy};

/// One namespace policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacePolicy {
    /// Names the policy in messages and logs.
    pub name: String,
    /// Namespaces it applies to: exact names or globs (`ml-*`, `*`).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Namespaces it applies to, by their labels.
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    pub mode: PolicyMode,
    #[serde(default)]
    pub defaults: PolicyDefaults,
    #[serde(default)]
    pub limits: PolicyLimits,
    /// Defragmentation may move this namespace's pods (those a
    /// ReplicaSet or StatefulSet recreates) to make room for a pod
    /// that fits nowhere only because free GPU is scattered
    /// (docs/policies.md, "Defragmentation"). Off by default.
    #[serde(default)]
    pub movable: bool,
}

/// Kubernetes' label selector (`metav1.LabelSelector`): every
/// `matchLabels` pair and every expression must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<LabelExpression>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelExpression {
    pub key: String,
    pub operator: LabelOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum LabelOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator {
                    LabelOperator::In => value.is_some_and(|v| e.values.contains(v)),
                    LabelOperator::NotIn => value.is_none_or(|v| !e.values.contains(v)),
                    LabelOperator::Exists => value.is_some(),
                    LabelOperator::DoesNotExist => value.is_none(),
                }
            })
    }

    fn check(&self) -> Result<(), String> {
        for e in &self.match_expressions {
            match e.operator {
                LabelOperator::In | LabelOperator::NotIn if e.values.is_empty() => {
                    return Err(format!(
                        "namespaceSelector: {:?} {:?} needs values",
                        e.key, e.operator
                    ));
                }
                LabelOperator::Exists | LabelOperator::DoesNotExist if !e.values.is_empty() => {
                    return Err(format!(
                        "namespaceSelector: {:?} {:?} takes no values",
                        e.key, e.operator
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// What a limit violation does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Deny the pod.
    #[default]
    Enforce,
    /// Admit it with a warning for its author.
    Warn,
    /// Admit it; only log.
    Audit,
}

/// Values written into vGPU containers that do not set them, in the units a
/// pod uses (`gpumem` as written in `nvidia.com/gpumem`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyDefaults {
    pub gpumem: Option<u64>,
    pub gpumem_percentage: Option<u32>,
    pub gpucores: Option<u32>,
    pub node_scheduler_policy: Option<NodePolicy>,
    pub gpu_scheduler_policy: Option<GpuPolicy>,
}

/// Upper bounds on what pods of the namespace may ask for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PolicyLimits {
    pub gpus_per_container: Option<u32>,
    /// GPUs a pod holds at once, by Kubernetes' pod rule: the larger of
    /// its largest init container (with the sidecars started before it)
    /// and its app containers plus all sidecars.
    pub gpus_per_pod: Option<u32>,
    /// MiB a pod holds at once, counted from explicit `gpumem` (a
    /// percentage depends on the GPU it lands on and is not counted).
    pub gpumem_per_pod: Option<u64>,
    /// `nvidia.com/use-gputype` values pods may use; written into pods that
    /// set none.
    pub allowed_models: Vec<String>,
    /// Models pods must exclude; written into `nvidia.com/nouse-gputype`
    /// of pods that set none.
    pub denied_models: Vec<String>,
    /// Whether a container may take a whole GPU exclusively (gpucores 100).
    pub allow_exclusive: bool,
    /// The device modes (`hami-core`, `mig`, `mps`) pods may be placed on:
    /// the modes a pod's `nvidia.com/vgpu-mode` selects (every mode when
    /// unset) must be among them. With one mode, it is written into pods
    /// that set none (gpugate's own addition to HAMi's annotation). Empty:
    /// any mode.
    pub device_modes: Vec<String>,
    /// Environment variables that bypass or widen the vGPU limits (see
    /// `admission::limit_escapes`) that vGPU containers may set anyway:
    /// exact names or `*` globs. Allowed whatever the policy's `mode`.
    pub allow_env: Vec<String>,
}

impl Default for PolicyLimits {
    fn default() -> Self {
        PolicyLimits {
            gpus_per_container: None,
            gpus_per_pod: None,
            gpumem_per_pod: None,
            allowed_models: Vec::new(),
            denied_models: Vec::new(),
            allow_exclusive: true,
            device_modes: Vec::new(),
            allow_env: Vec::new(),
        }
    }
}

/// The policy for a namespace, if any, judged by its name alone (see
/// [`policy_for_namespace`]).
pub fn policy_for<'a>(
    policies: &'a [NamespacePolicy],
    namespace: &str,
) -> Option<&'a NamespacePolicy> {
    policy_for_namespace(policies, namespace, None)
}

/// The policy for a namespace with these labels, if any. Without labels
/// (the namespace is not known to gpugate) only the label Kubernetes sets on
/// every namespace, `kubernetes.io/metadata.name`, is assumed, so a selector
/// on other labels does not match.
pub fn policy_for_namespace<'a>(
    policies: &'a [NamespacePolicy],
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<&'a NamespacePolicy> {
    // Built only for a policy that has a selector: this runs for every
    // admission review.
    let mut assumed: Option<BTreeMap<String, String>> = None;
    policies.iter().find(|p| {
        (p.namespaces.is_empty()
            || p.namespaces
                .iter()
                .any(|pattern| glob_match(pattern, namespace)))
            && p.namespace_selector.as_ref().is_none_or(|s| {
                let labels = labels.unwrap_or_else(|| {
                    assumed.get_or_insert_with(|| {
                        BTreeMap::from([(
                            "kubernetes.io/metadata.name".to_string(),
                            namespace.to_string(),
                        )])
                    })
                });
                s.matches(labels)
            })
    })
}

/// Whether any policy selects namespaces by labels (so that gpugate needs
/// to know namespaces' labels).
pub fn selects_by_labels(policies: &[NamespacePolicy]) -> bool {
    policies.iter().any(|p| p.namespace_selector.is_some())
}

/// Checks the policy list of a config file.
pub fn validate_policies(policies: &[NamespacePolicy]) -> Result<(), String> {
    let mut names = std::collections::BTreeSet::new();
    for p in policies {
        let at = format!("namespacePolicies[{:?}]", p.name);
        if p.name.trim().is_empty() {
            return Err("namespacePolicies: every policy needs a name".into());
        }
        if !names.insert(p.name.as_str()) {
            return Err(format!("{at}: the name is used twice"));
        }
        if p.namespaces.is_empty() && p.namespace_selector.is_none() {
            return Err(format!(
                "{at}: give namespaces, a namespaceSelector, or both"
            ));
        }
        if p.namespaces.iter().any(|n| n.trim().is_empty()) {
            return Err(format!("{at}: namespaces must not contain empty names"));
        }
        if let Some(sel) = &p.namespace_selector {
            sel.check().map_err(|e| format!("{at}: {e}"))?;
        }
        let kind = crate::devices::KindId::NVIDIA.kind();
        if let Some(m) = p
            .limits
            .device_modes
            .iter()
            .find(|m| !kind.mode_names().any(|known| known == m.as_str()))
        {
            return Err(format!(
                "{at}: limits.deviceModes names {m:?}; device modes are {}",
                kind.mode_names().collect::<Vec<_>>().join(", ")
            ));
        }
        let d = &p.defaults;
        if d.gpucores.is_some_and(|c| c > 100) {
            return Err(format!("{at}: defaults.gpucores must be 0..=100"));
        }
        if d.gpumem_percentage.is_some_and(|c| c == 0 || c > 100) {
            return Err(format!("{at}: defaults.gpumemPercentage must be 1..=100"));
        }
        if d.gpumem.is_some_and(|m| m == 0 || m > MAX_MEM_MIB) {
            return Err(format!("{at}: defaults.gpumem must be 1..={MAX_MEM_MIB}"));
        }
        if d.gpumem.is_some() && d.gpumem_percentage.is_some() {
            return Err(format!(
                "{at}: set defaults.gpumem or defaults.gpumemPercentage, not both"
            ));
        }
    }
    Ok(())
}
