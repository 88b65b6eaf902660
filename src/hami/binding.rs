//! HAMi's allocation as a Binding carries it (hami-compat.md 4.1): the
//! annotations HAMi's device plugin reads (`hami.io/vgpu-node`, the device
//! lists, `hami.io/bind-phase: allocating`, the times) and the
//! `hami.io/vgpu-node` label, as the Binding's `metadata`. kube-apiserver
//! copies them onto the pod as it assigns the node.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::keys;

/// Label values are at most 63 characters; longer node names get only the
/// annotation (HAMi's device plugin reads the annotation).
const LABEL_VALUE_MAX: usize = 63;

/// The Binding's `metadata` for the allocation of `lists` on `node` at
/// `now_unix`: each device kind's list (its to-allocate key, its
/// allocated key, the list encoded by the caller once) under both keys.
pub fn binding_metadata(node: &str, lists: &[(&str, &str, &str)], now_unix: i64) -> Value {
    let now = now_unix.to_string();
    let mut labels = BTreeMap::new();
    if node.len() <= LABEL_VALUE_MAX {
        labels.insert(keys::VGPU_NODE, json!(node));
    }
    let mut annotations = serde_json::Map::new();
    for (key, value) in [
        (keys::VGPU_NODE, node),
        (keys::VGPU_TIME, &now),
        (keys::BIND_PHASE, "allocating"),
        (keys::BIND_TIME, &now),
    ] {
        annotations.insert(key.to_string(), json!(value));
    }
    // A kind without a to-allocate list (AWS Neuron) has `""` there.
    for (to_allocate, allocated, list) in lists {
        for key in [to_allocate, allocated]
            .into_iter()
            .filter(|k| !k.is_empty())
        {
            annotations.insert(key.to_string(), json!(list));
        }
    }
    json!({
        "annotations": annotations,
        "labels": labels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hami::ContainerDevice;
    use crate::hami::pod_devices::{PodDevices, encode_pod_devices};

    #[test]
    fn the_patch_writes_what_hamis_device_plugin_reads() {
        let devices = PodDevices {
            containers: vec![
                vec![],
                vec![ContainerDevice {
                    uuid: "GPU-a".into(),
                    vendor: "NVIDIA".into(),
                    mem_mib: 3000,
                    cores: 30,
                    slots: 1,
                }],
            ],
        };
        let list = encode_pod_devices(&devices);
        let lists = [(
            keys::VGPU_DEVICES_TO_ALLOCATE,
            keys::VGPU_DEVICES_ALLOCATED,
            list.as_str(),
        )];
        let p = binding_metadata("gpu-1", &lists, 1_700_000_000);
        let ann = &p["annotations"];
        assert_eq!(ann["hami.io/vgpu-node"], "gpu-1");
        assert_eq!(
            ann["hami.io/vgpu-devices-allocated"],
            ";GPU-a,NVIDIA,3000,30:;"
        );
        assert_eq!(
            ann["hami.io/vgpu-devices-to-allocate"],
            ann["hami.io/vgpu-devices-allocated"]
        );
        assert_eq!(ann["hami.io/bind-phase"], "allocating");
        assert_eq!(ann["hami.io/bind-time"], "1700000000");
        assert_eq!(ann["hami.io/vgpu-time"], "1700000000");
        assert_eq!(p["labels"]["hami.io/vgpu-node"], "gpu-1");
    }

    #[test]
    fn a_node_name_too_long_for_a_label_is_only_annotated() {
        let p = binding_metadata(&"n".repeat(64), &[], 0);
        assert_eq!(p["labels"], json!({}));
        assert_eq!(p["annotations"]["hami.io/vgpu-node"], "n".repeat(64));
    }
}
