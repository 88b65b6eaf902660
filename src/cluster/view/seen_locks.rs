//! Each node's `hami.io/mutex.lock` value and resourceVersion as the watch
//! last showed them, so that bind waits for a lock without polling the API
//! server and `/filter` can steer around held locks; and how long locks
//! have been held lately, which sets how many holds a binpack pod may
//! queue behind (`nodeLock.queueDepth: auto`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as K8sNode;

use crate::hami::keys;
use crate::hami::node_lock::{LockHolder, NodeLock, decode_node_lock};

/// A node's lock annotation and resourceVersion, as last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenLock {
    /// The `hami.io/mutex.lock` value, when the node carries one.
    pub value: Option<String>,
    pub resource_version: Option<String>,
}

/// The longest hold counted: HAMi's lock expiry (5 minutes).
const HOLD_CAP: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Default)]
pub struct SeenLocks {
    /// Each node's lock annotation and resourceVersion as seen (a bind
    /// takes the lock with that resourceVersion as precondition).
    by_node: HashMap<String, SeenLock>,
    /// The readable locks among them, decoded once: `/filter` steers
    /// around them on every call, and walks these few, not every node.
    locks: HashMap<String, Arc<NodeLock>>,
    /// The holder of each node's lock as the watch last showed it, and
    /// when it first showed that holder's lock: a hold is timed from
    /// there, not from the lock's own time, which HAMi v2.10 writes in
    /// whole seconds and the writer's clock.
    held_since: HashMap<String, (Option<LockHolder>, jiff::Timestamp)>,
    /// How long the locks seen released were held.
    holds: RecentHolds,
}

/// The last [`RecentHolds::KEPT`] lock holds seen end (a lock released or
/// replaced by another holder's): from when the watch first showed the
/// lock to when it showed it gone.
#[derive(Debug, Clone, Default)]
pub struct RecentHolds {
    holds: VecDeque<Duration>,
    /// Their median, once there are [`RecentHolds::ENOUGH`].
    typical: Option<Duration>,
}

impl RecentHolds {
    const KEPT: usize = 64;
    const ENOUGH: usize = 8;

    /// Records one hold; one longer than `cap` (a lock taken over after
    /// its expiry, or a writer's clock far off) counts as `cap`.
    pub fn record(&mut self, held: Duration, cap: Duration) {
        if self.holds.len() == Self::KEPT {
            self.holds.pop_front();
        }
        self.holds.push_back(held.min(cap));
        if self.holds.len() >= Self::ENOUGH {
            let mut sorted: Vec<Duration> = self.holds.iter().copied().collect();
            sorted.sort_unstable();
            self.typical = Some(sorted[sorted.len() / 2]);
        }
    }

    /// The median of the recent holds; `None` until enough were seen.
    pub fn typical(&self) -> Option<Duration> {
        self.typical
    }
}

impl SeenLocks {
    /// Records the node's lock annotation and resourceVersion. With `now`
    /// (a watch event, seen at `now`), a lock that is gone, or now names
    /// another holder, ended a hold; without (a write's answer, which may
    /// be newer than the watch's next event), no hold is timed.
    pub fn note(&mut self, node: &K8sNode, now: Option<jiff::Timestamp>) {
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
        let lock = seen.value.as_deref().and_then(|v| decode_node_lock(v).ok());
        if let Some(now) = now {
            self.time_hold(name, lock.as_ref().map(|l| &l.holder), now);
        }
        match lock {
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

    /// Times holds from the watch's events alone: `holder` is the lock the
    /// watch shows now (`None`: no readable lock).
    fn time_hold(&mut self, node: &str, holder: Option<&Option<LockHolder>>, now: jiff::Timestamp) {
        let ended = match (self.held_since.get(node), holder) {
            (Some((old, _)), Some(new)) => old != new,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if ended
            && let Some((_, since)) = self.held_since.remove(node)
            && let Ok(held) = Duration::try_from(now.duration_since(since))
        {
            // At most HAMi's expiry: a hold past it was ended by a
            // takeover, not by the device plugin.
            self.holds.record(held, HOLD_CAP);
        }
        if let Some(holder) = holder
            && !self.held_since.contains_key(node)
        {
            self.held_since
                .insert(node.to_string(), (holder.clone(), now));
        }
    }

    /// How long locks have been held lately (the median of the last
    /// holds seen end); `None` until enough were seen.
    pub fn typical_hold(&self) -> Option<Duration> {
        self.holds.typical()
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
        self.held_since.remove(node);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hami::node_lock::encode_node_lock;

    fn node(name: &str, lock: Option<&NodeLock>) -> K8sNode {
        let mut n = K8sNode::default();
        n.metadata.name = Some(name.to_string());
        if let Some(lock) = lock {
            n.metadata.annotations = Some(
                [(keys::NODE_LOCK.to_string(), encode_node_lock(lock))]
                    .into_iter()
                    .collect(),
            );
        }
        n
    }

    /// A hold ends when the lock is gone or names another pod; a lock
    /// written again by its own holder (a bind's retry) goes on.
    #[test]
    fn holds_are_timed_from_the_lock_to_its_release() {
        let t0: jiff::Timestamp = "2026-11-28T00:00:00Z".parse().unwrap();
        let at = |ms: i64| t0 + jiff::SignedDuration::from_millis(ms);
        let mut seen = SeenLocks::default();
        let lock = |ms: i64, pod: &str| NodeLock::new(at(ms), "ml", pod);
        for i in 0..7 {
            let start = i * 10_000;
            seen.note(&node("n1", Some(&lock(start, "a"))), Some(at(start + 100)));
            // Written again by its holder: not a release.
            seen.note(
                &node("n1", Some(&lock(start + 200, "a"))),
                Some(at(start + 300)),
            );
            seen.note(&node("n1", None), Some(at(start + 1_200 + i * 100)));
        }
        assert_eq!(seen.typical_hold(), None, "7 holds are not enough");
        // Replaced by another pod's lock (a takeover, or the watch missed
        // the release): that ends the hold too.
        seen.note(&node("n1", Some(&lock(70_000, "b"))), Some(at(70_100)));
        seen.note(&node("n1", Some(&lock(71_500, "c"))), Some(at(71_600)));
        // Holds of 1.1, 1.2, ... 1.7 s (from when the first lock was
        // seen, not from the restamp) and 1.5 s.
        assert_eq!(seen.typical_hold(), Some(Duration::from_millis(1_500)));
        // A node forgotten, and a lock far past HAMi's expiry, count at
        // most the expiry.
        let mut holds = RecentHolds::default();
        for _ in 0..8 {
            holds.record(Duration::from_secs(3_600), HOLD_CAP);
        }
        assert_eq!(holds.typical(), Some(HOLD_CAP));
        // Only the last 64 count.
        for _ in 0..64 {
            holds.record(Duration::from_millis(500), HOLD_CAP);
        }
        assert_eq!(holds.typical(), Some(Duration::from_millis(500)));
    }

    /// A bind's own write (its answer, newer than the watch's next event)
    /// times no hold: the watch's release of the previous lock, arriving
    /// after it, ends that lock's hold, not the new one's.
    #[test]
    fn a_writes_answer_does_not_time_holds() {
        let t0: jiff::Timestamp = "2026-11-28T00:00:00Z".parse().unwrap();
        let at = |ms: i64| Some(t0 + jiff::SignedDuration::from_millis(ms));
        let lock = |pod: &str| NodeLock::new(t0, "ml", pod);
        let mut seen = SeenLocks::default();
        seen.note(&node("n1", Some(&lock("d"))), at(0));
        // gpugate read the release from the API server and took the lock.
        seen.note(&node("n1", Some(&lock("e"))), None);
        assert_eq!(
            seen.get("n1").and_then(|l| l.value.clone()),
            Some(encode_node_lock(&lock("e")))
        );
        seen.note(&node("n1", None), at(1_000));
        seen.note(&node("n1", Some(&lock("e"))), at(1_100));
        seen.note(&node("n1", None), at(2_600));
        let holds: Vec<Duration> = seen.holds.holds.iter().copied().collect();
        assert_eq!(
            holds,
            [Duration::from_millis(1_000), Duration::from_millis(1_500)]
        );
    }
}
