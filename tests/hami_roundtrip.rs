//! Property tests for HAMi's wire formats: what gpugate encodes decodes to
//! the same value, and no decoder panics on any string.

use std::collections::BTreeSet;

use gpugate::fuzzing;
use gpugate::hami::cordon::{DeviceCordon, decode_device_cordon, encode_device_cordon};
use gpugate::hami::handshake::{Handshake, decode_handshake, encode_handshake};
use gpugate::hami::keys::VGPU_DEVICES_TO_ALLOCATE;
use gpugate::hami::mig::{MigPlacement, MigProfile};
use gpugate::hami::node_lock::{NodeLock, decode_node_lock, encode_node_lock};
use gpugate::hami::pair_scores::{PairScores, decode_pair_scores, encode_pair_scores};
use gpugate::hami::pod_devices::{
    ContainerDevice, PodDevices, decode_pod_devices, encode_pod_devices,
};
use gpugate::hami::register::{
    DeviceInfo, decode_node_devices, encode_node_devices_json, encode_node_devices_legacy,
};
use jiff::Timestamp;
use jiff::civil::DateTime;
use proptest::collection::{btree_map, btree_set, vec};
use proptest::prelude::*;

/// What HAMi parses as `int32` and gpugate keeps as `u32`.
fn int32_u32() -> impl Strategy<Value = u32> {
    0..=i32::MAX.unsigned_abs()
}

/// A device with fields any JSON can carry.
fn json_device(id: String) -> impl Strategy<Value = DeviceInfo> {
    (
        int32_u32(),
        int32_u32(),
        int32_u32(),
        any::<String>(),
        any::<i32>(),
        any::<bool>(),
        any::<u32>(),
        any::<String>(),
        proptest::option::of(any::<String>()),
    )
        .prop_map(move |(a, b, c, d, e, f, g, h, card)| DeviceInfo {
            // A die's card (Vastai's die mode): any text, or card mode.
            card,
            ..device_info(id.clone(), (a, b, c, d, e, f, g, h))
        })
}

type DeviceFields = (u32, u32, u32, String, i32, bool, u32, String);

fn device_info(
    id: String,
    (count, devmem, devcore, device_type, numa, health, index, mode): DeviceFields,
) -> DeviceInfo {
    DeviceInfo {
        id,
        count,
        devmem,
        devcore,
        device_type,
        numa,
        health,
        index,
        mode,
        mig_profiles: Vec::new(),
        network_id: None,
        card: None,
    }
}

/// Devices with unique ids, built from `ids`.
fn devices(
    ids: impl Strategy<Value = String>,
    device: impl Fn(String) -> BoxedStrategy<DeviceInfo> + 'static,
) -> impl Strategy<Value = Vec<DeviceInfo>> {
    btree_set(ids, 1..8).prop_flat_map(move |ids| ids.into_iter().map(&device).collect::<Vec<_>>())
}

/// A device the legacy text form can carry: no `,` or `:` anywhere, no
/// whitespace at the ends of the whole value.
fn legacy_device(id: String) -> impl Strategy<Value = DeviceInfo> {
    (
        int32_u32(),
        int32_u32(),
        int32_u32(),
        "[A-Za-z0-9 ._()-]{0,30}",
        any::<i32>(),
        any::<bool>(),
        any::<u32>(),
        "[a-z-]{0,10}",
    )
        .prop_map(move |fields| device_info(id.clone(), fields))
}

fn pair_scores() -> impl Strategy<Value = PairScores> {
    vec((any::<String>(), any::<String>(), any::<i32>()), 0..20).prop_map(|pairs| {
        let mut s = PairScores::default();
        for (a, b, score) in pairs {
            s.insert(&a, &b, score);
        }
        s
    })
}

fn pod_devices() -> impl Strategy<Value = PodDevices> {
    let device = (
        "[^,:;]{1,20}",
        prop_oneof!["NVIDIA", "[^,:;]{1,8}"],
        int32_u32(),
        int32_u32(),
        // HAMi master's fifth field: 1 (not written) most of the time.
        prop_oneof![3 => Just(1u32), 1 => 1..=i32::MAX as u32],
    )
        .prop_map(|(uuid, vendor, mem_mib, cores, slots)| ContainerDevice {
            uuid,
            vendor,
            mem_mib,
            cores,
            slots,
        });
    vec(vec(device, 0..4), 0..6).prop_map(|containers| PodDevices { containers })
}

/// Whole seconds from year 0000 to the end of jiff's range.
fn whole_second() -> impl Strategy<Value = Timestamp> {
    let min = -62_167_219_200_i64; // 0000-01-01T00:00:00Z
    let max = Timestamp::MAX.as_second();
    (min..=max).prop_filter_map("in range", |s| Timestamp::from_second(s).ok())
}

fn node_lock() -> impl Strategy<Value = NodeLock> {
    (
        whole_second(),
        proptest::option::of(("[^,]{1,20}", "[^,]{1,20}")),
    )
        .prop_map(|(time, holder)| match holder {
            Some((ns, name)) => NodeLock::new(time, &ns, &name),
            None => NodeLock { time, holder: None },
        })
}

fn civil_second() -> impl Strategy<Value = DateTime> {
    (
        0_i16..=9999,
        1_i8..=12,
        1_i8..=31,
        0_i8..=23,
        0_i8..=59,
        0_i8..=59,
    )
        .prop_filter_map("valid date", |(y, mo, d, h, mi, s)| {
            DateTime::new(y, mo, d, h, mi, s, 0).ok()
        })
}

fn handshake() -> impl Strategy<Value = Handshake> {
    prop_oneof![
        civil_second().prop_map(Handshake::Requesting),
        any::<String>().prop_map(Handshake::Reported),
        any::<String>().prop_map(Handshake::Deleted),
    ]
}

fn cordon() -> impl Strategy<Value = DeviceCordon> {
    btree_set("[^,\\s\\p{Cc}]{1,20}", 0..6).prop_map(|uuids| DeviceCordon { uuids })
}

/// Strings over the formats' own alphabet, so that decoders get past their
/// first checks more often than with arbitrary strings.
const ALPHABET: &str = "[0-9a-zA-Z,:;\\-\\[\\]{}\" ._+]{0,80}";

/// JSON-ish strings: fragments of valid values glued together.
fn json_like() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\"id\"".to_string()),
        Just("\"uuid\"".to_string()),
        Just("\"score\"".to_string()),
        Just("\"count\"".to_string()),
        Just("\"health\"".to_string()),
        Just("\"GPU-0\"".to_string()),
        Just("\"GPU-1\"".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
    ];
    vec(fragment, 0..30).prop_map(|f| f.concat())
}

fn every_decoder(s: &str) {
    let _ = decode_node_devices(s);
    let _ = decode_pair_scores(s);
    let _ = decode_pod_devices(VGPU_DEVICES_TO_ALLOCATE, s);
    let _ = decode_node_lock(s);
    let _ = decode_handshake(s);
    let _ = decode_device_cordon(s);
    // The fuzz targets' checks: decoding what was decoded and encoded again
    // gives the same value.
    for (_, check) in fuzzing::TARGETS {
        check(s.as_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn register_json_round_trip(
        d in devices(any::<String>().prop_filter("non-empty", |s| !s.is_empty()),
                     |id| json_device(id).boxed())
    ) {
        let text = encode_node_devices_json(&d);
        prop_assert_eq!(decode_node_devices(&text), Ok(d.clone()));
        // The hand-written encoder agrees with serde (which leaves
        // `custominfo` to the hand-written reader and writer).
        let plain: Vec<DeviceInfo> = d.into_iter().map(|x| DeviceInfo { card: None, ..x }).collect();
        prop_assert_eq!(
            Some(encode_node_devices_json(&plain)),
            serde_json::to_string(&plain).ok()
        );
    }

    /// A MIG GPU's profiles (HAMi v2.10) survive the JSON form, whatever
    /// their names, numbers and placements.
    #[test]
    fn register_mig_profiles_round_trip(
        profiles in btree_map(
            "[0-9]g\\.[0-9]{1,3}gb(\\+me)?",
            (int32_u32(), 0..=100u32, 1..=8u32,
             vec((0..8u32, 1..=8u32), 0..8)),
            1..6,
        )
    ) {
        let mig_profiles: Vec<MigProfile> = profiles
            .into_iter()
            .map(|(name, (memory_mib, cores, slice_count, placements))| MigProfile {
                name,
                memory_mib,
                cores,
                slice_count,
                placements: placements
                    .into_iter()
                    .map(|(start, size)| MigPlacement { start, size })
                    .collect(),
            })
            .collect();
        let d = vec![DeviceInfo {
            id: "GPU-a".into(),
            count: 7,
            devmem: 40960,
            devcore: 100,
            device_type: "NVIDIA A100-SXM4-40GB".into(),
            mode: "mig".into(),
            health: true,
            mig_profiles,
            ..DeviceInfo::default()
        }];
        let text = encode_node_devices_json(&d);
        prop_assert_eq!(decode_node_devices(&text), Ok(d));
    }

    #[test]
    fn register_legacy_round_trip(
        d in devices("[A-Za-z0-9][A-Za-z0-9-]{0,40}", |id| legacy_device(id).boxed())
    ) {
        let text = encode_node_devices_legacy(&d);
        prop_assert_eq!(decode_node_devices(&text), Ok(d));
    }

    #[test]
    fn register_legacy_seven_fields(
        d in devices("[A-Za-z0-9][A-Za-z0-9-]{0,40}", |id| legacy_device(id).boxed())
    ) {
        let text: String = d
            .iter()
            .map(|d| format!("{},{},{},{},{},{},{}:",
                d.id, d.count, d.devmem, d.devcore, d.device_type, d.numa, d.health))
            .collect();
        let want: Vec<DeviceInfo> = d
            .into_iter()
            .map(|d| DeviceInfo { index: 0, mode: "hami-core".into(), ..d })
            .collect();
        prop_assert_eq!(decode_node_devices(&text), Ok(want));
    }

    #[test]
    fn pair_scores_round_trip(s in pair_scores()) {
        let text = encode_pair_scores(&s);
        let back = decode_pair_scores(&text);
        prop_assert_eq!(back.as_ref(), Ok(&s));
        prop_assert_eq!(encode_pair_scores(&s), text);
    }

    #[test]
    fn pair_scores_lookup_is_symmetric(s in pair_scores(), extra in any::<String>()) {
        let uuids: BTreeSet<&str> = s
            .iter()
            .flat_map(|(a, b, _)| [a, b])
            .chain([extra.as_str()])
            .collect();
        for a in &uuids {
            for b in &uuids {
                prop_assert_eq!(s.get(a, b), s.get(b, a));
            }
        }
        for (a, b, score) in s.iter() {
            prop_assert!(a < b);
            prop_assert_eq!(s.get(a, b), score);
        }
    }

    #[test]
    fn pair_scores_from_maps_round_trip(
        m in btree_map("GPU-[0-9]", btree_map("GPU-[0-9]", any::<i32>(), 0..5), 0..5)
    ) {
        let mut s = PairScores::default();
        for (a, others) in &m {
            for (b, score) in others {
                s.insert(a, b, *score);
            }
        }
        prop_assert_eq!(decode_pair_scores(&encode_pair_scores(&s)), Ok(s));
    }

    #[test]
    fn pod_devices_round_trip(d in pod_devices()) {
        let text = encode_pod_devices(&d);
        prop_assert_eq!(decode_pod_devices(VGPU_DEVICES_TO_ALLOCATE, &text), Ok(d));
    }

    #[test]
    fn node_lock_round_trip(l in node_lock()) {
        let text = encode_node_lock(&l);
        prop_assert_eq!(decode_node_lock(&text), Ok(l));
    }

    #[test]
    fn node_lock_reads_any_offset(l in node_lock(), offset_minutes in -(23 * 60 + 59)..=(23 * 60 + 59_i32)) {
        // The same instant written with a local offset, as HAMi writes it.
        let offset = jiff::tz::Offset::from_seconds(offset_minutes * 60).unwrap();
        let local = offset.to_datetime(l.time);
        let sign = if offset_minutes < 0 { '-' } else { '+' };
        let (h, m) = (offset_minutes.abs() / 60, offset_minutes.abs() % 60);
        let time = format!("{}{sign}{h:02}:{m:02}", local.strftime("%Y-%m-%dT%H:%M:%S"));
        let text = match &l.holder {
            Some(holder) => format!("{time},{},{}", holder.namespace, holder.name),
            None => time,
        };
        let year = local.year();
        prop_assume!((0..=9999).contains(&year));
        prop_assert_eq!(decode_node_lock(&text), Ok(l));
    }

    #[test]
    fn handshake_round_trip(h in handshake()) {
        let text = encode_handshake(&h);
        prop_assert_eq!(decode_handshake(&text), Ok(h));
    }

    #[test]
    fn cordon_round_trip(c in cordon()) {
        let text = encode_device_cordon(&c);
        prop_assert_eq!(decode_device_cordon(&text), Ok(c));
    }

    #[test]
    fn decoders_never_panic_on_any_string(s in any::<String>()) {
        every_decoder(&s);
    }

    #[test]
    fn decoders_never_panic_on_format_alphabet(s in ALPHABET) {
        every_decoder(&s);
    }

    #[test]
    fn decoders_never_panic_on_json_like(s in json_like()) {
        every_decoder(&s);
    }

    #[test]
    fn checks_never_panic_on_any_bytes(b in vec(any::<u8>(), 0..200)) {
        for (_, check) in fuzzing::TARGETS {
            check(&b);
        }
    }
}
