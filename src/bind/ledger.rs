//! Standalone bind (`serve --cluster`): the ledger is the whole truth.
//! The GPUs are chosen on the node kube-scheduler picked, against the
//! current ledger, and recorded there under the pod's UID, settled at
//! once (no watch will show the pod).

use jiff::Timestamp;

use crate::cluster::{ClusterView, SharedCluster};
use crate::config::Config;
use crate::placement::{self, PodToPlace};

use super::outcome::{BindCode, BindFailure};
use super::{Target, transaction::reserve_failure};

/// Commits `pod` to `target.node` in the ledger.
pub fn bind(
    cluster: &SharedCluster,
    config: &Config,
    pod: &PodToPlace,
    target: &Target,
) -> Result<(), BindFailure> {
    if !pod.has_gpus() {
        // Nothing for the ledger to hold.
        return Ok(());
    }
    let who = target.who();
    let mut view = cluster.write();
    // A concurrent bind of the same pod may have won meanwhile.
    if let Some(answer) = already_bound(&view, target) {
        return answer;
    }
    let (_, reservation) = placement::reserve(
        &mut view,
        config,
        pod,
        &target.uid,
        &target.node,
        Timestamp::now(),
    )
    .map_err(|e| reserve_failure(&e, &who))?;
    reservation.settle(&mut view);
    tracing::info!(pod = %who, node = %target.node, "bound (ledger)");
    Ok(())
}

/// The answer to a bind of a pod the ledger already holds: kube-scheduler
/// retries a bind whose answer it did not get, so the same node is success.
pub fn already_bound(view: &ClusterView, target: &Target) -> Option<Result<(), BindFailure>> {
    let held = view.held_allocation(&target.uid)?;
    Some(if held.node == target.node {
        Ok(())
    } else {
        Err(BindFailure::new(
            BindCode::BoundElsewhere,
            format!(
                "pod {}: already bound to node {}, not {}",
                target.who(),
                held.node,
                target.node
            ),
        ))
    })
}
