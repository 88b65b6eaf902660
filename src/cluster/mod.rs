//! The edge between Kubernetes objects and the engine: reading nodes'
//! inventories and pods' allocations from HAMi's annotations, and loading
//! cluster snapshots from files.

pub mod convert;
pub mod snapshot;

pub use convert::{NodeError, PodAllocationError, node_from_k8s, pod_allocation, pod_name};
pub use snapshot::{Snapshot, SnapshotError, StateReport};
