//! `/bind` against the API server: the one place where gpugate commits a
//! placement (design.md). `ApiBinder` runs each bind's transaction
//! (`transaction.rs`) in its own task, so that kube-scheduler giving up
//! on the request cannot stop it half way, and counts the running ones
//! for a stop to wait on. Standalone (`--cluster`), `ledger.rs` commits to
//! the view alone.

pub mod ledger;
pub mod outcome;
mod transaction;
mod undo;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::cluster::SharedCluster;
use crate::cluster::api::ApiCalls;
use crate::cluster::events::EventSink;
use crate::cluster::lock::NodeLocks;
use crate::config::Config;

pub use outcome::{AwaitedLockLabels, BindCode, BindFailure, BindMetrics, HamiSchedulerCounters};
pub use transaction::reserve_failure;

/// The pod kube-scheduler binds, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
}

impl Target {
    /// `namespace/name`, for messages.
    pub fn who(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why a bind through the API server did not happen.
#[derive(Debug, Clone, PartialEq)]
pub enum BindError {
    /// The transaction said what failed.
    Failed(BindFailure),
    /// Its task ended without an answer.
    Task(String),
}

/// Binds through the API server.
#[derive(Debug)]
pub struct ApiBinder {
    api: ApiCalls,
    locks: NodeLocks,
    events: EventSink,
    pub metrics: BindMetrics,
    /// Transactions running in their own tasks, which a stop waits for.
    running: Arc<Running>,
}

/// A count of running bind transactions and a wake-up when it reaches 0.
#[derive(Debug, Default)]
struct Running {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Running {
    /// Waits until the count is 0, for at most `within`; whether it is.
    async fn wait_idle(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            // Registered before the check, so a drop to 0 in between is seen.
            let idle = self.idle.notified();
            if self.count.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return false;
            }
        }
    }
}

/// One running transaction; counted until dropped.
struct RunningBind(Arc<Running>);

impl RunningBind {
    fn start(running: &Arc<Running>) -> Self {
        running
            .count
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self(running.clone())
    }
}

impl Drop for RunningBind {
    fn drop(&mut self) {
        if self
            .0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl ApiBinder {
    pub fn new(api: ApiCalls, events: EventSink, metrics: BindMetrics) -> Self {
        Self {
            api,
            locks: NodeLocks::default(),
            events,
            metrics,
            running: Arc::default(),
        }
    }

    /// Waits until no bind transaction runs, for at most `within`; whether
    /// none does. A stop calls it after the listeners have drained: a bind
    /// whose caller gave up still runs to its end (bound, or undone) in its
    /// own task, and must not be cut off half way.
    pub async fn wait_for_binds(&self, within: Duration) -> bool {
        self.running.wait_idle(within).await
    }

    /// The events of binds (and of `/filter`'s answers).
    pub fn events(&self) -> &EventSink {
        &self.events
    }

    /// Runs the transaction in its own task; `known` is the pod as
    /// `/filter` saw it, if it did.
    pub async fn bind(
        self: &Arc<Self>,
        cluster: &Arc<SharedCluster>,
        config: Arc<Config>,
        target: Target,
        known: Option<Pod>,
    ) -> Result<(), BindError> {
        let (binder, cluster) = (self.clone(), cluster.clone());
        let running = RunningBind::start(&self.running);
        // Counted in the task: a bind whose caller gave up counts too.
        // The task logs in the call's span, even after the caller gave up.
        let span = tracing::Span::current();
        let task = tokio::spawn(
            async move {
                let _running = running;
                let asked = Instant::now();
                let deadline =
                    asked + Duration::from_secs_f64(config.scheduler.bind_timeout_seconds);
                let result = crate::cluster::api::within(
                    deadline,
                    transaction::Transaction {
                        bind: undo::Bind {
                            binder: &binder,
                            cluster: &cluster,
                            config: &config,
                            target: &target,
                        },
                        asked,
                        deadline,
                    }
                    .run(known),
                )
                .await;
                binder
                    .metrics
                    .record(result.as_ref().map(|c| *c).map_err(|f| f.code));
                result
            }
            .instrument(span),
        );
        match task.await {
            Ok(result) => result.map(|_| ()).map_err(BindError::Failed),
            Err(e) => Err(BindError::Task(e.to_string())),
        }
    }

    /// A failed bind, told to the pod as an event.
    fn failed(&self, pod: &Pod, failure: BindFailure) -> BindFailure {
        self.events.emit(crate::cluster::events::PodEvent::new(
            pod,
            true,
            "BindingFailed",
            failure.message.clone(),
        ));
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_waits_for_running_binds_within_its_drain() {
        let running = Arc::new(Running::default());
        assert!(running.wait_idle(Duration::ZERO).await, "none running");
        let first = RunningBind::start(&running);
        let second = RunningBind::start(&running);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(first);
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(second);
        });
        let started = Instant::now();
        assert!(running.wait_idle(Duration::from_secs(5)).await);
        assert!(started.elapsed() >= Duration::from_millis(90));
        // One that never ends: the wait gives up at its deadline.
        let _stuck = RunningBind::start(&running);
        assert!(!running.wait_idle(Duration::from_millis(50)).await);
    }
}
