//! Gang scheduling on the view (the engine's part, whether members fit
//! together, is [`crate::engine::gang`]):
//!
//! - `/filter` and `/prioritize` judge a member on the state without its
//!   own group's holds, and only if `min-available` members of its group
//!   fit at once (members already placed count). While the group is short
//!   of `min-available` placed members, a member is offered only the node
//!   the group's placement gives it, so that what bind commits is what was
//!   checked;
//! - bind, after reserving a member, checks that the members still needed
//!   fit, refuses (and undoes) if they do not, and holds their capacity for
//!   `scheduler.gang.holdSeconds` so that other pods cannot take it while
//!   the group is being placed. The holds are recomputed at every member's
//!   bind (and after a member's failed bind) and end once enough members are
//!   placed or their time is up.

use std::borrow::Cow;

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::engine::gang::{GangLabel, GangShortfall, place_gang};
use crate::engine::{ClusterState, PodPlan};

use super::pod::{PodToPlace, plan_of};
use super::reason::NodeReason;

/// The hold for a group's members: `scheduler.gang.holdSeconds`, or its
/// PodGroup's `scheduleTimeoutSeconds` when that is shorter.
fn hold_ms(config: &Config, label: &GangLabel) -> i64 {
    let seconds = label
        .hold_limit_seconds
        .map_or(config.scheduler.gang.hold_seconds, |limit| {
            limit.min(config.scheduler.gang.hold_seconds)
        });
    i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// What a pod is judged on.
#[derive(Debug)]
pub struct Judged<'v> {
    pub state: Cow<'v, ClusterState>,
    /// For a member of a group still being placed: the one node the
    /// group's placement gives it.
    pub node: Option<String>,
}

/// The state to judge `pod` on among `candidates`: the view's own for a pod
/// in no group; for a member, the state without its group's holds,
/// provided enough members of the group fit; otherwise why no node can
/// take it.
pub fn judge<'v>(
    view: &'v ClusterView,
    config: &Config,
    pod: &PodToPlace,
    candidates: Option<&[String]>,
) -> Result<Judged<'v>, NodeReason> {
    let uid = pod.uid();
    // kube-scheduler filters unbound pods: what the ledger holds for this
    // one (annotations left by a failed bind, HAMi's filter) is on no node.
    let leftover = !uid.is_empty() && view.held_allocation(uid).is_some() && !view.is_reserved(uid);
    let Some(label) = pod
        .gang()
        .map_err(|e| NodeReason::GangInvalid(e.to_string()))?
    else {
        let state = if leftover {
            let mut s = view.state().clone();
            s.remove(uid);
            Cow::Owned(s)
        } else {
            Cow::Borrowed(view.state())
        };
        return Ok(Judged { state, node: None });
    };
    let mut state = view.state_without_gang_holds(&label.key);
    if leftover {
        state.remove(uid);
    }
    let (placed, mut pending) = members(view, config, label, uid);
    if placed >= label.min_members() {
        return Ok(Judged {
            state: Cow::Owned(state),
            node: None,
        });
    }
    pending.insert(0, (uid.to_string(), pod.plan.clone()));
    let placements =
        place_gang(&mut state, label, placed, &pending, &[candidates]).map_err(NodeReason::Gang)?;
    let node = placements
        .iter()
        .find(|(k, _)| k == uid)
        .map(|(_, a)| a.node.clone());
    Ok(Judged {
        state: Cow::Owned(state),
        node,
    })
}

/// The GPUs on `node` the group's placement gives `pod`, a member of a
/// group still short of `min-available` placed members, on the view's
/// state (its group's holds already taken out): what its bind reserves, so
/// that it takes the devices the rest of the group was planned around
/// instead of choosing its own (which could leave a later member without
/// room). `None` for a pod in no group, a group already placed, or when
/// the placement puts it elsewhere.
pub fn planned_place(
    view: &ClusterView,
    config: &Config,
    pod: &PodToPlace,
    node: &str,
) -> Option<crate::engine::Allocation> {
    let label = pod.gang().ok()??;
    let uid = pod.uid();
    let (placed, mut pending) = members(view, config, label, uid);
    if placed >= label.min_members() {
        return None;
    }
    pending.insert(0, (uid.to_string(), pod.plan.clone()));
    let mut state = view.state().clone();
    let candidates = [node.to_string()];
    place_gang(
        &mut state,
        label,
        placed,
        &pending,
        &[Some(&candidates[..])],
    )
    .ok()?
    .into_iter()
    .find(|(k, a)| k == uid && a.node == node)
    .map(|(_, a)| a)
}

/// Members placed (holding GPUs in the ledger), and the plans of the known
/// members that are not, by UID, `except` left out.
pub(crate) fn members(
    view: &ClusterView,
    config: &Config,
    label: &GangLabel,
    except: &str,
) -> (usize, Vec<(String, PodPlan)>) {
    let mut placed = 0;
    let mut pending = Vec::new();
    for (member, pod) in view.gang_members(&label.key).into_iter().flatten() {
        if member == except {
            continue;
        }
        if view.held_allocation(member).is_some() {
            placed += 1;
        } else if let Ok(p) = plan_of(pod, config) {
            pending.push((member.clone(), p));
        }
    }
    (placed, pending)
}

/// Holds capacity, until `now_ms` plus the configured hold, for the members
/// `group` still needs, replacing its holds. `member` (the pod just reserved,
/// or whose bind just failed) counts as placed when the ledger holds it.
/// Returns how many members capacity is held for, or why the members still
/// needed do not fit (then nothing is held).
pub fn hold_for_rest(
    view: &mut ClusterView,
    config: &Config,
    label: &GangLabel,
    member: &str,
    now_ms: i64,
) -> Result<usize, GangShortfall> {
    let _ = view.take_gang_holds(&label.key);
    let (mut placed, pending) = members(view, config, label, "");
    // The pod just reserved may not be known as a member yet (its watch
    // event has not come).
    let known = view
        .gang_members(&label.key)
        .is_some_and(|m| m.contains_key(member));
    if !known && view.held_allocation(member).is_some() {
        placed += 1;
    }
    if placed >= label.min_members() {
        return Ok(0);
    }
    let mut trial = view.state().clone();
    let holds = place_gang(&mut trial, label, placed, &pending, &[])?;
    let until = now_ms.saturating_add(hold_ms(config, label));
    Ok(view.replace_gang_holds(&label.key, holds, until))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::gang::GangKey;

    /// A PodGroup's scheduleTimeoutSeconds shortens the hold, never
    /// lengthens it past scheduler.gang.holdSeconds.
    #[test]
    fn the_hold_is_bounded_by_the_pod_groups_timeout() {
        let config = Config::default();
        assert_eq!(config.scheduler.gang.hold_seconds, 60);
        let label = |limit| GangLabel {
            key: GangKey {
                namespace: "ns".into(),
                name: "g".into(),
            },
            min_available: 2,
            hold_limit_seconds: limit,
        };
        assert_eq!(hold_ms(&config, &label(None)), 60_000);
        assert_eq!(hold_ms(&config, &label(Some(20))), 20_000);
        assert_eq!(hold_ms(&config, &label(Some(600))), 60_000);
    }
}
