//! The AdmissionReview envelope, `admission.k8s.io/v1` and `v1beta1`.
//!
//! gpugate's own small types rather than kube-core's: the answer must echo the
//! request's apiVersion, carry the patch as a base64 string (kube-core writes
//! an array of numbers, kube-rs/kube#1781) and recover the request's `uid`
//! even when the body cannot be fully parsed, so kube-apiserver gets an
//! answer it can match to its request.

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;

pub const V1: &str = "admission.k8s.io/v1";
pub const V1BETA1: &str = "admission.k8s.io/v1beta1";
const KIND: &str = "AdmissionReview";

/// One admission request, as much of it as gpugate reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewRequest {
    /// `admission.k8s.io/v1` or `admission.k8s.io/v1beta1`, echoed back.
    pub api_version: String,
    pub uid: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The object's kind (`request.kind.kind`), e.g. `Pod`.
    pub kind: Option<String>,
    /// The raw object: patches are computed against it, not against a
    /// re-serialised typed copy.
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub dry_run: bool,
}

/// A body that is not an AdmissionReview (HTTP 400), or one that is but is
/// malformed (answered with an errored review when its uid is known).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("request body is not JSON: {problem}")]
    NotJson {
        problem: String,
        /// apiVersion and uid found by scanning the raw body, if any.
        recovered: Option<(String, String)>,
    },
    #[error("request body is not an AdmissionReview: {0}")]
    NotAdmissionReview(String),
    #[error("AdmissionReview without request.uid")]
    NoUid,
}

impl EnvelopeError {
    /// apiVersion and uid to answer with, when they could be found.
    pub fn recovered(&self) -> Option<(&str, &str)> {
        match self {
            EnvelopeError::NotJson {
                recovered: Some((v, u)),
                ..
            } => Some((v, u)),
            _ => None,
        }
    }
}

/// Parses an AdmissionReview request body.
pub fn parse_review(body: &[u8]) -> Result<ReviewRequest, EnvelopeError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| EnvelopeError::NotJson {
        problem: e.to_string(),
        recovered: scan_ids(body),
    })?;
    let Some(obj) = value.as_object() else {
        return Err(EnvelopeError::NotAdmissionReview(
            "not a JSON object".into(),
        ));
    };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != KIND || (api_version != V1 && api_version != V1BETA1) {
        return Err(EnvelopeError::NotAdmissionReview(format!(
            "apiVersion {api_version:?}, kind {kind:?}: expected {V1} or {V1BETA1} {KIND}"
        )));
    }
    let Some(request) = obj.get("request").and_then(Value::as_object) else {
        return Err(EnvelopeError::NotAdmissionReview("no request".into()));
    };
    let text = |k: &str| request.get(k).and_then(Value::as_str).map(str::to_string);
    let uid = text("uid")
        .filter(|u| !u.is_empty())
        .ok_or(EnvelopeError::NoUid)?;
    let object = |k: &str| request.get(k).filter(|v| !v.is_null()).cloned();
    Ok(ReviewRequest {
        api_version: api_version.to_string(),
        uid,
        operation: text("operation").unwrap_or_default(),
        namespace: text("namespace").filter(|s| !s.is_empty()),
        name: text("name").filter(|s| !s.is_empty()),
        kind: request
            .get("kind")
            .and_then(|k| k.get("kind"))
            .and_then(Value::as_str)
            .map(str::to_string),
        object: object("object"),
        old_object: object("oldObject"),
        dry_run: request
            .get("dryRun")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// Finds `"apiVersion": "admission.k8s.io/…"` and `"uid": "…"` in a body
/// that is not valid JSON (truncated, say), so the answer can still name it.
fn scan_ids(body: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(body).ok()?;
    let api_version = scan_string(text, "\"apiVersion\"").filter(|v| v == V1 || v == V1BETA1)?;
    let uid = scan_string(text, "\"uid\"").filter(|u| !u.is_empty())?;
    Some((api_version, uid))
}

/// The string value after the first occurrence of `key` and a colon; only
/// plain strings (no escapes) of at most 256 bytes.
fn scan_string(text: &str, key: &str) -> Option<String> {
    let rest = &text[text.find(key)? + key.len()..];
    let rest = rest
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    let end = rest.find('"')?;
    let value = &rest[..end];
    (end <= 256 && !value.contains('\\')).then(|| value.to_string())
}

/// `status` of an AdmissionResponse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub code: u16,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The answer to one review.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewResponse {
    pub api_version: String,
    pub uid: String,
    pub allowed: bool,
    pub status: Option<Status>,
    /// RFC 6902 operations; sent only when there is at least one.
    pub patch: Vec<Value>,
    pub warnings: Vec<String>,
}

impl ReviewResponse {
    fn new(api_version: &str, uid: &str, allowed: bool, status: Option<Status>) -> Self {
        ReviewResponse {
            api_version: api_version.to_string(),
            uid: uid.to_string(),
            allowed,
            status,
            patch: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Admit, unchanged.
    pub fn allow(req: &ReviewRequest) -> Self {
        Self::new(&req.api_version, &req.uid, true, None)
    }

    /// Refuse with a message for the person who created the object (HTTP
    /// 403 Forbidden in the status, as controller-runtime's `Denied`).
    pub fn deny(req: &ReviewRequest, message: impl Into<String>) -> Self {
        Self::new(
            &req.api_version,
            &req.uid,
            false,
            Some(Status {
                code: 403,
                message: message.into(),
                reason: "Forbidden".into(),
            }),
        )
    }

    /// Refuse because the request itself could not be handled.
    pub fn errored(api_version: &str, uid: &str, code: u16, message: impl Into<String>) -> Self {
        Self::new(
            api_version,
            uid,
            false,
            Some(Status {
                code,
                message: message.into(),
                reason: String::new(),
            }),
        )
    }

    pub fn with_patch(mut self, ops: Vec<Value>) -> Self {
        self.patch = ops;
        self
    }

    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings = warnings;
        self
    }

    /// The AdmissionReview to send back.
    pub fn to_json(&self) -> Value {
        let mut response = serde_json::json!({
            "uid": self.uid,
            "allowed": self.allowed,
        });
        if let Some(status) = &self.status {
            response["status"] = serde_json::to_value(status).unwrap_or(Value::Null);
        }
        if !self.patch.is_empty() {
            let bytes = Value::Array(self.patch.clone()).to_string();
            response["patchType"] = Value::from("JSONPatch");
            response["patch"] =
                Value::from(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
        if !self.warnings.is_empty() {
            response["warnings"] = Value::from(self.warnings.clone());
        }
        serde_json::json!({
            "apiVersion": self.api_version,
            "kind": KIND,
            "response": response,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(api_version: &str) -> Vec<u8> {
        json!({
            "apiVersion": api_version,
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ml",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
                "oldObject": null,
                "dryRun": false
            }
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn both_versions_parse_and_are_echoed() {
        for v in [V1, V1BETA1] {
            let r = parse_review(&body(v)).unwrap();
            assert_eq!(r.api_version, v);
            assert_eq!(r.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
            assert_eq!(r.operation, "CREATE");
            assert_eq!(r.namespace.as_deref(), Some("ml"));
            assert_eq!(r.kind.as_deref(), Some("Pod"));
            assert!(r.object.is_some() && r.old_object.is_none());
            let out = ReviewResponse::allow(&r).to_json();
            assert_eq!(
                out,
                json!({"apiVersion": v, "kind": "AdmissionReview",
                       "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": true}})
            );
        }
    }

    #[test]
    fn patch_is_base64_and_only_when_present() {
        let r = parse_review(&body(V1)).unwrap();
        let ops =
            vec![json!({"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"})];
        let out = ReviewResponse::allow(&r).with_patch(ops.clone()).to_json();
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&raw).unwrap(),
            Value::Array(ops)
        );
        let out = ReviewResponse::allow(&r).with_patch(vec![]).to_json();
        assert!(
            out["response"].get("patch").is_none() && out["response"].get("patchType").is_none()
        );
    }

    #[test]
    fn deny_and_warnings() {
        let r = parse_review(&body(V1BETA1)).unwrap();
        let out = ReviewResponse::deny(&r, "container \"c\": no")
            .with_warnings(vec!["careful".into()])
            .to_json();
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(
            out["response"]["status"],
            json!({"code": 403, "message": "container \"c\": no", "reason": "Forbidden"})
        );
        assert_eq!(out["response"]["warnings"], json!(["careful"]));
    }

    #[test]
    fn not_a_review() {
        for b in [
            &b"[]"[..],
            br#"{"apiVersion":"v1","kind":"Pod"}"#,
            br#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"u"}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        ] {
            assert!(
                matches!(parse_review(b), Err(EnvelopeError::NotAdmissionReview(_))),
                "{}",
                String::from_utf8_lossy(b)
            );
        }
        assert_eq!(
            parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}"#),
            Err(EnvelopeError::NoUid)
        );
    }

    #[test]
    fn uid_is_recovered_from_a_truncated_body() {
        let full = body(V1);
        let cut = &full[..full.len() - 20];
        let e = parse_review(cut).unwrap_err();
        assert_eq!(
            e.recovered(),
            Some((V1, "705ab4f5-6393-11e8-b7cc-42010a800002"))
        );
        assert_eq!(
            parse_review(b"{\"uid\": \"x\"").unwrap_err().recovered(),
            None
        );
        assert_eq!(parse_review(b"\xff\xfe").unwrap_err().recovered(), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse_review(&bytes);
        }

        #[test]
        fn scan_never_panics(s in "[\"a-z:{} \\\\]{0,80}") {
            let _ = scan_string(&s, "\"uid\"");
        }
    }
}
