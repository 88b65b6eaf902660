//! `serve --self-signed-secret`: the CA in a Secret, `caBundle` patched into
//! both webhook configurations, serving certificates signed by that CA,
//! against an in-memory API server behind kube's mock service.

mod support {
    pub mod fake_api;
}

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use gpugate::config::WebhookConfigNames;
use gpugate::server::cert_secret::{InClusterCerts, SecretRef};
use gpugate::server::certs::{self, CertSpec, Ensured};
use gpugate::server::tls::{self, ReloadingCert};
use http::Method;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use support::fake_api::FakeApi;
use time::OffsetDateTime;

const SECRET: &str = "/api/v1/namespaces/gpugate/secrets/gpugate-ca";
const MUTATING: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpugate";
const VALIDATING: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpugate";

fn webhook_config(kind: &str, hooks: &[&str]) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "gpugate"},
        "webhooks": hooks.iter().map(|h| json!({
            "name": h,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"namespace": "gpugate", "name": "gpugate", "path": "/mutate"}},
        })).collect::<Vec<_>>(),
    })
}

fn cluster_with_webhooks() -> FakeApi {
    let api = FakeApi::default();
    api.put(
        MUTATING,
        webhook_config("MutatingWebhookConfiguration", &["mutate.gpugate.io"]),
    );
    api.put(
        VALIDATING,
        webhook_config(
            "ValidatingWebhookConfiguration",
            &["validate.gpugate.io", "validate-extra.gpugate.io"],
        ),
    );
    api
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpugate-secret-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn spec() -> CertSpec {
    CertSpec::local_and(&["gpugate.gpugate.svc".to_string()], 30)
}

fn manager(api: &FakeApi, dir: &Path) -> InClusterCerts {
    InClusterCerts::new(
        api.client(),
        "gpugate/gpugate-ca".parse::<SecretRef>().unwrap(),
        spec(),
        dir.to_path_buf(),
    )
}

fn ca_bundles(api: &FakeApi) -> Vec<String> {
    let mut out = Vec::new();
    for path in [MUTATING, VALIDATING] {
        for hook in api.get(path).unwrap()["webhooks"].as_array().unwrap() {
            let b64 = hook["clientConfig"]["caBundle"].as_str().unwrap_or("");
            let pem = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap();
            out.push(String::from_utf8(pem).unwrap());
        }
    }
    out
}

/// A TLS handshake with the serving pair in `dir`, trusting only `bundle`:
/// what kube-apiserver will do with the caBundle.
async fn handshake(dir: &Path, bundle: &str) -> Result<(), String> {
    let cert = ReloadingCert::from_files(&dir.join(certs::TLS_CERT), &dir.join(certs::TLS_KEY))
        .map_err(|e| e.to_string())?;
    let server = Arc::new(tls::server_config(cert).map_err(|e| e.to_string())?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tokio_rustls::TlsAcceptor::from(server).accept(tcp).await
    });
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let result = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(ServerName::try_from("gpugate.gpugate.svc").unwrap(), tcp)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let _ = accept.await;
    result
}

#[tokio::test]
async fn first_start_makes_the_ca_patches_every_webhook_and_serves_a_trusted_certificate() {
    let api = cluster_with_webhooks();
    let dir = tmpdir("first");
    let pass = manager(&api, &dir)
        .ensure(&WebhookConfigNames::default(), OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert!(pass.ca_made);
    assert_eq!(pass.serving, Ensured::Renewed);
    assert_eq!(
        pass.patched,
        [
            "MutatingWebhookConfiguration/gpugate/mutate.gpugate.io",
            "ValidatingWebhookConfiguration/gpugate/validate.gpugate.io",
            "ValidatingWebhookConfiguration/gpugate/validate-extra.gpugate.io",
        ]
    );
    let secret = api.get(SECRET).expect("the CA Secret was created");
    let ca_pem = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["ca.crt"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert!(secret["data"]["ca.key"].is_string());
    let bundles = ca_bundles(&api);
    assert_eq!(bundles.len(), 3);
    assert!(bundles.iter().all(|b| *b == ca_pem));
    assert_eq!(
        std::fs::read_to_string(dir.join(certs::CA_CERT)).unwrap(),
        ca_pem
    );
    assert!(
        !dir.join(certs::CA_KEY).exists(),
        "the CA key stays in the Secret"
    );
    handshake(&dir, &bundles[0]).await.unwrap();
    // The webhook patches test each name at its index.
    let patch = api
        .seen()
        .into_iter()
        .find(|s| s.method == Method::PATCH && s.path == MUTATING)
        .unwrap();
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/json-patch+json")
    );
    assert_eq!(patch.body[0]["op"], "test");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn later_passes_and_other_replicas_reuse_the_ca_and_write_nothing() {
    let api = cluster_with_webhooks();
    let (d1, d2) = (tmpdir("replica1"), tmpdir("replica2"));
    let now = OffsetDateTime::now_utc();
    manager(&api, &d1)
        .ensure(&WebhookConfigNames::default(), now)
        .await
        .unwrap();
    let writes_before = api
        .seen()
        .iter()
        .filter(|s| s.method != Method::GET)
        .count();
    let again = manager(&api, &d1)
        .ensure(&WebhookConfigNames::default(), now)
        .await
        .unwrap();
    assert!(!again.ca_made);
    assert!(again.patched.is_empty());
    assert_eq!(again.serving, Ensured::Reused);
    let other = manager(&api, &d2)
        .ensure(&WebhookConfigNames::default(), now)
        .await
        .unwrap();
    assert!(!other.ca_made && other.patched.is_empty());
    assert_eq!(other.serving, Ensured::Renewed);
    let writes_after = api
        .seen()
        .iter()
        .filter(|s| s.method != Method::GET)
        .count();
    assert_eq!(
        writes_before, writes_after,
        "no API writes when all is in step"
    );
    // Both replicas' certificates are trusted through the one caBundle.
    let bundle = &ca_bundles(&api)[0];
    handshake(&d1, bundle).await.unwrap();
    handshake(&d2, bundle).await.unwrap();
    assert_ne!(
        std::fs::read(d1.join(certs::TLS_CERT)).unwrap(),
        std::fs::read(d2.join(certs::TLS_CERT)).unwrap()
    );
    let _ = std::fs::remove_dir_all(&d1);
    let _ = std::fs::remove_dir_all(&d2);
}

#[tokio::test]
async fn an_expiring_ca_is_rotated_and_the_old_one_stays_trusted_meanwhile() {
    let api = cluster_with_webhooks();
    let dir = tmpdir("rotate");
    let now = OffsetDateTime::now_utc();
    // A CA made 3,640 days ago expires in 10 days: less than a serving
    // certificate's 30.
    let old = certs::generate(&spec(), now - time::Duration::days(3640)).unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    api.put(
        SECRET,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "gpugate-ca", "namespace": "gpugate",
                            "labels": {"app.kubernetes.io/managed-by": "Helm"},
                            "annotations": {"meta.helm.sh/release-name": "gpugate"}},
               "data": {"ca.crt": b64(&old.ca_cert_pem), "ca.key": b64(&old.ca_key_pem),
                        "tls.crt": b64("kept"), "tls.key": b64("kept")}}),
    );
    let pass = manager(&api, &dir)
        .ensure(&WebhookConfigNames::default(), now)
        .await
        .unwrap();
    assert!(pass.ca_made);
    let secret = api.get(SECRET).unwrap();
    assert_eq!(
        secret["data"]["ca-previous.crt"].as_str(),
        Some(b64(&old.ca_cert_pem).as_str())
    );
    let replace = api
        .seen()
        .into_iter()
        .find(|s| s.method == Method::PUT && s.path == SECRET)
        .expect("the Secret is replaced, not recreated");
    assert!(replace.body["metadata"]["resourceVersion"].is_string());
    // Only the CA keys changed: the owner's metadata, the (immutable) type
    // and other keys are kept.
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(
        secret["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    assert_eq!(
        secret["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "gpugate"
    );
    assert_eq!(secret["data"]["tls.crt"], b64("kept"));
    let bundle = &ca_bundles(&api)[0];
    assert!(bundle.contains(&old.ca_cert_pem), "old CA still trusted");
    handshake(&dir, bundle).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_unreadable_ca_is_replaced_and_not_kept_as_previous() {
    let api = cluster_with_webhooks();
    let dir = tmpdir("garbage");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    api.put(
        SECRET,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "gpugate-ca", "namespace": "gpugate"},
               "data": {"ca.crt": b64("not a certificate"), "ca.key": b64("nor a key")}}),
    );
    let pass = manager(&api, &dir)
        .ensure(&WebhookConfigNames::default(), OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert!(pass.ca_made);
    let secret = api.get(SECRET).unwrap();
    assert!(secret["data"].get("ca-previous.crt").is_none(), "{secret}");
    assert!(!ca_bundles(&api)[0].contains("not a certificate"));
    handshake(&dir, &ca_bundles(&api)[0]).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn missing_webhook_configurations_are_reported_not_fatal() {
    let api = FakeApi::default();
    let dir = tmpdir("missing");
    let pass = manager(&api, &dir)
        .ensure(&WebhookConfigNames::default(), OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert_eq!(
        pass.missing,
        [
            "MutatingWebhookConfiguration/gpugate",
            "ValidatingWebhookConfiguration/gpugate"
        ]
    );
    assert!(dir.join(certs::TLS_CERT).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_failed_patch_stops_the_pass_before_a_new_certificate_is_written() {
    let api = cluster_with_webhooks();
    let dir = tmpdir("patchfail");
    api.fail(Method::PATCH, "validatingwebhookconfigurations", 500, 1);
    let e = manager(&api, &dir)
        .ensure(&WebhookConfigNames::default(), OffsetDateTime::now_utc())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("ValidatingWebhookConfiguration gpugate:"),
        "{e}"
    );
    assert!(
        !dir.join(certs::TLS_CERT).exists(),
        "no certificate may be served before kube-apiserver trusts its CA"
    );
    // The next pass succeeds and patches only what is still missing.
    let pass = manager(&api, &dir)
        .ensure(&WebhookConfigNames::default(), OffsetDateTime::now_utc())
        .await
        .unwrap();
    assert_eq!(pass.patched.len(), 2);
    assert!(dir.join(certs::TLS_CERT).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_unreachable_secret_is_an_error_that_names_it() {
    let api = cluster_with_webhooks();
    api.fail(Method::GET, "/secrets/", 500, 1);
    let e = manager(&api, &tmpdir("unreachable"))
        .ensure(&WebhookConfigNames::default(), OffsetDateTime::now_utc())
        .await
        .unwrap_err();
    assert!(
        e.to_string().starts_with("Secret gpugate/gpugate-ca:"),
        "{e}"
    );
}
