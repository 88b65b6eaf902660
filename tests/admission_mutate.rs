//! The mutating webhook's decisions on real Pod objects: every patch is
//! applied with json-patch and the result checked, and a second pass over
//! the result must yield no operations.

use std::path::Path;

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::config::Config;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// Mutates, applies the patch, checks idempotence; returns the new pod.
fn mutated(pod: &Value, config: &Config) -> Value {
    let Mutation::Patch(ops) = mutate_pod(pod, config, None) else {
        panic!("expected a patch, got {:?}", mutate_pod(pod, config, None));
    };
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
    let mut out = pod.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    assert_eq!(
        mutate_pod(&out, config, None),
        Mutation::Patch(vec![]),
        "a mutated pod must yield no operations"
    );
    out
}

fn ops(pod: &Value, config: &Config) -> Vec<Value> {
    match mutate_pod(pod, config, None) {
        Mutation::Patch(ops) => ops,
        other => panic!("expected a patch, got {other:?}"),
    }
}

#[test]
fn gpu_only_becomes_one_exclusive_gpu_for_our_scheduler() {
    let pod = fixture("gpu-only.yaml");
    let out = mutated(&pod, &Config::default());
    assert_eq!(out["spec"]["schedulerName"], "hami-scheduler");
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"],
        "100"
    );
    // The count the author wrote is left as written (a YAML number).
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        1
    );
    assert_eq!(
        ops(&pod, &Config::default()),
        [
            json!({"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"}),
            json!({"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}),
        ]
    );
}

#[test]
fn a_slice_gets_its_count_and_priority_env() {
    let out = mutated(&fixture("slice.yaml"), &Config::default());
    let c = &out["spec"]["containers"][0];
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert!(
        c["resources"]["limits"]
            .get("nvidia.com/gpucores")
            .is_some()
    );
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpucores"], "30");
    assert_eq!(
        c["env"],
        json!([{"name": "MODEL", "value": "llama"}, {"name": "CUDA_TASK_PRIORITY", "value": "1"}])
    );
    assert_eq!(out["metadata"]["labels"], json!({"app": "inference"}));
}

#[test]
fn init_containers_and_sidecars() {
    let mut config = Config::default();
    config.nvidia.overwrite_env = true;
    config.nvidia.gpu_core_policy = "force".into();
    config.nvidia.runtime_class_name = "nvidia".into();
    let out = mutated(&fixture("init-and-sidecar.yaml"), &config);
    let init = &out["spec"]["initContainers"][0];
    assert_eq!(init["resources"]["limits"]["nvidia.com/gpucores"], "100");
    // The count was in requests only: cores are not exclusive (gpumem given).
    let app = &out["spec"]["containers"][0];
    assert!(app["resources"].get("limits").is_none(), "{app}");
    assert_eq!(
        app["env"],
        json!([{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}])
    );
    let sidecar = &out["spec"]["containers"][1];
    assert_eq!(
        sidecar["env"],
        json!([
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
            {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}
        ])
    );
    assert_eq!(out["spec"]["runtimeClassName"], "nvidia");
    assert_eq!(out["spec"]["schedulerName"], "hami-scheduler");
}

#[test]
fn config_defaults_are_written_in_the_pods_units() {
    let mut config = Config::default();
    config.nvidia.default_memory = 4096;
    config.nvidia.default_cores = 20;
    config.nvidia.memory_factor = 2;
    let mut pod = fixture("slice.yaml");
    pod["spec"]["containers"][0]["resources"]["limits"] =
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "10"});
    let out = mutated(&pod, &config);
    let limits = &out["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(
        limits["nvidia.com/gpumem"], "2048",
        "4096 MiB / memoryFactor 2"
    );
    assert_eq!(
        limits["nvidia.com/gpucores"], "10",
        "the author's value stays"
    );
    // A bare count stays a whole GPU: no memory written, cores 100.
    let out = mutated(&fixture("gpu-only.yaml"), &config);
    let limits = &out["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["nvidia.com/gpucores"], "100");
    assert!(limits.get("nvidia.com/gpumem").is_none());
}

#[test]
fn pods_for_other_schedulers_and_without_gpus_are_left_alone() {
    assert!(matches!(
        mutate_pod(&fixture("other-scheduler.yaml"), &Config::default(), None),
        Mutation::Skip(_)
    ));
    assert_eq!(
        mutate_pod(&fixture("no-gpu.yaml"), &Config::default(), None),
        Mutation::Patch(vec![])
    );
    // Without forceOverwriteDefaultScheduler, default-scheduler pods are not ours.
    let mut config = Config::default();
    config.scheduler.force_overwrite_default_scheduler = false;
    assert!(matches!(
        mutate_pod(&fixture("gpu-only.yaml"), &config, None),
        Mutation::Skip(_)
    ));
    // ... but a pod that names no scheduler is.
    let mut pod = fixture("gpu-only.yaml");
    pod["spec"].as_object_mut().unwrap().remove("schedulerName");
    assert!(
        ops(&pod, &config)
            .iter()
            .any(|op| op["path"] == "/spec/schedulerName")
    );
}

#[test]
fn denials_name_what_is_wrong() {
    let deny = |name: &str| match mutate_pod(&fixture(name), &Config::default(), None) {
        Mutation::Deny(d) => d.message,
        other => panic!("{name}: expected a denial, got {other:?}"),
    };
    assert!(
        deny("privileged.yaml").contains("container \"shell\": securityContext.privileged is true")
    );
    assert!(deny("node-name.yaml").contains("spec.nodeName is \"gpu-a100-1\""));
    let m = deny("cores-150.yaml");
    assert!(
        m.contains("nvidia.com/gpucores") && m.contains("150") && m.contains("0..=100"),
        "{m}"
    );
    let mut pod = fixture("gpu-only.yaml");
    pod["spec"]["containers"] = json!([]);
    assert_eq!(
        mutate_pod(&pod, &Config::default(), None),
        Mutation::Deny(gpugate::admission::Denial::new(
            gpugate::admission::DenyReason::NoContainers,
            "pod has no containers"
        ))
    );
}

#[test]
fn unreadable_objects_are_invalid_not_a_panic() {
    for bad in [
        json!("a string"),
        json!({"spec": {"containers": "nope"}}),
        json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": [1]}}}]}}),
    ] {
        assert!(
            matches!(
                mutate_pod(&bad, &Config::default(), None),
                Mutation::Invalid(_)
            ),
            "{bad}"
        );
    }
}

proptest::proptest! {
    /// Whatever GPU resources a container states, the mutated pod is stable.
    #[test]
    fn mutation_is_idempotent(
        gpu in proptest::option::of(0u32..4),
        mem in proptest::option::of(0u32..50000),
        pct in proptest::option::of(0u32..=100),
        cores in proptest::option::of(0u32..=100),
        in_requests in proptest::bool::ANY,
        default_memory in proptest::prop_oneof![proptest::strategy::Just(0u64), proptest::strategy::Just(4096u64)],
        default_cores in proptest::prop_oneof![proptest::strategy::Just(0u32), proptest::strategy::Just(25u32)],
    ) {
        let mut config = Config::default();
        config.nvidia.default_memory = default_memory;
        config.nvidia.default_cores = default_cores;
        let mut limits = serde_json::Map::new();
        if let Some(v) = gpu { limits.insert("nvidia.com/gpu".into(), json!(v.to_string())); }
        if let Some(v) = mem { limits.insert("nvidia.com/gpumem".into(), json!(v.to_string())); }
        if let Some(v) = pct { limits.insert("nvidia.com/gpumem-percentage".into(), json!(v.to_string())); }
        if let Some(v) = cores { limits.insert("nvidia.com/gpucores".into(), json!(v.to_string())); }
        let key = if in_requests { "requests" } else { "limits" };
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {key: limits}}]}});
        match mutate_pod(&pod, &config, None) {
            Mutation::Patch(ops) => {
                let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
                let mut out = pod.clone();
                json_patch::patch(&mut out, &patch).unwrap();
                proptest::prop_assert_eq!(mutate_pod(&out, &config, None), Mutation::Patch(vec![]));
            }
            Mutation::Deny(_) => {}
            other => proptest::prop_assert!(false, "unexpected {:?}", other),
        }
    }
}
