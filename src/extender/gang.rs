//! Gang scheduling in the extender (the rules are in
//! [`crate::engine::gang`]):
//!
//! - `/filter` and `/prioritize` judge a member on the state without its
//!   own group's holds, and only if `min-available` members of its group
//!   fit at once (members already placed count);
//! - bind, after reserving a member, holds capacity for the members that
//!   are still needed, for `scheduler.gang.holdSeconds`, so that other pods
//!   cannot take it while the group is being placed. The holds are
//!   recomputed at every member's bind and dropped once enough members are
//!   placed or when they end.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::engine::gang::{GangLabel, gang_label, place_gang};
use crate::engine::{ClusterState, PodPlan};

/// The pod's group, if it has one; a malformed group label is the reason
/// every node gets.
pub fn label_of(pod: &Pod) -> Result<Option<GangLabel>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    match &pod.metadata.labels {
        Some(labels) => gang_label(namespace, labels).map_err(|e| format!("GangInvalid ({e})")),
        None => Ok(None),
    }
}

/// The state to judge `pod` on: the view's own for a pod in no group; for a
/// member, the state without its group's holds, provided enough members of
/// the group fit; otherwise why no node can take it.
pub fn state_for<'v>(
    view: &'v ClusterView,
    config: &Config,
    pod: &Pod,
    plan: &PodPlan,
) -> Result<Cow<'v, ClusterState>, String> {
    let Some(label) = label_of(pod)? else {
        return Ok(Cow::Borrowed(view.state()));
    };
    let mut state = view.state_without_gang_holds(&label.key);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let (placed, pending) = members(view, config, &label, uid, plan);
    place_gang(&mut state, &label, placed, &pending).map_err(|e| e.to_string())?;
    Ok(Cow::Owned(state))
}

/// Members placed (holding GPUs in the ledger), and the plans of those that
/// are not, `uid` (with `plan`) first, then by UID.
fn members(
    view: &ClusterView,
    config: &Config,
    label: &GangLabel,
    uid: &str,
    plan: &PodPlan,
) -> (usize, Vec<(String, PodPlan)>) {
    let mut placed = 0;
    let mut pending = vec![(uid.to_string(), plan.clone())];
    for (member, pod) in view.gang_members(&label.key).into_iter().flatten() {
        if member == uid {
            continue;
        }
        if view.held_allocation(member).is_some() {
            placed += 1;
        } else if let Ok(p) = PodPlan::from_pod(pod, config) {
            pending.push((member.clone(), p));
        }
    }
    (placed, pending)
}

/// After `pod` was reserved in the ledger (bind, under the write lock):
/// holds capacity for the members its group still needs, until `now_ms`
/// plus the configured hold. Returns how many members capacity is held for.
pub fn hold_for_rest(view: &mut ClusterView, config: &Config, pod: &Pod, now_ms: i64) -> usize {
    let Ok(Some(label)) = label_of(pod) else {
        return 0;
    };
    view.release_gang_holds(&label.key);
    let mut placed = 0;
    let mut pending = Vec::new();
    for (member, p) in view.gang_members(&label.key).into_iter().flatten() {
        if view.held_allocation(member).is_some() {
            placed += 1;
        } else if let Ok(plan) = PodPlan::from_pod(p, config) {
            pending.push((member.clone(), plan));
        }
    }
    // The pod just reserved may not be known as a member yet.
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    if view
        .gang_members(&label.key)
        .is_none_or(|m| !m.contains_key(uid))
    {
        placed += 1;
    }
    let needed = usize::try_from(label.min_available).unwrap_or(usize::MAX);
    if placed >= needed {
        return 0;
    }
    let mut trial = view.state().clone();
    let Ok(holds) = place_gang(&mut trial, &label, placed, &pending) else {
        tracing::warn!(group = %label.key, placed, "gang: the members still needed no longer fit");
        return 0;
    };
    let until = now_ms.saturating_add(
        i64::try_from(config.scheduler.gang.hold_seconds.saturating_mul(1000)).unwrap_or(i64::MAX),
    );
    let mut held = 0;
    for (member, allocation) in holds {
        if view
            .hold_for_gang(&member, &label.key, allocation, until)
            .is_ok()
        {
            held += 1;
        }
    }
    held
}
