//! Everything the engine needs to know about one pod: its GPU request, the
//! GPUs it accepts and the policies that place it.

use crate::hami::keys;

use super::annotations::Annotations;
use super::numa::NumaRequest;
use super::numa_score::NumaScoring;
use super::policy::{GpuPolicy, NodePolicy, ScoringWeights, UnknownPolicy};
use super::request::{PodRequest, RequestError};
use super::selection::{Selection, SelectionError};

/// A pod, ready for placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    pub request: PodRequest,
    pub selection: Selection,
    pub node_policy: NodePolicy,
    pub gpu_policy: GpuPolicy,
    /// QoS class and CPU and memory by container (set at the edge from the
    /// pod's spec): what NUMA alignment needs.
    pub numa: NumaRequest,
    /// How nodes are ranked by their NUMA zones (config `scheduler.numa`).
    pub numa_scoring: NumaScoring,
    /// The device score's weights (`hami.io/device-scoring-weights`).
    pub scoring_weights: ScoringWeights,
    /// A plan per other kind the pod asks for (`PodRequest::also`), each
    /// with that kind's selection: fitted on the same node after this one.
    pub also: Vec<PodPlan>,
    /// Whether a pod taking whole devices prefers nodes by their links
    /// (`devices::NodePreference::Tenants`): the pod's annotation, else the
    /// section's `topologyAware` (set at the edge from the config); `None`
    /// when neither says. Beside the selection, not in it: the fit reads
    /// the selection for every device, and this only ranks nodes.
    pub links: Option<bool>,
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
    #[error("annotation hami.io/device-scoring-weights: {0}")]
    Weights(String),
}

/// The policies of a pod whose annotations name none (config `scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultPolicies {
    pub node: NodePolicy,
    pub gpu: GpuPolicy,
}

impl PodPlan {
    /// The pod's class on the devices of a kind with tenancy rules (the
    /// first of its kinds with one; `super::tenancy`).
    pub fn tenancy(&self) -> super::tenancy::Tenancy {
        std::iter::once(&self.selection)
            .chain(self.also.iter().map(|p| &p.selection))
            .map(|s| s.tenancy)
            .find(|t| !t.is_none())
            .unwrap_or_default()
    }
    /// A plan from a pod's request (read already) and its annotations: the
    /// selection and the policy overrides.
    pub fn from_parts(
        request: PodRequest,
        annotations: &impl Annotations,
        defaults: DefaultPolicies,
    ) -> Result<Self, PlanError> {
        let also = request
            .also
            .iter()
            .map(|r| PodPlan::from_parts(r.clone(), annotations, defaults))
            .collect::<Result<_, _>>()?;
        Ok(PodPlan {
            links: Selection::links_of(request.device_kind, annotations)?,
            selection: Selection::from_annotations(request.device_kind, annotations)?,
            request,
            also,
            node_policy: policy_override(annotations, keys::NODE_SCHEDULER_POLICY, defaults.node)?,
            gpu_policy: policy_override(annotations, keys::GPU_SCHEDULER_POLICY, defaults.gpu)?,
            numa: NumaRequest::default(),
            numa_scoring: NumaScoring::default(),
            scoring_weights: match annotations.annotation(keys::DEVICE_SCORING_WEIGHTS) {
                None => ScoringWeights::default(),
                Some(v) => v.parse().map_err(PlanError::Weights)?,
            },
        })
    }

    /// A plan with default policies and no selection (tests, benchmarks).
    pub fn new(request: PodRequest, node_policy: NodePolicy, gpu_policy: GpuPolicy) -> Self {
        PodPlan {
            selection: Selection {
                kind: request.device_kind,
                rules: super::selection::KindRules::of(request.device_kind),
                ..Selection::default()
            },
            request,
            node_policy,
            gpu_policy,
            numa: NumaRequest::default(),
            numa_scoring: NumaScoring::default(),
            scoring_weights: ScoringWeights::default(),
            also: Vec::new(),
            links: None,
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

/// A pod of one container that takes one whole GPU (tests).
#[cfg(test)]
pub(crate) fn whole_gpu_plan(node_policy: NodePolicy) -> PodPlan {
    use super::request::{ContainerRequest, GpuRequest, Memory};
    PodPlan::new(
        PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers: vec![ContainerRequest {
                name: "c".into(),
                kind: super::ContainerKind::App,
                gpu: Some(GpuRequest {
                    count: 1,
                    memory: Memory::Percent(100),
                    cores: 100,
                }),
            }],
        },
        node_policy,
        GpuPolicy::Spread,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const DEFAULTS: DefaultPolicies = DefaultPolicies {
        node: NodePolicy::Binpack,
        gpu: GpuPolicy::Spread,
    };

    fn plan(annotations: &[(&str, &str)]) -> Result<PodPlan, PlanError> {
        let annotations: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PodPlan::from_parts(PodRequest::default(), &annotations, DEFAULTS)
    }

    #[test]
    fn overrides_and_defaults() {
        let p = plan(&[]).unwrap();
        assert_eq!(
            (p.node_policy, p.gpu_policy),
            (NodePolicy::Binpack, GpuPolicy::Spread)
        );
        let p = plan(&[
            (keys::NODE_SCHEDULER_POLICY, "spread"),
            (keys::GPU_SCHEDULER_POLICY, "topology-aware"),
        ])
        .unwrap();
        assert_eq!(
            (p.node_policy, p.gpu_policy),
            (NodePolicy::Spread, GpuPolicy::TopologyAware)
        );
    }

    #[test]
    fn unknown_policy_is_an_error_not_a_default() {
        let e = plan(&[(keys::GPU_SCHEDULER_POLICY, "fastest")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "annotation hami.io/gpu-scheduler-policy: unknown GPU policy \"fastest\": allowed binpack, spread, topology-aware, mutex, or a comma chain of binpack, spread, numa, mutex, topology-aware (e.g. binpack,numa)"
        );
    }
}
