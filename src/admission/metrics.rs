//! The webhooks' metrics: reviews answered by webhook, operation and
//! result, denials by reason, and the time to answer.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
pub struct WebhookLabels {
    pub webhook: &'static str,
}

/// What the webhooks report to Prometheus.
#[derive(Debug, Clone)]
pub struct AdmissionMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub denials: Family<DenialLabels, Counter>,
    pub latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
}

impl Default for AdmissionMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            denials: Family::default(),
            // 0.1 ms to about 52 s.
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 20))
            }),
        }
    }
}

impl AdmissionMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_admission_requests",
            "Admission reviews answered, by webhook, operation and result",
            self.requests.clone(),
        );
        registry.register(
            "gpugate_admission_denials",
            "Admission reviews denied, by webhook and reason",
            self.denials.clone(),
        );
        registry.register(
            "gpugate_admission_duration_seconds",
            "Time to answer an admission review",
            self.latency.clone(),
        );
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
}
