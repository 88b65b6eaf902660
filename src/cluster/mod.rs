//! The edge between Kubernetes objects and the engine: reading nodes'
//! inventories and pods' allocations from HAMi's annotations, the cluster
//! view (nodes, allocation ledger, namespaces, quotas) and where it is fed
//! from: a snapshot file or the API server.

pub mod api;
pub mod client;
pub mod convert;
pub mod events;
pub mod freshness;
pub mod leader;
pub mod lock;
pub mod metrics;
pub mod node_topology;
pub mod pod_annotations;
pub mod pod_group;
pub mod read_once;
pub mod shared;
pub mod snapshot;
pub mod view;
pub mod watch;
pub mod webhook_scope;

pub use convert::{NodeError, node_from_k8s, pod_name, pod_namespace};
pub use pod_annotations::{PodAllocationError, pod_allocation};
pub use shared::SharedCluster;
pub use snapshot::{Snapshot, SnapshotError, StateReport};
pub use view::{ClusterView, ViewCounts};
