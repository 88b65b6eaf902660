//! The pod being placed, read once per call: its plan (request,
//! selection, policies), priority, whether it may preempt, and its gang
//! group. Every verb (`/filter`, `/prioritize`, `/bind`, `/preempt`),
//! gpugate's own preemption, `simulate` and `explain` build one from the
//! Pod and hand it down, so no layer reads the pod's resources or labels
//! again.

use std::cell::Cell;

use k8s_openapi::api::core::v1::Pod;

use crate::cluster::convert::{membership, pod_plan};
use crate::cluster::{ClusterView, pod_name, pod_namespace};
use crate::config::Config;
use crate::engine::gang::{GangLabel, PodGroups, gang_label, pod_group_unserved};
use crate::engine::{PlanError, PodPlan};

thread_local! {
    /// Plans made on this thread (tests count them per call).
    static PLANS: Cell<u64> = const { Cell::new(0) };
}

/// How many pods' plans this thread has made: a test reads it before and
/// after one call to see how often the call planned.
pub fn plans_made_on_this_thread() -> u64 {
    PLANS.with(Cell::get)
}

/// A pod's plan, counted (see [`plans_made_on_this_thread`]). The one way
/// placement plans a pod.
pub(crate) fn plan_of(pod: &Pod, config: &Config) -> Result<PodPlan, PlanError> {
    PLANS.with(|n| n.set(n.get() + 1));
    pod_plan(pod, config)
}

/// The pod being placed.
#[derive(Debug, Clone)]
pub struct PodToPlace {
    pod: Pod,
    who: String,
    pub plan: PodPlan,
    /// `spec.priority`, 0 when unset.
    pub priority: i32,
    /// It may evict lower-priority pods (`preemptionPolicy` is not
    /// `Never`).
    pub preempts: bool,
    /// What ResourceQuota scopes see of it: which of its namespace's
    /// quotas cover it.
    pub scope: crate::engine::ScopeFacts,
    /// Its gang group, or why its group labels cannot be read.
    gang: Result<Option<GangLabel>, String>,
    /// How it names a PodGroup (`label scheduling.x-k8s.io/pod-group=g`,
    /// `spec.schedulingGroup.podGroupName=g`) while the API server does
    /// not serve PodGroups (it is then placed on its own).
    unserved_group: Option<String>,
}

impl PodToPlace {
    /// Reads `pod` against the config, and its group against the view's
    /// PodGroups.
    pub fn read(pod: Pod, config: &Config, view: &ClusterView) -> Result<Self, PlanError> {
        Self::with_groups(pod, config, view.pod_groups())
    }

    /// Reads `pod` against the config and the PodGroups known.
    pub fn with_groups(
        pod: Pod,
        config: &Config,
        groups: PodGroups<'_>,
    ) -> Result<Self, PlanError> {
        let plan = plan_of(&pod, config)?;
        let spec = pod.spec.as_ref();
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        let preempts = spec.and_then(|s| s.preemption_policy.as_deref()) != Some("Never");
        let names = membership(&pod);
        let gang = gang_label(pod_namespace(&pod), names, groups);
        let unserved_group = pod_group_unserved(names, groups);
        let scope = crate::cluster::convert::pod_scope_facts(&pod);
        Ok(PodToPlace {
            who: pod_name(&pod),
            pod,
            plan,
            priority,
            preempts,
            scope,
            gang,
            unserved_group,
        })
    }

    /// The Pod as it was read.
    pub fn pod(&self) -> &Pod {
        &self.pod
    }

    /// Its UID; empty when the object has none (a snapshot's pod).
    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        pod_namespace(&self.pod)
    }

    /// `namespace/name`, for messages.
    pub fn who(&self) -> &str {
        &self.who
    }

    /// Its gang group (`None`: in no group), or why its group labels
    /// cannot be read.
    pub fn gang(&self) -> Result<Option<&GangLabel>, &str> {
        match &self.gang {
            Ok(label) => Ok(label.as_ref()),
            Err(e) => Err(e),
        }
    }

    /// How it names a PodGroup while PodGroups are not served.
    pub fn unserved_group(&self) -> Option<&str> {
        self.unserved_group.as_deref()
    }

    /// Whether it asks for any GPU.
    pub fn has_gpus(&self) -> bool {
        self.plan.request.has_gpus()
    }
}
