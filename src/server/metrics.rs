//! Prometheus metrics of the admission server, served on the admin port.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
    cert_not_after: Gauge,
    cert_reload_errors: Gauge,
    cert: Option<Arc<ReloadingCert>>,
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
        Metrics {
            registry,
            requests,
            denials,
            latency,
            config_reload_errors,
            cert_not_after,
            cert_reload_errors,
            cert,
        }
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

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        if let Some(cert) = &self.cert {
            self.cert_not_after.set(cert.not_after());
            self.cert_reload_errors
                .set(i64::try_from(cert.reload_errors()).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
