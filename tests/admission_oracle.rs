//! The lean mutating webhook against its predecessor as an oracle: the
//! Value-based implementation (full k8s-openapi `Pod`, a clone of the raw
//! object edited, `json_patch::diff`) is kept here, and only here, and
//! both must give the same answer, operation for operation, on generated
//! pods of every shape the patch builder distinguishes (members absent,
//! `null` or present; env lists; init containers; policies).

use std::path::Path;

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::admission::{Denial, DenyReason};
use gpugate::config::namespace_policy::{NamespacePolicy, PolicyDefaults, policy_for};
use gpugate::config::{Config, DeviceConfig};
use gpugate::engine::request::ContainerResources;
use gpugate::hami::keys;
use k8s_openapi::api::core::v1::{Container, Pod};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

mod oracle {
    use super::*;

    const DEFAULT_SCHEDULER: &str = "default-scheduler";

    /// gpugate's mutating webhook before the lean path (commit 03726d5).
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
                        return Mutation::Deny(Denial::new(
                            DenyReason::InvalidRequest,
                            e.to_string(),
                        ));
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

    fn placement_denial(pod: &Pod, config: &Config) -> Option<Denial> {
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
        let privileged = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .find(|c| {
                c.security_context
                    .as_ref()
                    .and_then(|s| s.privileged)
                    .unwrap_or(false)
            })?;
        Some(Denial::new(
            DenyReason::Privileged,
            format!(
                "container {:?}: securityContext.privileged is true: a privileged container sees every GPU of the node, so vGPU limits cannot hold; remove it",
                privileged.name
            ),
        ))
    }

    fn apply_policy_defaults(
        res: &mut ContainerResources,
        container: &mut Map<String, Value>,
        defaults: &PolicyDefaults,
        nv: &DeviceConfig,
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

    fn set_policy_annotations(pod: &mut Value, policy: &NamespacePolicy) {
        let mut wanted: Vec<(&str, String)> = Vec::new();
        if let Some(p) = policy.defaults.node_scheduler_policy {
            wanted.push((keys::NODE_SCHEDULER_POLICY, p.to_string()));
        }
        if let Some(p) = policy.defaults.gpu_scheduler_policy {
            wanted.push((keys::GPU_SCHEDULER_POLICY, p.to_string()));
        }
        if !policy.limits.allowed_models.is_empty() {
            wanted.push((
                gpugate::devices::nvidia::USE_GPU_TYPE,
                policy.limits.allowed_models.join(","),
            ));
        }
        if !policy.limits.denied_models.is_empty() {
            wanted.push((
                gpugate::devices::nvidia::NOUSE_GPU_TYPE,
                policy.limits.denied_models.join(","),
            ));
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

    fn set_limit(container: &mut Map<String, Value>, name: &str, value: String) {
        if let Some(limits) = object_at(container, "resources").and_then(|r| object_at(r, "limits"))
        {
            limits.entry(name.to_string()).or_insert(Value::from(value));
        }
    }

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
            list.push(json!({"name": name, "value": value}));
        }
    }

    fn limit_text(container: &Container, name: &str) -> Option<String> {
        let q = container.resources.as_ref()?.limits.as_ref()?.get(name)?;
        gpugate::engine::quantity::parse_whole(&q.0)
            .ok()
            .map(|v| v.to_string())
    }
}

/// A member that is absent, `null`, or set to one of `values`.
fn member(values: Vec<Value>) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        proptest::sample::select(values).prop_map(Some),
    ]
}

fn quantities() -> impl Strategy<Value = Value> {
    let resource = proptest::sample::select(vec![
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "nvidia.com/priority",
        "cpu",
    ]);
    let value = prop_oneof![
        proptest::sample::select(vec!["0", "1", "2", "30", "100", "4000"]).prop_map(Value::from),
        (0u32..3).prop_map(Value::from),
    ];
    proptest::collection::btree_map(resource, value, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn container() -> impl Strategy<Value = Value> {
    let resources = prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        (
            proptest::option::of(prop_oneof![Just(Value::Null), quantities()]),
            proptest::option::of(quantities()),
        )
            .prop_map(|(limits, requests)| {
                let mut r = Map::new();
                if let Some(l) = limits {
                    r.insert("limits".into(), l);
                }
                if let Some(q) = requests {
                    r.insert("requests".into(), q);
                }
                Some(Value::Object(r))
            }),
    ];
    let env = member(vec![
        json!([]),
        json!([{"name": "A", "value": "1"}]),
        json!([{"name": "CUDA_TASK_PRIORITY", "value": "0"}, {"name": "B"}]),
        json!([{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "x"}]),
    ]);
    (resources, env, proptest::bool::weighted(0.1)).prop_map(|(resources, env, privileged)| {
        let mut c = Map::new();
        c.insert("name".into(), Value::from("c"));
        c.insert("image".into(), Value::from("i"));
        if let Some(r) = resources {
            c.insert("resources".into(), r);
        }
        if let Some(e) = env {
            c.insert("env".into(), e);
        }
        if privileged {
            c.insert("securityContext".into(), json!({"privileged": true}));
        }
        Value::Object(c)
    })
}

fn pod() -> impl Strategy<Value = Value> {
    let annotations = member(vec![
        json!({}),
        json!({"a": "b"}),
        json!({(keys::GPU_SCHEDULER_POLICY): "spread", "nvidia.com/use-gputype": "A100"}),
    ]);
    let metadata = prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        annotations.prop_map(|a| {
            let mut m = Map::new();
            m.insert("name".into(), Value::from("p"));
            if let Some(a) = a {
                m.insert("annotations".into(), a);
            }
            Some(Value::Object(m))
        }),
    ];
    let scheduler = member(vec![
        json!("hami-scheduler"),
        json!("default-scheduler"),
        json!("volcano"),
    ]);
    let runtime_class = member(vec![json!("nvidia")]);
    (
        metadata,
        proptest::collection::vec(container(), 0..3),
        proptest::collection::vec(container(), 0..2),
        scheduler,
        runtime_class,
        proptest::bool::weighted(0.1),
    )
        .prop_map(
            |(metadata, containers, init, scheduler, runtime_class, node)| {
                let mut spec = Map::new();
                spec.insert("containers".into(), Value::Array(containers));
                if !init.is_empty() {
                    spec.insert("initContainers".into(), Value::Array(init));
                }
                for (key, value) in [
                    ("schedulerName", scheduler),
                    ("runtimeClassName", runtime_class),
                ] {
                    if let Some(v) = value {
                        spec.insert(key.into(), v);
                    }
                }
                if node {
                    spec.insert("nodeName".into(), Value::from("n1"));
                }
                let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": spec});
                if let Some(m) = metadata {
                    pod["metadata"] = m;
                }
                pod
            },
        )
}

fn configs() -> Vec<(Config, Option<&'static str>)> {
    let policies = Config::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config/policies.yaml"),
    )
    .unwrap();
    let mut env_and_class = Config::default();
    env_and_class.nvidia.overwrite_env = true;
    env_and_class.nvidia.gpu_core_policy = "force".into();
    env_and_class.nvidia.runtime_class_name = "nvidia".into();
    let mut defaults = Config::default();
    defaults.nvidia.default_memory = 4096;
    defaults.nvidia.default_cores = 20;
    defaults.nvidia.memory_factor = 2;
    vec![
        (Config::default(), None),
        (policies, Some("ml")),
        (env_and_class, None),
        (defaults, None),
    ]
}

/// Same answer; `Invalid` messages may differ (the lean reader reports
/// positions), so only their kind is compared.
fn same(lean: &Mutation, old: &Mutation) -> bool {
    match (lean, old) {
        (Mutation::Invalid(_), Mutation::Invalid(_)) => true,
        _ => lean == old,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn lean_patch_equals_the_diffed_patch(pod in pod()) {
        for (config, namespace) in configs() {
            let lean = mutate_pod(&pod, &config, namespace);
            let old = oracle::mutate_pod(&pod, &config, namespace);
            prop_assert!(same(&lean, &old), "pod {}\nlean {:?}\nold  {:?}", pod, lean, old);
        }
    }
}

#[test]
fn every_fixture_gets_the_same_answer() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pods");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let pod: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        // The oracle predates every kind but NVIDIA.
        let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
        let spec = typed.spec.as_ref().unwrap();
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        if Config::default().device_config_for(containers).kind != gpugate::devices::KindId::NVIDIA
        {
            continue;
        }
        for (config, namespace) in configs() {
            let lean = mutate_pod(&pod, &config, namespace);
            let old = oracle::mutate_pod(&pod, &config, namespace);
            assert!(same(&lean, &old), "{}: {lean:?} vs {old:?}", path.display());
        }
    }
}
