//! Everything the engine needs to know about one pod: its GPU request, the
//! GPUs it accepts and the policies that place it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::config::Config;
use crate::hami::keys;

use super::annotations::Annotations;
use super::policy::{GpuPolicy, NodePolicy, UnknownPolicy};
use super::request::{PodRequest, RequestError};
use super::selection::{Selection, SelectionError};

/// A pod, ready for placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    pub request: PodRequest,
    pub selection: Selection,
    pub node_policy: NodePolicy,
    pub gpu_policy: GpuPolicy,
}

/// Why a pod cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Selection(#[from] SelectionError),
    #[error("annotation {annotation}: {source}")]
    Policy {
        annotation: &'static str,
        source: UnknownPolicy,
    },
}

impl PodPlan {
    /// Reads a pod's request, selection annotations and policy overrides.
    pub fn from_pod(pod: &Pod, config: &Config) -> Result<Self, PlanError> {
        let empty = BTreeMap::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        Self::from_parts(
            PodRequest::from_pod(pod, &config.nvidia)?,
            annotations,
            config,
        )
    }

    /// A plan from a pod's request (read already) and its annotations.
    pub fn from_parts(
        request: PodRequest,
        annotations: &impl Annotations,
        config: &Config,
    ) -> Result<Self, PlanError> {
        Ok(PodPlan {
            request,
            selection: Selection::from_annotations(annotations)?,
            node_policy: policy_override(
                annotations,
                keys::NODE_SCHEDULER_POLICY,
                config.scheduler.node_scheduler_policy,
            )?,
            gpu_policy: policy_override(
                annotations,
                keys::GPU_SCHEDULER_POLICY,
                config.scheduler.gpu_scheduler_policy,
            )?,
        })
    }

    /// A plan with default policies and no selection (tests, benchmarks).
    pub fn new(request: PodRequest, node_policy: NodePolicy, gpu_policy: GpuPolicy) -> Self {
        PodPlan {
            request,
            selection: Selection::default(),
            node_policy,
            gpu_policy,
        }
    }
}

fn policy_override<P>(
    annotations: &impl Annotations,
    key: &'static str,
    default: P,
) -> Result<P, PlanError>
where
    P: std::str::FromStr<Err = UnknownPolicy>,
{
    match annotations.annotation(key) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|source| PlanError::Policy {
            annotation: key,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn overrides_and_defaults() {
        let cfg = Config::default();
        let p = PodPlan::from_pod(&pod(&[]), &cfg).unwrap();
        assert_eq!(
            (p.node_policy, p.gpu_policy),
            (NodePolicy::Binpack, GpuPolicy::Spread)
        );
        let p = PodPlan::from_pod(
            &pod(&[
                (keys::NODE_SCHEDULER_POLICY, "spread"),
                (keys::GPU_SCHEDULER_POLICY, "topology-aware"),
            ]),
            &cfg,
        )
        .unwrap();
        assert_eq!(
            (p.node_policy, p.gpu_policy),
            (NodePolicy::Spread, GpuPolicy::TopologyAware)
        );
    }

    #[test]
    fn unknown_policy_is_an_error_not_a_default() {
        let e = PodPlan::from_pod(
            &pod(&[(keys::GPU_SCHEDULER_POLICY, "fastest")]),
            &Config::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "annotation hami.io/gpu-scheduler-policy: unknown GPU policy \"fastest\": allowed binpack, spread, topology-aware, mutex"
        );
    }
}
