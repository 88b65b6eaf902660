//! Cordoned GPUs, `hami.io/device-cordon` (hami-compat.md 3.1): GPU UUIDs,
//! comma-separated, written by an operator. Cordoned GPUs keep their running
//! containers but get no new allocations.

use std::collections::BTreeSet;

use super::DecodeError;
use super::keys::DEVICE_CORDON;

/// The GPUs of a node excluded from new allocations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceCordon {
    pub uuids: BTreeSet<String>,
}

impl DeviceCordon {
    /// The GPU with this UUID is cordoned.
    pub fn contains(&self, uuid: &str) -> bool {
        self.uuids.contains(uuid)
    }
}

/// Decodes `hami.io/device-cordon`. Pieces are trimmed and empty pieces
/// skipped, since people write this annotation by hand (`GPU-a, GPU-b,`);
/// a piece with whitespace or control characters inside is an error rather
/// than a UUID that silently matches nothing.
pub fn decode_device_cordon(value: &str) -> Result<DeviceCordon, DecodeError> {
    let mut uuids = BTreeSet::new();
    for piece in value.split(',').map(str::trim) {
        if piece.is_empty() {
            continue;
        }
        if piece.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(DecodeError::new(
                DEVICE_CORDON,
                piece,
                "a GPU UUID cannot contain whitespace or control characters \
                 (separate UUIDs with commas)",
            ));
        }
        uuids.insert(piece.to_string());
    }
    Ok(DeviceCordon { uuids })
}

/// Encodes the UUIDs comma-separated, sorted. UUIDs containing `,`,
/// whitespace or control characters cannot be represented.
pub fn encode_device_cordon(c: &DeviceCordon) -> String {
    c.uuids
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_hand_written_lists() {
        let c = decode_device_cordon(" GPU-b, GPU-a,,GPU-b ,").unwrap();
        assert!(c.contains("GPU-a"));
        assert!(c.contains("GPU-b"));
        assert!(!c.contains("GPU-c"));
        assert!(!c.contains(""));
        assert_eq!(c.uuids.len(), 2);
        assert_eq!(encode_device_cordon(&c), "GPU-a,GPU-b");
    }

    #[test]
    fn empty_values_cordon_nothing() {
        for v in ["", " ", ",", " , ,"] {
            assert_eq!(
                decode_device_cordon(v).unwrap(),
                DeviceCordon::default(),
                "{v:?}"
            );
        }
        assert_eq!(encode_device_cordon(&DeviceCordon::default()), "");
    }

    #[test]
    fn errors() {
        for (value, piece) in [
            ("GPU-a GPU-b", "GPU-a GPU-b"),
            ("GPU-a,GPU-b\tGPU-c", "GPU-b\tGPU-c"),
            ("GPU-a\u{0}", "GPU-a\u{0}"),
            ("GPU-a,x\u{a0}y", "x\u{a0}y"),
            ("GPU-a\u{7f}", "GPU-a\u{7f}"),
        ] {
            let e = decode_device_cordon(value).unwrap_err();
            assert_eq!(e.annotation, DEVICE_CORDON);
            assert_eq!(e.piece, piece, "{value:?}");
        }
    }
}
