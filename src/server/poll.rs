//! Doing something every so often until told to stop: the file reloads of
//! certificates and config share this loop.

use std::future::Future;
use std::time::Duration;

/// Calls `tick` right away and then every `interval` until `stop` resolves.
/// A tick that runs late does not cause a burst of catch-up ticks.
pub async fn every(interval: Duration, stop: impl Future<Output = ()>, mut tick: impl FnMut()) {
    tokio::pin!(stop);
    let mut timer = tokio::time::interval(interval);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = timer.tick() => tick(),
        }
    }
}
