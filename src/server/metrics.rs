//! Prometheus metrics of the admission server, served on the admin port:
//! gpugate's own (`gpugate_*`) and, with a cluster view, HAMi's scheduler
//! gauges (`hami_*`, see [`HamiGauges`]). Each component registers its
//! own metrics; this file holds the registry and streams the text.

use std::borrow::Cow;
use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::registry::Registry;

use crate::admission::metrics::AdmissionMetrics;
use crate::bind::BindMetrics;
use crate::cluster::SharedCluster;
use crate::cluster::api::ClientMetrics;
use crate::cluster::events::EventMetrics;
use crate::cluster::metrics::{ViewGauges, WatchMetrics};
use crate::cluster::webhook_scope::WebhookScopeMetrics;
use crate::config::Config;
use crate::controllers::preemption::PreemptionMetrics;
use crate::extender::metrics::ExtenderMetrics;

use super::config_reload::ConfigMetrics;
use super::conn_metrics::ConnMetrics;
use super::hami_gauges::{HAMI_BATCH, HAMI_ZONE, HamiBatch, HamiGauges};
use super::tls::{CertMetrics, ReloadingCert};

/// The metrics registry, and the handles of each component's metrics:
/// every component registers its own.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub admission: AdmissionMetrics,
    pub config: ConfigMetrics,
    /// Connections and request bodies of every listener.
    pub connections: ConnMetrics,
    pub extender: ExtenderMetrics,
    cert: CertMetrics,
    pub watch: WatchMetrics,
    /// Handed to the API-server binder.
    pub bind: BindMetrics,
    pub preemption: PreemptionMetrics,
    /// Handed to Kueue's admission check.
    pub kueue: crate::kueue::controller::KueueMetrics,
    /// Handed to the event sink.
    pub events: EventMetrics,
    /// Handed to the API client's limit (`api.qps`).
    pub api_client: ClientMetrics,
    view: ViewGauges,
    /// Handed to the webhook scope check.
    pub webhook_scope: WebhookScopeMetrics,
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
        let mut m = Metrics {
            admission: AdmissionMetrics::default(),
            config: ConfigMetrics::default(),
            connections: ConnMetrics::default(),
            extender: ExtenderMetrics::default(),
            cert: CertMetrics::new(cert),
            watch: WatchMetrics::default(),
            bind: BindMetrics::default(),
            preemption: PreemptionMetrics::default(),
            kueue: Default::default(),
            events: EventMetrics::default(),
            api_client: ClientMetrics::default(),
            view: ViewGauges::default(),
            webhook_scope: WebhookScopeMetrics::default(),
            registry: Registry::default(),
            observed: None,
        };
        // One set of HAMi's allocation counters, fed by /filter and /bind.
        m.extender.hami = m.bind.hami.clone();
        // Without a Lease to read (standalone), every replica leads.
        m.view.hami_is_leader.set(1);
        m.admission.register(&mut registry);
        m.config.register(&mut registry);
        m.connections.register(&mut registry);
        m.cert.register(&mut registry);
        m.extender.register(&mut registry);
        m.watch.register(&mut registry);
        m.bind.register(&mut registry);
        m.preemption.register(&mut registry);
        m.kueue.register(&mut registry);
        m.events.register(&mut registry);
        m.api_client.register(&mut registry);
        m.view.register(&mut registry);
        m.webhook_scope.register(&mut registry);
        Metrics { registry, ..m }
    }

    /// Registers `gpugate_task_restarts_total` (the supervisor's, made
    /// before the registry).
    pub fn with_tasks(mut self, tasks: crate::supervisor::TaskMetrics) -> Self {
        tasks.register(&mut self.registry);
        self
    }

    /// `hami_scheduler_is_leader`, for the task that reads the Lease
    /// (`cluster::leader`).
    pub fn leader_gauge(&self) -> prometheus_client::metrics::gauge::Gauge {
        self.view.hami_is_leader.clone()
    }

    /// Samples the cluster view's gauges, and HAMi's, on every scrape.
    /// `config` (the live one, swapped on reload) names the quota resources.
    pub fn observing(mut self, cluster: Arc<SharedCluster>, config: Arc<ArcSwap<Config>>) -> Self {
        self.registry.register(
            "gpugate_cluster_view_stale",
            "Times the cluster view stopped being current, by cause: watch_failed (a watch \
             error or cut stream; the kind relists), watch_task_ended (the watch task ended \
             or panicked), api_unreachable (no answer to the probe for api.staleAfterSeconds)",
            cluster.freshness().episodes.clone(),
        );
        self.observed = Some(Observed { cluster, config });
        self
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
        self.cert.sample();
        let mut hami = None;
        if let Some(Observed { cluster, config }) = &self.observed {
            let config = config.load();
            // One read lock: copy what the gauges need, encode after.
            let (counts, sample, hold) = {
                let view = cluster.read();
                let sample = HamiGauges::sample(&view, &config.device_configs());
                (view.counts(), sample, view.typical_lock_hold())
            };
            self.view
                .set(cluster.is_synced(), cluster.current().is_ok(), counts);
            let depth = config.scheduler.node_lock.queue_depth.for_policy(
                crate::engine::policy::NodePolicy::Binpack,
                hold,
                config.scheduler.node_wait(),
            );
            self.view.set_lock_queue(hold, depth);
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
                // HAMi's families carry its constant `zone` label,
                // gpugate's own capacity families none.
                let mut registry = if HamiGauges::is_hamis(self.family) {
                    Registry::with_labels(std::iter::once((
                        Cow::Borrowed("zone"),
                        Cow::Borrowed(HAMI_ZONE),
                    )))
                } else {
                    Registry::default()
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::DescriptorEncoder;

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

    /// Some families of the sample in one collector: the text before it
    /// was cut into pieces.
    #[derive(Debug)]
    struct Whole(Arc<HamiGauges>, std::ops::Range<usize>);

    impl Collector for Whole {
        fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            for f in self.1.clone() {
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

        let sample = HamiGauges::sample(&cluster.read(), &config.load().device_configs());
        let sample = Arc::new(sample);
        let hamis = (0..HamiGauges::FAMILIES)
            .filter(|f| HamiGauges::is_hamis(*f))
            .count();
        let mut registry = Registry::with_labels(std::iter::once((
            Cow::Borrowed("zone"),
            Cow::Borrowed(HAMI_ZONE),
        )));
        registry.register_collector(Box::new(Whole(sample.clone(), 0..hamis)));
        let mut whole = String::new();
        encode_registry(&mut whole, &registry).unwrap();
        let mut ours = Registry::default();
        ours.register_collector(Box::new(Whole(sample, hamis..HamiGauges::FAMILIES)));
        encode_registry(&mut whole, &ours).unwrap();
        encode_eof(&mut whole).unwrap();
        // HAMi's gauges follow the registry's metrics (HAMi master's
        // hami_scheduler_* counters among them).
        let hami_start = text.find("# HELP hami_gpu_memory_limit_bytes").unwrap();
        assert_eq!(text[hami_start..], whole);
        assert_eq!(series_count(&text, "hami_gpu_memory_limit_bytes"), 2080);
        assert_eq!(series_count(&text, "hami_vgpu_core_allocated_ratio"), 2080);
        assert_eq!(text.matches("# TYPE hami_gpu_shared_count ").count(), 1);
        // gpugate's capacity, one series per node, without HAMi's zone.
        assert_eq!(series_count(&text, "gpugate_capacity_free_memory_mib"), 260);
        assert!(text.contains("gpugate_capacity_whole_devices_free{node=\""));
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
                crate::devices::nvidia::NODE_REGISTER:
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
        // gpugate's capacity: both GPUs of gpu-1 are held in full, GPU-2-1
        // in part.
        for (series, want) in [
            (
                r#"gpugate_capacity_free_memory_mib{node="gpu-1",kind="nvidia"}"#,
                "0",
            ),
            (
                r#"gpugate_capacity_largest_slice_memory_mib{node="gpu-1",kind="nvidia"}"#,
                "0",
            ),
            (
                r#"gpugate_capacity_whole_devices_free{node="gpu-1",kind="nvidia"}"#,
                "0",
            ),
            (
                r#"gpugate_capacity_free_memory_mib{node="gpu-2",kind="nvidia"}"#,
                "26768",
            ),
            (
                r#"gpugate_capacity_free_cores{node="gpu-2",kind="nvidia"}"#,
                "180",
            ),
            (
                r#"gpugate_capacity_largest_slice_memory_mib{node="gpu-2",kind="nvidia"}"#,
                "16384",
            ),
            (
                r#"gpugate_capacity_largest_slice_cores{node="gpu-2",kind="nvidia"}"#,
                "100",
            ),
            (
                r#"gpugate_capacity_whole_devices_free{node="gpu-2",kind="nvidia"}"#,
                "1",
            ),
            (
                r#"gpugate_capacity_largest_slice_memory_mib{node="gpu-0",kind="nvidia"}"#,
                "0",
            ),
        ] {
            assert_eq!(value(&text, series), Some(want), "{series} in\n{text}");
        }
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

    /// HAMi's `hami_node_gpu_mig_instance_info`: one series per instance
    /// the device plugin reports created (examples/mig: one 3g.20gb with
    /// its runtime ids), labelled as HAMi labels it; gone with its pod.
    #[test]
    fn hami_mig_instance_info_follows_runtime_ready_instances() {
        let snapshot = Snapshot::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mig/cluster.yaml"),
        )
        .unwrap();
        let (view, report) = snapshot.to_view();
        assert!(report.unaccounted_pods.is_empty(), "{report:?}");
        let cluster = Arc::new(SharedCluster::new(view, true));
        let config = Arc::new(ArcSwap::from_pointee(Config::default()));
        let metrics = Metrics::new(None).observing(cluster.clone(), config);
        let text = metrics.encode();
        let series = r#"hami_node_gpu_mig_instance_info{zone="vGPU",node="mig-1",device_uuid="GPU-mig-1-0",device_index="0",mig_uuid="MIG-0f1e",profile="3g.20gb",gpu_instance_id="1",compute_instance_id="0",placement_start="0",placement_size="4"}"#;
        assert_eq!(value(&text, series), Some("1"), "{text}");
        assert_eq!(series_count(&text, "hami_node_gpu_mig_instance_info"), 1);
        let held: Vec<String> = cluster.read().held_pods().map(str::to_string).collect();
        for key in held {
            cluster.write().delete_pod(&key);
        }
        let text = metrics.encode();
        assert_eq!(series_count(&text, "hami_node_gpu_mig_instance_info"), 0);
    }

    #[test]
    fn without_a_cluster_view_there_are_no_hami_gauges() {
        let text = Metrics::new(None).encode();
        // Only HAMi master's scheduler metrics, which need no view.
        assert!(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .all(|l| !l.starts_with("hami_") || l.starts_with("hami_scheduler_")),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
    }
}
