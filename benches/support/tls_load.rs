//! What the load benchmarks over real TLS share: a self-signed certificate,
//! gpugate's accept loop on 127.0.0.1, and a rustls client that keeps
//! `connections` HTTP/1.1 keep-alive connections busy with one request body
//! and records every latency after a warm-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use bytes::Bytes;
use gpugate::config::server::ServerConfig;
use gpugate::server::certs::{self, CertBundle, CertSpec};
use gpugate::server::limits::MAX_EXTENDER_BODY_BYTES;
use gpugate::server::listener::{self, Listener, Transport};
use gpugate::server::tls::{self, ReloadingCert};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject as _;
use tokio::net::{TcpListener, TcpStream};

/// A fresh CA and serving certificate for `localhost`, written to a
/// temporary directory (removed on drop) and loaded as the server loads it.
pub struct SelfSigned {
    pub bundle: CertBundle,
    pub cert: Arc<ReloadingCert>,
    dir: std::path::PathBuf,
}

impl SelfSigned {
    pub fn generate(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("gpugate-{name}-{}", std::process::id()));
        let bundle = certs::generate(
            &CertSpec::local_and(&[], 1),
            time::OffsetDateTime::now_utc(),
        )
        .expect("certs");
        certs::write_dir(&dir, &bundle).expect("write certs");
        let cert = ReloadingCert::from_files(&dir.join("tls.crt"), &dir.join("tls.key"))
            .expect("load certs");
        SelfSigned { bundle, cert, dir }
    }
}

impl Drop for SelfSigned {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serves `router` over TLS on 127.0.0.1 with gpugate's accept loop until
/// the returned sender is dropped or fired.
pub async fn start(
    router: Router,
    cert: Arc<ReloadingCert>,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let config = Arc::new(tls::server_config(cert).expect("TLS config"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listener::serve(
        listener,
        Transport::Tls(config),
        router,
        Listener {
            name: "webhook",
            limits: ServerConfig::default().limits(MAX_EXTENDER_BODY_BYTES),
            metrics: Default::default(),
        },
        async {
            let _ = rx.await;
        },
    ));
    (addr, tx)
}

/// A TLS connector trusting only the CA in `ca_pem`, speaking HTTP/1.1.
pub fn connector(ca_pem: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA PEM"))
        .expect("CA");
    let mut config = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One keep-alive HTTP/1.1 connection over TLS to `addr` as `localhost`.
pub async fn connect(
    addr: std::net::SocketAddr,
    connector: &tokio_rustls::TlsConnector,
) -> SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let tls = connector
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("handshake");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("http handshake");
    tokio::spawn(conn);
    sender
}

/// POSTs `body` as JSON to `path`: the status and the whole answer.
pub async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    path: &str,
    body: Bytes,
) -> Result<(hyper::StatusCode, Bytes), hyper::Error> {
    let req = hyper::Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok((status, bytes))
}

/// How long to load, and how much of it to leave out as warm-up.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub warmup: Duration,
    pub duration: Duration,
}

/// The latencies of the successful requests, sorted, and the failures.
pub struct Stats {
    pub requests: usize,
    pub errors: usize,
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
}

impl Stats {
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p` quantile (0.0 to 1.0) of the latencies.
    pub fn pct(&self, p: f64) -> Duration {
        pct(&self.latencies, p)
    }

    pub fn max(&self) -> Duration {
        self.latencies.last().copied().unwrap_or_default()
    }
}

/// The `p` quantile (0.0 to 1.0) of sorted durations.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Milliseconds with two decimals, for the tables.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Keeps `connections` connections busy POSTing `body` to `path`, one
/// request at a time each, for `run`. A request counts as an error unless
/// it gets HTTP 200 and, when `expect` is given, exactly that answer.
pub async fn load(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    path: &'static str,
    body: Bytes,
    expect: Option<Bytes>,
    connections: usize,
    run: Run,
) -> Stats {
    let connector = connector(ca_pem);
    let start = Instant::now();
    let measure_from = start + run.warmup;
    let end = measure_from + run.duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let connector = connector.clone();
        let body = body.clone();
        let expect = expect.clone();
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(addr, &connector).await;
            let (mut lat, mut errors) = (Vec::with_capacity(100_000), 0);
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let t = Instant::now();
                let ok = match post(&mut sender, path, body.clone()).await {
                    Ok((status, answer)) => {
                        status == 200 && expect.as_ref().is_none_or(|e| *e == answer)
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
        elapsed: run.duration,
    }
}

/// The independent reference: a minimal rustls + hyper HTTP/1.1 server
/// that shares none of gpugate's server code (its own rustls config from
/// the PEM files, its own accept loop, no listener limits, spans, body
/// accounting or router). It reads each request body whole and answers
/// `answer` as JSON. Serves until the returned sender is fired or dropped.
pub async fn start_reference(
    bundle: &CertBundle,
    answer: &'static str,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes()).expect("key PEM");
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                _ = &mut rx => return,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => continue,
                },
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| async move {
                        let _body = req.into_body().collect().await?.to_bytes();
                        Ok::<_, hyper::Error>(
                            hyper::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(answer.as_bytes())))
                                .expect("response"),
                        )
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, tx)
}
