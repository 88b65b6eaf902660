//! The namespaces' ResourceQuotas on GPU memory and cores: each quota's
//! `limits.*` entries, read once when the quota arrives (a value that is
//! not a whole number is kept with why it is ignored), and what the
//! namespaces' held pods use.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ResourceQuota;

use crate::engine::quantity::parse_whole;
use crate::engine::request::DeviceConfig;
use crate::engine::{NamespaceQuota, QuotaAmount, QuotaLimits};

/// A quota's `limits.*` entries: the whole number, or why the value is
/// ignored.
type Hard = BTreeMap<String, Result<u64, String>>;

#[derive(Debug, Clone, Default)]
pub struct Quotas {
    /// By namespace and quota name.
    hard: HashMap<String, BTreeMap<String, Hard>>,
    used: HashMap<String, QuotaAmount>,
}

impl Quotas {
    pub fn upsert(&mut self, quota: &ResourceQuota) {
        let ns = quota
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let name = quota.metadata.name.clone().unwrap_or_default();
        let hard: Hard = quota
            .spec
            .as_ref()
            .and_then(|s| s.hard.as_ref())
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("limits."))
            .map(|(k, v)| {
                let value = parse_whole(&v.0).map_err(|e| format!("{:?} is ignored: {e}", v.0));
                (k.clone(), value)
            })
            .collect();
        self.hard.entry(ns).or_default().insert(name, hard);
    }

    pub fn delete(&mut self, namespace: &str, name: &str) {
        if let Some(q) = self.hard.get_mut(namespace) {
            q.remove(name);
            if q.is_empty() {
                self.hard.remove(namespace);
            }
        }
    }

    /// `namespace/name` of every ResourceQuota known.
    pub fn keys(&self) -> Vec<String> {
        self.hard
            .iter()
            .flat_map(|(ns, q)| q.keys().map(move |name| format!("{ns}/{name}")))
            .collect()
    }

    /// The namespace's GPU limits for the resources named `memory` and
    /// `cores` (`nvidia.com/gpumem`, `nvidia.com/gpucores`), tightest over its
    /// quotas, with a message for each value that is not a whole number
    /// (such a value is ignored, as the quota controller cannot count
    /// against it either).
    pub fn limits(&self, namespace: &str, memory: &str, cores: &str) -> (QuotaLimits, Vec<String>) {
        let mut limits = QuotaLimits::default();
        let mut problems = Vec::new();
        let Some(quotas) = self.hard.get(namespace) else {
            return (limits, problems);
        };
        let mem_key = format!("limits.{memory}");
        let cores_key = format!("limits.{cores}");
        for (name, hard) in quotas {
            let mut read = |key: &str| match hard.get(key)? {
                Ok(n) => Some(*n),
                Err(why) => {
                    problems.push(format!("ResourceQuota {namespace}/{name}: {key}={why}"));
                    None
                }
            };
            let q = QuotaLimits {
                mem_mib: read(&mem_key),
                cores: read(&cores_key),
            };
            limits = limits.tightest(q);
        }
        (limits, problems)
    }

    /// The namespace's quota under the config's resource names and
    /// `memoryFactor`, with a message for each quota value that is ignored.
    pub fn quota(&self, namespace: &str, nv: &DeviceConfig) -> (NamespaceQuota, Vec<String>) {
        let (limits, problems) =
            self.limits(namespace, &nv.resource_memory_name, &nv.resource_core_name);
        let quota = NamespaceQuota {
            limits,
            used: self.used(namespace),
            memory_factor: u64::from(nv.memory_factor),
        };
        (quota, problems)
    }

    /// GPU memory and cores held by the namespace's pods.
    pub fn used(&self, namespace: &str) -> QuotaAmount {
        self.used.get(namespace).copied().unwrap_or_default()
    }

    /// A pod of the namespace holds `amount` more.
    pub fn add_used(&mut self, namespace: &str, amount: QuotaAmount) {
        let used = self.used.entry(namespace.to_string()).or_default();
        *used = used.saturating_add(amount);
    }

    /// A pod of the namespace let go of `amount`.
    pub fn release_used(&mut self, namespace: &str, amount: QuotaAmount) {
        if let Some(used) = self.used.get_mut(namespace) {
            *used = used.saturating_sub(amount);
            if used.is_zero() {
                self.used.remove(namespace);
            }
        }
    }

    /// Namespaces with at least one ResourceQuota (with or without GPU
    /// limits), in no particular order.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.hard.keys().map(String::as_str)
    }

    /// Namespaces whose held pods count against quota (see
    /// [`Quotas::used`]; the amount may be zero), in no particular order.
    pub fn used_namespaces(&self) -> impl Iterator<Item = &str> {
        self.used.keys().map(String::as_str)
    }
}
