//! Snapshots of the webhooks' answers to reviews of every Pod fixture, in
//! both API versions. The base64 patch is decoded so that a change in what
//! gpugate writes shows up as readable JSON Patch in review.

use std::path::Path;

use base64::Engine as _;
use gpugate::admission::handler::{mutate_review, validate_review};
use gpugate::admission::review::parse_review;
use gpugate::config::Config;
use serde_json::{Value, json};

fn review(version: &str, fixture: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods")
        .join(fixture);
    let pod: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    json!({
        "apiVersion": version,
        "kind": "AdmissionReview",
        "request": {
            "uid": "3f7a4c1e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": pod["metadata"]["namespace"],
            "object": pod
        }
    })
    .to_string()
    .into_bytes()
}

/// The answer with its patch decoded.
fn readable(mut answer: Value) -> Value {
    if let Some(p) = answer["response"].get("patch").and_then(Value::as_str) {
        let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
        answer["response"]["patch"] = serde_json::from_slice(&bytes).unwrap();
    }
    answer
}

const FIXTURES: &[&str] = &[
    "both-memory-forms.yaml",
    "cores-150.yaml",
    "dcu-slice.yaml",
    "env-escape.yaml",
    "forged-allocation.yaml",
    "forged-numa-zones.yaml",
    "gpu-and-dcu.yaml",
    "gpu-and-vgcu.yaml",
    "gpu-only.yaml",
    "gpu-sidecar.yaml",
    "init-and-sidecar.yaml",
    "limits-requests-disagree.yaml",
    "mlu-slice.yaml",
    "no-gpu.yaml",
    "node-name.yaml",
    "other-scheduler.yaml",
    "privileged.yaml",
    "slice.yaml",
    "unknown-policy.yaml",
];

#[test]
fn every_fixture_is_snapshotted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pods");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, FIXTURES);
}

#[test]
fn answers() {
    let config = Config::default();
    for fixture in FIXTURES {
        for version in ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] {
            let body = review(version, fixture);
            let req = parse_review(&body).unwrap();
            let mutate = readable(mutate_review(&req, &config, None).0.to_json());
            let validate = readable(validate_review(&req, &config, None).0.to_json());
            let name = fixture.trim_end_matches(".yaml");
            let v = version.rsplit('/').next().unwrap_or(version);
            insta::assert_json_snapshot!(
                format!("{name}-{v}"),
                json!({"mutate": mutate, "validate": validate})
            );
        }
    }
}
