//! The API server calls of bind: reads and writes of one pod or node, each
//! with its own deadline (and behind the client-side rate limit, when
//! `api.qps` sets one), and errors that say which call failed and how (not
//! found, conflict, refused, no answer).
//!
//! Watches do not go through here: they hold a request open for minutes and
//! are paced by the watcher's own backoff.
//!
//! A call made inside [`within`] also ends at that deadline, its wait for
//! the rate limiter included: a bind has one budget for everything it does
//! (`scheduler.bindTimeoutSeconds`, below kube-scheduler's `httpTimeout`).

use std::sync::Arc;
use std::time::Duration;

use crate::config::api::ApiLimits;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

impl ApiLimits {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_seconds)
    }
}

/// A token bucket: `burst` requests at once, then `qps` per second. A
/// caller that finds the bucket empty takes a token on credit and waits for
/// it, so waiters are served in the order they came.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: if qps.is_finite() && qps >= 0.1 {
                qps
            } else {
                0.1
            },
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        }
    }

    /// Waits until a request may be sent.
    pub async fn acquire(&self) {
        let wait = {
            let mut bucket = self.bucket.lock().await;
            let now = Instant::now();
            let (tokens, last) = *bucket;
            let refilled =
                (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst) - 1.0;
            *bucket = (refilled, now);
            if refilled >= 0.0 {
                return;
            }
            Duration::try_from_secs_f64(-refilled / self.qps).unwrap_or(Duration::from_secs(60))
        };
        tokio::time::sleep(wait).await;
    }
}

/// gpugate's client-side limit (`api.qps`, none by default), shared by
/// every [`ApiCalls`] handle, and the time each request waited for it.
#[derive(Debug, Clone)]
pub struct ClientLimit {
    limiter: Option<Arc<RateLimiter>>,
    wait: Histogram,
}

impl ClientLimit {
    /// The limit `limits` sets (if any), its waits observed in `metrics`.
    pub fn new(limits: &ApiLimits, metrics: &ClientMetrics) -> Self {
        Self {
            limiter: limits
                .client_limit()
                .map(|(qps, burst)| Arc::new(RateLimiter::new(qps, burst))),
            wait: metrics.wait.clone(),
        }
    }

    /// Waits for the limiter (returns at once without one) and observes
    /// the wait, until `deadline`: `Err(waited)` if it passed first.
    async fn acquire(&self, deadline: Instant) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else {
            self.wait.observe(0.0);
            return Ok(());
        };
        let start = Instant::now();
        let outcome = tokio::time::timeout_at(deadline, limiter.acquire())
            .await
            .map_err(|_| start.elapsed());
        self.wait.observe(start.elapsed().as_secs_f64());
        outcome
    }
}

/// What gpugate's API client reports to Prometheus.
#[derive(Debug, Clone)]
pub struct ClientMetrics {
    /// Time each request waited for the client-side limit (0 without one).
    pub wait: Histogram,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        Self {
            // 100 µs to about 105 s (a wait may last a bind's budget); a
            // wait of 0 (no limit) falls in the first.
            wait: Histogram::new(exponential_buckets(0.0001, 2.0, 21)),
        }
    }
}

impl ClientMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_api_client_wait_seconds",
            "Time each of gpugate's API requests (bind, node lock, preemption, defragmentation, \
             orphan sweep; not watches or events) waited for its client-side rate limit, api.qps: \
             0 without one (the default), so the count is the requests sent",
            self.wait.clone(),
        );
    }
}

/// An API call that did not do what was asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{what}: not found")]
    NotFound { what: String },
    /// The object changed since it was read (resourceVersion precondition),
    /// or already exists, or (for a Binding) the pod is already bound.
    #[error("{what}: conflict: {message}")]
    Conflict { what: String, message: String },
    #[error("{what}: the API server answered {code}: {message}")]
    Refused {
        what: String,
        code: u16,
        message: String,
    },
    #[error("{what}: no answer within {seconds} s")]
    Timeout { what: String, seconds: f64 },
    /// Not sent: the caller's deadline passed while it waited for the rate
    /// limiter.
    #[error(
        "{what}: not sent, the deadline passed after {waited_ms} ms waiting for the API rate limit (api.qps)"
    )]
    NotSent { what: String, waited_ms: u128 },
    #[error("{what}: {message}")]
    Transport { what: String, message: String },
}

impl ApiError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::NotFound { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, ApiError::Conflict { .. })
    }

    /// Whether the request may have taken effect although it failed (no
    /// answer, or a server error): a write's outcome must be read back.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ApiError::Timeout { .. } | ApiError::Transport { .. })
            || matches!(self, ApiError::Refused { code, .. } if *code >= 500)
    }

    fn from_kube(what: String, e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => match status.code {
                404 => ApiError::NotFound { what },
                409 => ApiError::Conflict {
                    what,
                    message: status.message,
                },
                code => ApiError::Refused {
                    what,
                    code,
                    message: status.message,
                },
            },
            other => ApiError::Transport {
                what,
                message: other.to_string(),
            },
        }
    }
}

tokio::task_local! {
    /// The deadline of the calls made inside [`within`].
    static DEADLINE: Option<Instant>;
}

/// Runs `work` with every API call in it ending by `deadline` (each call
/// still ends within `api.timeoutSeconds` too).
pub async fn within<F: std::future::Future>(deadline: Instant, work: F) -> F::Output {
    DEADLINE.scope(Some(deadline), work).await
}

/// Runs `work` without the deadline of an enclosing [`within`]: for undo
/// steps, which must run even when the bind's budget is spent.
pub async fn without_deadline<F: std::future::Future>(work: F) -> F::Output {
    DEADLINE.scope(None, work).await
}

/// The calls bind makes, over one client.
pub struct ApiCalls {
    client: Client,
    limit: ClientLimit,
    timeout: Duration,
    binding_labels: tokio::sync::OnceCell<bool>,
}

impl std::fmt::Debug for ApiCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiCalls")
            .field("limit", &self.limit)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ApiCalls {
    /// Calls over `client` with `limits`' timeout, behind `limit` (shared
    /// by every handle of the process).
    pub fn new(client: Client, limits: &ApiLimits, limit: ClientLimit) -> Self {
        Self {
            client,
            limit,
            timeout: limits.timeout(),
            binding_labels: tokio::sync::OnceCell::new(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn call<T>(
        &self,
        what: impl FnOnce() -> String,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApiError> {
        let start = Instant::now();
        let deadline = DEADLINE
            .try_with(|d| *d)
            .ok()
            .flatten()
            .map_or(start + self.timeout, |d| d.min(start + self.timeout));
        if let Err(waited) = self.limit.acquire(deadline).await {
            return Err(ApiError::NotSent {
                what: what(),
                waited_ms: waited.as_millis(),
            });
        }
        match tokio::time::timeout_at(deadline, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ApiError::from_kube(what(), e)),
            Err(_) => Err(ApiError::Timeout {
                what: what(),
                seconds: (start.elapsed().as_millis() as f64 / 1000.0),
            }),
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    pub async fn get_pod(&self, namespace: &str, name: &str) -> Result<Pod, ApiError> {
        self.call(
            || format!("GET pod {namespace}/{name}"),
            self.pods(namespace).get(name),
        )
        .await
    }

    /// Every pod of the namespace (defragmentation's candidates).
    pub async fn list_pods(&self, namespace: &str) -> Result<Vec<Pod>, ApiError> {
        self.call(
            || format!("LIST pods in {namespace}"),
            self.pods(namespace).list(&kube::api::ListParams::default()),
        )
        .await
        .map(|l| l.items)
    }

    /// A JSON merge patch of a pod (with `metadata.resourceVersion` in the
    /// patch it applies only to that version).
    pub async fn merge_patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Pod, ApiError> {
        self.call(
            || format!("PATCH pod {namespace}/{name}"),
            self.pods(namespace)
                .patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
    }

    /// `POST pods/NAME/eviction` of this UID only: the API server refuses
    /// (429) an eviction that would break a PodDisruptionBudget.
    pub async fn evict_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), ApiError> {
        let params = kube::api::EvictParams {
            delete_options: Some(kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..Default::default()
            }),
            post_options: PostParams::default(),
        };
        self.call(
            || format!("POST pod {namespace}/{name} eviction"),
            self.pods(namespace).evict(name, &params),
        )
        .await
        .map(|_| ())
    }

    /// `POST pods/NAME/binding`: assigns the pod (only this UID) to `node`.
    /// The API server copies the Binding's annotations onto the pod in the
    /// same write, and its labels too from Kubernetes 1.35 (feature gate
    /// `PodTopologyLabelsAdmission`, on by default); see
    /// [`ApiCalls::binding_copies_labels`].
    pub async fn bind_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        node: &str,
        metadata: Option<&Value>,
    ) -> Result<(), ApiError> {
        let mut meta = json!({"name": name, "namespace": namespace, "uid": uid});
        if let Some(Value::Object(extra)) = metadata {
            for (k, v) in extra {
                meta[k] = v.clone();
            }
        }
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        self.call(
            || format!("POST binding of pod {namespace}/{name} to node {node}"),
            self.pods(namespace).create_subresource::<_, Value>(
                "binding",
                name,
                &PostParams::default(),
                &binding,
            ),
        )
        .await
        .map(|_| ())
    }

    /// Whether the API server copies a Binding's labels onto the pod
    /// (Kubernetes 1.35 and later). Asked once; an unreadable version
    /// counts as no, so that the label is written separately.
    pub async fn binding_copies_labels(&self) -> bool {
        *self
            .binding_labels
            .get_or_init(|| async {
                match self.client.apiserver_version().await {
                    Ok(v) => {
                        let minor: u32 = v
                            .minor
                            .trim_end_matches(|c: char| !c.is_ascii_digit())
                            .parse()
                            .unwrap_or(0);
                        v.major == "1" && minor >= 35
                    }
                    Err(e) => {
                        tracing::warn!("API server version unknown ({e}); pod labels are written apart from the Binding");
                        false
                    }
                }
            })
            .await
    }

    pub async fn get_node(&self, name: &str) -> Result<Node, ApiError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.call(|| format!("GET node {name}"), nodes.get(name))
            .await
    }

    pub async fn merge_patch_node(&self, name: &str, patch: &Value) -> Result<Node, ApiError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.call(
            || format!("PATCH node {name}"),
            nodes.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bucket_allows_a_burst_then_the_rate() {
        let limiter = RateLimiter::new(10.0, 3);
        let start = Instant::now();
        for _ in 0..3 {
            limiter.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        for _ in 0..5 {
            limiter.acquire().await;
        }
        // Five more at 10/s: 0.5 s.
        let waited = start.elapsed().as_secs_f64();
        assert!((0.49..0.52).contains(&waited), "{waited}");
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_by_default_and_every_wait_observed() {
        let metrics = ClientMetrics::default();
        let none = ClientLimit::new(&ApiLimits::default(), &metrics);
        let deadline = Instant::now() + Duration::from_millis(10);
        for _ in 0..1000 {
            none.acquire(deadline).await.unwrap();
        }
        assert_eq!(Instant::now() + Duration::from_millis(10), deadline);
        let limited = ApiLimits {
            qps: Some(10.0),
            ..Default::default()
        };
        assert_eq!(limited.client_limit(), Some((10.0, 20)));
        let limit = ClientLimit::new(&limited, &metrics);
        let deadline = Instant::now() + Duration::from_secs(60);
        for _ in 0..25 {
            limit.acquire(deadline).await.unwrap();
        }
        // Twenty at once (the burst), five more at 10/s.
        let mut text = String::new();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("gpugate_api_client_wait_seconds_count 1025"),
            "{text}"
        );
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("gpugate_api_client_wait_seconds_sum "))
            .unwrap()
            .parse()
            .unwrap();
        // Five waits of 0.1 s each.
        assert!((0.49..0.52).contains(&sum), "{sum}");
    }

    #[test]
    fn limits_are_validated() {
        assert!(ApiLimits::default().validate().is_ok());
        assert_eq!(ApiLimits::default().client_limit(), None);
        for bad in [
            ApiLimits {
                qps: Some(0.0),
                ..Default::default()
            },
            ApiLimits {
                qps: Some(f64::NAN),
                ..Default::default()
            },
            ApiLimits {
                qps: Some(10.0),
                burst: Some(0),
                ..Default::default()
            },
            ApiLimits {
                burst: Some(5),
                ..Default::default()
            },
            ApiLimits {
                timeout_seconds: 0.0,
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
