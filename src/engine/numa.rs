//! A node's NUMA layout as the kubelet's Topology Manager sees it, read
//! from its NodeResourceTopology object at the edge
//! (`crate::cluster::node_topology`): the policy and scope, and per NUMA
//! zone the CPUs and memory still available.
//!
//! This module only holds the model; placement does not use it yet
//! (issue 14 builds the alignment rule on it).

/// The kubelet's `--topology-manager-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopologyPolicy {
    /// No alignment (`none`), or a policy gpugate does not know.
    #[default]
    None,
    /// Prefers, never refuses (`best-effort`).
    BestEffort,
    /// Refuses what cannot get its preferred alignment (`restricted`).
    Restricted,
    /// Refuses what does not fit in one NUMA node (`single-numa-node`).
    SingleNumaNode,
}

/// The kubelet's `--topology-manager-scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopologyScope {
    /// Each container aligned on its own (the kubelet's default).
    #[default]
    Container,
    /// The pod's containers aligned together.
    Pod,
}

impl TopologyPolicy {
    /// The kubelet's flag value (`single-numa-node`), any letter case.
    pub fn from_flag(value: &str) -> Self {
        match value.trim().to_ascii_lowercase().as_str() {
            "best-effort" => TopologyPolicy::BestEffort,
            "restricted" => TopologyPolicy::Restricted,
            "single-numa-node" => TopologyPolicy::SingleNumaNode,
            _ => TopologyPolicy::None,
        }
    }

    /// Whether the kubelet refuses a pod whose resources cannot come from
    /// one NUMA node.
    pub fn refuses_across_zones(self) -> bool {
        matches!(
            self,
            TopologyPolicy::SingleNumaNode | TopologyPolicy::Restricted
        )
    }
}

impl TopologyScope {
    /// The kubelet's flag value (`container`, `pod`), any letter case.
    pub fn from_flag(value: &str) -> Self {
        if value.trim().eq_ignore_ascii_case("pod") {
            TopologyScope::Pod
        } else {
            TopologyScope::Container
        }
    }
}

/// One NUMA node of a node: what is still available there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumaZone {
    /// The NUMA id, as HAMi's register annotation gives it per GPU.
    pub id: i32,
    /// Available CPUs in millicores.
    pub cpu_milli: u64,
    /// Available memory in bytes.
    pub memory_bytes: u64,
}

/// A node's NUMA layout and availability.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeTopology {
    pub policy: TopologyPolicy,
    pub scope: TopologyScope,
    /// By NUMA id, ascending.
    pub zones: Vec<NumaZone>,
}

impl NodeTopology {
    pub fn zone(&self, id: i32) -> Option<&NumaZone> {
        self.zones.iter().find(|z| z.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_read_like_the_kubelets() {
        assert_eq!(
            TopologyPolicy::from_flag("single-numa-node"),
            TopologyPolicy::SingleNumaNode
        );
        assert_eq!(
            TopologyPolicy::from_flag(" Restricted "),
            TopologyPolicy::Restricted
        );
        assert_eq!(
            TopologyPolicy::from_flag("best-effort"),
            TopologyPolicy::BestEffort
        );
        assert_eq!(TopologyPolicy::from_flag("bogus"), TopologyPolicy::None);
        assert!(TopologyPolicy::Restricted.refuses_across_zones());
        assert!(!TopologyPolicy::BestEffort.refuses_across_zones());
        assert_eq!(TopologyScope::from_flag("pod"), TopologyScope::Pod);
        assert_eq!(TopologyScope::from_flag(""), TopologyScope::Container);
    }
}
