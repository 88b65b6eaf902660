//! What a client can make the server hold, and for how long: the config
//! file's `server` section (read at start) and its runtime form. Every
//! bound, its default and its metric are in docs/operations.md ("Limits
//! and attacks").

use std::time::Duration;

use serde::Deserialize;

/// The `server` section of the config file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Open connections per TLS listener (webhooks; extender). At the
    /// cap the connection idle the longest is closed to make room; when
    /// every one is busy, a new one is accepted and closed at once.
    pub max_connections: u32,
    /// Open connections on the admin port (probes, metrics).
    pub admin_max_connections: u32,
    /// TCP accept to finished TLS handshake.
    pub handshake_timeout_seconds: f64,
    /// End of the TLS handshake to the first request's complete headers
    /// (a connection that never sends a request is closed then).
    pub header_timeout_seconds: f64,
    /// A request's complete headers to its complete body; also how long
    /// an answer may go without the client taking any of it.
    pub body_timeout_seconds: f64,
    /// A kept-alive connection (HTTP/1.1, or HTTP/2 without open streams)
    /// with no request for this long is closed. Above the 90 s idle
    /// timeout of Go's HTTP clients (kube-apiserver, kube-scheduler), so
    /// that the client, not the server, closes an idle connection.
    pub idle_timeout_seconds: f64,
    /// Request body memory each connection may hold without drawing on the
    /// listener's shared budget: small reviews do not need it.
    #[serde(rename = "connectionBodyKiB")]
    pub connection_body_kib: u32,
    /// Request body memory all connections of a listener may hold at once
    /// beyond their own allowance; a body that finds no room is read and
    /// dropped, then refused (503). At least the listener's largest body.
    #[serde(rename = "bodyBudgetMiB")]
    pub body_budget_mib: u32,
    /// Concurrent HTTP/2 streams (requests) per connection.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 keep-alive pings on a connection with no frames for this long.
    pub http2_keep_alive_interval_seconds: f64,
    /// A ping unanswered for this long closes the connection.
    pub http2_keep_alive_timeout_seconds: f64,
    /// After SIGTERM: keep serving (readiness false) this long, while
    /// Kubernetes removes the pod from the Service's endpoints.
    pub shutdown_delay_seconds: f64,
    /// Then: how long requests in flight may take to finish.
    pub drain_seconds: f64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            admin_max_connections: 64,
            handshake_timeout_seconds: 5.0,
            header_timeout_seconds: 10.0,
            body_timeout_seconds: 10.0,
            idle_timeout_seconds: 120.0,
            connection_body_kib: 32,
            body_budget_mib: 32,
            http2_max_concurrent_streams: 32,
            http2_keep_alive_interval_seconds: 30.0,
            http2_keep_alive_timeout_seconds: 10.0,
            shutdown_delay_seconds: 5.0,
            drain_seconds: 20.0,
        }
    }
}

impl ServerConfig {
    pub fn validate(&self) -> Result<(), String> {
        let seconds = [
            (
                "handshakeTimeoutSeconds",
                self.handshake_timeout_seconds,
                0.1,
                300.0,
            ),
            (
                "headerTimeoutSeconds",
                self.header_timeout_seconds,
                0.1,
                300.0,
            ),
            ("bodyTimeoutSeconds", self.body_timeout_seconds, 0.1, 300.0),
            ("idleTimeoutSeconds", self.idle_timeout_seconds, 0.1, 3600.0),
            (
                "http2KeepAliveIntervalSeconds",
                self.http2_keep_alive_interval_seconds,
                1.0,
                3600.0,
            ),
            (
                "http2KeepAliveTimeoutSeconds",
                self.http2_keep_alive_timeout_seconds,
                0.1,
                300.0,
            ),
            (
                "shutdownDelaySeconds",
                self.shutdown_delay_seconds,
                0.0,
                300.0,
            ),
            ("drainSeconds", self.drain_seconds, 0.0, 600.0),
        ];
        for (key, value, min, max) in seconds {
            if !(value.is_finite() && (min..=max).contains(&value)) {
                return Err(format!("server.{key} is {value}, allowed {min} to {max}"));
            }
        }
        let counts = [
            ("maxConnections", self.max_connections, 1, 1_000_000),
            (
                "adminMaxConnections",
                self.admin_max_connections,
                1,
                100_000,
            ),
            (
                "connectionBodyKiB",
                self.connection_body_kib,
                0,
                1024 * 1024,
            ),
            ("bodyBudgetMiB", self.body_budget_mib, 1, 64 * 1024),
            (
                "http2MaxConcurrentStreams",
                self.http2_max_concurrent_streams,
                1,
                1000,
            ),
        ];
        for (key, value, min, max) in counts {
            if !(min..=max).contains(&value) {
                return Err(format!("server.{key} is {value}, allowed {min} to {max}"));
            }
        }
        Ok(())
    }

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

/// Bodies on the admin port, whose routes are all GETs.
const ADMIN_MAX_BODY: usize = crate::server::routes::ADMIN_MAX_BODY_BYTES;

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
        ServerConfig::default().limits(crate::server::routes::MAX_BODY_BYTES)
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
