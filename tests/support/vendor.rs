//! What the vendor backends' tests share: their fixture clusters
//! (`tests/fixtures/<vendor>/cluster.yaml`), a pod of one container, and
//! the index of a device a placement took. Each test file uses some of
//! them.
#![allow(dead_code)]

use std::path::Path;

use gpugate::cluster::Snapshot;
use gpugate::engine::Node;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The cluster of `tests/fixtures/<dir>/cluster.yaml`.
pub fn fixture(dir: &str) -> Snapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join("cluster.yaml");
    Snapshot::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Pod `ml/<name>` with `annotations` and one container, `main`, whose
/// limits are `limits`.
pub fn one_container_pod(name: &str, annotations: Value, limits: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "app",
                                 "resources": {"limits": limits}}]}
    }))
    .unwrap()
}

/// The index on `node` of the device named `uuid`.
pub fn index_of(node: &Node, uuid: &str) -> u32 {
    node.gpus
        .iter()
        .find(|g| g.uuid == uuid)
        .unwrap_or_else(|| panic!("{uuid} is not on node {}", node.name))
        .index
}
