//! Bounded polling: every wait in the suite has a deadline and says what it
//! last saw when it gives up.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::anyhow;

/// Calls `probe` every 200 ms until it returns `Ok`, or fails after
/// `timeout` with the probe's last complaint.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        // Each probe is bounded too: a hung request must not outlive the
        // deadline (kube's own read timeout is minutes).
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        let outcome = match tokio::time::timeout(left, probe()).await {
            Ok(outcome) => outcome,
            Err(_) => Err("the probe itself did not answer in time".to_string()),
        };
        match outcome {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() >= deadline => {
                return Err(anyhow!(
                    "{what}: not after {} s (last seen: {last})",
                    timeout.as_secs()
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
