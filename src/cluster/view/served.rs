//! Objects of a kind the API server may not serve (a CRD that may be
//! installed or removed while gpugate runs: PodGroup, NodeResourceTopology):
//! by key while it is served, and whether their first list has completed.

use std::collections::HashMap;
use std::hash::Hash;

#[derive(Debug, Clone)]
pub struct Served<K, V> {
    /// `None` while the kind is not served.
    objects: Option<HashMap<K, V>>,
    listed: bool,
}

impl<K, V> Default for Served<K, V> {
    fn default() -> Self {
        Served {
            objects: None,
            listed: false,
        }
    }
}

impl<K: Eq + Hash, V> Served<K, V> {
    /// Whether the kind is served; when it starts, its objects are being
    /// listed; when it stops, the objects known are forgotten.
    pub fn set_served(&mut self, served: bool) {
        match (served, self.objects.is_some()) {
            (true, false) => {
                self.objects = Some(HashMap::new());
                self.listed = false;
            }
            (false, true) => {
                self.objects = None;
                self.listed = false;
            }
            _ => {}
        }
    }

    /// The first list has completed.
    pub fn mark_listed(&mut self) {
        if self.objects.is_some() {
            self.listed = true;
        }
    }

    /// The objects known while the kind is served, listed or not.
    pub fn served(&self) -> Option<&HashMap<K, V>> {
        self.objects.as_ref()
    }

    /// Whether the first list has completed (false while not served).
    pub fn is_listed(&self) -> bool {
        self.listed
    }

    /// Kept only while the kind is served.
    pub fn upsert(&mut self, key: K, value: V) {
        if let Some(objects) = &mut self.objects {
            objects.insert(key, value);
        }
    }

    pub fn remove(&mut self, key: &K) {
        if let Some(objects) = &mut self.objects {
            objects.remove(key);
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.objects.iter().flat_map(HashMap::keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_live_only_while_served() {
        let mut s: Served<&str, u32> = Served::default();
        s.upsert("a", 1);
        s.mark_listed();
        assert!(s.served().is_none() && !s.is_listed());
        s.set_served(true);
        s.upsert("a", 1);
        assert_eq!(s.served().map(HashMap::len), Some(1));
        assert!(!s.is_listed());
        s.mark_listed();
        assert!(s.is_listed());
        s.set_served(true);
        assert!(s.is_listed(), "served again: nothing changes");
        s.remove(&"a");
        assert_eq!(s.keys().count(), 0);
        s.set_served(false);
        assert!(s.served().is_none() && !s.is_listed());
    }
}
