//! What a bind came to: a stable code ([`BindCode`], a metric label), the
//! failure with its whole story, and the metrics bind reports.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cluster::api::ApiError;
use crate::cluster::lock::LockCode;

/// The outcome of one bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindCode {
    Bound,
    /// kube-scheduler retried a bind that had landed.
    AlreadyBound,
    BoundWithoutGpus,
    BindInProgress,
    PodNotFound,
    /// The pod under the name is another pod (deleted and created again).
    PodReplaced,
    Conflict,
    ApiTimeout,
    ApiError,
    BoundElsewhere,
    InvalidPod,
    /// Whether the Binding landed is unknown; everything is kept.
    BindingUnknown,
    QuotaExceeded,
    GangInvalid,
    DoesNotFit,
    GangNotFit,
    Lock(LockCode),
}

impl BindCode {
    pub fn as_str(self) -> &'static str {
        match self {
            BindCode::Bound => "bound",
            BindCode::AlreadyBound => "already_bound",
            BindCode::BoundWithoutGpus => "bound_without_gpus",
            BindCode::BindInProgress => "bind_in_progress",
            BindCode::PodNotFound => "pod_not_found",
            BindCode::PodReplaced => "pod_replaced",
            BindCode::Conflict => "conflict",
            BindCode::ApiTimeout => "api_timeout",
            BindCode::ApiError => "api_error",
            BindCode::BoundElsewhere => "bound_elsewhere",
            BindCode::InvalidPod => "invalid_pod",
            BindCode::BindingUnknown => "binding_unknown",
            BindCode::QuotaExceeded => "quota_exceeded",
            BindCode::GangInvalid => "gang_invalid",
            BindCode::DoesNotFit => "does_not_fit",
            BindCode::GangNotFit => "gang_not_fit",
            BindCode::Lock(code) => code.as_str(),
        }
    }
}

impl From<LockCode> for BindCode {
    fn from(code: LockCode) -> Self {
        BindCode::Lock(code)
    }
}

/// A bind that did not happen: a stable code and the whole story.
#[derive(Debug, Clone, PartialEq)]
pub struct BindFailure {
    pub code: BindCode,
    pub message: String,
}

impl BindFailure {
    pub fn new(code: BindCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A failed API call about the pod `who`.
    pub fn api(who: &str, e: &ApiError) -> Self {
        let code = match e {
            ApiError::NotFound { .. } => BindCode::PodNotFound,
            ApiError::Conflict { .. } => BindCode::Conflict,
            ApiError::Timeout { .. } => BindCode::ApiTimeout,
            _ => BindCode::ApiError,
        };
        Self::new(code, format!("pod {who}: {e}"))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BindLabels {
    /// `ok` or `error`.
    pub result: &'static str,
    /// What happened: `bound`, `already_bound`, `node_lock_contention`, …
    pub code: &'static str,
}

/// A node lock kept past its expiry, and its holder (`namespace/name`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AwaitedLockLabels {
    pub node: String,
    pub pod: String,
}

/// A label set with fixed names and values from fixed sets.
type Labels<const N: usize> = [(&'static str, &'static str); N];

/// HAMi master's scheduler counters (#3083, #3088), with its bounded
/// labels, so that HAMi's dashboards and alerts read gpugate too:
/// allocations written (`device_type`, the kind's vendor word), allocations
/// that failed (`phase`: `filter` when no node could hold a pod, `bind`
/// when a bind failed; `failure_reason`: the reason or bind code), and
/// binds whose writes were rolled back.
#[derive(Debug, Clone, Default)]
pub struct HamiSchedulerCounters {
    pub allocations: Family<Labels<1>, Counter>,
    pub failures: Family<Labels<2>, Counter>,
    pub rollbacks: Counter,
}

impl HamiSchedulerCounters {
    /// A pod's devices of `vendor` were written (bound).
    pub fn allocated(&self, vendor: &'static str) {
        self.allocations
            .get_or_create(&[("device_type", vendor)])
            .inc();
    }

    /// An allocation failed in `phase` for `reason`.
    pub fn failed(&self, phase: &'static str, reason: &'static str) {
        self.failures
            .get_or_create(&[("phase", phase), ("failure_reason", reason)])
            .inc();
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "hami_scheduler_allocations",
            "Pods whose devices were allocated and bound, by device_type (HAMi master's name)",
            self.allocations.clone(),
        );
        registry.register(
            "hami_scheduler_allocation_failures",
            "Allocations that failed, by phase (filter: no node could hold the pod; bind) and \
             failure_reason (a reason code or bind code) (HAMi master's name)",
            self.failures.clone(),
        );
        registry.register(
            "hami_scheduler_bind_rollbacks",
            "Binds whose node lock and reservation were rolled back after a failure (HAMi \
             master's name)",
            self.rollbacks.clone(),
        );
    }
}

/// What bind reports to Prometheus.
#[derive(Debug, Clone)]
pub struct BindMetrics {
    pub outcomes: Family<BindLabels, Counter>,
    /// Time from asking for the node (in-process turn and HAMi's lock) to
    /// holding it, for binds that got it.
    pub lock_wait: Histogram,
    /// Undo steps that failed (each is also in the bind's error).
    pub rollback_failures: Counter,
    /// Allocations held from `/prioritize` until the pod's bind.
    pub assumed: Counter,
    /// Of those, the ones no bind came for in time (dropped).
    pub assumed_expired: Counter,
    /// Node locks a bind left behind (its process died between the lock
    /// and the Binding) that the orphan sweep released.
    pub orphaned_locks_released: Counter,
    /// Node locks kept past their expiry because their holder waits for
    /// its device plugin: seconds since each was taken (set by the sweep).
    pub locks_awaiting_allocation: Family<AwaitedLockLabels, Gauge>,
    /// HAMi master's counters (filter failures are counted by the
    /// extender, which shares these).
    pub hami: HamiSchedulerCounters,
}

impl Default for BindMetrics {
    fn default() -> Self {
        Self {
            outcomes: Family::default(),
            // 1 ms to about 66 s (deploy/ waits up to 50 s).
            lock_wait: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            rollback_failures: Counter::default(),
            assumed: Counter::default(),
            assumed_expired: Counter::default(),
            orphaned_locks_released: Counter::default(),
            locks_awaiting_allocation: Family::default(),
            hami: HamiSchedulerCounters::default(),
        }
    }
}

impl BindMetrics {
    /// Counts one bind's outcome.
    pub fn record(&self, outcome: Result<BindCode, BindCode>) {
        let (result, code) = match outcome {
            Ok(code) => ("ok", code),
            Err(code) => {
                self.hami.failed("bind", code.as_str());
                ("error", code)
            }
        };
        self.outcomes
            .get_or_create(&BindLabels {
                result,
                code: code.as_str(),
            })
            .inc();
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_bind",
            "Binds through the API server, by result and code (bound, already_bound, \
             node_lock_contention, conflict, does_not_fit, quota_exceeded, api_error, ...)",
            self.outcomes.clone(),
        );
        registry.register(
            "gpugate_node_lock_wait_seconds",
            "Time a bind waited for its node (in-process queue and hami.io/mutex.lock)",
            self.lock_wait.clone(),
        );
        registry.register(
            "gpugate_assumed_reservations",
            "Allocations held from /prioritize on the node kube-scheduler is likely to choose, \
             until the pod's bind arrives",
            self.assumed.clone(),
        );
        registry.register(
            "gpugate_assumed_reservations_expired",
            "Assumed allocations dropped because no bind came within scheduler.assumeSeconds",
            self.assumed_expired.clone(),
        );
        registry.register(
            "gpugate_orphaned_node_locks_released",
            "hami.io/mutex.lock values a bind left behind (its holder gone, finished, bound \
             elsewhere or never bound once scheduler.bindTimeoutSeconds + 5 s had passed) that \
             the orphan sweep released",
            self.orphaned_locks_released.clone(),
        );
        registry.register(
            "gpugate_node_lock_awaiting_allocation_seconds",
            "Seconds since a hami.io/mutex.lock was taken, for each lock kept past \
             nodeLock.expirySeconds because its holder is bound to the node and still waits for \
             its device plugin (Pending, hami.io/bind-phase: allocating); the node takes no \
             other pod meanwhile",
            self.locks_awaiting_allocation.clone(),
        );
        self.hami.register(registry);
        registry.register(
            "gpugate_bind_rollback_failures",
            "Undo steps of failed binds that failed too (annotations left, lock not released)",
            self.rollback_failures.clone(),
        );
    }
}
