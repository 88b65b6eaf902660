//! Environment variables that switch off or widen the vGPU limits of a
//! container: HAMi's device plugin sets the limits as environment
//! variables when the kubelet allocates the container's GPUs, and
//! HAMi-core (preloaded into the container) enforces them. A pod that sets
//! the same variables itself wins over the device plugin (the kubelet puts
//! the pod's `env` after the plugin's, and the runtime keeps the last), or
//! turns the limiter off before it loads. The validating webhook refuses
//! them on containers that request vGPU resources, naming the container
//! and the variable; a namespace policy can allow them (`limits.allowEnv`).
//!
//! Names are refused whatever their value (`valueFrom` included: its value
//! is unknown at admission), except where a value is harmless or is the
//! one gpugate's own mutating webhook writes. Variables that come through
//! `envFrom` cannot be seen at admission; [`env_from_warning`] says so.
//! docs/operations.md ("vGPU escape hatches") lists what was checked in
//! HAMi-core and the device plugin, and why each name is here or not.

use crate::config::DeviceConfig;
use crate::engine::glob::glob_match;
use crate::engine::request::ContainerSpec as _;

use super::pod::{ContainerView, EnvVarView};

/// A variable refused by name.
struct Escape {
    /// The name; with `indexed`, also `NAME_<digits>` (one per GPU).
    name: &'static str,
    indexed: bool,
    why: &'static str,
}

const ESCAPES: &[Escape] = &[
    Escape {
        name: "CUDA_DISABLE_CONTROL",
        indexed: false,
        why: "HAMi's device plugin then does not load HAMi-core into the container, and no vGPU limit holds",
    },
    Escape {
        name: "NVIDIA_VISIBLE_DEVICES",
        indexed: false,
        why: "the device plugin chooses the container's GPUs; another value (such as all) exposes GPUs that were not allocated to it, without limits",
    },
    Escape {
        name: "CUDA_DEVICE_MEMORY_LIMIT",
        indexed: true,
        why: "it replaces the GPU memory limit the device plugin sets from the container's request (0 means no limit)",
    },
    Escape {
        name: "CUDA_DEVICE_SM_LIMIT",
        indexed: true,
        why: "it replaces the compute limit the device plugin sets from the container's gpucores (0 or 100 means no limit)",
    },
    Escape {
        name: "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        indexed: false,
        why: "it moves HAMi-core's accounting file, whose first writer sets the limits and which the node's monitor no longer reads",
    },
    Escape {
        name: "CUDA_OVERSUBSCRIBE",
        indexed: false,
        why: "it turns on GPU memory oversubscription, which the node's operator sets through the device plugin",
    },
    Escape {
        name: "CUDA_REDIRECT",
        indexed: false,
        why: "it makes HAMi-core resolve CUDA calls from another library, which can be the driver without the limits",
    },
];

/// The first variable of a vGPU container's `env` that would bypass or
/// widen its limits and that `allowed` (a namespace policy's
/// `limits.allowEnv`, exact names or `*` globs) does not allow: the
/// message for the pod's author. `Err` when the env cannot be read.
pub fn env_escape(
    container: &ContainerView<'_>,
    nv: &DeviceConfig,
    allowed: &[String],
) -> Result<Option<String>, String> {
    for var in container.env_vars()? {
        let name = var.name.as_ref();
        if allowed.iter().any(|pattern| glob_match(pattern, name)) {
            continue;
        }
        if let Some(why) = refusal(&var, container, nv) {
            return Ok(Some(format!(
                "container {:?}: env {name} bypasses the vGPU limits: {why}; remove it (a namespace policy can allow it with limits.allowEnv)",
                container.name
            )));
        }
    }
    Ok(None)
}

/// Why `var` cannot be set on a vGPU container, if it cannot.
fn refusal(
    var: &EnvVarView<'_>,
    container: &ContainerView<'_>,
    nv: &DeviceConfig,
) -> Option<String> {
    let name = var.name.as_ref();
    if let Some(e) = ESCAPES.iter().find(|e| names(e, name)) {
        return Some(e.why.to_string());
    }
    // The kubelet expands $(NAME) in a value from the variables before it,
    // so such a value is as unknown at admission as one from valueFrom.
    let unknown = var.value_from || var.value.as_deref().is_some_and(|v| v.contains("$("));
    let value = || {
        if var.value_from {
            "from valueFrom".to_string()
        } else {
            format!("{:?}", var.value.as_deref().unwrap_or(""))
        }
    };
    match name {
        // HAMi-core: "disable" turns the compute limiter off, "force"
        // keeps it on, anything else leaves it to the node's monitor.
        "GPU_CORE_UTILIZATION_POLICY" => {
            let configured = nv.gpu_core_policy.trim();
            let set = var.value.as_deref().unwrap_or("").trim();
            if configured.is_empty() || configured.eq_ignore_ascii_case("default") {
                (unknown || set.eq_ignore_ascii_case("disable"))
                    .then(|| format!("{} turns off the compute limiter, or may", value()))
            } else {
                (unknown || !set.eq_ignore_ascii_case(configured)).then(|| {
                    format!(
                        "{} is not the policy set for every vGPU container (nvidia.gpuCorePolicy {configured:?})",
                        value()
                    )
                })
            }
        }
        // 0 is HAMi-core's high priority: its tasks are never throttled and
        // the others on the GPU wait for them. The webhook writes the
        // container's nvidia.com/priority here; 1 (low) is the default.
        "CUDA_TASK_PRIORITY" => {
            let from_resource = container
                .limit(&nv.resource_priority_name)
                .map(str::trim)
                .filter(|_| !nv.resource_priority_name.is_empty());
            let set = var.value.as_deref().map(str::trim);
            let fine = !unknown && (set == from_resource || set == Some("1"));
            (!fine).then(|| {
                format!(
                    "{} sets the GPU time-slice priority, which comes from the container's {} limit",
                    value(),
                    nv.resource_priority_name
                )
            })
        }
        _ => None,
    }
}

fn names(e: &Escape, name: &str) -> bool {
    match name.strip_prefix(e.name) {
        Some("") => true,
        Some(rest) if e.indexed => rest
            .strip_prefix('_')
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())),
        _ => false,
    }
}

/// A warning for a vGPU container whose `envFrom` could set one of the
/// refused variables unseen: without a prefix, or with one that begins
/// such a name.
pub fn env_from_warning(container: &ContainerView<'_>) -> Result<Option<String>, String> {
    let hidden = container.env_from_prefixes()?.into_iter().any(|prefix| {
        let prefix = prefix.as_ref();
        ESCAPES
            .iter()
            .map(|e| (e.name, e.indexed))
            .chain([
                ("GPU_CORE_UTILIZATION_POLICY", false),
                ("CUDA_TASK_PRIORITY", false),
            ])
            // A prefix that begins a refused name, or that is such a name
            // with its index to come from the source's keys.
            .any(|(name, indexed)| {
                name.starts_with(prefix) || (indexed && prefix.starts_with(name))
            })
    });
    Ok(hidden.then(|| {
        format!(
            "container {:?}: envFrom can set variables that bypass the vGPU limits (such as CUDA_DEVICE_MEMORY_LIMIT), and gpugate cannot see them at admission; give envFrom a prefix, or set such variables in env",
            container.name
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::pod::PodView;

    fn container(json: serde_json::Value) -> String {
        serde_json::json!({"spec": {"containers": [json]}}).to_string()
    }

    fn check(json: serde_json::Value, nv: &DeviceConfig, allowed: &[String]) -> Option<String> {
        let text = container(json);
        let pod = PodView::from_json(&text).unwrap();
        env_escape(&pod.spec.unwrap().containers[0], nv, allowed).unwrap()
    }

    fn env(pairs: &[(&str, &str)]) -> serde_json::Value {
        serde_json::json!({
            "name": "main",
            "env": pairs.iter().map(|(n, v)| serde_json::json!({"name": n, "value": v})).collect::<Vec<_>>(),
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/priority": "1"}}
        })
    }

    #[test]
    fn names_that_switch_off_or_widen_a_limit_are_refused_whatever_the_value() {
        let nv = DeviceConfig::default();
        for name in [
            "CUDA_DISABLE_CONTROL",
            "NVIDIA_VISIBLE_DEVICES",
            "CUDA_DEVICE_MEMORY_LIMIT",
            "CUDA_DEVICE_MEMORY_LIMIT_0",
            "CUDA_DEVICE_MEMORY_LIMIT_15",
            "CUDA_DEVICE_SM_LIMIT",
            "CUDA_DEVICE_SM_LIMIT_3",
            "CUDA_DEVICE_MEMORY_SHARED_CACHE",
            "CUDA_OVERSUBSCRIBE",
            "CUDA_REDIRECT",
        ] {
            for value in ["true", "false", "0", "all", "100000m", ""] {
                let m = check(env(&[("PATH", "/bin"), (name, value)]), &nv, &[])
                    .unwrap_or_else(|| panic!("{name}={value} admitted"));
                assert!(
                    m.starts_with(&format!(
                        "container \"main\": env {name} bypasses the vGPU limits: "
                    )),
                    "{m}"
                );
            }
        }
        // valueFrom: the value is unknown, the name is enough.
        let from = serde_json::json!({
            "name": "main",
            "env": [{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
        });
        assert!(check(from, &nv, &[]).is_some());
    }

    #[test]
    fn look_alikes_and_harmless_variables_pass() {
        let nv = DeviceConfig::default();
        for (name, value) in [
            ("CUDA_DEVICE_MEMORY_LIMITS", "1"),
            ("CUDA_DEVICE_MEMORY_LIMIT_", "1"),
            ("CUDA_DEVICE_MEMORY_LIMIT_X", "1"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("LIBCUDA_LOG_LEVEL", "4"),
            ("GPU_CORE_UTILIZATION_POLICY", "force"),
            ("GPU_CORE_UTILIZATION_POLICY", "default"),
            ("CUDA_TASK_PRIORITY", "1"),
            ("nvidia_visible_devices", "all"),
        ] {
            assert_eq!(
                check(env(&[(name, value)]), &nv, &[]),
                None,
                "{name}={value}"
            );
        }
    }

    #[test]
    fn core_policy_and_priority_depend_on_the_value() {
        let nv = DeviceConfig::default();
        let m = check(env(&[("GPU_CORE_UTILIZATION_POLICY", "DISABLE")]), &nv, &[]).unwrap();
        assert!(
            m.contains("\"DISABLE\" turns off the compute limiter"),
            "{m}"
        );
        // With a configured policy, only that policy (which the mutating
        // webhook writes) is allowed.
        let forced = DeviceConfig {
            gpu_core_policy: "force".into(),
            ..DeviceConfig::default()
        };
        assert_eq!(
            check(
                env(&[("GPU_CORE_UTILIZATION_POLICY", "force")]),
                &forced,
                &[]
            ),
            None
        );
        let m = check(
            env(&[("GPU_CORE_UTILIZATION_POLICY", "default")]),
            &forced,
            &[],
        )
        .unwrap();
        assert!(m.contains("nvidia.gpuCorePolicy \"force\""), "{m}");
        // Priority 0 is high priority; only the container's
        // nvidia.com/priority (what the webhook writes) may set it.
        let m = check(env(&[("CUDA_TASK_PRIORITY", "0")]), &nv, &[]).unwrap();
        assert!(m.contains("nvidia.com/priority limit"), "{m}");
        // A $(NAME) reference is expanded by the kubelet: unknown here.
        let m = check(
            env(&[("P", "disable"), ("GPU_CORE_UTILIZATION_POLICY", "$(P)")]),
            &nv,
            &[],
        )
        .unwrap();
        assert!(m.contains("GPU_CORE_UTILIZATION_POLICY"), "{m}");
        assert!(check(env(&[("Q", "0"), ("CUDA_TASK_PRIORITY", "$(Q)")]), &nv, &[]).is_some());
        let mut high = env(&[("CUDA_TASK_PRIORITY", "0")]);
        high["resources"]["limits"]["nvidia.com/priority"] = "0".into();
        assert_eq!(check(high, &nv, &[]), None);
    }

    #[test]
    fn a_namespace_policy_can_allow_them() {
        let nv = DeviceConfig::default();
        let pod = env(&[
            ("CUDA_DEVICE_SM_LIMIT_0", "100"),
            ("CUDA_DISABLE_CONTROL", "1"),
        ]);
        let allow = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let m = check(pod.clone(), &nv, &allow(&["CUDA_DEVICE_SM_LIMIT*"])).unwrap();
        assert!(m.contains("CUDA_DISABLE_CONTROL"), "{m}");
        assert_eq!(
            check(
                pod,
                &nv,
                &allow(&["CUDA_DEVICE_SM_LIMIT_*", "CUDA_DISABLE_CONTROL"])
            ),
            None
        );
    }

    #[test]
    fn env_from_without_a_safe_prefix_is_warned_about() {
        let warn = |c: serde_json::Value| {
            let text = container(c);
            let pod = PodView::from_json(&text).unwrap();
            env_from_warning(&pod.spec.unwrap().containers[0]).unwrap()
        };
        let with = |prefix: Option<&str>| {
            let mut source = serde_json::json!({"configMapRef": {"name": "settings"}});
            if let Some(p) = prefix {
                source["prefix"] = p.into();
            }
            serde_json::json!({"name": "main", "envFrom": [source]})
        };
        assert!(
            warn(with(None))
                .unwrap()
                .contains("envFrom can set variables")
        );
        assert!(warn(with(Some("CUDA_"))).is_some());
        // The key "0" would make CUDA_DEVICE_MEMORY_LIMIT_0.
        assert!(warn(with(Some("CUDA_DEVICE_MEMORY_LIMIT_"))).is_some());
        assert!(warn(with(Some("APP_"))).is_none());
        assert!(warn(serde_json::json!({"name": "main"})).is_none());
    }
}
