//! Committing a placement in the view: the GPUs chosen on the node, checked
//! against the namespace quota and the pod's gang group, held under the
//! pod's UID (a bind's reservation), and the short-lived assumption that
//! `/prioritize` makes for the node kube-scheduler will most likely choose.

use jiff::Timestamp;

use crate::cluster::ClusterView;
use crate::cluster::view::{Reservation, TakenDestination, TakenHolds};
use crate::config::Config;
use crate::engine::gang::GangShortfall;
use crate::engine::{Allocation, ApplyError, Rejection};

use super::gang;
use super::pod::PodToPlace;
use super::quota;
use super::reason::QuotaRefusal;

/// Why the pod's GPUs could not be reserved on the node. The view is as it
/// was.
#[derive(Debug, Clone, PartialEq)]
pub enum ReserveError {
    Quota(QuotaRefusal),
    GangInvalid(String),
    DoesNotFit {
        node: String,
        /// Boxed: a rejection carries every reason's count.
        rejection: Box<Rejection>,
    },
    /// The ledger refused the allocation (a node or GPU it does not know).
    Ledger(ApplyError),
    GangNotFit {
        node: String,
        shortfall: GangShortfall,
    },
}

/// The reason alone, as a node's reason reads.
impl std::fmt::Display for ReserveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReserveError::Quota(q) => q.fmt(f),
            ReserveError::GangInvalid(e) => write!(f, "GangInvalid ({e})"),
            ReserveError::DoesNotFit { rejection, .. } => rejection.fmt(f),
            ReserveError::Ledger(e) => e.fmt(f),
            ReserveError::GangNotFit { shortfall, .. } => shortfall.fmt(f),
        }
    }
}

impl ReserveError {
    /// The failure as one sentence about the pod `who` (`namespace/name`).
    pub fn message(&self, who: &str) -> String {
        match self {
            ReserveError::Quota(q) => format!("pod {who}: {q}"),
            ReserveError::GangInvalid(e) => format!("pod {who}: GangInvalid ({e})"),
            ReserveError::DoesNotFit { node, rejection } => {
                format!("pod {who} does not fit on node {node}: {rejection}")
            }
            ReserveError::Ledger(e) => format!("pod {who}: {e}"),
            ReserveError::GangNotFit { node, shortfall } => {
                format!("pod {who} on node {node}: {shortfall}")
            }
        }
    }
}

/// Chooses the pod's GPUs on `node` against the view (its gang group's
/// holds set aside), checks the namespace quota, reserves them under `key`
/// (its UID), and for a gang member checks that the members still needed
/// fit and holds their capacity until `now` plus
/// `scheduler.gang.holdSeconds`. On failure the view is as it was. The
/// caller holds the view's write lock; the reservation it gets back is
/// bound, settled or released by it.
pub fn reserve(
    view: &mut ClusterView,
    config: &Config,
    pod: &PodToPlace,
    key: &str,
    node: &str,
    now: Timestamp,
) -> Result<(Allocation, Reservation), ReserveError> {
    // Gang holds are not quota use: one read serves both checks.
    let namespace_quota = quota::of_pod(view, config, pod.namespace(), &pod.scope, &pod.plan);
    quota::check_request(&namespace_quota, &pod.plan).map_err(ReserveError::Quota)?;
    let label = pod
        .gang()
        .map_err(|e| ReserveError::GangInvalid(e.to_string()))?;
    // Members are placed on the state without their group's holds; the
    // holds are recomputed below, or put back on failure.
    let taken = label.map(|l| view.take_gang_holds(&l.key));
    // A replacement of a moved pod binds with its held place free; the
    // place ends with its reservation, wherever it lands.
    let place = match label {
        None => {
            super::defrag::held_destination(view, pod).and_then(|(k, _)| view.take_destination(&k))
        }
        Some(_) => None,
    };
    let restore = |view: &mut ClusterView, taken: Option<TakenHolds>| {
        if let Some(taken) = taken {
            taken.restore(view);
        }
    };
    let restore_place = |view: &mut ClusterView, place: Option<TakenDestination>| {
        if let Some(place) = place {
            place.restore(view);
        }
    };
    // A member of a group being placed takes the devices the group's
    // placement gives it there.
    let planned = label.and_then(|_| gang::planned_place(view, config, pod, node));
    let allocation = match planned.map_or_else(|| view.state().assign(&pod.plan, node), Ok) {
        Ok(a) => a,
        Err(rejection) => {
            restore(view, taken);
            restore_place(view, place);
            return Err(ReserveError::DoesNotFit {
                node: node.to_string(),
                rejection: Box::new(rejection),
            });
        }
    };
    if let Err(q) = quota::check_allocation(&namespace_quota, &allocation) {
        restore(view, taken);
        restore_place(view, place);
        return Err(ReserveError::Quota(q));
    }
    let reservation = match view.reserve(key, pod.pod(), allocation.clone()) {
        Ok(r) => r,
        Err(e) => {
            restore(view, taken);
            restore_place(view, place);
            return Err(ReserveError::Ledger(e));
        }
    };
    // A member's group's holds are recomputed here (or put back on failure).
    if let (Some(l), Some(taken)) = (label, taken) {
        match gang::hold_for_rest(view, config, l, key, now.as_millisecond()) {
            Ok(0) => {}
            Ok(held) => {
                tracing::info!(pod = %pod.who(), members = held, "gang: capacity held for the rest of the group");
            }
            Err(shortfall) => {
                let _ = reservation.release(view);
                taken.restore(view);
                return Err(ReserveError::GangNotFit {
                    node: node.to_string(),
                    shortfall,
                });
            }
        }
    }
    Ok((allocation, reservation))
}

/// After a reservation is dropped (a failed bind): holds the capacity of
/// the pod's gang group's members again, if it has a group.
pub fn rehold_gang(
    view: &mut ClusterView,
    config: &Config,
    pod: &PodToPlace,
    key: &str,
    now: Timestamp,
) {
    if let Ok(Some(label)) = pod.gang()
        && let Err(e) = gang::hold_for_rest(view, config, label, key, now.as_millisecond())
    {
        tracing::info!(group = %label.key, "gang: no capacity held after a failed bind: {e}");
    }
}

/// Holds the pod's GPUs on `node`, the node kube-scheduler will most
/// likely choose, until `now` plus `scheduler.assumeSeconds` or until its
/// bind arrives: kube-scheduler goes on to the next pod as soon as it has
/// chosen, and that pod's `/filter` can come before this pod's `/bind`.
/// Without it, the next pod could be given the same last GPUs of the node
/// (its bind would then fail) or the same node (its bind would wait for the
/// node lock). Gang members are left to the group's own holds. Whether the
/// pod is now assumed.
pub fn assume(
    view: &mut ClusterView,
    config: &Config,
    pod: &PodToPlace,
    node: &str,
    now: Timestamp,
) -> bool {
    let uid = pod.uid();
    let seconds = config.scheduler.assume_seconds;
    if uid.is_empty() || seconds <= 0.0 || !matches!(pod.gang(), Ok(None)) {
        return false;
    }
    if view.held_allocation(uid).is_some() {
        return false;
    }
    // A replacement of a moved pod has its place held already.
    if super::defrag::held_destination(view, pod).is_some() {
        return false;
    }
    let Ok(allocation) = view.state().assign(&pod.plan, node) else {
        return false;
    };
    let until = now.as_millisecond() + (seconds * 1000.0) as i64;
    view.assume(uid, pod.pod(), allocation, until)
}
