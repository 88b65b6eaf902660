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
    term: Signal,
    interrupt: Signal,
}

impl Signals {
    /// Registers SIGHUP, SIGTERM and SIGINT, and forwards SIGHUP to the
    /// reload watchers until the process ends.
    pub fn register() -> std::io::Result<Self> {
        let mut hangup = signal(SignalKind::hangup())?;
        let signals = Signals {
            reload_config: Arc::default(),
            reload_cert: Arc::default(),
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        };
        let (config, cert) = (signals.reload_config.clone(), signals.reload_cert.clone());
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                tracing::info!("SIGHUP: re-reading the config and certificate files");
                // A permit each, so that a watcher busy right now still
                // re-reads when it is done.
                config.notify_one();
                cert.notify_one();
            }
        });
        Ok(signals)
    }

    /// Waits for SIGTERM or SIGINT; says which.
    pub async fn terminated(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}
