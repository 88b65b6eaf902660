//! Whether gpugate's webhook configurations still send it the pods that ask
//! for the configured GPU resources.
//!
//! The webhooks' `matchConditions` name the resources (by domain in
//! deploy/ and the chart: `r.startsWith('nvidia.com/')`). When the config's
//! `nvidia` resource names change (say, to `hami.io/gpu`) and the webhook
//! configurations do not, pods asking for the new names never reach
//! gpugate: they keep the default scheduler, with no GPU accounting, and
//! nothing fails. So gpugate reads its two webhook configurations (config
//! `webhooks`) at start and every minute and counts, per configuration, the
//! configured GPU resources that none of its webhooks' conditions names
//! (`gpugate_webhook_resources_uncovered`; an error in the log while it is
//! not 0). The conditions are read as text: a resource counts as named when
//! a condition has the name or its domain (`'hami.io/'`) in quotes. A
//! webhook without conditions sees every pod.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::config::Config;

/// How often the webhook configurations are read.
pub const CHECK_EVERY: Duration = Duration::from_secs(60);

/// The resources of `names` that no expression of `conditions` names (in
/// quotes, whole or by its `domain/`). No conditions: none.
pub fn uncovered<'n>(conditions: &[&str], names: &[&'n str]) -> Vec<&'n str> {
    if conditions.is_empty() {
        return Vec::new();
    }
    names
        .iter()
        .copied()
        .filter(|name| {
            let mut needles = vec![name.to_string()];
            if let Some((domain, _)) = name.split_once('/') {
                needles.push(format!("{domain}/"));
            }
            !conditions.iter().any(|c| {
                needles
                    .iter()
                    .any(|n| c.contains(&format!("'{n}'")) || c.contains(&format!("\"{n}\"")))
            })
        })
        .collect()
}

/// What one configuration's webhooks let through: the resources at least
/// one of its webhooks does not see (a resource must reach each webhook).
fn configuration_uncovered<'n>(
    webhooks: &[Option<&Vec<MatchCondition>>],
    names: &[&'n str],
) -> Vec<&'n str> {
    let mut out: Vec<&str> = Vec::new();
    for conditions in webhooks {
        let texts: Vec<&str> = conditions
            .map(|c| c.iter().map(|m| m.expression.as_str()).collect())
            .unwrap_or_default();
        for name in uncovered(&texts, names) {
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

#[derive(Debug, Clone, Default)]
pub struct WebhookScopeMetrics {
    /// By configuration kind: resources not named; -1 when unreadable.
    uncovered: Family<[(&'static str, &'static str); 1], Gauge>,
}

impl WebhookScopeMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_webhook_resources_uncovered",
            "Configured GPU resources that a webhook configuration's matchConditions do not name (pods asking for them bypass gpugate); -1 when it cannot be read",
            self.uncovered.clone(),
        );
    }

    fn set(&self, kind: &'static str, value: i64) {
        self.uncovered
            .get_or_create(&[("configuration", kind)])
            .set(value);
    }
}

/// Each webhook's conditions (`None`: it has none), of the configuration
/// found, if found.
type Conditions = Option<Vec<Option<Vec<MatchCondition>>>>;

/// The webhook configuration `name` of kind `K`, through `hooks`, which
/// lists each of its webhooks' conditions.
async fn conditions<K>(
    client: &kube::Client,
    name: &str,
    hooks: impl FnOnce(K) -> Vec<Option<Vec<MatchCondition>>>,
) -> Result<Conditions, kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: kube::Api<K> = kube::Api::all(client.clone());
    Ok(api.get_opt(name).await?.map(hooks))
}

/// Every GPU resource name of every device kind in `config`: what the
/// webhooks must name. A kind without one of the four (Hygon has no
/// percentage) leaves it `""`, which is no name.
fn resource_names(config: &Config) -> Vec<&str> {
    config
        .device_configs()
        .into_iter()
        .flat_map(|c| c.gpu_resource_names())
        .filter(|n| !n.is_empty())
        .collect()
}

/// Reads both configurations once and reports what they miss.
pub async fn check(client: &kube::Client, config: &Config, metrics: &WebhookScopeMetrics) {
    let names = resource_names(config);
    let (m, v) = (&config.webhooks.mutating, &config.webhooks.validating);
    let found = [
        (
            "mutating",
            m,
            conditions(client, m, |c: MutatingWebhookConfiguration| {
                let hooks = c.webhooks.unwrap_or_default();
                hooks.into_iter().map(|w| w.match_conditions).collect()
            })
            .await,
        ),
        (
            "validating",
            v,
            conditions(client, v, |c: ValidatingWebhookConfiguration| {
                let hooks = c.webhooks.unwrap_or_default();
                hooks.into_iter().map(|w| w.match_conditions).collect()
            })
            .await,
        ),
    ];
    for (kind, name, result) in found {
        match result {
            Ok(Some(hooks)) => {
                let refs: Vec<Option<&Vec<MatchCondition>>> =
                    hooks.iter().map(Option::as_ref).collect();
                let missing = configuration_uncovered(&refs, &names);
                if !missing.is_empty() {
                    tracing::error!(
                        configuration = %name,
                        kind,
                        resources = ?missing,
                        "the webhook configuration's matchConditions do not name these GPU resources of gpugate's config: pods asking for them bypass gpugate; render the webhooks from the same names (docs/operations.md, \"Webhook scope\")"
                    );
                }
                metrics.set(kind, i64::try_from(missing.len()).unwrap_or(i64::MAX));
            }
            Ok(None) => {
                tracing::warn!(configuration = %name, kind, "webhook configuration not found (config webhooks)");
                metrics.set(kind, -1);
            }
            Err(e) => {
                tracing::debug!(configuration = %name, kind, error = %e, "webhook configuration not readable");
                metrics.set(kind, -1);
            }
        }
    }
}

/// Checks at start and every [`CHECK_EVERY`] with the config in force
/// then, until `stop` resolves.
pub async fn watch(
    client: kube::Client,
    config: std::sync::Arc<arc_swap::ArcSwap<Config>>,
    metrics: WebhookScopeMetrics,
    stop: impl std::future::Future<Output = ()>,
) {
    let run = async {
        loop {
            check(&client, &config.load(), &metrics).await;
            tokio::time::sleep(CHECK_EVERY).await;
        }
    };
    tokio::select! {
        () = stop => {}
        () = run => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::resources::DeviceConfig;

    /// deploy/base/webhooks.yaml's conditions, read from the file.
    fn deployed_conditions() -> Vec<String> {
        let text = include_str!("../../deploy/base/webhooks.yaml");
        serde_yaml_ng::Deserializer::from_str(text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .flat_map(|v: serde_json::Value| {
                v["webhooks"][0]["matchConditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|c| c["expression"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn deploy_names_the_default_resources() {
        let conditions = deployed_conditions();
        assert_eq!(conditions.len(), 2);
        let texts: Vec<&str> = conditions.iter().map(String::as_str).collect();
        let nvidia = DeviceConfig::default();
        assert!(uncovered(&texts, &nvidia.gpu_resource_names()).is_empty());
        // Every kind's default names, as `check` lists them.
        let config = crate::config::Config::default();
        let all = resource_names(&config);
        assert!(all.contains(&"hygon.com/dcunum"), "{all:?}");
        assert!(uncovered(&texts, &all).is_empty(), "{all:?}");
        // Renamed in the config but not in the webhooks: every one is missed.
        assert_eq!(
            uncovered(&texts, &["hami.io/gpu", "hami.io/gpumem"]),
            ["hami.io/gpu", "hami.io/gpumem"]
        );
    }

    #[test]
    fn a_resource_counts_when_named_whole_or_by_domain() {
        let by_name = "object.spec.containers.exists(c, 'example.com/vgpu' in c.resources.limits)";
        let by_domain = "r.startsWith(\"example.com/\")";
        for c in [by_name, by_domain] {
            assert!(uncovered(&[c], &["example.com/vgpu"]).is_empty(), "{c}");
        }
        assert_eq!(
            uncovered(&[by_name], &["example.com/vmem"]),
            ["example.com/vmem"]
        );
        // No conditions: the webhook sees every pod.
        assert!(uncovered(&[], &["x.io/gpu"]).is_empty());
        // Each webhook of a configuration must see the resource.
        let seen = vec![MatchCondition {
            name: "a".into(),
            expression: by_domain.into(),
        }];
        let blind = vec![MatchCondition {
            name: "b".into(),
            expression: "true".into(),
        }];
        assert_eq!(
            configuration_uncovered(&[Some(&seen), Some(&blind)], &["example.com/vgpu"]),
            ["example.com/vgpu"]
        );
        assert!(configuration_uncovered(&[Some(&seen), None], &["example.com/vgpu"]).is_empty());
    }
}
