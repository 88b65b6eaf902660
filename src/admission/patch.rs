//! JSON Patch operations for what the mutating webhook adds to a pod, built
//! from the shape of the raw object rather than by diffing it against an
//! edited copy.
//!
//! The operations are exactly those `json_patch::diff(raw, edited)` listed
//! (gpugate computed patches that way before): a member missing from an
//! object is added, a `null` is replaced, a new member of a missing or
//! `null` parent comes inside one operation for the whole parent, appended
//! array items are added by index, and operations come in diff's order
//! (object members by key, array elements by index).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::lean::Slot;
use super::pod::{ContainerView, PodView};

/// What the mutating webhook adds to a pod; every addition is known to be
/// missing from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodEdits<'c> {
    /// New annotations, by key.
    pub annotations: BTreeMap<&'c str, String>,
    /// Additions to `spec.initContainers[i]`, by index.
    pub init_containers: BTreeMap<usize, ContainerEdits<'c>>,
    /// Additions to `spec.containers[i]`, by index.
    pub containers: BTreeMap<usize, ContainerEdits<'c>>,
    /// `spec.runtimeClassName`, to add.
    pub runtime_class_name: Option<&'c str>,
    /// `spec.schedulerName`, to add or to replace.
    pub scheduler_name: Option<&'c str>,
}

/// What the mutating webhook adds to one container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerEdits<'c> {
    /// New `resources.limits`, by resource name (a value the container
    /// has under that name is replaced).
    pub limits: BTreeMap<&'c str, String>,
    /// New `resources.requests`, likewise.
    pub requests: BTreeMap<&'c str, String>,
    /// New `env` entries (name, value), in the order they are appended.
    pub env: Vec<(&'c str, String)>,
    /// Entries in the container's env list before the new ones.
    pub env_len: usize,
}

impl ContainerEdits<'_> {
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.requests.is_empty() && self.env.is_empty()
    }
}

impl PodEdits<'_> {
    /// The operations that make `pod` carry the edits.
    pub fn to_ops(&self, pod: &PodView<'_>) -> Vec<Value> {
        let mut ops = Ops::default();
        if let Some(meta) = pod.metadata.get() {
            ops.members(
                "/metadata/annotations",
                &meta.annotations,
                &self.annotations,
            );
        }
        let Some(spec) = pod.spec.as_ref() else {
            return ops.0;
        };
        for (field, edits, containers) in [
            ("containers", &self.containers, &spec.containers),
            (
                "initContainers",
                &self.init_containers,
                &spec.init_containers,
            ),
        ] {
            for (i, edit) in edits {
                if let Some(container) = containers.get(*i) {
                    ops.container(&format!("/spec/{field}/{i}"), container, edit);
                }
            }
        }
        if let Some(class) = self.runtime_class_name {
            ops.put(
                "/spec/runtimeClassName",
                &spec.runtime_class_name,
                Value::from(class),
            );
        }
        if let Some(name) = self.scheduler_name {
            ops.put(
                "/spec/schedulerName",
                &spec.scheduler_name,
                Value::from(name),
            );
        }
        ops.0
    }
}

/// JSON Patch operations, in the order they are pushed.
#[derive(Default)]
struct Ops(Vec<Value>);

impl Ops {
    fn push(&mut self, op: &str, path: &str, value: Value) {
        self.0.push(json!({"op": op, "path": path, "value": value}));
    }

    /// `value` at `path`, whose member is in the state `slot`: added when
    /// absent, replacing what is there otherwise.
    fn put<T>(&mut self, path: &str, slot: &Slot<T>, value: Value) {
        let op = if matches!(slot, Slot::Absent) {
            "add"
        } else {
            "replace"
        };
        self.push(op, path, value);
    }

    /// New members of the object at `path`: one operation each when the
    /// object exists, else one for the whole object.
    fn members<T>(&mut self, path: &str, object: &Slot<T>, new: &BTreeMap<&str, String>) {
        if new.is_empty() {
            return;
        }
        if let Slot::Set(_) = object {
            for (key, value) in new {
                self.push("add", &member(path, key), Value::from(value.as_str()));
            }
        } else {
            self.put(path, object, string_map(new));
        }
    }

    fn container(&mut self, path: &str, container: &ContainerView<'_>, edit: &ContainerEdits<'_>) {
        if !edit.env.is_empty() {
            let env_path = format!("{path}/env");
            let items = edit
                .env
                .iter()
                .map(|(name, value)| json!({"name": name, "value": value}));
            match &container.env {
                Slot::Set(_) => {
                    for (i, item) in items.enumerate() {
                        self.push("add", &format!("{env_path}/{}", edit.env_len + i), item);
                    }
                }
                other => self.put(&env_path, other, Value::Array(items.collect())),
            }
        }
        if !edit.limits.is_empty() || !edit.requests.is_empty() {
            let resources_path = format!("{path}/resources");
            match &container.resources {
                Slot::Set(resources) => {
                    let limits_path = format!("{resources_path}/limits");
                    self.members(&limits_path, &resources.limits, &edit.limits);
                    let requests_path = format!("{resources_path}/requests");
                    let requests = match &resources.requests {
                        Some(_) => Slot::Set(()),
                        None => Slot::Absent,
                    };
                    self.members(&requests_path, &requests, &edit.requests);
                }
                other => {
                    let mut resources = Map::new();
                    for (name, entries) in [("limits", &edit.limits), ("requests", &edit.requests)]
                    {
                        if !entries.is_empty() {
                            resources.insert(name.into(), string_map(entries));
                        }
                    }
                    self.put(&resources_path, other, Value::Object(resources));
                }
            }
        }
    }
}

fn string_map(entries: &BTreeMap<&str, String>) -> Value {
    Value::Object(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_string(), Value::from(v.as_str())))
            .collect(),
    )
}

/// `parent/key` as a JSON Pointer (RFC 6901): `~` is written `~0` and `/`
/// is written `~1`.
fn member(parent: &str, key: &str) -> String {
    let mut path = String::with_capacity(parent.len() + key.len() + 4);
    path.push_str(parent);
    path.push('/');
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => {
                let _ = path.write_char(c);
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(member("/a", "nvidia.com/gpu"), "/a/nvidia.com~1gpu");
        assert_eq!(member("/a", "x~/y"), "/a/x~0~1y");
        assert_eq!(member("/a", ""), "/a/");
    }
}
