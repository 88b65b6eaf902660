//! The HTTP routes: the TLS port (admission webhooks) and the plain admin
//! port (health).

use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use axum::response::Response;
use axum::routing::{get, post};

use std::time::Instant;

use crate::admission::handler::{Decision, mutate_review, respond, validate_review};
use crate::admission::review::ReviewRequest;
use crate::cluster::SharedCluster;
use crate::config::Config;

use super::metrics::Metrics;

/// kube-apiserver sends at most about 3 MiB objects; an UPDATE carries two.
/// controller-runtime accepts 7 MiB; larger bodies get HTTP 413.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// What the handlers share.
#[derive(Debug)]
pub struct AppState {
    /// Swapped whole when the config file changes.
    pub config: Arc<ArcSwap<Config>>,
    pub metrics: Metrics,
    /// The cluster view, when serving with one (snapshot or API server).
    pub cluster: Option<Arc<SharedCluster>>,
}

impl AppState {
    pub fn new(config: Config, metrics: Metrics) -> Arc<Self> {
        Self::with_cluster(config, metrics, None)
    }

    pub fn with_cluster(
        config: Config,
        metrics: Metrics,
        cluster: Option<Arc<SharedCluster>>,
    ) -> Arc<Self> {
        Arc::new(AppState {
            config: Arc::new(ArcSwap::from_pointee(config)),
            metrics,
            cluster,
        })
    }
}

/// The TLS port: `/mutate` (and HAMi's `/webhook`) and `/validate`.
pub fn webhook_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/webhook", post(mutate))
        .route("/validate", post(validate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
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
    decide: fn(&ReviewRequest, &Config) -> Decision,
) -> Response {
    let start = Instant::now();
    let config = state.config.load();
    let (response, outcome) = respond(body, |req| decide(req, &config));
    state.metrics.observe(
        webhook,
        &outcome.operation,
        outcome.result,
        outcome.denial.map(|d| d.as_str()),
        start.elapsed(),
    );
    response
}

/// The admin port: liveness, readiness and metrics.
pub fn admin_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Ready once the cluster view (if any) has been listed in full; the
/// certificate is loaded before the port opens.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match &state.cluster {
        Some(cluster) if !cluster.is_synced() => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: cluster state not synced yet\n",
        )
            .into_response(),
        _ => "ok".into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}
