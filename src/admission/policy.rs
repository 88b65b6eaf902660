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

use crate::engine::lifecycle::pod_peak;
use crate::engine::request::{ContainerRequest, GpuRequest, MAX_MEM_MIB, Memory};
use crate::engine::selection::glob_match;
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
    let assumed;
    let labels = match labels {
        Some(l) => l,
        None => {
            assumed = BTreeMap::from([(
                "kubernetes.io/metadata.name".to_string(),
                namespace.to_string(),
            )]);
            &assumed
        }
    };
    policies.iter().find(|p| {
        (p.namespaces.is_empty()
            || p.namespaces
                .iter()
                .any(|pattern| glob_match(pattern, namespace)))
            && p.namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(labels))
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

impl NamespacePolicy {
    /// Every limit the pod's containers exceed, as messages for its author.
    /// `use_models` / `avoid_models` are the pod's model annotations (after
    /// mutation).
    pub fn violations(
        &self,
        containers: &[ContainerRequest],
        use_models: &[String],
        avoid_models: &[String],
    ) -> Vec<String> {
        let l = &self.limits;
        let mut out = Vec::new();
        let say = |what: String| format!("namespace policy {:?}: {what}", self.name);
        for c in containers {
            let Some(g) = c.gpu else { continue };
            if let Some(max) = l.gpus_per_container
                && g.count > max
            {
                out.push(say(format!(
                    "container {:?} asks for {} GPUs; at most {max} per container",
                    c.name, g.count
                )));
            }
            if !l.allow_exclusive && g.cores >= 100 {
                out.push(say(format!(
                    "container {:?} takes whole GPUs (gpucores 100); exclusive GPUs are not allowed: ask for gpumem or gpucores below 100",
                    c.name
                )));
            }
        }
        let held = |per: fn(&ContainerRequest) -> u64| -> u64 {
            pod_peak(containers.iter().map(|c| (c.kind, per(c))))
        };
        if let Some(max) = l.gpus_per_pod {
            let n = held(|c| u64::from(c.gpu.map_or(0, |g| g.count)));
            if n > u64::from(max) {
                out.push(say(format!(
                    "the pod holds {n} GPUs at once; at most {max} per pod"
                )));
            }
        }
        if let Some(max) = l.gpumem_per_pod {
            let mib = held(|c| match c.gpu {
                Some(GpuRequest {
                    count,
                    memory: Memory::Mib(m),
                    ..
                }) => u64::from(count).saturating_mul(m),
                _ => 0,
            });
            if mib > max {
                out.push(say(format!(
                    "the pod holds {mib} MiB of GPU memory at once; at most {max} MiB per pod"
                )));
            }
        }
        let lower =
            |v: &[String]| -> Vec<String> { v.iter().map(|s| s.trim().to_lowercase()).collect() };
        if !l.allowed_models.is_empty() {
            let allowed = lower(&l.allowed_models);
            let used = lower(use_models);
            if let Some(bad) = used.iter().find(|u| !allowed.contains(u)) {
                out.push(say(format!(
                    "nvidia.com/use-gputype names {bad:?}; allowed: {}",
                    l.allowed_models.join(", ")
                )));
            } else if used.is_empty() {
                out.push(say(format!(
                    "nvidia.com/use-gputype must name GPU models among: {}",
                    l.allowed_models.join(", ")
                )));
            }
        }
        if !l.denied_models.is_empty() {
            let avoided = lower(avoid_models);
            let used = lower(use_models);
            for denied in lower(&l.denied_models) {
                if used.contains(&denied) || !avoided.contains(&denied) {
                    out.push(say(format!(
                        "GPU model {denied:?} is denied in this namespace: keep it in nvidia.com/nouse-gputype and out of nvidia.com/use-gputype"
                    )));
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::lifecycle::ContainerKind;

    fn c(name: &str, init: bool, count: u32, mem: Option<u64>, cores: u32) -> ContainerRequest {
        c_kind(name, ContainerKind::of(init, None), count, mem, cores)
    }

    fn c_kind(
        name: &str,
        kind: ContainerKind,
        count: u32,
        mem: Option<u64>,
        cores: u32,
    ) -> ContainerRequest {
        ContainerRequest {
            name: name.into(),
            kind,
            gpu: Some(GpuRequest {
                count,
                memory: mem.map_or(Memory::Percent(100), Memory::Mib),
                cores,
            }),
        }
    }

    fn policy(limits: PolicyLimits) -> NamespacePolicy {
        NamespacePolicy {
            name: "ml".into(),
            namespaces: vec!["ml".into()],
            namespace_selector: None,
            mode: PolicyMode::Enforce,
            defaults: PolicyDefaults::default(),
            limits,
        }
    }

    #[test]
    fn namespaces_by_labels_and_by_name_and_labels() {
        let selector: LabelSelector = serde_yaml_ng::from_str(
            "matchLabels: {team: research}\nmatchExpressions:\n  - {key: tier, operator: NotIn, values: [prod]}\n",
        )
        .unwrap();
        let mut by_labels = policy(PolicyLimits::default());
        by_labels.name = "research".into();
        by_labels.namespaces = Vec::new();
        by_labels.namespace_selector = Some(selector.clone());
        let mut both = by_labels.clone();
        both.name = "both".into();
        both.namespaces = vec!["lab-*".into()];
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ps = [both, by_labels];
        let research = labels(&[("team", "research")]);
        assert_eq!(
            policy_for_namespace(&ps, "lab-1", Some(&research))
                .unwrap()
                .name,
            "both"
        );
        assert_eq!(
            policy_for_namespace(&ps, "x", Some(&research))
                .unwrap()
                .name,
            "research"
        );
        let prod = labels(&[("team", "research"), ("tier", "prod")]);
        assert!(policy_for_namespace(&ps, "x", Some(&prod)).is_none());
        // Unknown labels: only kubernetes.io/metadata.name is assumed.
        assert!(policy_for_namespace(&ps, "x", None).is_none());
        let mut by_name_label = policy(PolicyLimits::default());
        by_name_label.namespaces = Vec::new();
        by_name_label.namespace_selector = Some(LabelSelector {
            match_expressions: vec![LabelExpression {
                key: "kubernetes.io/metadata.name".into(),
                operator: LabelOperator::In,
                values: vec!["a".into(), "b".into()],
            }],
            ..Default::default()
        });
        assert!(policy_for_namespace(std::slice::from_ref(&by_name_label), "b", None).is_some());
        assert!(selects_by_labels(&ps) && !selects_by_labels(&[policy(PolicyLimits::default())]));
    }

    #[test]
    fn selectors_are_checked() {
        let mut p = policy(PolicyLimits::default());
        p.namespaces = Vec::new();
        assert!(
            validate_policies(std::slice::from_ref(&p))
                .unwrap_err()
                .contains("namespaceSelector")
        );
        p.namespace_selector = Some(LabelSelector {
            match_expressions: vec![LabelExpression {
                key: "team".into(),
                operator: LabelOperator::In,
                values: Vec::new(),
            }],
            ..Default::default()
        });
        assert!(
            validate_policies(std::slice::from_ref(&p))
                .unwrap_err()
                .contains("needs values")
        );
    }

    #[test]
    fn namespaces_by_name_and_glob_first_match_wins() {
        let mut a = policy(PolicyLimits::default());
        a.name = "a".into();
        a.namespaces = vec!["ml-*".into(), "research".into()];
        let mut b = policy(PolicyLimits::default());
        b.name = "b".into();
        b.namespaces = vec!["*".into()];
        let ps = [a, b];
        assert_eq!(policy_for(&ps, "ml-train").unwrap().name, "a");
        assert_eq!(policy_for(&ps, "research").unwrap().name, "a");
        assert_eq!(policy_for(&ps, "ml").unwrap().name, "b");
        assert!(policy_for(&ps[..1], "default").is_none());
        assert!(glob_match("a*b*c", "aXbYc") && !glob_match("a*b*c", "aXc"));
    }

    #[test]
    fn limits() {
        let p = policy(PolicyLimits {
            gpus_per_container: Some(2),
            gpus_per_pod: Some(3),
            gpumem_per_pod: Some(10000),
            allow_exclusive: false,
            ..Default::default()
        });
        let ok = [
            c("i", true, 2, Some(4000), 10),
            c("a", false, 1, Some(5000), 10),
            c("b", false, 2, Some(2000), 10),
        ];
        assert_eq!(p.violations(&ok, &[], &[]), Vec::<String>::new());
        let bad = [c("a", false, 3, Some(4000), 100), c("b", false, 1, None, 0)];
        let v = p.violations(&bad, &[], &[]);
        assert_eq!(v.len(), 4, "{v:?}");
        assert!(v[0].contains("container \"a\" asks for 3 GPUs; at most 2"));
        assert!(v[1].contains("exclusive GPUs are not allowed"));
        assert!(v[2].contains("holds 4 GPUs at once; at most 3"));
        assert!(v[3].contains("12000 MiB"));
    }

    #[test]
    fn sidecar_gpus_add_to_the_app_containers() {
        // The pod: a 2-GPU sidecar and a 2-GPU app container hold 4.
        let p = policy(PolicyLimits {
            gpus_per_pod: Some(2),
            ..Default::default()
        });
        let pod = [
            c_kind("proxy", ContainerKind::Sidecar, 2, Some(1000), 10),
            c_kind("app", ContainerKind::App, 2, Some(1000), 10),
        ];
        let v = p.violations(&pod, &[], &[]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("holds 4 GPUs at once; at most 2"), "{v:?}");
        // As plain init containers they would not run beside it.
        let pod = [
            c("init", true, 2, Some(1000), 10),
            c("app", false, 2, Some(1000), 10),
        ];
        assert!(p.violations(&pod, &[], &[]).is_empty());
    }

    #[test]
    fn models() {
        let p = policy(PolicyLimits {
            allowed_models: vec!["A100".into(), "H100".into()],
            denied_models: vec!["T4".into()],
            ..Default::default()
        });
        let one = [c("a", false, 1, Some(1), 0)];
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(p.violations(&one, &s(&["a100"]), &s(&["T4"])).is_empty());
        assert_eq!(p.violations(&one, &s(&["A10"]), &s(&["T4"])).len(), 1);
        assert_eq!(p.violations(&one, &s(&[]), &s(&["T4"])).len(), 1);
        assert_eq!(p.violations(&one, &s(&["A100"]), &s(&[])).len(), 1);
    }

    #[test]
    fn config_checks() {
        let mut p = policy(PolicyLimits::default());
        assert!(validate_policies(std::slice::from_ref(&p)).is_ok());
        assert!(
            validate_policies(&[p.clone(), p.clone()])
                .unwrap_err()
                .contains("twice")
        );
        p.defaults.gpucores = Some(101);
        assert!(
            validate_policies(std::slice::from_ref(&p))
                .unwrap_err()
                .contains("gpucores")
        );
        p.defaults.gpucores = None;
        p.namespaces.clear();
        assert!(validate_policies(&[p]).unwrap_err().contains("namespaces"));
    }
}
