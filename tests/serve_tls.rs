//! The webhook port over real TLS on 127.0.0.1: AdmissionReviews of real
//! Pod fixtures in v1 and v1beta1, bad bodies, oversized bodies, and slow
//! or silent clients.

mod support {
    pub mod https;
}

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use gpugate::config::Config;
use gpugate::server::limits::Limits;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::AppState;
use serde_json::{Value, json};
use support::https::{Server, connect, post, start};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

fn review(api_version: &str, fixture: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods")
        .join(fixture);
    let pod: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{fixture}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": pod,
            "dryRun": false
        }
    })
}

/// Posts a review of a fixture pod; returns the status and the parsed answer.
async fn post_review(s: &Server, path: &str, version: &str, fixture: &str) -> (u16, Value) {
    let (status, body) = post(s, path, review(version, fixture).to_string().as_bytes()).await;
    (status, serde_json::from_slice(&body).unwrap())
}

/// The status message of a review answer.
fn message(out: &Value) -> &str {
    out["response"]["status"]["message"].as_str().unwrap_or("")
}

#[tokio::test]
async fn reviews_of_real_pods_in_both_versions() {
    let s = start(
        AppState::new(Config::default(), Metrics::new(None)),
        Limits::default(),
    )
    .await;
    for version in ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] {
        let req = review(version, "gpu-only.yaml");
        let (status, body) = post(&s, "/mutate", req.to_string().as_bytes()).await;
        assert_eq!(status, 200);
        let out: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(out["apiVersion"], version);
        assert_eq!(out["kind"], "AdmissionReview");
        assert_eq!(out["response"]["uid"], "uid-gpu-only.yaml");
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut pod = req["request"]["object"].clone();
        json_patch::patch(&mut pod, &patch).unwrap();
        assert_eq!(pod["spec"]["schedulerName"], "hami-scheduler");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"],
            "100"
        );
    }
    // HAMi's path answers the same.
    let (status, out) = post_review(&s, "/webhook", "admission.k8s.io/v1", "privileged.yaml").await;
    assert_eq!(status, 200);
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["code"], 403);
    assert!(message(&out).contains("privileged"));
    // No GPU: admitted without a patch.
    let (_, out) = post_review(&s, "/mutate", "admission.k8s.io/v1", "no-gpu.yaml").await;
    assert_eq!(
        out["response"],
        json!({"uid": "uid-no-gpu.yaml", "allowed": true})
    );
}

#[tokio::test]
async fn bad_bodies() {
    let s = start(
        AppState::new(Config::default(), Metrics::new(None)),
        Limits::default(),
    )
    .await;
    let (status, body) = post(&s, "/mutate", b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}").await;
    assert_eq!(status, 400);
    let out: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        out["error"]
            .as_str()
            .unwrap()
            .contains("not an AdmissionReview"),
        "{out}"
    );
    // A truncated review: the uid is recovered and answered.
    let full = review("admission.k8s.io/v1", "gpu-only.yaml").to_string();
    let (status, body) = post(&s, "/mutate", &full.as_bytes()[..full.len() - 30]).await;
    assert_eq!(status, 200);
    let out: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(out["response"]["uid"], "uid-gpu-only.yaml");
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["code"], 400);
    // A Pod that is not a Pod.
    let mut broken = review("admission.k8s.io/v1", "gpu-only.yaml");
    broken["request"]["object"]["spec"]["containers"] = json!("nope");
    let (_, body) = post(&s, "/mutate", broken.to_string().as_bytes()).await;
    let out: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(out["response"]["status"]["code"], 400);
    assert!(message(&out).contains("cannot read the Pod"));
    // Over 7 MiB.
    let (status, _) = post(&s, "/mutate", &vec![b' '; 7 * 1024 * 1024 + 1]).await;
    assert_eq!(status, 413);
    // Unknown path.
    let (status, _) = post(&s, "/nope", b"{}").await;
    assert_eq!(status, 404);
}

/// A review whose object cannot be read as the kind it claims is refused
/// (HTTP 200, `allowed: false`, uid echoed), by both webhooks, for every
/// operation; never allowed.
#[tokio::test]
async fn objects_that_are_not_what_they_claim_are_refused() {
    let s = start(
        AppState::new(Config::default(), Metrics::new(None)),
        Limits::default(),
    )
    .await;
    let refused = |out: &Value, what: &str| {
        assert_eq!(out["response"]["allowed"], false, "{what}: {out}");
        assert_eq!(out["response"]["status"]["code"], 400, "{what}: {out}");
        assert_eq!(out["response"]["uid"], "uid-gpu-only.yaml", "{what}: {out}");
    };
    for path in ["/mutate", "/validate"] {
        for operation in ["CREATE", "UPDATE", "DELETE", "CONNECT"] {
            for (object, kind) in [
                (json!(42), "a number"),
                (json!("pod"), "a string"),
                (
                    json!([review("admission.k8s.io/v1", "gpu-only.yaml")["request"]["object"]]),
                    "an array",
                ),
                (json!(true), "a boolean"),
            ] {
                let mut req = review("admission.k8s.io/v1", "gpu-only.yaml");
                req["request"]["operation"] = json!(operation);
                req["request"]["object"] = object;
                let (status, body) = post(&s, path, req.to_string().as_bytes()).await;
                assert_eq!(status, 200);
                let out: Value = serde_json::from_slice(&body).unwrap();
                let what = format!("{path} {operation} {kind}");
                refused(&out, &what);
                assert_eq!(
                    message(&out),
                    format!("request.object is {kind}, not a JSON object"),
                    "{what}"
                );
                // Whatever kind the review claims.
                req["request"]["kind"]["kind"] = json!("Deployment");
                let (_, body) = post(&s, path, req.to_string().as_bytes()).await;
                refused(&serde_json::from_slice(&body).unwrap(), &what);
            }
            // A Pod whose containers are not a list, on any operation.
            let mut req = review("admission.k8s.io/v1", "gpu-only.yaml");
            req["request"]["operation"] = json!(operation);
            req["request"]["object"]["spec"]["containers"] = json!(42);
            let (_, body) = post(&s, path, req.to_string().as_bytes()).await;
            let out: Value = serde_json::from_slice(&body).unwrap();
            refused(&out, &format!("{path} {operation} broken Pod"));
            assert!(message(&out).contains("cannot read the Pod"), "{out}");
        }
        // A real Pod on UPDATE, and a DELETE without an object, are
        // admitted unchanged; an object of another kind is not gpugate's.
        let mut req = review("admission.k8s.io/v1", "gpu-only.yaml");
        req["request"]["operation"] = json!("UPDATE");
        let (_, out) = post(&s, path, req.to_string().as_bytes()).await;
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            out["response"],
            json!({"uid": "uid-gpu-only.yaml", "allowed": true})
        );
        req["request"]["operation"] = json!("DELETE");
        req["request"]["object"] = Value::Null;
        let (_, out) = post(&s, path, req.to_string().as_bytes()).await;
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["response"]["allowed"], true);
        req["request"]["operation"] = json!("CREATE");
        req["request"]["kind"]["kind"] = json!("ConfigMap");
        req["request"]["object"] = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {}});
        let (_, out) = post(&s, path, req.to_string().as_bytes()).await;
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["response"]["allowed"], true);
    }
}

#[tokio::test]
async fn slow_and_silent_clients_are_cut_off() {
    let s = start(
        AppState::new(Config::default(), Metrics::new(None)),
        Limits {
            handshake: Duration::from_millis(300),
            header: Duration::from_millis(300),
            drain: Duration::from_secs(1),
            ..Limits::default()
        },
    )
    .await;
    // Connects but never starts TLS.
    let mut tcp = TcpStream::connect(s.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(3), tcp.read(&mut buf))
        .await
        .expect("server closes a silent connection")
        .unwrap_or(0);
    assert_eq!(n, 0);
    // Starts a request and never finishes its headers.
    let mut tls = connect(&s).await;
    tls.write_all(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(3), tls.read_to_end(&mut rest)).await;
    assert!(
        r.is_ok(),
        "server must close a connection whose headers never end"
    );
    // The server still serves others.
    let (status, _) = post(
        &s,
        "/mutate",
        review("admission.k8s.io/v1", "no-gpu.yaml")
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn validate_over_tls() {
    let s = start(
        AppState::new(Config::default(), Metrics::new(None)),
        Limits::default(),
    )
    .await;
    let (status, out) = post_review(
        &s,
        "/validate",
        "admission.k8s.io/v1beta1",
        "cores-150.yaml",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["reason"], "Forbidden");
    assert!(message(&out).contains("150 is more than 100"));
    let (_, out) = post_review(
        &s,
        "/validate",
        "admission.k8s.io/v1",
        "both-memory-forms.yaml",
    )
    .await;
    assert_eq!(out["response"]["allowed"], true);
    assert_eq!(out["response"]["warnings"].as_array().unwrap().len(), 2);
    assert!(out["response"].get("patch").is_none());
}

#[tokio::test]
async fn metrics_count_requests_results_and_denials() {
    let s = start(
        AppState::new(Config::default(), Metrics::new(None)),
        Limits::default(),
    )
    .await;
    post_review(&s, "/mutate", "admission.k8s.io/v1", "gpu-only.yaml").await;
    post_review(&s, "/mutate", "admission.k8s.io/v1", "no-gpu.yaml").await;
    post_review(&s, "/validate", "admission.k8s.io/v1", "privileged.yaml").await;
    post(&s, "/validate", b"[]").await;
    let text = s.state.metrics.encode();
    for line in [
        r#"gpugate_admission_requests_total{webhook="mutate",operation="CREATE",result="patched"} 1"#,
        r#"gpugate_admission_requests_total{webhook="mutate",operation="CREATE",result="allowed"} 1"#,
        r#"gpugate_admission_requests_total{webhook="validate",operation="CREATE",result="denied"} 1"#,
        r#"gpugate_admission_requests_total{webhook="validate",operation="none",result="error"} 1"#,
        r#"gpugate_admission_denials_total{webhook="validate",reason="privileged"} 1"#,
        r#"gpugate_admission_duration_seconds_bucket{le="0.0001",webhook="mutate"}"#,
        r#"gpugate_admission_duration_seconds_count{webhook="validate"} 2"#,
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
}

/// No label value comes from a request: operations outside the fixed set
/// are counted as `other`, so that reviews with huge, distinct operations
/// neither grow the registry nor `/metrics`.
#[tokio::test]
async fn request_data_never_becomes_a_metric_label() {
    let s = start(
        AppState::new(Config::default(), Metrics::new(None)),
        Limits::default(),
    )
    .await;
    let before = s.state.metrics.encode().len();
    for i in 0..20 {
        let mut req = review("admission.k8s.io/v1", "gpu-only.yaml");
        req["request"]["operation"] = json!(format!("{i}{}", "X".repeat(256 * 1024)));
        let (status, _) = post(&s, "/validate", req.to_string().as_bytes()).await;
        assert_eq!(status, 200);
    }
    let text = s.state.metrics.encode();
    assert!(
        text.contains(
            r#"gpugate_admission_requests_total{webhook="validate",operation="other",result="allowed"} 20"#
        ),
        "{text}"
    );
    // One new series (and its histogram) at most, not 5 MiB of labels.
    assert!(
        text.len() < before + 4096,
        "{} -> {} bytes",
        before,
        text.len()
    );
}
