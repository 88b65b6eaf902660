//! The node device inventory, `hami.io/node-nvidia-register` (hami-compat.md 3.2).
//!
//! HAMi's device plugin writes a JSON array since v2.8.0; v2.4.0 to v2.7.x
//! wrote a colon/comma text form that is still read here so that gpugate can
//! run beside older device plugins. JSON is tried when the value starts with
//! `[`, the text form otherwise.
//!
//! Decoding is stricter than HAMi where HAMi's leniency would hide a broken
//! node: every number must be a whole number in range (counts, memory and
//! cores fit in Go's `int32`, as in HAMi), every device needs an id, ids are
//! unique, and a node with no device at all is an error.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::DecodeError;
use super::mig::{MigProfile, decode_mig_profiles, mig_profiles_json};
use crate::devices::nvidia::NODE_REGISTER as NODE_NVIDIA_REGISTER;

/// One GPU as HAMi's device plugin registers it.
///
/// Fields are declared in the order HAMi writes them, so that serde writes
/// the same JSON as HAMi does.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceInfo {
    /// The GPU UUID, e.g. `GPU-0fc3...`.
    pub id: String,
    /// How many containers may share this GPU at once.
    pub count: u32,
    /// Device memory in MiB (after HAMi's memory scaling).
    pub devmem: u32,
    /// Compute share, 100 = the whole GPU (after HAMi's core scaling).
    pub devcore: u32,
    /// The model, e.g. `NVIDIA-Tesla V100-PCIE-32GB`.
    #[serde(rename = "type")]
    pub device_type: String,
    /// NUMA node (0 when unknown).
    pub numa: i32,
    pub health: bool,
    /// NVML index.
    pub index: u32,
    /// `hami-core`, `mig` or `mps`; empty when the plugin did not say.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
    /// A MIG GPU's allowed profiles with their placements (HAMi v2.10);
    /// read and written by hand ([`super::mig`]).
    #[serde(skip)]
    pub mig_profiles: Vec<MigProfile>,
    /// `custominfo.NetworkID`, when a number (Ascend 910 chips, the HCCS
    /// ring the NPU sits on; hami-vendors.md 2.2); read by hand.
    #[serde(skip)]
    pub network_id: Option<i64>,
    /// In die mode (`custominfo.DeviceStrategy` `die`, Vastai,
    /// hami-vendors.md 13.2), the card the die sits on: `custominfo.AIC`
    /// (`""` when absent); `None` in card mode. Read by hand.
    #[serde(skip)]
    pub card: Option<String>,
}

/// The mode HAMi assumes for devices registered in the 7-field text form.
const DEFAULT_MODE: &str = "hami-core";

/// The largest count, memory and core value: HAMi parses them as `int32`.
const MAX_I32: u32 = i32::MAX.unsigned_abs();

fn err(piece: &str, problem: impl Into<String>) -> DecodeError {
    DecodeError::new(NODE_NVIDIA_REGISTER, piece, problem)
}

/// Decodes `hami.io/node-nvidia-register`: the JSON array, or the legacy
/// text form `uuid,count,devmem,devcore,type,numa,health[,index,mode]:`
/// (devices joined by `:`, the trailing `:` optional). A node without
/// devices, a device without id and two devices with the same id are errors.
pub fn decode_node_devices(value: &str) -> Result<Vec<DeviceInfo>, DecodeError> {
    let value = value.trim();
    let devices = if value.starts_with('[') {
        decode_json(value)?
    } else if value.starts_with('{') {
        return Err(err(
            value,
            "expected a JSON array of devices, found an object",
        ));
    } else {
        decode_legacy(value)?
    };
    if devices.is_empty() {
        return Err(err(value, "no GPU registered"));
    }
    let mut seen = BTreeSet::new();
    for (i, d) in devices.iter().enumerate() {
        if d.id.is_empty() {
            return Err(err(value, format!("device {i} has no id")));
        }
        if !seen.insert(d.id.as_str()) {
            return Err(err(&d.id, format!("device {i}: GPU id registered twice")));
        }
    }
    Ok(devices)
}

/// HAMi's current form: a JSON array, fields in HAMi's order, `mode` left
/// out when empty.
pub fn encode_node_devices_json(devices: &[DeviceInfo]) -> String {
    // Written by hand rather than through `serde_json::to_string` so that the
    // encoder is infallible without an `expect`; a test checks that both agree.
    let mut out = String::from("[");
    for (i, d) in devices.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            "{{\"id\":{},\"count\":{},\"devmem\":{},\"devcore\":{},\"type\":{},\"numa\":{},\"health\":{},\"index\":{}",
            json_string(&d.id),
            d.count,
            d.devmem,
            d.devcore,
            json_string(&d.device_type),
            d.numa,
            d.health,
            d.index,
        ));
        if !d.mode.is_empty() {
            out.push_str(&format!(",\"mode\":{}", json_string(&d.mode)));
        }
        if !d.mig_profiles.is_empty() {
            out.push_str(&format!(
                ",\"migProfiles\":{}",
                mig_profiles_json(&d.mig_profiles)
            ));
        }
        let mut custom = Vec::new();
        if let Some(id) = d.network_id {
            custom.push(format!("\"NetworkID\":{id}"));
        }
        if let Some(card) = &d.card {
            custom.push(format!(
                "\"DeviceStrategy\":\"die\",\"AIC\":{}",
                json_string(card)
            ));
        }
        if !custom.is_empty() {
            out.push_str(&format!(",\"custominfo\":{{{}}}", custom.join(",")));
        }
        out.push('}');
    }
    out.push(']');
    out
}

/// The legacy 9-field text form (HAMi v2.5 to v2.7): each device
/// `uuid,count,devmem,devcore,type,numa,health,index,mode` terminated by `:`.
///
/// The form has no escaping: a field containing `,` or `:` (model names
/// could) cannot be represented and the result will not decode to the same
/// devices. Nothing is refused here; prefer [`encode_node_devices_json`].
pub fn encode_node_devices_legacy(devices: &[DeviceInfo]) -> String {
    devices
        .iter()
        .map(|d| {
            format!(
                "{},{},{},{},{},{},{},{},{}:",
                d.id,
                d.count,
                d.devmem,
                d.devcore,
                d.device_type,
                d.numa,
                d.health,
                d.index,
                d.mode
            )
        })
        .collect()
}

/// A JSON string literal, escaped.
pub(super) fn json_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

fn decode_json(value: &str) -> Result<Vec<DeviceInfo>, DecodeError> {
    let parsed: Value =
        serde_json::from_str(value).map_err(|e| err(value, format!("not valid JSON: {e}")))?;
    let Value::Array(items) = parsed else {
        return Err(err(value, "expected a JSON array of devices"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(obj) => json_device(i, obj),
            other => Err(err(
                &other.to_string(),
                format!("device {i}: expected a JSON object"),
            )),
        })
        .collect()
}

/// One device of the JSON form. Absent and `null` fields take their zero
/// value (Go's `omitempty` leaves zero values out); `migProfiles` is read
/// as HAMi v2.10 writes it ([`super::mig`]); of `custominfo` a
/// whole-number `NetworkID` is read (HAMi reads it as a JSON number and
/// ignores it otherwise), and `DeviceStrategy` with `AIC`; unknown
/// fields such as `devicevendor` are ignored.
fn json_device(i: usize, obj: &Map<String, Value>) -> Result<DeviceInfo, DecodeError> {
    let id = json_str(i, "", obj, "id")?;
    let u32_field = |field: &'static str, max: u32| -> Result<u32, DecodeError> {
        let n = json_int(i, &id, obj, field, 0, i64::from(max))?;
        u32::try_from(n).map_err(|_| field_err(i, &id, field, obj, "out of range"))
    };
    let count = u32_field("count", MAX_I32)?;
    let devmem = u32_field("devmem", MAX_I32)?;
    let devcore = u32_field("devcore", MAX_I32)?;
    let index = u32_field("index", u32::MAX)?;
    let numa = json_int(
        i,
        &id,
        obj,
        "numa",
        i64::from(i32::MIN),
        i64::from(i32::MAX),
    )?;
    let numa = i32::try_from(numa).map_err(|_| field_err(i, &id, "numa", obj, "out of range"))?;
    let health = match obj.get("health") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(field_err(i, &id, "health", obj, "must be true or false")),
    };
    Ok(DeviceInfo {
        device_type: json_str(i, &id, obj, "type")?,
        mode: json_str(i, &id, obj, "mode")?,
        mig_profiles: decode_mig_profiles(obj.get("migProfiles"), &format!("device {i} ({id:?})"))?,
        id,
        count,
        devmem,
        devcore,
        numa,
        health,
        index,
        network_id: obj
            .get("custominfo")
            .and_then(|c| c.get("NetworkID"))
            .and_then(Value::as_f64)
            .filter(|n| n.fract() == 0.0 && n.abs() < 1e15)
            .map(|n| n as i64),
        card: die_card(obj.get("custominfo")),
    })
}

/// The card of a die in die mode (`custominfo.DeviceStrategy` `die`):
/// `custominfo.AIC` as text (a number is read as written), `""` when
/// absent; `None` in card mode.
fn die_card(custom: Option<&Value>) -> Option<String> {
    let custom = custom?;
    (custom.get("DeviceStrategy")?.as_str()? == "die").then(|| match custom.get("AIC") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    })
}

fn field_err(
    i: usize,
    id: &str,
    field: &str,
    obj: &Map<String, Value>,
    problem: &str,
) -> DecodeError {
    let shown = obj.get(field).map(Value::to_string).unwrap_or_default();
    err(
        &format!("{}:{shown}", json_string(field)),
        format!("device {i} ({id:?}): {field} {problem}"),
    )
}

fn json_str(
    i: usize,
    id: &str,
    obj: &Map<String, Value>,
    field: &str,
) -> Result<String, DecodeError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(field_err(i, id, field, obj, "must be a string")),
    }
}

fn json_int(
    i: usize,
    id: &str,
    obj: &Map<String, Value>,
    field: &str,
    min: i64,
    max: i64,
) -> Result<i64, DecodeError> {
    let range = || format!("must be a whole number from {min} to {max}");
    match obj.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(field_err(i, id, field, obj, &range())),
        },
        Some(_) => Err(field_err(i, id, field, obj, &range())),
    }
}

fn decode_legacy(value: &str) -> Result<Vec<DeviceInfo>, DecodeError> {
    let mut pieces: Vec<&str> = value.split(':').collect();
    // Every device is terminated by `:`, so the piece after the last one is
    // empty; older writers may have left the terminator out.
    if pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    }
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, piece)| legacy_device(i, piece))
        .collect()
}

fn legacy_device(i: usize, piece: &str) -> Result<DeviceInfo, DecodeError> {
    let fields: Vec<&str> = piece.split(',').collect();
    let (id, count, devmem, devcore, device_type, numa, health, rest) = match fields.as_slice() {
        [id, count, devmem, devcore, ty, numa, health] => {
            (*id, *count, *devmem, *devcore, *ty, *numa, *health, None)
        }
        [id, count, devmem, devcore, ty, numa, health, index, mode] => (
            *id,
            *count,
            *devmem,
            *devcore,
            *ty,
            *numa,
            *health,
            Some((*index, *mode)),
        ),
        _ if piece.is_empty() => return Err(err(piece, format!("device {i} is empty"))),
        _ => {
            return Err(err(
                piece,
                format!(
                    "device {i}: expected 7 or 9 comma-separated fields \
                     (uuid,count,devmem,devcore,type,numa,health[,index,mode]), found {}",
                    fields.len()
                ),
            ));
        }
    };
    let number = |field: &str, text: &str, min: i64, max: i64| -> Result<i64, DecodeError> {
        match text.parse::<i64>() {
            Ok(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(err(
                piece,
                format!("device {i}: {field} {text:?} must be a whole number from {min} to {max}"),
            )),
        }
    };
    let unsigned = |field: &str, text: &str, max: u32| -> Result<u32, DecodeError> {
        let v = number(field, text, 0, i64::from(max))?;
        u32::try_from(v).map_err(|_| err(piece, format!("device {i}: {field} out of range")))
    };
    let (index, mode) = match rest {
        Some((index, mode)) => (unsigned("index", index, u32::MAX)?, mode.to_string()),
        None => (0, DEFAULT_MODE.to_string()),
    };
    let numa = number("numa", numa, i64::from(i32::MIN), i64::from(i32::MAX))?;
    let numa =
        i32::try_from(numa).map_err(|_| err(piece, format!("device {i}: numa out of range")))?;
    Ok(DeviceInfo {
        id: id.to_string(),
        count: unsigned("count", count, MAX_I32)?,
        devmem: unsigned("devmem", devmem, MAX_I32)?,
        devcore: unsigned("devcore", devcore, MAX_I32)?,
        device_type: device_type.to_string(),
        numa,
        health: parse_go_bool(health).ok_or_else(|| {
            err(
                piece,
                format!("device {i}: health {health:?} is not a boolean (true/false/1/0/t/f)"),
            )
        })?,
        index,
        mode,
        // The text form predates MIG profiles and custom info.
        mig_profiles: Vec::new(),
        network_id: None,
        card: None,
    })
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(id: &str, index: u32) -> DeviceInfo {
        DeviceInfo {
            id: id.to_string(),
            count: 10,
            devmem: 32768,
            devcore: 100,
            device_type: "NVIDIA-Tesla V100-PCIE-32GB".to_string(),
            numa: 0,
            health: true,
            index,
            mode: "hami-core".to_string(),
            mig_profiles: Vec::new(),
            network_id: None,
            card: None,
        }
    }

    fn decode_err(value: &str) -> DecodeError {
        crate::hami::expect_decode_error(value, decode_node_devices(value), NODE_NVIDIA_REGISTER)
    }

    #[test]
    fn hami_json_example() {
        let v = r#"[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","numa":0,"health":true,"index":0}]"#;
        let d = decode_node_devices(v).unwrap();
        assert_eq!(
            d,
            vec![DeviceInfo {
                id: "GPU-0".into(),
                count: 5,
                devmem: 8192,
                devcore: 100,
                device_type: "NVIDIA-Tesla P4".into(),
                numa: 0,
                health: true,
                index: 0,
                mode: String::new(),
                mig_profiles: Vec::new(),
                network_id: None,
                card: None,
            }]
        );
        // HAMi's example has no mode, so encoding gives back the same bytes.
        assert_eq!(encode_node_devices_json(&d), v);
    }

    /// `migProfiles` (HAMi v2.10) is read; fields HAMi's plugin never
    /// writes are ignored.
    #[test]
    fn json_absent_null_and_unknown_fields() {
        let v = r#" [{"id":"GPU-1","type":null,"migProfiles":[{"name":"1g.10gb","memoryMB":10240}],
                     "devicevendor":"NVIDIA","custominfo":{"a":1},"mode":"mig","index":3,"numa":-1}] "#;
        let d = decode_node_devices(v).unwrap();
        assert_eq!(
            d,
            vec![DeviceInfo {
                id: "GPU-1".into(),
                index: 3,
                numa: -1,
                mode: "mig".into(),
                mig_profiles: vec![crate::hami::mig::MigProfile {
                    name: "1g.10gb".into(),
                    memory_mib: 10240,
                    cores: 0,
                    slice_count: 0,
                    placements: Vec::new(),
                }],
                ..DeviceInfo::default()
            }]
        );
    }

    #[test]
    fn json_encoder_matches_serde() {
        let mut d = vec![gpu("GPU-\"a\"\\\u{1}é", 0), gpu("GPU-1", 7)];
        d[1].mode.clear();
        d[1].numa = -3;
        d[1].health = false;
        assert_eq!(
            encode_node_devices_json(&d),
            serde_json::to_string(&d).unwrap()
        );
        assert_eq!(encode_node_devices_json(&[]), "[]");
        assert_eq!(
            encode_node_devices_json(&[gpu("GPU-0", 1)]),
            r#"[{"id":"GPU-0","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":0,"health":true,"index":1,"mode":"hami-core"}]"#
        );
    }

    #[test]
    fn hami_legacy_example_seven_fields() {
        let v = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:\
                 GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:";
        let d = decode_node_devices(v).unwrap();
        assert_eq!(
            d,
            vec![
                gpu("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", 0),
                gpu("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", 0),
            ]
        );
    }

    #[test]
    fn legacy_nine_fields_and_go_bools() {
        let v = "GPU-a,4,16384,100,NVIDIA A10,1,False,2,mps:GPU-b,4,16384,50,NVIDIA A10,-1,T,3,hami-core:\n";
        let d = decode_node_devices(v).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].index, d[0].mode.as_str(), d[0].health),
            (2, "mps", false)
        );
        assert_eq!(
            (d[1].index, d[1].numa, d[1].health, d[1].devcore),
            (3, -1, true, 50)
        );
        // No trailing ':' is accepted too.
        let d2 = decode_node_devices("GPU-a,4,16384,100,NVIDIA A10,1,0,2,mps").unwrap();
        assert_eq!(d2[0], d[0]);
        for (text, b) in [
            ("1", true),
            ("t", true),
            ("TRUE", true),
            ("True", true),
            ("0", false),
            ("f", false),
            ("F", false),
            ("FALSE", false),
        ] {
            assert_eq!(parse_go_bool(text), Some(b), "{text}");
        }
        assert_eq!(parse_go_bool("yes"), None);
        assert_eq!(parse_go_bool("tRUE"), None);
    }

    #[test]
    fn legacy_round_trip() {
        let d = vec![gpu("GPU-0", 0), gpu("GPU-1", 1)];
        let text = encode_node_devices_legacy(&d);
        assert_eq!(
            text,
            "GPU-0,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,0,hami-core:\
             GPU-1,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,1,hami-core:"
        );
        assert_eq!(decode_node_devices(&text).unwrap(), d);
    }

    #[test]
    fn empty_inventories_are_errors() {
        for v in ["", "   ", "[]", " [ ] "] {
            let e = decode_err(v);
            assert_eq!(e.problem, "no GPU registered", "{v:?}");
            assert_eq!(e.piece, v.trim());
        }
    }

    #[test]
    fn json_errors() {
        let e = decode_err(r#"[{"id":"GPU-0","count":-1}]"#);
        assert_eq!(e.piece, r#""count":-1"#);
        assert!(e.problem.contains("device 0 (\"GPU-0\")"), "{e}");

        let e = decode_err(r#"[{"id":"GPU-0","devmem":2147483648}]"#);
        assert_eq!(e.piece, r#""devmem":2147483648"#);
        let e = decode_err(r#"[{"id":"GPU-0","devcore":1.5}]"#);
        assert_eq!(e.piece, r#""devcore":1.5"#);
        let e = decode_err(r#"[{"id":"GPU-0","index":4294967296}]"#);
        assert_eq!(e.piece, r#""index":4294967296"#);
        let e = decode_err(r#"[{"id":"GPU-0","numa":2147483648}]"#);
        assert_eq!(e.piece, r#""numa":2147483648"#);
        let e = decode_err(r#"[{"id":"GPU-0","count":"5"}]"#);
        assert_eq!(e.piece, r#""count":"5""#);
        let e = decode_err(r#"[{"id":"GPU-0","health":"true"}]"#);
        assert_eq!(e.piece, r#""health":"true""#);
        let e = decode_err(r#"[{"id":7}]"#);
        assert_eq!(e.piece, r#""id":7"#);
        let e = decode_err(r#"[{"id":"GPU-0","type":["x"]}]"#);
        assert_eq!(e.piece, r#""type":["x"]"#);
        let e = decode_err(r#"[{"id":"GPU-0","mode":false}]"#);
        assert_eq!(e.piece, r#""mode":false"#);

        let e = decode_err(r#"[{"id":"GPU-0"},"GPU-1"]"#);
        assert_eq!(e.piece, r#""GPU-1""#);
        assert!(e.problem.contains("device 1"), "{e}");

        let unbalanced = r#"[{"id":"GPU-0","count":5"#;
        let e = decode_err(unbalanced);
        assert_eq!(e.piece, unbalanced);
        assert!(e.problem.starts_with("not valid JSON"), "{e}");

        let e = decode_err(r#"{"id":"GPU-0"}"#);
        assert_eq!(e.piece, r#"{"id":"GPU-0"}"#);
    }

    #[test]
    fn missing_and_duplicate_ids() {
        let e = decode_err(r#"[{"id":"GPU-0"},{"count":1}]"#);
        assert_eq!(e.problem, "device 1 has no id");
        let e = decode_err(r#"[{"id":"GPU-0","index":0},{"id":"GPU-0","index":1}]"#);
        assert_eq!(e.piece, "GPU-0");
        assert!(e.problem.contains("twice"), "{e}");
        let e = decode_err("GPU-0,1,2,3,T,0,true:GPU-0,1,2,3,T,0,true:");
        assert_eq!(e.piece, "GPU-0");
        let e = decode_err(",1,2,3,T,0,true:");
        assert_eq!(e.problem, "device 0 has no id");
        // Equal indexes are fine: the 7-field form gives every device index 0.
        assert!(decode_node_devices("GPU-0,1,2,3,T,0,true:GPU-1,1,2,3,T,0,true:").is_ok());
    }

    #[test]
    fn legacy_errors() {
        let cases = [
            ("GPU-0,1,2,3,T,0:", "GPU-0,1,2,3,T,0", "found 6"),
            (
                "GPU-0,1,2,3,T,0,true,0:",
                "GPU-0,1,2,3,T,0,true,0",
                "found 8",
            ),
            (
                "GPU-0,1,2,3,T,0,true,0,m,x:",
                "GPU-0,1,2,3,T,0,true,0,m,x",
                "found 10",
            ),
            ("GPU-0:", "GPU-0", "found 1"),
            (
                "GPU-0,-1,2,3,T,0,true:",
                "GPU-0,-1,2,3,T,0,true",
                "count \"-1\"",
            ),
            (
                "GPU-0,1,2147483648,3,T,0,true:",
                "GPU-0,1,2147483648,3,T,0,true",
                "devmem",
            ),
            (
                "GPU-0,1,2, 3,T,0,true:",
                "GPU-0,1,2, 3,T,0,true",
                "devcore \" 3\"",
            ),
            (
                "GPU-0,1,2,3,T,x,true:",
                "GPU-0,1,2,3,T,x,true",
                "numa \"x\"",
            ),
            (
                "GPU-0,1,2,3,T,0,yes:",
                "GPU-0,1,2,3,T,0,yes",
                "health \"yes\"",
            ),
            (
                "GPU-0,1,2,3,T,0,true,-1,m:",
                "GPU-0,1,2,3,T,0,true,-1,m",
                "index \"-1\"",
            ),
            (
                "GPU-0,1,2,3,T,0,true,4294967296,m:",
                "GPU-0,1,2,3,T,0,true,4294967296,m",
                "index",
            ),
            (
                "GPU-0,99999999999999999999,2,3,T,0,true:",
                "GPU-0,99999999999999999999,2,3,T,0,true",
                "count",
            ),
        ];
        for (value, piece, needle) in cases {
            let e = decode_err(value);
            assert_eq!(e.piece, piece, "{value:?}");
            assert!(e.problem.contains(needle), "{value:?}: {e}");
            assert!(e.problem.starts_with("device 0"), "{value:?}: {e}");
        }
        let e = decode_err(":");
        assert_eq!(
            (e.piece.as_str(), e.problem.as_str()),
            ("", "device 0 is empty")
        );
        let e = decode_err("GPU-0,1,2,3,T,0,true::GPU-1,1,2,3,T,0,true:");
        assert_eq!(e.piece, "");
        assert_eq!(e.problem, "device 1 is empty");
    }

    #[test]
    fn serde_derive_reads_absent_fields() {
        let d: DeviceInfo = serde_json::from_str(r#"{"id":"GPU-0","type":"T"}"#).unwrap();
        assert_eq!(d.device_type, "T");
        assert_eq!(d.count, 0);
    }
}
