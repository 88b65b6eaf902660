//! The signals `gpugate serve` answers: SIGHUP re-reads the config and
//! certificate files (it never kills the process); SIGTERM and SIGINT
//! start the shutdown (docs/operations.md, "Shutdown"). The handlers are
//! registered first thing, so that a SIGHUP during start-up is not fatal
//! either.

use std::sync::Arc;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Notify;

/// The registered signal streams, and whom SIGHUP wakes.
#[derive(Debug)]
pub struct Signals {
    /// Notified on SIGHUP: the config file watcher.
    pub reload_config: Arc<Notify>,
    /// Notified on SIGHUP: the certificate file watcher.
    pub reload_cert: Arc<Notify>,
    /// Taken by [`Signals::forward_hangups`].
    hangup: Option<Signal>,
    term: Signal,
    interrupt: Signal,
}

impl Signals {
    /// Registers SIGHUP, SIGTERM and SIGINT; SIGHUP is forwarded by the
    /// task [`Signals::hangup_forwarder`] makes.
    pub fn register() -> std::io::Result<Self> {
        let hangup = signal(SignalKind::hangup())?;
        let signals = Signals {
            reload_config: Arc::default(),
            reload_cert: Arc::default(),
            hangup: Some(hangup),
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        };
        Ok(signals)
    }

    /// Makes the task that forwards SIGHUP to the reload watchers until the
    /// process ends (run under the supervisor: a restarted one registers
    /// SIGHUP again).
    pub fn hangup_forwarder(
        &mut self,
    ) -> impl FnMut() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + 'static
    {
        let mut first = self.hangup.take();
        let (config, cert) = (self.reload_config.clone(), self.reload_cert.clone());
        move || {
            let first = first.take();
            let (config, cert) = (config.clone(), cert.clone());
            Box::pin(forward_hangups(first, config, cert))
        }
    }

    /// Waits for SIGTERM or SIGINT; says which.
    pub async fn terminated(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

async fn forward_hangups(first: Option<Signal>, config: Arc<Notify>, cert: Arc<Notify>) {
    let mut hangup = match first {
        Some(h) => h,
        None => match signal(SignalKind::hangup()) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGHUP");
                return;
            }
        },
    };
    while hangup.recv().await.is_some() {
        tracing::info!("SIGHUP: re-reading the config and certificate files");
        // A permit each, so that a watcher busy right now still
        // re-reads when it is done.
        config.notify_one();
        cert.notify_one();
    }
}
