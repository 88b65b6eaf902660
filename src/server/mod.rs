//! The network edge: certificates, TLS with hot reload, the bounded HTTP
//! listeners for admission, the extender, health and metrics, signals.

pub mod body;
pub mod cert_secret;
pub mod certs;
pub mod config_reload;
pub mod conn_metrics;
pub mod hami_gauges;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod poll;
pub mod routes;
pub mod signals;
pub mod tls;
