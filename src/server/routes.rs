//! The HTTP routes: the TLS port (admission webhooks) and the plain admin
//! port (health).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::IntoResponse as _;
use axum::response::Response;
use axum::routing::{get, post};

use std::time::Instant;

use tracing::Instrument as _;
use tracing::field::Empty;

use crate::admission::handler::{Decision, mutate_review, respond, validate_review};
use crate::admission::review::ReviewRequest;
use crate::cluster::{ClusterView, SharedCluster};
use crate::config::Config;
use crate::controllers::preemption::Preemptor;
use crate::extender::wire::{BindingResult, FilterResult, HostPriority, PreemptionResult};
use crate::extender::{BindMode, Extender};

use super::limits::{ADMIN_MAX_BODY_BYTES, MAX_BODY_BYTES, MAX_EXTENDER_BODY_BYTES};
use super::metrics::Metrics;

/// What the handlers share.
#[derive(Debug)]
pub struct AppState {
    /// Swapped whole when the config file changes.
    pub config: Arc<ArcSwap<Config>>,
    pub metrics: Metrics,
    /// The cluster view, when serving with one (snapshot or API server).
    pub cluster: Option<Arc<SharedCluster>>,
    /// The scheduler extender, over `cluster`.
    pub extender: Option<Extender>,
    /// Set on SIGTERM: `/readyz` answers 503 so that the pod leaves the
    /// Service's endpoints while it keeps serving.
    pub shutting_down: Arc<AtomicBool>,
}

impl AppState {
    pub fn new(config: Config, metrics: Metrics) -> Arc<Self> {
        Self::with_cluster(config, metrics, None)
    }

    /// A state over a standalone cluster view: `/bind` commits to the
    /// ledger (see [`BindMode`]).
    pub fn with_cluster(
        config: Config,
        metrics: Metrics,
        cluster: Option<Arc<SharedCluster>>,
    ) -> Arc<Self> {
        Self::assemble(
            Arc::new(ArcSwap::from_pointee(config)),
            metrics,
            cluster,
            (BindMode::Ledger, None),
            Arc::default(),
        )
    }

    /// A state sharing `config` with its reloader; the extender, if there
    /// is a cluster view, binds in `bind_mode` and tells `preemptor` of
    /// pods it leaves without a node; readiness turns false when
    /// `shutting_down` is set.
    pub fn assemble(
        config: Arc<ArcSwap<Config>>,
        metrics: Metrics,
        cluster: Option<Arc<SharedCluster>>,
        (bind_mode, preemptor): (BindMode, Option<Arc<Preemptor>>),
        shutting_down: Arc<AtomicBool>,
    ) -> Arc<Self> {
        Arc::new(AppState {
            config,
            metrics,
            extender: cluster
                .clone()
                .map(|c| Extender::new(c, bind_mode).with_preemptor(preemptor)),
            cluster,
            shutting_down,
        })
    }
}

/// The TLS port: `/mutate` (and HAMi's `/webhook`), `/validate`, and the
/// extender's `/filter`, `/prioritize`, `/bind` and `/preempt`.
pub fn webhook_router(state: Arc<AppState>) -> Router {
    admission_router(state.clone()).merge(extender_router(state))
}

/// The admission webhooks alone: what kube-apiserver calls.
pub fn admission_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/webhook", post(mutate))
        .route("/validate", post(validate))
        .layer(middleware::from_fn_with_state(
            MAX_BODY_BYTES,
            crate::server::body::bounded_body,
        ))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// The scheduler extender alone: what kube-scheduler calls. `/bind` writes
/// to the cluster with gpugate's rights, so `serve --extender-listen` keeps
/// these routes off the port the Service exposes.
pub fn extender_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .route("/preempt", post(preempt))
        .layer(middleware::from_fn_with_state(
            MAX_EXTENDER_BODY_BYTES,
            crate::server::body::bounded_body,
        ))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn mutate(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    review(&state, "mutate", &body, mutate_review)
}

async fn validate(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    review(&state, "validate", &body, validate_review)
}

fn review(
    state: &AppState,
    webhook: &'static str,
    body: &Bytes,
    decide: fn(&ReviewRequest, &Config, Option<&ClusterView>) -> Decision,
) -> Response {
    let start = Instant::now();
    let span = tracing::info_span!(
        "review",
        webhook,
        uid = Empty,
        namespace = Empty,
        pod = Empty,
        operation = Empty,
        outcome = Empty,
        reason = Empty,
    );
    let _entered = span.enter();
    let config = state.config.load();
    let (response, outcome) = respond(body, |req| {
        span.record("uid", req.uid.as_ref());
        span.record("operation", req.operation.as_ref());
        if let Some(ns) = &req.namespace {
            span.record("namespace", ns.as_ref());
        }
        if let Some(name) = &req.name {
            span.record("pod", name.as_ref());
        }
        match &state.cluster {
            Some(cluster) => decide(req, &config, Some(&cluster.read())),
            None => decide(req, &config, None),
        }
    });
    span.record("outcome", outcome.result);
    if let Some(reason) = outcome.denial {
        span.record("reason", reason.as_str());
    }
    // Every decision is logged once, with the review's uid: denials and
    // errors at info, the rest at debug.
    match outcome.result {
        "denied" | "error" => tracing::info!("review answered"),
        _ => tracing::debug!("review answered"),
    }
    state.metrics.admission.observe(
        webhook,
        outcome.operation,
        outcome.result,
        outcome.denial.map(|d| d.as_str()),
        start.elapsed(),
    );
    response
}

const NO_CLUSTER: &str =
    "gpugate runs without cluster state: start it with --cluster, --kubeconfig or --in-cluster";

/// Runs one extender verb and records it; every answer is HTTP 200 JSON.
fn extender_call<T: serde::Serialize>(
    state: &AppState,
    (verb, request_bytes): (&'static str, usize),
    call: impl FnOnce(&Extender, &Config) -> (T, Option<String>),
    without_cluster: impl FnOnce(&str) -> T,
) -> Response {
    let start = Instant::now();
    let span = crate::extender::span::call_span(verb);
    let _entered = span.enter();
    let (answer, error) = match &state.extender {
        Some(extender) => call(extender, &state.config.load()),
        None => (without_cluster(NO_CLUSTER), Some(NO_CLUSTER.to_string())),
    };
    extender_done(state, verb, error.as_deref(), start);
    json_answer(state, (verb, request_bytes), &answer)
}

/// The answer as JSON, its size and the request's counted.
fn json_answer<T: serde::Serialize>(
    state: &AppState,
    (verb, request_bytes): (&'static str, usize),
    answer: &T,
) -> Response {
    match serde_json::to_vec(answer) {
        Ok(body) => {
            state
                .metrics
                .extender
                .observe_bytes(verb, request_bytes, body.len());
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Records an extender call's outcome in its span, the log and metrics.
fn extender_done(state: &AppState, verb: &'static str, error: Option<&str>, start: Instant) {
    crate::extender::span::record_outcome(error.is_none());
    match error {
        Some(e) => tracing::warn!(error = %e, "extender call failed"),
        None => tracing::debug!("extender call answered"),
    }
    state
        .metrics
        .extender
        .observe(verb, error.is_none(), start.elapsed());
}

async fn filter(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    extender_call(
        &state,
        ("filter", body.len()),
        |x, config| {
            let filtered = x.filter(config, &body);
            state.metrics.extender.observe_filter(&filtered);
            let r = filtered.answer;
            let e = (!r.error.is_empty()).then(|| r.error.clone());
            (r, e)
        },
        |e: &str| FilterResult::error(e),
    )
}

/// kube-scheduler's HostPriorityList has no error field: a request that
/// cannot be scored gets an empty list (no preference) and is logged.
async fn prioritize(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    extender_call(
        &state,
        ("prioritize", body.len()),
        |x, config| match x.prioritize(config, &body) {
            Ok(list) => (list, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        },
        |_| Vec::<HostPriority>::new(),
    )
}

async fn bind(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let span = crate::extender::span::call_span("bind");
    async {
        let start = Instant::now();
        let result = match &state.extender {
            Some(x) => {
                // The config of the moment, not held across the API calls.
                let config = state.config.load_full();
                x.bind(config, &body).await
            }
            None => BindingResult {
                error: NO_CLUSTER.to_string(),
            },
        };
        let error = (!result.error.is_empty()).then_some(result.error.as_str());
        extender_done(&state, "bind", error, start);
        json_answer(&state, ("bind", body.len()), &result)
    }
    .instrument(span)
    .await
}

/// ExtenderPreemptionResult has no error field either: a request that cannot
/// be judged gets no candidate nodes (nothing is preempted) and is logged.
async fn preempt(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    extender_call(
        &state,
        ("preempt", body.len()),
        |x, config| match x.preempt(config, &body) {
            Ok(r) => (r, None),
            Err(e) => (PreemptionResult::default(), Some(e.to_string())),
        },
        |_| PreemptionResult::default(),
    )
}

/// The admin port: liveness, readiness and metrics.
pub fn admin_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/faults/{point}", axum::routing::post(arm_fault))
        .layer(middleware::from_fn_with_state(
            ADMIN_MAX_BODY_BYTES,
            crate::server::body::bounded_body,
        ))
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// Ready while the cluster view (if any) is current (see
/// `cluster::freshness`: listed in full since its watches last restarted,
/// the API server answering); the certificate is loaded before the port
/// opens. Not ready once stopping.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n",
        )
            .into_response();
    }
    match state.cluster.as_ref().map(|c| c.current()) {
        Some(Err(stale)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {stale}\n"),
        )
            .into_response(),
        _ => "ok".into_response(),
    }
}

/// `POST /faults/<point>`: arms a fault point once (tests only; 404
/// unless `serve --fault-injection`).
async fn arm_fault(axum::extract::Path(point): axum::extract::Path<String>) -> Response {
    if !crate::faults::enabled() {
        return (StatusCode::NOT_FOUND, "fault injection is off\n").into_response();
    }
    match point
        .parse::<crate::faults::Point>()
        .and_then(crate::faults::arm)
    {
        Ok(()) => "armed\n".into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        // Streamed piece by piece: the text of a large cluster is tens of MB.
        axum::body::Body::from_stream(futures::stream::iter(
            state
                .metrics
                .encode_chunks()
                .map(Ok::<_, std::convert::Infallible>),
        )),
    )
        .into_response()
}
