//! Gang groups in the view: the unfinished members of each group (trimmed
//! copies of their pods), and the capacity held for the members of a group
//! being placed, as holds in the engine's state (apart from the pods'
//! allocations) so that other pods see it as used.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::convert::{membership, pod_finished, pod_namespace};
use crate::engine::gang::{GangKey, PodGroupSpec, PodGroups, group_key};

use super::served::Served;
use crate::engine::{Allocation, ApplyError, ClusterState};

/// Capacity held for one member: its allocation, its group and when the
/// hold ends (Unix ms), as taken out of the state.
pub type GangHold = (String, Allocation, i64);

#[derive(Debug, Clone, Default)]
pub struct Gangs {
    /// Unfinished pods of gang groups, by group and UID.
    members: HashMap<GangKey, BTreeMap<String, Pod>>,
    member_of: HashMap<String, GangKey>,
    /// Capacity held for members of groups being placed, by member UID:
    /// the group and when the hold ends (Unix ms).
    holds: HashMap<String, (GangKey, i64)>,
    /// PodGroups (`scheduling.x-k8s.io/v1alpha1`) by namespace and name.
    pod_groups: Served<GangKey, PodGroupSpec>,
}

impl Gangs {
    /// Keeps the pod as a member of its gang group while it is unfinished
    /// and labelled with a readable group (see [`crate::engine::gang`]).
    pub fn track(&mut self, key: &str, pod: &Pod) {
        let finished = pod_finished(pod);
        let group = group_key(pod_namespace(pod), membership(pod));
        match group.filter(|_| !finished) {
            Some(group) => {
                if self.member_of.get(key) != Some(&group) {
                    self.untrack(key);
                }
                let mut slim = pod.clone();
                slim.metadata.managed_fields = None;
                slim.status = None;
                self.member_of.insert(key.to_string(), group.clone());
                self.members
                    .entry(group)
                    .or_default()
                    .insert(key.to_string(), slim);
            }
            None => self.untrack(key),
        }
    }

    pub fn untrack(&mut self, key: &str) {
        if let Some(group) = self.member_of.remove(key)
            && let Some(members) = self.members.get_mut(&group)
        {
            members.remove(key);
            if members.is_empty() {
                self.members.remove(&group);
            }
        }
    }

    /// What is known of PodGroups.
    pub fn pod_groups(&self) -> PodGroups<'_> {
        match self.pod_groups.served() {
            None => PodGroups::NotServed,
            Some(_) if !self.pod_groups.is_listed() => PodGroups::Listing,
            Some(groups) => PodGroups::Listed(groups),
        }
    }

    /// The PodGroups as they come and go (see [`Served`]).
    pub fn pod_groups_mut(&mut self) -> &mut Served<GangKey, PodGroupSpec> {
        &mut self.pod_groups
    }

    /// The PodGroups known, listed or not.
    pub fn pod_group_entries(&self) -> impl Iterator<Item = &GangKey> {
        self.pod_groups.keys()
    }

    /// The group of member `key`.
    pub fn group_of(&self, key: &str) -> Option<&GangKey> {
        self.member_of.get(key)
    }

    /// UIDs of every member tracked.
    pub fn tracked(&self) -> impl Iterator<Item = &str> {
        self.member_of.keys().map(String::as_str)
    }

    /// The known unfinished members of a group, by UID.
    pub fn members(&self, group: &GangKey) -> Option<&BTreeMap<String, Pod>> {
        self.members.get(group)
    }

    /// Holds capacity in `state` for a member that is not bound yet, until
    /// `until_ms` (Unix ms).
    pub fn hold(
        &mut self,
        state: &mut ClusterState,
        key: &str,
        group: &GangKey,
        allocation: Allocation,
        until_ms: i64,
    ) -> Result<(), ApplyError> {
        self.release(state, key);
        state.apply_hold(key, allocation)?;
        self.holds
            .insert(key.to_string(), (group.clone(), until_ms));
        Ok(())
    }

    /// Drops the capacity held for a member.
    pub fn release(&mut self, state: &mut ClusterState, key: &str) {
        if self.holds.remove(key).is_some() {
            state.remove_hold(key);
        }
    }

    /// The holds of `group`, taken out of `state`.
    pub fn take(&mut self, state: &mut ClusterState, group: &GangKey) -> Vec<GangHold> {
        let keys: Vec<(String, i64)> = self
            .holds
            .iter()
            .filter(|(_, (g, _))| g == group)
            .map(|(k, (_, until))| (k.clone(), *until))
            .collect();
        let mut out = Vec::new();
        for (k, until) in keys {
            self.holds.remove(&k);
            if let Some(a) = state.remove_hold(&k) {
                out.push((k, a, until));
            }
        }
        out
    }

    /// `state` without the holds of `group`: what its members are judged on.
    pub fn state_without(&self, state: &ClusterState, group: &GangKey) -> ClusterState {
        let mut state = state.clone();
        for (k, (g, _)) in &self.holds {
            if g == group {
                state.remove_hold(k);
            }
        }
        state
    }

    /// Whether `group` has holds.
    pub fn has_holds(&self, group: &GangKey) -> bool {
        self.holds.values().any(|(g, _)| g == group)
    }

    /// Drops holds that ended at or before `now_ms`; returns how many.
    pub fn expire(&mut self, state: &mut ClusterState, now_ms: i64) -> usize {
        let ended: Vec<String> = self
            .holds
            .iter()
            .filter(|(_, (_, until))| *until <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &ended {
            self.release(state, k);
        }
        ended.len()
    }

    /// Number of members capacity is held for.
    pub fn hold_count(&self) -> usize {
        self.holds.len()
    }
}
