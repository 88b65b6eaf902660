//! What a client can make the server hold, and for how long: the config
//! file's `server` section (read at start) and its runtime form. Every
//! bound, its default and its metric are in docs/operations.md ("Limits
//! and attacks").

use std::time::Duration;

use crate::config::server::ServerConfig;

impl ServerConfig {
    /// The runtime limits of a TLS listener whose largest request body is
    /// `max_body` bytes.
    pub fn limits(&self, max_body: usize) -> Limits {
        let secs = Duration::from_secs_f64;
        Limits {
            max_connections: self.max_connections as usize,
            handshake: secs(self.handshake_timeout_seconds),
            header: secs(self.header_timeout_seconds),
            body: secs(self.body_timeout_seconds),
            idle: secs(self.idle_timeout_seconds),
            drain: secs(self.drain_seconds),
            max_body,
            connection_body: self.connection_body_kib as usize * 1024,
            body_budget: (self.body_budget_mib as usize * 1024 * 1024).max(max_body),
            http2_max_streams: self.http2_max_concurrent_streams,
            http2_keep_alive_interval: secs(self.http2_keep_alive_interval_seconds),
            http2_keep_alive_timeout: secs(self.http2_keep_alive_timeout_seconds),
        }
    }

    /// The admin port's limits: its own connection cap, and small bodies
    /// (its routes read none).
    pub fn admin_limits(&self) -> Limits {
        Limits {
            max_connections: self.admin_max_connections as usize,
            ..self.limits(ADMIN_MAX_BODY)
        }
        .with_body_budget(ADMIN_MAX_BODY)
    }

    pub fn shutdown_delay(&self) -> Duration {
        Duration::from_secs_f64(self.shutdown_delay_seconds)
    }

    pub fn drain(&self) -> Duration {
        Duration::from_secs_f64(self.drain_seconds)
    }
}

/// Raises the soft limit on open files to the hard limit (as Go programs
/// do at start; containers often start with a soft limit of 1,024), and
/// says whether `needed` descriptors fit under it. A connection cap above
/// the limit would turn an attack into failed accepts for everyone.
pub fn raise_open_file_limit(needed: u64) -> Result<u64, String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    let current = if limit.current != limit.maximum && setrlimit(Resource::Nofile, raised).is_ok() {
        limit.maximum
    } else {
        limit.current
    };
    match current {
        Some(n) if n < needed => Err(format!(
            "the open-file limit is {n}, below the {needed} descriptors the connection caps \
             (server.maxConnections, adminMaxConnections) and the API client may need: \
             lower the caps or raise the limit"
        )),
        Some(n) => Ok(n),
        None => Ok(u64::MAX),
    }
}

impl ServerConfig {
    /// File descriptors the listeners may hold at once, plus room for the
    /// API client, watches, files and logs.
    pub fn descriptors_needed(&self, tls_listeners: u64) -> u64 {
        tls_listeners * u64::from(self.max_connections)
            + u64::from(self.admin_max_connections)
            + 256
    }
}

/// kube-apiserver sends at most about 3 MiB objects; an UPDATE carries two.
/// controller-runtime accepts 7 MiB; larger bodies get HTTP 413 (a larger
/// declared Content-Length before any of it is read).
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// kube-scheduler sends whole Node objects to an extender that is not
/// `nodeCacheCapable` (10-20 KiB each): room for about 5,000 of them.
pub const MAX_EXTENDER_BODY_BYTES: usize = 96 * 1024 * 1024;

/// The admin port's routes read no body; a client that sends one anyway
/// may send this much.
pub const ADMIN_MAX_BODY_BYTES: usize = 16 * 1024;

/// Bodies on the admin port, whose routes are all GETs.
const ADMIN_MAX_BODY: usize = ADMIN_MAX_BODY_BYTES;

/// The bounds one listener enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub handshake: Duration,
    pub header: Duration,
    pub body: Duration,
    pub idle: Duration,
    /// How long a stop waits for requests in flight.
    pub drain: Duration,
    /// The largest request body (HTTP 413 above it).
    pub max_body: usize,
    /// Body bytes each connection holds without the shared budget.
    pub connection_body: usize,
    /// Body bytes all connections hold beyond their allowance.
    pub body_budget: usize,
    pub http2_max_streams: u32,
    pub http2_keep_alive_interval: Duration,
    pub http2_keep_alive_timeout: Duration,
}

impl Limits {
    fn with_body_budget(mut self, bytes: usize) -> Self {
        self.body_budget = bytes;
        self
    }

    /// The most request data the listener holds in memory at once:
    /// every connection's allowance, the shared budget, and what hyper and
    /// rustls buffer per connection ([`PER_CONNECTION_BUFFERS`]).
    pub fn worst_case_bytes(&self) -> usize {
        self.max_connections
            .saturating_mul(self.connection_body + PER_CONNECTION_BUFFERS)
            .saturating_add(self.body_budget)
    }
}

impl Default for Limits {
    /// The defaults of [`ServerConfig`] for the admission webhooks' bodies.
    fn default() -> Self {
        ServerConfig::default().limits(MAX_BODY_BYTES)
    }
}

/// What a connection costs beyond the body memory it holds, measured with
/// 1,000 connections (docs/benchmarks.md, "Slow clients"): about 33 KiB
/// for a TLS connection that sent its headers, about 61 KiB once a body
/// has gone through it (hyper's 16 KiB read buffer and rustls' record and
/// plaintext buffers stay allocated), with room for data in flight.
pub const PER_CONNECTION_BUFFERS: usize = 80 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bounded() {
        let c = ServerConfig::default();
        c.validate().unwrap();
        let l = c.limits(7 * 1024 * 1024);
        assert_eq!(l.body_budget, 32 * 1024 * 1024);
        // The extender's 96 MiB bodies still fit in the budget.
        assert_eq!(c.limits(96 * 1024 * 1024).body_budget, 96 * 1024 * 1024);
        assert_eq!(c.admin_limits().max_connections, 64);
        // docs/operations.md: about 144 MiB at the default caps.
        assert_eq!(l.worst_case_bytes() / (1024 * 1024), 144);
    }

    #[test]
    fn the_open_file_limit_is_raised_and_checked() {
        let limit = raise_open_file_limit(16).unwrap();
        assert!(limit >= 16);
        // Raised to the hard limit: asking again gives the same.
        assert_eq!(raise_open_file_limit(16).unwrap(), limit);
        if limit != u64::MAX {
            let e = raise_open_file_limit(limit + 1).unwrap_err();
            assert!(e.contains("server.maxConnections"), "{e}");
        }
        assert_eq!(
            ServerConfig::default().descriptors_needed(2),
            2 * 1024 + 64 + 256
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_key() {
        let mut c = ServerConfig {
            body_timeout_seconds: 0.0,
            ..Default::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .contains("server.bodyTimeoutSeconds")
        );
        c.body_timeout_seconds = f64::NAN;
        assert!(c.validate().is_err());
        c.body_timeout_seconds = 10.0;
        c.max_connections = 0;
        assert!(c.validate().unwrap_err().contains("server.maxConnections"));
    }
}
