//! `gpugate serve` under a slow-client attack, as a separate process with
//! its default limits: RSS over time, and the latency of `/healthz` and of
//! valid reviews, before the attack (the reference, same run) and during.
//!
//! The attack, renewed for its whole length (a client that is cut off
//! comes back at once):
//! - HTTP/1.1 over TLS: `GPUGATE_ATTACK_H1` connections (500) that declare
//!   a 7 MiB body, send part of it (256 KiB; 6.5 MiB for 16 of them, the
//!   issue's case) and stall;
//! - HTTP/2 over TLS: `GPUGATE_ATTACK_H2_STREAMS` streams (200, on
//!   connections of 20) that do the same with 256 KiB each.
//!
//! Run: `cargo bench --bench slow_clients` (about 45 s; the attack lasts
//! `GPUGATE_ATTACK_SECONDS`, 30). Results go to docs/benchmarks.md.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

#[allow(dead_code)]
mod support {
    pub mod pod_review;
    pub mod server_process;
    pub mod tls_load;
}
use support::server_process::{self, Server, admin_get, rss};
use support::tls_load::{ms, pct};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const DECLARED: usize = 7 * 1024 * 1024 - 1;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn start_server() -> Server {
    let mut args = vec![
        "--cluster".to_string(),
        format!("{ROOT}/examples/demo/cluster.yaml"),
    ];
    if let Ok(config) = std::env::var("GPUGATE_BENCH_CONFIG") {
        args.extend(["--config".to_string(), config]);
    }
    let server = server_process::start(
        "slow-clients",
        Path::new(env!("CARGO_BIN_EXE_gpugate")),
        &args,
        &[],
    );
    assert!(
        server_process::wait_ready(&server, Duration::from_secs(30)),
        "gpugate not ready"
    );
    server
}

fn connector(ca: &[u8], alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(gpugate::server::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn tls(
    addr: SocketAddr,
    connector: &tokio_rustls::TlsConnector,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// One HTTP/1.1 attacker: declare 7 MiB, send `send` bytes, stall until
/// cut off, again and again until `stop`.
async fn h1_attacker(
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    send: usize,
    stop: Arc<AtomicBool>,
    cut_off: Arc<AtomicU64>,
) {
    let chunk = vec![b' '; 16 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = tls(addr, &connector).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let head = format!(
            "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: {DECLARED}\r\n\r\n"
        );
        if s.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        let mut sent = 0;
        while sent < send {
            // The server stops reading when the budget is full: a write
            // that blocks is the attacker stalled anyway.
            match tokio::time::timeout(Duration::from_secs(30), s.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break,
            }
        }
        let _ = s.flush().await;
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut sink)).await;
        cut_off.fetch_add(1, Ordering::Relaxed);
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// One HTTP/2 connection with `streams` attacking streams, renewed.
async fn h2_attacker(
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    streams: usize,
    send: usize,
    stop: Arc<AtomicBool>,
    cut_off: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(s) = tls(addr, &connector).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok((sender, conn)) = hyper::client::conn::http2::handshake::<_, _, Body>(
            TokioExecutor::new(),
            TokioIo::new(s),
        )
        .await
        else {
            continue;
        };
        let conn = tokio::spawn(conn);
        let mut tasks = Vec::new();
        for _ in 0..streams {
            let mut sender = sender.clone();
            let (stop, cut_off) = (stop.clone(), cut_off.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (tx, mut rx) =
                        tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
                    let body =
                        StreamBody::new(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
                    let req = http::Request::post("https://localhost/validate")
                        .header("content-length", DECLARED.to_string())
                        .body(body.boxed())
                        .unwrap();
                    let feed = tokio::spawn(async move {
                        let mut sent = 0;
                        while sent < send {
                            let frame = Frame::data(Bytes::from(vec![b' '; 16 * 1024]));
                            if tx.send(Ok(frame)).await.is_err() {
                                return;
                            }
                            sent += 16 * 1024;
                        }
                        // Hold the body open: the stream stalls.
                        tx.closed().await;
                    });
                    if sender.ready().await.is_err() {
                        return;
                    }
                    let answered = sender.send_request(req).await;
                    feed.abort();
                    cut_off.fetch_add(1, Ordering::Relaxed);
                    if answered.is_err() {
                        return;
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        conn.abort();
    }
}

/// The environment variable that makes this program the attacker:
/// `ADDR|CA_PATH`.
const ATTACKER_ROLE: &str = "GPUGATE_SLOW_CLIENTS_TARGET";

/// The attacker process: attacks `target` until SIGTERM, then prints how
/// many attacks were cut off.
async fn attack(target: &str, h1: usize, h2_streams: usize) {
    let (addr, ca) = target.split_once('|').expect("ADDR|CA");
    let addr: SocketAddr = addr.parse().expect("address");
    let ca = std::fs::read(ca).expect("CA file");
    let stop = Arc::new(AtomicBool::new(false));
    let cut_off = Arc::new(AtomicU64::new(0));
    let c1 = connector(&ca, b"http/1.1");
    for i in 0..h1 {
        let send = if i < 16 { 6_656 * 1024 } else { 256 * 1024 };
        tokio::spawn(h1_attacker(
            addr,
            c1.clone(),
            send,
            stop.clone(),
            cut_off.clone(),
        ));
    }
    let c2 = connector(&ca, b"h2");
    for _ in 0..h2_streams.div_ceil(20) {
        tokio::spawn(h2_attacker(
            addr,
            c2.clone(),
            20,
            256 * 1024,
            stop.clone(),
            cut_off.clone(),
        ));
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    term.recv().await;
    println!("{}", cut_off.load(Ordering::Relaxed));
    std::process::exit(0);
}

/// Latencies of one probe, sorted, and its failures.
#[derive(Default)]
struct Probe {
    latencies: Vec<Duration>,
    errors: usize,
}

impl Probe {
    fn row(&mut self, what: &str) -> String {
        self.latencies.sort();
        format!(
            "| {what} | {} | {} | {} | {} | {} |",
            self.latencies.len(),
            self.errors,
            ms(pct(&self.latencies, 0.5)),
            ms(pct(&self.latencies, 0.99)),
            ms(self.latencies.last().copied().unwrap_or_default()),
        )
    }
}

/// Probes for `length`: `/healthz` on a new connection every 50 ms, and a
/// valid review every 20 ms on a kept-alive HTTP/1.1 connection (as
/// kube-apiserver keeps one), and every 200 ms on a new one (handshake
/// included).
async fn probe(
    server: &Server,
    ca: &[u8],
    review: Bytes,
    length: Duration,
) -> (Probe, Probe, Probe, Probe) {
    let end = Instant::now() + length;
    let admin = server.admin;
    let health = tokio::spawn(async move {
        let mut p = Probe::default();
        while Instant::now() < end {
            let t = Instant::now();
            let ok = tokio::task::spawn_blocking(move || admin_get(admin, "/healthz"))
                .await
                .ok()
                .flatten()
                .is_some_and(|(s, _)| s == 200);
            if ok {
                p.latencies.push(t.elapsed());
            } else {
                p.errors += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        p
    });
    let c = connector(ca, b"http/1.1");
    let addr = server.listen;
    let keep = {
        let (c, review) = (c.clone(), review.clone());
        tokio::spawn(async move {
            let mut p = Probe::default();
            let mut sender = None;
            while Instant::now() < end {
                if sender.is_none() {
                    sender = match tls(addr, &c).await {
                        Ok(s) => {
                            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(s))
                                .await
                                .ok()
                                .map(|(sender, conn)| {
                                    tokio::spawn(conn);
                                    sender
                                })
                        }
                        Err(_) => None,
                    };
                }
                let Some(s) = sender.as_mut() else {
                    p.errors += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let t = Instant::now();
                if review_ok(s, review.clone()).await {
                    p.latencies.push(t.elapsed());
                } else {
                    p.errors += 1;
                    sender = None;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            p
        })
    };
    let fresh_review = review.clone();
    let fresh = tokio::spawn(async move {
        let review = fresh_review;
        let mut p = Probe::default();
        while Instant::now() < end {
            let t = Instant::now();
            let ok = match tls(addr, &c).await {
                Ok(s) => {
                    match hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(s))
                        .await
                    {
                        Ok((mut sender, conn)) => {
                            tokio::spawn(conn);
                            review_ok(&mut sender, review.clone()).await
                        }
                        Err(_) => false,
                    }
                }
                Err(_) => false,
            };
            if ok {
                p.latencies.push(t.elapsed());
            } else {
                p.errors += 1;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        p
    });
    // As kube-apiserver sends them: 8 reviews at once over one kept
    // HTTP/2 connection, every 100 ms.
    let c2 = connector(ca, b"h2");
    let concurrent = tokio::spawn(async move {
        let mut p = Probe::default();
        let mut sender: Option<hyper::client::conn::http2::SendRequest<Full<Bytes>>> = None;
        while Instant::now() < end {
            if sender.as_ref().is_none_or(|s| s.is_closed()) {
                sender = match tls(addr, &c2).await {
                    Ok(s) => {
                        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
                            .await
                            .ok()
                            .map(|(sender, conn)| {
                                tokio::spawn(conn);
                                sender
                            })
                    }
                    Err(_) => None,
                };
            }
            let Some(s) = sender.clone() else {
                p.errors += 8;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let batch: Vec<_> = (0..8)
                .map(|_| {
                    let mut s = s.clone();
                    let body = review.clone();
                    tokio::spawn(async move {
                        let t = Instant::now();
                        let req = http::Request::post("https://localhost/validate")
                            .header("content-type", "application/json")
                            .body(Full::new(body))
                            .unwrap();
                        let ok = match s.send_request(req).await {
                            Ok(res) => {
                                let status = res.status();
                                let b = res.into_body().collect().await.map(|b| b.to_bytes());
                                status == 200
                                    && b.is_ok_and(|b| {
                                        b.windows(14).any(|w| w == b"\"allowed\":true")
                                    })
                            }
                            Err(_) => false,
                        };
                        (ok, t.elapsed())
                    })
                })
                .collect();
            for task in batch {
                match task.await {
                    Ok((true, took)) => p.latencies.push(took),
                    _ => p.errors += 1,
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        p
    });
    (
        health.await.unwrap(),
        keep.await.unwrap(),
        fresh.await.unwrap(),
        concurrent.await.unwrap(),
    )
}

async fn review_ok(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    body: Bytes,
) -> bool {
    let req = http::Request::post("/validate")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap();
    match sender.send_request(req).await {
        Ok(res) => {
            let ok = res.status() == 200;
            let answer = res.into_body().collect().await.map(|b| b.to_bytes());
            ok && answer.is_ok_and(|b| b.windows(14).any(|w| w == b"\"allowed\":true"))
        }
        Err(_) => false,
    }
}

/// The value of one series in the server's /metrics (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    gpugate::server::tls::install_default_provider();
    let seconds = env_or("GPUGATE_ATTACK_SECONDS", 30);
    let h1 = env_or("GPUGATE_ATTACK_H1", 500);
    let h2_streams = env_or("GPUGATE_ATTACK_H2_STREAMS", 200);
    if let Ok(target) = std::env::var(ATTACKER_ROLE) {
        return attack(&target, h1, h2_streams).await;
    }
    let server = start_server();
    let pid = server.child.id();
    let ca = std::fs::read(server.dir.join("certs/ca.crt")).unwrap();
    let review = Bytes::from(support::pod_review::review(4 * 1024));
    let (idle_rss, _) = rss(pid);

    // The reference: the same probes with no attack.
    let (mut h_ref, mut k_ref, mut f_ref, mut c_ref) =
        probe(&server, &ca, review.clone(), Duration::from_secs(8)).await;
    let (ref_rss, _) = rss(pid);

    let stop = Arc::new(AtomicBool::new(false));
    // The attackers run in a process of their own at the lowest CPU
    // priority: an attacker on other machines does not take the server's
    // cores, only what serving its traffic costs. GPUGATE_ATTACK_NICE=0
    // shares the cores evenly instead.
    let nice = env_or("GPUGATE_ATTACK_NICE", 19).to_string();
    let mut attacker = Command::new("nice")
        .args(["-n", &nice])
        .arg(std::env::current_exe().expect("the benchmark's path"))
        .env(
            ATTACKER_ROLE,
            format!(
                "{}|{}",
                server.listen,
                server.dir.join("certs/ca.crt").display()
            ),
        )
        .env("GPUGATE_ATTACK_H1", h1.to_string())
        .env("GPUGATE_ATTACK_H2_STREAMS", h2_streams.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the attacker process");
    // RSS, sampled every 100 ms for the whole attack.
    let sampling = {
        let stop = stop.clone();
        let admin = server.admin;
        tokio::spawn(async move {
            let mut peak = 0;
            let mut peak_body = 0.0f64;
            let mut peak_open = 0.0f64;
            let mut peak_requests = 0.0f64;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(rss(pid).0);
                if let Ok(Some((_, text))) =
                    tokio::task::spawn_blocking(move || admin_get(admin, "/metrics")).await
                {
                    peak_body = peak_body.max(metric(
                        &text,
                        "gpugate_request_body_bytes{listener=\"webhook\"}",
                    ));
                    peak_open = peak_open.max(metric(
                        &text,
                        "gpugate_connections_open{listener=\"webhook\"}",
                    ));
                    peak_requests = peak_requests.max(metric(
                        &text,
                        "gpugate_requests_in_flight{listener=\"webhook\"}",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (peak, peak_body, peak_open, peak_requests)
        })
    };
    // Let the attack build up, then probe during it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let probe_for = Duration::from_secs(seconds.saturating_sub(5).max(5) as u64);
    let (mut h_att, mut k_att, mut f_att, mut c_att) =
        probe(&server, &ca, review.clone(), probe_for).await;
    stop.store(true, Ordering::Relaxed);
    let (peak_rss, peak_body, peak_open, peak_requests) = sampling.await.unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &attacker.id().to_string()])
        .status();
    let mut report = String::new();
    if let Some(mut out) = attacker.stdout.take() {
        use std::io::Read as _;
        let _ = out.read_to_string(&mut report);
    }
    let _ = attacker.wait();
    let cut_off: u64 = report.trim().parse().unwrap_or(0);
    let metrics = admin_get(server.admin, "/metrics")
        .map(|(_, t)| t)
        .unwrap_or_default();
    let (_, hwm) = rss(pid);

    println!(
        "slow-client attack on `gpugate serve` (default limits), {seconds} s, attacker process at nice {nice}"
    );
    println!(
        "attack: {h1} HTTP/1.1 connections stalling 256 KiB (16 of them 6.5 MiB) into a declared 7 MiB body, \
         {h2_streams} HTTP/2 streams stalling 256 KiB; {} attacks cut off and renewed",
        cut_off
    );
    println!();
    println!("| measure | value (MiB unless said) |");
    println!("|---|---|");
    println!("| RSS idle | {:.1} |", idle_rss as f64 / 1024.0);
    println!(
        "| RSS after the reference probes | {:.1} |",
        ref_rss as f64 / 1024.0
    );
    println!(
        "| RSS peak during the attack (sampled every 100 ms) | {:.1} |",
        peak_rss as f64 / 1024.0
    );
    println!(
        "| VmHWM (peak RSS of the process) | {:.1} |",
        hwm as f64 / 1024.0
    );
    println!(
        "| request body bytes held, peak (gpugate_request_body_bytes) | {:.1} |",
        peak_body / 1048576.0
    );
    println!("| webhook connections open, peak | {peak_open:.0} |");
    println!("| webhook requests in flight (HTTP/2 streams included), peak | {peak_requests:.0} |");
    println!();
    println!("| probe | ok | errors | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    println!("{}", h_ref.row("/healthz, new connection, no attack"));
    println!("{}", h_att.row("/healthz, new connection, under attack"));
    println!("{}", k_ref.row("review, kept-alive connection, no attack"));
    println!(
        "{}",
        k_att.row("review, kept-alive connection, under attack")
    );
    println!("{}", f_ref.row("review, new TLS connection, no attack"));
    println!("{}", f_att.row("review, new TLS connection, under attack"));
    println!(
        "{}",
        c_ref.row("8 concurrent reviews, one HTTP/2 connection, no attack")
    );
    println!(
        "{}",
        c_att.row("8 concurrent reviews, one HTTP/2 connection, under attack")
    );
    println!();
    println!("| rule | count |");
    println!("|---|---|");
    for series in [
        "gpugate_requests_refused_total{listener=\"webhook\",rule=\"body_timeout\"}",
        "gpugate_requests_refused_total{listener=\"webhook\",rule=\"body_budget\"}",
        "gpugate_requests_refused_total{listener=\"webhook\",rule=\"body_too_large\"}",
        "gpugate_connections_refused_total{listener=\"webhook\",rule=\"max_connections\"}",
        "gpugate_connections_closed_total{listener=\"webhook\",rule=\"header_timeout\"}",
        "gpugate_connections_closed_total{listener=\"webhook\",rule=\"idle_timeout\"}",
        "gpugate_connections_closed_total{listener=\"webhook\",rule=\"evicted_idle\"}",
        "gpugate_connections_closed_total{listener=\"webhook\",rule=\"write_timeout\"}",
    ] {
        println!("| `{series}` | {} |", metric(&metrics, series));
    }
}
