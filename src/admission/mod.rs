//! The admission half of gpugate: the AdmissionReview envelope and the
//! mutating and validating webhooks, and the namespace policy gateway.

pub mod answer;
#[doc(hidden)]
pub mod fuzzing;
pub mod handler;
pub mod lean;
pub mod limit_escapes;
pub mod metrics;
pub mod mutate;
pub mod patch;
pub mod pod;
pub mod policy;
pub mod review;
pub mod validate;

use std::fmt;

/// Why a pod was refused: a stable code (for metrics) and a message for the
/// pod's author.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub reason: DenyReason,
    pub message: String,
}

impl Denial {
    pub fn new(reason: DenyReason, message: impl Into<String>) -> Self {
        Denial {
            reason,
            message: message.into(),
        }
    }
}

/// Stable denial codes, the `reason` label of `gpugate_admission_denials_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyReason {
    NoContainers,
    InvalidRequest,
    InvalidAnnotation,
    UnknownPolicy,
    NodeName,
    Privileged,
    ForgedAllocation,
    LimitsRequestsMismatch,
    PolicyLimit,
    QuotaExceeded,
    /// An environment variable that bypasses or widens the vGPU limits.
    LimitEscape,
}

impl DenyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::NoContainers => "no_containers",
            DenyReason::InvalidRequest => "invalid_request",
            DenyReason::InvalidAnnotation => "invalid_annotation",
            DenyReason::UnknownPolicy => "unknown_policy",
            DenyReason::NodeName => "node_name",
            DenyReason::Privileged => "privileged",
            DenyReason::ForgedAllocation => "forged_allocation",
            DenyReason::LimitsRequestsMismatch => "limits_requests_mismatch",
            DenyReason::PolicyLimit => "policy_limit",
            DenyReason::QuotaExceeded => "quota_exceeded",
            DenyReason::LimitEscape => "limit_escape",
        }
    }

    /// The code for a pod that cannot be planned.
    pub fn of_plan_error(e: &crate::engine::PlanError) -> Self {
        match e {
            crate::engine::PlanError::Request(_) => DenyReason::InvalidRequest,
            crate::engine::PlanError::Selection(_) => DenyReason::InvalidAnnotation,
            crate::engine::PlanError::Policy { .. } => DenyReason::UnknownPolicy,
            crate::engine::PlanError::Weights(_) => DenyReason::InvalidAnnotation,
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
