//! The AdmissionReview envelope, `admission.k8s.io/v1` and `v1beta1`.
//!
//! gpugate's own small types rather than kube-core's: the answer must echo the
//! request's apiVersion, carry the patch as a base64 string (kube-core writes
//! an array of numbers, kube-rs/kube#1781) and recover the request's `uid`
//! even when the body cannot be fully parsed, so kube-apiserver gets an
//! answer it can match to its request.
//!
//! A review is read in one pass straight into the few fields the webhooks
//! use, borrowing from the body (see [`super::lean`]); the envelope is read
//! as leniently as before (a `uid` that is not a string is no uid), the pod
//! as strictly as before for the fields read.

use std::borrow::Cow;

use serde::de::{Deserialize, MapAccess};
use serde_json::value::RawValue;

use super::lean::{IfObject, Loose, ObjectFields};
use super::pod::PodView;

pub const V1: &str = "admission.k8s.io/v1";
pub const V1BETA1: &str = "admission.k8s.io/v1beta1";
pub(super) const KIND: &str = "AdmissionReview";

/// One admission request, as much of it as gpugate reads, borrowed from the
/// request body.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewRequest<'a> {
    /// `admission.k8s.io/v1` or `admission.k8s.io/v1beta1`, echoed back.
    pub api_version: &'static str,
    pub uid: Cow<'a, str>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: Cow<'a, str>,
    pub namespace: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    /// The object's kind (`request.kind.kind`), e.g. `Pod`.
    pub kind: Option<Cow<'a, str>>,
    /// `request.object`, read as a Pod.
    pub object: ReviewObject<'a>,
    pub dry_run: bool,
}

/// `request.object` of a review.
#[derive(Debug, Clone, PartialEq)]
pub enum ReviewObject<'a> {
    /// Absent or `null` (DELETE, CONNECT).
    Missing,
    Pod(PodView<'a>),
    /// A JSON object that is not a readable Pod: the message for the answer
    /// (another kind of object, or a field of the wrong type).
    Unreadable(String),
    /// Not a JSON object at all (`42`, `"x"`, `[]`): no kind of object.
    NotAnObject(String),
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
///
/// One pass reads the envelope and the pod together. Only when that fails
/// is the body read again with the object kept as raw JSON, to tell a body
/// that is not JSON from a review whose object is not a readable Pod (which
/// is answered, naming the problem).
pub fn parse_review(body: &[u8]) -> Result<ReviewRequest<'_>, EnvelopeError> {
    let not_json = |problem: String| EnvelopeError::NotJson {
        problem,
        recovered: scan_ids(body),
    };
    // serde_json checks UTF-8 only in strings it reads; a JSON body must be
    // UTF-8 throughout, including the members skipped unread.
    let text = std::str::from_utf8(body).map_err(|e| not_json(format!("not UTF-8: {e}")))?;
    if let Ok(review) = serde_json::from_str::<IfObject<Envelope<Option<PodView>>>>(text) {
        return review_request(review, |pod| {
            pod.map_or(ReviewObject::Missing, ReviewObject::Pod)
        });
    }
    let review = serde_json::from_str::<IfObject<Envelope<Option<&RawValue>>>>(text)
        .map_err(|e| not_json(e.to_string()))?;
    review_request(review, |raw| match raw {
        None => ReviewObject::Missing,
        Some(raw) if !raw.get().trim_start().starts_with('{') => {
            ReviewObject::NotAnObject(format!(
                "request.object is {}, not a JSON object",
                json_kind(raw.get())
            ))
        }
        Some(raw) => match PodView::from_json(raw.get()) {
            Ok(pod) => ReviewObject::Pod(pod),
            Err(message) => ReviewObject::Unreadable(message),
        },
    })
}

/// What kind of JSON value `text` (valid JSON, not an object) is, for messages.
fn json_kind(text: &str) -> &'static str {
    match text.trim_start().as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        _ => "a number",
    }
}

/// The members of an AdmissionReview gpugate reads, with `request.object`
/// read as `O`.
#[derive(Default)]
struct Envelope<'a, O> {
    api_version: Loose<'a>,
    kind: Loose<'a>,
    request: IfObject<RequestFields<'a, O>>,
}

/// The members of `request` gpugate reads.
#[derive(Default)]
struct RequestFields<'a, O> {
    uid: Loose<'a>,
    operation: Loose<'a>,
    namespace: Loose<'a>,
    name: Loose<'a>,
    kind: IfObject<KindFields<'a>>,
    object: O,
    dry_run: Loose<'a>,
}

/// `request.kind` (a GroupVersionKind); only `kind` is read.
#[derive(Default)]
struct KindFields<'a> {
    kind: Loose<'a>,
}

impl<'de, O: Deserialize<'de> + Default> ObjectFields<'de> for Envelope<'de, O> {
    const NAME: &'static str = KIND;

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "apiVersion" => self.api_version = map.next_value()?,
            "kind" => self.kind = map.next_value()?,
            "request" => self.request = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de, O: Deserialize<'de> + Default> ObjectFields<'de> for RequestFields<'de, O> {
    const NAME: &'static str = "AdmissionRequest";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "uid" => self.uid = map.next_value()?,
            "operation" => self.operation = map.next_value()?,
            "namespace" => self.namespace = map.next_value()?,
            "name" => self.name = map.next_value()?,
            "kind" => self.kind = map.next_value()?,
            "object" => self.object = map.next_value()?,
            "dryRun" => self.dry_run = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> ObjectFields<'de> for KindFields<'de> {
    const NAME: &'static str = "GroupVersionKind";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if key != "kind" {
            return Ok(false);
        }
        self.kind = map.next_value()?;
        Ok(true)
    }
}

/// Checks the envelope read and turns it into a request, with `object`
/// turning the object read into what the webhooks see.
fn review_request<'a, O>(
    review: IfObject<Envelope<'a, O>>,
    object: impl FnOnce(O) -> ReviewObject<'a>,
) -> Result<ReviewRequest<'a>, EnvelopeError> {
    let Some(envelope) = review.0 else {
        return Err(EnvelopeError::NotAdmissionReview(
            "not a JSON object".into(),
        ));
    };
    let api_version = envelope.api_version.text().unwrap_or_default();
    let kind = envelope.kind.text().unwrap_or_default();
    let api_version = match (api_version.as_ref(), kind.as_ref()) {
        (V1, KIND) => V1,
        (V1BETA1, KIND) => V1BETA1,
        _ => {
            return Err(EnvelopeError::NotAdmissionReview(format!(
                "apiVersion {api_version:?}, kind {kind:?}: expected {V1} or {V1BETA1} {KIND}"
            )));
        }
    };
    let Some(request) = envelope.request.0 else {
        return Err(EnvelopeError::NotAdmissionReview("no request".into()));
    };
    let uid = request
        .uid
        .text()
        .filter(|u| !u.is_empty())
        .ok_or(EnvelopeError::NoUid)?;
    let non_empty = |l: Loose<'a>| l.text().filter(|s| !s.is_empty());
    Ok(ReviewRequest {
        api_version,
        uid,
        operation: request.operation.text().unwrap_or_default(),
        namespace: non_empty(request.namespace),
        name: non_empty(request.name),
        kind: request.kind.0.and_then(|k| k.kind.text()),
        object: object(request.object),
        dry_run: request.dry_run.bool().unwrap_or(false),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::answer::ReviewResponse;
    use base64::Engine as _;
    use serde_json::{Value, json};

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
            let body = body(v);
            let r = parse_review(&body).unwrap();
            assert_eq!(r.api_version, v);
            assert_eq!(r.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
            assert_eq!(r.operation, "CREATE");
            assert_eq!(r.namespace.as_deref(), Some("ml"));
            assert_eq!(r.kind.as_deref(), Some("Pod"));
            assert!(matches!(r.object, ReviewObject::Pod(_)));
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
        let body = body(V1);
        let r = parse_review(&body).unwrap();
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
        let body = body(V1BETA1);
        let r = parse_review(&body).unwrap();
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
