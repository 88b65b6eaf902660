//! A pod's device list, `hami.io/vgpu-devices-to-allocate` and
//! `hami.io/vgpu-devices-allocated` (hami-compat.md 4.2).
//!
//! Each device is `uuid,vendor,mem,cores` terminated by `:`; each container
//! entry (init containers first) is terminated by `;`. One container with
//! two GPUs: `UUID1,NVIDIA,1000,30:UUID2,NVIDIA,1000,30:;`; two containers,
//! the first without devices: `;GPU-1,NVIDIA,3000,0:;`.
//!
//! HAMi master (after v2.10, PR #2877) adds a fifth field, the shares of
//! the device the grant takes (`uuid,vendor,mem,cores,slots`), written only
//! when it is more than 1 (Enflame DRS profiles). Both forms are read; the
//! fifth field is written only when it is not 1, so a grant of one share
//! reads exactly as HAMi v2.10 writes it.

use super::DecodeError;

/// One device handed to a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDevice {
    pub uuid: String,
    /// HAMi's vendor key (`NVIDIA`), not the model name.
    pub vendor: String,
    /// Device memory granted, in MiB.
    pub mem_mib: u32,
    /// Compute share granted, 100 = the whole GPU.
    pub cores: u32,
    /// Shares of the device's split count the grant takes (HAMi master's
    /// fifth field; 1 when absent).
    pub slots: u32,
}

/// The devices of every container of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodDevices {
    /// One entry per container, init containers first; an empty entry is a
    /// container without devices.
    pub containers: Vec<Vec<ContainerDevice>>,
}

/// Decodes a device list; the exact inverse of [`encode_pod_devices`].
///
/// The empty string is a pod with no container entries. Empty container
/// entries are kept, because entry `i` belongs to container `i`. A value
/// without the final `;` (or an entry without the final `:`) is read as if it
/// had one, as HAMi does. Every device has 4 fields, or 5 with the slots
/// (HAMi master), a non-empty uuid and vendor, memory and cores that fit in
/// Go's `int32` (HAMi's device plugin parses them so), and slots from 1 to
/// `int32`'s maximum.
pub fn decode_pod_devices(
    annotation: &'static str,
    value: &str,
) -> Result<PodDevices, DecodeError> {
    let mut entries: Vec<&str> = value.split(';').collect();
    // Every entry is terminated by ';', so what follows the last one is empty.
    if entries.last().is_some_and(|e| e.is_empty()) {
        entries.pop();
    }
    let containers = entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| decode_entry(annotation, i, entry))
        .collect::<Result<_, _>>()?;
    Ok(PodDevices { containers })
}

fn decode_entry(
    annotation: &'static str,
    entry_index: usize,
    entry: &str,
) -> Result<Vec<ContainerDevice>, DecodeError> {
    let mut pieces: Vec<&str> = entry.split(':').collect();
    if pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    }
    pieces
        .into_iter()
        .map(|piece| decode_device(annotation, entry_index, piece))
        .collect()
}

fn decode_device(
    annotation: &'static str,
    entry_index: usize,
    piece: &str,
) -> Result<ContainerDevice, DecodeError> {
    let err = |problem: String| {
        DecodeError::new(
            annotation,
            piece,
            format!("container entry {entry_index}: {problem}"),
        )
    };
    let fields: Vec<&str> = piece.split(',').collect();
    let (uuid, vendor, mem, cores, slots) = match fields[..] {
        [uuid, vendor, mem, cores] => (uuid, vendor, mem, cores, None),
        [uuid, vendor, mem, cores, slots] => (uuid, vendor, mem, cores, Some(slots)),
        _ => {
            return Err(err(format!(
                "expected uuid,vendor,mem,cores or uuid,vendor,mem,cores,slots, found {} field(s)",
                fields.len()
            )));
        }
    };
    if uuid.is_empty() {
        return Err(err("empty uuid".to_string()));
    }
    if vendor.is_empty() {
        return Err(err("empty vendor".to_string()));
    }
    let number = |field: &str, text: &str| {
        text.parse::<i32>()
            .ok()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                err(format!(
                    "{field} {text:?} must be a whole number from 0 to {}",
                    i32::MAX
                ))
            })
    };
    let slots = match slots {
        None => 1,
        Some(text) => match number("slots", text)? {
            0 => return Err(err("slots \"0\": a grant takes at least 1".to_string())),
            n => n,
        },
    };
    Ok(ContainerDevice {
        uuid: uuid.to_string(),
        vendor: vendor.to_string(),
        mem_mib: number("mem", mem)?,
        cores: number("cores", cores)?,
        slots,
    })
}

/// The device uuids a device list names, however malformed the rest is
/// (the first field of every `,`-separated piece, in order, without
/// repeats): what a pod whose list cannot be decoded may hold.
pub fn uuids_named(value: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for piece in value.split([';', ':']) {
        let uuid = piece.split(',').next().unwrap_or_default().trim();
        if !uuid.is_empty() && !out.iter().any(|u| u == uuid) {
            out.push(uuid.to_string());
        }
    }
    out
}

/// Encodes a device list in HAMi's form, with the slots field only where
/// a grant takes more than one share. Uuids and vendors containing `,`,
/// `:` or `;` cannot be represented (HAMi's form has no escaping).
pub fn encode_pod_devices(devices: &PodDevices) -> String {
    let mut out = String::new();
    for container in &devices.containers {
        for d in container {
            out.push_str(&format!(
                "{},{},{},{}",
                d.uuid, d.vendor, d.mem_mib, d.cores
            ));
            if d.slots != 1 {
                out.push_str(&format!(",{}", d.slots));
            }
            out.push(':');
        }
        out.push(';');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hami::keys::{VGPU_DEVICES_ALLOCATED, VGPU_DEVICES_TO_ALLOCATE};

    fn dev(uuid: &str, mem_mib: u32, cores: u32) -> ContainerDevice {
        ContainerDevice {
            uuid: uuid.to_string(),
            vendor: "NVIDIA".to_string(),
            mem_mib,
            cores,
            slots: 1,
        }
    }

    fn decode(value: &str) -> PodDevices {
        decode_pod_devices(VGPU_DEVICES_ALLOCATED, value).unwrap()
    }

    fn decode_err(value: &str) -> DecodeError {
        crate::hami::expect_decode_error(
            value,
            decode_pod_devices(VGPU_DEVICES_TO_ALLOCATE, value),
            VGPU_DEVICES_TO_ALLOCATE,
        )
    }

    #[test]
    fn hami_examples() {
        let u = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448";
        let v = format!("{u},NVIDIA,3000,0:;{u},NVIDIA,5000,0:;");
        let d = decode(&v);
        assert_eq!(
            d.containers,
            vec![vec![dev(u, 3000, 0)], vec![dev(u, 5000, 0)]]
        );
        assert_eq!(encode_pod_devices(&d), v);

        let v = "UUID1,NVIDIA,1000,30:UUID2,NVIDIA,1000,30:;";
        let d = decode(v);
        assert_eq!(
            d.containers,
            vec![vec![dev("UUID1", 1000, 30), dev("UUID2", 1000, 30)]]
        );
        assert_eq!(encode_pod_devices(&d), v);

        let v = ";GPU-1,NVIDIA,3000,0:;";
        let d = decode(v);
        assert_eq!(d.containers, vec![vec![], vec![dev("GPU-1", 3000, 0)]]);
        assert_eq!(encode_pod_devices(&d), v);
    }

    #[test]
    fn empty_entries_are_kept() {
        assert_eq!(decode("").containers.len(), 0);
        assert_eq!(decode(";").containers, vec![Vec::new()]);
        assert_eq!(decode(";;;").containers.len(), 3);
        assert_eq!(encode_pod_devices(&PodDevices::default()), "");
        assert_eq!(
            encode_pod_devices(&PodDevices {
                containers: vec![vec![], vec![]]
            }),
            ";;"
        );
    }

    #[test]
    fn missing_terminators_are_tolerated() {
        let want = vec![vec![dev("GPU-1", 3000, 0)]];
        assert_eq!(decode("GPU-1,NVIDIA,3000,0:").containers, want);
        assert_eq!(decode("GPU-1,NVIDIA,3000,0;").containers, want);
        assert_eq!(decode("GPU-1,NVIDIA,3000,0").containers, want);
        assert_eq!(
            decode(";GPU-1,NVIDIA,3000,0").containers,
            vec![vec![], dev_list("GPU-1")]
        );
    }

    fn dev_list(uuid: &str) -> Vec<ContainerDevice> {
        vec![dev(uuid, 3000, 0)]
    }

    #[test]
    fn other_vendors_are_read() {
        let d = decode("MLU-1,MLU,100,0:;");
        assert_eq!(d.containers[0][0].vendor, "MLU");
    }

    #[test]
    fn errors() {
        let cases = [
            ("GPU-1,NVIDIA,3000:;", "GPU-1,NVIDIA,3000", 0, "found 3"),
            (
                "GPU-1,NVIDIA,3000,0,1,2:;",
                "GPU-1,NVIDIA,3000,0,1,2",
                0,
                "found 6",
            ),
            (
                "GPU-1,NVIDIA,3000,0,x:;",
                "GPU-1,NVIDIA,3000,0,x",
                0,
                "slots \"x\"",
            ),
            (
                "GPU-1,NVIDIA,3000,0,0:;",
                "GPU-1,NVIDIA,3000,0,0",
                0,
                "slots \"0\"",
            ),
            (
                "GPU-1,NVIDIA,3000,0,-2:;",
                "GPU-1,NVIDIA,3000,0,-2",
                0,
                "slots \"-2\"",
            ),
            (";GPU-1:;", "GPU-1", 1, "found 1"),
            (
                ";;GPU-1,NVIDIA,3000,0::GPU-2,NVIDIA,1,0:;",
                "",
                2,
                "found 1",
            ),
            (",NVIDIA,3000,0:;", ",NVIDIA,3000,0", 0, "empty uuid"),
            ("GPU-1,,3000,0:;", "GPU-1,,3000,0", 0, "empty vendor"),
            ("GPU-1,NVIDIA,-1,0:;", "GPU-1,NVIDIA,-1,0", 0, "mem \"-1\""),
            (
                "GPU-1,NVIDIA,2147483648,0:;",
                "GPU-1,NVIDIA,2147483648,0",
                0,
                "mem",
            ),
            (
                "GPU-1,NVIDIA,1,4294967296:;",
                "GPU-1,NVIDIA,1,4294967296",
                0,
                "cores",
            ),
            (
                "GPU-1,NVIDIA,1, 2:;",
                "GPU-1,NVIDIA,1, 2",
                0,
                "cores \" 2\"",
            ),
            ("GPU-1,NVIDIA,1,2.5:;", "GPU-1,NVIDIA,1,2.5", 0, "cores"),
            (" ", " ", 0, "found 1"),
        ];
        for (value, piece, entry, needle) in cases {
            let e = decode_err(value);
            assert_eq!(e.piece, piece, "{value:?}");
            assert!(
                e.problem.starts_with(&format!("container entry {entry}:")),
                "{value:?}: {e}"
            );
            assert!(e.problem.contains(needle), "{value:?}: {e}");
        }
    }

    /// HAMi master's fifth field (PR #2877): read, kept, and written back
    /// only when it is not 1.
    #[test]
    fn five_fields() {
        let d = decode("GPU-1,NVIDIA,12000,30,1:;");
        assert_eq!(d.containers, vec![vec![dev("GPU-1", 12000, 30)]]);
        assert_eq!(encode_pod_devices(&d), "GPU-1,NVIDIA,12000,30:;");
        let v = "GCU-1,Enflame,8192,25,4:GCU-2,Enflame,1024,0:;;";
        let d = decode(v);
        assert_eq!(d.containers[0][0].slots, 4);
        assert_eq!(d.containers[0][1].slots, 1);
        assert_eq!(d.containers[1], Vec::new());
        assert_eq!(encode_pod_devices(&d), v);
        assert_eq!(
            decode("G,NVIDIA,1,2,2147483647").containers[0][0].slots,
            2147483647
        );
    }

    #[test]
    fn uuids_are_found_in_lists_that_do_not_decode() {
        assert_eq!(
            uuids_named("GPU-1,NVIDIA,x,0:GPU-2,NVIDIA:;;GPU-1,,1,1:"),
            ["GPU-1", "GPU-2"]
        );
        assert_eq!(uuids_named("garbage"), ["garbage"]);
        assert!(uuids_named(";;:,").is_empty());
    }

    #[test]
    fn int32_bounds() {
        let d = decode("G,NVIDIA,2147483647,+7:;");
        assert_eq!(
            (d.containers[0][0].mem_mib, d.containers[0][0].cores),
            (2147483647, 7)
        );
    }
}
