//! The HTTP routes: the TLS port (admission webhooks) and the plain admin
//! port (health).

use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::Response;
use axum::routing::{get, post};

use crate::admission::handler::{mutate_review, respond, validate_review};
use crate::config::Config;

/// kube-apiserver sends at most about 3 MiB objects; an UPDATE carries two.
/// controller-runtime accepts 7 MiB; larger bodies get HTTP 413.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// What the handlers share.
#[derive(Debug)]
pub struct AppState {
    pub config: ArcSwap<Config>,
}

impl AppState {
    pub fn new(config: Config) -> Arc<Self> {
        Arc::new(AppState {
            config: ArcSwap::from_pointee(config),
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
    let config = state.config.load();
    respond(&body, |req| mutate_review(req, &config))
}

async fn validate(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let config = state.config.load();
    respond(&body, |req| validate_review(req, &config))
}

/// The admin port: liveness and readiness.
pub fn admin_router() -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
}
