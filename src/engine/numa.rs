//! A node's NUMA layout as the kubelet's Topology Manager sees it, read
//! from its NodeResourceTopology object at the edge
//! (`crate::cluster::node_topology`): the policy and scope, and per NUMA
//! zone the CPUs and memory still available.
//!
//! It also reads what a pod asks of a zone ([`NumaRequest`]): whether the
//! kubelet aligns it at all (QoS class Guaranteed) and each container's CPU
//! and memory.
//!
//! This module only holds the model; placement does not use it yet
//! (issue 14 builds the alignment rule on it).

use super::quantity::{parse_milli, parse_whole};
use super::request::ContainerSpec;

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

/// CPU and memory of one container.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuMemory {
    pub cpu_milli: u64,
    pub memory_bytes: u64,
}

/// What a pod asks of NUMA zones: whether its QoS class is Guaranteed (the
/// kubelet's Topology Manager aligns only such pods' CPUs and memory) and,
/// by container in the order of [`super::request::PodRequest`] (init
/// containers, then app containers), its CPU and memory limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaRequest {
    pub guaranteed: bool,
    pub containers: Vec<CpuMemory>,
}

impl NumaRequest {
    /// Kubernetes' QoS rule (every container, init containers included,
    /// has CPU and memory limits, and requests equal to them; an absent
    /// request defaults to the limit), and each container's limits. A
    /// quantity that cannot be read makes the pod not Guaranteed.
    pub fn from_containers<'c, C: ContainerSpec + 'c>(
        init: impl IntoIterator<Item = &'c C>,
        app: impl IntoIterator<Item = &'c C>,
    ) -> Self {
        let mut guaranteed = true;
        let mut containers = Vec::new();
        for c in init.into_iter().chain(app) {
            let amount = |resource: &str, parse: fn(&str) -> Result<u64, _>| {
                let limit = parse(c.limit(resource)?).ok()?;
                match c.request(resource).map(parse) {
                    None => Some(limit),
                    Some(Ok(request)) if request == limit => Some(limit),
                    Some(_) => None,
                }
            };
            let cpu = amount("cpu", parse_milli);
            let memory = amount("memory", parse_whole);
            guaranteed &= cpu.is_some() && memory.is_some();
            containers.push(CpuMemory {
                cpu_milli: cpu.unwrap_or(0),
                memory_bytes: memory.unwrap_or(0),
            });
        }
        NumaRequest {
            guaranteed: guaranteed && !containers.is_empty(),
            containers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A container of (resource, limit) and (resource, request) pairs.
    struct C {
        limits: BTreeMap<&'static str, &'static str>,
        requests: BTreeMap<&'static str, &'static str>,
    }

    impl ContainerSpec for C {
        fn name(&self) -> &str {
            "c"
        }
        fn restart_policy(&self) -> Option<&str> {
            None
        }
        fn limit(&self, r: &str) -> Option<&str> {
            self.limits.get(r).copied()
        }
        fn request(&self, r: &str) -> Option<&str> {
            self.requests.get(r).copied()
        }
    }

    fn c(limits: &[(&'static str, &'static str)], requests: &[(&'static str, &'static str)]) -> C {
        C {
            limits: limits.iter().copied().collect(),
            requests: requests.iter().copied().collect(),
        }
    }

    fn qos(init: &[C], app: &[C]) -> NumaRequest {
        NumaRequest::from_containers(init, app)
    }

    #[test]
    fn guaranteed_as_kubernetes_decides_it() {
        let whole = c(&[("cpu", "8"), ("memory", "16Gi")], &[]);
        let r = qos(&[], std::slice::from_ref(&whole));
        assert!(r.guaranteed);
        assert_eq!(
            r.containers,
            [CpuMemory {
                cpu_milli: 8000,
                memory_bytes: 16 << 30
            }]
        );
        // Requests equal to the limits, however written.
        let same = c(
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1000m"), ("memory", "1073741824")],
        );
        assert!(qos(&[], &[same]).guaranteed);
        // Burstable: a request below its limit, or a limit missing.
        let burstable = c(&[("cpu", "2"), ("memory", "1Gi")], &[("cpu", "1")]);
        assert!(!qos(&[], &[burstable]).guaranteed);
        let no_memory = c(&[("cpu", "2")], &[]);
        assert!(!qos(&[], &[no_memory]).guaranteed);
        // Init containers count too.
        let init = c(&[("cpu", "1")], &[("cpu", "1")]);
        let r = qos(&[init], &[c(&[("cpu", "8"), ("memory", "16Gi")], &[])]);
        assert!(!r.guaranteed);
        assert_eq!(r.containers.len(), 2);
        // BestEffort, and no containers at all.
        assert!(!qos(&[], &[c(&[], &[])]).guaranteed);
        assert!(!qos(&[], &[]).guaranteed);
        // An unreadable quantity is not Guaranteed.
        assert!(!qos(&[], &[c(&[("cpu", "lots"), ("memory", "1Gi")], &[])]).guaranteed);
    }

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
