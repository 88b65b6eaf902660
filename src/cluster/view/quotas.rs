//! The namespaces' ResourceQuotas on GPU memory and cores: each quota's
//! `limits.*` entries, read once when the quota arrives (a value that is
//! not a whole number is kept with why it is ignored), its scopes, and what
//! the namespaces' held pods use, by what quota scopes see of them
//! ([`ScopeFacts`]), so that each quota counts only the pods it covers.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::ResourceQuota;

use crate::config::Config;
use crate::devices::KindId;
use crate::engine::quantity::parse_whole;
use crate::engine::request::DeviceConfig;
use crate::engine::{
    CoveringQuota, KindAmounts, NamespaceQuota, PodQuota, QuotaLimits, QuotaScope, ScopeFacts,
    ScopeName, ScopeOp, ScopeRequirement,
};

/// A quota's `limits.*` entries: the whole number, or why the value is
/// ignored.
type Hard = BTreeMap<String, Result<u64, String>>;

/// One ResourceQuota as read.
#[derive(Debug, Clone, Default)]
struct Quota {
    hard: Hard,
    scope: QuotaScope,
}

#[derive(Debug, Clone, Default)]
pub struct Quotas {
    /// By namespace and quota name.
    quotas: HashMap<String, BTreeMap<String, Quota>>,
    /// What each namespace's held pods use, kind by kind, by their scope
    /// facts (a few kinds of pod per namespace). Kinds never share a
    /// resource name (the config refuses it), so a kind's use is its
    /// resource names' use.
    used: HashMap<String, HashMap<ScopeFacts, KindAmounts>>,
}

/// The scopes of a ResourceQuota, as the quota controller reads them:
/// each of `scopes` is an `Exists` requirement, and `scopeSelector`'s
/// expressions follow.
fn scope_of(quota: &ResourceQuota) -> QuotaScope {
    let Some(spec) = quota.spec.as_ref() else {
        return QuotaScope::default();
    };
    let named = spec.scopes.iter().flatten().map(|s| ScopeRequirement {
        scope: ScopeName::parse(s),
        op: Some(ScopeOp::Exists),
        values: Vec::new(),
    });
    let selected = spec
        .scope_selector
        .iter()
        .flat_map(|s| s.match_expressions.iter().flatten())
        .map(|e| ScopeRequirement {
            scope: ScopeName::parse(&e.scope_name),
            op: match e.operator.as_str() {
                "In" => Some(ScopeOp::In),
                "NotIn" => Some(ScopeOp::NotIn),
                "Exists" => Some(ScopeOp::Exists),
                "DoesNotExist" => Some(ScopeOp::DoesNotExist),
                _ => None,
            },
            values: e.values.clone().unwrap_or_default(),
        });
    QuotaScope {
        requirements: named.chain(selected).collect(),
    }
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
        let scope = scope_of(quota);
        self.quotas
            .entry(ns)
            .or_default()
            .insert(name, Quota { hard, scope });
    }

    pub fn delete(&mut self, namespace: &str, name: &str) {
        if let Some(q) = self.quotas.get_mut(namespace) {
            q.remove(name);
            if q.is_empty() {
                self.quotas.remove(namespace);
            }
        }
    }

    /// `namespace/name` of every ResourceQuota known.
    pub fn keys(&self) -> Vec<String> {
        self.quotas
            .iter()
            .flat_map(|(ns, q)| q.keys().map(move |name| format!("{ns}/{name}")))
            .collect()
    }

    /// Each quota of the namespace with its GPU limits for the resources
    /// named `memory` and `cores` (`nvidia.com/gpumem`,
    /// `nvidia.com/gpucores`), with a message for each value that is not a
    /// whole number (ignored, as the quota controller cannot count against
    /// it either).
    fn each_limits<'q>(
        &'q self,
        namespace: &str,
        memory: &str,
        cores: &str,
        problems: &mut Vec<String>,
    ) -> Vec<(&'q str, &'q Quota, QuotaLimits)> {
        let Some(quotas) = self.quotas.get(namespace) else {
            return Vec::new();
        };
        let mem_key = format!("limits.{memory}");
        let cores_key = format!("limits.{cores}");
        quotas
            .iter()
            .map(|(name, q)| {
                let mut read = |key: &str| match q.hard.get(key)? {
                    Ok(n) => Some(*n),
                    Err(why) => {
                        problems.push(format!("ResourceQuota {namespace}/{name}: {key}={why}"));
                        None
                    }
                };
                let limits = QuotaLimits {
                    mem_mib: read(&mem_key),
                    cores: read(&cores_key),
                };
                (name.as_str(), q, limits)
            })
            .collect()
    }

    /// The namespace's GPU limits, tightest over the quotas that cover
    /// every pod (those with scopes are left out, as in HAMi master's quota
    /// gauges), with a message for each value that is ignored.
    pub fn limits(&self, namespace: &str, memory: &str, cores: &str) -> (QuotaLimits, Vec<String>) {
        let mut problems = Vec::new();
        let limits = self
            .each_limits(namespace, memory, cores, &mut problems)
            .into_iter()
            .filter(|(_, q, _)| q.scope.is_unscoped())
            .fold(QuotaLimits::default(), |all, (_, _, l)| all.tightest(l));
        (limits, problems)
    }

    /// The quotas of the namespace that cover a pod with `facts` and limit
    /// its memory or cores of the kind of `cfg` (under the section's
    /// resource names and `memoryFactor`), each with what the pods it
    /// covers hold of that kind; with a message for each quota value that
    /// is ignored.
    pub fn quota(
        &self,
        namespace: &str,
        facts: &ScopeFacts,
        cfg: &DeviceConfig,
    ) -> (NamespaceQuota, Vec<String>) {
        let mut problems = Vec::new();
        let quotas = self
            .each_limits(
                namespace,
                &cfg.resource_memory_name,
                &cfg.resource_core_name,
                &mut problems,
            )
            .into_iter()
            .filter(|(_, q, limits)| !limits.is_empty() && q.scope.covers(facts))
            .map(|(name, q, limits)| CoveringQuota {
                name: name.to_string(),
                limits,
                used: self.used_under(namespace, &q.scope).of(cfg.kind),
            })
            .collect();
        let quota = NamespaceQuota {
            kind: cfg.kind,
            quotas,
            memory_factor: u64::from(cfg.memory_factor),
        };
        (quota, problems)
    }

    /// [`Quotas::quota`] for each of `kinds` (a pod's kinds, or those it
    /// holds), under its section of `config`.
    pub fn pod_quota(
        &self,
        namespace: &str,
        facts: &ScopeFacts,
        config: &Config,
        kinds: impl IntoIterator<Item = KindId>,
    ) -> (PodQuota, Vec<String>) {
        let mut problems = Vec::new();
        let kinds = kinds
            .into_iter()
            .map(|kind| {
                let (quota, p) = self.quota(namespace, facts, config.device_config(kind));
                problems.extend(p);
                quota
            })
            .collect();
        (PodQuota { kinds }, problems)
    }

    /// What the namespace's held pods that `scope` covers use.
    fn used_under(&self, namespace: &str, scope: &QuotaScope) -> KindAmounts {
        self.used
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(|(facts, _)| scope.covers(facts))
            .fold(KindAmounts::default(), |sum, (_, a)| sum.saturating_add(a))
    }

    /// What the namespace's pods hold, all of them, kind by kind.
    pub fn used(&self, namespace: &str) -> KindAmounts {
        self.used_under(namespace, &QuotaScope::default())
    }

    /// A pod of the namespace, with `facts`, holds `amount` more.
    pub fn add_used(&mut self, namespace: &str, facts: &ScopeFacts, amount: &KindAmounts) {
        if amount.is_zero() {
            return;
        }
        let by_facts = self.used.entry(namespace.to_string()).or_default();
        let used = by_facts.entry(facts.clone()).or_default();
        *used = std::mem::take(used).saturating_add(amount);
    }

    /// A pod of the namespace, with `facts`, let go of `amount`.
    pub fn release_used(&mut self, namespace: &str, facts: &ScopeFacts, amount: &KindAmounts) {
        let Some(by_facts) = self.used.get_mut(namespace) else {
            return;
        };
        if let Some(used) = by_facts.get_mut(facts) {
            *used = std::mem::take(used).saturating_sub(amount);
            if used.is_zero() {
                by_facts.remove(facts);
            }
        }
        if by_facts.is_empty() {
            self.used.remove(namespace);
        }
    }

    /// The resource names the namespace's ResourceQuotas set a `limits.*`
    /// entry for (`nvidia.com/gpumem`), whatever their values.
    pub fn limited_resources(&self, namespace: &str) -> std::collections::BTreeSet<&str> {
        self.quotas
            .get(namespace)
            .into_iter()
            .flat_map(|q| q.values())
            .flat_map(|q| q.hard.keys())
            .filter_map(|k| k.strip_prefix("limits."))
            .collect()
    }

    /// Namespaces with at least one ResourceQuota (with or without GPU
    /// limits), in no particular order.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.quotas.keys().map(String::as_str)
    }

    /// Namespaces whose held pods count against quota (see
    /// [`Quotas::used`]; the amount may be zero), in no particular order.
    pub fn used_namespaces(&self) -> impl Iterator<Item = &str> {
        self.used.keys().map(String::as_str)
    }
}
