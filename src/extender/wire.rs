//! kube-scheduler's extender wire types (k8s.io/kube-scheduler/extender/v1).
//!
//! The Go structs carry no JSON tags, so kube-scheduler sends and expects
//! the Go field names (`Pod`, `NodeNames`, `FailedNodes`, `PodUID`, …) and
//! Go's decoder matches keys in any letter case. gpugate does the same:
//! it reads every field whatever its case and writes the Go names.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use serde_json::{Map, Value};

/// A request body that is not what the verb expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(pub String);

/// The key of `map` that stands for `name`: `name` itself, or else the
/// first key equal to it in any letter case (an exact match wins, as in Go).
fn key_of<'a>(map: &'a Map<String, Value>, name: &'a str) -> Option<&'a str> {
    key_among(map.contains_key(name), map.keys(), name)
}

/// [`key_of`]'s rule over any map's keys (in their order), `exact` telling
/// whether `name` itself is one of them.
fn key_among<'a>(
    exact: bool,
    mut keys: impl Iterator<Item = &'a String>,
    name: &'a str,
) -> Option<&'a str> {
    if exact {
        return Some(name);
    }
    keys.find(|k| k.eq_ignore_ascii_case(name))
        .map(String::as_str)
}

/// The body as a JSON object whose values are left unparsed (borrowed
/// from the body), so that each field is read once, straight into its
/// type: a `/filter` call carries the pod and every candidate's name.
fn raw_fields<'a>(body: &'a [u8], what: &str) -> Result<RawFields<'a>, WireError> {
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => WireError(format!("{what} is not a JSON object")),
        _ => WireError(format!("{what}: invalid JSON: {e}")),
    })
}

type RawFields<'a> = BTreeMap<String, &'a serde_json::value::RawValue>;

/// The value of `name` (see [`key_of`]) taken out of a map of unparsed
/// values; `null` is absent, as [`field`] reads it.
fn take_raw<'a>(map: &mut RawFields<'a>, name: &str) -> Option<&'a serde_json::value::RawValue> {
    let key = key_among(map.contains_key(name), map.keys(), name)?.to_string();
    map.remove(&key).filter(|v| v.get() != "null")
}

/// A field's unparsed value read into its type.
fn typed_raw<T: serde::de::DeserializeOwned>(
    raw: &serde_json::value::RawValue,
    what: &str,
) -> Result<T, WireError> {
    serde_json::from_str(raw.get()).map_err(|e| {
        // The position would count within the field's own text, not the
        // body: left out, as reading from a parsed value left it out.
        let text = e.to_string();
        let text = text
            .rsplit_once(" at line ")
            .map_or(text.as_str(), |(t, _)| t);
        WireError(format!("{what}: {text}"))
    })
}

/// The value of `name` in `map` (see [`key_of`]); `null` is absent.
fn field<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    key_of(map, name)
        .and_then(|k| map.get(k))
        .filter(|v| !v.is_null())
}

/// The body as a JSON object, which every verb's arguments are.
fn body_object(body: &[u8], what: &str) -> Result<Map<String, Value>, WireError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(WireError(format!("{what} is not a JSON object"))),
        Err(e) => Err(WireError(format!("{what}: invalid JSON: {e}"))),
    }
}

fn typed<T: serde::de::DeserializeOwned>(value: &Value, what: &str) -> Result<T, WireError> {
    T::deserialize(value).map_err(|e| WireError(format!("{what}: {e}")))
}

fn string(map: &Map<String, Value>, name: &str, what: &str) -> Result<String, WireError> {
    match field(map, name) {
        Some(Value::String(s)) if !s.is_empty() => {
            check_length(s, name, what)?;
            Ok(s.clone())
        }
        Some(Value::String(_)) | None => Err(WireError(format!("{what}: {name} is missing"))),
        Some(_) => Err(WireError(format!("{what}: {name} is not a string"))),
    }
}

/// The longest value Kubernetes allows for a name, namespace, UID or node
/// name: object names are DNS subdomains (253), namespaces DNS labels (63),
/// UIDs 36-character UUIDs (128 leaves room for other forms).
fn max_length(name: &str) -> usize {
    match name {
        "PodNamespace" | "namespace" => 63,
        "PodUID" | "uid" => 128,
        _ => 253,
    }
}

/// Refuses an identity longer than Kubernetes allows: such a value never
/// comes from kube-scheduler, and the ledger would keep it (in metrics
/// labels too, standalone).
fn check_length(value: &str, name: &str, what: &str) -> Result<(), WireError> {
    let max = max_length(name);
    if value.len() > max {
        return Err(WireError(format!(
            "{what}: {name} is {} bytes long, more than Kubernetes allows ({max})",
            value.len()
        )));
    }
    Ok(())
}

/// Checks a pod's name, namespace and UID as [`check_length`] does.
fn check_pod_identity(pod: &Pod, what: &str) -> Result<(), WireError> {
    let meta = &pod.metadata;
    for (name, value) in [
        ("name", &meta.name),
        ("namespace", &meta.namespace),
        ("uid", &meta.uid),
    ] {
        if let Some(value) = value {
            check_length(value, name, &format!("{what}.metadata"))?;
        }
    }
    Ok(())
}

/// `ExtenderArgs`: the pod and the candidate nodes, by name
/// (`nodeCacheCapable: true`) or in full.
#[derive(Debug, Clone)]
pub struct ExtenderArgs {
    pub pod: Pod,
    pub candidates: Candidates,
}

#[derive(Debug, Clone)]
pub enum Candidates {
    Names(Vec<String>),
    /// Whole Node objects, kept as sent so that the answer echoes them
    /// unchanged (fields k8s-openapi does not know included).
    Nodes(Vec<Value>),
}

impl Candidates {
    pub fn names(&self) -> Vec<String> {
        self.name_list().into_owned()
    }

    /// The names, borrowed when they were sent as names.
    pub fn name_list(&self) -> std::borrow::Cow<'_, [String]> {
        match self {
            Candidates::Names(n) => std::borrow::Cow::Borrowed(n),
            Candidates::Nodes(nodes) => {
                std::borrow::Cow::Owned(nodes.iter().map(|n| node_name(n).to_string()).collect())
            }
        }
    }
}

/// `metadata.name` of a Node given as JSON (empty when absent).
pub fn node_name(node: &Value) -> &str {
    node.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl ExtenderArgs {
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "ExtenderArgs";
        let mut map = raw_fields(body, WHAT)?;
        let pod = take_raw(&mut map, "Pod")
            .ok_or_else(|| WireError("ExtenderArgs: Pod is missing".into()))?;
        let pod: Pod = typed_raw(pod, "ExtenderArgs.Pod")?;
        check_pod_identity(&pod, "ExtenderArgs.Pod")?;
        let candidates = match (take_raw(&mut map, "NodeNames"), take_raw(&mut map, "Nodes")) {
            (Some(names), _) => Candidates::Names(typed_raw(names, "ExtenderArgs.NodeNames")?),
            (None, Some(nodes)) => {
                let mut list = raw_fields(nodes.get().as_bytes(), "ExtenderArgs.Nodes")?;
                let items = match take_raw(&mut list, "items") {
                    Some(items) => typed_raw(items, "ExtenderArgs.Nodes.items")?,
                    None => Vec::new(),
                };
                Candidates::Nodes(items)
            }
            (None, None) => {
                return Err(WireError(
                    "ExtenderArgs: neither NodeNames nor Nodes is given".into(),
                ));
            }
        };
        Ok(ExtenderArgs { pod, candidates })
    }
}

/// `ExtenderFilterResult`, with the Go field names.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FilterResult {
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    #[serde(rename = "Error", skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl FilterResult {
    /// How many nodes the answer keeps.
    pub fn feasible_count(&self) -> usize {
        self.node_names.as_ref().map_or(0, Vec::len)
            + self.nodes.as_ref().map_or(0, |n| n.items.len())
    }
}

impl FilterResult {
    pub fn error(message: impl Into<String>) -> Self {
        FilterResult {
            error: message.into(),
            ..Default::default()
        }
    }
}

/// A `v1.NodeList` as kube-scheduler reads it back.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeList {
    pub items: Vec<Value>,
}

/// One entry of a `HostPriorityList`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPriority {
    #[serde(rename = "Host")]
    pub host: String,
    #[serde(rename = "Score")]
    pub score: i64,
}

/// `ExtenderBindingArgs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingArgs {
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    pub node: String,
}

impl BindingArgs {
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "ExtenderBindingArgs";
        let map = &body_object(body, WHAT)?;
        Ok(BindingArgs {
            pod_name: string(map, "PodName", WHAT)?,
            pod_namespace: string(map, "PodNamespace", WHAT)?,
            pod_uid: string(map, "PodUID", WHAT)?,
            node: string(map, "Node", WHAT)?,
        })
    }
}

/// `ExtenderBindingResult`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BindingResult {
    #[serde(rename = "Error", skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// `ExtenderPreemptionArgs`: the preemptor and, per candidate node, the
/// victims kube-scheduler proposes (by UID when `nodeCacheCapable`, else as
/// full pods; either way only UIDs matter to the ledger).
#[derive(Debug, Clone)]
pub struct PreemptionArgs {
    pub pod: Pod,
    pub victims: BTreeMap<String, NodeVictims>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeVictims {
    pub uids: Vec<String>,
    pub pdb_violations: i64,
}

impl PreemptionArgs {
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        const WHAT: &str = "ExtenderPreemptionArgs";
        let map = &body_object(body, WHAT)?;
        let pod = field(map, "Pod").ok_or_else(|| WireError(format!("{WHAT}: Pod is missing")))?;
        let pod: Pod = typed(pod, "ExtenderPreemptionArgs.Pod")?;
        check_pod_identity(&pod, "ExtenderPreemptionArgs.Pod")?;
        let (source, full) = match (
            field(map, "NodeNameToMetaVictims"),
            field(map, "NodeNameToVictims"),
        ) {
            (Some(meta), _) => (meta, false),
            (None, Some(full)) => (full, true),
            (None, None) => (&Value::Null, false),
        };
        let mut victims = BTreeMap::new();
        if let Some(nodes) = source.as_object() {
            for (node, v) in nodes {
                let what = format!("{WHAT}: victims of node {node}");
                let mut out = NodeVictims::default();
                if let Some(v) = v.as_object() {
                    if let Some(n) = field(v, "NumPDBViolations") {
                        out.pdb_violations = n.as_i64().ok_or_else(|| {
                            WireError(format!("{what}: NumPDBViolations is not an integer"))
                        })?;
                    }
                    let pods = field(v, "Pods")
                        .and_then(Value::as_array)
                        .map_or(&[][..], Vec::as_slice);
                    for p in pods {
                        let uid = if full {
                            p.pointer("/metadata/uid").and_then(Value::as_str)
                        } else {
                            p.as_object()
                                .and_then(|o| field(o, "UID"))
                                .and_then(Value::as_str)
                        };
                        match uid {
                            Some(uid) if !uid.is_empty() => out.uids.push(uid.to_string()),
                            _ => return Err(WireError(format!("{what}: a victim has no UID"))),
                        }
                    }
                } else if !v.is_null() {
                    return Err(WireError(format!("{what}: not an object")));
                }
                victims.insert(node.clone(), out);
            }
        }
        Ok(PreemptionArgs { pod, victims })
    }
}

/// `ExtenderPreemptionResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PreemptionResult {
    #[serde(rename = "NodeNameToMetaVictims")]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MetaVictims {
    #[serde(rename = "Pods")]
    pub pods: Vec<MetaPod>,
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetaPod {
    #[serde(rename = "UID")]
    pub uid: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extender_args_are_read_in_any_letter_case() {
        let go =
            br#"{"Pod":{"metadata":{"name":"p","uid":"u"}},"Nodes":null,"NodeNames":["a","b"]}"#;
        let lower = br#"{"pod":{"metadata":{"name":"p","uid":"u"}},"nodenames":["a","b"]}"#;
        for body in [&go[..], &lower[..]] {
            let args = ExtenderArgs::parse(body).unwrap();
            assert_eq!(args.pod.metadata.name.as_deref(), Some("p"));
            assert_eq!(args.candidates.names(), ["a", "b"]);
        }
        let full = br#"{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"n1"}}]}}"#;
        let args = ExtenderArgs::parse(full).unwrap();
        assert!(matches!(args.candidates, Candidates::Nodes(ref n) if n.len() == 1));
        assert_eq!(args.candidates.names(), ["n1"]);
    }

    #[test]
    fn take_raw_picks_the_field_that_field_reads() {
        let maps = [
            json!({"NodeNames": ["a"], "nodenames": ["b"]}),
            json!({"NodeNames": null, "nodenames": ["b"]}),
            json!({"NODENAMES": ["c"], "nodeNames": ["d"]}),
            json!({"nodenames": null}),
            json!({"Nodes": ["e"]}),
        ];
        for map in maps {
            let body = map.to_string();
            let Value::Object(map) = map else {
                unreachable!()
            };
            for name in ["NodeNames", "Nodes", "Pod"] {
                let mut raw = raw_fields(body.as_bytes(), "test").unwrap();
                let taken = take_raw(&mut raw, name)
                    .map(|v| serde_json::from_str::<Value>(v.get()).unwrap());
                assert_eq!(taken, field(&map, name).cloned(), "{name} in {map:?}");
            }
        }
    }

    #[test]
    fn bad_extender_args_say_what_is_wrong() {
        for (body, want) in [
            (&b"{"[..], "invalid JSON"),
            (b"[]", "not a JSON object"),
            (b"{}", "Pod is missing"),
            (br#"{"Pod":{}}"#, "neither NodeNames nor Nodes"),
            (br#"{"Pod":{"spec":7},"NodeNames":[]}"#, "ExtenderArgs.Pod"),
            (br#"{"Pod":{},"NodeNames":"a"}"#, "ExtenderArgs.NodeNames"),
        ] {
            let e = ExtenderArgs::parse(body).unwrap_err().to_string();
            assert!(e.contains(want), "{e} should contain {want}");
        }
    }

    #[test]
    fn filter_results_use_the_go_field_names() {
        let mut r = FilterResult {
            node_names: Some(vec!["a".into()]),
            ..Default::default()
        };
        r.failed_nodes
            .insert("b".into(), "CardInsufficientMemory".into());
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"NodeNames": ["a"], "FailedNodes": {"b": "CardInsufficientMemory"}, "FailedAndUnresolvableNodes": {}})
        );
    }

    #[test]
    fn binding_args_accept_any_case_and_name_missing_fields() {
        let b =
            BindingArgs::parse(br#"{"podname":"p","PODNAMESPACE":"ns","PodUID":"u","node":"n1"}"#)
                .unwrap();
        assert_eq!(
            b,
            BindingArgs {
                pod_name: "p".into(),
                pod_namespace: "ns".into(),
                pod_uid: "u".into(),
                node: "n1".into()
            }
        );
        let e =
            BindingArgs::parse(br#"{"PodName":"p","PodNamespace":"ns","PodUID":"u"}"#).unwrap_err();
        assert_eq!(e.to_string(), "ExtenderBindingArgs: Node is missing");
        let e = BindingArgs::parse(br#"{"PodName":1,"PodNamespace":"ns","PodUID":"u","Node":"n"}"#)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ExtenderBindingArgs: PodName is not a string"
        );
    }

    #[test]
    fn preemption_args_take_meta_or_full_victims() {
        let meta = br#"{"Pod":{},"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"a"},{"uid":"b"}],"NumPDBViolations":1}}}"#;
        let args = PreemptionArgs::parse(meta).unwrap();
        assert_eq!(
            args.victims["n1"],
            NodeVictims {
                uids: vec!["a".into(), "b".into()],
                pdb_violations: 1
            }
        );
        let full = br#"{"Pod":{},"NodeNameToVictims":{"n1":{"Pods":[{"metadata":{"uid":"a"}}]}}}"#;
        assert_eq!(
            PreemptionArgs::parse(full).unwrap().victims["n1"].uids,
            ["a"]
        );
        let bad = br#"{"Pod":{},"NodeNameToMetaVictims":{"n1":{"Pods":[{}]}}}"#;
        assert!(
            PreemptionArgs::parse(bad)
                .unwrap_err()
                .to_string()
                .contains("no UID")
        );
    }
}
