//! Steering by promised work: each pod gpugate has assumed, is binding or
//! has just bound on a node, and a held HAMi node lock, is one lock hold
//! that a new bind there waits behind (HAMi's device plugin allocates one
//! pod per node at a time). Of the feasible nodes only those promised the
//! least are offered: a free node while there is one, else the nodes whose
//! locks free first. A burst that kube-scheduler places faster than locks
//! are released therefore spreads over as many locks as it needs, while
//! the policy (binpack or spread) chooses among equally promised nodes
//! (docs/operations.md, "Throughput at scale"). `nodeLock.queueDepth`
//! loosens this: the nodes with up to that many holds ahead are offered
//! too (or those with the fewest any node has, when that is more), so that
//! binpack keeps filling the nodes it has begun at a rate their locks
//! alone could not serve (`auto`, the default: for binpack pods 7 holds
//! per second that locks have been held lately, at most four fifths of a
//! bind's wait for its node; 0 for spread pods).

use std::time::Duration;

use jiff::Timestamp;

use crate::cluster::ClusterView;
use crate::cluster::view::PromisedWork;
use crate::config::{Config, QueueDepth};
use crate::engine::policy::NodePolicy;
use crate::placement::reason::LockBusy;

/// Of the feasible `nodes`, those promised more lock holds than the least
/// promised one (or than `queueDepth` for a pod under `policy`, when that
/// is more), with what is promised there. `None` when steering is off or
/// none is promised more than that.
pub fn busy_nodes<'n>(
    view: &ClusterView,
    config: &Config,
    policy: NodePolicy,
    nodes: impl ExactSizeIterator<Item = &'n str>,
    now: Timestamp,
) -> Option<Vec<(&'n str, LockBusy)>> {
    let lock = &config.scheduler.node_lock;
    if !(lock.enabled && lock.steer) || nodes.len() < 2 {
        return None;
    }
    let expiry = Duration::from_secs(lock.expiry_seconds);
    let all = view.promised_nodes(now, expiry);
    if all.is_empty() {
        return None;
    }
    let promised: Vec<(&'n str, Option<&PromisedWork>)> =
        nodes.map(|node| (node, all.get(node))).collect();
    let holds = |w: Option<&PromisedWork>| w.map_or(0, PromisedWork::holds);
    let least = promised.iter().map(|(_, w)| holds(*w)).min()?;
    let hold = view.typical_lock_hold();
    let queue_depth = lock
        .queue_depth
        .for_policy(policy, hold, config.scheduler.node_wait());
    let offered_up_to = least.max(queue_depth);
    let busy: Vec<(&'n str, LockBusy)> = promised
        .into_iter()
        .filter_map(|(node, w)| {
            let w = w.filter(|w| w.holds() > offered_up_to)?;
            Some((
                node,
                LockBusy {
                    binds: w.binds,
                    lock: w.lock.cloned(),
                    least,
                    queue_depth,
                    auto_hold: (lock.queue_depth == QueueDepth::Auto).then_some(hold),
                },
            ))
        })
        .collect();
    (!busy.is_empty()).then_some(busy)
}
