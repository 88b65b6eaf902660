//! The orphan sweep: HAMi node locks that a bind left behind because its
//! process died between taking the lock and writing the Binding (a leader
//! killed mid-bind). Left alone, such a lock keeps the node busy until
//! another bind to it takes the lock over, or until it expires
//! (`scheduler.nodeLock.expirySeconds`, 5 minutes). Every replica sweeps,
//! every [`SWEEP`], from its current view: a lock older than the longest
//! bind (`scheduler.bindTimeoutSeconds` + [`BIND_MARGIN`]) whose holder is
//! gone, has finished, is bound elsewhere or was never bound is released
//! (that exact value only, with a resourceVersion precondition; see
//! [`crate::cluster::lock::release_if_orphaned`]). A lock whose holder is
//! bound to its node is never released here: it is the device plugin's,
//! and while the holder waits for the plugin no one else's. A retried bind
//! of the same pod writes the lock anew, so a live bind's lock is never
//! that old.
//!
//! A bind that died after its Binding left nothing to undo: the allocation
//! went in with the Binding, and the lock is the device plugin's to
//! release, as after every bind.
//!
//! The same sweep reports the locks kept past their expiry for a holder
//! that still waits for its device plugin (the view's
//! `locks_awaiting_allocation`): `gpugate_node_lock_awaiting_allocation_seconds`
//! per node and pod, and a `NodeLockAwaitingAllocation` warning event on
//! the holder, again every [`RETELL`] while it lasts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::bind::{AwaitedLockLabels, BindMetrics};
use crate::cluster::SharedCluster;
use crate::cluster::api::ApiCalls;
use crate::cluster::events::{EventSink, PodEvent};
#[cfg(doc)]
use crate::cluster::lock::BIND_MARGIN;
use crate::config::Config;

/// How often the view's node locks are looked at.
pub const SWEEP: Duration = Duration::from_secs(5);
/// How often a lock kept for a holder awaiting its device plugin is told
/// about again (an event on the holder).
pub const RETELL: Duration = Duration::from_secs(300);

/// Sweeps until `stop`.
pub async fn run(
    api: Arc<ApiCalls>,
    cluster: Arc<SharedCluster>,
    config: Arc<ArcSwap<Config>>,
    (metrics, events): (BindMetrics, EventSink),
    stop: impl std::future::Future<Output = ()>,
) {
    let mut ticks = crate::supervisor::Ticks::new(SWEEP, stop);
    // When each kept lock (node, holder UID) was last told about.
    let mut told: HashMap<(String, String), Instant> = HashMap::new();
    while ticks.next().await {
        let config = config.load_full();
        if !config.scheduler.node_lock.enabled || cluster.current().is_err() {
            continue;
        }
        let rules = crate::cluster::lock::rules(&config);
        report_awaited(&cluster, rules, &metrics, &events, &mut told);
        let held = cluster.read().held_node_locks();
        for (node, value) in held {
            match crate::cluster::lock::release_if_orphaned(&api, &cluster, &node, &value, rules)
                .await
            {
                Ok(Some(why)) => {
                    metrics.orphaned_locks_released.inc();
                    tracing::warn!(%node, lock = %value, %why, "node lock left behind by a bind: released");
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(%node, error = %e, "orphan sweep: node skipped"),
            }
        }
    }
}

/// Sets the gauge of locks kept for holders awaiting their device plugin,
/// and tells each holder (an event and a log line) when it was not told
/// within [`RETELL`].
fn report_awaited(
    cluster: &SharedCluster,
    rules: crate::hami::node_lock::LockRules,
    metrics: &BindMetrics,
    events: &EventSink,
    told: &mut HashMap<(String, String), Instant>,
) {
    let now = jiff::Timestamp::now();
    let awaited = cluster.read().locks_awaiting_allocation(now, rules);
    metrics.locks_awaiting_allocation.clear();
    told.retain(|(node, uid), _| awaited.iter().any(|a| a.node == *node && a.uid == *uid));
    for lock in awaited {
        let labels = AwaitedLockLabels {
            node: lock.node.clone(),
            pod: format!("{}/{}", lock.namespace, lock.name),
        };
        metrics
            .locks_awaiting_allocation
            .get_or_create(&labels)
            .set(now.duration_since(lock.since).as_secs());
        let key = (lock.node.clone(), lock.uid.clone());
        if told.get(&key).is_some_and(|at| at.elapsed() < RETELL) {
            continue;
        }
        told.insert(key, Instant::now());
        let note = lock.describe(now);
        tracing::warn!(node = %lock.node, pod = %labels.pod, "{note}");
        events.emit(PodEvent::about(
            &lock.namespace,
            &lock.name,
            &lock.uid,
            true,
            "NodeLockAwaitingAllocation",
            note,
        ));
    }
}
