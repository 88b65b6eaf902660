//! The extender's metrics: calls answered by verb and result, the time to
//! answer, and `/filter`'s decisions and the reason codes of the nodes it
//! turned down. (Bind's own outcomes are in `crate::bind::outcome`.)

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::filter::Filtered;
use crate::placement::ReasonCode;

/// A label set of `N` labels with fixed names and values from fixed sets
/// (`verb`: `filter`, `prioritize`, `bind`, `preempt`; `result`; `reason`:
/// a `placement::ReasonCode`), never copied from a request.
type Labels<const N: usize> = [(&'static str, &'static str); N];

/// What the extender reports to Prometheus.
#[derive(Debug, Clone)]
pub struct ExtenderMetrics {
    /// By `verb` and `result` (`ok`, `error`).
    pub requests: Family<Labels<2>, Counter>,
    /// By `verb`.
    pub latency: Family<Labels<1>, Histogram, fn() -> Histogram>,
    /// By `result`.
    filter_decisions: Family<Labels<1>, Counter>,
    /// By `reason`.
    filter_rejections: Family<Labels<1>, Counter>,
    /// Body bytes by `verb` and `direction` (`request`, `answer`).
    bytes: Family<Labels<2>, Counter>,
    /// HAMi master's allocation counters, shared with bind's: a filter
    /// that offers no node counts as a failure of phase `filter`.
    pub hami: crate::bind::HamiSchedulerCounters,
}

impl Default for ExtenderMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            // 0.1 ms to about 105 s (a bind may take deploy/'s 55 s).
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 21))
            }),
            filter_decisions: Family::default(),
            filter_rejections: Family::default(),
            bytes: Family::default(),
            hami: crate::bind::HamiSchedulerCounters::default(),
        }
    }
}

impl ExtenderMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_extender_requests",
            "Extender calls answered, by verb and result",
            self.requests.clone(),
        );
        registry.register(
            "gpugate_extender_duration_seconds",
            "Time to answer an extender call, by verb",
            self.latency.clone(),
        );
        registry.register(
            "gpugate_extender_body_bytes",
            "Bytes of extender request and answer bodies, by verb and direction (request, answer): \
             what each call costs kube-scheduler and gpugate to write and read",
            self.bytes.clone(),
        );
        registry.register(
            "gpugate_filter_decisions",
            "Filter answers, by result (feasible, unschedulable, error)",
            self.filter_decisions.clone(),
        );
        registry.register(
            "gpugate_filter_rejections",
            "Nodes a filter call rejected, by reason code (CardInsufficientMemory, \
             ResourceQuotaNotFit, GangNotFit, NodeUnregistered, ...)",
            self.filter_rejections.clone(),
        );
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
            .get_or_create(&[("result", result)])
            .inc();
        // A few codes over up to thousands of nodes (every node not
        // offered under filterMode best): a short list, not a hash per node.
        let mut counts: Vec<(ReasonCode, u64)> = Vec::new();
        for (_, reason) in &filtered.rejected {
            let code = reason.code();
            match counts.iter_mut().find(|(c, _)| *c == code) {
                Some((_, n)) => *n += 1,
                None => counts.push((code, 1)),
            }
        }
        if result == "unschedulable"
            && let Some((code, _)) = counts
                .iter()
                .max_by_key(|(code, n)| (*n, std::cmp::Reverse(*code)))
        {
            self.hami.failed("filter", code.as_str());
        }
        for (code, n) in counts {
            self.filter_rejections
                .get_or_create(&[("reason", code.as_str())])
                .inc_by(n);
        }
    }

    /// Counts one call's body sizes.
    pub fn observe_bytes(&self, verb: &'static str, request: usize, answer: usize) {
        for (direction, n) in [("request", request), ("answer", answer)] {
            self.bytes
                .get_or_create(&[("verb", verb), ("direction", direction)])
                .inc_by(n as u64);
        }
    }

    /// Records one extender call.
    pub fn observe(&self, verb: &'static str, ok: bool, elapsed: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.requests
            .get_or_create(&[("verb", verb), ("result", result)])
            .inc();
        self.latency
            .get_or_create(&[("verb", verb)])
            .observe(elapsed.as_secs_f64());
    }
}
