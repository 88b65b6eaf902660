//! Kunlunxin vXPUs as HAMi v2.10 schedules them (hami-vendors.md section
//! 8, the `XPU` backend): registered as JSON under
//! `hami.io/node-register-xpu`, split into three fixed sizes (a quarter,
//! a half or the whole 96 GiB card, cores by the same share), a card
//! holding one size at a time, several cards of a container on one
//! eight-card board's links (`Grouping::Board8`), written to the pod as
//! `hami.io/xpu-devices-to-allocate` and `-allocated` under the vendor
//! word `XPU`, behind the node lock every HAMi backend shares.
//!
//! Whole XPUs (HAMi's `kunlun` backend, 8.2): no register annotation; one
//! XPU per unit of the node capacity of `kunlunxin.com/xpu`, each taken
//! whole by one container, several on one board's links as vXPUs are,
//! written to the pod as `hami.io/kunlun-allocated` alone under the
//! vendor word `kunlun`, with `BAIDU_COM_DEVICE_IDX` for Kunlunxin's
//! plugin (8.3). No node lock.

use super::{
    CapacityDevice, CapacityInventory, ConfigDefaults, DeviceKind, ExtrasInput, Grouping,
    NO_RESOURCES, NO_SELECTION, NodeLockStyle, NodePreference, PodLists, SelectionKeys, Template,
    TemplateChip, VENDOR_DEFAULTS, whole_devices,
};

/// Node: the vXPU inventory (JSON; 8.2).
pub const NODE_REGISTER: &str = "hami.io/node-register-xpu";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "XPU";

/// Kunlunxin vXPUs.
pub static KUNLUN_VXPU: DeviceKind = DeviceKind {
    name: "kunlun",
    vendor: VENDOR,
    register_key: NODE_REGISTER,
    selection: SelectionKeys {
        use_uuid: "hami.io/use-xpu-uuid",
        nouse_uuid: "hami.io/no-use-xpu-uuid",
        ..NO_SELECTION
    },
    noun: "Kunlunxin XPU",
    pod_lists: PodLists {
        to_allocate: "hami.io/xpu-devices-to-allocate",
        allocated: "hami.io/xpu-devices-allocated",
    },
    // The plugin registers `type` = the vendor word (`XPU`), so HAMi pads
    // the list with one entry per container (1.5, the default).
    config: ConfigDefaults {
        resource_count_name: "kunlunxin.com/vxpu",
        resource_memory_name: "kunlunxin.com/vxpu-memory",
        ..NO_RESOURCES
    },
    // HAMi's `kunlun` section names both backends (8.1): the vXPU count
    // and memory under their `V` keys; the whole XPU's count is not read
    // as the vXPU's (a whole-XPU pod must not be placed as vXPUs).
    section_keys: &[
        ("resourceCountName", None),
        ("resourceMemoryName", None),
        ("resourceVCountName", Some("resourceCountName")),
        ("resourceVMemoryName", Some("resourceMemoryName")),
    ],
    templates: Some(&TemplateChip {
        chip_name: "vXPU",
        // HAMi's sizes assume 96 GiB cards (8.1, 8.8).
        memory_allocatable: 98304,
        memory_capacity: 98304,
        ai_core: 0,
        ai_cpu: 0,
        // HAMi's sizes have no names; these are gpugate's, for messages.
        templates: &[
            Template {
                name: "quarter",
                memory: 24576,
                ai_core: 0,
                ai_cpu: 0,
            },
            Template {
                name: "half",
                memory: 49152,
                ai_core: 0,
                ai_cpu: 0,
            },
        ],
        super_pod: false,
        mode_annotation: "",
        node_mode_annotation: "",
        runtime_info: "",
        cores_from_memory: true,
        several_whole_only: false,
        one_template_per_device: true,
        slots_from_memory: true,
        writes_default_memory: false,
    }),
    grouping: Grouping::Board8,
    ..VENDOR_DEFAULTS
};

/// The vendor word of whole XPUs, and every XPU's type (8.2).
pub const XPU_VENDOR: &str = "kunlun";
/// Node capacity: whole XPUs.
pub const XPU: &str = "kunlunxin.com/xpu";
/// MiB of every XPU as HAMi registers it (8.2).
pub const XPU_MEMORY_MIB: u32 = 98304;
/// Pod: the indexes of the last container's XPUs, for Kunlunxin's plugin
/// (8.3).
pub const DEVICE_IDX: &str = "BAIDU_COM_DEVICE_IDX";

/// Kunlunxin XPUs, whole.
pub static KUNLUN_XPU: DeviceKind = DeviceKind {
    name: "kunlun-xpu",
    vendor: XPU_VENDOR,
    capacity: Some(&CapacityInventory {
        resources: &[XPU],
        id_word: XPU_VENDOR,
        ring_label: None,
        devices: xpus,
    }),
    selection: SelectionKeys {
        // The whole-XPU backend's own keys (8.3).
        use_uuid: "baidu.com/use-gpuuuid",
        nouse_uuid: "baidu.com/nouse-gpuuuid",
        ..NO_SELECTION
    },
    noun: "Kunlunxin XPU",
    pod_lists: PodLists {
        // HAMi writes the allocated list only (8.3).
        to_allocate: "",
        allocated: "hami.io/kunlun-allocated",
    },
    config: ConfigDefaults {
        resource_count_name: XPU,
        // An XPU is taken whole: its memory and cores (8.5).
        default_cores: 100,
        ..NO_RESOURCES
    },
    section_keys: &[
        ("resourceMemoryName", None),
        ("resourceVCountName", None),
        ("resourceVMemoryName", None),
    ],
    grouping: Grouping::Board8,
    node_lock: NodeLockStyle::None,
    bind_extras: Some(device_idx),
    // HAMi's bubbles (8.6); vXPUs have no node score.
    node_preference: NodePreference::Wings,
    ..VENDOR_DEFAULTS
};

/// One whole XPU per unit of capacity (8.2).
fn xpus(capacity: &[Option<u64>]) -> Result<Vec<CapacityDevice>, String> {
    whole_devices(capacity, XPU, XPU_MEMORY_MIB, XPU_VENDOR)
}

/// `BAIDU_COM_DEVICE_IDX`: the indexes of the last container with XPUs,
/// comma-separated (8.3: HAMi overwrites it per container).
fn device_idx(input: &ExtrasInput<'_>) -> Vec<(&'static str, String)> {
    input
        .last_indexes()
        .map(|idx| (DEVICE_IDX, idx))
        .into_iter()
        .collect()
}
