//! The large cluster the engine and extender benchmarks run on: 5,000 nodes
//! of A100 40 GB GPUs (split count 10), pair scores 200 within groups of
//! GPUs (one NUMA node / NVLink island) and 100 across, and 40,000 running
//! vGPU pods (8 per node, 2,000 to 21,000 MiB and 0 to 49 cores each) so
//! that nodes differ.
//!
//! One layout, built two ways: directly as the engine's `ClusterState`
//! ([`engine_state`], for the engine benchmark), and as Kubernetes Node and
//! Pod objects carrying HAMi's annotations ([`k8s_objects`]), which the
//! extender reads through `ClusterView` exactly as it reads the API server's.

use std::collections::BTreeMap;

use gpugate::cluster::Snapshot;
use gpugate::engine::{Allocation, ClusterState, DeviceGrant, Gpu, Node, Usage};
use gpugate::hami::keys;
use gpugate::hami::pair_scores::encode_pair_scores;
use gpugate::hami::pod_devices::encode_pod_devices;
use gpugate::hami::register::encode_node_devices_json;
use gpugate::hami::{ContainerDevice, DeviceInfo, PairScores, PodDevices};
use k8s_openapi::api::core::v1::{Container, Node as K8sNode, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub const NODES: usize = 5_000;
pub const RUNNING_PODS: usize = 40_000;
const MODEL: &str = "NVIDIA A100-SXM4-40GB";
const CAPACITY: Usage = Usage {
    slices: 0,
    unreserved: 0,
    unreadable: 0,
    slots: 10,
    mem_mib: 40960,
    cores: 100,
};

pub fn node_name(n: usize) -> String {
    format!("gpu-node-{n:05}")
}

fn gpu_uuid(n: usize, i: u32) -> String {
    format!("GPU-{n:05}-{i}")
}

/// 200 within a group of `group` GPUs, 100 across.
fn pair_score(a: u32, b: u32, group: u32) -> i32 {
    if a / group == b / group { 200 } else { 100 }
}

/// Running pod `p`: its node, GPU index, MiB and cores.
fn running_pod(p: usize, gpus_per_node: u32) -> (usize, u32, u64, u32) {
    let n = p % NODES;
    let gpu = (p / NODES) as u32 % gpus_per_node;
    let mem = 2000 + ((p * 7919) % 20) as u64 * 1000;
    (n, gpu, mem, ((p * 31) % 50) as u32)
}

/// `NODES` nodes of `gpus_per_node` GPUs in NUMA groups of `group`, with
/// the running pods applied, as the engine's state.
pub fn engine_state(gpus_per_node: u32, group: u32) -> ClusterState {
    let mut state = ClusterState::new();
    for n in 0..NODES {
        let gpus = (0..gpus_per_node)
            .map(|i| {
                let mut g = Gpu::new(gpu_uuid(n, i), i, MODEL, CAPACITY);
                g.numa = (i / group) as i32;
                g
            })
            .collect();
        let mut node = Node::new(node_name(n), gpus);
        for a in 0..gpus_per_node {
            for b in a + 1..gpus_per_node {
                node.set_pair_score(&gpu_uuid(n, a), &gpu_uuid(n, b), pair_score(a, b, group));
            }
        }
        state.upsert_node(node);
    }
    for p in 0..RUNNING_PODS {
        let (n, gpu, mem_mib, cores) = running_pod(p, gpus_per_node);
        let allocation = Allocation {
            node: node_name(n),
            containers: vec![vec![DeviceGrant {
                uuid: gpu_uuid(n, gpu),
                kind: gpugate::devices::KindId::NVIDIA,
                mem_mib,
                cores,
                slots: 1,
                unreadable: false,
                device_type: None,
                mig: None,
            }]],
            kinds: vec![],
            numa: None,
            tenancy: Default::default(),
        };
        state
            .apply(&format!("pod-{p}"), allocation)
            .expect("node and GPU exist");
    }
    state
}

/// The same cluster as Kubernetes objects: Nodes with
/// `hami.io/node-nvidia-register` (HAMi's JSON form) and
/// `hami.io/node-nvidia-score`, and Running pods with `hami.io/vgpu-node`
/// and `hami.io/vgpu-devices-allocated`.
pub fn k8s_objects(gpus_per_node: u32, group: u32) -> Snapshot {
    let annotated =
        |name: String, namespace: Option<String>, annotations: [(&str, String); 2]| ObjectMeta {
            name: Some(name),
            namespace,
            annotations: Some(
                annotations
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
    let nodes = (0..NODES)
        .map(|n| {
            let devices: Vec<DeviceInfo> = (0..gpus_per_node)
                .map(|i| DeviceInfo {
                    id: gpu_uuid(n, i),
                    count: CAPACITY.slots,
                    devmem: CAPACITY.mem_mib,
                    devcore: CAPACITY.cores,
                    device_type: MODEL.to_string(),
                    numa: (i / group) as i32,
                    health: true,
                    index: i,
                    mode: "hami-core".to_string(),
                    mig_profiles: Vec::new(),
                    network_id: None,
                    card: None,
                })
                .collect();
            // Both directions, as HAMi's device plugin writes them.
            let mut scores = PairScores::default();
            for a in 0..gpus_per_node {
                for b in 0..gpus_per_node {
                    scores.insert(&gpu_uuid(n, a), &gpu_uuid(n, b), pair_score(a, b, group));
                }
            }
            K8sNode {
                metadata: annotated(
                    node_name(n),
                    None,
                    [
                        (
                            gpugate::devices::nvidia::NODE_REGISTER,
                            encode_node_devices_json(&devices),
                        ),
                        (
                            gpugate::devices::nvidia::NODE_SCORE,
                            encode_pair_scores(&scores),
                        ),
                    ],
                ),
                ..Default::default()
            }
        })
        .collect();
    let pods = (0..RUNNING_PODS)
        .map(|p| {
            let (n, gpu, mem_mib, cores) = running_pod(p, gpus_per_node);
            let devices = PodDevices {
                containers: vec![vec![ContainerDevice {
                    uuid: gpu_uuid(n, gpu),
                    vendor: gpugate::devices::nvidia::VENDOR.to_string(),
                    mem_mib: mem_mib as u32,
                    cores,
                    slots: 1,
                }]],
            };
            let mut metadata = annotated(
                format!("pod-{p}"),
                Some(format!("team-{}", p % 20)),
                [
                    (keys::VGPU_NODE, node_name(n)),
                    (keys::VGPU_DEVICES_ALLOCATED, encode_pod_devices(&devices)),
                ],
            );
            metadata.uid = Some(format!("00000000-0000-4000-8000-{p:012}"));
            // What a Deployment's or Job's pods carry.
            metadata.labels = Some(BTreeMap::from([
                ("app".to_string(), format!("train-{}", p % 500)),
                (
                    "pod-template-hash".to_string(),
                    format!("{:010x}", (p % 500) * 2_654_435_761 % 0xff_ffff_ffff),
                ),
                ("team".to_string(), format!("team-{}", p % 20)),
            ]));
            Pod {
                metadata,
                spec: Some(PodSpec {
                    node_name: Some(node_name(n)),
                    containers: vec![Container {
                        name: "main".to_string(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                status: Some(PodStatus {
                    phase: Some("Running".to_string()),
                    ..Default::default()
                }),
            }
        })
        .collect();
    Snapshot {
        nodes,
        pods,
        ..Default::default()
    }
}
