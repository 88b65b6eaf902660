//! Reading a pod's annotations without caring how they are stored:
//! k8s-openapi's `BTreeMap` on the scheduler side, the admission webhooks'
//! borrowed view of the raw object on the other.

use std::collections::BTreeMap;

/// A pod's annotations, looked up by key.
pub trait Annotations {
    /// The value of `key`, when the pod sets it.
    fn annotation(&self, key: &str) -> Option<&str>;
}

impl Annotations for BTreeMap<String, String> {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}
