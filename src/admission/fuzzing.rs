//! The admission handlers' fuzz check (shared with the corpus replay test).
//! Not part of gpugate's API.

use serde_json::Value;

use crate::config::Config;

use super::handler::{mutate_review, validate_review};
use super::review::parse_review;

/// A config with a namespace policy, so policy paths are exercised too.
const POLICY_CONFIG: &str = "namespacePolicies:\n  - name: p\n    namespaces: ['*']\n    mode: warn\n    defaults: {gpumem: 1000, gpucores: 10, gpuSchedulerPolicy: binpack}\n    limits: {gpusPerContainer: 2, allowedModels: [A100], deniedModels: [T4], allowExclusive: false}\n";

/// Any body: parsing and both webhooks never panic; every answer is a
/// review naming the request's uid; a patch always applies, and a second
/// pass over the patched object yields no operations.
pub fn check_admission_review(data: &[u8]) {
    let Ok(req) = parse_review(data) else {
        return;
    };
    let configs = [
        Config::default(),
        Config::from_yaml(POLICY_CONFIG, "fuzz").unwrap_or_default(),
    ];
    for config in &configs {
        let (answer, _) = validate_review(&req, config);
        assert_eq!(answer.uid, req.uid);
        let (answer, _) = mutate_review(&req, config);
        assert_eq!(
            answer.to_json()["response"]["uid"],
            Value::from(req.uid.as_str())
        );
        if answer.patch.is_empty() {
            continue;
        }
        let Some(object) = &req.object else {
            panic!("a patch without an object");
        };
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(answer.patch.clone()))
            .unwrap_or_else(|e| panic!("unreadable patch: {e}"));
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch)
            .unwrap_or_else(|e| panic!("patch does not apply: {e}"));
        let mut again = req.clone();
        again.object = Some(patched);
        let (second, _) = mutate_review(&again, config);
        assert!(
            second.patch.is_empty(),
            "not idempotent: {:?}",
            second.patch
        );
    }
}
