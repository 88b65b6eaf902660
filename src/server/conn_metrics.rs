//! The listeners' metrics: connections open, accepted, refused and closed
//! by rule, request bodies held and requests in flight, per listener.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Why a connection was refused or closed by gpugate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// At `maxConnections` with every connection busy: accepted and
    /// closed at once.
    MaxConnections,
    /// At `maxConnections`: closed to make room, as the one idle longest.
    Evicted,
    HandshakeTimeout,
    HandshakeFailed,
    /// No complete request headers within `headerTimeoutSeconds` of the
    /// TLS handshake (of the accept, on the plain admin port).
    HeaderTimeout,
    /// An answer not taken by the client within `bodyTimeoutSeconds`.
    WriteTimeout,
    /// No request for `idleTimeoutSeconds` after the last answer.
    IdleTimeout,
    /// Still open when the drain after a stop ended.
    DrainTimeout,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::MaxConnections => "max_connections",
            Rule::Evicted => "evicted_idle",
            Rule::HandshakeTimeout => "handshake_timeout",
            Rule::HandshakeFailed => "handshake_failed",
            Rule::HeaderTimeout => "header_timeout",
            Rule::WriteTimeout => "write_timeout",
            Rule::IdleTimeout => "idle_timeout",
            Rule::DrainTimeout => "drain_timeout",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub listener: &'static str,
    pub rule: &'static str,
}

/// Connections and request bodies, per listener and rule.
#[derive(Clone, Debug, Default)]
pub struct ConnMetrics {
    pub open: Family<ListenerLabels, Gauge>,
    pub accepted: Family<ListenerLabels, Counter>,
    pub refused: Family<RuleLabels, Counter>,
    pub closed: Family<RuleLabels, Counter>,
    /// Requests answered 408, 413 or 503 before their body was read.
    pub requests_refused: Family<RuleLabels, Counter>,
    /// Request body bytes held now (allowances and budget).
    pub body_bytes: Family<ListenerLabels, Gauge>,
    /// Requests whose headers arrived and that are not answered yet
    /// (HTTP/2 streams included).
    pub in_flight: Family<ListenerLabels, Gauge>,
}

impl ConnMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_connections_open",
            "Open connections, by listener",
            self.open.clone(),
        );
        registry.register(
            "gpugate_connections_accepted",
            "Connections accepted, by listener",
            self.accepted.clone(),
        );
        registry.register(
            "gpugate_connections_refused",
            "Connections closed on accept, by listener and rule (max_connections)",
            self.refused.clone(),
        );
        registry.register(
            "gpugate_connections_closed",
            "Connections gpugate closed, by listener and rule (evicted_idle, \
             handshake_timeout, handshake_failed, header_timeout, write_timeout, \
             idle_timeout, drain_timeout)",
            self.closed.clone(),
        );
        registry.register(
            "gpugate_requests_refused",
            "Requests answered before their body was read, by listener and rule \
             (body_too_large, body_timeout, body_budget)",
            self.requests_refused.clone(),
        );
        registry.register(
            "gpugate_request_body_bytes",
            "Request body bytes held in memory now, by listener",
            self.body_bytes.clone(),
        );
        registry.register(
            "gpugate_requests_in_flight",
            "Requests received and not answered yet (HTTP/2 streams included), by listener",
            self.in_flight.clone(),
        );
    }

    pub fn closed(&self, listener: &'static str, rule: Rule) {
        let labels = RuleLabels {
            listener,
            rule: rule.as_str(),
        };
        match rule {
            Rule::MaxConnections => self.refused.get_or_create(&labels).inc(),
            _ => self.closed.get_or_create(&labels).inc(),
        };
    }
}
