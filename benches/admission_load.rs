//! Load test of the mutating webhook over real TLS keep-alive connections on
//! 127.0.0.1, measured in the same run against two servers that answer a
//! fixed response: a zero-logic route behind gpugate's own accept loop
//! (what the webhook's logic costs), and an independent minimal rustls +
//! hyper server that shares none of gpugate's server code (what gpugate's
//! whole stack costs: listener, limits, spans, body accounting, router).
//! Run: `cargo bench --bench admission_load` (about 2 minutes).
//!
//! Prints one table row per (pod size, connections) with req/s, p50 and p99
//! of each, and gpugate's ratio to both.
//!
//! `cargo bench --bench admission_load -- --wrk` loads the same three
//! servers with wrk instead (Debian's `wrk` package), a separate process,
//! so that the client's work is not scheduled on the servers' runtime.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use bytes::Bytes;
use gpugate::config::Config;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::{AppState, webhook_router};
use gpugate::server::tls;

#[path = "support/pod_review.rs"]
mod pod_review;
#[path = "support/proc_cpu.rs"]
mod proc_cpu;
#[allow(dead_code)]
#[path = "support/tls_load.rs"]
mod tls_load;
#[path = "support/wrk.rs"]
mod wrk;
use pod_review::review;
use tls_load::{Run, SelfSigned, load, ms, start, start_reference};

const RUN: Run = Run {
    warmup: Duration::from_millis(500),
    duration: Duration::from_secs(4),
};

fn main() {
    tls::install_default_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let certs = SelfSigned::generate("load");
        let ca = &certs.bundle.ca_cert_pem;

        let state = AppState::new(Config::default(), Metrics::new(Some(certs.cert.clone())));
        let (gpugate_addr, _stop1) = start(webhook_router(state), certs.cert.clone()).await;
        // The zero-logic server: same TLS and HTTP stack, fixed answer.
        let fixed: &'static str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#;
        let zero = Router::new().route(
            "/mutate",
            post(move |_body: Bytes| async move { ([("content-type", "application/json")], fixed) }),
        );
        let (zero_addr, _stop2) = start(zero, certs.cert.clone()).await;
        // The independent reference: no gpugate server code at all.
        let (reference_addr, _stop3) = start_reference(&certs.bundle, fixed).await;

        if std::env::args().any(|a| a == "--wrk") {
            with_wrk([gpugate_addr, zero_addr, reference_addr]).await;
            return;
        }
        println!(
            "| pod review | connections | gpugate req/s | p50 | p99 | zero-logic (gpugate's stack) req/s | ratio | reference (rustls + hyper) req/s | p99 | ratio | errors |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for size in [4_500usize, 8_000, 20_000] {
            let body = Bytes::from(review(size));
            for connections in [1usize, 4, 16] {
                let g = load(gpugate_addr, ca, "/mutate", body.clone(), None, connections, RUN).await;
                let z = load(zero_addr, ca, "/mutate", body.clone(), None, connections, RUN).await;
                let r =
                    load(reference_addr, ca, "/mutate", body.clone(), None, connections, RUN).await;
                println!(
                    "| {:.1} KB | {connections} | {:.0} | {} | {} | {:.0} | {:.0}% | {:.0} | {} | {:.0}% | {} |",
                    body.len() as f64 / 1000.0,
                    g.rate(),
                    ms(g.pct(0.50)),
                    ms(g.pct(0.99)),
                    z.rate(),
                    100.0 * g.rate() / z.rate().max(1.0),
                    r.rate(),
                    ms(r.pct(0.99)),
                    100.0 * g.rate() / r.rate().max(1.0),
                    g.errors + z.errors + r.errors,
                );
            }
        }
    });
}

/// The same table with wrk as the client: 2 threads (1 for one
/// connection), 4 s per server and row after one second of warm-up, and
/// the CPU time this process (the servers; wrk is another process) spent
/// per request, which the machine's noise moves less than the rates.
async fn with_wrk(servers: [std::net::SocketAddr; 3]) {
    assert!(
        wrk::available(),
        "--wrk needs wrk on PATH (Debian: apt-get install wrk)"
    );
    let dir = std::env::temp_dir().join(format!("gpugate-wrk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let me = Some(std::process::id());
    println!(
        "| pod review | connections | gpugate req/s | p50 | p99 | CPU per request | zero-logic (gpugate's stack) req/s | CPU per request | reference (rustls + hyper) req/s | p99 | CPU per request | gpugate / reference: rate, CPU | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for size in [4_500usize, 8_000, 20_000] {
        let body = review(size);
        let file = dir.join(format!("review-{size}.json"));
        std::fs::write(&file, &body).expect("write the review");
        let script = wrk::script(&file);
        for connections in [1usize, 4, 16] {
            let [g, z, r] = servers.map(|addr| {
                let url = format!("https://{addr}/mutate");
                wrk::run(&url, &script, connections, 2, Duration::from_secs(1), None);
                wrk::run(&url, &script, connections, 2, RUN.duration, me)
            });
            let us = |r: &wrk::Report| {
                r.cpu_per_request.map_or("–".to_string(), |d| {
                    format!("{:.1} µs", d.as_secs_f64() * 1e6)
                })
            };
            let cpu_ratio = match (g.cpu_per_request, r.cpu_per_request) {
                (Some(g), Some(r)) if !r.is_zero() => {
                    format!("{:.2}×", g.as_secs_f64() / r.as_secs_f64())
                }
                _ => "–".to_string(),
            };
            println!(
                "| {:.1} KB | {connections} | {:.0} | {} | {} | {} | {:.0} | {} | {:.0} | {} | {} | {:.0}%, {cpu_ratio} | {} |",
                body.len() as f64 / 1000.0,
                g.rate,
                ms(g.p50),
                ms(g.p99),
                us(&g),
                z.rate,
                us(&z),
                r.rate,
                ms(r.p99),
                us(&r),
                100.0 * g.rate / r.rate.max(1.0),
                g.errors + z.errors + r.errors,
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
