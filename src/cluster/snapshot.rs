//! Cluster snapshots: multi-document YAML (or JSON) files of real Kubernetes
//! `Node` and `Pod` objects, as `kubectl get nodes,pods -o yaml` writes them
//! (a `List` is unpacked). Used by `gpugate simulate` and by `serve
//! --cluster` (standalone mode).

use std::path::Path;

use k8s_openapi::api::core::v1::{Node as K8sNode, Pod};
use serde::Deserialize;
use serde_json::Value;

use crate::engine::ClusterState;

use super::convert::{node_from_k8s, pod_allocation, pod_name};

/// Nodes and pods read from a file, in file order.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<K8sNode>,
    pub pods: Vec<Pod>,
}

/// A snapshot file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}, document {document}: {problem}")]
    Document {
        origin: String,
        document: usize,
        problem: String,
    },
}

/// What did not make it into the engine's state, for a person to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateReport {
    /// Nodes without a readable GPU inventory (they reject every GPU pod),
    /// and nodes whose cordon list or pair scores could not be read.
    pub unregistered_nodes: Vec<String>,
    /// Pods whose allocation annotations cannot be read or name unknown
    /// nodes or GPUs: their usage is not counted.
    pub unaccounted_pods: Vec<String>,
}

impl Snapshot {
    pub fn load(path: &Path) -> Result<Self, SnapshotError> {
        let text = std::fs::read_to_string(path).map_err(|source| SnapshotError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, SnapshotError> {
        let mut out = Snapshot::default();
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let err = |problem: String| SnapshotError::Document {
                origin: origin.to_string(),
                document: i + 1,
                problem,
            };
            let value = Value::deserialize(doc).map_err(|e| err(e.to_string()))?;
            out.add(value, None).map_err(err)?;
        }
        Ok(out)
    }

    fn add(&mut self, mut value: Value, item_kind: Option<&str>) -> Result<(), String> {
        if value.is_null() {
            return Ok(());
        }
        let Some(obj) = value.as_object_mut() else {
            return Err("not a Kubernetes object".to_string());
        };
        // Items of a typed list (`NodeList`) may omit apiVersion and kind.
        if let Some(kind) = item_kind {
            obj.entry("kind").or_insert_with(|| Value::from(kind));
            obj.entry("apiVersion").or_insert_with(|| Value::from("v1"));
        }
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match kind.as_str() {
            "Node" => self
                .nodes
                .push(serde_json::from_value(value).map_err(|e| format!("Node: {e}"))?),
            "Pod" => self
                .pods
                .push(serde_json::from_value(value).map_err(|e| format!("Pod: {e}"))?),
            "List" | "NodeList" | "PodList" => {
                let element = kind.strip_suffix("List").filter(|k| !k.is_empty());
                let items = match obj.remove("items") {
                    Some(Value::Array(items)) => items,
                    Some(Value::Null) | None => Vec::new(),
                    Some(_) => return Err(format!("{kind}: items is not a list")),
                };
                for item in items {
                    self.add(item, element)?;
                }
            }
            "" => return Err("object without kind: allowed Node, Pod, List".to_string()),
            other => {
                return Err(format!(
                    "kind {other} is not supported: allowed Node, Pod, List"
                ));
            }
        }
        Ok(())
    }

    /// The engine's state: every registered node and the usage of every
    /// running pod that holds GPUs.
    pub fn to_state(&self) -> (ClusterState, StateReport) {
        let mut state = ClusterState::new();
        let mut report = StateReport::default();
        for node in &self.nodes {
            match node_from_k8s(node) {
                Ok((n, warnings)) => {
                    state.upsert_node(n);
                    report
                        .unregistered_nodes
                        .extend(warnings.iter().map(ToString::to_string));
                }
                Err(e) => {
                    // Known but without usable GPUs: every GPU pod is told
                    // "node unregistered" for it.
                    let name = node.metadata.name.clone().unwrap_or_default();
                    state.upsert_node(crate::engine::Node::new(name, Vec::new()));
                    report.unregistered_nodes.push(e.to_string());
                }
            }
        }
        for (i, pod) in self.pods.iter().enumerate() {
            match pod_allocation(pod) {
                Ok(Some(a)) => {
                    let key = snapshot_pod_key(pod, "cluster", i);
                    if state.allocation(&key).is_some() {
                        report.unaccounted_pods.push(format!(
                            "pod {}: uid {key} appears twice; only the first counts",
                            pod_name(pod)
                        ));
                    } else if let Err(e) = state.apply(&key, a) {
                        report
                            .unaccounted_pods
                            .push(format!("pod {}: {e}", pod_name(pod)));
                    }
                }
                Ok(None) => {}
                Err(e) => report.unaccounted_pods.push(e.to_string()),
            }
        }
        (state, report)
    }
}

/// The ledger key of a pod read from a file: its UID, or its place in the
/// file (`<file>#<n>`) when it has none, so that two pods without UIDs (or
/// with only `generateName`) never share one.
pub fn snapshot_pod_key(pod: &Pod, file: &str, index: usize) -> String {
    match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => format!("{file}#{}", index + 1),
    }
}
