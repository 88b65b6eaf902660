//! The answer to a review: an AdmissionReview with the request's
//! apiVersion and uid, and the decision.

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;

use super::review::{KIND, ReviewRequest};

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
        Self::new(req.api_version, &req.uid, true, None)
    }

    /// Refuse with a message for the person who created the object (HTTP
    /// 403 Forbidden in the status, as controller-runtime's `Denied`).
    pub fn deny(req: &ReviewRequest, message: impl Into<String>) -> Self {
        Self::new(
            req.api_version,
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

    /// The AdmissionReview to send back, as a JSON value.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.wire()).unwrap_or(Value::Null)
    }

    /// The AdmissionReview to send back, as the response body.
    pub fn to_body(&self) -> Vec<u8> {
        serde_json::to_vec(&self.wire()).unwrap_or_default()
    }

    fn wire(&self) -> WireReview<'_> {
        let patch = (!self.patch.is_empty()).then(|| {
            let ops = serde_json::to_vec(&self.patch).unwrap_or_default();
            base64::engine::general_purpose::STANDARD.encode(ops)
        });
        WireReview {
            api_version: &self.api_version,
            kind: KIND,
            response: WireResponse {
                allowed: self.allowed,
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch,
                status: self.status.as_ref(),
                uid: &self.uid,
                warnings: &self.warnings,
            },
        }
    }
}

/// The answer on the wire. Members are in key order, as gpugate wrote them
/// when it built a `serde_json::Value` (a sorted map), so answers keep the
/// same bytes.
#[derive(Serialize)]
struct WireReview<'r> {
    #[serde(rename = "apiVersion")]
    api_version: &'r str,
    kind: &'static str,
    response: WireResponse<'r>,
}

#[derive(Serialize)]
struct WireResponse<'r> {
    allowed: bool,
    /// The operations, base64 of their JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(rename = "patchType", skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'r Status>,
    uid: &'r str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'r [String],
}
