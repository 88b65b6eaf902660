//! Whether the cluster view is current: what `/readyz`, `/filter`,
//! `/prioritize`, `/bind`, `/preempt` and gpugate's own preemption ask
//! before they act on it.
//!
//! The view is current when every kind that gates readiness (Nodes, Pods,
//! ResourceQuotas) has been listed since its watch last (re)started, and
//! the API server answered the probe within `api.staleAfterSeconds`. It is
//! not current:
//! - before the first complete list of each kind;
//! - while a watch relists after an error, after its task ended or
//!   panicked, or after the API server was unreachable: events may have
//!   been missed, so the old state is kept (nothing is dropped before the
//!   new list is complete) but not placed from;
//! - when the probe has not succeeded for `staleAfterSeconds`: a watch
//!   whose connection hangs (a partition, a proxy that stops forwarding)
//!   reports no error at all. Once the probe succeeds again every watch is
//!   restarted with a fresh list, since a hung stream may never recover.
//!
//! A periodic resync (`api.resyncSeconds`) relists too, but the watch was
//! current until then, so the view stays current through it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::watch;
use tokio::time::Instant;

/// The kinds whose watches gate readiness.
pub const GATING_KINDS: [&str; 3] = ["Node", "Pod", "ResourceQuota"];

/// Why the view is not current; rendered into `/readyz`'s body and the
/// extender's errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Stale {
    #[error("cluster state not synced yet ({kind} not listed)")]
    NotSynced { kind: &'static str },
    #[error("cluster view not current: relisting {kind} for {secs:.1} s ({why})")]
    Relisting {
        kind: &'static str,
        secs: f64,
        why: String,
    },
    #[error(
        "cluster view not current: the API server has not answered for {secs:.1} s (last error: {error})"
    )]
    ApiUnreachable { secs: f64, error: String },
}

#[derive(Debug, Clone)]
enum KindState {
    NeverListed,
    Relisting { since: Instant, why: String },
    Current,
}

/// What made the view stale: `gpugate_cluster_view_stale_total{cause}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StaleCause {
    pub cause: &'static str,
}

/// A watch failed (an error, its stream cut): the kind relists.
pub const WATCH_FAILED: &str = "watch_failed";
/// The watch task ended or panicked: every gating kind relists.
pub const WATCH_TASK_ENDED: &str = "watch_task_ended";
/// The API server did not answer the probe for `staleAfterSeconds`.
pub const API_UNREACHABLE: &str = "api_unreachable";

#[derive(Debug)]
struct State {
    kinds: BTreeMap<&'static str, KindState>,
    /// The current silence of the API server was counted.
    silence_counted: bool,
    /// The last successful probe; `None` when nothing probes (tests, and
    /// views fed by hand).
    probe_ok: Option<Instant>,
    probe_error: String,
}

impl State {
    fn all_listed(&self) -> bool {
        self.kinds.values().all(|k| matches!(k, KindState::Current))
    }
}

/// The view's freshness, shared by the watches, the probe and the readers.
#[derive(Debug)]
pub struct Freshness {
    /// `None`: a loaded snapshot, always current.
    state: Option<Mutex<State>>,
    stale_after: Duration,
    /// Bumped when every watch must restart with a fresh list.
    restart: watch::Sender<u64>,
    /// Times the view went from current to stale, by cause.
    pub episodes: Family<StaleCause, Counter>,
}

impl Freshness {
    /// A view loaded whole (a snapshot): always current.
    pub fn always_current() -> Self {
        Self {
            state: None,
            stale_after: Duration::MAX,
            restart: watch::channel(0).0,
            episodes: Family::default(),
        }
    }

    /// A view fed by watches of [`GATING_KINDS`]; stale when the probe has
    /// not succeeded for `stale_after`.
    pub fn watched(stale_after: Duration) -> Self {
        Self {
            state: Some(Mutex::new(State {
                kinds: GATING_KINDS
                    .iter()
                    .map(|k| (*k, KindState::NeverListed))
                    .collect(),
                silence_counted: false,
                probe_ok: None,
                probe_error: String::new(),
            })),
            stale_after,
            restart: watch::channel(0).0,
            episodes: Family::default(),
        }
    }

    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        let lock = self.state.as_ref()?;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        Some(f(&mut state))
    }

    /// `Ok` when the view may be placed from now.
    pub fn check(&self) -> Result<(), Stale> {
        self.check_at(Instant::now())
    }

    pub fn check_at(&self, now: Instant) -> Result<(), Stale> {
        let stale_after = self.stale_after;
        self.with(|s| {
            for (kind, state) in &s.kinds {
                if let KindState::NeverListed = state {
                    return Err(Stale::NotSynced { kind });
                }
            }
            for (kind, state) in &s.kinds {
                if let KindState::Relisting { since, why } = state {
                    return Err(Stale::Relisting {
                        kind,
                        secs: now.saturating_duration_since(*since).as_secs_f64(),
                        why: why.clone(),
                    });
                }
            }
            if let Some(ok) = s.probe_ok {
                let quiet = now.saturating_duration_since(ok);
                if quiet > stale_after {
                    return Err(Stale::ApiUnreachable {
                        secs: quiet.as_secs_f64(),
                        error: s.probe_error.clone(),
                    });
                }
            }
            Ok(())
        })
        .unwrap_or(Ok(()))
    }

    /// Whether every gating kind has been listed at least once.
    pub fn listed_once(&self) -> bool {
        self.with(|s| {
            !s.kinds
                .values()
                .any(|k| matches!(k, KindState::NeverListed))
        })
        .unwrap_or(true)
    }

    /// `kind` is listed complete: current again.
    pub fn listed(&self, kind: &'static str) {
        self.with(|s| {
            let before = s.all_listed();
            if let Some(state) = s.kinds.get_mut(kind) {
                *state = KindState::Current;
            }
            if !before && s.all_listed() {
                tracing::info!("cluster view current: every gating kind listed");
            }
        });
    }

    /// `kind`'s watch lost events (`cause`, and in words `why`) and relists.
    pub fn relisting(&self, kind: &'static str, cause: &'static str, why: &str) {
        let now = Instant::now();
        let stale_after = self.stale_after;
        let counted = self.with(|s| {
            let was_current = s.all_listed()
                && s.probe_ok
                    .is_none_or(|ok| now.saturating_duration_since(ok) <= stale_after);
            if let Some(state) = s.kinds.get_mut(kind) {
                *state = match state {
                    KindState::NeverListed => KindState::NeverListed,
                    // The first cause, and since when, is what matters.
                    KindState::Relisting { since, why } => KindState::Relisting {
                        since: *since,
                        why: why.clone(),
                    },
                    KindState::Current => {
                        tracing::warn!(kind, why, "cluster view not current: relisting");
                        KindState::Relisting {
                            since: now,
                            why: why.to_string(),
                        }
                    }
                };
            }
            was_current && !s.all_listed()
        });
        if counted == Some(true) {
            self.episodes.get_or_create(&StaleCause { cause }).inc();
        }
    }

    /// Every gating kind relists.
    pub fn all_relisting(&self, cause: &'static str, why: &str) {
        for kind in GATING_KINDS {
            self.relisting(kind, cause, why);
        }
    }

    /// The probe starts: the API server counts as answering from now.
    pub fn probe_started(&self) {
        let now = Instant::now();
        self.with(|s| {
            s.probe_ok.get_or_insert(now);
        });
    }

    /// The API server answered the probe. After a silence longer than
    /// `stale_after`, every watch restarts with a fresh list (returns true).
    pub fn probe_succeeded(&self) -> bool {
        let now = Instant::now();
        let stale_after = self.stale_after;
        let was_unreachable = self
            .with(|s| {
                let was = s
                    .probe_ok
                    .is_some_and(|ok| now.saturating_duration_since(ok) > stale_after);
                s.probe_ok = Some(now);
                s.silence_counted = false;
                was
            })
            .unwrap_or(false);
        if was_unreachable {
            // Counted once, as the silence (probe_failed), not again here.
            self.all_relisting(
                API_UNREACHABLE,
                "the API server answers again after a silence",
            );
            self.restart.send_modify(|n| *n += 1);
        }
        was_unreachable
    }

    /// The probe failed; once the silence passes `stale_after`, the view
    /// is stale and the episode is counted.
    pub fn probe_failed(&self, error: &str) {
        let now = Instant::now();
        let stale_after = self.stale_after;
        let newly = self.with(|s| {
            s.probe_error = error.to_string();
            let silent = s
                .probe_ok
                .is_some_and(|ok| now.saturating_duration_since(ok) > stale_after);
            if silent && !s.silence_counted {
                s.silence_counted = true;
                tracing::warn!(
                    error,
                    "cluster view not current: the API server does not answer"
                );
                return s.all_listed();
            }
            false
        });
        if newly == Some(true) {
            self.episodes
                .get_or_create(&StaleCause {
                    cause: API_UNREACHABLE,
                })
                .inc();
        }
    }

    /// Changes whenever every watch must restart with a fresh list.
    pub fn restarts(&self) -> watch::Receiver<u64> {
        self.restart.subscribe()
    }

    /// Marks every gating kind relisting when dropped: held by the watch
    /// task, so that its end (or panic) makes the view stale at once.
    pub fn task_guard(self: &std::sync::Arc<Self>) -> TaskGuard {
        TaskGuard(self.clone())
    }
}

/// See [`Freshness::task_guard`].
#[derive(Debug)]
pub struct TaskGuard(std::sync::Arc<Freshness>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0
            .all_relisting(WATCH_TASK_ENDED, "the watch task ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn listed_all(f: &Freshness) {
        for k in GATING_KINDS {
            f.listed(k);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn current_only_once_every_gating_kind_is_listed() {
        let f = Freshness::watched(Duration::from_secs(10));
        assert!(matches!(f.check(), Err(Stale::NotSynced { .. })));
        f.listed("Node");
        f.listed("Pod");
        assert_eq!(
            f.check(),
            Err(Stale::NotSynced {
                kind: "ResourceQuota"
            })
        );
        f.listed("ResourceQuota");
        assert_eq!(f.check(), Ok(()));
        assert!(f.listed_once());
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_error_makes_it_stale_until_the_relist_completes() {
        let f = Freshness::watched(Duration::from_secs(10));
        listed_all(&f);
        f.relisting("Pod", WATCH_FAILED, "connection reset");
        tokio::time::sleep(Duration::from_secs(2)).await;
        f.relisting("Pod", WATCH_FAILED, "a second error");
        let Err(Stale::Relisting { kind, secs, why }) = f.check() else {
            panic!("expected relisting, got {:?}", f.check());
        };
        assert_eq!((kind, why.as_str()), ("Pod", "connection reset"));
        assert!((secs - 2.0).abs() < 0.01, "{secs}");
        f.listed("Pod");
        assert_eq!(f.check(), Ok(()));
        let episodes = |cause| f.episodes.get_or_create(&StaleCause { cause }).get();
        assert_eq!(episodes(WATCH_FAILED), 1, "one episode, two errors");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_api_server_makes_it_stale_and_its_return_restarts_every_watch() {
        let f = Freshness::watched(Duration::from_secs(10));
        listed_all(&f);
        f.probe_started();
        let restarts = f.restarts();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!f.probe_succeeded(), "a probe in time restarts nothing");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            f.check(),
            Ok(()),
            "10 s since the last answer: still current"
        );
        f.probe_failed("timed out");
        tokio::time::sleep(Duration::from_millis(100)).await;
        f.probe_failed("timed out");
        f.probe_failed("timed out");
        assert_eq!(
            f.episodes
                .get_or_create(&StaleCause {
                    cause: API_UNREACHABLE
                })
                .get(),
            1
        );
        assert!(matches!(
            f.check(),
            Err(Stale::ApiUnreachable { ref error, .. }) if error == "timed out"
        ));
        assert!(!restarts.has_changed().unwrap());
        assert!(f.probe_succeeded());
        assert!(restarts.has_changed().unwrap());
        // Answering again is not enough: every watch relists first.
        assert!(matches!(f.check(), Err(Stale::Relisting { .. })));
        listed_all(&f);
        assert_eq!(f.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_the_watch_task_makes_it_stale_at_once() {
        let f = Arc::new(Freshness::watched(Duration::from_secs(10)));
        let guard = f.task_guard();
        listed_all(&f);
        assert_eq!(f.check(), Ok(()));
        drop(guard);
        assert!(matches!(
            f.check(),
            Err(Stale::Relisting { ref why, .. }) if why == "the watch task ended"
        ));
    }

    #[test]
    fn a_snapshot_is_always_current() {
        let f = Freshness::always_current();
        f.relisting("Pod", WATCH_FAILED, "x");
        assert_eq!(f.check(), Ok(()));
        assert!(f.listed_once());
    }
}
