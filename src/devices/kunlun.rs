//! Kunlunxin vXPUs as HAMi v2.10 schedules them (hami-vendors.md section
//! 8, the `XPU` backend): registered as JSON under
//! `hami.io/node-register-xpu`, split into three fixed sizes (a quarter,
//! a half or the whole 96 GiB card, cores by the same share), a card
//! holding one size at a time, several cards of a container on one
//! eight-card board's links (`Grouping::Board8`), written to the pod as
//! `hami.io/xpu-devices-to-allocate` and `-allocated` under the vendor
//! word `XPU`, behind the node lock every HAMi backend shares. Whole XPUs
//! (HAMi's capacity-based `kunlun` backend, `kunlunxin.com/xpu`) are not
//! placed.

use super::{
    ConfigDefaults, DeviceKind, Grouping, NO_RESOURCES, NO_SELECTION, PodLists, SelectionKeys,
    Template, TemplateChip, VENDOR_DEFAULTS,
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
