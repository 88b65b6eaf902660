//! HAMi's scheduler gauges (`hami_*`), sampled from the cluster view on
//! each scrape and encoded as their own collector, a batch of series at a
//! time (see [`super::metrics::Metrics::encode_chunks`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;

use crate::cluster::ClusterView;
use crate::engine::Usage;
use crate::engine::request::DeviceConfig;

/// Series of HAMi's gauges per piece of the `/metrics` text (about 150 KB).
pub const HAMI_BATCH: usize = 1000;

/// The constant label HAMi's scheduler puts on its cluster gauges.
pub const HAMI_ZONE: &str = "vGPU";

/// Bytes in a MiB: HAMi's gauges report memory in bytes.
const MIB: u64 = 1024 * 1024;

/// HAMi's scheduler gauges (`cmd/scheduler/metrics.go`), sampled from the
/// cluster view on each scrape and encoded through a registry of that
/// scrape only, with the constant label `zone="vGPU"`. Dashboards and
/// alerts written for hami-scheduler keep working:
///
/// - per node and GPU (`node`, `device_uuid`, `device_index`, `device_type`;
///   `device_type` is the model the device plugin registered):
///   `hami_gpu_memory_limit_bytes` (the GPU's memory),
///   `hami_gpu_core_limit_ratio` (its cores, `devcore`),
///   `hami_gpu_memory_allocated_bytes` (+ `device_cores`: memory held),
///   `hami_gpu_shared_count` (vGPUs held), `hami_gpu_core_allocated_ratio`
///   (cores held), `hami_node_gpu_overview` (+ `device_cores` and
///   `device_memory_limit` in MiB: memory held) and
///   `hami_node_gpu_memory_allocated_ratio` (held / total memory, not
///   emitted for a GPU that reports no memory);
/// - per namespace and quota resource: `hami_resource_quota_used`
///   (`namespace`, `quota_name`, `limit`) and `hami_resource_quota_limit`
///   (`namespace`, `quota_name`), see [`QuotaRow`];
/// - per held pod, container and GPU: `hami_vgpu_memory_allocated_bytes` and
///   `hami_vgpu_core_allocated_ratio` (`namespace`, `node`, `pod`,
///   `container_index`, `device_uuid`), from the pod's allocation as the
///   ledger holds it (applied to its node or not); `container_index`
///   counts init containers first, as HAMi's device annotations do.
///
/// - per MIG instance the device plugin reports created (its runtime ids
///   in `hami.io/vgpu-mig-allocations`): `hami_node_gpu_mig_instance_info`
///   (`node`, `device_uuid`, `device_index`, `mig_uuid`, `profile`,
///   `gpu_instance_id`, `compute_instance_id`, `placement_start`,
///   `placement_size`), 1 each.
///
/// Left out: `hami_build_info`, and the names HAMi's
/// `--legacy-metrics` adds (`GPUDeviceMemoryLimit`, `nodeGPUOverview`,
/// `QuotaUsed`, `vGPUMemoryAllocated`, …).
///
/// Where HAMi's code (at 4707fb02, v2.10.0, the version hami-compat.md
/// describes) mixes values up, the gauges carry what their names and
/// hami-compat.md section 7 say: that code emits Usedcores as
/// `hami_gpu_core_limit_ratio` and Totalcore as
/// `hami_gpu_core_allocated_ratio` for non-AMD GPUs, and swaps the
/// `device_cores` and `device_memory_limit` values of
/// `hami_node_gpu_overview`. Core values are the registered `devcore` and
/// the cores held, unscaled (HAMi rescales only AMD's to 100, and some HAMi
/// versions all; the same numbers for GPUs registered with 100 cores).
#[derive(Debug, Default)]
pub struct HamiGauges {
    /// Node name order, then GPU index order.
    gpus: Vec<GpuRow>,
    /// Namespace order, memory before cores.
    quotas: Vec<QuotaRow>,
    /// Namespace, pod, container and GPU order.
    vgpus: Vec<VgpuRow>,
    /// Node, GPU and placement order.
    migs: Vec<MigRow>,
    /// gpugate's own `gpugate_capacity_*` gauges, per node and kind of
    /// device, in node then kind order: what each node can still take
    /// ([`crate::capacity`]), streamed the same way.
    capacity: Vec<crate::capacity::NodeCapacity>,
}

/// One MIG instance the device plugin reports created, labels rendered.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct MigRow {
    node: String,
    uuid: String,
    start: String,
    index: String,
    size: String,
    mig_uuid: String,
    profile: String,
    gpu_instance: String,
    compute_instance: String,
}

/// One GPU of one node, with its labels rendered.
#[derive(Debug)]
struct GpuRow {
    node: String,
    uuid: String,
    index: String,
    model: String,
    /// `capacity.cores`, for `device_cores`.
    total_cores: String,
    /// `capacity.mem_mib`, for `device_memory_limit`.
    total_mem_mib: String,
    capacity: Usage,
    used: Usage,
}

/// One GPU quota resource of one namespace, as HAMi's quota cache keys
/// them: `quota_name` is the **resource name** (`nvidia.com/gpumem`,
/// `nvidia.com/gpucores`, or what `resourceMemoryName` and
/// `resourceCoreName` say), not the ResourceQuota object's name; several
/// ResourceQuotas of a namespace make one row with the tightest limit (as
/// HAMi and Kubernetes both enforce the tightest). `used` is what the
/// namespace's held pods take (memory in MiB as granted, i.e. after
/// `memoryFactor`; cores in percent of a GPU); `limit` is the ResourceQuota
/// value as written (not scaled by `memoryFactor`), `"0"` in the `limit`
/// label when there is none, and `hami_resource_quota_limit` is emitted only
/// when there is one.
///
/// Rows exist for a resource with a limit, and for both resources of a
/// namespace whose pods hold GPUs. Unlike HAMi, whose cache keeps an entry
/// at 0 forever once a namespace has used GPUs, a namespace without limits
/// whose last GPU pod is gone has no rows.
#[derive(Debug)]
struct QuotaRow {
    namespace: String,
    resource: String,
    used: u64,
    limit: Option<u64>,
}

/// One GPU granted to one container of a held pod.
#[derive(Debug)]
struct VgpuRow {
    namespace: String,
    node: String,
    pod: String,
    container: usize,
    uuid: String,
    mem_mib: u64,
    cores: u32,
}

impl HamiGauges {
    /// Copies what the gauges need; `kinds` are the config's sections, whose
    /// memory and core resource names are the quota resources.
    pub fn sample(view: &ClusterView, kinds: &[&DeviceConfig]) -> Self {
        let gpus = view
            .state()
            .nodes()
            .flat_map(|n| {
                n.gpus.iter().zip(&n.usage).map(|(g, used)| GpuRow {
                    node: n.name.clone(),
                    uuid: g.uuid.clone(),
                    index: g.index.to_string(),
                    model: g.model.clone(),
                    total_cores: g.capacity.cores.to_string(),
                    total_mem_mib: g.capacity.mem_mib.to_string(),
                    capacity: g.capacity,
                    used: *used,
                })
            })
            .collect();

        let namespaces: BTreeSet<&str> = view
            .quotas()
            .namespaces()
            .chain(view.quotas().used_namespaces())
            .collect();
        let mut quotas = Vec::new();
        for ns in namespaces {
            let used = view.quotas().used(ns);
            let limited = view.quotas().limited_resources(ns);
            // Only the kinds the namespace limits or holds (not all 26).
            let counted = kinds.iter().filter(|cfg| {
                !used.of(cfg.kind).is_zero()
                    || limited.contains(cfg.resource_memory_name.as_str())
                    || limited.contains(cfg.resource_core_name.as_str())
            });
            for cfg in counted {
                let used = used.of(cfg.kind);
                // Values that are not whole numbers are ignored here as by
                // the quota check; the check reports them.
                let (limits, _) =
                    view.quotas()
                        .limits(ns, &cfg.resource_memory_name, &cfg.resource_core_name);
                for (resource, used_amount, limit) in [
                    (&cfg.resource_memory_name, used.mem_mib, limits.mem_mib),
                    (&cfg.resource_core_name, used.cores, limits.cores),
                ] {
                    if !resource.is_empty() && (limit.is_some() || !used.is_zero()) {
                        quotas.push(QuotaRow {
                            namespace: ns.to_string(),
                            resource: resource.to_string(),
                            used: used_amount,
                            limit,
                        });
                    }
                }
            }
        }

        let mut vgpus: Vec<VgpuRow> = view
            .held_pod_allocations()
            .flat_map(|(namespace, pod, a)| {
                a.containers
                    .iter()
                    .enumerate()
                    .flat_map(move |(container, devices)| {
                        devices
                            .iter()
                            // HAMi skips grants without a UUID too.
                            .filter(|d| !d.uuid.is_empty())
                            .map(move |d| VgpuRow {
                                namespace: namespace.to_string(),
                                node: a.node.clone(),
                                pod: pod.to_string(),
                                container,
                                uuid: d.uuid.clone(),
                                mem_mib: d.mem_mib,
                                cores: d.cores,
                            })
                    })
            })
            .collect();
        vgpus.sort_unstable_by(|a, b| {
            (&a.namespace, &a.pod, a.container, &a.uuid, &a.node).cmp(&(
                &b.namespace,
                &b.pod,
                b.container,
                &b.uuid,
                &b.node,
            ))
        });
        let mut migs: Vec<MigRow> = view
            .held_mig_instances()
            .filter_map(|(node, m)| {
                let runtime = m.runtime.as_ref()?;
                let index = view
                    .state()
                    .node(node)
                    .and_then(|n| n.position(&m.gpu_uuid).map(|p| n.gpus[p].index.to_string()))
                    .unwrap_or_default();
                Some(MigRow {
                    node: node.to_string(),
                    uuid: m.gpu_uuid.clone(),
                    start: format!("{:02}", m.placement.start),
                    index,
                    size: m.placement.size.to_string(),
                    mig_uuid: runtime.mig_uuid.clone(),
                    profile: m.profile.clone(),
                    gpu_instance: runtime.gpu_instance_id.to_string(),
                    compute_instance: runtime.compute_instance_id.to_string(),
                })
            })
            .collect();
        migs.sort_unstable();
        for m in &mut migs {
            // Zero-padded only to sort by number.
            m.start = m.start.trim_start_matches('0').to_string();
            if m.start.is_empty() {
                m.start.push('0');
            }
        }
        HamiGauges {
            gpus,
            quotas,
            vgpus,
            migs,
            capacity: crate::capacity::capacity(view.state()),
        }
    }
}

impl GpuRow {
    fn labels(&self) -> [(&'static str, &str); 4] {
        [
            ("node", &self.node),
            ("device_uuid", &self.uuid),
            ("device_index", &self.index),
            ("device_type", &self.model),
        ]
    }
}

impl VgpuRow {
    fn labels<'a>(&'a self, container: &'a str) -> [(&'static str, &'a str); 5] {
        [
            ("namespace", &self.namespace),
            ("node", &self.node),
            ("pod", &self.pod),
            ("container_index", container),
            ("device_uuid", &self.uuid),
        ]
    }
}

/// Encodes one gauge family; nothing at all when it has no series.
fn gauge_family<L: EncodeLabelSet, V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, V)>,
) -> Result<(), std::fmt::Error> {
    let mut series = series.into_iter().peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

fn bytes(mib: u64) -> u64 {
    mib.saturating_mul(MIB)
}

/// Series `range` of one family of HAMi's gauges.
#[derive(Debug)]
pub struct HamiBatch {
    pub sample: Arc<HamiGauges>,
    pub family: usize,
    pub range: std::ops::Range<usize>,
}

impl Collector for HamiBatch {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.sample
            .encode_family(self.family, self.range.clone(), &mut encoder)
    }
}

impl HamiGauges {
    /// Families 0-6 are per GPU, 7-8 per quota row, 9-10 per vGPU, 11
    /// per MIG instance, 12-16 gpugate's capacity per node and kind.
    pub const FAMILIES: usize = 17;

    /// Whether `family` is one of HAMi's (with its `zone` label), not
    /// gpugate's capacity.
    pub fn is_hamis(family: usize) -> bool {
        family < 12
    }

    pub fn family_len(&self, family: usize) -> usize {
        match family {
            0..=6 => self.gpus.len(),
            7..=8 => self.quotas.len(),
            9..=10 => self.vgpus.len(),
            11 => self.migs.len(),
            _ => self.capacity.len(),
        }
    }

    /// Encodes rows `range` of one family, in the order of HAMi's
    /// scheduler (nothing when none of them has a series).
    pub fn encode_family(
        &self,
        family: usize,
        range: std::ops::Range<usize>,
        e: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        fn rows<T>(all: &[T], range: std::ops::Range<usize>) -> &[T] {
            all.get(range).unwrap_or(&[])
        }
        let gpus = rows(&self.gpus, range.clone());
        let quotas = rows(&self.quotas, range.clone());
        let vgpus = rows(&self.vgpus, range.clone());
        let migs = rows(&self.migs, range.clone());
        let capacity = rows(&self.capacity, range);
        fn labels(c: &crate::capacity::NodeCapacity) -> [(&'static str, &str); 2] {
            [("node", &c.node), ("kind", c.kind)]
        }
        match family {
            0 => gauge_family(
                e,
                "hami_gpu_memory_limit_bytes",
                "Device memory limit for a certain GPU.",
                gpus.iter()
                    .map(|g| (g.labels(), bytes(u64::from(g.capacity.mem_mib)))),
            ),
            1 => gauge_family(
                e,
                "hami_gpu_core_limit_ratio",
                "Device core limit for a certain GPU.",
                gpus.iter().map(|g| (g.labels(), g.capacity.cores)),
            ),
            2 => gauge_family(
                e,
                "hami_gpu_memory_allocated_bytes",
                "Device memory allocated for a certain GPU.",
                gpus.iter().map(|g| {
                    let [node, uuid, index, model] = g.labels();
                    (
                        [node, uuid, index, ("device_cores", &g.total_cores), model],
                        bytes(u64::from(g.used.mem_mib)),
                    )
                }),
            ),
            3 => gauge_family(
                e,
                "hami_gpu_shared_count",
                "Number of containers sharing this GPU.",
                gpus.iter().map(|g| (g.labels(), g.used.slots)),
            ),
            4 => gauge_family(
                e,
                "hami_gpu_core_allocated_ratio",
                "Device core allocated for a certain GPU.",
                gpus.iter().map(|g| (g.labels(), g.used.cores)),
            ),
            5 => gauge_family(
                e,
                "hami_node_gpu_overview",
                "GPU overview on a certain node.",
                gpus.iter().map(|g| {
                    let [node, uuid, index, model] = g.labels();
                    (
                        [
                            node,
                            uuid,
                            index,
                            ("device_cores", &g.total_cores),
                            ("device_memory_limit", &g.total_mem_mib),
                            model,
                        ],
                        bytes(u64::from(g.used.mem_mib)),
                    )
                }),
            ),
            6 => gauge_family(
                e,
                "hami_node_gpu_memory_allocated_ratio",
                "GPU Memory Allocated Percentage on a certain GPU.",
                gpus.iter().filter(|g| g.capacity.mem_mib > 0).map(|g| {
                    (
                        g.labels(),
                        ratio(u64::from(g.used.mem_mib), u64::from(g.capacity.mem_mib)),
                    )
                }),
            ),
            7 => {
                let limits: Vec<String> = quotas
                    .iter()
                    .map(|q| q.limit.unwrap_or(0).to_string())
                    .collect();
                gauge_family(
                    e,
                    "hami_resource_quota_used",
                    "resourcequota usage for a certain device.",
                    quotas.iter().zip(&limits).map(|(q, limit)| {
                        (
                            [
                                ("namespace", q.namespace.as_str()),
                                ("quota_name", &q.resource),
                                ("limit", limit),
                            ],
                            q.used,
                        )
                    }),
                )
            }
            8 => gauge_family(
                e,
                "hami_resource_quota_limit",
                "resourcequota limit for a certain device.",
                quotas.iter().filter_map(|q| {
                    q.limit.map(|limit| {
                        (
                            [
                                ("namespace", q.namespace.as_str()),
                                ("quota_name", &q.resource),
                            ],
                            limit,
                        )
                    })
                }),
            ),
            9 => {
                let containers: Vec<String> =
                    vgpus.iter().map(|v| v.container.to_string()).collect();
                gauge_family(
                    e,
                    "hami_vgpu_memory_allocated_bytes",
                    "vGPU memory allocated from a container.",
                    vgpus
                        .iter()
                        .zip(&containers)
                        .map(|(v, c)| (v.labels(c), bytes(v.mem_mib))),
                )
            }
            11 => gauge_family(
                e,
                "hami_node_gpu_mig_instance_info",
                "MIG instance information for a certain GPU.",
                migs.iter().map(|m| {
                    (
                        [
                            ("node", m.node.as_str()),
                            ("device_uuid", &m.uuid),
                            ("device_index", &m.index),
                            ("mig_uuid", &m.mig_uuid),
                            ("profile", &m.profile),
                            ("gpu_instance_id", &m.gpu_instance),
                            ("compute_instance_id", &m.compute_instance),
                            ("placement_start", &m.start),
                            ("placement_size", &m.size),
                        ],
                        1u64,
                    )
                }),
            ),
            10 => {
                let containers: Vec<String> =
                    vgpus.iter().map(|v| v.container.to_string()).collect();
                gauge_family(
                    e,
                    "hami_vgpu_core_allocated_ratio",
                    "vGPU core allocated from a container.",
                    vgpus
                        .iter()
                        .zip(&containers)
                        .map(|(v, c)| (v.labels(c), v.cores)),
                )
            }
            12 => gauge_family(
                e,
                "gpugate_capacity_free_memory_mib",
                "Device memory (MiB) free on the node's devices of the kind that can take a share now.",
                capacity.iter().map(|c| (labels(c), c.free_mem_mib)),
            ),
            13 => gauge_family(
                e,
                "gpugate_capacity_free_cores",
                "Cores (percent of one device) free on the node's devices of the kind that can take a share now.",
                capacity.iter().map(|c| (labels(c), c.free_cores)),
            ),
            14 => gauge_family(
                e,
                "gpugate_capacity_largest_slice_memory_mib",
                "Memory (MiB) of the largest share one device of the kind on the node can still give (0: none).",
                capacity
                    .iter()
                    .map(|c| (labels(c), c.largest_slice.map_or(0, |s| s.mem_mib))),
            ),
            15 => gauge_family(
                e,
                "gpugate_capacity_largest_slice_cores",
                "Cores of that largest share (0: none).",
                capacity
                    .iter()
                    .map(|c| (labels(c), c.largest_slice.map_or(0, |s| s.cores))),
            ),
            16 => gauge_family(
                e,
                "gpugate_capacity_whole_devices_free",
                "Devices of the kind on the node that can take a share and that no pod holds a share of.",
                capacity.iter().map(|c| (labels(c), c.whole_free as u64)),
            ),
            _ => Ok(()),
        }
    }
}

/// `part / whole` as a float (`whole` is not 0).
fn ratio(part: u64, whole: u64) -> f64 {
    // MiB counts stay far below 2^52, where f64 is exact.
    part as f64 / whole as f64
}
