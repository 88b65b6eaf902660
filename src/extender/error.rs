//! Why an extender call could not be answered as asked. Rendered into the
//! answer's `Error` field (filter, bind) or the log (prioritize, preempt,
//! whose answers have none) only at the edge.

use crate::engine::PlanError;

use super::wire::WireError;
use crate::bind::BindFailure;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ExtenderError {
    /// The body is not what the verb expects.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The view may not be placed from: not listed yet, relisting after
    /// lost events, or the API server silent (see `cluster::freshness`).
    #[error("gpugate: {0}; not placing from it")]
    Stale(#[from] crate::cluster::freshness::Stale),
    /// The pod's GPU request or annotations cannot be read.
    #[error("pod {pod}: {source}")]
    Plan { pod: String, source: PlanError },
    /// Standalone bind of a pod no `/filter` call carried.
    #[error(
        "pod {pod} (uid {uid}): not seen in a filter call; gpugate binds only pods it filtered"
    )]
    NotFiltered { pod: String, uid: String },
    /// The UID kube-scheduler binds belongs to another pod.
    #[error("pod {pod}: uid {uid} belongs to pod {owner}")]
    UidMismatch {
        pod: String,
        uid: String,
        owner: String,
    },
    /// The bind did not happen; the failure says what and why.
    #[error("{}", .0.message)]
    Bind(BindFailure),
    /// The bind's own task ended without an answer.
    #[error("bind task failed: {0}")]
    BindTask(String),
}
