//! The namespace policy gateway through both webhooks, configured from a
//! real config file.

use std::path::Path;

use gpugate::admission::mutate::{Mutation, mutate_pod};
use gpugate::admission::validate::{Validation, validate_pod};
use gpugate::admission::{Denial, DenyReason};
use gpugate::config::Config;
use serde_json::{Value, json};

fn config() -> Config {
    Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config/policies.yaml"))
        .unwrap()
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods")
        .join(name);
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn mutated(pod: &Value, config: &Config, ns: &str) -> Value {
    let Mutation::Patch(ops) = mutate_pod(pod, config, Some(ns)) else {
        panic!("no patch")
    };
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
    let mut out = pod.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    assert_eq!(
        mutate_pod(&out, config, Some(ns)),
        Mutation::Patch(vec![]),
        "idempotent"
    );
    out
}

#[test]
fn defaults_turn_a_bare_gpu_into_a_slice_and_add_placement_annotations() {
    let c = config();
    let out = mutated(&fixture("gpu-only.yaml"), &c, "ml");
    let limits = &out["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["nvidia.com/gpumem"], "4096");
    assert_eq!(
        limits["nvidia.com/gpucores"], "25",
        "the policy's cores, not an exclusive 100"
    );
    assert_eq!(
        out["metadata"]["annotations"],
        json!({
            "hami.io/node-scheduler-policy": "spread",
            "hami.io/gpu-scheduler-policy": "binpack",
            "nvidia.com/use-gputype": "A100,H100",
            "nvidia.com/nouse-gputype": "T4"
        })
    );
    // The mutated pod passes the policy's limits.
    assert_eq!(
        validate_pod(&out, &c, Some("ml")),
        Validation::Allow { warnings: vec![] }
    );
    // Another namespace: HAMi's defaults only.
    let out = mutated(&fixture("gpu-only.yaml"), &c, "default");
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"],
        "100"
    );
    assert!(out["metadata"].get("annotations").is_none());
}

#[test]
fn the_pods_own_choices_are_kept() {
    let c = config();
    let mut pod = fixture("slice.yaml");
    pod["metadata"]["annotations"] = json!({"hami.io/node-scheduler-policy": "binpack", "nvidia.com/use-gputype": "H100", "nvidia.com/nouse-gputype": "T4"});
    let out = mutated(&pod, &c, "ml-serving");
    let limits = &out["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["nvidia.com/gpumem"], "4000");
    assert_eq!(limits["nvidia.com/gpucores"], "30");
    assert_eq!(
        out["metadata"]["annotations"]["hami.io/node-scheduler-policy"],
        "binpack"
    );
    assert_eq!(
        out["metadata"]["annotations"]["nvidia.com/use-gputype"],
        "H100"
    );
    assert_eq!(
        validate_pod(&out, &c, Some("ml-serving")),
        Validation::Allow { warnings: vec![] }
    );
}

fn three_gpus(ns: &str) -> Value {
    let mut pod = fixture("slice.yaml");
    pod["metadata"]["namespace"] = json!(ns);
    pod["spec"]["containers"][0]["resources"]["limits"] =
        json!({"nvidia.com/gpu": "3", "nvidia.com/gpumem": "1000"});
    pod["metadata"]["annotations"] =
        json!({"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "T4"});
    pod
}

#[test]
fn modes_enforce_warn_and_audit() {
    let c = config();
    match validate_pod(&three_gpus("ml"), &c, None) {
        Validation::Deny(Denial { reason, message }) => {
            assert_eq!(reason, DenyReason::PolicyLimit);
            assert_eq!(
                message,
                "namespace policy \"ml-team\": container \"server\" asks for 3 GPUs; at most 2 per container"
            );
        }
        other => panic!("{other:?}"),
    }
    match validate_pod(&three_gpus("research"), &c, None) {
        Validation::Allow { warnings } => {
            assert_eq!(
                warnings,
                [
                    "namespace policy \"research-soft\": container \"server\" asks for 3 GPUs; at most 1 per container"
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        validate_pod(&three_gpus("batch"), &c, None),
        Validation::Allow { warnings: vec![] }
    );
}

#[test]
fn models_and_exclusive_gpus() {
    let c = config();
    let mut pod = three_gpus("ml");
    pod["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"});
    pod["metadata"]["annotations"]["nvidia.com/use-gputype"] = json!("T4");
    let Validation::Deny(d) = validate_pod(&pod, &c, None) else {
        panic!()
    };
    assert!(
        d.message.contains("exclusive GPUs are not allowed"),
        "{}",
        d.message
    );
    assert!(
        d.message.contains("use-gputype names \"t4\""),
        "{}",
        d.message
    );
}

#[test]
fn bad_policies_are_refused_with_the_policy_named() {
    let e = Config::from_yaml(
        "namespacePolicies:\n  - name: x\n    namespaces: [a]\n    mode: strict\n",
        "f.yaml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("strict"), "{e}");
    let e = Config::from_yaml("namespacePolicies:\n  - name: x\n    namespaces: [a]\n    defaults: {gpumemPercentage: 150}\n", "f.yaml").unwrap_err();
    assert!(
        e.to_string()
            .contains("namespacePolicies[\"x\"]: defaults.gpumemPercentage"),
        "{e}"
    );
    let e = Config::from_yaml(
        "namespacePolicies:\n  - name: x\n    namespaces: [a]\n    limits: {gpuPerPod: 1}\n",
        "f.yaml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("gpuPerPod"), "{e}");
}

/// `limits.deviceModes` (gpugate's own addition to HAMi's
/// `nvidia.com/vgpu-mode`): one mode is pinned (written into pods that set
/// none); several are enforced by HAMi's substring rule (every mode the
/// value selects must be allowed, and an unset value selects every mode);
/// a mode that is not a device mode is refused at load.
#[test]
fn device_modes_are_pinned_or_limited() {
    let c = Config::from_yaml(
        "namespacePolicies:\n  - name: sliced\n    namespaces: [sliced]\n    limits: {deviceModes: [hami-core]}\n  - name: no-mig\n    namespaces: [no-mig]\n    limits: {deviceModes: [hami-core, mps]}\n",
        "f.yaml",
    )
    .unwrap();
    // One mode: pinned.
    let out = mutated(&fixture("slice.yaml"), &c, "sliced");
    assert_eq!(
        out["metadata"]["annotations"]["nvidia.com/vgpu-mode"],
        "hami-core"
    );
    assert_eq!(
        validate_pod(&out, &c, Some("sliced")),
        Validation::Allow { warnings: vec![] }
    );
    // The pod's own value is kept, and judged: mig is refused.
    let mut mig = fixture("slice.yaml");
    mig["metadata"]["annotations"] = json!({"nvidia.com/vgpu-mode": "mig"});
    let out = mutated(&mig, &c, "sliced");
    assert_eq!(
        out["metadata"]["annotations"]["nvidia.com/vgpu-mode"],
        "mig"
    );
    let Validation::Deny(d) = validate_pod(&out, &c, Some("sliced")) else {
        panic!("a mig pod admitted in a hami-core namespace")
    };
    assert_eq!(d.reason, DenyReason::PolicyLimit);
    assert!(
        d.message.contains("nvidia.com/vgpu-mode: \"mig\" selects device modes mig; this namespace allows only hami-core"),
        "{}",
        d.message
    );

    // Two modes: nothing written; unset selects every mode (mig too).
    let out = mutated(&fixture("slice.yaml"), &c, "no-mig");
    assert!(
        out["metadata"]["annotations"]
            .get("nvidia.com/vgpu-mode")
            .is_none()
    );
    let Validation::Deny(d) = validate_pod(&out, &c, Some("no-mig")) else {
        panic!("an unset mode admitted where mig is not allowed")
    };
    assert!(
        d.message.contains("without nvidia.com/vgpu-mode the pod may land on any device mode; this namespace allows only hami-core, mps"),
        "{}",
        d.message
    );
    for allowed in ["mps", "hami-core", "hami-core,mps"] {
        let mut p = fixture("slice.yaml");
        p["metadata"]["annotations"] = json!({"nvidia.com/vgpu-mode": allowed});
        assert_eq!(
            validate_pod(&p, &c, Some("no-mig")),
            Validation::Allow { warnings: vec![] },
            "{allowed}"
        );
    }
    // A GPU is taken when its mode is a part of the value (HAMi v2.10,
    // device.go:496): "hami-core,mig" selects mig too, which is not
    // allowed; "core" selects no mode at all and is refused as such.
    let mut p = fixture("slice.yaml");
    p["metadata"]["annotations"] = json!({"nvidia.com/vgpu-mode": "hami-core,mig"});
    let Validation::Deny(d) = validate_pod(&p, &c, Some("no-mig")) else {
        panic!("hami-core,mig admitted where mig is not allowed")
    };
    assert!(
        d.message
            .contains("\"hami-core,mig\" selects device modes hami-core, mig; this namespace allows only hami-core, mps"),
        "{}",
        d.message
    );
    let mut p = fixture("slice.yaml");
    p["metadata"]["annotations"] = json!({"nvidia.com/vgpu-mode": "core"});
    let Validation::Deny(d) = validate_pod(&p, &c, Some("no-mig")) else {
        panic!("core admitted")
    };
    assert!(d.message.contains("names no device mode"), "{}", d.message);

    let e = Config::from_yaml(
        "namespacePolicies:\n  - name: x\n    namespaces: [a]\n    limits: {deviceModes: [cuda]}\n",
        "f.yaml",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("limits.deviceModes names \"cuda\"; device modes are hami-core, mig, mps"),
        "{e}"
    );
}
