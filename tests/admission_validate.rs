//! The validating webhook's decisions on real Pod objects.

use std::path::Path;

use gpugate::admission::validate::{Validation, validate_pod};
use gpugate::config::Config;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods")
        .join(name);
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn deny(name: &str) -> String {
    match validate_pod(&fixture(name), &Config::default(), None) {
        Validation::Deny(d) => d.message,
        other => panic!("{name}: expected a denial, got {other:?}"),
    }
}

fn warnings(pod: &Value) -> Vec<String> {
    match validate_pod(pod, &Config::default(), None) {
        Validation::Allow { warnings } => warnings,
        other => panic!("expected admission, got {other:?}"),
    }
}

#[test]
fn valid_pods_are_admitted_without_warnings() {
    for name in [
        "gpu-only.yaml",
        "slice.yaml",
        "init-and-sidecar.yaml",
        "no-gpu.yaml",
    ] {
        assert_eq!(warnings(&fixture(name)), Vec::<String>::new(), "{name}");
    }
}

/// HAMi v2.10's GPU policy chains are admitted (they were refused before
/// gpugate read them); a chain with an unknown word is not.
#[test]
fn hami_policy_chains_are_admitted() {
    let mut pod = fixture("unknown-policy.yaml");
    for chain in ["binpack,numa", "spread,numa", "numa", "mutex,numa"] {
        pod["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] = json!(chain);
        assert_eq!(warnings(&pod), Vec::<String>::new(), "{chain}");
    }
    pod["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] = json!("binpack,fastest");
    match validate_pod(&pod, &Config::default(), None) {
        Validation::Deny(d) => assert!(
            d.message.contains("unknown GPU policy \"binpack,fastest\""),
            "{}",
            d.message
        ),
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn denials_say_what_and_how_to_fix() {
    let m = deny("node-name.yaml");
    assert!(
        m.contains("spec.nodeName is \"gpu-a100-1\"") && m.contains("remove spec.nodeName"),
        "{m}"
    );
    let m = deny("privileged.yaml");
    assert!(
        m.contains("container \"shell\"") && m.contains("privileged"),
        "{m}"
    );
    let m = deny("cores-150.yaml");
    assert_eq!(
        m,
        "container \"c\", resource nvidia.com/gpucores: 150 is more than 100: allowed 0..=100 (percent of one GPU)"
    );
    let m = deny("unknown-policy.yaml");
    assert_eq!(
        m,
        "annotation hami.io/gpu-scheduler-policy: unknown GPU policy \"fastest\": allowed binpack, spread, topology-aware, mutex, or a comma chain of binpack, spread, numa, mutex, topology-aware (e.g. binpack,numa)"
    );
    let m = deny("forged-allocation.yaml");
    assert!(
        m.starts_with("hami.io/vgpu-devices-allocated is written by the vGPU scheduler"),
        "{m}"
    );
    // gpugate's record of a pod's NUMA zones is gpugate's to write.
    let m = deny("forged-numa-zones.yaml");
    assert!(
        m.starts_with("gpugate.io/numa-zones is written by the vGPU scheduler"),
        "{m}"
    );
    let m = deny("limits-requests-disagree.yaml");
    assert_eq!(
        m,
        "container \"c\", resource nvidia.com/gpumem: limits 4000 and requests 2000 disagree: give the same value, or limits only"
    );
}

#[test]
fn malformed_quantities_are_denied() {
    for (value, needle) in [
        ("-1", "negative"),
        ("0.5", "whole number"),
        ("lots", "not a Kubernetes quantity"),
    ] {
        let mut pod = fixture("slice.yaml");
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = json!(value);
        match validate_pod(&pod, &Config::default(), None) {
            Validation::Deny(gpugate::admission::Denial { message: m, .. }) => {
                assert!(m.contains("nvidia.com/gpumem") && m.contains(needle), "{m}")
            }
            other => panic!("{value}: {other:?}"),
        }
    }
    // Same value, different spelling: no disagreement.
    let mut pod = fixture("limits-requests-disagree.yaml");
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpumem"] = json!("4k");
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = json!("4000");
    assert_eq!(warnings(&pod), Vec::<String>::new());
}

#[test]
fn legal_but_probably_wrong_requests_get_warnings() {
    let w = warnings(&fixture("both-memory-forms.yaml"));
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("nvidia.com/gpumem wins"), "{w:?}");
    assert!(w[1].contains("schedulerName is \"volcano\""), "{w:?}");
    let mut pod = fixture("slice.yaml");
    pod["spec"]["containers"][0]["resources"]["limits"] =
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"});
    let w = warnings(&pod);
    assert!(w[0].contains("whole memory"), "{w:?}");
}

#[test]
fn unreadable_objects_are_invalid() {
    assert!(matches!(
        validate_pod(&json!([1, 2]), &Config::default(), None),
        Validation::Invalid(_)
    ));
    assert!(matches!(
        validate_pod(
            &json!({"metadata": {"annotations": {"a": 1}}}),
            &Config::default(),
            None
        ),
        Validation::Invalid(_)
    ));
}

#[test]
fn denials_carry_stable_reason_codes() {
    use gpugate::admission::DenyReason;
    for (name, reason) in [
        ("node-name.yaml", DenyReason::NodeName),
        ("privileged.yaml", DenyReason::Privileged),
        ("cores-150.yaml", DenyReason::InvalidRequest),
        ("unknown-policy.yaml", DenyReason::UnknownPolicy),
        ("forged-allocation.yaml", DenyReason::ForgedAllocation),
        ("forged-numa-zones.yaml", DenyReason::ForgedAllocation),
        (
            "limits-requests-disagree.yaml",
            DenyReason::LimitsRequestsMismatch,
        ),
    ] {
        match validate_pod(&fixture(name), &Config::default(), None) {
            Validation::Deny(d) => assert_eq!(d.reason, reason, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Environment variables that switch off or widen the vGPU limits are
/// refused on containers that request vGPU resources, naming the container
/// and the variable; a namespace policy can allow them.
#[test]
fn variables_that_bypass_the_vgpu_limits_are_denied() {
    let m = deny("env-escape.yaml");
    assert!(
        m.starts_with("container \"trainer\": env CUDA_DISABLE_CONTROL bypasses the vGPU limits: HAMi's device plugin then does not load HAMi-core"),
        "{m}"
    );
    // The other two, in the same real pod.
    for (name, value) in [
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "100000m"),
    ] {
        let mut pod = fixture("env-escape.yaml");
        pod["spec"]["containers"][0]["env"][1] = json!({"name": name, "value": value});
        match validate_pod(&pod, &Config::default(), None) {
            Validation::Deny(d) => {
                assert_eq!(d.reason.as_str(), "limit_escape");
                assert!(
                    d.message
                        .contains(&format!("container \"trainer\": env {name} bypasses")),
                    "{}",
                    d.message
                );
            }
            other => panic!("{name}={value}: {other:?}"),
        }
    }
    // Without the variable the pod is fine: the container without GPUs
    // is not judged.
    let mut pod = fixture("env-escape.yaml");
    pod["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    assert_eq!(warnings(&pod), Vec::<String>::new());
    // A namespace policy can allow it explicitly.
    let config = Config::from_yaml(
        "namespacePolicies:\n  - name: lab\n    namespaces: [ml]\n    limits: {allowEnv: [CUDA_DISABLE_CONTROL]}\n",
        "test",
    )
    .unwrap();
    assert!(matches!(
        validate_pod(&fixture("env-escape.yaml"), &config, Some("ml")),
        Validation::Allow { .. }
    ));
    // envFrom cannot be seen at admission: a warning says so.
    let mut pod = fixture("env-escape.yaml");
    pod["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    pod["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "settings"}}]);
    let w = warnings(&pod);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("envFrom can set variables that bypass the vGPU limits"),
        "{w:?}"
    );
}

/// HAMi v2.10's newer pod annotations: `nvidia.com/vgpu-mode` (naming
/// device modes: `hami-core`, `mig`, `mps`, or several, as a GPU is taken
/// when its mode is a part of the value) and
/// `hami.io/device-scoring-weights` (exactly `slot`, `core` and `memory`,
/// whole numbers, not all 0) are admitted when HAMi would read them, and
/// refused with what is wrong at admission rather than failing the
/// extender's filter call later.
#[test]
fn vgpu_mode_and_scoring_weights_are_checked_at_admission() {
    let with = |key: &str, value: &str| {
        let mut pod = fixture("slice.yaml");
        pod["metadata"]["annotations"][key] = json!(value);
        validate_pod(&pod, &Config::default(), None)
    };
    for (key, value) in [
        ("nvidia.com/vgpu-mode", "hami-core"),
        ("nvidia.com/vgpu-mode", "mig"),
        ("nvidia.com/vgpu-mode", "hami-core,mig"),
        ("hami.io/device-scoring-weights", "slot=1,core=2,memory=3"),
        ("hami.io/device-scoring-weights", "memory=1,slot=0,core=0"),
    ] {
        assert!(
            matches!(with(key, value), Validation::Allow { .. }),
            "{key}={value}"
        );
    }
    for (key, value, says) in [
        ("nvidia.com/vgpu-mode", "cuda", "names no device mode"),
        ("nvidia.com/vgpu-mode", "core", "names no device mode"),
        (
            "hami.io/device-scoring-weights",
            "slot=1,core=2",
            "exactly slot=N,core=N,memory=N",
        ),
        (
            "hami.io/device-scoring-weights",
            "slot=0,core=0,memory=0",
            "all 0",
        ),
        (
            "hami.io/device-scoring-weights",
            "slot=1,core=1,gpu=1",
            "unknown key \"gpu\"",
        ),
    ] {
        match with(key, value) {
            Validation::Deny(d) => assert!(
                d.message.contains(key) && d.message.contains(says),
                "{key}={value}: {}",
                d.message
            ),
            other => panic!("{key}={value}: expected a denial, got {other:?}"),
        }
    }
}

/// deploy/'s ValidatingAdmissionPolicy guards on UPDATE the keys the
/// webhook refuses on CREATE: its CEL names each of gpugate's own keys
/// and each rule of HAMi's (`is_scheduler_owned`), and a vendor's device
/// lists are refused at CREATE as NVIDIA's are.
#[test]
fn the_update_policy_names_the_keys_the_webhook_refuses() {
    use gpugate::admission::validate::GPUGATE_OWNED;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/admission-policy.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let policy: Value = serde_yaml_ng::from_str(text.split("\n---\n").next().unwrap()).unwrap();
    let owned = policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "owned")
        .unwrap()["expression"]
        .as_str()
        .unwrap()
        .to_string();
    for key in GPUGATE_OWNED {
        assert!(owned.contains(&format!("'{key}'")), "{key} in {owned}");
    }
    for rule in [
        "k.startsWith('hami.io/vgpu-')",
        "k.startsWith('hami.io/bind-')",
        "k.endsWith('-devices-to-allocate')",
        "k.endsWith('-devices-allocated')",
        "k == 'hami.io/kunlun-allocated'",
    ] {
        assert!(owned.contains(rule), "{rule} in {owned}");
    }
    for key in [
        "hami.io/cambricon-mlu-devices-to-allocate",
        "hami.io/kunlun-allocated",
        "gpugate.io/numa-zones",
    ] {
        let mut pod = fixture("slice.yaml");
        pod["metadata"]["annotations"] = json!({key: "x"});
        match validate_pod(&pod, &Config::default(), None) {
            Validation::Deny(d) => assert!(d.message.starts_with(key), "{}", d.message),
            other => panic!("{key}: {other:?}"),
        }
    }
}

/// The webhook reads what quota scopes see of a new pod exactly as the
/// scheduler side reads a stored one (`cluster::convert::pod_scope_facts`).
#[test]
fn the_webhook_and_the_scheduler_read_quota_scopes_alike() {
    use gpugate::admission::pod::PodView;
    use gpugate::cluster::convert::pod_scope_facts;
    let base = fixture("slice.yaml");
    let mut cases = vec![base.clone()];
    for (path, value) in [
        ("/spec/priorityClassName", json!("high")),
        ("/spec/priorityClassName", json!("")),
        ("/spec/activeDeadlineSeconds", json!(30)),
        ("/spec/activeDeadlineSeconds", json!(-1)),
        ("/spec/resources", json!({"requests": {"cpu": "100m"}})),
        (
            "/spec/resources",
            json!({"limits": {"nvidia.com/gpu": "1"}}),
        ),
        (
            "/spec/containers/0/resources/requests",
            json!({"memory": "0"}),
        ),
        (
            "/spec/containers/0/resources/requests",
            json!({"memory": "64Mi"}),
        ),
        (
            "/spec/affinity",
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "namespaceSelector": {}}]}}),
        ),
        (
            "/spec/affinity",
            json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": {"topologyKey": "zone", "namespaces": ["a"]}}]}}),
        ),
        ("/spec/affinity", json!({"nodeAffinity": {}})),
    ] {
        let mut pod = base.clone();
        let (parent, key) = path.rsplit_once('/').unwrap();
        pod.pointer_mut(parent).unwrap()[key] = value;
        cases.push(pod);
    }
    for pod in cases {
        let text = pod.to_string();
        let view = PodView::from_json(&text).unwrap();
        let stored: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod.clone()).unwrap();
        assert_eq!(
            view.scope_facts().unwrap(),
            pod_scope_facts(&stored),
            "{pod}"
        );
    }
}

/// A pod that asks for an NVIDIA GPU and a device of a kind gpugate does
/// not place (Enflame's legacy shared GCU) is refused, naming the container, the
/// resource and the kind; the same NPU alone, or asked at 0, is not
/// gpugate's to judge. The extender reads the pod the same way: its plan
/// is refused with the same words, so it is never placed with the GPU
/// alone.
#[test]
fn a_kind_gpugate_does_not_place_is_refused_not_dropped() {
    let message = deny("gpu-and-vgcu.yaml");
    assert!(
        message.contains("container \"vgcu\", resource enflame.com/vgcu")
            && message.contains("asks for Enflame shared GCUs, which gpugate does not place yet"),
        "{message}"
    );
    let mut npu_alone = fixture("gpu-and-vgcu.yaml");
    npu_alone["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    assert_eq!(warnings(&npu_alone), Vec::<String>::new());
    let mut zero = fixture("gpu-and-vgcu.yaml");
    zero["spec"]["containers"][1]["resources"]["limits"] = json!({"enflame.com/vgcu": "0"});
    assert_eq!(warnings(&zero), Vec::<String>::new());
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(fixture("gpu-and-vgcu.yaml")).unwrap();
    let refused = gpugate::cluster::convert::pod_plan(&pod, &Config::default()).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("resource enflame.com/vgcu: asks for Enflame shared GCUs"),
        "{refused}"
    );
}
