//! What a hostile or broken client can make the server hold, over real TLS
//! sockets on 127.0.0.1: stalled bodies, huge declared lengths, silent and
//! idle connections (HTTP/1.1 and HTTP/2), too many connections, stalled
//! HTTP/2 streams. Limits are small here so that each case takes about a
//! second; docs/operations.md ("Limits and attacks") has the defaults.

mod support {
    pub mod https;
}

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gpugate::config::Config;
use gpugate::server::limits::Limits;
use gpugate::server::listener::{self, Listener, Transport};
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::{AppState, admin_router};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use support::https::{Server, connect, connect_alpn, post, start};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn limits() -> Limits {
    Limits {
        header: Duration::from_millis(600),
        body: Duration::from_millis(800),
        idle: Duration::from_millis(800),
        connection_body: 64 * 1024,
        body_budget: 8 * 1024 * 1024,
        ..Limits::default()
    }
}

async fn server(limits: Limits) -> Server {
    start(AppState::new(Config::default(), Metrics::new(None)), limits).await
}

fn review() -> Vec<u8> {
    let pod: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/pods/gpu-only.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7c0d2e1f-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "default",
            "object": pod
        }
    }))
    .unwrap()
}

/// The value of a metric series in the server's registry (0 when absent).
fn metric(s: &Server, series: &str) -> i64 {
    let text = s.state.metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Reads until the server closes; the bytes and how long it took.
async fn until_closed<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    within: Duration,
) -> (Vec<u8>, Duration) {
    let start = Instant::now();
    let mut out = Vec::new();
    let read = tokio::time::timeout(within, r.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "still open after {within:?}");
    (out, start.elapsed())
}

fn status(raw: &[u8]) -> u16 {
    String::from_utf8_lossy(raw)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Case 1: a body that stalls half way is answered 408 at the body
/// deadline and the connection closed; what it held is given back. Many
/// of them hold no more than their allowances and the shared budget.
#[tokio::test]
async fn stalled_bodies_are_cut_off_and_hold_only_their_budget() {
    let s = server(limits()).await;
    let mut stalled = Vec::new();
    for _ in 0..16 {
        let mut tls = connect(&s).await;
        let head = format!(
            "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
            7 * 1024 * 1024 - 1
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        // 2 MiB of the 7 MiB, then nothing.
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..32 {
            if tls.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = tls.flush().await;
        stalled.push(tls);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = metric(&s, "gpugate_request_body_bytes{listener=\"webhook\"}");
    let bound = 16 * 64 * 1024 + 8 * 1024 * 1024;
    assert!(
        held > 0 && held <= bound,
        "held {held} bytes, bound {bound}"
    );
    // A small review on a fresh connection does not wait for the budget.
    let started = Instant::now();
    let (code, _) = post(&s, "/mutate", &review()).await;
    assert_eq!(code, 200);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    for mut tls in stalled {
        let (raw, took) = until_closed(&mut tls, Duration::from_secs(5)).await;
        let code = status(&raw);
        // 408 at the deadline, or 503 for a body that waited for the
        // budget until then.
        assert!(
            code == 408 || code == 503,
            "{}",
            String::from_utf8_lossy(&raw)
        );
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
    assert_eq!(
        metric(&s, "gpugate_request_body_bytes{listener=\"webhook\"}"),
        0
    );
    let timeouts = metric(
        &s,
        "gpugate_requests_refused_total{listener=\"webhook\",rule=\"body_timeout\"}",
    );
    let budget = metric(
        &s,
        "gpugate_requests_refused_total{listener=\"webhook\",rule=\"body_budget\"}",
    );
    assert_eq!(timeouts + budget, 16);
}

/// Case 2: a declared length above the limit is refused before any of it
/// is read, however slowly the rest would come.
#[tokio::test]
async fn a_huge_declared_length_gets_413_at_once() {
    let s = server(limits()).await;
    let mut tls = connect(&s).await;
    tls.write_all(
        b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000000\r\n\r\n{",
    )
    .await
    .unwrap();
    let (raw, took) = until_closed(&mut tls, Duration::from_secs(2)).await;
    assert_eq!(status(&raw), 413, "{}", String::from_utf8_lossy(&raw));
    assert!(took < Duration::from_millis(500), "{took:?}");
    let text = String::from_utf8_lossy(&raw).to_lowercase();
    assert!(text.contains("connection: close"), "{text}");
    assert!(text.contains("larger than 7340032 bytes"), "{text}");
    assert_eq!(
        metric(
            &s,
            "gpugate_requests_refused_total{listener=\"webhook\",rule=\"body_too_large\"}"
        ),
        1
    );
    // A request head larger than the 16 KiB read buffer is refused too.
    let mut tls = connect(&s).await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Padding: {}\r\nContent-Length: 2\r\n\r\n{{}}",
        "a".repeat(20 * 1024)
    );
    let _ = tls.write_all(head.as_bytes()).await;
    let (raw, _) = until_closed(&mut tls, Duration::from_secs(2)).await;
    assert_eq!(status(&raw), 431, "{}", String::from_utf8_lossy(&raw));
    // The same over HTTP/2: that stream alone is refused.
    let ca = s.bundle.ca_cert_pem.as_bytes().to_vec();
    let tls = connect_alpn(s.addr, &ca, b"h2").await;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let big = http::Request::post("https://localhost/validate")
        .header("x-padding", "a".repeat(20 * 1024))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let refused = send.send_request(big).await.unwrap();
    assert_eq!(refused.status(), 431);
}

/// Case 3: connections that go silent after the TLS handshake are closed
/// at the header deadline, HTTP/1.1 and HTTP/2 alike; idle keep-alive
/// connections at the idle deadline.
#[tokio::test]
async fn silent_and_idle_connections_are_closed() {
    let s = server(limits()).await;
    let ca = s.bundle.ca_cert_pem.as_bytes().to_vec();
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let mut tls = connect_alpn(s.addr, &ca, alpn).await;
        let (_, took) = until_closed(&mut tls, Duration::from_secs(3)).await;
        assert!(took >= Duration::from_millis(500), "{took:?}");
    }
    assert_eq!(
        metric(
            &s,
            "gpugate_connections_closed_total{listener=\"webhook\",rule=\"header_timeout\"}"
        ),
        2
    );
    // HTTP/1.1 keep-alive: one request, then silence.
    let mut tls = connect(&s).await;
    let body = review();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body).await.unwrap();
    let (raw, took) = until_closed(&mut tls, Duration::from_secs(3)).await;
    assert_eq!(status(&raw), 200);
    assert!(took >= Duration::from_millis(700), "closed after {took:?}");
    // HTTP/2: one request, then no stream for the idle time.
    let tls = connect_alpn(s.addr, &ca, b"h2").await;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::post("https://localhost/mutate")
        .body(Full::new(Bytes::from(review())))
        .unwrap();
    let res = send.send_request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(3), conn).await;
    assert!(ended.is_ok(), "idle HTTP/2 connection still open");
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        metric(
            &s,
            "gpugate_connections_closed_total{listener=\"webhook\",rule=\"idle_timeout\"}"
        ),
        2
    );
}

/// Above `maxConnections`, connections are accepted and closed at once
/// and counted; the admin port has its own cap, so health checks are
/// answered while the webhook port is full.
#[tokio::test]
async fn connections_above_the_cap_are_refused_and_health_stays_up() {
    let s = server(Limits {
        max_connections: 8,
        header: Duration::from_secs(30),
        ..limits()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect(&s).await);
    }
    // The ninth: closed before its TLS handshake can finish.
    let ca = s.bundle.ca_cert_pem.as_bytes().to_vec();
    let addr = s.addr;
    let ninth = tokio::time::timeout(Duration::from_secs(2), async move {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::pem::PemObject::from_pem_slice(&ca).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(gpugate::server::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
    })
    .await
    .expect("the ninth connection is answered at once");
    assert!(ninth.is_err(), "the ninth connection must be closed");
    assert_eq!(
        metric(
            &s,
            "gpugate_connections_refused_total{listener=\"webhook\",rule=\"max_connections\"}"
        ),
        1
    );
    assert_eq!(
        metric(&s, "gpugate_connections_open{listener=\"webhook\"}"),
        8
    );
    // The admin port, served by the same code with its own cap.
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = admin.local_addr().unwrap();
    let state = s.state.clone();
    tokio::spawn(listener::serve(
        admin,
        Transport::Plain,
        admin_router(state.clone()),
        Listener {
            name: "admin",
            limits: Limits {
                max_connections: 4,
                ..limits()
            },
            metrics: state.metrics.connections.clone(),
        },
        std::future::pending(),
    ));
    let mut tcp = tokio::net::TcpStream::connect(admin_addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (raw, _) = until_closed(&mut tcp, Duration::from_secs(2)).await;
    assert_eq!(status(&raw), 200);
    // Closing one frees a slot.
    held.pop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (code, _) = post(&s, "/mutate", &review()).await;
    assert_eq!(code, 200);
}

/// HTTP/2 streams that stall their bodies are answered 408 each, and the
/// connection keeps serving other streams.
#[tokio::test]
async fn stalled_http2_streams_are_cut_off_one_by_one() {
    let s = server(limits()).await;
    let ca = s.bundle.ca_cert_pem.as_bytes().to_vec();
    let tls = connect_alpn(s.addr, &ca, b"h2").await;
    type Body = BoxBody<Bytes, std::convert::Infallible>;
    let (send, conn) = hyper::client::conn::http2::handshake::<_, _, Body>(
        TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut stalls = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..8 {
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(4);
        tx.send(Ok(Frame::data(Bytes::from(vec![b' '; 32 * 1024]))))
            .await
            .unwrap();
        senders.push(tx); // kept open: the body never ends
        let body = StreamBody::new(tokio_stream_from(rx)).boxed();
        let req = http::Request::post("https://localhost/mutate")
            .header("content-length", (5 * 1024 * 1024).to_string())
            .body(body)
            .unwrap();
        let mut send = send.clone();
        stalls.push(tokio::spawn(async move { send.send_request(req).await }));
    }
    // Meanwhile a whole review on the same connection is answered.
    let mut other = send.clone();
    let res = other
        .send_request(
            http::Request::post("https://localhost/mutate")
                .body(Full::new(Bytes::from(review())).boxed())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    for stall in stalls {
        let res = tokio::time::timeout(Duration::from_secs(3), stall)
            .await
            .expect("answered within the body deadline")
            .unwrap()
            .unwrap();
        assert_eq!(res.status(), 408);
    }
    drop(senders);
    assert_eq!(
        metric(
            &s,
            "gpugate_requests_refused_total{listener=\"webhook\",rule=\"body_timeout\"}"
        ),
        8
    );
}

/// A receiver as a `Stream` of body frames.
fn tokio_stream_from<T>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
