//! Kueue's admission check (docs/install.md, "Kueue"): off unless
//! `controllerName` names the AdmissionChecks gpugate answers.

use serde::Deserialize;

/// The longest hold accepted: an hour.
pub const MAX_HOLD_SECONDS: u64 = 3600;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KueueConfig {
    /// The `spec.controllerName` of the AdmissionChecks gpugate answers
    /// (e.g. `gpugate.io/placement`). Empty, the default: gpugate watches
    /// no Kueue object.
    pub controller_name: String,
    /// How long the places of an admitted workload stay held for pods that
    /// have not come (from the check's Ready); then other pods may take
    /// them.
    pub hold_seconds: u64,
}

impl Default for KueueConfig {
    fn default() -> Self {
        Self {
            controller_name: String::new(),
            hold_seconds: 300,
        }
    }
}

impl KueueConfig {
    /// Whether the admission check runs.
    pub fn enabled(&self) -> bool {
        !self.controller_name.trim().is_empty()
    }

    /// `holdSeconds` in milliseconds.
    pub fn hold_ms(&self) -> i64 {
        i64::try_from(self.hold_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_HOLD_SECONDS).contains(&self.hold_seconds) {
            return Err(format!(
                "kueue.holdSeconds is {}, allowed 1 to {MAX_HOLD_SECONDS}",
                self.hold_seconds
            ));
        }
        let name = self.controller_name.trim();
        if name != self.controller_name || name.len() > 253 || name.contains(char::is_whitespace) {
            return Err(format!(
                "kueue.controllerName is {:?}: give the AdmissionChecks' spec.controllerName \
                 (a domain-prefixed path such as gpugate.io/placement, no spaces), or \"\" to \
                 leave Kueue alone",
                self.controller_name
            ));
        }
        Ok(())
    }
}
