//! Kueue's Workload (`kueue.x-k8s.io/v1beta2`), as far as gpugate's
//! admission check reads and writes it: the pod sets, whether quota is
//! reserved, whether it finished or was evicted, and the state of each
//! admission check. Read from JSON so that a field of the wrong type makes
//! one workload unreadable (answered with the reason), never the watch.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{Value, json};

pub const GROUP: &str = "kueue.x-k8s.io";
/// Kueue's storage version since v0.15; v0.17 serves v1beta1 beside it.
pub const VERSION: &str = "v1beta2";
pub const WORKLOADS: &str = "workloads";
pub const ADMISSION_CHECKS: &str = "admissionchecks";
pub const RESOURCE_FLAVORS: &str = "resourceflavors";

/// The longest message written into a check's state (Kueue keeps it in
/// the Workload's status; `explain` has the rest).
pub const MESSAGE_MAX: usize = 1024;

/// One pod set: `count` pods of one template.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSet {
    pub name: String,
    /// The admitted count (`status.admission.podSetAssignments[].count`,
    /// smaller under partial admission), else `spec.podSets[].count`.
    pub count: u32,
    /// `spec.podSets[].template`: a PodTemplateSpec.
    pub template: Value,
    /// The ResourceFlavors Kueue assigned it
    /// (`status.admission.podSetAssignments[].flavors`), whose node labels
    /// its pods will carry as a nodeSelector once admitted.
    pub flavors: Vec<String>,
}

/// An admission check's state (`status.admissionChecks[].state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckState {
    Pending,
    Ready,
    Retry,
    Rejected,
    Other(String),
}

impl CheckState {
    fn read(s: &str) -> CheckState {
        match s {
            "Pending" => CheckState::Pending,
            "Ready" => CheckState::Ready,
            "Retry" => CheckState::Retry,
            "Rejected" => CheckState::Rejected,
            other => CheckState::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            CheckState::Pending => "Pending",
            CheckState::Ready => "Ready",
            CheckState::Retry => "Retry",
            CheckState::Rejected => "Rejected",
            CheckState::Other(s) => s,
        }
    }
}

/// One entry of `status.admissionChecks`.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub name: String,
    pub state: CheckState,
    pub message: String,
    pub last_transition: Option<Timestamp>,
}

/// A Workload as the admission check sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// Its pod sets; `Err` with the reason when `spec.podSets` cannot be
    /// read (the check then answers Rejected with it).
    pub pod_sets: Result<Vec<PodSet>, String>,
    /// Quota is reserved in a ClusterQueue (`status.admission` is set):
    /// the moment Kueue asks its admission checks.
    pub quota_reserved: bool,
    /// Admitted (condition `Admitted`): every check Ready.
    pub admitted: bool,
    /// Finished, or no longer active (`spec.active: false`): its pods are
    /// done or will not come.
    pub done: bool,
    /// `spec.priority` when `spec.priorityClassSource` is a PriorityClass
    /// (then it is the pods' `spec.priority` too, when their templates name
    /// none); `None` for a WorkloadPriorityClass's, which the pods do not
    /// carry.
    pub priority: Option<i32>,
    pub checks: Vec<Check>,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn condition_true(status: &Value, kind: &str) -> bool {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

impl Workload {
    /// Reads a Workload; `None` when it has no namespace, name or UID.
    pub fn read(raw: &Value) -> Option<Workload> {
        let namespace = str_at(raw, &["metadata", "namespace"])?.to_string();
        let name = str_at(raw, &["metadata", "name"])?.to_string();
        let uid = str_at(raw, &["metadata", "uid"])?.to_string();
        let resource_version = str_at(raw, &["metadata", "resourceVersion"])
            .unwrap_or_default()
            .to_string();
        let empty = Value::Null;
        let status = raw.get("status").unwrap_or(&empty);
        let admission = status.get("admission").filter(|a| !a.is_null());
        let checks = status
            .get("admissionChecks")
            .and_then(Value::as_array)
            .map(|cs| cs.iter().filter_map(read_check).collect())
            .unwrap_or_default();
        let active = raw
            .get("spec")
            .and_then(|s| s.get("active"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        Some(Workload {
            pod_sets: read_pod_sets(raw, admission),
            namespace,
            name,
            uid,
            resource_version,
            quota_reserved: admission.is_some(),
            admitted: condition_true(status, "Admitted"),
            done: !active || condition_true(status, "Finished"),
            // Only a PriorityClass's value is the pods' too; a Kueue
            // WorkloadPriorityClass ranks the workload alone.
            priority: raw
                .pointer("/spec/priority")
                .and_then(Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
                .filter(|_| {
                    raw.pointer("/spec/priorityClassSource")
                        .and_then(Value::as_str)
                        == Some("scheduling.k8s.io/priorityclass")
                }),
            checks,
        })
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The state of check `name`, if the workload has it.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

fn read_check(c: &Value) -> Option<Check> {
    Some(Check {
        name: c.get("name")?.as_str()?.to_string(),
        state: CheckState::read(c.get("state").and_then(Value::as_str).unwrap_or("Pending")),
        message: c
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        last_transition: c
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok()),
    })
}

fn read_pod_sets(raw: &Value, admission: Option<&Value>) -> Result<Vec<PodSet>, String> {
    let sets = raw
        .get("spec")
        .and_then(|s| s.get("podSets"))
        .and_then(Value::as_array)
        .ok_or("spec.podSets is missing or not a list")?;
    let assignments: BTreeMap<&str, &Value> = admission
        .and_then(|a| a.get("podSetAssignments"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p.get("name")?.as_str()?, p)))
                .collect()
        })
        .unwrap_or_default();
    sets.iter()
        .enumerate()
        .map(|(i, set)| {
            let name = set
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("spec.podSets[{i}].name is missing or not a string"))?;
            let count = |v: &Value, field: &str| -> Result<u32, String> {
                v.get("count")
                    .and_then(Value::as_u64)
                    .and_then(|c| u32::try_from(c).ok())
                    .ok_or_else(|| format!("{field} of pod set {name} is not a count"))
            };
            let assigned = assignments.get(name);
            let count = match assigned.filter(|a| a.get("count").is_some()) {
                Some(a) => count(a, "status.admission.podSetAssignments[].count")?,
                None => count(set, "spec.podSets[].count")?,
            };
            let template = set
                .get("template")
                .filter(|t| t.is_object())
                .cloned()
                .ok_or_else(|| format!("pod set {name} has no template"))?;
            let mut flavors: Vec<String> = assigned
                .and_then(|a| a.get("flavors"))
                .and_then(Value::as_object)
                .map(|f| {
                    f.values()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            flavors.sort();
            flavors.dedup();
            Ok(PodSet {
                name: name.to_string(),
                count,
                template,
                flavors,
            })
        })
        .collect()
}

/// A message cut to [`MESSAGE_MAX`] bytes on a character boundary.
pub fn bounded(message: &str) -> String {
    if message.len() <= MESSAGE_MAX {
        return message.to_string();
    }
    let mut end = MESSAGE_MAX - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The JSON merge patch of `workloads/<name>/status` that sets check
/// `check` of the workload `raw` to `state` with `message` and
/// `pod_set_updates`: the whole `status.admissionChecks` list (a merge
/// patch replaces a list) with only that entry changed, and the
/// resourceVersion it was read at, so that a write racing Kueue's is
/// refused (409) instead of undoing it. `None` when the workload has no
/// such check. The transition time moves only when the state changes.
pub fn check_patch(
    raw: &Value,
    check: &str,
    state: &CheckState,
    message: &str,
    pod_set_updates: &[Value],
    now: Timestamp,
) -> Option<Value> {
    let list = raw.get("status")?.get("admissionChecks")?.as_array()?;
    let mut found = false;
    let checks: Vec<Value> = list
        .iter()
        .map(|entry| {
            if entry.get("name").and_then(Value::as_str) != Some(check) {
                return entry.clone();
            }
            found = true;
            let mut e = entry.clone();
            let changed = e.get("state").and_then(Value::as_str) != Some(state.as_str());
            e["state"] = json!(state.as_str());
            e["message"] = json!(bounded(message));
            if changed || e.get("lastTransitionTime").is_none() {
                e["lastTransitionTime"] = json!(now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
            }
            if let Some(o) = e.as_object_mut() {
                if pod_set_updates.is_empty() {
                    o.remove("podSetUpdates");
                } else {
                    o.insert("podSetUpdates".into(), json!(pod_set_updates));
                }
            }
            e
        })
        .collect();
    if !found {
        return None;
    }
    Some(json!({
        "metadata": {"resourceVersion": str_at(raw, &["metadata", "resourceVersion"])?},
        "status": {"admissionChecks": checks},
    }))
}

/// The merge patch of `admissionchecks/<name>/status` that marks an
/// AdmissionCheck `Active` (a ClusterQueue that lists an inactive check
/// admits nothing), or `None` when it already is for its generation.
pub fn active_patch(raw: &Value, controller: &str, now: Timestamp) -> Option<Value> {
    let generation = raw
        .get("metadata")?
        .get("generation")
        .and_then(Value::as_i64);
    let conditions = raw
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let current = conditions.iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Active")
            && c.get("status").and_then(Value::as_str) == Some("True")
            && c.get("observedGeneration").and_then(Value::as_i64) == generation
    });
    if current {
        return None;
    }
    let mut conditions: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c.get("type").and_then(Value::as_str) != Some("Active"))
        .collect();
    let mut active = json!({
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": format!("{controller} (gpugate) answers this check"),
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    if let Some(g) = generation {
        active["observedGeneration"] = json!(g);
    }
    conditions.push(active);
    Some(json!({"status": {"conditions": conditions}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Value {
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "job-a-1", "namespace": "team", "uid": "u1", "resourceVersion": "42"},
            "spec": {"podSets": [
                {"name": "main", "count": 4, "template": {"spec": {"containers": []}}},
                {"name": "launcher", "count": 1, "template": {"spec": {"containers": []}}},
            ]},
            "status": {
                "admission": {"clusterQueue": "cq", "podSetAssignments": [
                    {"name": "main", "count": 3, "flavors": {"nvidia.com/gpu": "a100", "nvidia.com/gpumem": "a100"}},
                ]},
                "conditions": [{"type": "QuotaReserved", "status": "True"}],
                "admissionChecks": [
                    {"name": "other", "state": "Ready", "message": "ok", "lastTransitionTime": "2026-11-28T08:00:00Z"},
                    {"name": "gpugate", "state": "Pending", "message": "", "lastTransitionTime": "2026-11-28T08:00:00Z"},
                ],
            },
        })
    }

    #[test]
    fn a_workload_is_read_with_its_admitted_counts_and_checks() {
        let w = Workload::read(&workload()).unwrap();
        assert_eq!(
            (
                w.key().as_str(),
                w.uid.as_str(),
                w.resource_version.as_str()
            ),
            ("team/job-a-1", "u1", "42")
        );
        let sets = w.pod_sets.as_ref().unwrap();
        // Partial admission: the assignment's count wins; a pod set
        // without an assignment keeps its own.
        assert_eq!(
            sets.iter()
                .map(|s| (s.name.as_str(), s.count))
                .collect::<Vec<_>>(),
            [("main", 3), ("launcher", 1)]
        );
        assert_eq!(sets[0].flavors, ["a100"]);
        assert!(w.quota_reserved && !w.admitted && !w.done);
        assert_eq!(w.check("gpugate").unwrap().state, CheckState::Pending);
        assert_eq!(w.check("other").unwrap().state, CheckState::Ready);
        assert!(w.check("nope").is_none());

        let mut finished = workload();
        finished["status"]["conditions"] = json!([{"type": "Finished", "status": "True"}]);
        assert!(Workload::read(&finished).unwrap().done);
        let mut inactive = workload();
        inactive["spec"]["active"] = json!(false);
        assert!(Workload::read(&inactive).unwrap().done);
        let mut unreserved = workload();
        unreserved["status"]["admission"] = Value::Null;
        assert!(!Workload::read(&unreserved).unwrap().quota_reserved);
    }

    #[test]
    fn garbage_pod_sets_make_one_workload_unreadable_not_the_watch() {
        for (bad, expect) in [
            (json!("x"), "spec.podSets is missing"),
            (
                json!([{"count": 1, "template": {}}]),
                "spec.podSets[0].name",
            ),
            (
                json!([{"name": "m", "count": -1, "template": {}}]),
                "is not a count",
            ),
            (
                json!([{"name": "m", "count": "2", "template": {}}]),
                "is not a count",
            ),
            (json!([{"name": "m", "count": 1}]), "has no template"),
            (
                json!([{"name": "m", "count": 1, "template": "pod"}]),
                "has no template",
            ),
        ] {
            let mut w = workload();
            w["spec"]["podSets"] = bad;
            w["status"]["admission"] = Value::Null;
            let e = Workload::read(&w).unwrap().pod_sets.unwrap_err();
            assert!(e.contains(expect), "{e}");
        }
        let mut nameless = workload();
        nameless["metadata"]["uid"] = json!(7);
        assert!(Workload::read(&nameless).is_none());
    }

    #[test]
    fn the_check_patch_changes_only_its_entry_against_the_version_read() {
        let now: Timestamp = "2026-11-28T09:00:00Z".parse().unwrap();
        let updates = [json!({"name": "main", "labels": {"a": "b"}})];
        let p = check_patch(
            &workload(),
            "gpugate",
            &CheckState::Ready,
            "fits",
            &updates,
            now,
        )
        .unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        let checks = p["status"]["admissionChecks"].as_array().unwrap();
        assert_eq!(checks[0], workload()["status"]["admissionChecks"][0]);
        assert_eq!(
            checks[1],
            json!({"name": "gpugate", "state": "Ready", "message": "fits",
                   "lastTransitionTime": "2026-11-28T09:00:00Z", "podSetUpdates": updates})
        );
        // The same state again: the transition time stays.
        let again = check_patch(
            &workload(),
            "gpugate",
            &CheckState::Pending,
            "still",
            &[],
            now,
        )
        .unwrap();
        let entry = &again["status"]["admissionChecks"][1];
        assert_eq!(entry["lastTransitionTime"], "2026-11-28T08:00:00Z");
        assert!(entry.get("podSetUpdates").is_none());
        assert!(check_patch(&workload(), "absent", &CheckState::Ready, "", &[], now).is_none());
        // A long message is cut on a character boundary.
        let long = "é".repeat(MESSAGE_MAX);
        let cut = check_patch(&workload(), "gpugate", &CheckState::Retry, &long, &[], now).unwrap();
        let m = cut["status"]["admissionChecks"][1]["message"]
            .as_str()
            .unwrap();
        assert!(m.len() <= MESSAGE_MAX && m.ends_with("..."), "{}", m.len());
    }

    #[test]
    fn an_admission_check_is_marked_active_once_per_generation() {
        let now: Timestamp = "2026-11-28T09:00:00Z".parse().unwrap();
        let mut ac = json!({"metadata": {"name": "gpugate", "generation": 2},
                            "spec": {"controllerName": "gpugate.io/placement"}});
        let p = active_patch(&ac, "gpugate.io/placement", now).unwrap();
        let c = &p["status"]["conditions"][0];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["observedGeneration"].as_i64()
            ),
            (Some("Active"), Some("True"), Some(2))
        );
        ac["status"] = p["status"].clone();
        assert!(active_patch(&ac, "gpugate.io/placement", now).is_none());
        ac["metadata"]["generation"] = json!(3);
        let p = active_patch(&ac, "gpugate.io/placement", now).unwrap();
        assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 1);
    }
}
