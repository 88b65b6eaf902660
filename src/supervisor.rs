//! Every long-running background task of `gpugate serve` runs here: the
//! watches, the API probe, config and certificate reloads, certificate
//! renewal, the webhook-scope check, preemption, expiry, the event sink,
//! the signal handlers. A task that ends or panics before the process
//! stops is logged, counted in `gpugate_task_restarts_total{task}` and
//! started again from its factory after a backoff (1 s, doubling to 30 s;
//! back to 1 s once a run has lasted a minute). A detached task that died
//! would leave a replica serving from a frozen view with nobody noticing
//! (HAMi #2549's standbys answered ready while unable to serve).
//!
//! Request-scoped tasks (one per connection, one per bind transaction)
//! are not supervised: they end with their request. `tests/supervised_tasks.rs`
//! fails when a `tokio::spawn` appears anywhere else.

use std::future::Future;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// First wait before a restart.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait before a restart.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A run this long resets the backoff: the task was working.
pub const STABLE_RUN: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    task: &'static str,
}

/// `gpugate_task_restarts_total{task}`.
#[derive(Clone, Debug, Default)]
pub struct TaskMetrics {
    restarts: Family<TaskLabels, Counter>,
}

impl TaskMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_task_restarts",
            "Background tasks restarted after they ended or panicked before the process stopped",
            self.restarts.clone(),
        );
    }

    /// Restarts of `task` so far.
    pub fn restarts(&self, task: &'static str) -> u64 {
        self.restarts.get_or_create(&TaskLabels { task }).get()
    }
}

/// Resolves once the process stops (see [`Supervisor::stopped`]).
pub type Stopped = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts background tasks and keeps them running until the process stops.
#[derive(Clone, Debug)]
pub struct Supervisor {
    stop: watch::Receiver<bool>,
    metrics: TaskMetrics,
}

impl Supervisor {
    /// `stop` turns true when the process stops: tasks that end after that
    /// are not restarted.
    pub fn new(stop: watch::Receiver<bool>, metrics: TaskMetrics) -> Self {
        Self { stop, metrics }
    }

    /// A future that resolves when the process stops.
    pub fn stopped(&self) -> Stopped {
        let mut rx = self.stop.clone();
        Box::pin(async move {
            let _ = rx.wait_for(|s| *s).await;
        })
    }

    fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Runs the future `make` returns, given a [`Stopped`] to end on;
    /// makes a new one whenever it ends or panics before the process
    /// stops. Restarts wait [`FIRST_BACKOFF`] doubling to [`MAX_BACKOFF`].
    pub fn spawn<F, Fut>(&self, task: &'static str, mut make: F)
    where
        F: FnMut(Stopped) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            let mut backoff = FIRST_BACKOFF;
            loop {
                let started = tokio::time::Instant::now();
                // Its own task, so that a panic ends it and not this loop.
                let run = tokio::spawn(make(this.stopped())).await;
                if this.is_stopping() {
                    return;
                }
                match run {
                    Ok(()) => tracing::error!(task, "background task ended; restarting it"),
                    Err(e) => {
                        let why = panic_text(e);
                        tracing::error!(task, panic = %why, "background task panicked; restarting it");
                    }
                }
                this.metrics
                    .restarts
                    .get_or_create(&TaskLabels { task })
                    .inc();
                if started.elapsed() >= STABLE_RUN {
                    backoff = FIRST_BACKOFF;
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = this.stopped() => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        });
    }
}

/// What a task that ended abnormally said.
fn panic_text(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return e.to_string();
    }
    let payload = e.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic without a message".to_string()
    }
}

/// A periodic background task's clock: a tick every `period` (one that
/// runs late delays the next instead of bursting to catch up), until
/// `stop` resolves.
pub struct Ticks<S> {
    timer: tokio::time::Interval,
    stop: std::pin::Pin<Box<S>>,
}

impl<S: Future<Output = ()>> Ticks<S> {
    pub fn new(period: Duration, stop: S) -> Self {
        let mut timer = tokio::time::interval(period);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            timer,
            stop: Box::pin(stop),
        }
    }

    /// Waits for the next tick (the first at once): false once `stop`
    /// has resolved.
    pub async fn next(&mut self) -> bool {
        tokio::select! {
            () = &mut self.stop => false,
            _ = self.timer.tick() => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_task_that_panics_or_ends_is_restarted_and_counted_until_the_stop() {
        let (stop_tx, stop_rx) = watch::channel(false);
        let metrics = TaskMetrics::default();
        let supervisor = Supervisor::new(stop_rx, metrics.clone());
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        supervisor.spawn("flaky", move |stopped| {
            let run = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match run {
                    0 => panic!("first run fails"),
                    1 => {} // ends at once
                    _ => stopped.await,
                }
            }
        });
        // Backoffs of 1 s then 2 s: the third run starts after 3 s.
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.restarts("flaky"), 1);
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(metrics.restarts("flaky"), 2);
        // The stop ends the third run; nothing restarts it.
        stop_tx.send(true).unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(metrics.restarts("flaky"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_backoff_doubles_to_its_cap() {
        let (_stop_tx, stop_rx) = watch::channel(false);
        let metrics = TaskMetrics::default();
        let supervisor = Supervisor::new(stop_rx, metrics.clone());
        supervisor.spawn("dies", |_| async {});
        // 1 + 2 + 4 + 8 + 16 = 31 s for five restarts, then 30 s each.
        tokio::time::sleep(Duration::from_millis(31_500)).await;
        assert_eq!(metrics.restarts("dies"), 6);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(metrics.restarts("dies"), 7);
    }
}
