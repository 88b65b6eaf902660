//! Cluster snapshots: multi-document YAML (or JSON) files of real Kubernetes
//! `Node`, `Pod`, `Namespace` and `ResourceQuota` objects, as `kubectl get
//! nodes,pods,namespaces,resourcequotas -A -o yaml` writes them (a `List` is
//! unpacked). Used by `gpugate simulate` and by `serve --cluster`
//! (standalone mode).

use std::path::Path;

use k8s_openapi::api::core::v1::{Namespace, Node as K8sNode, Pod, ResourceQuota};
use serde::Deserialize;
use serde_json::Value;

use crate::engine::ClusterState;

use super::convert::pod_name;
use super::view::ClusterView;

/// Objects read from a file, in file order.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<K8sNode>,
    pub pods: Vec<Pod>,
    pub namespaces: Vec<Namespace>,
    pub quotas: Vec<ResourceQuota>,
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
            "Namespace" => self
                .namespaces
                .push(serde_json::from_value(value).map_err(|e| format!("Namespace: {e}"))?),
            "ResourceQuota" => self
                .quotas
                .push(serde_json::from_value(value).map_err(|e| format!("ResourceQuota: {e}"))?),
            "List" | "NodeList" | "PodList" | "NamespaceList" | "ResourceQuotaList" => {
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
            "" => {
                return Err(
                    "object without kind: allowed Node, Pod, Namespace, ResourceQuota, List"
                        .to_string(),
                );
            }
            other => {
                return Err(format!(
                    "kind {other} is not supported: allowed Node, Pod, Namespace, ResourceQuota, List"
                ));
            }
        }
        Ok(())
    }

    /// The cluster view: every node (registered or not), the allocation of
    /// every running pod that holds GPUs, namespaces and quotas; with what
    /// could not be counted.
    pub fn to_view(&self) -> (ClusterView, StateReport) {
        let mut view = ClusterView::new();
        let mut report = StateReport::default();
        for ns in &self.namespaces {
            view.upsert_namespace(ns);
        }
        for q in &self.quotas {
            view.upsert_quota(q);
        }
        for node in &self.nodes {
            report.unregistered_nodes.extend(view.upsert_node(node));
        }
        for (i, pod) in self.pods.iter().enumerate() {
            let key = snapshot_pod_key(pod, "cluster", i);
            if view.held_allocation(&key).is_some() {
                report.unaccounted_pods.push(format!(
                    "pod {}: uid {key} appears twice; only the first counts",
                    pod_name(pod)
                ));
            } else if let Some(problem) = view.upsert_pod(&key, pod) {
                report.unaccounted_pods.push(problem);
            }
        }
        (view, report)
    }

    /// The engine's state alone (see [`Snapshot::to_view`]).
    pub fn to_state(&self) -> (ClusterState, StateReport) {
        let (view, report) = self.to_view();
        (view.into_state(), report)
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
