//! Cluster snapshots: multi-document YAML (or JSON) files of real Kubernetes
//! `Node`, `Pod`, `Namespace`, `ResourceQuota`, `PodDisruptionBudget` and `NodeResourceTopology`
//! objects, as `kubectl get
//! nodes,pods,namespaces,resourcequotas,noderesourcetopologies -A -o yaml`
//! writes them (a `List` is unpacked). Used by `gpugate simulate` and by `serve --cluster`
//! (standalone mode).
//!
//! Files are read as a stream, one object at a time: a 5,000-node,
//! 40,000-pod `kubectl -o yaml` dump is one `List` document of 27 MB, and
//! holding it whole (its parser events, then a tree of values, then the
//! typed objects) took 440 MB at once to build a view of 63 MB.
//! [`load_view`] feeds each object to the view as soon as it is read and
//! drops it; [`Snapshot::load`] keeps the typed objects (for `simulate`).
//!
//! The YAML parser is serde-saphyr's streaming deserializer, one document at
//! a time (documents are split at their `---` / `...` markers, which YAML
//! forbids inside content); YAML 1.2 booleans only (`yes` stays a string).

use std::io::BufRead;
use std::path::Path;

use k8s_openapi::api::core::v1::{Namespace, Node as K8sNode, Pod, ResourceQuota};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::de::{self, DeserializeSeed, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess};
use serde_json::Value;

use crate::engine::ClusterState;

use super::convert::pod_name;
use super::node_topology::NrtObject;
use super::view::ClusterView;

/// Objects read from a file, in file order.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<K8sNode>,
    pub pods: Vec<Pod>,
    pub namespaces: Vec<Namespace>,
    pub quotas: Vec<ResourceQuota>,
    /// PodDisruptionBudgets (weighed when preemption victims are chosen).
    pub budgets: Vec<PodDisruptionBudget>,
    /// NodeResourceTopology objects (either version).
    pub topologies: Vec<NrtObject>,
}

/// One object of a snapshot, as it is read.
#[derive(Debug, Clone)]
pub enum Object {
    Node(Box<K8sNode>),
    Pod(Box<Pod>),
    Namespace(Box<Namespace>),
    ResourceQuota(Box<ResourceQuota>),
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    NodeResourceTopology(Box<NrtObject>),
}

/// A snapshot file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}, document {document}: {problem}")]
    Document {
        origin: String,
        document: usize,
        problem: String,
    },
}

/// What did not make it into the engine's state, for a person to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateReport {
    /// Nodes without a readable GPU inventory (they reject every GPU pod),
    /// and nodes whose cordon list or pair scores could not be read.
    pub unregistered_nodes: Vec<String>,
    /// Pods whose allocation annotations cannot be read or name unknown
    /// nodes or GPUs: their usage is not counted.
    pub unaccounted_pods: Vec<String>,
}

impl Snapshot {
    pub fn load(path: &Path) -> Result<Self, SnapshotError> {
        let mut out = Snapshot::default();
        read_file(path, |o| out.push(o))?;
        Ok(out)
    }

    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, SnapshotError> {
        let mut out = Snapshot::default();
        read_objects(text.as_bytes(), origin, &mut |o| out.push(o))?;
        Ok(out)
    }

    fn push(&mut self, object: Object) {
        match object {
            Object::Node(n) => self.nodes.push(*n),
            Object::Pod(p) => self.pods.push(*p),
            Object::Namespace(n) => self.namespaces.push(*n),
            Object::ResourceQuota(q) => self.quotas.push(*q),
            Object::PodDisruptionBudget(b) => self.budgets.push(*b),
            Object::NodeResourceTopology(t) => self.topologies.push(*t),
        }
    }

    /// The cluster view: every node (registered or not), the allocation of
    /// every running pod that holds GPUs, namespaces and quotas; with what
    /// could not be counted.
    pub fn to_view(&self) -> (ClusterView, StateReport) {
        let mut view = ClusterView::new();
        let mut report = StateReport::default();
        for ns in &self.namespaces {
            view.upsert_namespace(ns);
        }
        for q in &self.quotas {
            view.upsert_quota(q);
        }
        for b in &self.budgets {
            view.upsert_budget(b);
        }
        for node in &self.nodes {
            report.unregistered_nodes.extend(view.upsert_node(node));
        }
        // A file has no CRDs: its NodeResourceTopology objects are all there is.
        view.set_node_topologies_served(true);
        for t in &self.topologies {
            add_topology(&mut view, &mut report, t);
        }
        view.node_topologies_listed();
        for (i, pod) in self.pods.iter().enumerate() {
            add_pod(&mut view, &mut report, pod, i);
        }
        view.settle_shown_takes();
        (view, report)
    }

    /// The engine's state alone (see [`Snapshot::to_view`]).
    pub fn to_state(&self) -> (ClusterState, StateReport) {
        let (view, report) = self.to_view();
        (view.into_state(), report)
    }
}

/// The cluster view of a snapshot file, exactly as [`Snapshot::to_view`]
/// builds it, without ever holding more than one object: the file is read
/// twice, first for namespaces, quotas and nodes (and to check every
/// object), then for pods in file order, so that pods meet every node
/// whatever the order of the file.
pub fn load_view(path: &Path) -> Result<(ClusterView, StateReport), SnapshotError> {
    let mut view = ClusterView::new();
    let mut report = StateReport::default();
    view.set_node_topologies_served(true);
    read_file(path, |object| match object {
        Object::Namespace(ns) => view.upsert_namespace(&ns),
        Object::ResourceQuota(q) => view.upsert_quota(&q),
        Object::PodDisruptionBudget(b) => view.upsert_budget(&b),
        Object::Node(node) => report.unregistered_nodes.extend(view.upsert_node(&node)),
        Object::NodeResourceTopology(t) => add_topology(&mut view, &mut report, &t),
        Object::Pod(_) => {}
    })?;
    view.node_topologies_listed();
    let mut i = 0;
    read_file(path, |object| {
        if let Object::Pod(pod) = object {
            add_pod(&mut view, &mut report, &pod, i);
            i += 1;
        }
    })?;
    view.settle_shown_takes();
    Ok((view, report))
}

/// A NodeResourceTopology into the view; what cannot be read of it is
/// reported with the node's problems.
fn add_topology(view: &mut ClusterView, report: &mut StateReport, t: &NrtObject) {
    let Some(node) = t.node() else {
        report
            .unregistered_nodes
            .push("a NodeResourceTopology without a name".to_string());
        return;
    };
    let (topology, problems) = t.topology();
    for problem in problems {
        report
            .unregistered_nodes
            .push(format!("{node}: NodeResourceTopology {problem}"));
    }
    view.upsert_node_topology(node, topology, t.written());
}

/// The `i`-th pod of a file into the view (the first of two with one UID
/// counts).
fn add_pod(view: &mut ClusterView, report: &mut StateReport, pod: &Pod, i: usize) {
    let key = snapshot_pod_key(pod, "cluster", i);
    if view.held_allocation(&key).is_some() {
        report.unaccounted_pods.push(format!(
            "pod {}: uid {key} appears twice; only the first counts",
            pod_name(pod)
        ));
    } else if let Some(problem) = view.upsert_pod(&key, pod) {
        report.unaccounted_pods.push(problem);
    }
}

fn read_file(path: &Path, mut on_object: impl FnMut(Object)) -> Result<(), SnapshotError> {
    let origin = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| SnapshotError::Read {
        path: origin.clone(),
        source,
    })?;
    read_objects(
        std::io::BufReader::with_capacity(256 * 1024, file),
        &origin,
        &mut on_object,
    )
}

/// Reads every object of a YAML or JSON stream in order, handing each to
/// `on_object` as soon as it is complete.
pub fn read_objects(
    input: impl BufRead,
    origin: &str,
    on_object: &mut dyn FnMut(Object),
) -> Result<(), SnapshotError> {
    let mut documents = Documents::new(input);
    let mut n = 0;
    loop {
        let first_line = match documents.next_document() {
            Ok(Some(first_line)) => first_line,
            Ok(None) => return Ok(()),
            Err(source) => {
                return Err(SnapshotError::Read {
                    path: origin.to_string(),
                    source,
                });
            }
        };
        n += 1;
        let err = |problem: String| SnapshotError::Document {
            origin: origin.to_string(),
            document: n,
            problem,
        };
        let mut ctx = Ctx {
            on_object: &mut *on_object,
            problem: None,
            kind: None,
        };
        let options = serde_saphyr::options! {
            with_snippet: false,
            // The operator's own file, streamed: no event or size budget.
            budget: None,
            strict_booleans: true,
        };
        let parsed = serde_saphyr::with_deserializer_from_reader_with_options(
            &mut documents,
            options,
            |de| {
                ObjectSeed {
                    ctx: &mut ctx,
                    item_kind: None,
                }
                .deserialize(de)
            },
        );
        if let Err(e) = parsed {
            if let Some(source) = documents.take_io_error() {
                return Err(SnapshotError::Read {
                    path: origin.to_string(),
                    source,
                });
            }
            return Err(err(match ctx.problem.take() {
                Some(problem) => problem,
                None => {
                    let text = file_located(&e, first_line);
                    match ctx.kind {
                        Some(kind) => format!("{kind}: {text}"),
                        None => text,
                    }
                }
            }));
        }
        documents
            .skip_rest()
            .map_err(|source| SnapshotError::Read {
                path: origin.to_string(),
                source,
            })?;
    }
}

/// A parser error with its line counted in the file, not the document.
fn file_located(e: &serde_saphyr::Error, first_line: u64) -> String {
    let text = e.to_string();
    let Some(at) = e.location().filter(|l| l.line() > 0) else {
        return text;
    };
    let suffix = format!(" at line {}, column {}", at.line(), at.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text);
    format!(
        "{message} at line {}, column {}",
        first_line + at.line() - 1,
        at.column()
    )
}

/// What the visitors share: where objects go, and a problem of meaning
/// (not of syntax) to report instead of the parser's error.
struct Ctx<'a> {
    on_object: &'a mut dyn FnMut(Object),
    problem: Option<String>,
    /// The kind whose object is being read, for its errors.
    kind: Option<&'static str>,
}

impl Ctx<'_> {
    fn fail<E: de::Error>(&mut self, problem: String) -> E {
        let e = E::custom(&problem);
        self.problem = Some(problem);
        e
    }
}

const ALLOWED: &str =
    "allowed Node, Pod, Namespace, ResourceQuota, PodDisruptionBudget, NodeResourceTopology, List";

/// One object (or list of objects) of the stream. `item_kind` is the
/// element kind of a typed list (`NodeList`), whose items may omit
/// `apiVersion` and `kind`.
struct ObjectSeed<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    item_kind: Option<&'static str>,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Fields before `kind` (`apiVersion` in kubectl's sorted output) are
        // kept as values and handed to the typed object first.
        let mut before: Vec<(String, Value)> = Vec::new();
        // Items of a list whose kind is not known yet (`items` sorts before
        // `kind`): those with their own kind are read at once, the others
        // kept until the list's kind names theirs.
        let mut pending: Option<Vec<Value>> = None;
        let kind = loop {
            let Some(key) = map.next_key::<String>()? else {
                break None;
            };
            match key.as_str() {
                "kind" => break Some(map.next_value::<String>()?),
                "items" => {
                    let kept = pending.get_or_insert_with(Vec::new);
                    map.next_value_seed(ItemsSeed {
                        ctx: &mut *self.ctx,
                        item_kind: None,
                        pending: Some(kept),
                    })?;
                }
                _ => before.push((key, map.next_value::<Value>()?)),
            }
        };
        let kind = match (kind, self.item_kind) {
            (Some(kind), _) => kind,
            (None, Some(item_kind)) => {
                // An item of a typed list without `kind`: read whole.
                if !before.iter().any(|(k, _)| k == "apiVersion") {
                    before.push(("apiVersion".into(), Value::from("v1")));
                }
                before.push(("kind".into(), Value::from(item_kind)));
                let object: Value =
                    Value::Object(before.into_iter().collect::<serde_json::Map<_, _>>());
                return typed_from_value(self.ctx, item_kind, object);
            }
            (None, None) => {
                return Err(self.ctx.fail(format!("object without kind: {ALLOWED}")));
            }
        };
        let element = match kind.as_str() {
            "Node"
            | "Pod"
            | "Namespace"
            | "ResourceQuota"
            | "PodDisruptionBudget"
            | "NodeResourceTopology"
                if pending.is_some() =>
            {
                return Err(self.ctx.fail(format!("{kind}: items is not a field of it")));
            }
            "Node" => return typed(self.ctx, "Node", kind_entry(before, &kind), map),
            "Pod" => return typed(self.ctx, "Pod", kind_entry(before, &kind), map),
            "Namespace" => return typed(self.ctx, "Namespace", kind_entry(before, &kind), map),
            "ResourceQuota" => {
                return typed(self.ctx, "ResourceQuota", kind_entry(before, &kind), map);
            }
            "PodDisruptionBudget" => {
                return typed(
                    self.ctx,
                    "PodDisruptionBudget",
                    kind_entry(before, &kind),
                    map,
                );
            }
            "NodeResourceTopology" => {
                return typed(
                    self.ctx,
                    "NodeResourceTopology",
                    kind_entry(before, &kind),
                    map,
                );
            }
            "List" => None,
            "NodeList" => Some("Node"),
            "PodList" => Some("Pod"),
            "NamespaceList" => Some("Namespace"),
            "ResourceQuotaList" => Some("ResourceQuota"),
            "PodDisruptionBudgetList" => Some("PodDisruptionBudget"),
            "NodeResourceTopologyList" => Some("NodeResourceTopology"),
            "" => return Err(self.ctx.fail(format!("object without kind: {ALLOWED}"))),
            other => {
                return Err(self
                    .ctx
                    .fail(format!("kind {other} is not supported: {ALLOWED}")));
            }
        };
        // A list: the items kept while its kind was unknown, then the rest
        // of the map.
        for item in pending.take().into_iter().flatten() {
            ObjectSeed {
                ctx: &mut *self.ctx,
                item_kind: element,
            }
            .deserialize(item)
            .map_err(de::Error::custom)?;
        }
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(ItemsSeed {
                    ctx: &mut *self.ctx,
                    item_kind: element,
                    pending: None,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// `kind` goes back among the fields read before it (typed objects check it).
fn kind_entry(mut before: Vec<(String, Value)>, kind: &str) -> Vec<(String, Value)> {
    before.push(("kind".into(), Value::from(kind)));
    before
}

/// Reads the rest of `map` as a `kind` object, the fields before it first.
fn typed<'de, A: MapAccess<'de>>(
    ctx: &mut Ctx<'_>,
    kind: &'static str,
    before: Vec<(String, Value)>,
    map: A,
) -> Result<(), A::Error> {
    ctx.kind = Some(kind);
    let d = de::value::MapAccessDeserializer::new(Prefixed {
        before: before.into_iter(),
        value: None,
        rest: map,
    });
    let object = match kind {
        "Node" => Object::Node(de::Deserialize::deserialize(d)?),
        "Pod" => Object::Pod(de::Deserialize::deserialize(d)?),
        "Namespace" => Object::Namespace(de::Deserialize::deserialize(d)?),
        "NodeResourceTopology" => Object::NodeResourceTopology(de::Deserialize::deserialize(d)?),
        "PodDisruptionBudget" => Object::PodDisruptionBudget(de::Deserialize::deserialize(d)?),
        _ => Object::ResourceQuota(de::Deserialize::deserialize(d)?),
    };
    ctx.kind = None;
    (ctx.on_object)(object);
    Ok(())
}

/// A kept item of a typed list as a `kind` object.
fn typed_from_value<E: de::Error>(
    ctx: &mut Ctx<'_>,
    kind: &'static str,
    v: Value,
) -> Result<(), E> {
    let object = match kind {
        "Node" => serde_json::from_value(v).map(Object::Node),
        "Pod" => serde_json::from_value(v).map(Object::Pod),
        "Namespace" => serde_json::from_value(v).map(Object::Namespace),
        "NodeResourceTopology" => serde_json::from_value(v).map(Object::NodeResourceTopology),
        "PodDisruptionBudget" => serde_json::from_value(v).map(Object::PodDisruptionBudget),
        _ => serde_json::from_value(v).map(Object::ResourceQuota),
    };
    match object {
        Ok(object) => {
            (ctx.on_object)(object);
            Ok(())
        }
        Err(e) => Err(ctx.fail(format!("{kind}: {e}"))),
    }
}

/// A map whose first entries were already read (as values).
struct Prefixed<A> {
    before: std::vec::IntoIter<(String, Value)>,
    value: Option<Value>,
    rest: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Prefixed<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        if let Some((key, value)) = self.before.next() {
            self.value = Some(value);
            return seed
                .deserialize(IntoDeserializer::<A::Error>::into_deserializer(key))
                .map(Some);
        }
        self.rest.next_key_seed(seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(value).map_err(de::Error::custom),
            None => self.rest.next_value_seed(seed),
        }
    }
}

/// The `items` of a list, each read and handed on before the next.
struct ItemsSeed<'c, 'a, 'p> {
    ctx: &'c mut Ctx<'a>,
    item_kind: Option<&'static str>,
    /// While the list's kind is unknown: where items without a kind go.
    pending: Option<&'p mut Vec<Value>>,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for ItemsSeed<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of Kubernetes objects")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        match self.pending.take() {
            None => {
                while seq
                    .next_element_seed(ObjectSeed {
                        ctx: &mut *self.ctx,
                        item_kind: self.item_kind,
                    })?
                    .is_some()
                {}
            }
            Some(pending) => {
                // The list's kind comes later: items that name their own
                // kind are read now, the others kept.
                while let Some(item) = seq.next_element_seed(MaybeKind {
                    ctx: &mut *self.ctx,
                })? {
                    if let Some(item) = item {
                        pending.push(item);
                    }
                }
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.ctx.fail("items is not a list".into()))
    }
}

/// An item of a list of unknown kind: handed on when it names its kind,
/// returned whole when it does not.
struct MaybeKind<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
}

impl<'de> DeserializeSeed<'de> for MaybeKind<'_, '_> {
    type Value = Option<Value>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for MaybeKind<'_, '_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let mut before: Vec<(String, Value)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "kind" {
                let kind = map.next_value::<String>()?;
                // Hand the rest to the object reader, as if read whole.
                let prefixed = Prefixed {
                    before: kind_entry(before, &kind).into_iter(),
                    value: None,
                    rest: map,
                };
                ObjectSeed {
                    ctx: self.ctx,
                    item_kind: None,
                }
                .visit_map(prefixed)?;
                return Ok(None);
            }
            before.push((key, map.next_value::<Value>()?));
        }
        Ok(Some(Value::Object(before.into_iter().collect())))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<Value>, E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<Value>, E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<Value>, E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<Value>, E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<Value>, E> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Option<Value>, A::Error> {
        Err(self.ctx.fail("not a Kubernetes object".into()))
    }
}

/// The documents of a YAML stream, one at a time, as a reader that ends
/// where the current document ends. YAML forbids a line starting with
/// `---` or `...` (then a space or the line's end) inside content, so those
/// lines are where documents begin and end.
struct Documents<R> {
    input: R,
    /// The current line, from `at` on still to be read.
    line: Vec<u8>,
    at: usize,
    /// Lines read so far (1-based number of `line`).
    line_no: u64,
    /// The current document ended: `read` returns EOF.
    ended: bool,
    /// The next document begins with the line in `line`.
    carried: bool,
    eof: bool,
    io_error: Option<std::io::Error>,
}

#[derive(PartialEq)]
enum Marker {
    Start,
    End,
    None,
}

fn marker(line: &[u8]) -> Marker {
    let boundary = |rest: &[u8]| rest.first().is_none_or(|c| c.is_ascii_whitespace());
    if let Some(rest) = line.strip_prefix(b"---")
        && boundary(rest)
    {
        Marker::Start
    } else if let Some(rest) = line.strip_prefix(b"...")
        && boundary(rest)
    {
        Marker::End
    } else {
        Marker::None
    }
}

/// Whether a line is content (not blank, a comment or a directive).
fn is_content(line: &[u8]) -> bool {
    let t = line.trim_ascii_start();
    !(t.is_empty() || t.starts_with(b"#") || line.starts_with(b"%"))
}

impl<R: BufRead> Documents<R> {
    fn new(input: R) -> Self {
        Documents {
            input,
            line: Vec::new(),
            at: 0,
            line_no: 0,
            ended: true,
            carried: false,
            eof: false,
            io_error: None,
        }
    }

    fn next_line(&mut self) -> std::io::Result<bool> {
        self.line.clear();
        self.at = 0;
        if self.eof {
            return Ok(false);
        }
        if self.input.read_until(b'\n', &mut self.line)? == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.line_no += 1;
        Ok(true)
    }

    /// Moves to the next document that has a marker or content; returns the
    /// line it starts on (`None` at the end of the stream). Blank lines,
    /// comments and directives before it are skipped.
    fn next_document(&mut self) -> std::io::Result<Option<u64>> {
        if !self.carried {
            loop {
                if !self.next_line()? {
                    return Ok(None);
                }
                match marker(&self.line) {
                    Marker::Start => break,
                    Marker::End => continue,
                    Marker::None if is_content(&self.line) => break,
                    Marker::None => continue,
                }
            }
        }
        self.carried = false;
        self.ended = false;
        Ok(Some(self.line_no))
    }

    /// Reads what the parser left of the current document (nothing, unless
    /// it stopped early).
    fn skip_rest(&mut self) -> std::io::Result<()> {
        let mut sink = [0u8; 4096];
        while std::io::Read::read(self, &mut sink)? > 0 {}
        Ok(())
    }

    fn take_io_error(&mut self) -> Option<std::io::Error> {
        self.io_error.take()
    }
}

impl<R: BufRead> std::io::Read for Documents<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.ended {
                return Ok(0);
            }
            if self.at < self.line.len() {
                let n = buf.len().min(self.line.len() - self.at);
                buf[..n].copy_from_slice(&self.line[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            match self.next_line() {
                Ok(true) => {}
                Ok(false) => {
                    self.ended = true;
                    return Ok(0);
                }
                Err(e) => {
                    let copy = std::io::Error::new(e.kind(), e.to_string());
                    self.io_error = Some(e);
                    return Err(copy);
                }
            }
            match marker(&self.line) {
                Marker::Start => {
                    // The next document's first line.
                    self.carried = true;
                    self.ended = true;
                    return Ok(0);
                }
                Marker::End => {
                    self.line.clear();
                    self.ended = true;
                    return Ok(0);
                }
                Marker::None => {}
            }
        }
    }
}

/// The ledger key of a pod read from a file: its UID, or its place in the
/// file (`<file>#<n>`) when it has none, so that two pods without UIDs (or
/// with only `generateName`) never share one.
pub fn snapshot_pod_key(pod: &Pod, file: &str, index: usize) -> String {
    match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => format!("{file}#{}", index + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = r#"{"id":"GPU-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}"#;

    fn kinds(s: &Snapshot) -> (usize, usize, usize, usize) {
        (
            s.nodes.len(),
            s.pods.len(),
            s.namespaces.len(),
            s.quotas.len(),
        )
    }

    fn problem(text: &str) -> String {
        Snapshot::from_yaml(text, "f.yaml").unwrap_err().to_string()
    }

    #[test]
    fn kubectl_lists_typed_lists_and_documents() {
        // kubectl's sorted keys: `items` before `kind`.
        let list = "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n1\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p\n    namespace: ns\n  spec:\n    containers:\n    - name: c\nkind: List\nmetadata:\n  resourceVersion: \"\"\n";
        assert_eq!(
            kinds(&Snapshot::from_yaml(list, "f").unwrap()),
            (1, 1, 0, 0)
        );
        // A typed list: items without kind, named by the list after them.
        let typed = "apiVersion: v1\nitems:\n- metadata:\n    name: a\n- metadata:\n    name: b\nkind: NamespaceList\n";
        let s = Snapshot::from_yaml(typed, "f").unwrap();
        assert_eq!(kinds(&s), (0, 0, 2, 0));
        assert_eq!(s.namespaces[1].metadata.name.as_deref(), Some("b"));
        let typed_first = "kind: NodeList\nitems:\n- metadata: {name: a}\n";
        assert_eq!(
            kinds(&Snapshot::from_yaml(typed_first, "f").unwrap()),
            (1, 0, 0, 0)
        );
        // Documents, empty ones, comments, an explicit end, a nested list.
        let docs = "# dump\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n...\n# between\n--- {apiVersion: v1, kind: ResourceQuota, metadata: {name: q, namespace: a}}\n---\nkind: List\nitems:\n- kind: List\n  items:\n  - {apiVersion: v1, kind: Namespace, metadata: {name: b}}\n- ~\n";
        assert_eq!(
            kinds(&Snapshot::from_yaml(docs, "f").unwrap()),
            (0, 0, 2, 1)
        );
        // JSON, as `kubectl -o json` writes it.
        let json = format!(
            r#"{{"apiVersion":"v1","items":[{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"n1","annotations":{{"hami.io/node-nvidia-register":{reg:?}}}}}}}],"kind":"List"}}"#,
            reg = format!("[{NODE}]")
        );
        let s = Snapshot::from_yaml(&json, "f").unwrap();
        assert_eq!(kinds(&s), (1, 0, 0, 0));
        assert!(s.to_view().1.unregistered_nodes.is_empty());
        // Nothing at all.
        assert_eq!(kinds(&Snapshot::from_yaml("", "f").unwrap()), (0, 0, 0, 0));
        assert_eq!(
            kinds(&Snapshot::from_yaml("# x\n", "f").unwrap()),
            (0, 0, 0, 0)
        );
    }

    /// `kubectl get noderesourcetopologies -o yaml` beside the nodes: the
    /// view knows each node's NUMA zones, in both load paths.
    #[test]
    fn node_resource_topologies_are_read() {
        let text = "kind: NodeResourceTopologyList\napiVersion: topology.node.k8s.io/v1alpha2\nitems:\n- metadata: {name: n1}\n  attributes: [{name: topologyManagerPolicy, value: single-numa-node}]\n  zones:\n  - {name: node-0, type: Node, resources: [{name: cpu, capacity: '8', allocatable: '8', available: '6'}]}\n---\napiVersion: topology.node.k8s.io/v1alpha1\nkind: NodeResourceTopology\nmetadata: {name: n2}\ntopologyPolicies: [SingleNUMANodePodLevel]\nzones:\n- {name: node-3, type: Node, resources: [{name: memory, capacity: 1Gi, allocatable: 1Gi, available: bad}]}\n";
        let s = Snapshot::from_yaml(text, "f").unwrap();
        assert_eq!(s.topologies.len(), 2);
        let (view, report) = s.to_view();
        let n1 = view.node_topology("n1").unwrap();
        assert_eq!(
            n1.policy,
            crate::engine::numa::TopologyPolicy::SingleNumaNode
        );
        assert_eq!(n1.zones[0].available.cpu_milli, 6000);
        assert_eq!(
            view.node_topology("n2").unwrap().scope,
            crate::engine::numa::TopologyScope::Pod
        );
        assert_eq!(report.unregistered_nodes.len(), 1, "{report:?}");
        assert!(
            report.unregistered_nodes[0]
                .starts_with("n2: NodeResourceTopology zone node-3 resource memory"),
            "{report:?}"
        );
        let dir = std::env::temp_dir().join(format!("gpugate-nrt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(&path, text).unwrap();
        let (streamed, _) = load_view(&path).unwrap();
        assert_eq!(streamed.node_topology("n1"), view.node_topology("n1"));
        assert_eq!(streamed.counts().node_topologies, Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn strings_stay_strings() {
        // Typed fields read the text: label values that look like YAML 1.1
        // booleans or numbers are strings.
        let s = Snapshot::from_yaml(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  labels: {x: yes, y: \"true\", z: 0123}\n",
            "f",
        )
        .unwrap();
        let labels = s.namespaces[0].metadata.labels.clone().unwrap();
        assert_eq!(labels["x"], "yes");
        assert_eq!(labels["y"], "true");
        assert_eq!(labels["z"], "0123");
    }

    #[test]
    fn problems_name_the_document_and_the_line_in_the_file() {
        let e = problem(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\n",
        );
        assert_eq!(
            e,
            "f.yaml, document 2: kind Secret is not supported: allowed Node, Pod, Namespace, ResourceQuota, PodDisruptionBudget, NodeResourceTopology, List"
        );
        let e = problem("---\nmetadata: {name: a}\n");
        assert_eq!(
            e,
            "f.yaml, document 1: object without kind: allowed Node, Pod, Namespace, ResourceQuota, PodDisruptionBudget, NodeResourceTopology, List"
        );
        assert_eq!(
            problem("- a\n- b\n"),
            "f.yaml, document 1: not a Kubernetes object"
        );
        let e = problem("kind: List\nitems:\n- {kind: Namespace}\n- {kind: Pod, spec: 5}\n---\n");
        assert!(e.starts_with("f.yaml, document 1: Pod: "), "{e}");
        let e = problem("items:\n- metadata: {name: 5}\n- spec: 5\nkind: PodList\n");
        assert!(e.starts_with("f.yaml, document 1: Pod: "), "{e}");
        // A syntax error on the file's line 6 (the second document's 3rd).
        let e = problem("kind: List\nitems: []\n---\n# c\napiVersion: v1\nkind: [Pod\n");
        assert!(e.starts_with("f.yaml, document 2: "), "{e}");
        assert!(e.contains("line 6") || e.contains("line 7"), "{e}");
        let e = problem("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [a]\n");
        assert!(e.starts_with("f.yaml, document 1: Pod: "), "{e}");
        assert!(e.contains("line 4"), "{e}");
    }

    #[test]
    fn the_streamed_view_is_the_view_of_the_whole_file() {
        // Pods before their nodes, a pod twice, a node twice.
        let pod = |name: &str, uid: &str, node: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ns\n  uid: {uid}\n  annotations:\n    hami.io/vgpu-node: {node}\n    hami.io/vgpu-devices-allocated: \"GPU-0,NVIDIA,1000,10:;\"\nspec:\n  containers:\n  - name: c\n"
            )
        };
        let node = |name: &str| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  annotations:\n    hami.io/node-nvidia-register: '[{NODE}]'\n"
            )
        };
        let text = [
            pod("a", "u1", "n1"),
            pod("b", "u2", "n2"),
            node("n1"),
            pod("c", "u1", "n1"),
            node("n2"),
            node("n1"),
            pod("d", "u3", "gone"),
        ]
        .join("---\n");
        let dir = std::env::temp_dir().join(format!("gpugate-snapshot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(&path, &text).unwrap();
        let (streamed, streamed_report) = load_view(&path).unwrap();
        let (whole, whole_report) = Snapshot::load(&path).unwrap().to_view();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(streamed_report, whole_report);
        assert_eq!(
            streamed_report.unaccounted_pods.len(),
            2,
            "{streamed_report:?}"
        );
        assert_eq!(streamed.counts(), whole.counts());
        assert_eq!(streamed.unaccounted(), whole.unaccounted());
        for n in ["n1", "n2"] {
            assert_eq!(streamed.state().node(n), whole.state().node(n));
        }
        assert_eq!(streamed.state().node("n1").unwrap().usage[0].mem_mib, 1000);
    }
}
