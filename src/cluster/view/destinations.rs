//! Places held for the replacements of pods that defragmentation moved:
//! the capacity a plan found for each moved pod on another node, held in
//! the state (as a gang member's is: no namespace quota counts it) from
//! the eviction until a pod of the same owner and the same plan binds, or
//! the time is up. A place that is not free yet (a chain: another moved
//! pod still holds it) is held as soon as it is.
//!
//! The same kind of place waits for the members of a gang that pods were
//! moved for (a Kueue workload's: `kueue::controller`), under the group
//! `gang:<namespace>/<name>` and an owner no controller has: held as soon
//! as the moved pods are gone, given back when the gang's own holds take
//! over or the time is up.

use std::collections::BTreeMap;

use crate::engine::gang::GangKey;
use crate::engine::{Allocation, ClusterState, PodPlan};

use super::ClusterView;

#[derive(Debug, Clone)]
struct Destination {
    /// UID of the controller (ReplicaSet, StatefulSet) that recreates
    /// the moved pod.
    owner: String,
    plan: PodPlan,
    node: String,
    /// The GPUs to hold it on (any of the node's when empty).
    gpus: Vec<String>,
    /// The plan it is part of (the pending pod's UID).
    group: String,
    /// Unix ms.
    until_ms: i64,
    /// Held in the state now.
    held: bool,
}

/// A place taken out while its replacement is reserved.
#[derive(Debug)]
#[must_use = "a taken place is restored, or dropped once its replacement is reserved"]
pub struct TakenDestination {
    key: String,
    destination: Destination,
}

impl TakenDestination {
    /// Puts the place back (held again if it still fits).
    pub fn restore(self, view: &mut ClusterView) {
        view.destinations
            .by_key
            .insert(self.key.clone(), self.destination);
        view.try_hold_destination(&self.key);
    }
}

/// By key: `defrag/<pending pod UID>/<moved pod UID>`.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    by_key: BTreeMap<String, Destination>,
}

impl ClusterView {
    /// Holds a place on `node` for the replacement of `moved` (recreated by
    /// `owner`, planned as `plan`) until `until_ms`, for the plan `group`:
    /// on the GPUs `gpus` (those the plan chose, so that the places of one
    /// plan do not take each other's), or on those the pod would get when
    /// it is held (`gpus` empty). Whether it could be held at once
    /// (otherwise, as soon as it fits).
    #[allow(clippy::too_many_arguments)]
    pub fn hold_destination(
        &mut self,
        group: &str,
        moved: &str,
        owner: &str,
        plan: &PodPlan,
        (node, gpus): (&str, &[String]),
        until_ms: i64,
    ) -> bool {
        let key = format!("defrag/{group}/{moved}");
        self.release_destination(&key);
        self.destinations.by_key.insert(
            key.clone(),
            Destination {
                owner: owner.to_string(),
                plan: plan.clone(),
                node: node.to_string(),
                gpus: gpus.to_vec(),
                group: group.to_string(),
                until_ms,
                held: false,
            },
        );
        self.try_hold_destination(&key)
    }

    fn try_hold_destination(&mut self, key: &str) -> bool {
        let Some(d) = self.destinations.by_key.get(key).filter(|d| !d.held) else {
            return false;
        };
        let on_gpus;
        let plan = if d.gpus.is_empty() {
            &d.plan
        } else {
            let mut p = d.plan.clone();
            p.selection.use_uuids = d.gpus.clone();
            on_gpus = p;
            &on_gpus
        };
        let Ok(allocation) = self.state.assign(plan, &d.node) else {
            return false;
        };
        let held = self.state.apply_hold(key, allocation).is_ok();
        if let Some(d) = self.destinations.by_key.get_mut(key) {
            d.held = held;
        }
        held
    }

    /// Capacity was freed: holds the places that were waiting for it.
    pub(super) fn retry_destinations(&mut self) {
        let waiting: Vec<String> = self
            .destinations
            .by_key
            .iter()
            .filter(|(_, d)| !d.held)
            .map(|(k, _)| k.clone())
            .collect();
        for key in waiting {
            self.try_hold_destination(&key);
        }
    }

    /// The place held for a replacement recreated by `owner` with `plan`:
    /// its key and node (the first by key when several match).
    pub fn destination_for(&self, owner: &str, plan: &PodPlan) -> Option<(&str, &str)> {
        self.destinations
            .by_key
            .iter()
            .find(|(_, d)| d.owner == owner && d.plan == *plan)
            .map(|(k, d)| (k.as_str(), d.node.as_str()))
    }

    /// Whether the place `key` is held in the state now.
    pub fn destination_held(&self, key: &str) -> bool {
        self.destinations.by_key.get(key).is_some_and(|d| d.held)
    }

    /// Ends the place `key` (its replacement is being bound, or the plan
    /// was abandoned). Whether there was one.
    pub fn release_destination(&mut self, key: &str) -> bool {
        match self.destinations.by_key.remove(key) {
            Some(d) => {
                if d.held {
                    self.state.remove_hold(key);
                }
                true
            }
            None => false,
        }
    }

    /// Takes the place `key` out (its replacement is being bound): put
    /// back with [`TakenDestination::restore`] if the bind's reservation
    /// fails.
    pub fn take_destination(&mut self, key: &str) -> Option<TakenDestination> {
        let d = self.destinations.by_key.get(key)?.clone();
        self.release_destination(key);
        Some(TakenDestination {
            key: key.to_string(),
            destination: Destination { held: false, ..d },
        })
    }

    /// Ends the places of plan `group` except those for the pods `keep`
    /// (moved already: their replacements keep their places).
    pub fn release_destinations(&mut self, group: &str, keep: &[String]) {
        let keys: Vec<String> = self
            .destinations
            .by_key
            .iter()
            .filter(|(k, d)| {
                d.group == group && !keep.iter().any(|m| k.ends_with(&format!("/{m}")))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.release_destination(&k);
        }
    }

    /// Ends places whose time is up; returns how many.
    pub(super) fn expire_destinations(&mut self, now_ms: i64) -> usize {
        let ended: Vec<String> = self
            .destinations
            .by_key
            .iter()
            .filter(|(_, d)| d.until_ms <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &ended {
            self.release_destination(k);
        }
        ended.len()
    }

    /// Places held or waiting.
    pub fn destination_count(&self) -> usize {
        self.destinations.by_key.len()
    }

    /// Holds the place `at` (a node and the GPUs a plan chose there) for
    /// member `key` of gang `group` (planned as `plan`) until `until_ms`,
    /// as soon as it fits (at once when it does now). Whether it was held
    /// at once.
    pub fn hold_gang_place(
        &mut self,
        group: &GangKey,
        key: &str,
        plan: &PodPlan,
        at: &Allocation,
        until_ms: i64,
    ) -> bool {
        let places = gang_places(group);
        // The owner is the group's name, never a controller's UID: no
        // replacement pod takes the place.
        let gpus = at.gpu_uuids();
        self.hold_destination(&places, key, &places, plan, (&at.node, &gpus), until_ms)
    }

    /// Gives back the places waiting for gang `group`'s members.
    pub fn release_gang_places(&mut self, group: &GangKey) {
        self.release_destinations(&gang_places(group), &[]);
    }

    /// The places waiting for gang `group`'s members: (held now, in all).
    pub fn gang_places(&self, group: &GangKey) -> (usize, usize) {
        let places = gang_places(group);
        let mine = self
            .destinations
            .by_key
            .values()
            .filter(|d| d.group == places);
        (mine.clone().filter(|d| d.held).count(), mine.count())
    }

    /// Takes the places held for gang `group`'s members out of `state`.
    pub(super) fn remove_gang_places(&self, state: &mut ClusterState, group: &GangKey) {
        if self.destinations.by_key.is_empty() {
            return;
        }
        let places = gang_places(group);
        for (key, d) in &self.destinations.by_key {
            if d.held && d.group == places {
                state.remove_hold(key);
            }
        }
    }
}

/// The destination group of the places waiting for gang `group`.
fn gang_places(group: &GangKey) -> String {
    format!("gang:{}/{}", group.namespace, group.name)
}

/// The destination group of the places held for the replacements of the
/// pods moved by plan `plan` (any number unique to it: the plan's end
/// time) for gang `group`: one per plan, so that giving back what one plan
/// held never takes a place an earlier plan's replacement still needs.
pub fn gang_moves(group: &GangKey, plan: i64) -> String {
    format!("gang:{}/{}/moves/{plan}", group.namespace, group.name)
}

impl ClusterView {
    /// Whether a place is held (or waits) for the replacement of the pod
    /// `uid`: it is being moved by a plan already.
    pub fn is_being_moved(&self, uid: &str) -> bool {
        // Keys are `defrag/<group>/<moved pod UID>` (a gang's own places
        // end with a member's hold key, never a UID).
        let tail = format!("/{uid}");
        !uid.is_empty() && self.destinations.by_key.keys().any(|k| k.ends_with(&tail))
    }
}
