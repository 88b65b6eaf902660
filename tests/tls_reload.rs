//! Certificate rotation under a live TLS listener on 127.0.0.1: files
//! replaced in place, by rename and by a Kubernetes Secret volume's `..data`
//! symlink swap, while a client keeps connecting. No handshake may fail, and
//! the new certificate must be served; a broken file keeps the old one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpugate::server::certs::{self, CertBundle, CertSpec};
use gpugate::server::tls::{self, ReloadingCert};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use time::OffsetDateTime;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpugate-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bundle() -> CertBundle {
    certs::generate(&CertSpec::local_and(&[], 7), OffsetDateTime::now_utc()).unwrap()
}

/// A TLS server answering each connection with one line, until dropped.
async fn serve(cert: Arc<ReloadingCert>) -> std::net::SocketAddr {
    let config = tls::server_config(cert).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut s) = acceptor.accept(tcp).await {
                    let _ = s.write_all(b"ok\n").await;
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    addr
}

/// Serves `cert` and re-reads its files every 50 ms until the sender is used.
async fn serve_watched(
    cert: Arc<ReloadingCert>,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(tls::watch(
        cert.clone(),
        Duration::from_millis(50),
        Arc::default(),
        async {
            let _ = stop_rx.await;
        },
    ));
    (serve(cert).await, stop_tx)
}

/// Connects trusting `cas`; returns the served leaf certificate.
async fn served_cert(addr: std::net::SocketAddr, cas: &[&str]) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut s = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    s.read_to_string(&mut line)
        .await
        .map_err(|e| e.to_string())?;
    if line != "ok\n" {
        return Err(format!("unexpected answer {line:?}"));
    }
    let (_, conn) = s.get_ref();
    Ok(conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default())
}

fn leaf_der(b: &CertBundle) -> Vec<u8> {
    CertificateDer::from_pem_slice(b.cert_pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// Keeps connecting while `rotate` runs; returns (failures, connections)
/// once the new leaf is served (or panics after 10 s).
async fn rotate_under_load(
    addr: std::net::SocketAddr,
    cas: [&str; 2],
    new_leaf: Vec<u8>,
    rotate: impl FnOnce(),
) -> (usize, usize) {
    let cas: Vec<String> = cas.iter().map(|s| s.to_string()).collect();
    let client = {
        let cas = cas.clone();
        let new_leaf = new_leaf.clone();
        tokio::spawn(async move {
            let refs: Vec<&str> = cas.iter().map(String::as_str).collect();
            let (mut failures, mut total, mut seen_new_after) = (0, 0, None);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while tokio::time::Instant::now() < deadline {
                total += 1;
                match served_cert(addr, &refs).await {
                    Ok(leaf) if leaf == new_leaf => {
                        seen_new_after.get_or_insert(total);
                        // Keep going a little after the switch.
                        if total > seen_new_after.unwrap_or(0) + 20 {
                            return (failures, total, true);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("handshake failed: {e}");
                        failures += 1;
                    }
                }
            }
            (failures, total, false)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    rotate();
    let (failures, total, switched) = client.await.unwrap();
    assert!(
        switched,
        "the new certificate was never served ({total} connections)"
    );
    (failures, total)
}

fn write_pair(dir: &Path, b: &CertBundle) {
    std::fs::write(dir.join("tls.key"), &b.key_pem).unwrap();
    std::fs::write(dir.join("tls.crt"), &b.cert_pem).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_volume_symlink_swap() {
    let dir = tmpdir("symlink");
    let (old, new) = (bundle(), bundle());
    // kubelet's layout: ..<timestamp>/ holds the files, ..data links to it,
    // and the visible names link through ..data.
    let v1 = dir.join("..2026_11_21_01_00_00.1");
    std::fs::create_dir(&v1).unwrap();
    write_pair(&v1, &old);
    std::os::unix::fs::symlink("..2026_11_21_01_00_00.1", dir.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), dir.join(f)).unwrap();
    }
    let cert = ReloadingCert::from_files(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
    let (addr, stop_tx) = serve_watched(cert.clone()).await;
    assert_eq!(
        served_cert(addr, &[&old.ca_cert_pem]).await.unwrap(),
        leaf_der(&old)
    );

    let (failures, total) = rotate_under_load(
        addr,
        [&old.ca_cert_pem, &new.ca_cert_pem],
        leaf_der(&new),
        || {
            let v2 = dir.join("..2026_11_21_02_00_00.2");
            std::fs::create_dir(&v2).unwrap();
            write_pair(&v2, &new);
            std::os::unix::fs::symlink("..2026_11_21_02_00_00.2", dir.join("..data_tmp")).unwrap();
            std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
            std::fs::remove_dir_all(&v1).unwrap();
        },
    )
    .await;
    assert_eq!(failures, 0, "{failures} of {total} handshakes failed");
    assert_eq!(cert.reloads(), 1);
    let _ = stop_tx.send(());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_into_place_and_broken_files() {
    let dir = tmpdir("rename");
    let (old, new) = (bundle(), bundle());
    write_pair(&dir, &old);
    let cert = ReloadingCert::from_files(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
    let (addr, stop_tx) = serve_watched(cert.clone()).await;
    let old_not_after = cert.not_after();

    // Garbage in place of the certificate: the old pair stays in service.
    std::fs::write(dir.join("tls.crt"), "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cert.reload_errors() >= 1);
    assert_eq!(
        served_cert(addr, &[&old.ca_cert_pem]).await.unwrap(),
        leaf_der(&old)
    );
    // A new certificate with the old key (a half-finished rotation): refused too.
    std::fs::write(dir.join("tls.crt"), &new.cert_pem).unwrap();
    assert!(matches!(cert.reload(), Err(tls::TlsError::Mismatch { .. })));
    assert_eq!(
        served_cert(addr, &[&old.ca_cert_pem]).await.unwrap(),
        leaf_der(&old)
    );

    // Both files renamed into place while clients connect.
    let (failures, total) = rotate_under_load(
        addr,
        [&old.ca_cert_pem, &new.ca_cert_pem],
        leaf_der(&new),
        || {
            for (name, pem) in [("tls.key", &new.key_pem), ("tls.crt", &new.cert_pem)] {
                std::fs::write(dir.join(format!("{name}.new")), pem).unwrap();
                std::fs::rename(dir.join(format!("{name}.new")), dir.join(name)).unwrap();
            }
        },
    )
    .await;
    assert_eq!(failures, 0, "{failures} of {total} handshakes failed");
    assert!(cert.not_after() >= old_not_after);
    let _ = stop_tx.send(());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unusable_pairs_are_refused_at_start() {
    let dir = tmpdir("start");
    let b = bundle();
    write_pair(&dir, &b);
    std::fs::write(dir.join("other.key"), bundle().key_pem).unwrap();
    let e = ReloadingCert::from_files(&dir.join("tls.crt"), &dir.join("other.key")).unwrap_err();
    assert!(e.to_string().contains("do not belong together"), "{e}");
    let e = ReloadingCert::from_files(&dir.join("missing.crt"), &dir.join("tls.key")).unwrap_err();
    assert!(e.to_string().contains("missing.crt"), "{e}");
    let e = ReloadingCert::from_files(&dir.join("tls.key"), &dir.join("tls.key")).unwrap_err();
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
