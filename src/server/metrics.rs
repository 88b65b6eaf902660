//! Prometheus metrics of the admission server, served on the admin port:
//! gpugate's own (`gpugate_*`) and, with a cluster view, HAMi's scheduler
//! gauges (`hami_*`, see [`HamiGauges`]).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cluster::watch::WatchObserver;
use crate::cluster::{ClusterView, SharedCluster};
use crate::config::Config;
use crate::engine::Usage;
use crate::extender::bind::BindMetrics;
use crate::extender::filter::Filtered;

use super::config_reload::ConfigStamp;
use super::listener::ConnMetrics;
use super::tls::ReloadingCert;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `mutate` or `validate`.
    pub webhook: &'static str,
    /// The admission operation (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`),
    /// `none` for bodies that were not reviews, `other` for anything else:
    /// never a value copied from the request.
    pub operation: &'static str,
    /// `allowed`, `patched`, `denied` or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DenialLabels {
    pub webhook: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigLabels {
    /// SHA-256 of the config file in force (from the operator's file,
    /// never from a request; one series at a time).
    pub sha256: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// `filter`, `prioritize`, `bind` or `preempt`.
    pub verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// A reason code from a fixed set (see `extender::filter::reason_code`).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbResultLabels {
    pub verb: &'static str,
    /// `ok` or `error`.
    pub result: &'static str,
}

/// Watch errors and re-list drift, by kind; handed to the watchers.
#[derive(Clone, Debug, Default)]
pub struct WatchMetrics {
    pub errors: Family<KindLabels, Counter>,
    pub drift: Family<KindLabels, Counter>,
    pub objects: Family<KindLabels, Gauge>,
}

impl WatchObserver for WatchMetrics {
    fn listed(&self, kind: &'static str, objects: usize, drift: usize) {
        let labels = KindLabels { kind };
        self.objects
            .get_or_create(&labels)
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.drift
            .get_or_create(&labels)
            .inc_by(u64::try_from(drift).unwrap_or(u64::MAX));
    }

    fn error(&self, kind: &'static str, _error: &str) {
        self.errors.get_or_create(&KindLabels { kind }).inc();
    }
}

/// Gauges sampled from the cluster view when metrics are scraped.
#[derive(Debug, Default)]
struct ClusterGauges {
    synced: Gauge,
    nodes: Gauge,
    gpus: Gauge,
    allocations: Gauge,
    unaccounted: Gauge,
    nodes_with_problems: Gauge,
}

fn latency_histogram() -> Histogram {
    // 0.1 ms to about 52 s (a bind may wait for a node lock).
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

/// The metrics registry and the handles the handlers update.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub denials: Family<DenialLabels, Counter>,
    pub latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    pub config_reload_errors: Counter,
    config_info: Family<ConfigLabels, Gauge>,
    config_loaded_at: Gauge,
    config_last_reload_ok: Gauge,
    /// Connections and request bodies of every listener.
    pub connections: ConnMetrics,
    pub extender_requests: Family<VerbResultLabels, Counter>,
    pub extender_latency: Family<VerbLabels, Histogram, fn() -> Histogram>,
    filter_decisions: Family<ResultLabels, Counter>,
    filter_rejections: Family<ReasonLabels, Counter>,
    cert_not_after: Gauge,
    cert_reload_errors: Gauge,
    cert: Option<Arc<ReloadingCert>>,
    pub watch: WatchMetrics,
    /// Handed to the API-server binder.
    pub bind: BindMetrics,
    cluster_gauges: ClusterGauges,
    observed: Option<Observed>,
}

/// The cluster view sampled on scrape, and the config that names the quota
/// resources.
#[derive(Debug)]
struct Observed {
    cluster: Arc<SharedCluster>,
    config: Arc<ArcSwap<Config>>,
}

impl Metrics {
    pub fn new(cert: Option<Arc<ReloadingCert>>) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let denials = Family::<DenialLabels, Counter>::default();
        let latency = Family::<WebhookLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let config_reload_errors = Counter::default();
        let cert_not_after = Gauge::default();
        let cert_reload_errors = Gauge::default();
        registry.register(
            "gpugate_admission_requests",
            "Admission reviews answered, by webhook, operation and result",
            requests.clone(),
        );
        registry.register(
            "gpugate_admission_denials",
            "Admission reviews denied, by webhook and reason",
            denials.clone(),
        );
        registry.register(
            "gpugate_admission_duration_seconds",
            "Time to answer an admission review",
            latency.clone(),
        );
        registry.register(
            "gpugate_config_reload_errors",
            "Config file versions refused on reload (the version in force stays)",
            config_reload_errors.clone(),
        );
        let config_info = Family::<ConfigLabels, Gauge>::default();
        let config_loaded_at = Gauge::default();
        let config_last_reload_ok = Gauge::default();
        registry.register(
            "gpugate_config_info",
            "1 for the config file in force, labelled with its SHA-256",
            config_info.clone(),
        );
        registry.register(
            "gpugate_config_loaded_timestamp_seconds",
            "When the config in force was loaded (Unix time)",
            config_loaded_at.clone(),
        );
        registry.register(
            "gpugate_config_last_reload_successful",
            "1 if the last version of the config file read was put in force, 0 if refused",
            config_last_reload_ok.clone(),
        );
        config_last_reload_ok.set(1);
        let connections = ConnMetrics::default();
        connections.register(&mut registry);
        registry.register(
            "gpugate_tls_cert_not_after_timestamp_seconds",
            "Expiry (Unix time) of the serving certificate in use",
            cert_not_after.clone(),
        );
        registry.register(
            "gpugate_tls_cert_reload_errors",
            "Certificate reloads that failed and kept the previous pair",
            cert_reload_errors.clone(),
        );
        let extender_requests = Family::<VerbResultLabels, Counter>::default();
        let extender_latency =
            Family::<VerbLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "gpugate_extender_requests",
            "Extender calls answered, by verb and result",
            extender_requests.clone(),
        );
        registry.register(
            "gpugate_extender_duration_seconds",
            "Time to answer an extender call, by verb",
            extender_latency.clone(),
        );
        let filter_decisions = Family::<ResultLabels, Counter>::default();
        let filter_rejections = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "gpugate_filter_decisions",
            "Filter answers, by result (feasible, unschedulable, error)",
            filter_decisions.clone(),
        );
        registry.register(
            "gpugate_filter_rejections",
            "Nodes a filter call rejected, by reason code (CardInsufficientMemory, \
             ResourceQuotaNotFit, GangNotFit, NodeUnregistered, ...)",
            filter_rejections.clone(),
        );
        let watch = WatchMetrics::default();
        registry.register(
            "gpugate_watch_errors",
            "API watch failures (retried with backoff), by kind",
            watch.errors.clone(),
        );
        registry.register(
            "gpugate_ledger_drift",
            "Objects a re-list found gone that the watch had missed, by kind",
            watch.drift.clone(),
        );
        registry.register(
            "gpugate_watch_listed_objects",
            "Objects in the last full list, by kind",
            watch.objects.clone(),
        );
        let bind = BindMetrics::default();
        bind.register(&mut registry);
        let g = ClusterGauges::default();
        for (name, help, gauge) in [
            (
                "gpugate_cluster_synced",
                "1 once every watched kind has been listed (or the snapshot loaded)",
                &g.synced,
            ),
            (
                "gpugate_cluster_nodes",
                "Nodes known (with or without readable GPUs)",
                &g.nodes,
            ),
            (
                "gpugate_cluster_gpus",
                "GPUs registered on known nodes",
                &g.gpus,
            ),
            (
                "gpugate_ledger_allocations",
                "Pods the ledger holds GPUs for",
                &g.allocations,
            ),
            (
                "gpugate_ledger_unaccounted",
                "Held allocations not counted on any node (unknown node or GPU, unreadable)",
                &g.unaccounted,
            ),
            (
                "gpugate_cluster_nodes_with_problems",
                "Nodes whose inventory, cordon list or pair scores cannot be read",
                &g.nodes_with_problems,
            ),
        ] {
            registry.register(name, help, gauge.clone());
        }
        Metrics {
            registry,
            extender_requests,
            extender_latency,
            filter_decisions,
            filter_rejections,
            watch,
            bind,
            cluster_gauges: g,
            observed: None,
            requests,
            denials,
            latency,
            config_reload_errors,
            config_info,
            config_loaded_at,
            config_last_reload_ok,
            connections,
            cert_not_after,
            cert_reload_errors,
            cert,
        }
    }

    /// Samples the cluster view's gauges, and HAMi's, on every scrape.
    /// `config` (the live one, swapped on reload) names the quota resources.
    pub fn observing(mut self, cluster: Arc<SharedCluster>, config: Arc<ArcSwap<Config>>) -> Self {
        self.observed = Some(Observed { cluster, config });
        self
    }

    /// Records the config version put in force.
    pub fn config_in_force(&self, stamp: &ConfigStamp) {
        self.config_info.clear();
        self.config_info
            .get_or_create(&ConfigLabels {
                sha256: stamp.sha256.clone(),
            })
            .set(1);
        self.config_loaded_at.set(stamp.loaded_at);
        self.config_last_reload_ok.set(1);
    }

    /// Records a config version refused (the one in force stays).
    pub fn config_refused(&self) {
        self.config_reload_errors.inc();
        self.config_last_reload_ok.set(0);
    }

    /// Records one answered review.
    pub fn observe(
        &self,
        webhook: &'static str,
        operation: &'static str,
        result: &'static str,
        denial: Option<&'static str>,
        elapsed: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                webhook,
                operation,
                result,
            })
            .inc();
        if let Some(reason) = denial {
            self.denials
                .get_or_create(&DenialLabels { webhook, reason })
                .inc();
        }
        self.latency
            .get_or_create(&WebhookLabels { webhook })
            .observe(elapsed.as_secs_f64());
    }

    /// Records a filter answer: its result and each rejected node's reason.
    pub fn observe_filter(&self, filtered: &Filtered) {
        let answer = &filtered.answer;
        let result = if !answer.error.is_empty() {
            "error"
        } else if answer.feasible_count() > 0 {
            "feasible"
        } else {
            "unschedulable"
        };
        self.filter_decisions
            .get_or_create(&ResultLabels { result })
            .inc();
        let mut counts: std::collections::HashMap<&'static str, u64> = Default::default();
        for (_, reason) in &filtered.rejected {
            *counts.entry(reason.code().as_str()).or_default() += 1;
        }
        for (reason, n) in counts {
            self.filter_rejections
                .get_or_create(&ReasonLabels { reason })
                .inc_by(n);
        }
    }

    /// Records one extender call.
    pub fn observe_extender(&self, verb: &'static str, ok: bool, elapsed: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.extender_requests
            .get_or_create(&VerbResultLabels { verb, result })
            .inc();
        self.extender_latency
            .get_or_create(&VerbLabels { verb })
            .observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics text, whole (see [`Metrics::encode_chunks`]).
    pub fn encode(&self) -> String {
        self.encode_chunks().collect()
    }

    /// The OpenMetrics text in pieces, each made when it is taken: the
    /// registry's own metrics, then HAMi's gauges [`HAMI_BATCH`] series at
    /// a time. With 40,000 GPUs and as many vGPUs the text is 57 MB; made
    /// whole, one scrape took 100 MB more than the server's steady memory.
    pub fn encode_chunks(&self) -> MetricsChunks {
        if let Some(cert) = &self.cert {
            self.cert_not_after.set(cert.not_after());
            self.cert_reload_errors
                .set(i64::try_from(cert.reload_errors()).unwrap_or(i64::MAX));
        }
        let mut hami = None;
        if let Some(Observed { cluster, config }) = &self.observed {
            let config = config.load();
            let nv = &config.nvidia;
            // One read lock: copy what the gauges need, encode after.
            let (c, sample) = {
                let view = cluster.read();
                let sample =
                    HamiGauges::sample(&view, &nv.resource_memory_name, &nv.resource_core_name);
                (view.counts(), sample)
            };
            let g = &self.cluster_gauges;
            let set = |gauge: &Gauge, n: usize| {
                gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
            };
            set(&g.synced, usize::from(cluster.is_synced()));
            set(&g.nodes, c.nodes);
            set(&g.gpus, c.gpus);
            set(&g.allocations, c.allocations);
            set(&g.unaccounted, c.unaccounted);
            set(&g.nodes_with_problems, c.nodes_with_problems);
            hami = Some(Arc::new(sample));
        }
        let mut head = String::new();
        let failed = encode_registry(&mut head, &self.registry).is_err();
        MetricsChunks {
            head: Some(head),
            hami,
            family: 0,
            start: 0,
            family_started: false,
            eof: false,
            failed,
        }
    }
}

/// Series of HAMi's gauges per piece of the `/metrics` text (about 150 KB).
pub const HAMI_BATCH: usize = 1000;

/// The `/metrics` text, piece by piece (see [`Metrics::encode_chunks`]).
/// Should a piece fail to encode, the text ends there, without `# EOF`,
/// and a scraper rejects it.
#[derive(Debug)]
pub struct MetricsChunks {
    head: Option<String>,
    hami: Option<Arc<HamiGauges>>,
    /// Next family of `hami`, and its next series.
    family: usize,
    start: usize,
    /// Whether a piece of `family` was given (later ones lose the header).
    family_started: bool,
    eof: bool,
    failed: bool,
}

impl Iterator for MetricsChunks {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.failed {
            return None;
        }
        if let Some(head) = self.head.take() {
            return Some(head);
        }
        if let Some(sample) = &self.hami {
            while self.family < HamiGauges::FAMILIES {
                let len = sample.family_len(self.family);
                if self.start >= len {
                    self.family += 1;
                    self.start = 0;
                    self.family_started = false;
                    continue;
                }
                let end = len.min(self.start + HAMI_BATCH);
                // A registry of this piece only: series of pods and GPUs
                // that are gone are never kept.
                let mut registry = Registry::with_labels(std::iter::once((
                    Cow::Borrowed("zone"),
                    Cow::Borrowed(HAMI_ZONE),
                )));
                registry.register_collector(Box::new(HamiBatch {
                    sample: sample.clone(),
                    family: self.family,
                    range: self.start..end,
                }));
                self.start = end;
                let mut out = String::new();
                if encode_registry(&mut out, &registry).is_err() {
                    self.failed = true;
                    return None;
                }
                if out.is_empty() {
                    continue;
                }
                if self.family_started {
                    // `# HELP` and `# TYPE` came with the family's first piece.
                    let series = std::iter::once(0)
                        .chain(out.match_indices('\n').map(|(i, _)| i + 1))
                        .find(|&i| !out[i..].starts_with("# "))
                        .unwrap_or(out.len());
                    out.drain(..series);
                }
                self.family_started = true;
                return Some(out);
            }
            self.hami = None;
        }
        if self.eof {
            return None;
        }
        self.eof = true;
        let mut out = String::new();
        match encode_eof(&mut out) {
            Ok(()) => Some(out),
            Err(_) => {
                self.failed = true;
                None
            }
        }
    }
}

/// The constant label HAMi's scheduler puts on its cluster gauges.
const HAMI_ZONE: &str = "vGPU";

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
/// Left out: `hami_node_gpu_mig_instance_info` (gpugate does not hand out
/// MIG instances), `hami_build_info`, and the names HAMi's
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
struct HamiGauges {
    /// Node name order, then GPU index order.
    gpus: Vec<GpuRow>,
    /// Namespace order, memory before cores.
    quotas: Vec<QuotaRow>,
    /// Namespace, pod, container and GPU order.
    vgpus: Vec<VgpuRow>,
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
    /// Copies what the gauges need; `memory` and `cores` are the quota
    /// resource names.
    fn sample(view: &ClusterView, memory: &str, cores: &str) -> Self {
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
            .quota_namespaces()
            .chain(view.quota_used_namespaces())
            .collect();
        let mut quotas = Vec::new();
        for ns in namespaces {
            let used = view.quota_used(ns);
            // Values that are not whole numbers are ignored here as by the
            // quota check; the check reports them.
            let (limits, _) = view.quota_limits(ns, memory, cores);
            for (resource, used_amount, limit) in [
                (memory, used.mem_mib, limits.mem_mib),
                (cores, used.cores, limits.cores),
            ] {
                if limit.is_some() || !used.is_zero() {
                    quotas.push(QuotaRow {
                        namespace: ns.to_string(),
                        resource: resource.to_string(),
                        used: used_amount,
                        limit,
                    });
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
        HamiGauges {
            gpus,
            quotas,
            vgpus,
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
struct HamiBatch {
    sample: Arc<HamiGauges>,
    family: usize,
    range: std::ops::Range<usize>,
}

impl Collector for HamiBatch {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.sample
            .encode_family(self.family, self.range.clone(), &mut encoder)
    }
}

impl HamiGauges {
    /// Families 0-6 are per GPU, 7-8 per quota row, 9-10 per vGPU.
    const FAMILIES: usize = 11;

    fn family_len(&self, family: usize) -> usize {
        match family {
            0..=6 => self.gpus.len(),
            7..=8 => self.quotas.len(),
            _ => self.vgpus.len(),
        }
    }

    /// Encodes rows `range` of one family, in the order of HAMi's
    /// scheduler (nothing when none of them has a series).
    fn encode_family(
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
        let vgpus = rows(&self.vgpus, range);
        match family {
            0 => gauge_family(
                e,
                "hami_gpu_memory_limit_bytes",
                "Device memory limit for a certain GPU.",
                gpus.iter().map(|g| (g.labels(), bytes(g.capacity.mem_mib))),
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
                        bytes(g.used.mem_mib),
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
                        bytes(g.used.mem_mib),
                    )
                }),
            ),
            6 => gauge_family(
                e,
                "hami_node_gpu_memory_allocated_ratio",
                "GPU Memory Allocated Percentage on a certain GPU.",
                gpus.iter()
                    .filter(|g| g.capacity.mem_mib > 0)
                    .map(|g| (g.labels(), ratio(g.used.mem_mib, g.capacity.mem_mib))),
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
            _ => {
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
        }
    }
}

/// `part / whole` as a float (`whole` is not 0).
fn ratio(part: u64, whole: u64) -> f64 {
    // MiB counts stay far below 2^52, where f64 is exact.
    part as f64 / whole as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;

    const HIGH: &str = "0b4f3f2e-0000-4000-8000-00000000a002";

    /// Metrics over tests/fixtures/cluster/extender.yaml, with the cluster
    /// and the config they observe.
    fn fixture() -> (Metrics, Arc<SharedCluster>, Arc<ArcSwap<Config>>) {
        let snapshot = Snapshot::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/cluster/extender.yaml"),
        )
        .unwrap();
        let (view, report) = snapshot.to_view();
        assert!(report.unaccounted_pods.is_empty(), "{report:?}");
        let cluster = Arc::new(SharedCluster::new(view, true));
        let config = Arc::new(ArcSwap::from_pointee(Config::default()));
        let metrics = Metrics::new(None).observing(cluster.clone(), config.clone());
        (metrics, cluster, config)
    }

    /// Every HAMi family in one collector: the text before it was cut
    /// into pieces.
    #[derive(Debug)]
    struct Whole(Arc<HamiGauges>);

    impl Collector for Whole {
        fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            for f in 0..HamiGauges::FAMILIES {
                self.0.encode_family(f, 0..self.0.family_len(f), &mut e)?;
            }
            Ok(())
        }
    }

    #[test]
    fn the_text_in_pieces_is_the_text_whole() {
        // 260 nodes x 8 GPUs and 2,080 pods: every per-GPU and per-vGPU
        // family spans three pieces.
        let register: String = (0..8)
            .map(|i| {
                format!(
                    r#"{{"id":"GPU-{{n}}-{i}","index":{i},"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}}"#
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let mut yaml = String::new();
        for n in 0..260 {
            let register = register.replace("{n}", &n.to_string());
            yaml += &format!(
                "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: node-{n:03}\n  annotations:\n    hami.io/node-nvidia-register: '[{register}]'\n"
            );
            for i in 0..8 {
                yaml += &format!(
                    "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p-{n}-{i}\n  namespace: ns-{}\n  uid: u-{n}-{i}\n  annotations:\n    hami.io/vgpu-node: node-{n:03}\n    hami.io/vgpu-devices-allocated: \"GPU-{n}-{i},NVIDIA,1000,10:;\"\nspec:\n  containers:\n  - name: c\n",
                    i % 3
                );
            }
        }
        yaml += "---\napiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ns-1}\nspec:\n  hard: {limits.nvidia.com/gpumem: \"90000\"}\n";
        let (view, report) = Snapshot::from_yaml(&yaml, "test").unwrap().to_view();
        assert!(report.unaccounted_pods.is_empty(), "{report:?}");
        let cluster = Arc::new(SharedCluster::new(view, true));
        let config = Arc::new(ArcSwap::from_pointee(Config::default()));
        let metrics = Metrics::new(None).observing(cluster.clone(), config.clone());
        let pieces: Vec<String> = metrics.encode_chunks().collect();
        assert!(pieces.len() > 30, "{}", pieces.len());
        let text: String = pieces.concat();

        let sample = HamiGauges::sample(
            &cluster.read(),
            &config.load().nvidia.resource_memory_name,
            &config.load().nvidia.resource_core_name,
        );
        let mut registry = Registry::with_labels(std::iter::once((
            Cow::Borrowed("zone"),
            Cow::Borrowed(HAMI_ZONE),
        )));
        registry.register_collector(Box::new(Whole(Arc::new(sample))));
        let mut whole = String::new();
        encode_registry(&mut whole, &registry).unwrap();
        encode_eof(&mut whole).unwrap();
        let hami_start = text.find("# HELP hami_").unwrap();
        assert_eq!(text[hami_start..], whole);
        assert_eq!(series_count(&text, "hami_gpu_memory_limit_bytes"), 2080);
        assert_eq!(series_count(&text, "hami_vgpu_core_allocated_ratio"), 2080);
        assert_eq!(text.matches("# TYPE hami_gpu_shared_count ").count(), 1);
    }

    /// The value of the series written exactly as `series` (name and
    /// labels), if it is in `text`.
    fn value<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    /// How many series of the metric `name` are in `text`.
    fn series_count(text: &str, name: &str) -> usize {
        let prefix = format!("{name}{{");
        text.lines().filter(|l| l.starts_with(&prefix)).count()
    }

    const T4: &str = r#"device_type="NVIDIA Tesla T4""#;

    fn gpu(node: &str, uuid: &str, index: u32) -> String {
        format!(r#"zone="vGPU",node="{node}",device_uuid="{uuid}",device_index="{index}""#)
    }

    #[test]
    fn hami_gpu_gauges_read_capacity_and_usage_of_every_gpu() {
        let (metrics, cluster, _) = fixture();
        // A GPU that reports no memory has no memory ratio.
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-0", "annotations": {
                crate::hami::keys::NODE_NVIDIA_REGISTER:
                    r#"[{"id":"GPU-0-0","index":0,"count":4,"devmem":0,"devcore":100,"type":"NVIDIA A10","health":true}]"#
            }}
        }))
        .unwrap();
        assert!(cluster.write().upsert_node(&node).is_empty());
        let text = metrics.encode();

        let g10 = gpu("gpu-1", "GPU-1-0", 0);
        let g21 = gpu("gpu-2", "GPU-2-1", 1);
        let g20 = gpu("gpu-2", "GPU-2-0", 0);
        let cases = [
            // 16384 MiB
            (
                format!("hami_gpu_memory_limit_bytes{{{g10},{T4}}}"),
                "17179869184",
            ),
            (format!("hami_gpu_core_limit_ratio{{{g10},{T4}}}"), "100"),
            // low-0 holds GPU-1-0 in full.
            (
                format!(r#"hami_gpu_memory_allocated_bytes{{{g10},device_cores="100",{T4}}}"#),
                "17179869184",
            ),
            (format!("hami_gpu_shared_count{{{g10},{T4}}}"), "1"),
            (
                format!("hami_gpu_core_allocated_ratio{{{g10},{T4}}}"),
                "100",
            ),
            // user-0 holds 6000 MiB and 20 cores of GPU-2-1.
            (
                format!(r#"hami_gpu_memory_allocated_bytes{{{g21},device_cores="100",{T4}}}"#),
                "6291456000",
            ),
            (format!("hami_gpu_core_allocated_ratio{{{g21},{T4}}}"), "20"),
            (
                format!(
                    r#"hami_node_gpu_overview{{{g21},device_cores="100",device_memory_limit="16384",{T4}}}"#
                ),
                "6291456000",
            ),
            (
                format!("hami_node_gpu_memory_allocated_ratio{{{g21},{T4}}}"),
                "0.3662109375",
            ),
            (
                format!("hami_node_gpu_memory_allocated_ratio{{{g10},{T4}}}"),
                "1.0",
            ),
            // GPU-2-0 is free.
            (format!("hami_gpu_shared_count{{{g20},{T4}}}"), "0"),
            (
                format!("hami_node_gpu_memory_allocated_ratio{{{g20},{T4}}}"),
                "0.0",
            ),
            (
                format!(
                    r#"hami_gpu_memory_limit_bytes{{{},device_type="NVIDIA A10"}}"#,
                    gpu("gpu-0", "GPU-0-0", 0)
                ),
                "0",
            ),
        ];
        for (series, want) in &cases {
            assert_eq!(value(&text, series), Some(*want), "{series} in\n{text}");
        }
        // Four T4s and the A10 (cpu-1 has no GPUs); the A10 has no ratio.
        for name in [
            "hami_gpu_memory_limit_bytes",
            "hami_gpu_core_limit_ratio",
            "hami_gpu_memory_allocated_bytes",
            "hami_gpu_shared_count",
            "hami_gpu_core_allocated_ratio",
            "hami_node_gpu_overview",
        ] {
            assert_eq!(series_count(&text, name), 5, "{name}");
        }
        assert_eq!(
            series_count(&text, "hami_node_gpu_memory_allocated_ratio"),
            4
        );
        assert!(!text.contains("cpu-1"));
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn hami_quota_gauges_are_keyed_by_namespace_and_resource_name() {
        let (metrics, _, _) = fixture();
        let text = metrics.encode();
        let cases = [
            // capped: ResourceQuota `gpu` limits gpumem to 8000; user-0 holds 6000 MiB, 20 cores.
            (
                r#"hami_resource_quota_used{zone="vGPU",namespace="capped",quota_name="nvidia.com/gpumem",limit="8000"}"#,
                "6000",
            ),
            (
                r#"hami_resource_quota_limit{zone="vGPU",namespace="capped",quota_name="nvidia.com/gpumem"}"#,
                "8000",
            ),
            (
                r#"hami_resource_quota_used{zone="vGPU",namespace="capped",quota_name="nvidia.com/gpucores",limit="0"}"#,
                "20",
            ),
            // batch: no quota, two whole T4s in use.
            (
                r#"hami_resource_quota_used{zone="vGPU",namespace="batch",quota_name="nvidia.com/gpumem",limit="0"}"#,
                "32768",
            ),
            (
                r#"hami_resource_quota_used{zone="vGPU",namespace="batch",quota_name="nvidia.com/gpucores",limit="0"}"#,
                "200",
            ),
        ];
        for (series, want) in cases {
            assert_eq!(value(&text, series), Some(want), "{series} in\n{text}");
        }
        assert_eq!(series_count(&text, "hami_resource_quota_used"), 4);
        // Only capped's gpumem has a limit.
        assert_eq!(series_count(&text, "hami_resource_quota_limit"), 1);
    }

    #[test]
    fn hami_quota_names_follow_the_config_in_force() {
        let (metrics, _, config) = fixture();
        let mut renamed = Config::default();
        renamed.nvidia.resource_memory_name = "example.com/vmem".to_string();
        config.store(Arc::new(renamed));
        let text = metrics.encode();
        // The fixture's quota limits nvidia.com/gpumem, which no longer counts.
        assert_eq!(
            value(
                &text,
                r#"hami_resource_quota_used{zone="vGPU",namespace="capped",quota_name="example.com/vmem",limit="0"}"#
            ),
            Some("6000"),
            "{text}"
        );
        assert_eq!(series_count(&text, "hami_resource_quota_limit"), 0);
        assert!(!text.contains("nvidia.com/gpumem"));
    }

    #[test]
    fn hami_vgpu_series_follow_held_pods_and_go_with_them() {
        let (metrics, cluster, _) = fixture();
        let high = r#"{zone="vGPU",namespace="batch",node="gpu-1",pod="high-0",container_index="0",device_uuid="GPU-1-1"}"#;
        let user = r#"{zone="vGPU",namespace="capped",node="gpu-2",pod="user-0",container_index="0",device_uuid="GPU-2-1"}"#;
        let text = metrics.encode();
        for (series, want) in [
            (
                format!("hami_vgpu_memory_allocated_bytes{high}"),
                "17179869184",
            ),
            (format!("hami_vgpu_core_allocated_ratio{high}"), "100"),
            (
                format!("hami_vgpu_memory_allocated_bytes{user}"),
                "6291456000",
            ),
            (format!("hami_vgpu_core_allocated_ratio{user}"), "20"),
        ] {
            assert_eq!(value(&text, &series), Some(want), "{series} in\n{text}");
        }
        assert_eq!(series_count(&text, "hami_vgpu_memory_allocated_bytes"), 3);
        assert_eq!(series_count(&text, "hami_vgpu_core_allocated_ratio"), 3);

        cluster.write().delete_pod(HIGH);
        let text = metrics.encode();
        assert!(!text.contains("high-0"), "{text}");
        assert_eq!(series_count(&text, "hami_vgpu_memory_allocated_bytes"), 2);
        let g11 = gpu("gpu-1", "GPU-1-1", 1);
        assert_eq!(
            value(&text, &format!("hami_gpu_shared_count{{{g11},{T4}}}")),
            Some("0")
        );
        assert_eq!(
            value(
                &text,
                r#"hami_resource_quota_used{zone="vGPU",namespace="batch",quota_name="nvidia.com/gpumem",limit="0"}"#
            ),
            Some("16384")
        );
        assert_eq!(
            value(&text, &format!("hami_vgpu_core_allocated_ratio{user}")),
            Some("20")
        );
    }

    #[test]
    fn without_a_cluster_view_there_are_no_hami_gauges() {
        let text = Metrics::new(None).encode();
        assert!(!text.contains("hami_"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
    }
}
