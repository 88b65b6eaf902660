//! Each node's `hami.io/mutex.lock` value and resourceVersion as the watch
//! last showed them, so that bind waits for a lock without polling the API
//! server and `/filter` can steer around held locks.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node as K8sNode;

use crate::hami::keys;
use crate::hami::node_lock::decode_node_lock;

/// A node's lock annotation and resourceVersion, as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenLock {
    /// The `hami.io/mutex.lock` value, when the node carries one.
    pub value: Option<String>,
    pub resource_version: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct SeenLocks {
    by_node: HashMap<String, SeenLock>,
}

impl SeenLocks {
    /// Records the node's lock annotation and resourceVersion.
    pub fn note(&mut self, node: &K8sNode) {
        let Some(name) = node.metadata.name.as_deref() else {
            return;
        };
        let seen = SeenLock {
            value: node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::NODE_LOCK))
                .cloned(),
            resource_version: node.metadata.resource_version.clone(),
        };
        match self.by_node.get_mut(name) {
            Some(old) => *old = seen,
            None => {
                self.by_node.insert(name.to_string(), seen);
            }
        }
    }

    pub fn knows(&self, node: &str) -> bool {
        self.by_node.contains_key(node)
    }

    pub fn get(&self, node: &str) -> Option<&SeenLock> {
        self.by_node.get(node)
    }

    /// `(node, value)` of every lock annotation seen.
    pub fn held_values(&self) -> Vec<(String, String)> {
        self.by_node
            .iter()
            .filter_map(|(node, seen)| Some((node.clone(), seen.value.clone()?)))
            .collect()
    }

    pub fn forget(&mut self, node: &str) {
        self.by_node.remove(node);
    }

    /// Who holds the node's lock at `now`, as the watch last showed it,
    /// unless it has expired or cannot be read.
    pub fn held(
        &self,
        node: &str,
        now: jiff::Timestamp,
        expiry: std::time::Duration,
    ) -> Option<String> {
        let value = self.by_node.get(node)?.value.as_deref()?;
        let lock = decode_node_lock(value).ok()?;
        if lock.is_expired(now, expiry) {
            return None;
        }
        Some(match &lock.holder {
            Some(h) => format!("hami.io/mutex.lock held by pod {}/{}", h.namespace, h.name),
            None => "hami.io/mutex.lock held".to_string(),
        })
    }
}
