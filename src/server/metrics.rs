//! Prometheus metrics of the admission server, served on the admin port.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cluster::SharedCluster;
use crate::cluster::watch::WatchObserver;
use crate::extender::bind::BindMetrics;

use super::tls::ReloadingCert;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `mutate` or `validate`.
    pub webhook: &'static str,
    /// The admission operation (`CREATE`, …), or `none` for bodies that
    /// were not reviews.
    pub operation: String,
    /// `allowed`, `patched`, `denied` or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DenialLabels {
    pub webhook: &'static str,
    pub reason: &'static str,
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
    // 0.1 ms to about 3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// The metrics registry and the handles the handlers update.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub denials: Family<DenialLabels, Counter>,
    pub latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    pub config_reload_errors: Counter,
    pub extender_requests: Family<VerbResultLabels, Counter>,
    pub extender_latency: Family<VerbLabels, Histogram, fn() -> Histogram>,
    cert_not_after: Gauge,
    cert_reload_errors: Gauge,
    cert: Option<Arc<ReloadingCert>>,
    pub watch: WatchMetrics,
    /// Handed to the API-server binder.
    pub bind: BindMetrics,
    cluster_gauges: ClusterGauges,
    cluster: Option<Arc<SharedCluster>>,
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
            "Config file reloads refused (the previous config stays in force)",
            config_reload_errors.clone(),
        );
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
        registry.register(
            "gpugate_bind",
            "Binds through the API server, by result and code (bound, already_bound, \
             node_lock_contention, conflict, does_not_fit, quota_exceeded, api_error, ...)",
            bind.outcomes.clone(),
        );
        registry.register(
            "gpugate_node_lock_wait_seconds",
            "Time a bind waited for its node (in-process queue and hami.io/mutex.lock)",
            bind.lock_wait.clone(),
        );
        registry.register(
            "gpugate_bind_rollback_failures",
            "Undo steps of failed binds that failed too (annotations left, lock not released)",
            bind.rollback_failures.clone(),
        );
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
            watch,
            bind,
            cluster_gauges: g,
            cluster: None,
            requests,
            denials,
            latency,
            config_reload_errors,
            cert_not_after,
            cert_reload_errors,
            cert,
        }
    }

    /// Samples the cluster view's gauges on every scrape.
    pub fn observing(mut self, cluster: Arc<SharedCluster>) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// Records one answered review.
    pub fn observe(
        &self,
        webhook: &'static str,
        operation: &str,
        result: &'static str,
        denial: Option<&'static str>,
        elapsed: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                webhook,
                operation: operation.to_string(),
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

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        if let Some(cert) = &self.cert {
            self.cert_not_after.set(cert.not_after());
            self.cert_reload_errors
                .set(i64::try_from(cert.reload_errors()).unwrap_or(i64::MAX));
        }
        if let Some(cluster) = &self.cluster {
            let c = cluster.read().counts();
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
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
