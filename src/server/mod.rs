//! The network edge: certificates, TLS with hot reload and (next) the HTTP
//! servers for admission, the extender, health and metrics.

pub mod cert_secret;
pub mod certs;
pub mod config_reload;
pub mod metrics;
pub mod poll;
pub mod routes;
pub mod run;
pub mod serve_tls;
pub mod tls;
