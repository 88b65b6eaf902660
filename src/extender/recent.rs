//! The pods of recent `/filter` calls, by UID: standalone bind has no API
//! server to read the pod from, so it uses the pod kube-scheduler last sent.
//! Bounded: the oldest entries are dropped first (a bind for a dropped pod
//! fails with a clear error and kube-scheduler retries from filter).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;

/// How many pods are remembered.
pub const CAPACITY: usize = 2048;

#[derive(Debug, Default)]
pub struct RecentPods {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<String, Pod>,
    order: VecDeque<String>,
}

impl RecentPods {
    /// Remembers a pod (a pod without UID is not remembered).
    pub fn remember(&self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone().filter(|u| !u.is_empty()) else {
            return;
        };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.pods.insert(uid.clone(), pod.clone()).is_none() {
            inner.order.push_back(uid);
        }
        while inner.pods.len() > CAPACITY {
            match inner.order.pop_front() {
                Some(old) => {
                    inner.pods.remove(&old);
                }
                None => break,
            }
        }
    }

    pub fn get(&self, uid: &str) -> Option<Pod> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.pods.get(uid).cloned()
    }

    pub fn forget(&self, uid: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.pods.remove(uid).is_some() {
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
            r.remember(&pod(&format!("u{i}")));
        }
        assert!(r.get("u0").is_none() && r.get("u9").is_none());
        assert!(r.get("u10").is_some());
        assert!(r.get(&format!("u{}", CAPACITY + 9)).is_some());
        r.forget("u10");
        assert!(r.get("u10").is_none());
        r.remember(&Pod::default());
        assert_eq!(r.inner.lock().unwrap().pods.len(), CAPACITY - 1);
    }
}
