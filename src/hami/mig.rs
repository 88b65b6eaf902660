//! HAMi v2.10's MIG formats (hami-compat.md 3.2, 4.5 and "MIG in v2.10"):
//!
//! - a MIG GPU's `migProfiles` in `hami.io/node-nvidia-register`: each
//!   allowed profile with its memory, cores, slice count and the legal
//!   placements (`{start, size}` in memory slices);
//! - `hami.io/vgpu-mig-allocations` on a pod: the instance each MIG grant
//!   takes, `{containerIndex, deviceIndex, gpuUUID, profile, placement}`,
//!   which the device plugin completes with `migUUID`, `gpuInstanceID` and
//!   `computeInstanceID` (all three or none).
//!
//! Decoding is strict where HAMi is: a runtime triple is all or none, and
//! a (container, device) pair appears once.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::DecodeError;
use super::keys::VGPU_MIG_ALLOCATIONS;
use crate::devices::nvidia::NODE_REGISTER as NODE_NVIDIA_REGISTER;

/// Where an instance sits on its GPU, in memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigPlacement {
    pub start: u32,
    pub size: u32,
}

impl MigPlacement {
    /// Whether two placements share a slice (HAMi's rule:
    /// `a.start < b.start+b.size && b.start < a.start+a.size`).
    pub fn overlaps(&self, other: &MigPlacement) -> bool {
        self.start < other.start.saturating_add(other.size)
            && other.start < self.start.saturating_add(self.size)
    }
}

/// One MIG profile a GPU offers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigProfile {
    /// e.g. `2g.10gb`.
    pub name: String,
    pub memory_mib: u32,
    /// Percent of the GPU's SMs (rounded up).
    pub cores: u32,
    pub slice_count: u32,
    /// The legal placements, as registered.
    pub placements: Vec<MigPlacement>,
}

/// The largest number a profile field may hold (HAMi's `int32`).
const MAX_I32: i64 = i32::MAX as i64;

fn register_err(piece: &str, problem: impl Into<String>) -> DecodeError {
    DecodeError::new(NODE_NVIDIA_REGISTER, piece, problem)
}

fn allocations_err(piece: &str, problem: impl Into<String>) -> DecodeError {
    DecodeError::new(VGPU_MIG_ALLOCATIONS, piece, problem)
}

/// A whole number in `0..=max` from a JSON field (absent or `null`: 0).
fn whole(
    obj: &Map<String, Value>,
    field: &str,
    max: i64,
    fail: &dyn Fn(&str, String) -> DecodeError,
    what: &str,
) -> Result<u32, DecodeError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|v| (0..=max).contains(v))
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                fail(
                    &n.to_string(),
                    format!("{what}: {field} must be a whole number from 0 to {max}"),
                )
            }),
        Some(v) => Err(fail(
            &v.to_string(),
            format!("{what}: {field} must be a whole number from 0 to {max}"),
        )),
    }
}

/// A string field (absent or `null`: empty).
fn text(
    obj: &Map<String, Value>,
    field: &str,
    fail: &dyn Fn(&str, String) -> DecodeError,
    what: &str,
) -> Result<String, DecodeError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(fail(
            &v.to_string(),
            format!("{what}: {field} must be a string"),
        )),
    }
}

fn placement(
    v: &Value,
    fail: &dyn Fn(&str, String) -> DecodeError,
    what: &str,
) -> Result<MigPlacement, DecodeError> {
    let Value::Object(obj) = v else {
        return Err(fail(&v.to_string(), format!("{what}: expected an object")));
    };
    let p = MigPlacement {
        start: whole(obj, "start", MAX_I32, fail, what)?,
        size: whole(obj, "size", MAX_I32, fail, what)?,
    };
    if p.size == 0 {
        return Err(fail(
            &v.to_string(),
            format!("{what}: size must be at least 1"),
        ));
    }
    Ok(p)
}

/// A device's `migProfiles` (absent or `null`: none). `device` names the
/// device in messages.
pub fn decode_mig_profiles(
    value: Option<&Value>,
    device: &str,
) -> Result<Vec<MigProfile>, DecodeError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(v) => {
            return Err(register_err(
                &v.to_string(),
                format!("{device}: migProfiles must be an array"),
            ));
        }
    };
    let fail = |piece: &str, problem: String| register_err(piece, problem);
    let mut names = BTreeSet::new();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let what = format!("{device}: migProfiles[{i}]");
            let Value::Object(obj) = item else {
                return Err(fail(
                    &item.to_string(),
                    format!("{what}: expected an object"),
                ));
            };
            let name = text(obj, "name", &fail, &what)?;
            if name.is_empty() {
                return Err(fail(&item.to_string(), format!("{what}: no name")));
            }
            if !names.insert(name.clone()) {
                return Err(fail(&name, format!("{what}: profile named twice")));
            }
            let placements = match obj.get("placements") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(ps)) => ps
                    .iter()
                    .enumerate()
                    .map(|(k, p)| placement(p, &fail, &format!("{what}.placements[{k}]")))
                    .collect::<Result<_, _>>()?,
                Some(v) => {
                    return Err(fail(
                        &v.to_string(),
                        format!("{what}: placements must be an array"),
                    ));
                }
            };
            Ok(MigProfile {
                memory_mib: whole(obj, "memoryMB", MAX_I32, &fail, &what)?,
                cores: whole(obj, "core", MAX_I32, &fail, &what)?,
                slice_count: whole(obj, "sliceCount", MAX_I32, &fail, &what)?,
                placements,
                name,
            })
        })
        .collect()
}

/// `migProfiles` as HAMi's device plugin writes it.
pub fn mig_profiles_json(profiles: &[MigProfile]) -> Value {
    Value::Array(
        profiles
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "memoryMB": p.memory_mib,
                    "core": p.cores,
                    "sliceCount": p.slice_count,
                    "placements": p.placements.iter()
                        .map(|pl| json!({"start": pl.start, "size": pl.size}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The MIG instance the device plugin created for a grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigRuntime {
    pub mig_uuid: String,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// One entry of `hami.io/vgpu-mig-allocations`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigAllocation {
    /// The container, init containers first (as in the device list).
    pub container_index: u32,
    /// The grant within the container's entry of the device list.
    pub device_index: u32,
    pub gpu_uuid: String,
    pub profile: String,
    pub placement: MigPlacement,
    /// Filled in by the device plugin once the instance exists.
    pub runtime: Option<MigRuntime>,
}

/// Decodes `hami.io/vgpu-mig-allocations`: a JSON array; the runtime ids
/// all three or none; each (container, device) pair once.
pub fn decode_mig_allocations(value: &str) -> Result<Vec<MigAllocation>, DecodeError> {
    // HAMi reads an empty value as no entries.
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let parsed: Value = serde_json::from_str(value.trim())
        .map_err(|e| allocations_err(value, format!("not valid JSON: {e}")))?;
    let Value::Array(items) = parsed else {
        return Err(allocations_err(value, "expected a JSON array"));
    };
    let fail = |piece: &str, problem: String| allocations_err(piece, problem);
    let mut seen = BTreeSet::new();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let what = format!("entry {i}");
            let Value::Object(obj) = item else {
                return Err(fail(&item.to_string(), format!("{what}: expected an object")));
            };
            let container_index = whole(obj, "containerIndex", MAX_I32, &fail, &what)?;
            let device_index = whole(obj, "deviceIndex", MAX_I32, &fail, &what)?;
            if !seen.insert((container_index, device_index)) {
                return Err(fail(
                    &item.to_string(),
                    format!(
                        "{what}: container {container_index}, device {device_index} appears twice"
                    ),
                ));
            }
            let gpu_uuid = text(obj, "gpuUUID", &fail, &what)?;
            let profile = text(obj, "profile", &fail, &what)?;
            if gpu_uuid.is_empty() || profile.is_empty() {
                return Err(fail(
                    &item.to_string(),
                    format!("{what}: gpuUUID and profile are required"),
                ));
            }
            let placement = match obj.get("placement") {
                Some(p) => placement(p, &fail, &format!("{what}.placement"))?,
                None => {
                    return Err(fail(&item.to_string(), format!("{what}: no placement")));
                }
            };
            let present = ["migUUID", "gpuInstanceID", "computeInstanceID"]
                .iter()
                .filter(|k| obj.get(**k).is_some_and(|v| !v.is_null()))
                .count();
            let runtime = match present {
                0 => None,
                3 => Some(MigRuntime {
                    mig_uuid: text(obj, "migUUID", &fail, &what)?,
                    gpu_instance_id: whole(obj, "gpuInstanceID", MAX_I32, &fail, &what)?,
                    compute_instance_id: whole(obj, "computeInstanceID", MAX_I32, &fail, &what)?,
                }),
                _ => {
                    return Err(fail(
                        &item.to_string(),
                        format!(
                            "{what}: migUUID, gpuInstanceID and computeInstanceID come all three or none"
                        ),
                    ));
                }
            };
            Ok(MigAllocation {
                container_index,
                device_index,
                gpu_uuid,
                profile,
                placement,
                runtime,
            })
        })
        .collect()
}

/// `hami.io/vgpu-mig-allocations` as HAMi's scheduler writes it (the
/// runtime ids only where the device plugin filled them in).
pub fn encode_mig_allocations(allocations: &[MigAllocation]) -> String {
    Value::Array(
        allocations
            .iter()
            .map(|a| {
                let mut v = json!({
                    "containerIndex": a.container_index,
                    "deviceIndex": a.device_index,
                    "gpuUUID": a.gpu_uuid,
                    "profile": a.profile,
                    "placement": {"start": a.placement.start, "size": a.placement.size},
                });
                if let Some(r) = &a.runtime {
                    v["migUUID"] = json!(r.mig_uuid);
                    v["gpuInstanceID"] = json!(r.gpu_instance_id);
                    v["computeInstanceID"] = json!(r.compute_instance_id);
                }
                v
            })
            .collect(),
    )
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HAMi's own example of a MIG GPU's registration (hami-compat.md,
    /// "MIG in v2.10").
    const A100_2G: &str = r#"[{"name":"2g.10gb","memoryMB":9984,"core":29,"sliceCount":2,"placements":[{"start":0,"size":2},{"start":2,"size":2},{"start":4,"size":2}]}]"#;

    #[test]
    fn hamis_registration_example_decodes_and_round_trips() {
        let v: Value = serde_json::from_str(A100_2G).unwrap();
        let profiles = decode_mig_profiles(Some(&v), "GPU-a").unwrap();
        assert_eq!(
            profiles,
            [MigProfile {
                name: "2g.10gb".into(),
                memory_mib: 9984,
                cores: 29,
                slice_count: 2,
                placements: vec![
                    MigPlacement { start: 0, size: 2 },
                    MigPlacement { start: 2, size: 2 },
                    MigPlacement { start: 4, size: 2 },
                ],
            }]
        );
        assert_eq!(mig_profiles_json(&profiles), v);
        assert_eq!(decode_mig_profiles(None, "d").unwrap(), []);
    }

    #[test]
    fn bad_profiles_are_named() {
        for (bad, says) in [
            (r#"{"name":"x"}"#, "must be an array"),
            (r#"[{"memoryMB":1}]"#, "no name"),
            (r#"[{"name":"a"},{"name":"a"}]"#, "named twice"),
            (
                r#"[{"name":"a","memoryMB":-1}]"#,
                "memoryMB must be a whole number",
            ),
            (
                r#"[{"name":"a","placements":[{"start":0,"size":0}]}]"#,
                "size must be at least 1",
            ),
            (
                r#"[{"name":"a","placements":{"start":0}}]"#,
                "placements must be an array",
            ),
        ] {
            let v: Value = serde_json::from_str(bad).unwrap();
            let e = decode_mig_profiles(Some(&v), "GPU-a")
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// HAMi's example of what bind writes, then the same entry as the
    /// device plugin completes it.
    #[test]
    fn allocations_round_trip_with_and_without_runtime_ids() {
        let written = r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":2,"size":2}}]"#;
        let a = decode_mig_allocations(written).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].placement, MigPlacement { start: 2, size: 2 });
        assert_eq!(a[0].runtime, None);
        let again: Value = serde_json::from_str(&encode_mig_allocations(&a)).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(written).unwrap());
        let completed = r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-1","gpuInstanceID":5,"computeInstanceID":0}]"#;
        let b = decode_mig_allocations(completed).unwrap();
        assert_eq!(
            b[0].runtime,
            Some(MigRuntime {
                mig_uuid: "MIG-1".into(),
                gpu_instance_id: 5,
                compute_instance_id: 0
            })
        );
        assert_eq!(
            decode_mig_allocations(&encode_mig_allocations(&b)).unwrap(),
            b
        );
    }

    #[test]
    fn inconsistent_allocations_are_refused() {
        let entry = |extra: &str| {
            format!(
                r#"{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{{"start":0,"size":1}}{extra}}}"#
            )
        };
        for (bad, says) in [
            (format!("[{}]", entry(r#","migUUID":"MIG-1""#)), "all three or none"),
            (format!("[{},{}]", entry(""), entry("")), "appears twice"),
            (r#"[{"containerIndex":0,"deviceIndex":0,"profile":"1g.5gb","placement":{"start":0,"size":1}}]"#.to_string(), "required"),
            (r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"1g.5gb"}]"#.to_string(), "no placement"),
            ("{}".to_string(), "expected a JSON array"),
            ("[".to_string(), "not valid JSON"),
        ] {
            let e = decode_mig_allocations(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn overlap_is_hamis_rule() {
        let p = |start, size| MigPlacement { start, size };
        assert!(p(0, 2).overlaps(&p(1, 2)));
        assert!(p(0, 4).overlaps(&p(2, 1)));
        assert!(!p(0, 2).overlaps(&p(2, 2)));
        assert!(!p(4, 1).overlaps(&p(0, 4)));
        assert!(p(0, 8).overlaps(&p(7, 1)));
    }
}
