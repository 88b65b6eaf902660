//! The node checks kube-scheduler makes before it asks gpugate, as far as
//! `explain` can see them from the objects: the pod's nodeSelector and
//! required node affinity, the node's taints and `unschedulable`. A node
//! they exclude is never offered to the extender, so explain says so
//! instead of judging its GPUs. (CPU, memory, ports, volumes and pod
//! affinity are kube-scheduler's own to explain, in its events.)

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

/// Why kube-scheduler never offers `node` to gpugate for `pod`, if it
/// does not.
pub fn excluded(pod: &Pod, node: &Node) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if let Some(selector) = &spec.node_selector {
        for (k, v) in selector {
            if labels.get(k) != Some(v) {
                return Some(format!(
                    "the pod's nodeSelector {k}={v} does not match the node's labels"
                ));
            }
        }
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| s.node_selector_terms.as_slice())
        .unwrap_or_default();
    if !terms.is_empty() && !terms.iter().any(|t| term_matches(t, &labels, name)) {
        return Some("the pod's required node affinity does not match the node".to_string());
    }
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let node_spec = node.spec.as_ref();
    if node_spec.and_then(|s| s.unschedulable) == Some(true)
        && !tolerations.iter().any(|t| {
            tolerates(
                t,
                &Taint {
                    key: "node.kubernetes.io/unschedulable".into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                },
            )
        })
    {
        return Some("the node is cordoned (spec.unschedulable)".to_string());
    }
    for taint in node_spec
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
    {
        if matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|t| tolerates(t, taint))
        {
            let value = taint
                .value
                .as_deref()
                .map(|v| format!("={v}"))
                .unwrap_or_default();
            return Some(format!(
                "the pod does not tolerate the node's taint {}{value}:{}",
                taint.key, taint.effect
            ));
        }
    }
    None
}

/// A term holds when all its expressions do (an empty term matches
/// nothing, as in kube-scheduler).
fn term_matches(
    term: &NodeSelectorTerm,
    labels: &std::collections::BTreeMap<String, String>,
    name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_holds(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(name);
            requirement_holds(r, value)
        })
}

fn requirement_holds(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(number),
                values.first().and_then(|b| number(b)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Kubernetes' toleration rule: an empty key with `Exists` tolerates
/// everything; an empty effect matches every effect.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    if key.is_empty() {
        return t.operator.as_deref() == Some("Exists");
    }
    if key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        _ => t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c"}]);
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn selectors_affinity_taints_and_cordons() {
        let n = node(json!({
            "metadata": {"name": "n1", "labels": {"zone": "a", "gpus": "4"}},
            "spec": {"taints": [{"key": "gpu", "value": "t4", "effect": "NoSchedule"},
                                {"key": "soft", "effect": "PreferNoSchedule"}]},
        }));
        let tolerant = json!([{"key": "gpu", "operator": "Equal", "value": "t4"}]);
        assert_eq!(
            excluded(&pod(json!({"nodeSelector": {"zone": "b"}})), &n).as_deref(),
            Some("the pod's nodeSelector zone=b does not match the node's labels")
        );
        assert_eq!(
            excluded(&pod(json!({})), &n).as_deref(),
            Some("the pod does not tolerate the node's taint gpu=t4:NoSchedule")
        );
        assert_eq!(excluded(&pod(json!({"tolerations": tolerant})), &n), None);
        assert_eq!(
            excluded(&pod(json!({"tolerations": [{"operator": "Exists"}]})), &n),
            None
        );
        let affinity = |exprs: serde_json::Value, fields: serde_json::Value| {
            pod(
                json!({"tolerations": tolerant, "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": exprs, "matchFields": fields}]}}}}),
            )
        };
        for (exprs, fields, ok) in [
            (
                json!([{"key": "zone", "operator": "In", "values": ["a", "b"]}]),
                json!([]),
                true,
            ),
            (
                json!([{"key": "zone", "operator": "NotIn", "values": ["a"]}]),
                json!([]),
                false,
            ),
            (
                json!([{"key": "gpus", "operator": "Gt", "values": ["2"]}]),
                json!([]),
                true,
            ),
            (
                json!([{"key": "gpus", "operator": "Lt", "values": ["2"]}]),
                json!([]),
                false,
            ),
            (
                json!([{"key": "x", "operator": "DoesNotExist"}]),
                json!([]),
                true,
            ),
            (
                json!([]),
                json!([{"key": "metadata.name", "operator": "In", "values": ["n2"]}]),
                false,
            ),
            (
                json!([]),
                json!([{"key": "metadata.name", "operator": "In", "values": ["n1"]}]),
                true,
            ),
        ] {
            let got = excluded(&affinity(exprs.clone(), fields.clone()), &n);
            assert_eq!(got.is_none(), ok, "{exprs} {fields}: {got:?}");
        }
        let cordoned = node(json!({"metadata": {"name": "n3"}, "spec": {"unschedulable": true}}));
        assert_eq!(
            excluded(&pod(json!({})), &cordoned).as_deref(),
            Some("the node is cordoned (spec.unschedulable)")
        );
    }
}
