//! The webhooks' view of a Pod: only the fields they read, borrowed from
//! the request body. Everything else in the object is skipped unread, so
//! a type error in a field gpugate never reads no longer refuses the pod
//! (k8s-openapi's full `Pod` checked every field); the fields read are
//! checked as k8s-openapi checks them.
//!
//! A container's `env` is kept as raw JSON and read only when the webhook
//! adds a variable: it is usually the longest list in a pod, and reading
//! every entry's name cost about as much as the rest of the review.

use std::borrow::Cow;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess};

use crate::engine::annotations::Annotations;
use crate::engine::request::ContainerSpec;

use super::lean::{ObjectFields, Pairs, Quantities, RawJson, Slot, Text, deserialize_object};

/// A Pod as the webhooks read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodView<'a> {
    pub metadata: Slot<ObjectMetaView<'a>>,
    pub spec: Option<PodSpecView<'a>>,
}

/// `metadata` of a Pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectMetaView<'a> {
    pub name: Option<Cow<'a, str>>,
    pub namespace: Option<Cow<'a, str>>,
    pub annotations: Slot<Pairs<'a>>,
    pub labels: Option<Pairs<'a>>,
}

/// `spec` of a Pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSpecView<'a> {
    pub containers: Vec<ContainerView<'a>>,
    pub init_containers: Vec<ContainerView<'a>>,
    pub scheduler_name: Slot<Cow<'a, str>>,
    pub node_name: Option<Cow<'a, str>>,
    /// Only its presence matters: an explicit `null` is left alone.
    pub runtime_class_name: Slot<Cow<'a, str>>,
    /// What ResourceQuota scopes read, when the pod has any of it (boxed:
    /// most pods have none, and a review's object stays small).
    pub quota_fields: Option<Box<QuotaFieldsView<'a>>>,
}

/// The fields of a PodSpec that ResourceQuota scopes read (see
/// [`PodView::scope_facts`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaFieldsView<'a> {
    pub priority_class_name: Option<Cow<'a, str>>,
    pub active_deadline_seconds: Option<i64>,
    /// Pod-level `resources`.
    pub resources: Slot<ResourcesView<'a>>,
    /// `affinity`, unread until a pod's facts are asked for.
    pub affinity: Slot<RawJson<'a>>,
}

/// One container (init or app).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerView<'a> {
    pub name: Cow<'a, str>,
    /// `restartPolicy`: `Always` on an init container makes it a sidecar.
    pub restart_policy: Option<Cow<'a, str>>,
    /// `env`, unread (see [`ContainerView::env_vars`]).
    pub env: Slot<RawJson<'a>>,
    /// `envFrom`, unread (see [`ContainerView::env_from_prefixes`]).
    pub env_from: Slot<RawJson<'a>>,
    pub resources: Slot<ResourcesView<'a>>,
    pub privileged: bool,
}

/// `resources` of a container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourcesView<'a> {
    pub limits: Slot<Quantities<'a>>,
    pub requests: Option<Quantities<'a>>,
}

/// One `env` entry: its name, and its value when written literally.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvVarView<'a> {
    pub name: Cow<'a, str>,
    /// `value`; `None` when absent (empty, or given by `valueFrom`).
    pub value: Option<Cow<'a, str>>,
    /// Whether the value comes from `valueFrom` (unknown at admission).
    pub value_from: bool,
}

/// One `envFrom` entry; only its prefix is read.
#[derive(Debug, Clone, Default, PartialEq)]
struct EnvFromView<'a> {
    prefix: Option<Cow<'a, str>>,
}

/// `securityContext` of a container; only `privileged` is read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct SecurityContextView {
    privileged: Option<bool>,
}

impl<'a> PodView<'a> {
    /// Reads a Pod from the raw object's JSON text.
    pub fn from_json(text: &'a str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(unreadable)
    }

    /// `judge` of the Pod in a parsed JSON value, or `invalid` of why it
    /// cannot be read (tests and tools; the webhooks read the request body
    /// directly).
    pub fn judge_value<R>(
        raw: &serde_json::Value,
        judge: impl FnOnce(&PodView<'_>) -> R,
        invalid: impl FnOnce(String) -> R,
    ) -> R {
        let text = raw.to_string();
        match PodView::from_json(&text) {
            Ok(pod) => judge(&pod),
            Err(message) => invalid(message),
        }
    }

    /// `metadata.namespace`, when set.
    pub fn namespace(&self) -> Option<&str> {
        self.metadata.get()?.namespace.as_deref()
    }

    /// `metadata.annotations`, when it is an object.
    pub fn annotations(&self) -> Option<&Pairs<'a>> {
        self.metadata.get()?.annotations.get()
    }

    /// `metadata.labels`, when set.
    pub fn labels(&self) -> Option<&Pairs<'a>> {
        self.metadata.get()?.labels.as_ref()
    }

    /// What ResourceQuota scopes see of the pod, as the quota controller
    /// reads it (`cluster::convert::pod_scope_facts` reads a full Pod the
    /// same way): a new pod has no `status.qosClass`, so BestEffort is
    /// computed from CPU and memory (pod-level resources first).
    pub fn scope_facts(&self) -> Result<crate::engine::ScopeFacts, String> {
        use crate::engine::quantity::is_positive;
        let Some(spec) = self.spec.as_ref() else {
            return Ok(crate::engine::ScopeFacts {
                best_effort: true,
                ..Default::default()
            });
        };
        let positive = |r: &ResourcesView<'_>| {
            let limits = r.limits.get().map(|q| &q.0);
            [limits, r.requests.as_ref().map(|q| &q.0)]
                .into_iter()
                .flatten()
                .any(|l| {
                    ["cpu", "memory"]
                        .iter()
                        .any(|k| l.get(k).is_some_and(is_positive))
                })
        };
        let fields = spec.quota_fields.as_deref();
        let best_effort = match fields.and_then(|f| f.resources.get()) {
            Some(pod_level) => !positive(pod_level),
            None => !spec
                .all_containers()
                .filter_map(|c| c.resources.get())
                .any(positive),
        };
        let cross_namespace_affinity = match fields.and_then(|f| f.affinity.get()) {
            None => false,
            Some(raw) => serde_json::from_str::<AffinityView>(raw.0.get())
                .map_err(|e| format!("cannot read the Pod: affinity: {e}"))?
                .names_other_namespaces(),
        };
        Ok(crate::engine::ScopeFacts {
            priority_class: fields
                .and_then(|f| f.priority_class_name.as_deref())
                .filter(|c| !c.is_empty())
                .map(str::to_string),
            terminating: fields
                .and_then(|f| f.active_deadline_seconds)
                .is_some_and(|d| d >= 0),
            best_effort,
            cross_namespace_affinity,
        })
    }
}

/// `affinity`, as far as quota scopes read it: the pod (anti-)affinity
/// terms' `namespaces` and `namespaceSelector`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffinityView {
    #[serde(default)]
    pod_affinity: Option<PodAffinityView>,
    #[serde(default)]
    pod_anti_affinity: Option<PodAffinityView>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodAffinityView {
    #[serde(default)]
    required_during_scheduling_ignored_during_execution: Option<Vec<AffinityTermView>>,
    #[serde(default)]
    preferred_during_scheduling_ignored_during_execution: Option<Vec<WeightedTermView>>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WeightedTermView {
    #[serde(default)]
    pod_affinity_term: AffinityTermView,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffinityTermView {
    #[serde(default)]
    namespaces: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    namespace_selector: Option<IgnoredAny>,
}

impl AffinityView {
    /// A term names other namespaces (Kubernetes' `usesCrossNamespacePodAffinity`).
    fn names_other_namespaces(&self) -> bool {
        let term = |t: &AffinityTermView| {
            t.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || t.namespace_selector.is_some()
        };
        [&self.pod_affinity, &self.pod_anti_affinity]
            .into_iter()
            .flatten()
            .any(|p| {
                p.required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .any(term)
                    || p.preferred_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                        .any(|w| term(&w.pod_affinity_term))
            })
    }
}

/// The answer's message for an object that is not a readable Pod.
fn unreadable(e: serde_json::Error) -> String {
    format!("cannot read the Pod: {e}")
}

impl Annotations for PodView<'_> {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations()?.get(key)
    }
}

impl PodSpecView<'_> {
    /// Init containers, then app containers.
    pub fn all_containers(&self) -> impl Iterator<Item = &ContainerView<'_>> + Clone {
        self.init_containers.iter().chain(&self.containers)
    }
}

impl<'a> ContainerView<'a> {
    /// The entries of `env`, in order (none when it is absent or `null`).
    pub fn env_vars(&self) -> Result<Vec<EnvVarView<'a>>, String> {
        let Slot::Set(raw) = self.env else {
            return Ok(Vec::new());
        };
        serde_json::from_str(raw.0.get())
            .map_err(|e| format!("cannot read the Pod: container {:?}, env: {e}", self.name))
    }

    /// The names in `env`, in order (none when it is absent or `null`).
    pub fn env_names(&self) -> Result<Vec<Cow<'a, str>>, String> {
        Ok(self.env_vars()?.into_iter().map(|e| e.name).collect())
    }

    /// The `prefix` of each `envFrom` entry (`""` when it has none).
    pub fn env_from_prefixes(&self) -> Result<Vec<Cow<'a, str>>, String> {
        let Slot::Set(raw) = self.env_from else {
            return Ok(Vec::new());
        };
        let list: Vec<EnvFromView<'a>> = serde_json::from_str(raw.0.get()).map_err(|e| {
            format!(
                "cannot read the Pod: container {:?}, envFrom: {e}",
                self.name
            )
        })?;
        Ok(list
            .into_iter()
            .map(|e| e.prefix.unwrap_or_default())
            .collect())
    }

    /// Whether `resources.limits` has `name`, whatever its value.
    pub fn has_limit(&self, name: &str) -> bool {
        self.limits().is_some_and(|l| l.contains_key(name))
    }

    fn limits(&self) -> Option<&Pairs<'_>> {
        Some(&self.resources.get()?.limits.get()?.0)
    }
}

impl ContainerSpec for ContainerView<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn restart_policy(&self) -> Option<&str> {
        self.restart_policy.as_deref()
    }

    fn limit(&self, resource: &str) -> Option<&str> {
        self.limits()?.get(resource)
    }

    fn request(&self, resource: &str) -> Option<&str> {
        self.resources.get()?.requests.as_ref()?.0.get(resource)
    }

    fn resource_names(&self) -> Vec<&str> {
        let Some(r) = self.resources.get() else {
            return Vec::new();
        };
        r.limits
            .get()
            .map(|l| &l.0)
            .into_iter()
            .chain(r.requests.as_ref().map(|q| &q.0))
            .flat_map(|p| p.0.iter().map(|(k, _)| k.as_ref()))
            .collect()
    }
}

/// An optional string member (`null` reads as unset).
fn text<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0))
}

/// A member holding a constant (`apiVersion: v1`, `kind: Pod`): k8s-openapi
/// refuses any other value.
fn constant<'de, A: MapAccess<'de>>(map: &mut A, expected: &'static str) -> Result<(), A::Error> {
    let value = map.next_value::<Text<'de>>()?.0;
    if value == expected {
        Ok(())
    } else {
        Err(de::Error::invalid_value(
            de::Unexpected::Str(&value),
            &expected,
        ))
    }
}

impl<'de> ObjectFields<'de> for PodView<'de> {
    const NAME: &'static str = "Pod";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "apiVersion" => constant(map, "v1")?,
            "kind" => constant(map, "Pod")?,
            "metadata" => self.metadata = map.next_value()?,
            "spec" => self.spec = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> ObjectFields<'de> for ObjectMetaView<'de> {
    const NAME: &'static str = "ObjectMeta";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "name" => self.name = text(map)?,
            "namespace" => self.namespace = text(map)?,
            "annotations" => self.annotations = map.next_value()?,
            "labels" => self.labels = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> ObjectFields<'de> for PodSpecView<'de> {
    const NAME: &'static str = "PodSpec";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "containers" => self.containers = map.next_value::<Option<_>>()?.unwrap_or_default(),
            "initContainers" => {
                self.init_containers = map.next_value::<Option<_>>()?.unwrap_or_default();
            }
            "schedulerName" => self.scheduler_name = slot_text(map)?,
            "nodeName" => self.node_name = text(map)?,
            "runtimeClassName" => self.runtime_class_name = slot_text(map)?,
            "priorityClassName" => self.quota_fields().priority_class_name = text(map)?,
            "activeDeadlineSeconds" => {
                self.quota_fields().active_deadline_seconds = map.next_value()?;
            }
            "resources" => self.quota_fields().resources = map.next_value()?,
            "affinity" => self.quota_fields().affinity = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'a> PodSpecView<'a> {
    /// The quota scope fields, made on the first one read.
    fn quota_fields(&mut self) -> &mut QuotaFieldsView<'a> {
        self.quota_fields.get_or_insert_default()
    }
}

fn slot_text<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Slot<Cow<'de, str>>, A::Error> {
    Ok(match map.next_value::<Slot<Text<'de>>>()? {
        Slot::Absent => Slot::Absent,
        Slot::Null => Slot::Null,
        Slot::Set(t) => Slot::Set(t.0),
    })
}

impl<'de> ObjectFields<'de> for ContainerView<'de> {
    const NAME: &'static str = "Container";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "name" => self.name = text(map)?.unwrap_or_default(),
            "restartPolicy" => self.restart_policy = text(map)?,
            "env" => self.env = map.next_value()?,
            "envFrom" => self.env_from = map.next_value()?,
            "resources" => self.resources = map.next_value()?,
            "securityContext" => {
                self.privileged = map
                    .next_value::<Option<SecurityContextView>>()?
                    .and_then(|s| s.privileged)
                    .unwrap_or(false);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> ObjectFields<'de> for ResourcesView<'de> {
    const NAME: &'static str = "ResourceRequirements";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "limits" => self.limits = map.next_value()?,
            "requests" => self.requests = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> ObjectFields<'de> for EnvVarView<'de> {
    const NAME: &'static str = "EnvVar";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "name" => self.name = text(map)?.unwrap_or_default(),
            "value" => self.value = text(map)?,
            "valueFrom" => {
                self.value_from = map.next_value::<Option<IgnoredAny>>()?.is_some();
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl<'de> ObjectFields<'de> for EnvFromView<'de> {
    const NAME: &'static str = "EnvFromSource";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if key != "prefix" {
            return Ok(false);
        }
        self.prefix = text(map)?;
        Ok(true)
    }
}

impl<'de> ObjectFields<'de> for SecurityContextView {
    const NAME: &'static str = "SecurityContext";

    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if key != "privileged" {
            return Ok(false);
        }
        self.privileged = map.next_value()?;
        Ok(true)
    }
}

/// `Deserialize` through [`ObjectFields`] for each view type.
macro_rules! deserialize_as_object {
    ($($view:ident $(<$lt:lifetime>)?),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $view $(<$lt>)? {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                deserialize_object(d)
            }
        }
    )*};
}

deserialize_as_object!(
    PodView<'de>,
    ObjectMetaView<'de>,
    PodSpecView<'de>,
    ContainerView<'de>,
    ResourcesView<'de>,
    EnvVarView<'de>,
    EnvFromView<'de>,
    SecurityContextView,
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_the_webhooks_need_and_skips_the_rest() {
        let raw = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "annotations": {"a": "1"},
                         "labels": {"l": "x"}, "ownerReferences": [{"weird": 1}]},
            "spec": {"schedulerName": null, "nodeName": "n",
                     "containers": [{"name": "c", "image": 5, "env": [{"name": "E", "value": "v"}],
                                     "securityContext": {"privileged": true},
                                     "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "1"}}}]},
            "status": "anything"
        });
        let text = raw.to_string();
        let pod = PodView::from_json(&text).unwrap();
        assert_eq!(pod.namespace(), Some("ml"));
        assert_eq!(pod.annotation("a"), Some("1"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.scheduler_name, Slot::Null);
        assert_eq!(spec.runtime_class_name, Slot::Absent);
        let c = &spec.containers[0];
        assert!(c.privileged);
        assert_eq!(c.env_names().unwrap(), ["E"]);
        assert_eq!(c.quantity("nvidia.com/gpu"), Some("1"));
        assert_eq!(c.quantity("cpu"), Some("1"));
    }

    #[test]
    fn fields_read_are_checked_as_k8s_openapi_checks_them() {
        for bad in [
            json!("a string"),
            json!([1, 2]),
            json!({"apiVersion": "apps/v1"}),
            json!({"kind": 3}),
            json!({"spec": {"containers": "nope"}}),
            json!({"spec": {"containers": [["c"]]}}),
            json!({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": [1]}}}]}}),
            json!({"metadata": {"annotations": {"a": 1}}}),
            json!({"spec": {"containers": [{"securityContext": {"privileged": "yes"}}]}}),
        ] {
            let text = bad.to_string();
            let e = PodView::from_json(&text).unwrap_err();
            assert!(e.starts_with("cannot read the Pod: "), "{bad}: {e}");
        }
    }

    #[test]
    fn env_is_read_when_asked_for() {
        let text = json!({"spec": {"containers": [{"name": "c", "env": [{"value": "v"}, 3]}]}})
            .to_string();
        let pod = PodView::from_json(&text).unwrap();
        let e = pod.spec.unwrap().containers[0].env_names().unwrap_err();
        assert!(
            e.starts_with("cannot read the Pod: container \"c\", env: invalid type"),
            "{e}"
        );
    }
}
