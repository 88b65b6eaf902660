//! The config file's `server` section: what a client can make the server
//! hold, and for how long (connections, deadlines, body budget, shutdown).
//! Read at start; its runtime form is `server::limits::Limits`.

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
}
