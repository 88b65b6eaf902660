//! Load test of the mutating webhook over real TLS keep-alive connections on
//! 127.0.0.1, against a zero-logic server on the same stack (rustls, hyper,
//! the same accept loop) that answers a fixed response, measured in the same
//! run. Run: `cargo bench --bench admission_load` (about 1 minute).
//!
//! Prints one table row per (pod size, connections) with req/s, p50 and p99,
//! and the ratio to the zero-logic server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use bytes::Bytes;
use gpugate::config::Config;
use gpugate::server::certs::{self, CertSpec};
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::{AppState, webhook_router};
use gpugate::server::serve_tls::{Timeouts, serve_tls};
use gpugate::server::tls::{self, ReloadingCert};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject as _;
use tokio::net::{TcpListener, TcpStream};

#[path = "support/pod_review.rs"]
mod pod_review;
use pod_review::review;

const DURATION: Duration = Duration::from_secs(4);
const WARMUP: Duration = Duration::from_millis(500);

struct Stats {
    requests: usize,
    errors: usize,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

async fn load(addr: std::net::SocketAddr, ca: &str, body: Bytes, connections: usize) -> Stats {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.as_bytes()).expect("CA PEM"))
        .expect("CA");
    let mut config = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let start = Instant::now();
    let measure_from = start + WARMUP;
    let end = measure_from + DURATION;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let connector = connector.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let tcp = TcpStream::connect(addr).await.expect("connect");
            tcp.set_nodelay(true).expect("nodelay");
            let tls = connector
                .connect(ServerName::try_from("localhost").expect("name"), tcp)
                .await
                .expect("handshake");
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .expect("http handshake");
            tokio::spawn(conn);
            let (mut lat, mut errors) = (Vec::with_capacity(100_000), 0);
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let req = hyper::Request::post("/mutate")
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .expect("request");
                let t = Instant::now();
                let ok = match sender.send_request(req).await {
                    Ok(resp) => {
                        let status = resp.status();
                        resp.into_body().collect().await.is_ok() && status == 200
                    }
                    Err(_) => false,
                };
                if t >= measure_from {
                    if ok {
                        lat.push(t.elapsed());
                    } else {
                        errors += 1;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("client task");
        latencies.extend(l);
        errors += e;
    }
    latencies.sort();
    Stats {
        requests: latencies.len(),
        errors,
        latencies,
        elapsed: DURATION,
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn start(
    router: Router,
    cert: Arc<ReloadingCert>,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let config = Arc::new(tls::server_config(cert).expect("TLS config"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_tls(
        listener,
        config,
        router,
        Timeouts::default(),
        async {
            let _ = rx.await;
        },
    ));
    (addr, tx)
}

fn main() {
    tls::install_default_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = std::env::temp_dir().join(format!("gpugate-load-{}", std::process::id()));
        let bundle = certs::generate(&CertSpec::local_and(&[], 1), time::OffsetDateTime::now_utc()).expect("certs");
        certs::write_dir(&dir, &bundle).expect("write certs");
        let cert = ReloadingCert::from_files(&dir.join("tls.crt"), &dir.join("tls.key")).expect("load certs");

        let state = AppState::new(Config::default(), Metrics::new(Some(cert.clone())));
        let (gpugate_addr, _stop1) = start(webhook_router(state), cert.clone()).await;
        // The zero-logic server: same TLS and HTTP stack, fixed answer.
        let fixed: &'static str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#;
        let zero = Router::new().route(
            "/mutate",
            post(move |_body: Bytes| async move { ([("content-type", "application/json")], fixed) }),
        );
        let (zero_addr, _stop2) = start(zero, cert.clone()).await;

        println!("| pod review | connections | gpugate req/s | p50 | p99 | zero-logic req/s | ratio | errors |");
        println!("|---|---|---|---|---|---|---|---|");
        for size in [4_500usize, 8_000, 20_000] {
            let body = Bytes::from(review(size));
            for connections in [1usize, 4, 16] {
                let g = load(gpugate_addr, &bundle.ca_cert_pem, body.clone(), connections).await;
                let z = load(zero_addr, &bundle.ca_cert_pem, body.clone(), connections).await;
                let rate = |s: &Stats| s.requests as f64 / s.elapsed.as_secs_f64();
                println!(
                    "| {:.1} KB | {connections} | {:.0} | {:.2} ms | {:.2} ms | {:.0} | {:.0}% | {} |",
                    body.len() as f64 / 1000.0,
                    rate(&g),
                    pct(&g.latencies, 0.50).as_secs_f64() * 1e3,
                    pct(&g.latencies, 0.99).as_secs_f64() * 1e3,
                    rate(&z),
                    100.0 * rate(&g) / rate(&z).max(1.0),
                    g.errors + z.errors,
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}
