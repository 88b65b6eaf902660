//! NodeResourceTopology (`topology.node.k8s.io`, v1alpha2 and the older
//! v1alpha1), exported per node by node-feature-discovery's topology
//! updater or the resource topology exporter: read into the engine's
//! [`NodeTopology`].
//!
//! - The policy and scope come from v1alpha2's `attributes`
//!   (`topologyManagerPolicy`, `topologyManagerScope`), else from
//!   `topologyPolicies` (v1alpha1, e.g. `SingleNUMANodeContainerLevel`).
//! - Each zone of type `Node` named `node-<id>` is a NUMA node; its `cpu`
//!   and `memory` resources give what is `available` (else `allocatable`).
//!
//! Objects are read leniently (a field of the wrong type is a problem
//! reported for that object, never a broken watch).

use std::borrow::Cow;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use crate::engine::numa::{CpuMemory, NodeTopology, NumaZone, TopologyPolicy, TopologyScope};
use crate::engine::quantity::{parse_milli, parse_whole};

pub const GROUP: &str = "topology.node.k8s.io";
pub const PLURAL: &str = "noderesourcetopologies";

/// A NodeResourceTopology of either version, as watched.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NrtObject {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub body: serde_json::Map<String, Value>,
}

macro_rules! nrt_version {
    ($name:ident, $version:literal) => {
        #[doc = concat!("NodeResourceTopology `", $version, "`.")]
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub NrtObject);

        impl kube::Resource for $name {
            type DynamicType = ();
            type Scope = ClusterResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                "NodeResourceTopology".into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                PLURAL.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

nrt_version!(NrtV1Alpha2, "v1alpha2");
nrt_version!(NrtV1Alpha1, "v1alpha1");

/// The versions gpugate reads, newest first.
pub const VERSIONS: [&str; 2] = ["v1alpha2", "v1alpha1"];

impl NrtObject {
    /// The node it describes (the object's name).
    pub fn node(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }

    /// When the exporter last wrote the zones: the newest time of the
    /// `managedFields` entries that own `zones` (of any entry when none
    /// does); `None` without `managedFields` (a snapshot made with
    /// `kubectl get`). Writes by others (a label added by hand) do not
    /// count.
    pub fn written(&self) -> Option<jiff::Timestamp> {
        let entries = self.metadata.managed_fields.as_deref().unwrap_or_default();
        let newest = |owning_zones: bool| {
            entries
                .iter()
                .filter(|f| {
                    !owning_zones
                        || f.fields_v1
                            .as_ref()
                            .is_some_and(|v| v.0.get("f:zones").is_some())
                })
                .filter_map(|f| f.time.as_ref().map(|t| t.0))
                .max()
        };
        newest(true).or_else(|| newest(false))
    }

    /// The node's topology, and what could not be read.
    pub fn topology(&self) -> (NodeTopology, Vec<String>) {
        let mut problems = Vec::new();
        let (mut policy, mut scope) = self
            .body
            .get("topologyPolicies")
            .and_then(Value::as_array)
            .and_then(|p| p.first())
            .and_then(Value::as_str)
            .map(legacy_policy)
            .unwrap_or_default();
        for attr in self.attributes() {
            match attr {
                ("topologyManagerPolicy", v) => policy = TopologyPolicy::from_flag(v),
                ("topologyManagerScope", v) => scope = TopologyScope::from_flag(v),
                _ => {}
            }
        }
        let mut zones = Vec::new();
        for zone in self
            .body
            .get("zones")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = zone.get("type").and_then(Value::as_str).unwrap_or("");
            if !kind.eq_ignore_ascii_case("node") {
                continue;
            }
            let name = zone.get("name").and_then(Value::as_str).unwrap_or("");
            let Some(id) = name
                .strip_prefix("node-")
                .and_then(|n| n.parse::<i32>().ok())
            else {
                problems.push(format!("zone {name:?}: not named node-<NUMA id>"));
                continue;
            };
            // (available, allocatable), each when given.
            let mut available = (None, None);
            let mut allocatable = (None, None);
            for r in zone
                .get("resources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let rname = r.get("name").and_then(Value::as_str).unwrap_or("");
                for (field, into) in [
                    ("available", &mut available),
                    ("allocatable", &mut allocatable),
                ] {
                    let Some(amount) = r.get(field).map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    }) else {
                        continue;
                    };
                    // Unreadable: nothing available (never more than
                    // there is), and no limit on what the zone could hold
                    // (so `restricted` aligns the container).
                    let unreadable = if field == "available" { 0 } else { u64::MAX };
                    let parsed = match rname {
                        "cpu" => parse_milli(&amount).map(|v| into.0 = Some(v)),
                        "memory" => parse_whole(&amount).map(|v| into.1 = Some(v)),
                        _ => Ok(()),
                    };
                    if let Err(e) = parsed {
                        match rname {
                            "cpu" => into.0 = Some(unreadable),
                            _ => into.1 = Some(unreadable),
                        }
                        problems.push(format!("zone {name} resource {rname} {field}: {e}"));
                    }
                }
            }
            // A resource the zone does not report (an exporter told to
            // leave memory out, as without the memory manager) does not
            // constrain it.
            let amount = |(cpu, memory): (Option<u64>, Option<u64>)| CpuMemory {
                cpu_milli: cpu.unwrap_or(u64::MAX),
                memory_bytes: memory.unwrap_or(u64::MAX),
            };
            // `available` missing: nothing is known to be assigned yet.
            let avail = amount((available.0.or(allocatable.0), available.1.or(allocatable.1)));
            let z = NumaZone {
                id,
                available: avail,
                allocatable: amount((allocatable.0.or(available.0), allocatable.1.or(available.1))),
            };
            zones.push(z);
        }
        zones.sort_by_key(|z| z.id);
        zones.dedup_by_key(|z| z.id);
        (
            NodeTopology {
                policy,
                scope,
                zones,
            },
            problems,
        )
    }

    /// v1alpha2's top-level `attributes`: (name, value).
    fn attributes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.body
            .get("attributes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|a| Some((a.get("name")?.as_str()?, a.get("value")?.as_str()?)))
    }
}

/// v1alpha1's `topologyPolicies` value.
fn legacy_policy(value: &str) -> (TopologyPolicy, TopologyScope) {
    let scope = if value.ends_with("PodLevel") {
        TopologyScope::Pod
    } else {
        TopologyScope::Container
    };
    let policy = if value.starts_with("SingleNUMANode") {
        TopologyPolicy::SingleNumaNode
    } else if value.starts_with("Restricted") {
        TopologyPolicy::Restricted
    } else if value.starts_with("BestEffort") {
        TopologyPolicy::BestEffort
    } else {
        TopologyPolicy::None
    };
    (policy, scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(yaml: &str) -> NrtObject {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    /// As node-feature-discovery's topology updater writes it (v1alpha2).
    const V1ALPHA2: &str = r#"
apiVersion: topology.node.k8s.io/v1alpha2
kind: NodeResourceTopology
metadata:
  name: gpu-node-1
attributes:
  - {name: topologyManagerPolicy, value: single-numa-node}
  - {name: topologyManagerScope, value: pod}
  - {name: nodeTopologyPodsFingerprint, value: pfp0v001a0b1c2d3e4f5}
zones:
  - name: node-1
    type: Node
    costs: [{name: node-0, value: 20}, {name: node-1, value: 10}]
    resources:
      - {name: cpu, capacity: "32", allocatable: "30", available: "22500m"}
      - {name: memory, capacity: "135291392Ki", allocatable: 134217728Ki, available: "64Gi"}
      - {name: nvidia.com/gpu, capacity: "40", allocatable: "40", available: "40"}
  - name: node-0
    type: Node
    resources:
      - {name: cpu, capacity: 32, allocatable: 30, available: 8}
      - {name: memory, capacity: "128Gi", allocatable: "128Gi", available: "100Gi"}
"#;

    fn cm(cpu_milli: u64, memory_bytes: u64) -> CpuMemory {
        CpuMemory {
            cpu_milli,
            memory_bytes,
        }
    }

    #[test]
    fn v1alpha2_attributes_and_zones() {
        let (t, problems) = object(V1ALPHA2).topology();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(t.policy, TopologyPolicy::SingleNumaNode);
        assert_eq!(t.scope, TopologyScope::Pod);
        assert_eq!(
            t.zones,
            [
                NumaZone {
                    id: 0,
                    available: cm(8000, 100 << 30),
                    allocatable: cm(30_000, 128 << 30),
                },
                NumaZone {
                    id: 1,
                    available: cm(22500, 64 << 30),
                    allocatable: cm(30_000, 134217728 << 10),
                },
            ]
        );
    }

    #[test]
    fn v1alpha1_policies_and_problems() {
        let (t, problems) = object(
            r#"
apiVersion: topology.node.k8s.io/v1alpha1
kind: NodeResourceTopology
metadata: {name: old-node}
topologyPolicies: ["RestrictedPodLevel"]
zones:
  - name: node-0
    type: Node
    resources:
      - {name: cpu, capacity: "16", allocatable: "16", available: "lots"}
  - {name: socket-0, type: Socket}
  - {name: numa-a, type: Node}
"#,
        )
        .topology();
        assert_eq!(
            (t.policy, t.scope),
            (TopologyPolicy::Restricted, TopologyScope::Pod)
        );
        assert_eq!(t.zones.len(), 1);
        // Unreadable `available`: nothing; no memory reported: no limit.
        assert_eq!(t.zones[0].available.cpu_milli, 0);
        assert_eq!(t.zones[0].allocatable.cpu_milli, 16_000);
        assert_eq!(t.zones[0].available.memory_bytes, u64::MAX);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("resource cpu"), "{problems:?}");
        assert!(problems[1].contains("numa-a"), "{problems:?}");
        for (v, want) in [
            (
                "SingleNUMANodeContainerLevel",
                (TopologyPolicy::SingleNumaNode, TopologyScope::Container),
            ),
            (
                "BestEffortPodLevel",
                (TopologyPolicy::BestEffort, TopologyScope::Pod),
            ),
            ("None", (TopologyPolicy::None, TopologyScope::Container)),
        ] {
            assert_eq!(legacy_policy(v), want, "{v}");
        }
    }

    #[test]
    fn garbage_is_read_as_nothing() {
        let (t, _) = object("metadata: {name: x}\nzones: 7\nattributes: {a: 1}\n").topology();
        assert_eq!(t, NodeTopology::default());
    }
}
