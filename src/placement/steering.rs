//! Steering around busy nodes: a node whose HAMi node lock is held, or
//! where gpugate's own binds are in progress, would make a bind wait; while
//! some other node can hold the pod now, the pod is offered those instead,
//! so that binds run on many nodes at once (docs/operations.md,
//! "Throughput at scale").

use std::time::Duration;

use jiff::Timestamp;

use crate::cluster::ClusterView;
use crate::config::Config;

/// Of the feasible `nodes`, those a bind would have to wait for, with why,
/// when some other of them is free. `None` when steering is off or every
/// one is busy (the bind then waits).
pub fn busy_nodes<'n>(
    view: &ClusterView,
    config: &Config,
    nodes: impl ExactSizeIterator<Item = &'n str>,
    now: Timestamp,
) -> Option<Vec<(&'n str, String)>> {
    let lock = &config.scheduler.node_lock;
    let total = nodes.len();
    if !(lock.enabled && lock.steer) || total < 2 {
        return None;
    }
    let unsettled = view.unsettled_binds();
    let expiry = Duration::from_secs(lock.expiry_seconds);
    let busy: Vec<(&'n str, String)> = nodes
        .filter_map(|node| {
            view.node_busy(node, &unsettled, now, expiry)
                .map(|why| (node, why))
        })
        .collect();
    (busy.len() < total).then_some(busy)
}
