//! The end of holds whose time is up: `/prioritize`'s assumptions no bind
//! came for (`scheduler.assumeSeconds`), capacity held for a gang group
//! that never completed (`scheduler.gang.holdSeconds`), and GPUs freed by
//! gpugate's preemption for a pod that never came back for them
//! (`scheduler.preemption.holdSeconds`). The view decides what is due
//! ([`crate::cluster::ClusterView::expire`]); this loop only asks it.
//!
//! The same tick tells pods the view found with a MIG instance
//! inconsistent with their GPU (`MigInconsistent`) or an allocation that
//! cannot be read (`AllocationUnreadable`), a warning event each:
//! the watch that finds them has no API handle, and events wait here
//! rather than under the view's lock.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use crate::cluster::SharedCluster;
use crate::cluster::events::{EventSink, PodEvent};

/// How often holds are looked at.
const TICK: Duration = Duration::from_millis(500);

/// Runs until `stop`: every half second, ends what is due (under the
/// write lock only when something is held) and counts the assumptions
/// dropped in `assumed_expired`.
pub async fn run(
    cluster: Arc<SharedCluster>,
    assumed_expired: Counter,
    events: EventSink,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut tick = tokio::time::interval(TICK);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => {}
        }
        if cluster.read().has_notices() {
            let notices = cluster.write().take_notices();
            for n in notices {
                events.emit(PodEvent::about(
                    &n.namespace,
                    &n.name,
                    &n.uid,
                    true,
                    n.reason,
                    n.problem,
                ));
            }
        }
        if !cluster.read().has_expiring() {
            continue;
        }
        let now = jiff::Timestamp::now().as_millisecond();
        let ended = cluster.write().expire(now);
        assumed_expired.inc_by(ended.assumed as u64);
        if ended.gang_holds > 0 {
            tracing::info!(
                members = ended.gang_holds,
                "gang: held capacity released (hold ended)"
            );
        }
        if ended.nominations > 0 {
            tracing::info!(
                pods = ended.nominations,
                "preemption: nominations ended (hold time up)"
            );
        }
        if ended.destinations > 0 {
            tracing::info!(
                places = ended.destinations,
                "defragmentation: places held for replacements released (hold time up)"
            );
        }
    }
}
