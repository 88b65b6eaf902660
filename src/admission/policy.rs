//! The namespace policy gateway's rules: what a policy's limits say of a
//! pod's GPU request. The policies themselves (which namespaces they cover,
//! their defaults and limits) are read with the config
//! (`config::namespace_policy`).

use crate::engine::lifecycle::pod_peak;
use crate::engine::request::{ContainerRequest, GpuRequest, Memory};

use crate::config::namespace_policy::NamespacePolicy;
use crate::devices::DeviceKind;

impl NamespacePolicy {
    /// The `limits.deviceModes` violation of a pod whose `vgpu-mode`
    /// annotation (after mutation) is `value`: the modes of `kind` it
    /// selects (by HAMi's substring rule; all of them when unset) must all
    /// be allowed.
    pub fn mode_violation(&self, kind: &DeviceKind, value: Option<&str>) -> Option<String> {
        let allowed = &self.limits.device_modes;
        if allowed.is_empty() {
            return None;
        }
        let value = value.map(str::trim).filter(|v| !v.is_empty());
        let selected: Vec<&str> = kind
            .mode_names()
            .filter(|m| value.is_none_or(|v| v.contains(m)))
            .collect();
        let outside: Vec<&str> = selected
            .iter()
            .copied()
            .filter(|m| !allowed.iter().any(|a| a == m))
            .collect();
        if outside.is_empty() {
            return None;
        }
        let key = kind.selection.mode;
        let asked = match value {
            Some(v) => format!("{key}: {v:?} selects device modes {}", selected.join(", ")),
            None => format!("without {key} the pod may land on any device mode"),
        };
        Some(format!(
            "namespace policy {:?}: {asked}; this namespace allows only {}: set {key} to one of them",
            self.name,
            allowed.join(", ")
        ))
    }

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
    use crate::config::namespace_policy::*;
    use crate::engine::glob::glob_match;
    use crate::engine::lifecycle::ContainerKind;
    use std::collections::BTreeMap;

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
            movable: false,
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
