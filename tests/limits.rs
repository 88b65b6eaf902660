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
        // 408 at the deadline, or 503 for a body that found no room in the
        // budget (its rest read and dropped until then).
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

/// A TLS connection to `addr` whose handshake may fail.
async fn tls_client(
    addr: std::net::SocketAddr,
    ca: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    support::https::try_wrap_tls(tcp, ca, b"http/1.1").await
}

/// Starts the admin router on its own listener with `max_connections`.
async fn admin_port(s: &Server, max_connections: usize) -> std::net::SocketAddr {
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = admin.local_addr().unwrap();
    let state = s.state.clone();
    tokio::spawn(listener::serve(
        admin,
        Transport::Plain,
        admin_router(state.clone()),
        Listener {
            name: "admin",
            limits: Limits {
                max_connections,
                header: Duration::from_secs(30),
                ..limits()
            },
            metrics: state.metrics.connections.clone(),
        },
        std::future::pending(),
    ));
    addr
}

async fn healthz(addr: std::net::SocketAddr) -> u16 {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (raw, _) = until_closed(&mut tcp, Duration::from_secs(2)).await;
    status(&raw)
}

/// At `maxConnections`, the connection idle the longest makes room:
/// holding idle connections (or half-open ones on the admin port) blocks
/// no one. Counted as `evicted_idle`.
#[tokio::test]
async fn idle_connections_make_room_at_the_cap() {
    let s = server(Limits {
        max_connections: 8,
        header: Duration::from_secs(30),
        ..limits()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect(&s).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (code, _) = post(&s, "/mutate", &review()).await;
    assert_eq!(code, 200, "a ninth client is served");
    assert_eq!(
        metric(
            &s,
            "gpugate_connections_closed_total{listener=\"webhook\",rule=\"evicted_idle\"}"
        ),
        1
    );
    // The one idle the longest (the first) made room.
    let mut first = held.remove(0);
    until_closed(&mut first, Duration::from_secs(2)).await;
    // The admin port: 4 connections that never finish their request.
    let admin = admin_port(&s, 4).await;
    let mut stuck = Vec::new();
    for _ in 0..4 {
        let mut tcp = tokio::net::TcpStream::connect(admin).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        stuck.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(healthz(admin).await, 200, "a probe is answered");
}

/// When every connection is busy (a request in flight), a new one is
/// accepted and closed at once and counted; the admin port has its own
/// cap, so health checks are answered while the webhook port is full.
#[tokio::test]
async fn busy_connections_at_the_cap_refuse_new_ones_and_health_stays_up() {
    let s = server(Limits {
        max_connections: 8,
        body: Duration::from_secs(30),
        ..limits()
    })
    .await;
    let mut busy = Vec::new();
    for _ in 0..8 {
        let mut tls = connect(&s).await;
        tls.write_all(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{")
            .await
            .unwrap();
        busy.push(tls);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        metric(&s, "gpugate_requests_in_flight{listener=\"webhook\"}"),
        8
    );
    let ca = s.bundle.ca_cert_pem.as_bytes().to_vec();
    let ninth = tokio::time::timeout(Duration::from_secs(2), tls_client(s.addr, &ca))
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
    let admin = admin_port(&s, 4).await;
    assert_eq!(healthz(admin).await, 200);
    // Ending one busy connection frees a slot.
    busy.pop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (code, _) = post(&s, "/mutate", &review()).await;
    assert_eq!(code, 200);
}

/// An answer the client does not take is cut off at the write deadline,
/// and what its request held is given back then, not before: a /filter
/// that echoes 6 MB of node names to a client that never reads.
#[tokio::test]
async fn an_answer_nobody_reads_is_cut_off_at_the_write_deadline() {
    let snapshot = gpugate::cluster::Snapshot::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/cluster/extender.yaml"),
    )
    .unwrap();
    let (view, _) = snapshot.to_view();
    let cluster = Arc::new(gpugate::cluster::SharedCluster::new(view, true));
    let state = AppState::with_cluster(Config::default(), Metrics::new(None), Some(cluster));
    let s = start(state, limits()).await;
    // A pod without GPUs: every candidate passes and is echoed back.
    let names: Vec<String> = (0..200_000)
        .map(|i| format!("node-{i:07}-with-a-long-name"))
        .collect();
    let body = json!({
        "Pod": {"metadata": {"name": "p", "namespace": "ml", "uid": "u"}, "spec": {"containers": [{"name": "c"}]}},
        "NodeNames": names,
    })
    .to_string();
    // A small receive buffer, so that the kernel does not take the whole
    // answer off the server's hands.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(32 * 1024).unwrap();
    let tcp = socket.connect(s.addr).await.unwrap();
    let mut tls = support::https::wrap_tls(tcp, s.bundle.ca_cert_pem.as_bytes(), b"http/1.1").await;
    let head = format!(
        "POST /filter HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(body.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    // Never read: the answer stays in the server until the deadline.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let held = metric(&s, "gpugate_request_body_bytes{listener=\"webhook\"}");
    assert!(held as usize >= body.len(), "held {held} of {}", body.len());
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&s, "gpugate_request_body_bytes{listener=\"webhook\"}") > 0 {
        assert!(Instant::now() < deadline, "answer still held");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        metric(
            &s,
            "gpugate_connections_closed_total{listener=\"webhook\",rule=\"write_timeout\"}"
        ),
        1
    );
}

/// A body sent as thousands of one-byte chunks costs its buffer, not a
/// piece of memory per chunk, and is read like any other.
#[tokio::test]
async fn a_body_of_one_byte_chunks_is_read_into_one_buffer() {
    let s = server(limits()).await;
    let body = review();
    let mut chunked = Vec::new();
    for b in &body {
        chunked.extend_from_slice(b"1\r\n");
        chunked.push(*b);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut tls = connect(&s).await;
    tls.write_all(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    tls.write_all(&chunked).await.unwrap();
    let (raw, _) = until_closed(&mut tls, Duration::from_secs(5)).await;
    assert_eq!(status(&raw), 200, "{}", String::from_utf8_lossy(&raw));
    assert!(String::from_utf8_lossy(&raw).contains("\"allowed\":true"));
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
