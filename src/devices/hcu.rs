//! Hygon HCUs, HAMi master's rename of its DCU backend after v2.10
//! (hami-vendors.md 3.8; HAMi master's `pkg/device/hygon`, which replaced
//! the DCU backend): the same slices and rules as [`super::hygon`] under
//! new names: register `hami.io/node-hcu-register`, pod lists
//! `hami.io/hcu-devices-to-allocate` and `-allocated` under the vendor
//! word `HCU`, resources `hygon.com/hcunum`, `hcumem`, `hcucores`, type
//! annotations `hygon.com/use-hcutype` and `nouse-hcutype` (the UUID
//! annotations keep their DCU names).

use super::{DeviceKind, PodLists};

/// Node: the HCU inventory (HAMi's legacy text or JSON form).
pub const NODE_REGISTER: &str = "hami.io/node-hcu-register";
/// The vendor word in pod device lists.
pub const VENDOR: &str = "HCU";
/// Pod: the devices Hygon's HCU device plugin hands out.
pub const DEVICES_TO_ALLOCATE: &str = "hami.io/hcu-devices-to-allocate";
/// Pod: the devices the pod holds.
pub const DEVICES_ALLOCATED: &str = "hami.io/hcu-devices-allocated";

/// Hygon HCUs. That their lists, like DCU lists, carry entries for the
/// asking containers only is taken from the DCU backend HCU replaced
/// (docs/policies.md says so).
pub static HCU: DeviceKind = super::hygon::hygon_kind(super::hygon::HygonNames {
    name: "hcu",
    vendor: VENDOR,
    noun: "Hygon HCU",
    register_key: NODE_REGISTER,
    pod_lists: PodLists {
        to_allocate: DEVICES_TO_ALLOCATE,
        allocated: DEVICES_ALLOCATED,
    },
    use_type: "hygon.com/use-hcutype",
    nouse_type: "hygon.com/nouse-hcutype",
    resources: ["hygon.com/hcunum", "hygon.com/hcumem", "hygon.com/hcucores"],
});
