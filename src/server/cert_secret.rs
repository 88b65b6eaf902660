//! Self-managed in-cluster certificates (`serve --self-signed-secret
//! NAMESPACE/NAME`): no certificate Job and no cert-manager.
//!
//! - The CA lives in a Secret (`ca.crt`, `ca.key`, and `ca-previous.crt`
//!   after a CA rotation). The first replica to start creates it; the others
//!   lose the create race (409) and read it.
//! - Every pass writes the CA bundle (current and previous CA) into the
//!   `caBundle` of every webhook of gpugate's MutatingWebhookConfiguration
//!   and ValidatingWebhookConfiguration *before* a new serving certificate is
//!   written, so kube-apiserver trusts a certificate before it is served.
//! - Each replica signs its own serving certificate with that CA into its
//!   certificate directory (an emptyDir), where the file watcher puts it in
//!   service; it is renewed at two thirds of its life.
//!
//! Passes repeat every minute, so a webhook configuration re-applied with an
//! empty `caBundle` is repaired without a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

use crate::config::WebhookConfigNames;

use super::certs::{self, CertError, CertInfo, CertSpec, Ensured};

pub const PREVIOUS_CA_CERT: &str = "ca-previous.crt";

/// `NAMESPACE/NAME` of the Secret that holds the CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    pub namespace: String,
    pub name: String,
}

impl FromStr for SecretRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((ns, name))
                if !ns.is_empty()
                    && !name.is_empty()
                    && !name.contains('/')
                    && certs::is_dns_name(ns)
                    && certs::is_dns_name(name) =>
            {
                Ok(SecretRef {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(format!(
                "{s:?} is not NAMESPACE/NAME (lower-case DNS names, e.g. gpugate/gpugate-ca)"
            )),
        }
    }
}

impl std::fmt::Display for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CertSecretError {
    #[error("Secret {secret}: {source}")]
    Secret {
        secret: SecretRef,
        source: kube::Error,
    },
    #[error("{kind} {name}: {source}")]
    Webhook {
        kind: &'static str,
        name: String,
        source: kube::Error,
    },
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("Secret {0}: changed by someone else twice in a row; will retry")]
    Contended(SecretRef),
}

/// The CA as read from (or written to) the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
    pub previous_cert_pem: Option<String>,
}

impl Ca {
    /// What clients must trust: the current CA, and the previous one while
    /// replicas may still serve certificates it signed.
    pub fn bundle(&self) -> String {
        let mut b = self.cert_pem.clone();
        if let Some(prev) = &self.previous_cert_pem {
            if !b.ends_with('\n') {
                b.push('\n');
            }
            b.push_str(prev);
        }
        b
    }
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    /// Whether the CA was made (first start, or rotation).
    pub ca_made: bool,
    /// Webhooks whose `caBundle` was written, as `kind/name/webhook`.
    pub patched: Vec<String>,
    /// Webhook configurations that do not exist (yet).
    pub missing: Vec<String>,
    pub serving: Ensured,
    pub renew_at: OffsetDateTime,
}

/// Keeps the CA Secret, both webhook configurations' `caBundle` and the
/// local serving certificate in step.
pub struct InClusterCerts {
    client: Client,
    secret: SecretRef,
    spec: CertSpec,
    dir: PathBuf,
}

impl InClusterCerts {
    pub fn new(client: Client, secret: SecretRef, spec: CertSpec, dir: PathBuf) -> Self {
        Self {
            client,
            secret,
            spec,
            dir,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One pass: the CA, then the `caBundle`s, then the serving certificate.
    pub async fn ensure(
        &self,
        names: &WebhookConfigNames,
        now: OffsetDateTime,
    ) -> Result<Pass, CertSecretError> {
        let (ca, ca_made) = self.ca(now).await?;
        let bundle = ca.bundle();
        let mut patched = Vec::new();
        let mut missing = Vec::new();
        for (kind, name, result) in [
            (
                "MutatingWebhookConfiguration",
                &names.mutating,
                self.patch_bundle::<MutatingWebhookConfiguration>(&names.mutating, &bundle)
                    .await,
            ),
            (
                "ValidatingWebhookConfiguration",
                &names.validating,
                self.patch_bundle::<ValidatingWebhookConfiguration>(&names.validating, &bundle)
                    .await,
            ),
        ] {
            match result {
                Ok(Some(hooks)) => {
                    patched.extend(hooks.into_iter().map(|h| format!("{kind}/{name}/{h}")))
                }
                Ok(None) => missing.push(format!("{kind}/{name}")),
                Err(source) => {
                    return Err(CertSecretError::Webhook {
                        kind,
                        name: name.clone(),
                        source,
                    });
                }
            }
        }
        let (serving, renew_at) =
            certs::ensure_serving(&self.dir, &self.spec, &ca.cert_pem, &ca.key_pem, now)?;
        Ok(Pass {
            ca_made,
            patched,
            missing,
            serving,
            renew_at,
        })
    }

    /// The CA from the Secret; made and stored when the Secret is absent or
    /// holds no CA that outlives a serving certificate.
    async fn ca(&self, now: OffsetDateTime) -> Result<(Ca, bool), CertSecretError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.secret.namespace);
        let err = |source| CertSecretError::Secret {
            secret: self.secret.clone(),
            source,
        };
        let horizon = now + Duration::days(i64::from(self.spec.days));
        for _attempt in 0..2 {
            let existing = api.get_opt(&self.secret.name).await.map_err(err)?;
            let current = existing.as_ref().and_then(read_ca);
            if let Some(ca) = &current
                && CertInfo::from_pem(ca.cert_pem.as_bytes(), Path::new(certs::CA_CERT))
                    .is_ok_and(|i| i.not_after > horizon)
            {
                return Ok((ca.clone(), false));
            }
            let made = certs::generate(&self.spec, now)?;
            // The old CA stays trusted while certificates it signed may
            // still be served, but only if it is a CA that still works.
            let previous = current.map(|c| c.cert_pem).filter(|pem| {
                CertInfo::from_pem(pem.as_bytes(), Path::new(certs::CA_CERT))
                    .is_ok_and(|i| i.not_after > now)
            });
            let ca = Ca {
                cert_pem: made.ca_cert_pem,
                key_pem: made.ca_key_pem,
                previous_cert_pem: previous,
            };
            let result = match existing {
                None => {
                    api.create(&PostParams::default(), &self.new_secret(&ca))
                        .await
                }
                // Only the CA keys change: labels, annotations, owners and
                // the Secret's type (immutable) are kept. Its
                // resourceVersion makes the replace fail if another replica
                // rotated first; then its CA is read and used.
                Some(mut old) => {
                    put_ca(&mut old, &ca);
                    api.replace(&self.secret.name, &PostParams::default(), &old)
                        .await
                }
            };
            match result {
                Ok(_) => return Ok((ca, true)),
                Err(kube::Error::Api(status))
                    if status.is_conflict() || status.is_already_exists() =>
                {
                    continue;
                }
                Err(e) => return Err(err(e)),
            }
        }
        Err(CertSecretError::Contended(self.secret.clone()))
    }

    fn new_secret(&self, ca: &Ca) -> Secret {
        let mut s = Secret {
            type_: Some("Opaque".to_string()),
            ..Default::default()
        };
        s.metadata.name = Some(self.secret.name.clone());
        s.metadata.namespace = Some(self.secret.namespace.clone());
        s.metadata.labels = Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_string(),
            "gpugate".to_string(),
        )]));
        put_ca(&mut s, ca);
        s
    }

    /// Writes `bundle` into every webhook of the named configuration whose
    /// `caBundle` differs. `None` when the configuration does not exist.
    /// The JSON patch tests each webhook's name at its index, so a
    /// concurrent edit that reorders webhooks fails the patch instead of
    /// writing the wrong entry.
    async fn patch_bundle<K>(
        &self,
        name: &str,
        bundle: &str,
    ) -> Result<Option<Vec<String>>, kube::Error>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let Some(obj) = api.get_opt(name).await? else {
            return Ok(None);
        };
        let value = serde_json::to_value(&obj).map_err(kube::Error::SerdeError)?;
        let (ops, hooks) = bundle_patch(&value, bundle);
        if !ops.is_empty() {
            let patch: json_patch::Patch =
                serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
            api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await?;
        }
        Ok(Some(hooks))
    }
}

/// Writes the CA into a Secret's data, leaving its other keys alone.
fn put_ca(secret: &mut Secret, ca: &Ca) {
    let data = secret.data.get_or_insert_with(BTreeMap::new);
    data.insert(
        certs::CA_CERT.to_string(),
        ByteString(ca.cert_pem.clone().into_bytes()),
    );
    data.insert(
        certs::CA_KEY.to_string(),
        ByteString(ca.key_pem.clone().into_bytes()),
    );
    match &ca.previous_cert_pem {
        Some(prev) => {
            data.insert(
                PREVIOUS_CA_CERT.to_string(),
                ByteString(prev.clone().into_bytes()),
            );
        }
        None => {
            data.remove(PREVIOUS_CA_CERT);
        }
    }
}

fn read_ca(secret: &Secret) -> Option<Ca> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .filter(|s| !s.trim().is_empty())
    };
    Some(Ca {
        cert_pem: text(certs::CA_CERT)?,
        key_pem: text(certs::CA_KEY)?,
        previous_cert_pem: text(PREVIOUS_CA_CERT),
    })
}

/// JSON patch operations that set `caBundle` (base64 of `bundle`) on every
/// webhook of a configuration (as JSON) that lacks it; and those webhooks'
/// names.
pub fn bundle_patch(config: &Value, bundle: &str) -> (Vec<Value>, Vec<String>) {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    let mut ops = Vec::new();
    let mut names = Vec::new();
    let hooks = config
        .get("webhooks")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (i, hook) in hooks.iter().enumerate() {
        let current = hook
            .pointer("/clientConfig/caBundle")
            .and_then(Value::as_str);
        if current == Some(encoded.as_str()) {
            continue;
        }
        let name = hook.get("name").and_then(Value::as_str).unwrap_or("");
        ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}));
        ops.push(json!({
            "op": "add",
            "path": format!("/webhooks/{i}/clientConfig/caBundle"),
            "value": encoded,
        }));
        names.push(name.to_string());
    }
    (ops, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_refs_are_namespace_slash_name() {
        assert_eq!(
            "gpugate/gpugate-ca".parse::<SecretRef>(),
            Ok(SecretRef {
                namespace: "gpugate".into(),
                name: "gpugate-ca".into()
            })
        );
        for bad in ["gpugate", "/x", "x/", "a/b/c", "A B/c", ""] {
            assert!(bad.parse::<SecretRef>().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_webhooks_with_a_different_bundle_are_patched() {
        use base64::Engine as _;
        let good = base64::engine::general_purpose::STANDARD.encode("PEM");
        let config = json!({"webhooks": [
            {"name": "a.gpugate.io", "clientConfig": {"caBundle": good}},
            {"name": "b.gpugate.io", "clientConfig": {"service": {"name": "gpugate"}}},
            {"name": "c.gpugate.io", "clientConfig": {"caBundle": "b2xk"}},
        ]});
        let (ops, names) = bundle_patch(&config, "PEM");
        assert_eq!(names, ["b.gpugate.io", "c.gpugate.io"]);
        assert_eq!(ops.len(), 4);
        let mut patched = config.clone();
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
        for i in 0..3 {
            assert_eq!(patched["webhooks"][i]["clientConfig"]["caBundle"], good);
        }
        assert_eq!(bundle_patch(&patched, "PEM").0, Vec::<Value>::new());
        assert_eq!(bundle_patch(&json!({}), "PEM").0, Vec::<Value>::new());
    }

    #[test]
    fn the_bundle_carries_the_previous_ca_after_rotation() {
        let ca = Ca {
            cert_pem: "NEW".into(),
            key_pem: "K".into(),
            previous_cert_pem: Some("OLD\n".into()),
        };
        assert_eq!(ca.bundle(), "NEW\nOLD\n");
    }
}
