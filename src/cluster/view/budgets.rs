//! PodDisruptionBudgets, as kube-scheduler weighs them when it picks
//! preemption victims: each budget's selector and how many more of its pods
//! may be disrupted now (`status.disruptionsAllowed`, kept current by the
//! disruption controller), and the pods it already counts as disrupted.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::config::namespace_policy::{LabelExpression, LabelOperator, LabelSelector};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Budget {
    /// `None`: a selector that selects nothing (absent, empty, or one
    /// kube-scheduler cannot read either).
    selector: Option<LabelSelector>,
    allowed: i32,
    /// Pods named in `status.disruptedPods`: their eviction is counted.
    disrupted: HashSet<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Budgets {
    /// By namespace and budget name.
    by_namespace: HashMap<String, BTreeMap<String, Budget>>,
}

/// A pod's labels packed in one allocation (`key=value` lines), kept for
/// every pod that holds GPUs and read only when a budget of its namespace
/// is weighed: a map per pod cost about 0.8 KiB at three labels (32 MiB
/// at 40,000 pods), this a tenth of it. Label keys hold no `=`, and no
/// key or value holds a newline (a pair that does is left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedLabels(Box<str>);

impl PackedLabels {
    pub fn pack(labels: Option<&BTreeMap<String, String>>) -> Self {
        let mut out = String::new();
        for (k, v) in labels.into_iter().flatten() {
            if k.contains(['=', '\n']) || v.contains('\n') {
                continue;
            }
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(k);
            out.push('=');
            out.push_str(v);
        }
        PackedLabels(out.into_boxed_str())
    }

    pub fn unpack(&self) -> BTreeMap<String, String> {
        self.0
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// A pod as budgets see it.
#[derive(Debug, Clone, Copy)]
pub struct BudgetedPod<'p> {
    pub namespace: &'p str,
    pub name: &'p str,
    pub labels: &'p BTreeMap<String, String>,
}

impl Budgets {
    pub fn upsert(&mut self, pdb: &PodDisruptionBudget) {
        let ns = pdb.metadata.namespace.clone().unwrap_or_default();
        let name = pdb.metadata.name.clone().unwrap_or_default();
        let status = pdb.status.as_ref();
        let budget = Budget {
            selector: pdb
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(selector_of),
            allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default(),
        };
        self.by_namespace
            .entry(ns)
            .or_default()
            .insert(name, budget);
    }

    pub fn delete(&mut self, namespace: &str, name: &str) {
        if let Some(b) = self.by_namespace.get_mut(namespace) {
            b.remove(name);
            if b.is_empty() {
                self.by_namespace.remove(namespace);
            }
        }
    }

    /// `namespace/name` of every budget known.
    pub fn keys(&self) -> Vec<String> {
        self.by_namespace
            .iter()
            .flat_map(|(ns, b)| b.keys().map(move |name| format!("{ns}/{name}")))
            .collect()
    }

    /// Whether any budget is in the namespace (a cheap test before
    /// counting).
    pub fn any_in(&self, namespace: &str) -> bool {
        self.by_namespace.contains_key(namespace)
    }

    /// kube-scheduler's count for pods evicted together, in order: each
    /// pod takes one disruption from every budget of its namespace that
    /// selects it (unless the budget counts it as disrupted already), and
    /// violates when that leaves any of them below zero. Returns, for each
    /// pod, whether it violates.
    pub fn violations<'p>(&self, pods: impl IntoIterator<Item = BudgetedPod<'p>>) -> Vec<bool> {
        let mut left: HashMap<(&str, &str), i32> = HashMap::new();
        pods.into_iter()
            .map(|pod| {
                let Some(budgets) = self.by_namespace.get(pod.namespace) else {
                    return false;
                };
                if pod.labels.is_empty() {
                    return false;
                }
                let mut violates = false;
                for (name, b) in budgets {
                    let selects = b.selector.as_ref().is_some_and(|s| s.matches(pod.labels));
                    if !selects || b.disrupted.contains(pod.name) {
                        continue;
                    }
                    let n = left
                        .entry((pod.namespace, name.as_str()))
                        .or_insert(b.allowed);
                    *n -= 1;
                    if *n < 0 {
                        violates = true;
                    }
                }
                violates
            })
            .collect()
    }
}

/// The budget's selector, or `None` when it selects nothing: absent or
/// empty (as kube-scheduler reads a budget), or with an operator it does
/// not know.
fn selector_of(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Option<LabelSelector> {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: Vec::new(),
    };
    for e in s.match_expressions.as_deref().unwrap_or_default() {
        let operator = match e.operator.as_str() {
            "In" => LabelOperator::In,
            "NotIn" => LabelOperator::NotIn,
            "Exists" => LabelOperator::Exists,
            "DoesNotExist" => LabelOperator::DoesNotExist,
            _ => return None,
        };
        out.match_expressions.push(LabelExpression {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    (!out.match_labels.is_empty() || !out.match_expressions.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(
        name: &str,
        selector: serde_json::Value,
        allowed: i32,
        disrupted: &[&str],
    ) -> PodDisruptionBudget {
        let disrupted: serde_json::Map<String, serde_json::Value> = disrupted
            .iter()
            .map(|p| (p.to_string(), json!("2026-11-25T12:00:00Z")))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted,
                       "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0},
        }))
        .unwrap()
    }

    fn labels(app: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("app".to_string(), app.to_string())])
    }

    /// The budget is shared by the pods evicted together, in order; other
    /// namespaces, unselected pods, pods counted as disrupted and empty
    /// selectors take nothing from it.
    #[test]
    fn labels_pack_and_unpack() {
        let labels = BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            ("example.com/tier".to_string(), "a=b".to_string()),
            ("bad\nkey".to_string(), "x".to_string()),
        ]);
        let packed = PackedLabels::pack(Some(&labels));
        let mut want = labels.clone();
        want.remove("bad\nkey");
        assert_eq!(packed.unpack(), want);
        assert_eq!(PackedLabels::pack(None).unpack(), BTreeMap::new());
    }

    #[test]
    fn pods_evicted_together_share_the_budget() {
        let mut b = Budgets::default();
        b.upsert(&pdb(
            "web",
            json!({"matchLabels": {"app": "web"}}),
            1,
            &["w-0"],
        ));
        b.upsert(&pdb("all", json!({}), 0, &[]));
        b.upsert(&pdb(
            "db",
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}),
            0,
            &[],
        ));
        let (web, db, other) = (labels("web"), labels("db"), labels("x"));
        let pod = |name, labels| BudgetedPod {
            namespace: "ml",
            name,
            labels,
        };
        assert_eq!(
            b.violations([pod("w-1", &web), pod("w-2", &web), pod("w-0", &web)]),
            [false, true, false]
        );
        assert_eq!(
            b.violations([pod("d-1", &db), pod("o-1", &other)]),
            [true, false]
        );
        let elsewhere = BudgetedPod {
            namespace: "batch",
            name: "d-2",
            labels: &db,
        };
        assert_eq!(b.violations([elsewhere]), [false]);
        assert_eq!(b.keys().len(), 3);
        b.delete("ml", "db");
        assert_eq!(b.violations([pod("d-1", &db)]), [false]);
    }
}
