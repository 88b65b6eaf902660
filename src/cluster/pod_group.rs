//! scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`), the
//! object a Coscheduling gang's label names: what gpugate reads of it (the
//! CRD may not be installed; then the label alone is no gang, see
//! [`crate::engine::gang`]).

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::engine::gang::{GangKey, PodGroupSpec};

pub const GROUP: &str = "scheduling.x-k8s.io";
pub const VERSION: &str = "v1alpha1";
pub const PLURAL: &str = "podgroups";

/// A PodGroup as watched. The spec is kept loose so that an object with a
/// field of the wrong type is read as "no minMember" (and its members are
/// refused with that reason) instead of breaking the watch.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodGroup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<serde_json::Value>,
}

impl kube::Resource for PodGroup {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "PodGroup".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl PodGroup {
    /// Its namespace and name.
    pub fn key(&self) -> Option<GangKey> {
        Some(GangKey {
            namespace: self.metadata.namespace.clone()?,
            name: self.metadata.name.clone()?,
        })
    }

    /// `spec.minMember` (0 when absent, negative or not a number) and
    /// `spec.scheduleTimeoutSeconds` (when a positive number).
    pub fn spec(&self) -> PodGroupSpec {
        let field = |name: &str| {
            self.spec
                .as_ref()
                .and_then(|s| s.get(name))
                .and_then(serde_json::Value::as_u64)
        };
        PodGroupSpec {
            min_member: field("minMember")
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            schedule_timeout_seconds: field("scheduleTimeoutSeconds").filter(|s| *s > 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(spec: serde_json::Value) -> PodGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"namespace": "ml", "name": "train"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn spec_is_read_leniently() {
        let g = group(serde_json::json!({"minMember": 4, "scheduleTimeoutSeconds": 30}));
        assert_eq!(g.key().unwrap().to_string(), "ml/train");
        assert_eq!(
            g.spec(),
            PodGroupSpec {
                min_member: 4,
                schedule_timeout_seconds: Some(30)
            }
        );
        for bad in [
            serde_json::json!({"minMember": "four"}),
            serde_json::json!({"minMember": -2, "scheduleTimeoutSeconds": 0}),
            serde_json::json!(null),
            serde_json::json!("garbage"),
        ] {
            let s = group(bad.clone()).spec();
            assert_eq!(
                s,
                PodGroupSpec {
                    min_member: 0,
                    schedule_timeout_seconds: None
                },
                "{bad}"
            );
        }
    }
}
