//! TLS with certificates that change under a running server.
//!
//! [`ReloadingCert`] answers every handshake with the current certificate
//! (rustls `ResolvesServerCert` over an `ArcSwap`). [`watch`] re-reads the
//! files on a short poll. Polling, rather than inotify on the file paths,
//! sees every way a certificate is replaced: in-place writes, renames, and
//! the `..data` symlink swap of a Kubernetes Secret volume, which raises no
//! event on the file itself (kubernetes/kubernetes#111947). A file that does
//! not parse, or a key that does not match its certificate (a pair caught
//! half-written), keeps the last good pair in service and is reported.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};

use super::certs::CertInfo;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no usable PEM private key: {problem}")]
    BadKey { path: PathBuf, problem: String },
    #[error("{cert} and {key} do not belong together: {problem}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        problem: String,
    },
    #[error(transparent)]
    Info(#[from] super::certs::CertError),
}

/// The process-wide crypto provider (ring), installed once.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs ring as rustls' default provider; harmless when already done.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Parses a PEM certificate chain and key into a checked pair.
pub fn load_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<(CertifiedKey, i64), TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_path_buf(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadKey {
        path: key_path.to_path_buf(),
        problem: e.to_string(),
    })?;
    let certified =
        CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Mismatch {
            cert: cert_path.to_path_buf(),
            key: key_path.to_path_buf(),
            problem: e.to_string(),
        })?;
    let not_after = CertInfo::from_pem(cert_pem, cert_path)?
        .not_after
        .unix_timestamp();
    Ok((certified, not_after))
}

/// The serving certificate, swapped atomically when its files change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: ArcSwap<CertifiedKey>,
    /// The bytes of the pair in service, to skip unchanged re-reads.
    loaded: Mutex<(Vec<u8>, Vec<u8>)>,
    not_after: AtomicI64,
    reloads: AtomicU64,
    errors: AtomicU64,
}

/// What a reload found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Replaced,
}

impl ReloadingCert {
    /// Loads the pair; fails when it cannot be served.
    pub fn from_files(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let (cert, key) = read_pair(cert_path, key_path)?;
        let (certified, not_after) = load_pair(&cert, &key, cert_path, key_path)?;
        Ok(Arc::new(ReloadingCert {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: ArcSwap::from_pointee(certified),
            loaded: Mutex::new((cert, key)),
            not_after: AtomicI64::new(not_after),
            reloads: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }))
    }

    /// Re-reads the files; a bad pair leaves the current one in service.
    pub fn reload(&self) -> Result<Reload, TlsError> {
        let result = self.try_reload();
        if result.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn try_reload(&self) -> Result<Reload, TlsError> {
        let (cert, key) = read_pair(&self.cert_path, &self.key_path)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if loaded.0 == cert && loaded.1 == key {
            return Ok(Reload::Unchanged);
        }
        let (certified, not_after) = load_pair(&cert, &key, &self.cert_path, &self.key_path)?;
        self.current.store(Arc::new(certified));
        self.not_after.store(not_after, Ordering::Relaxed);
        *loaded = (cert, key);
        self.reloads.fetch_add(1, Ordering::Relaxed);
        Ok(Reload::Replaced)
    }

    /// Unix time at which the certificate in service expires.
    pub fn not_after(&self) -> i64 {
        self.not_after.load(Ordering::Relaxed)
    }

    /// How many times a new pair was put in service.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// How many reloads failed (the old pair stayed).
    pub fn reload_errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

fn read_pair(cert_path: &Path, key_path: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| TlsError::Read {
            path: p.to_path_buf(),
            source,
        })
    };
    Ok((read(cert_path)?, read(key_path)?))
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// TLS 1.2 and 1.3, ALPN h2 and http/1.1, the certificate from `resolver`.
pub fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> Result<ServerConfig, rustls::Error> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&version::TLS13, &version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Re-reads the certificate files every `interval`, and at once when `now`
/// is notified (SIGHUP), until `stop` resolves.
pub async fn watch(
    cert: Arc<ReloadingCert>,
    interval: Duration,
    now: Arc<tokio::sync::Notify>,
    stop: impl std::future::Future<Output = ()>,
) {
    super::poll::every(interval, &now, stop, || match cert.reload() {
        Ok(Reload::Replaced) => tracing::info!(
            cert = %cert.cert_path.display(),
            not_after = cert.not_after(),
            "serving a new TLS certificate"
        ),
        Ok(Reload::Unchanged) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "TLS certificate not reloaded; the previous one stays in service"
        ),
    })
    .await;
}
/// The serving certificate's expiry and failed reloads, read from the
/// reloading certificate on every scrape.
#[derive(Debug, Default)]
pub struct CertMetrics {
    cert: Option<Arc<ReloadingCert>>,
    not_after: Gauge,
    reload_errors: Gauge,
}

impl CertMetrics {
    pub fn new(cert: Option<Arc<ReloadingCert>>) -> Self {
        Self {
            cert,
            ..Self::default()
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_tls_cert_not_after_timestamp_seconds",
            "Expiry (Unix time) of the serving certificate in use",
            self.not_after.clone(),
        );
        registry.register(
            "gpugate_tls_cert_reload_errors",
            "Certificate reloads that failed and kept the previous pair",
            self.reload_errors.clone(),
        );
    }

    /// Reads the certificate in use.
    pub fn sample(&self) {
        if let Some(cert) = &self.cert {
            self.not_after.set(cert.not_after());
            self.reload_errors
                .set(i64::try_from(cert.reload_errors()).unwrap_or(i64::MAX));
        }
    }
}
