//! A fresh PKI per run: the cluster CA with the API server's serving
//! certificate and an admin client certificate, the service-account signing
//! key, and a separate CA for gpugate's serving certificate (the role
//! cert-manager's CA Issuer plays in deploy/cert-manager).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use gpugate::server::certs::{self, CertBundle, CertSpec};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

pub struct Pki {
    pub dir: PathBuf,
    pub cluster: CertBundle,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    pub webhook: CertBundle,
}

impl Pki {
    pub fn make(dir: &Path) -> anyhow::Result<Pki> {
        std::fs::create_dir_all(dir)?;
        let now = OffsetDateTime::now_utc();
        // CA + serving certificate for localhost and 127.0.0.1.
        let cluster = certs::generate(&CertSpec::local_and(&[], 30), now)?;
        let (admin_cert_pem, admin_key_pem) = client_cert(&cluster, "admin", "system:masters")?;
        let sa = KeyPair::generate()?;
        let webhook = certs::generate(&CertSpec::local_and(&[], 30), now)?;
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).with_context(|| format!("write {name}"))
        };
        write("ca.crt", &cluster.ca_cert_pem)?;
        write("apiserver.crt", &cluster.cert_pem)?;
        write("apiserver.key", &cluster.key_pem)?;
        write("sa.key", &sa.serialize_pem())?;
        write("sa.pub", &sa.public_key_pem())?;
        write("webhook-ca.crt", &webhook.ca_cert_pem)?;
        write("webhook.crt", &webhook.cert_pem)?;
        write("webhook.key", &webhook.key_pem)?;
        // For tools outside the suite (curl for the scale benchmark's
        // profiles).
        write("admin.crt", &admin_cert_pem)?;
        write("admin.key", &admin_key_pem)?;
        Ok(Pki {
            dir: dir.to_path_buf(),
            cluster,
            admin_cert_pem,
            admin_key_pem,
            webhook,
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A new serving certificate (new key) from the same webhook CA, as
    /// cert-manager renews with `rotationPolicy: Always`.
    pub fn renew_webhook(&self) -> anyhow::Result<(String, String)> {
        Ok(certs::sign_serving(
            &CertSpec::local_and(&[], 30),
            &self.webhook.ca_cert_pem,
            &self.webhook.ca_key_pem,
            OffsetDateTime::now_utc(),
        )?)
    }
}

fn client_cert(ca: &CertBundle, cn: &str, org: &str) -> anyhow::Result<(String, String)> {
    let issuer = Issuer::from_ca_cert_pem(&ca.ca_cert_pem, KeyPair::from_pem(&ca.ca_key_pem)?)?;
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn.push(DnType::OrganizationName, org);
    p.distinguished_name = dn;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(30);
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}
