//! The config file's `api` section: the optional client-side rate limit
//! and the timeout of gpugate's own API calls, and how often watches
//! re-list. Read at start.

use serde::Deserialize;

/// Rate limit and timeout of gpugate's own API calls (config `api`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApiLimits {
    /// A client-side limit on gpugate's requests per second, all of its
    /// rate-limited calls together. None (the default): no limit on the
    /// client; kube-apiserver's priority and fairness shares the server
    /// (deploy/'s FlowSchema and PriorityLevelConfiguration). A fixed limit
    /// capped binds on a large control plane and protects nothing that
    /// priority and fairness does not (docs/operations.md, "API usage").
    /// Set it for an API server without priority and fairness.
    pub qps: Option<f64>,
    /// Requests allowed at once above `qps` (only with `qps`; default
    /// twice it).
    pub burst: Option<u32>,
    /// How long one request may take before it counts as failed.
    pub timeout_seconds: f64,
    /// How often every watch is restarted with a fresh list, which finds
    /// and repairs what the watch missed (counted in `gpugate_ledger_drift_total`).
    pub resync_seconds: u64,
    /// How long the API server may stay silent (no answer to the probe
    /// gpugate sends every 2 seconds) before the cluster view counts as
    /// stale: `/readyz` 503, the extender refuses to place. A partitioned
    /// replica must not place from what it saw last.
    pub stale_after_seconds: u64,
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            qps: None,
            burst: None,
            timeout_seconds: 10.0,
            resync_seconds: 300,
            stale_after_seconds: 10,
        }
    }
}

impl ApiLimits {
    /// The client-side limit, if one is set: requests per second and
    /// burst.
    pub fn client_limit(&self) -> Option<(f64, u32)> {
        let qps = self.qps?;
        // Twice the rate, as client-go's defaults (5 and 10) are.
        let burst = self
            .burst
            .unwrap_or_else(|| (qps * 2.0).ceil().clamp(1.0, f64::from(u32::MAX)) as u32);
        Some((qps, burst))
    }

    pub fn validate(&self) -> Result<(), String> {
        match (self.qps, self.burst) {
            (Some(qps), _) if !(qps.is_finite() && qps >= 0.1) => {
                return Err(format!(
                    "api.qps is {qps}, at least 0.1 (or leave it out: no client-side limit)"
                ));
            }
            (_, Some(0)) => return Err("api.burst must be at least 1".to_string()),
            (None, Some(burst)) => {
                return Err(format!(
                    "api.burst is {burst} but api.qps is not set: a burst limits nothing \
                     without a rate (set both, or neither for no client-side limit)"
                ));
            }
            _ => {}
        }
        if !(self.timeout_seconds.is_finite()
            && self.timeout_seconds > 0.0
            && self.timeout_seconds <= 300.0)
        {
            return Err(format!(
                "api.timeoutSeconds is {}, allowed above 0 up to 300",
                self.timeout_seconds
            ));
        }
        if self.resync_seconds < 10 {
            return Err(format!(
                "api.resyncSeconds is {}, at least 10",
                self.resync_seconds
            ));
        }
        if !(3..=300).contains(&self.stale_after_seconds) {
            return Err(format!(
                "api.staleAfterSeconds is {}, allowed 3 to 300",
                self.stale_after_seconds
            ));
        }
        Ok(())
    }
}
