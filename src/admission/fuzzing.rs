//! The admission handlers' fuzz check (shared with the corpus replay test).
//! Not part of gpugate's API.

use serde_json::Value;

use crate::config::Config;

use super::handler::{mutate_review, validate_review};
use super::review::{ReviewObject, parse_review};

/// A config with a namespace policy, so policy paths are exercised too.
const POLICY_CONFIG: &str = "namespacePolicies:\n  - name: p\n    namespaces: ['*']\n    mode: warn\n    defaults: {gpumem: 1000, gpucores: 10, gpuSchedulerPolicy: binpack}\n    limits: {gpusPerContainer: 2, allowedModels: [A100], deniedModels: [T4], allowExclusive: false}\n";

/// Any body: parsing and both webhooks never panic; every answer is a
/// review naming the request's uid; a patch always applies to the object
/// as sent, and a second pass over the patched object yields no operations.
pub fn check_admission_review(data: &[u8]) {
    let Ok(req) = parse_review(data) else {
        return;
    };
    let configs = [
        Config::default(),
        Config::from_yaml(POLICY_CONFIG, "fuzz").unwrap_or_default(),
    ];
    for config in &configs {
        let (answer, _) = validate_review(&req, config, None);
        assert_eq!(answer.uid, req.uid);
        let (answer, _) = mutate_review(&req, config, None);
        assert_eq!(
            answer.to_json()["response"]["uid"],
            Value::from(req.uid.as_ref())
        );
        if answer.patch.is_empty() {
            continue;
        }
        assert!(
            matches!(req.object, ReviewObject::Pod(_)),
            "a patch without a pod"
        );
        // The review as kube-apiserver holds it. serde_json's Value refuses
        // a few strings the lean reader skips unread (lone surrogate
        // escapes); such bodies cannot be patched here.
        let Ok(mut review) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        let Some(object) = review.pointer_mut("/request/object") else {
            panic!("a patch without request.object");
        };
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(answer.patch.clone()))
            .unwrap_or_else(|e| panic!("unreadable patch: {e}"));
        json_patch::patch(object, &patch).unwrap_or_else(|e| panic!("patch does not apply: {e}"));
        let again = review.to_string();
        let again = parse_review(again.as_bytes())
            .unwrap_or_else(|e| panic!("the patched review does not parse: {e}"));
        let (second, _) = mutate_review(&again, config, None);
        assert!(
            second.patch.is_empty(),
            "not idempotent: {:?}",
            second.patch
        );
    }
}
