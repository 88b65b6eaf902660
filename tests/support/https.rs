//! An in-process gpugate TLS server on 127.0.0.1 with a fresh rcgen CA, and
//! a minimal HTTP/1.1 client over rustls for tests.

#![allow(dead_code)]

use std::sync::Arc;

use gpugate::server::certs::{self, CertBundle, CertSpec};
use gpugate::server::limits::Limits;
use gpugate::server::listener::{self, Listener, Transport};
use gpugate::server::routes::{AppState, webhook_router};
use gpugate::server::tls::{self, ReloadingCert};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

pub struct Server {
    pub addr: std::net::SocketAddr,
    pub bundle: CertBundle,
    pub state: Arc<AppState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn start(state: Arc<AppState>, limits: Limits) -> Server {
    let dir = std::env::temp_dir().join(format!(
        "gpugate-serve-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    let bundle = certs::generate(
        &CertSpec::local_and(&[], 7),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    certs::write_dir(&dir, &bundle).unwrap();
    let cert = ReloadingCert::from_files(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
    let config = Arc::new(tls::server_config(cert).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listener::serve(
        listener,
        Transport::Tls(config),
        webhook_router(state.clone()),
        Listener {
            name: "webhook",
            limits,
            metrics: state.metrics.connections.clone(),
        },
        async {
            let _ = rx.await;
        },
    ));
    Server {
        addr,
        bundle,
        state,
        stop: Some(tx),
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

pub async fn connect(s: &Server) -> tokio_rustls::client::TlsStream<TcpStream> {
    connect_trusting(s.addr, s.bundle.ca_cert_pem.as_bytes()).await
}

/// An HTTP/1.1 TLS connection to `addr` as `localhost`, trusting only the
/// CA in `ca_pem`.
pub async fn connect_trusting(
    addr: std::net::SocketAddr,
    ca_pem: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    connect_alpn(addr, ca_pem, b"http/1.1").await
}

/// A TLS connection to `addr` as `localhost` offering one ALPN protocol
/// (`h2` or `http/1.1`), trusting only the CA in `ca_pem`.
pub async fn connect_alpn(
    addr: std::net::SocketAddr,
    ca_pem: &[u8],
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    wrap_tls(tcp, ca_pem, alpn).await
}

/// TLS over an already connected `tcp`, as [`connect_alpn`] does.
pub async fn wrap_tls(
    tcp: TcpStream,
    ca_pem: &[u8],
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    try_wrap_tls(tcp, ca_pem, alpn).await.unwrap()
}

/// [`wrap_tls`], with the handshake's failure as an error.
pub async fn try_wrap_tls(
    tcp: TcpStream,
    ca_pem: &[u8],
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// One HTTP/1.1 request; returns (status, body).
pub async fn post(s: &Server, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut tls = connect(s).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (413) before reading all of a large body.
    let _ = tls.write_all(body).await;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw);
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(raw.len(), |i| i + 4);
    let mut body = raw[split..].to_vec();
    if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

/// Posts `body` as JSON and reads the answer as JSON; the status must be 200.
pub async fn post_json(s: &Server, path: &str, body: serde_json::Value) -> serde_json::Value {
    let (status, bytes) = post(s, path, body.to_string().as_bytes()).await;
    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice(&bytes).unwrap()
}

pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}
