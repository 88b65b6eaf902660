//! The config file's `api` section: rate limit and timeout of gpugate's own
//! API calls, and how often watches re-list. Read at start.

use serde::Deserialize;

/// Rate limit and timeout of gpugate's own API calls (config `api`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApiLimits {
    /// Sustained requests per second (kube-scheduler's default is 50;
    /// HAMi's 5 throttled its users, HAMi #745).
    pub qps: f64,
    /// Requests allowed at once above the sustained rate.
    pub burst: u32,
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
            // A bind costs two writes (HAMi's node lock, the Binding with
            // the allocation annotations) and an Event: about 150 requests
            // a second at kube-scheduler's own pace of 50 pods a second.
            qps: 200.0,
            burst: 400,
            timeout_seconds: 10.0,
            resync_seconds: 300,
            stale_after_seconds: 10,
        }
    }
}

impl ApiLimits {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.qps.is_finite() && self.qps >= 0.1) {
            return Err(format!("api.qps is {}, at least 0.1", self.qps));
        }
        if self.burst == 0 {
            return Err("api.burst must be at least 1".to_string());
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
