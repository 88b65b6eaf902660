//! Huawei Ascend NPUs as HAMi v2.10 schedules them (hami-vendors.md
//! section 2): one kind per chip of HAMi's chart (`vnpus.configs[]`),
//! registered as JSON under `hami.io/node-register-<chip>` by HAMi's
//! ascend-device-plugin, split into the chip's fixed templates (or, on a
//! node whose plugin says `hami-vnpu-core: "true"` and for a pod that asks
//! with `huawei.com/vnpu-mode: hami-core`, into soft slices of memory and
//! cores), written to the pod as `hami.io/<chip>-devices-to-allocate` and
//! `-allocated` under the vendor word `<chip>`, with each device's
//! template in `huawei.com/<chip>` (JSON), behind the node lock every HAMi
//! backend shares.
//!
//! The chips differ only in names and numbers, so each is one
//! [`ascend_kind!`] line over the chart's values (2.1).

use super::{
    ConfigDefaults, DeviceKind, DeviceMode, Entries, Grouping, PodLists, SelectionKeys, Sharing,
    Template, TemplateChip, WebhookEnv,
};

/// Pod: `hami-core` asks for a soft split instead of templates (2.3).
pub const VNPU_MODE: &str = "huawei.com/vnpu-mode";
/// The soft split's mode, on the pod and (as `"true"`) on the node.
pub const HAMI_CORE: &str = "hami-core";
/// The template split's mode (a node without the soft split).
pub const TEMPLATE: &str = "template";
/// Node: `"true"` when the node's device plugin splits softly (2.2).
pub const NODE_VNPU_CORE: &str = "hami-vnpu-core";
/// Pod: Unix seconds of the placement, which HAMi writes beside an Ascend
/// allocation (2.3).
pub const PREDICATE_TIME: &str = "predicate-time";

const fn t(name: &'static str, memory: u32, ai_core: u32, ai_cpu: u32) -> Template {
    Template {
        name,
        memory,
        ai_core,
        ai_cpu,
    }
}

/// One chip: its kind from its common word and the chart's values.
macro_rules! ascend_kind {
    ($static:ident, $cw:literal, $chip:literal, $alloc:literal, $cap:literal,
     $core:literal, $cpu:literal, $super_pod:literal, $grouping:expr, [$($tpl:expr),* $(,)?]) => {
        #[doc = concat!("Ascend ", $chip, " NPUs (`", $cw, "`).")]
        pub static $static: DeviceKind = DeviceKind {
            name: $cw,
            vendor: $cw,
            register_key: concat!("hami.io/node-register-", $cw),
            capacity: None,
            score_key: None,
            selection: SelectionKeys {
                // HAMi's Ascend fit reads no type annotation (2.3).
                use_type: "",
                nouse_type: "",
                use_uuid: concat!("hami.io/use-", $cw, "-uuid"),
                nouse_uuid: concat!("hami.io/no-use-", $cw, "-uuid"),
                mode: VNPU_MODE,
                numa_bind: "",
            },
            modes: MODES,
            default_mode: TEMPLATE,
            other_modes: None,
            env: WebhookEnv {
                hide_devices: ("ASCEND_VISIBLE_DEVICES", ""),
                core_policy: "",
                task_priority: "",
            },
            hami_core: false,
            noun: concat!("Ascend ", $chip, " NPU"),
            pod_lists: PodLists {
                to_allocate: concat!("hami.io/", $cw, "-devices-to-allocate"),
                allocated: concat!("hami.io/", $cw, "-devices-allocated"),
            },
            // The plugin registers `type` = the common word, so HAMi pads
            // the list with one entry per container (1.5).
            entries: Entries::EveryContainer,
            config: ConfigDefaults {
                resource_count_name: concat!("huawei.com/", $cw),
                resource_memory_name: concat!("huawei.com/", $cw, "-memory"),
                resource_memory_percentage_name: "",
                resource_core_name: concat!("huawei.com/", $cw, "-core"),
                resource_priority_name: "",
                // HAMi's request: cores 0 unless given (2.1).
                default_cores: 0,
                default_gpu_num: 0,
                memory_factor: 1,
            },
            templates: Some(&TemplateChip {
                chip_name: $chip,
                memory_allocatable: $alloc,
                memory_capacity: $cap,
                ai_core: $core,
                ai_cpu: $cpu,
                templates: &[$($tpl),*],
                super_pod: $super_pod,
                mode_annotation: VNPU_MODE,
                node_mode_annotation: NODE_VNPU_CORE,
                runtime_info: concat!("huawei.com/", $cw),
                cores_from_memory: false,
                several_whole_only: true,
                one_template_per_device: false,
                slots_from_memory: false,
                writes_default_memory: true,
            }),
            grouping: $grouping,
            // HAMi scores the 910 chips by their NPUs' network groups
            // (2.5), not the 310P.
            node_preference: match $grouping {
                Grouping::Any => super::NodePreference::None,
                _ => super::NodePreference::NetworkShare,
            },
            // The `vnpus` section is read entry by entry (`config::Vnpus`);
            // HAMi names the count `resourceName` there.
            section_keys: &[("resourceName", Some("resourceCountName"))],
            node_lock: super::NodeLockStyle::Hami,
            bind_extras: None,
            ..super::VENDOR_DEFAULTS
        };
    };
}

/// Both modes share a device by slices: a template is a slice of fixed
/// size (the request is rounded to it before placement).
static MODES: &[DeviceMode] = &[
    DeviceMode {
        name: HAMI_CORE,
        sharing: Sharing::Slices,
    },
    DeviceMode {
        name: TEMPLATE,
        sharing: Sharing::Slices,
    },
];

// The chart's `vnpus.configs` (hami-vendors.md 2.1 table), in its order.
ascend_kind!(
    ASCEND_910A,
    "Ascend910A",
    "910A",
    32768,
    32768,
    30,
    0,
    false,
    Grouping::NetworkGroups,
    [
        t("vir02", 2184, 2, 0),
        t("vir04", 4369, 4, 0),
        t("vir08", 8738, 8, 0),
        t("vir16", 17476, 16, 0)
    ]
);
ascend_kind!(
    ASCEND_910B2,
    "Ascend910B2",
    "910B2",
    65536,
    65536,
    24,
    6,
    false,
    Grouping::NetworkGroups,
    [
        t("vir03_1c_8g", 8192, 3, 1),
        t("vir06_1c_16g", 16384, 6, 1),
        t("vir12_3c_32g", 32768, 12, 3)
    ]
);
ascend_kind!(
    ASCEND_910B3,
    "Ascend910B3",
    "910B3",
    65536,
    65536,
    20,
    7,
    false,
    Grouping::NetworkGroups,
    [
        t("vir05_1c_16g", 16384, 5, 1),
        t("vir10_3c_32g", 32768, 10, 3)
    ]
);
ascend_kind!(
    ASCEND_910B4_1,
    "Ascend910B4-1",
    "910B4-1",
    65536,
    65536,
    20,
    7,
    false,
    Grouping::NetworkGroups,
    [
        t("vir05_1c_16g", 16384, 5, 1),
        t("vir10_3c_32g", 32768, 10, 3)
    ]
);
ascend_kind!(
    ASCEND_910B4,
    "Ascend910B4",
    "910B4",
    32768,
    32768,
    20,
    7,
    false,
    Grouping::NetworkGroups,
    [
        t("vir05_1c_8g", 8192, 5, 1),
        t("vir10_3c_16g", 16384, 10, 3)
    ]
);
ascend_kind!(
    ASCEND_310P,
    "Ascend310P",
    "310P3",
    21527,
    24576,
    8,
    7,
    false,
    Grouping::Any,
    [
        t("vir01", 3072, 1, 1),
        t("vir02", 6144, 2, 2),
        t("vir04", 12288, 4, 4)
    ]
);
ascend_kind!(
    ASCEND_910C,
    "Ascend910C",
    "Ascend910",
    65536,
    65536,
    20,
    7,
    true,
    Grouping::CardPairs,
    [
        t("vir05_1c_16g", 16384, 5, 1),
        t("vir10_3c_32g", 32768, 10, 3)
    ]
);

/// The Ascend kinds, in the order of [`super::KINDS`] from
/// [`super::KindId::ASCEND_FIRST`].
pub static CHIPS: [&DeviceKind; 7] = [
    &ASCEND_910A,
    &ASCEND_910B2,
    &ASCEND_910B3,
    &ASCEND_910B4_1,
    &ASCEND_910B4,
    &ASCEND_310P,
    &ASCEND_910C,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chips_follow_the_chart_and_sit_in_kinds_in_order() {
        let first = usize::from(super::super::KindId::ASCEND_FIRST.index());
        for (i, chip) in CHIPS.iter().enumerate() {
            assert!(std::ptr::eq(super::super::KINDS[first + i], *chip));
            let t = chip.templates.unwrap();
            assert!(t.templates.windows(2).all(|w| w[0].memory < w[1].memory));
            assert!(t.memory_allocatable <= t.memory_capacity);
        }
        assert_eq!(
            ASCEND_910B3.register_key,
            "hami.io/node-register-Ascend910B3"
        );
        assert_eq!(
            ASCEND_910B3.pod_lists.to_allocate,
            "hami.io/Ascend910B3-devices-to-allocate"
        );
        assert_eq!(
            ASCEND_910C.templates.unwrap().runtime_info,
            "huawei.com/Ascend910C"
        );
        assert_eq!(
            ASCEND_310P.config.resource_memory_name,
            "huawei.com/Ascend310P-memory"
        );
    }
}
