//! The pods of recent `/filter` calls, by UID: standalone bind has no API
//! server to read the pod from, so it uses the pod kube-scheduler last sent.
//! Bounded by count and by size: the oldest entries are dropped first (a
//! bind for a dropped pod fails with a clear error and kube-scheduler
//! retries from filter).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;

/// How many pods are remembered.
pub const CAPACITY: usize = 2048;
/// How many bytes the remembered pods may weigh (as JSON): a client that
/// sends huge pods cannot make the standalone server hold more than this.
pub const CAPACITY_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Default)]
pub struct RecentPods {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<String, (Pod, usize)>,
    order: VecDeque<String>,
    bytes: usize,
}

impl RecentPods {
    /// Remembers a pod that came in a body of `weight` bytes (a pod
    /// without UID, or heavier than the whole budget, is not remembered).
    pub fn remember(&self, pod: &Pod, weight: usize) {
        let Some(uid) = pod.metadata.uid.clone().filter(|u| !u.is_empty()) else {
            return;
        };
        if weight > CAPACITY_BYTES {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match inner.pods.insert(uid.clone(), (pod.clone(), weight)) {
            Some((_, old)) => inner.bytes -= old,
            None => inner.order.push_back(uid),
        }
        inner.bytes += weight;
        while inner.pods.len() > CAPACITY || inner.bytes > CAPACITY_BYTES {
            match inner.order.pop_front() {
                Some(old) => {
                    if let Some((_, w)) = inner.pods.remove(&old) {
                        inner.bytes -= w;
                    }
                }
                None => break,
            }
        }
    }

    pub fn get(&self, uid: &str) -> Option<Pod> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.pods.get(uid).map(|(p, _)| p.clone())
    }

    pub fn forget(&self, uid: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, w)) = inner.pods.remove(uid) {
            inner.bytes -= w;
            inner.order.retain(|u| u != uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn the_oldest_pods_are_dropped_past_capacity() {
        let r = RecentPods::default();
        for i in 0..CAPACITY + 10 {
            r.remember(&pod(&format!("u{i}")), 1);
        }
        assert!(r.get("u0").is_none() && r.get("u9").is_none());
        assert!(r.get("u10").is_some());
        assert!(r.get(&format!("u{}", CAPACITY + 9)).is_some());
        r.forget("u10");
        assert!(r.get("u10").is_none());
        r.remember(&Pod::default(), 1);
        assert_eq!(r.inner.lock().unwrap().pods.len(), CAPACITY - 1);
    }

    #[test]
    fn heavy_pods_are_dropped_past_the_byte_budget() {
        let r = RecentPods::default();
        let heavy = CAPACITY_BYTES / 4;
        for i in 0..6 {
            r.remember(&pod(&format!("h{i}")), heavy);
        }
        assert!(r.get("h0").is_none() && r.get("h1").is_none());
        assert!(r.get("h2").is_some() && r.get("h5").is_some());
        assert_eq!(r.inner.lock().unwrap().bytes, CAPACITY_BYTES);
        // Remembering the same pod again does not count it twice.
        r.remember(&pod("h5"), heavy);
        assert_eq!(r.inner.lock().unwrap().bytes, CAPACITY_BYTES);
        r.remember(&pod("too-big"), CAPACITY_BYTES + 1);
        assert!(r.get("too-big").is_none());
        r.forget("h5");
        assert_eq!(r.inner.lock().unwrap().bytes, 3 * heavy);
    }
}
