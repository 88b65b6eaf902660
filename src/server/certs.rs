//! Development and self-managed certificates made with rcgen: a CA and a
//! serving certificate signed by it.
//!
//! A certificate directory holds `ca.crt`, `tls.crt` and `tls.key`, plus
//! `ca.key` so that a renewed serving certificate is signed by the same CA
//! and clients that trust `ca.crt` keep working. Files are written to a
//! temporary name and renamed into place, so a reader never sees half a file.

use std::fs;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

/// How long a generated CA lives.
const CA_DAYS: i64 = 3650;

/// What a serving certificate must cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSpec {
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// Lifetime of the serving certificate.
    pub days: u32,
}

impl CertSpec {
    /// `localhost`, `127.0.0.1` and the given names, as `serve` uses.
    pub fn local_and(dns: &[String], days: u32) -> Self {
        let mut names = vec!["localhost".to_string()];
        names.extend(dns.iter().cloned());
        names.sort();
        names.dedup();
        CertSpec {
            dns: names,
            ips: vec![IpAddr::from([127, 0, 0, 1])],
            days,
        }
    }
}

/// A CA and a serving certificate, PEM encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertBundle {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a usable PEM certificate: {problem}")]
    Parse { path: PathBuf, problem: String },
    #[error("invalid certificate request: {0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn ca_params(now: OffsetDateTime) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "gpugate CA");
    dn.push(DnType::OrganizationName, "gpugate");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(CA_DAYS);
    p
}

/// A new CA and a serving certificate for `spec`.
pub fn generate(spec: &CertSpec, now: OffsetDateTime) -> Result<CertBundle, CertError> {
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params(now).self_signed(&ca_key)?;
    let ca_cert_pem = ca_cert.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let (cert_pem, key_pem) = sign_serving(spec, &ca_cert_pem, &ca_key_pem, now)?;
    Ok(CertBundle {
        ca_cert_pem,
        ca_key_pem,
        cert_pem,
        key_pem,
    })
}

/// A serving certificate for `spec`, signed by the given CA. Returns the
/// certificate and its key, PEM encoded.
pub fn sign_serving(
    spec: &CertSpec,
    ca_cert_pem: &str,
    ca_key_pem: &str,
    now: OffsetDateTime,
) -> Result<(String, String), CertError> {
    if spec.dns.is_empty() && spec.ips.is_empty() {
        return Err(CertError::Invalid(
            "a serving certificate needs at least one DNS name or IP".into(),
        ));
    }
    if spec.days == 0 {
        return Err(CertError::Invalid("--days must be at least 1".into()));
    }
    if let Some(bad) = spec.dns.iter().find(|d| !is_dns_name(d)) {
        return Err(CertError::Invalid(format!(
            "{bad:?} is not a DNS name: letters, digits and '-' in dot-separated labels (a leading '*.' is allowed)"
        )));
    }
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)?;
    let mut p = CertificateParams::new(spec.dns.clone())?;
    p.subject_alt_names
        .extend(spec.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        spec.dns
            .first()
            .cloned()
            .unwrap_or_else(|| "gpugate".into()),
    );
    p.distinguished_name = dn;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.not_before = now - Duration::minutes(5);
    p.not_after = now + Duration::days(i64::from(spec.days));
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A DNS name a certificate may carry: dot-separated labels of letters,
/// digits and `-` (not at either end), at most 63 bytes each and 253 in all;
/// the first label may be `*`.
pub fn is_dns_name(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The validity window and the SANs of the first certificate in a PEM file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl CertInfo {
    /// Reads a PEM certificate.
    pub fn from_pem(pem: &[u8], path: &Path) -> Result<Self, CertError> {
        let parse = |problem: String| CertError::Parse {
            path: path.to_path_buf(),
            problem,
        };
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| parse(e.to_string()))?;
        let cert = pem.parse_x509().map_err(|e| parse(e.to_string()))?;
        let validity = cert.validity();
        let mut dns = Vec::new();
        let mut ips = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    x509_parser::extensions::GeneralName::DNSName(d) => dns.push(d.to_string()),
                    x509_parser::extensions::GeneralName::IPAddress(b) => {
                        if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                            ips.push(IpAddr::from(v4));
                        } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                            ips.push(IpAddr::from(v6));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(CertInfo {
            not_before: validity.not_before.to_datetime(),
            not_after: validity.not_after.to_datetime(),
            dns,
            ips,
        })
    }

    /// Whether the certificate names everything `spec` asks for.
    pub fn covers(&self, spec: &CertSpec) -> bool {
        spec.dns.iter().all(|d| self.dns.contains(d))
            && spec.ips.iter().all(|i| self.ips.contains(i))
    }

    /// Renew at two thirds of the lifetime (cert-manager's rule).
    pub fn renew_at(&self) -> OffsetDateTime {
        self.not_before + (self.not_after - self.not_before) * 2 / 3
    }
}

/// Writes `contents` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    let tmp = path.with_extension("tmp");
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    let mut f = options.open(&tmp).map_err(io(&tmp))?;
    f.write_all(contents.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

/// Writes a bundle into `dir` (created if needed). The serving pair is
/// written key first, so that a reader polling both files sees either the
/// old pair, a mismatched pair it refuses, or the new pair.
pub fn write_dir(dir: &Path, bundle: &CertBundle) -> Result<(), CertError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    write_atomic(&dir.join(CA_KEY), &bundle.ca_key_pem, true)?;
    write_atomic(&dir.join(CA_CERT), &bundle.ca_cert_pem, false)?;
    write_atomic(&dir.join(TLS_KEY), &bundle.key_pem, true)?;
    write_atomic(&dir.join(TLS_CERT), &bundle.cert_pem, false)
}

/// What [`ensure_dir`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The files were valid, covered the names and were not due for renewal.
    Reused,
    /// A new serving certificate was signed by the existing CA.
    Renewed,
    /// A new CA and serving certificate were made.
    Generated,
}

/// Makes sure `dir` holds a serving certificate for `spec` that is not yet
/// due for renewal, reusing what is there when it can. Returns what it did
/// and when the serving certificate should next be renewed.
pub fn ensure_dir(
    dir: &Path,
    spec: &CertSpec,
    now: OffsetDateTime,
) -> Result<(Ensured, OffsetDateTime), CertError> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).ok();
    let ca = match (read(CA_CERT), read(CA_KEY)) {
        (Some(cert), Some(key)) => {
            let info = CertInfo::from_pem(cert.as_bytes(), &dir.join(CA_CERT)).ok();
            // A CA that expires within a serving certificate's lifetime is replaced.
            let horizon = now + Duration::days(i64::from(spec.days));
            info.filter(|i| i.not_after > horizon).map(|_| (cert, key))
        }
        _ => None,
    };
    let Some((ca_cert_pem, ca_key_pem)) = ca else {
        let bundle = generate(spec, now)?;
        write_dir(dir, &bundle)?;
        let info = CertInfo::from_pem(bundle.cert_pem.as_bytes(), &dir.join(TLS_CERT))?;
        return Ok((Ensured::Generated, info.renew_at()));
    };
    ensure_serving(dir, spec, &ca_cert_pem, &ca_key_pem, now)
}

/// Makes sure `dir` holds a serving certificate for `spec`, signed by the
/// given CA (whose certificate `dir/ca.crt` must be), that is not yet due for
/// renewal; signs and writes a new one otherwise (`ca.key` is not written).
pub fn ensure_serving(
    dir: &Path,
    spec: &CertSpec,
    ca_cert_pem: &str,
    ca_key_pem: &str,
    now: OffsetDateTime,
) -> Result<(Ensured, OffsetDateTime), CertError> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).ok();
    if read(CA_CERT).as_deref() == Some(ca_cert_pem)
        && let (Some(cert), Some(_key)) = (read(TLS_CERT), read(TLS_KEY))
        && let Ok(info) = CertInfo::from_pem(cert.as_bytes(), &dir.join(TLS_CERT))
        && info.covers(spec)
        && now < info.renew_at()
    {
        return Ok((Ensured::Reused, info.renew_at()));
    }
    let (cert_pem, key_pem) = sign_serving(spec, ca_cert_pem, ca_key_pem, now)?;
    fs::create_dir_all(dir).map_err(io(dir))?;
    write_atomic(&dir.join(CA_CERT), ca_cert_pem, false)?;
    write_atomic(&dir.join(TLS_KEY), &key_pem, true)?;
    write_atomic(&dir.join(TLS_CERT), &cert_pem, false)?;
    let info = CertInfo::from_pem(cert_pem.as_bytes(), &dir.join(TLS_CERT))?;
    Ok((Ensured::Renewed, info.renew_at()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gpugate-certs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn spec() -> CertSpec {
        CertSpec::local_and(&["gpugate.gpugate.svc".to_string()], 30)
    }

    #[test]
    fn generated_certificate_covers_the_names() {
        let now = OffsetDateTime::now_utc();
        let b = generate(&spec(), now).unwrap();
        let info = CertInfo::from_pem(b.cert_pem.as_bytes(), Path::new("tls.crt")).unwrap();
        assert!(info.covers(&spec()));
        assert_eq!(info.dns, ["gpugate.gpugate.svc", "localhost"]);
        assert_eq!(info.ips, [IpAddr::from([127, 0, 0, 1])]);
        assert!(info.not_after > now + Duration::days(29));
        let ca = CertInfo::from_pem(b.ca_cert_pem.as_bytes(), Path::new("ca.crt")).unwrap();
        assert!(ca.not_after > now + Duration::days(3000));
    }

    #[test]
    fn ensure_reuses_renews_and_regenerates() {
        let dir = tmpdir("ensure");
        let now = OffsetDateTime::now_utc();
        let (what, renew_at) = ensure_dir(&dir, &spec(), now).unwrap();
        assert_eq!(what, Ensured::Generated);
        assert!(renew_at > now + Duration::days(19) && renew_at < now + Duration::days(21));
        let ca = fs::read_to_string(dir.join(CA_CERT)).unwrap();
        let cert = fs::read_to_string(dir.join(TLS_CERT)).unwrap();

        assert_eq!(ensure_dir(&dir, &spec(), now).unwrap().0, Ensured::Reused);
        assert_eq!(fs::read_to_string(dir.join(TLS_CERT)).unwrap(), cert);

        // Past two thirds of its life: renewed under the same CA.
        let later = now + Duration::days(21);
        assert_eq!(
            ensure_dir(&dir, &spec(), later).unwrap().0,
            Ensured::Renewed
        );
        assert_ne!(fs::read_to_string(dir.join(TLS_CERT)).unwrap(), cert);
        assert_eq!(fs::read_to_string(dir.join(CA_CERT)).unwrap(), ca);

        // A new name: renewed to cover it.
        let more = CertSpec::local_and(&["other.example".to_string()], 30);
        assert_eq!(ensure_dir(&dir, &more, later).unwrap().0, Ensured::Renewed);

        // A broken CA: everything is made anew.
        fs::write(dir.join(CA_CERT), "garbage").unwrap();
        assert_eq!(
            ensure_dir(&dir, &more, later).unwrap().0,
            Ensured::Generated
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn keys_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tmpdir("perm");
        ensure_dir(&dir, &spec(), OffsetDateTime::now_utc()).unwrap();
        for (name, mode) in [(TLS_KEY, 0o600), (CA_KEY, 0o600), (TLS_CERT, 0o644)] {
            let m = fs::metadata(dir.join(name)).unwrap().permissions().mode() & 0o777;
            assert_eq!(m, mode, "{name}");
        }
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn refuses_empty_requests() {
        let now = OffsetDateTime::now_utc();
        let s = CertSpec {
            dns: vec![],
            ips: vec![],
            days: 1,
        };
        assert!(matches!(generate(&s, now), Err(CertError::Invalid(_))));
        let s = CertSpec { days: 0, ..spec() };
        assert!(matches!(generate(&s, now), Err(CertError::Invalid(_))));
        assert!(CertInfo::from_pem(b"nope", Path::new("x")).is_err());
        let s = CertSpec::local_and(&["bad name!".to_string()], 1);
        assert!(matches!(generate(&s, now), Err(CertError::Invalid(_))));
    }

    #[test]
    fn dns_names() {
        for ok in ["localhost", "gpugate.gpugate.svc", "*.example.com", "a-1.b"] {
            assert!(is_dns_name(ok), "{ok}");
        }
        for bad in [
            "",
            "bad name",
            "-a.b",
            "a..b",
            "a.b-",
            "*",
            "x*.y",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_name(bad), "{bad}");
        }
    }
}
