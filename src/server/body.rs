//! Reading request bodies within bounds: a declared length above the
//! route's limit is refused (413) before a byte is read; the whole body
//! must arrive within the body timeout (408); and the memory it takes
//! (its buffer's capacity) counts first against the connection's own
//! allowance, then against the listener's shared budget; when neither has
//! room, the rest of the body is read and dropped and the request refused
//! (503). A client that stalls half way through a large body therefore
//! holds at most its allowance plus what it took of the budget, and only
//! until its timeout; the answer keeps the request's share until it has
//! been sent.

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

use super::conn_metrics::{ConnMetrics, ListenerLabels, RuleLabels};
use super::limits::Limits;

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
    /// The listener's `gpugate_body_bytes` series, looked up once per
    /// connection rather than once per request.
    bytes_held: Gauge,
}

impl BodyBudget {
    pub fn new(
        allowance: usize,
        shared: Arc<Semaphore>,
        limits: Limits,
        metrics: ConnMetrics,
        listener: &'static str,
    ) -> Self {
        let bytes_held = Self::gauge_of(&metrics, listener);
        Self {
            own: Arc::new(Semaphore::new(allowance)),
            shared,
            timeout: limits.body,
            metrics,
            listener,
            bytes_held,
        }
    }

    /// For a router called without a listener (tests, tools): no budget,
    /// the default body timeout.
    fn unbounded() -> Self {
        let metrics = ConnMetrics::default();
        let bytes_held = Self::gauge_of(&metrics, "none");
        Self {
            own: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            shared: Arc::new(Semaphore::new(0)),
            timeout: Limits::default().body,
            metrics,
            listener: "none",
            bytes_held,
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

    fn gauge_of(metrics: &ConnMetrics, listener: &'static str) -> Gauge {
        metrics
            .body_bytes
            .get_or_create(&ListenerLabels { listener })
            .clone()
    }
}

/// Body bytes held by one request, given back when it is dropped: with
/// the response, once that has been sent.
struct Held {
    permits: Vec<OwnedSemaphorePermit>,
    bytes: usize,
    gauge: Gauge,
}

impl Held {
    /// Takes `n` bytes: from the connection's allowance if it has them,
    /// else from the shared budget; [`BodyError::Budget`] when neither has
    /// room. Never waits: a body that waited would leave the client's data
    /// unread in hyper's buffer, rustls' buffers and, over HTTP/2, as
    /// queued frames that cost far more than their bytes when tiny.
    fn take(&mut self, n: usize, budget: &BodyBudget) -> Result<(), BodyError> {
        if n == 0 {
            return Ok(());
        }
        let count = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
        let permit = match budget.own.clone().try_acquire_many_owned(count) {
            Ok(p) => p,
            Err(_) => budget
                .shared
                .clone()
                .try_acquire_many_owned(count)
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
/// bounds above, then hands the handler the whole body at once. The memory
/// stays counted until the response has been sent: an answer is about as
/// large as its question at most (a `/filter` that echoes its node names),
/// so a client that does not read its answers holds no more than its
/// bodies did.
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
    let result = match declared {
        Some(n) if n > max_body as u64 => Err(BodyError::TooLarge),
        // Not above max_body, so it fits in usize.
        _ => read(body, max_body, declared.map(|n| n as usize), &budget).await,
    };
    match result {
        Ok((bytes, held)) => {
            let response = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            response.map(|body| Body::new(Guarded::new(body, held)))
        }
        Err(e) => refusal(e, max_body, &budget, http1),
    }
}

/// The smallest buffer a multi-frame body starts with.
const FIRST_BUFFER: usize = 16 * 1024;

/// Reads the body into one buffer whose capacity, not only its contents,
/// is charged: a body sent in many tiny frames costs what it weighs.
async fn read(
    body: Body,
    max_body: usize,
    declared: Option<usize>,
    budget: &BodyBudget,
) -> Result<(Bytes, Held), BodyError> {
    let deadline = Instant::now() + budget.timeout;
    let mut held = Held {
        permits: Vec::new(),
        bytes: 0,
        gauge: budget.bytes_held.clone(),
    };
    // The buffer never grows past what the body can be.
    let ceiling = declared.unwrap_or(max_body).min(max_body);
    let mut buf: Vec<u8> = Vec::new();
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
        let needed = buf.len() + data.len();
        if needed > max_body {
            return Err(BodyError::TooLarge);
        }
        let whole = buf.capacity() == 0 && body.is_end_stream();
        // The capacity the buffer needs for this frame, when it must grow.
        let capacity = (needed > buf.capacity()).then(|| {
            let grown = (buf.capacity() * 2).max(FIRST_BUFFER).min(ceiling);
            grown.max(needed)
        });
        let taken = match (whole, capacity) {
            // The whole body in one frame: handled at once, no copy.
            (true, _) => held.take(data.len(), budget),
            (false, Some(capacity)) => held.take(capacity - buf.capacity(), budget),
            (false, None) => Ok(()),
        };
        match taken {
            Ok(()) if whole => return Ok((data, held)),
            Ok(()) => {
                if let Some(capacity) = capacity {
                    buf.reserve_exact(capacity - buf.len());
                }
                buf.extend_from_slice(&data);
            }
            Err(BodyError::Budget) => {
                // No room: read the rest and let it go, then refuse (503).
                // Nothing waits unread, and the request stays busy until
                // its body is done or its deadline comes, instead of being
                // refused at once and sent again in a tight loop.
                let read = needed;
                drop((buf, held));
                return Err(discard(body, read, max_body, deadline).await);
            }
            Err(e) => return Err(e),
        }
    }
    Ok((Bytes::from(buf), held))
}

/// Reads and drops the rest of a body (`read` bytes of it came already),
/// until its end, `max_body` or `deadline`; the error to answer with then.
async fn discard(mut body: Body, mut read: usize, max_body: usize, deadline: Instant) -> BodyError {
    loop {
        match tokio::time::timeout_at(deadline.into(), body.frame()).await {
            Ok(Some(Ok(frame))) => {
                read += frame.data_ref().map_or(0, |d| d.len());
                if read > max_body {
                    return BodyError::TooLarge;
                }
            }
            Ok(None) | Ok(Some(Err(_))) | Err(_) => return BodyError::Budget,
        }
    }
}

/// What a [`Guarded`] body keeps until its last byte is taken.
pub(crate) trait Guard: Unpin + Send + 'static {
    /// A piece of the body was taken by the connection.
    fn progress(&self) {}
}

impl Guard for Held {}

/// The largest piece of an answer handed to hyper at once: hyper takes the
/// next piece only when its 16 KiB write buffer has room, so the guard
/// lives until the answer is nearly all written, not merely queued.
const ANSWER_PIECE: usize = 16 * 1024;

/// A response body that keeps `guard` until it has been sent (or dropped
/// unsent), handing hyper its data in pieces of at most [`ANSWER_PIECE`].
pub(crate) struct Guarded<G: Guard> {
    inner: Body,
    /// The rest of a data frame larger than a piece.
    pending: Bytes,
    guard: Option<G>,
}

impl<G: Guard> Guarded<G> {
    pub(crate) fn new(inner: Body, guard: G) -> Self {
        Self {
            inner,
            pending: Bytes::new(),
            guard: Some(guard),
        }
    }

    fn piece(&mut self) -> hyper::body::Frame<Bytes> {
        let n = self.pending.len().min(ANSWER_PIECE);
        if let Some(g) = &self.guard {
            g.progress();
        }
        hyper::body::Frame::data(self.pending.split_to(n))
    }
}

impl<G: Guard> hyper::body::Body for Guarded<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        use std::task::Poll;
        if !self.pending.is_empty() {
            return Poll::Ready(Some(Ok(self.piece())));
        }
        match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                self.guard = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    self.pending = data;
                    Poll::Ready(Some(Ok(self.piece())))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let inner = self.inner.size_hint();
        let pending = self.pending.len() as u64;
        let mut hint = hyper::body::SizeHint::new();
        hint.set_lower(inner.lower() + pending);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + pending);
        }
        hint
    }
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
