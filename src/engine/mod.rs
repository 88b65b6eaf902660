//! The placement engine: pure, synchronous and deterministic. It never
//! performs I/O; callers convert Kubernetes objects into its types at the
//! edge (`crate::cluster`) and act on its answers.
//!
//! - [`request`] reads a container's GPU request;
//! - [`lifecycle`] says which containers run together (sidecars included);
//! - [`plan`] gathers a pod's request, GPU selection and policies;
//! - [`fit`] checks GPUs and chooses them under the GPU policy;
//! - [`state`] holds nodes and allocations and answers for every node.

pub mod align;
pub mod allocation;
pub mod annotations;
pub mod chain;
pub mod checks;
pub mod core_masks;
pub mod defrag;
pub mod device;
pub mod fit;
pub mod gang;
pub mod glob;
pub mod grouping;
pub mod joint;
pub mod lifecycle;
pub mod node_preference;
pub mod numa;
pub mod numa_score;
pub mod plan;
pub mod policy;
pub mod profiles;
pub mod quantity;
pub mod quota;
pub mod reason;
pub mod request;
pub mod resources;
pub mod selection;
pub mod size_tables;
pub mod state;
pub mod templates;
pub mod tenancy;
pub mod topology;

pub use allocation::{Allocation, DeviceGrant};
pub use device::{Gpu, MigInstance, Node, Usage};
pub use lifecycle::{ContainerKind, pod_peak};
pub use plan::{DefaultPolicies, PlanError, PodPlan};
pub use policy::{GpuPolicy, NodePolicy};
pub use quota::{
    CoveringQuota, KindAmounts, NamespaceQuota, PodQuota, QuotaAmount, QuotaExceeded, QuotaLimits,
    QuotaScope, ScopeFacts, ScopeName, ScopeOp, ScopeRequirement,
};
pub use reason::{Reason, Rejection};
pub use request::{GpuRequest, Memory, PodRequest};
pub use state::{ApplyError, ClusterState, Evaluation, FeasibleNode};
