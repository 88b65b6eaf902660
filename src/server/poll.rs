//! Doing something every so often, or at once when asked (SIGHUP), until
//! told to stop: the certificate file reload uses this loop.

use std::future::Future;
use std::time::Duration;

use tokio::sync::Notify;

/// Calls `tick` right away, then every `interval` and whenever `now` is
/// notified, until `stop` resolves. A tick that runs late does not cause a
/// burst of catch-up ticks.
pub async fn every(
    interval: Duration,
    now: &Notify,
    stop: impl Future<Output = ()>,
    mut tick: impl FnMut(),
) {
    tokio::pin!(stop);
    let mut timer = tokio::time::interval(interval);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = timer.tick() => tick(),
            () = now.notified() => tick(),
        }
    }
}
