//! HTTP handlers of the admission webhooks: body in, AdmissionReview out.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::config::Config;

use super::mutate::{Mutation, mutate_pod};
use super::review::{EnvelopeError, ReviewRequest, ReviewResponse, parse_review};
use super::validate::{Validation, validate_pod};

/// The mutating webhook's answer to one review.
pub fn mutate_review(req: &ReviewRequest, config: &Config) -> ReviewResponse {
    if req.kind.as_deref().is_some_and(|k| k != "Pod") || req.operation != "CREATE" {
        return ReviewResponse::allow(req);
    }
    let Some(object) = &req.object else {
        return ReviewResponse::errored(&req.api_version, &req.uid, 400, "request has no object");
    };
    match mutate_pod(object, config) {
        Mutation::Patch(ops) => ReviewResponse::allow(req).with_patch(ops),
        Mutation::Skip(_) => ReviewResponse::allow(req),
        Mutation::Deny(message) => ReviewResponse::deny(req, message),
        Mutation::Invalid(message) => {
            ReviewResponse::errored(&req.api_version, &req.uid, 400, message)
        }
    }
}

/// The validating webhook's answer to one review. Only CREATE of Pods is
/// judged; the allocation annotations on UPDATE are the scheduler's and the
/// device plugin's to change.
pub fn validate_review(req: &ReviewRequest, config: &Config) -> ReviewResponse {
    if req.kind.as_deref().is_some_and(|k| k != "Pod") || req.operation != "CREATE" {
        return ReviewResponse::allow(req);
    }
    let Some(object) = &req.object else {
        return ReviewResponse::errored(&req.api_version, &req.uid, 400, "request has no object");
    };
    match validate_pod(object, config) {
        Validation::Allow { warnings } => ReviewResponse::allow(req).with_warnings(warnings),
        Validation::Deny(message) => ReviewResponse::deny(req, message),
        Validation::Invalid(message) => {
            ReviewResponse::errored(&req.api_version, &req.uid, 400, message)
        }
    }
}

/// Turns a body into an HTTP response with `decide` applied to the review.
pub fn respond(body: &Bytes, decide: impl FnOnce(&ReviewRequest) -> ReviewResponse) -> Response {
    match parse_review(body) {
        Ok(req) => axum::Json(decide(&req).to_json()).into_response(),
        Err(e) => envelope_error(&e),
    }
}

/// A body that is not a usable review: an errored review when its uid is
/// known (kube-apiserver can match it), HTTP 400 with a JSON error otherwise.
fn envelope_error(e: &EnvelopeError) -> Response {
    match e.recovered() {
        Some((api_version, uid)) => {
            axum::Json(ReviewResponse::errored(api_version, uid, 400, e.to_string()).to_json())
                .into_response()
        }
        None => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": e.to_string()})),
        )
            .into_response(),
    }
}
