//! HTTP handlers of the admission webhooks: body in, AdmissionReview out.

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::cluster::ClusterView;
use crate::config::Config;

use super::DenyReason;
use super::answer::ReviewResponse;
use super::mutate::{Mutation, mutate};
use super::pod::PodView;
use super::review::{EnvelopeError, ReviewObject, ReviewRequest, parse_review};
use super::validate::{Validation, validate};

/// A review's answer and, when it is a denial, its reason code.
pub type Decision = (ReviewResponse, Option<DenyReason>);

/// The mutating webhook's answer to one review.
pub fn mutate_review(
    req: &ReviewRequest,
    config: &Config,
    cluster: Option<&ClusterView>,
) -> Decision {
    judge_create(req, |pod| {
        match mutate(pod, config, req.namespace.as_deref(), cluster) {
            Mutation::Patch(ops) => (ReviewResponse::allow(req).with_patch(ops), None),
            Mutation::Skip(_) => (ReviewResponse::allow(req), None),
            Mutation::Deny(d) => (ReviewResponse::deny(req, d.message), Some(d.reason)),
            Mutation::Invalid(message) => invalid(req, &message),
        }
    })
}

/// The validating webhook's answer to one review. Only CREATE of Pods is
/// judged; the allocation annotations on UPDATE are the scheduler's and the
/// device plugin's to change.
pub fn validate_review(
    req: &ReviewRequest,
    config: &Config,
    cluster: Option<&ClusterView>,
) -> Decision {
    judge_create(req, |pod| {
        match validate(pod, config, req.namespace.as_deref(), cluster) {
            Validation::Allow { warnings } => {
                (ReviewResponse::allow(req).with_warnings(warnings), None)
            }
            Validation::Deny(d) => (ReviewResponse::deny(req, d.message), Some(d.reason)),
            Validation::Invalid(message) => invalid(req, &message),
        }
    })
}

/// `judge`'s answer for the Pod of a CREATE review; the answer of
/// [`pod_to_create`] for any other review.
fn judge_create<'r, 'a>(
    req: &'r ReviewRequest<'a>,
    judge: impl FnOnce(&'r PodView<'a>) -> Decision,
) -> Decision {
    match pod_to_create(req) {
        Ok(pod) => judge(pod),
        Err(answer) => (*answer, None),
    }
}

/// A pod that cannot be read: refused (HTTP 200, `allowed: false`, code
/// 400, the uid echoed).
fn invalid(req: &ReviewRequest, message: &str) -> Decision {
    (
        ReviewResponse::errored(req.api_version, &req.uid, 400, message),
        None,
    )
}

/// The Pod of a CREATE review. Other reviews are admitted unchanged, but
/// never one whose object cannot be read as the kind it claims: an object
/// that is not a JSON object (for any kind), a Pod that is not a readable
/// Pod (for any operation), a CREATE without an object. Those are refused
/// (HTTP 200, `allowed: false`, code 400, the uid echoed).
fn pod_to_create<'r, 'a>(
    req: &'r ReviewRequest<'a>,
) -> Result<&'r PodView<'a>, Box<ReviewResponse>> {
    let error = |message: &str| Box::new(invalid(req, message).0);
    if let ReviewObject::NotAnObject(message) = &req.object {
        return Err(error(message));
    }
    let claims_pod = req.kind.as_deref().is_none_or(|k| k == "Pod");
    let create = req.operation == "CREATE";
    match &req.object {
        _ if !claims_pod => Err(Box::new(ReviewResponse::allow(req))),
        ReviewObject::Unreadable(message) => Err(error(message)),
        ReviewObject::Pod(pod) if create => Ok(pod),
        ReviewObject::Missing if create => Err(error("request has no object")),
        _ => Err(Box::new(ReviewResponse::allow(req))),
    }
}

/// What a request came to, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The review's operation (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`),
    /// `none` when the body was not a review, `other` for anything else:
    /// a fixed set, so that it can be a metric label.
    pub operation: &'static str,
    /// `allowed`, `patched`, `denied` or `error`.
    pub result: &'static str,
    pub denial: Option<DenyReason>,
}

/// Turns a body into an HTTP response with `decide` applied to the review.
pub fn respond(
    body: &Bytes,
    decide: impl FnOnce(&ReviewRequest) -> Decision,
) -> (Response, Outcome) {
    match parse_review(body) {
        Ok(req) => {
            let (answer, denial) = decide(&req);
            let result = match (answer.allowed, denial) {
                (true, _) if !answer.patch.is_empty() => "patched",
                (true, _) => "allowed",
                (false, Some(_)) => "denied",
                (false, None) => "error",
            };
            let outcome = Outcome {
                operation: operation_label(&req.operation),
                result,
                denial,
            };
            (json_response(answer.to_body()), outcome)
        }
        Err(e) => (
            envelope_error(&e),
            Outcome {
                operation: "none",
                result: "error",
                denial: None,
            },
        ),
    }
}

/// The operation of a review as one of a fixed set.
fn operation_label(operation: &str) -> &'static str {
    match operation {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        _ => "other",
    }
}

/// A body that is not a usable review: an errored review when its uid is
/// known (kube-apiserver can match it), HTTP 400 with a JSON error otherwise.
fn envelope_error(e: &EnvelopeError) -> Response {
    match e.recovered() {
        Some((api_version, uid)) => {
            json_response(ReviewResponse::errored(api_version, uid, 400, e.to_string()).to_body())
        }
        None => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": e.to_string()})),
        )
            .into_response(),
    }
}

/// HTTP 200 with a JSON body, as `axum::Json` answers.
fn json_response(body: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}
