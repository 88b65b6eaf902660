//! Reading request bodies within bounds: a declared length above the
//! route's limit is refused (413) before a byte is read; the whole body
//! must arrive within the body timeout (408); and the bytes held count
//! first against the connection's own allowance, then against the
//! listener's shared budget, waiting for room within the same timeout
//! (503 when none comes). A client that stalls half way through a large
//! body therefore holds at most its allowance plus what it took of the
//! budget, and only until its timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::HttpBody as _;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http_body_util::BodyExt as _;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::limits::Limits;
use super::listener::{ConnMetrics, ListenerLabels, RuleLabels};

/// The body bytes one connection's requests may hold: the connection's
/// allowance, then the listener's budget. Handed to each request by the
/// listener (see `server::listener`).
#[derive(Clone, Debug)]
pub struct BodyBudget {
    own: Arc<Semaphore>,
    shared: Arc<Semaphore>,
    timeout: Duration,
    metrics: ConnMetrics,
    listener: &'static str,
}

impl BodyBudget {
    pub fn new(
        allowance: usize,
        shared: Arc<Semaphore>,
        limits: Limits,
        metrics: ConnMetrics,
        listener: &'static str,
    ) -> Self {
        Self {
            own: Arc::new(Semaphore::new(allowance)),
            shared,
            timeout: limits.body,
            metrics,
            listener,
        }
    }

    /// For a router called without a listener (tests, tools): no budget,
    /// the default body timeout.
    fn unbounded() -> Self {
        Self {
            own: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            shared: Arc::new(Semaphore::new(0)),
            timeout: Limits::default().body,
            metrics: ConnMetrics::default(),
            listener: "none",
        }
    }

    fn refused(&self, rule: &'static str) {
        self.metrics
            .requests_refused
            .get_or_create(&RuleLabels {
                listener: self.listener,
                rule,
            })
            .inc();
    }

    fn gauge(&self) -> Gauge {
        self.metrics
            .body_bytes
            .get_or_create(&ListenerLabels {
                listener: self.listener,
            })
            .clone()
    }
}

/// Body bytes held by one request, given back when it is dropped.
struct Held {
    permits: Vec<OwnedSemaphorePermit>,
    bytes: usize,
    gauge: Gauge,
}

impl Held {
    /// Takes `n` bytes: from the connection's allowance if it has them,
    /// else from the shared budget, waiting for room until `deadline`.
    async fn take(
        &mut self,
        n: usize,
        budget: &BodyBudget,
        deadline: Instant,
    ) -> Result<(), BodyError> {
        let count = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
        let permit = match budget.own.clone().try_acquire_many_owned(count) {
            Ok(p) => p,
            Err(_) => tokio::time::timeout_at(
                deadline.into(),
                budget.shared.clone().acquire_many_owned(count),
            )
            .await
            .map_err(|_| BodyError::Budget)?
            .map_err(|_| BodyError::Budget)?,
        };
        self.permits.push(permit);
        self.bytes += n;
        self.gauge.inc_by(i64::try_from(n).unwrap_or(i64::MAX));
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gauge
            .dec_by(i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

#[derive(Debug)]
enum BodyError {
    TooLarge,
    Timeout,
    Budget,
    Read(String),
}

/// Middleware: reads the request body within `max_body` bytes and the
/// bounds above, then hands the handler the whole body at once; the bytes
/// stay counted until the handler has answered.
pub async fn bounded_body(State(max_body): State<usize>, req: Request, next: Next) -> Response {
    let budget = req
        .extensions()
        .get::<BodyBudget>()
        .cloned()
        .unwrap_or_else(BodyBudget::unbounded);
    let (parts, body) = req.into_parts();
    let http1 = parts.version < Version::HTTP_2;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let result = if declared.is_some_and(|n| n > max_body as u64) {
        Err(BodyError::TooLarge)
    } else {
        read(body, max_body, &budget).await
    };
    match result {
        Ok((bytes, held)) => {
            let response = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            drop(held);
            response
        }
        Err(e) => refusal(e, max_body, &budget, http1),
    }
}

async fn read(
    body: Body,
    max_body: usize,
    budget: &BodyBudget,
) -> Result<(Bytes, Held), BodyError> {
    let deadline = Instant::now() + budget.timeout;
    let mut held = Held {
        permits: Vec::new(),
        bytes: 0,
        gauge: budget.gauge(),
    };
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut body = body;
    loop {
        let frame = match tokio::time::timeout_at(deadline.into(), body.frame()).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Read(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if data.is_empty() {
            continue;
        }
        if held.bytes + data.len() > max_body {
            return Err(BodyError::TooLarge);
        }
        held.take(data.len(), budget, deadline).await?;
        if chunks.is_empty() && body.is_end_stream() {
            // The whole body in one frame: handled at once, no copy.
            chunks.push(data);
            break;
        }
        // A copy of exactly the bytes counted, rather than a slice that
        // keeps hyper's larger read buffer alive while the rest arrives.
        chunks.push(Bytes::copy_from_slice(&data));
    }
    let bytes = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut all = Vec::with_capacity(held.bytes);
            for c in &chunks {
                all.extend_from_slice(c);
            }
            Bytes::from(all)
        }
    };
    Ok((bytes, held))
}

fn refusal(e: BodyError, max_body: usize, budget: &BodyBudget, http1: bool) -> Response {
    let (status, rule, message) = match e {
        BodyError::TooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body larger than {max_body} bytes"),
        ),
        BodyError::Timeout => (
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "request body not received within {:.1} s (server.bodyTimeoutSeconds)",
                budget.timeout.as_secs_f64()
            ),
        ),
        BodyError::Budget => (
            StatusCode::SERVICE_UNAVAILABLE,
            "body_budget",
            "server busy: request bodies in flight hold the whole body budget \
             (server.bodyBudgetMiB); retry"
                .to_string(),
        ),
        BodyError::Read(problem) => (
            StatusCode::BAD_REQUEST,
            "body_unreadable",
            format!("cannot read the request body: {problem}"),
        ),
    };
    budget.refused(rule);
    tracing::debug!(
        listener = budget.listener,
        rule,
        "request refused: {message}"
    );
    let mut response =
        (status, axum::Json(serde_json::json!({ "error": message }))).into_response();
    let headers = response.headers_mut();
    if http1 {
        // The rest of the body was not read: the connection cannot carry
        // another request.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}
