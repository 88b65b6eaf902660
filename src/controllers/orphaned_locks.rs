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

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;

use crate::cluster::SharedCluster;
use crate::cluster::api::ApiCalls;
#[cfg(doc)]
use crate::cluster::lock::BIND_MARGIN;
use crate::config::Config;

/// How often the view's node locks are looked at.
pub const SWEEP: Duration = Duration::from_secs(5);

/// Sweeps until `stop`.
pub async fn run(
    api: Arc<ApiCalls>,
    cluster: Arc<SharedCluster>,
    config: Arc<ArcSwap<Config>>,
    released: Counter,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut tick = tokio::time::interval(SWEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => {}
        }
        let config = config.load_full();
        if !config.scheduler.node_lock.enabled || cluster.current().is_err() {
            continue;
        }
        let rules = crate::cluster::lock::rules(&config);
        let held = cluster.read().held_node_locks();
        for (node, value) in held {
            match crate::cluster::lock::release_if_orphaned(&api, &cluster, &node, &value, rules)
                .await
            {
                Ok(Some(why)) => {
                    released.inc();
                    tracing::warn!(%node, lock = %value, %why, "node lock left behind by a bind: released");
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(%node, error = %e, "orphan sweep: node skipped"),
            }
        }
    }
}
