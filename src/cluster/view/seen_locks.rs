//! Each node's `hami.io/mutex.lock` value and resourceVersion as the watch
//! last showed them, so that bind waits for a lock without polling the API
//! server and `/filter` can steer around held locks.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node as K8sNode;

use crate::hami::keys;
use crate::hami::node_lock::{NodeLock, decode_node_lock};

/// A node's lock annotation and resourceVersion, as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenLock {
    /// The `hami.io/mutex.lock` value, when the node carries one.
    pub value: Option<String>,
    pub resource_version: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct SeenLocks {
    /// Each node's lock annotation and resourceVersion as seen (a bind
    /// takes the lock with that resourceVersion as precondition).
    by_node: HashMap<String, SeenLock>,
    /// The readable locks among them, decoded once: `/filter` steers
    /// around them on every call, and walks these few, not every node.
    locks: HashMap<String, Arc<NodeLock>>,
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
        match seen.value.as_deref().and_then(|v| decode_node_lock(v).ok()) {
            Some(lock) => match self.locks.get_mut(name) {
                Some(old) => *old = Arc::new(lock),
                None => {
                    self.locks.insert(name.to_string(), Arc::new(lock));
                }
            },
            None => {
                self.locks.remove(name);
            }
        }
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
        self.locks.remove(node);
    }

    /// Every node whose readable lock has (`expired`) or has not expired at
    /// `now`, with the lock: one pass over the locks, no lookups, nothing
    /// copied.
    pub fn all_locks(
        &self,
        now: jiff::Timestamp,
        expiry: std::time::Duration,
        expired: bool,
    ) -> impl Iterator<Item = (&str, &Arc<NodeLock>)> {
        self.locks
            .iter()
            .filter(move |(_, lock)| lock.is_expired(now, expiry) == expired)
            .map(|(node, lock)| (node.as_str(), lock))
    }
}

/// A node lock kept past its expiry because its holder, bound to the
/// node, still waits for its device plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwaitedLock {
    pub node: String,
    /// The holder's UID, namespace and name.
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// When the lock was taken.
    pub since: jiff::Timestamp,
}

impl AwaitedLock {
    /// What people are told: the node, the pod and for how long.
    pub fn describe(&self, now: jiff::Timestamp) -> String {
        let waited = now.duration_since(self.since).as_secs().max(0);
        let waited = if waited < 120 {
            format!("{waited} s")
        } else {
            format!("{} min", waited / 60)
        };
        format!(
            "node {} is waiting for its device plugin to admit pod {}/{} for {waited}: its \
             hami.io/mutex.lock (taken {}) is kept past its expiry, because HAMi's device plugin \
             finds the pod an Allocate is for through the lock, so no other pod binds there until \
             {}/{} is admitted (hami.io/bind-phase no longer allocating) or gone; check the \
             kubelet and the device plugin on {}",
            self.node, self.namespace, self.name, self.since, self.namespace, self.name, self.node,
        )
    }
}

/// Who holds a lock, in words.
pub fn holder_text(lock: &NodeLock) -> String {
    match &lock.holder {
        Some(h) => format!("hami.io/mutex.lock held by pod {}/{}", h.namespace, h.name),
        None => "hami.io/mutex.lock held".to_string(),
    }
}
