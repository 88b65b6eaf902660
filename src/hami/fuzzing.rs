//! Round-trip checks of HAMi's codecs, shared by the fuzz targets (`fuzz/fuzz_targets/`) and
//! the corpus replay test (`tests/fuzz_corpus.rs`), so both check the same
//! thing. Each check takes raw bytes; if they are UTF-8 and decode, encoding
//! the result and decoding again must give the same value. A failed check
//! panics, which is what a fuzzer reports.
//!
//! Not part of gpugate's API.

use jiff::Timestamp;

use super::keys::VGPU_DEVICES_ALLOCATED;
use super::{cordon, handshake, mig, node_lock, pair_scores, pod_devices, register};

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// `hami.io/node-nvidia-register`: JSON round trip, and the legacy text form
/// too when the devices can be written in it.
pub fn check_node_register(data: &[u8]) {
    let Some(Ok(devices)) = text(data).map(register::decode_node_devices) else {
        return;
    };
    let json = register::encode_node_devices_json(&devices);
    assert_eq!(
        register::decode_node_devices(&json).as_ref(),
        Ok(&devices),
        "JSON {json:?}"
    );
    let legacy = register::encode_node_devices_legacy(&devices);
    let representable = devices.iter().all(|d| {
        d.mig_profiles.is_empty()
            && [&d.id, &d.device_type, &d.mode]
                .iter()
                .all(|s| !s.contains([',', ':']))
    }) && legacy.trim() == legacy
        && !legacy.starts_with(['[', '{']);
    if representable {
        assert_eq!(
            register::decode_node_devices(&legacy).as_ref(),
            Ok(&devices),
            "legacy {legacy:?}"
        );
    }
}

/// `hami.io/vgpu-mig-allocations`: what decodes encodes to the same
/// entries, and no two entries name one (container, device) pair.
pub fn check_mig_allocations(data: &[u8]) {
    let Some(Ok(entries)) = text(data).map(mig::decode_mig_allocations) else {
        return;
    };
    let encoded = mig::encode_mig_allocations(&entries);
    assert_eq!(
        mig::decode_mig_allocations(&encoded).as_ref(),
        Ok(&entries),
        "{encoded:?}"
    );
    let pairs: std::collections::BTreeSet<(u32, u32)> = entries
        .iter()
        .map(|e| (e.container_index, e.device_index))
        .collect();
    assert_eq!(pairs.len(), entries.len());
}

/// `hami.io/node-nvidia-score`.
pub fn check_pair_scores(data: &[u8]) {
    let Some(Ok(scores)) = text(data).map(pair_scores::decode_pair_scores) else {
        return;
    };
    let encoded = pair_scores::encode_pair_scores(&scores);
    assert_eq!(
        pair_scores::decode_pair_scores(&encoded).as_ref(),
        Ok(&scores),
        "{encoded:?}"
    );
    for (a, b, s) in scores.iter() {
        assert_eq!(scores.get(a, b), s);
        assert_eq!(scores.get(b, a), s);
    }
}

/// `hami.io/vgpu-devices-allocated` (and `-to-allocate`, the same format).
pub fn check_pod_devices(data: &[u8]) {
    let decode = |v: &str| pod_devices::decode_pod_devices(VGPU_DEVICES_ALLOCATED, v);
    let Some(Ok(devices)) = text(data).map(decode) else {
        return;
    };
    let encoded = pod_devices::encode_pod_devices(&devices);
    assert_eq!(decode(&encoded).as_ref(), Ok(&devices), "{encoded:?}");
}

/// `hami.io/mutex.lock`. The encoder writes whole seconds, so the time
/// comes back rounded down to the second.
pub fn check_node_lock(data: &[u8]) {
    let Some(Ok(lock)) = text(data).map(node_lock::decode_node_lock) else {
        return;
    };
    let encoded = node_lock::encode_node_lock(&lock);
    let whole = floor_to_second(lock.time);
    let want = node_lock::NodeLock {
        time: whole,
        holder: lock.holder.clone(),
    };
    assert_eq!(
        node_lock::decode_node_lock(&encoded).as_ref(),
        Ok(&want),
        "{encoded:?}"
    );
}

fn floor_to_second(t: Timestamp) -> Timestamp {
    let secs = t.as_second() - i64::from(t.subsec_nanosecond() < 0);
    Timestamp::from_second(secs).unwrap_or(t)
}

/// `hami.io/node-handshake`.
pub fn check_handshake(data: &[u8]) {
    let Some(Ok(h)) = text(data).map(handshake::decode_handshake) else {
        return;
    };
    let encoded = handshake::encode_handshake(&h);
    assert_eq!(
        handshake::decode_handshake(&encoded).as_ref(),
        Ok(&h),
        "{encoded:?}"
    );
}

/// `hami.io/device-cordon`.
pub fn check_device_cordon(data: &[u8]) {
    let Some(Ok(c)) = text(data).map(cordon::decode_device_cordon) else {
        return;
    };
    let encoded = cordon::encode_device_cordon(&c);
    assert_eq!(
        cordon::decode_device_cordon(&encoded).as_ref(),
        Ok(&c),
        "{encoded:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_rounds_down_before_the_epoch() {
        let t: Timestamp = "1969-12-31T23:59:59.5Z".parse().unwrap();
        assert_eq!(floor_to_second(t), "1969-12-31T23:59:59Z".parse().unwrap());
        let t: Timestamp = "1970-01-01T00:00:00.5Z".parse().unwrap();
        assert_eq!(floor_to_second(t), Timestamp::UNIX_EPOCH);
    }
}
