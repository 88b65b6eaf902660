//! Which replica leads, for HAMi's `hami_scheduler_is_leader`: gpugate
//! has no election of its own (every replica answers webhooks and the
//! extender); the replica that leads is the one whose kube-scheduler holds
//! its Lease (`scheduler.leaderLease`), since only that kube-scheduler
//! calls its extender. kube-scheduler names itself `<hostname>_<uuid>`,
//! and in a pod the hostname is the pod's name, which gpugate reads from
//! `POD_NAME` (deploy/ sets it), else `HOSTNAME`.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use prometheus_client::metrics::gauge::Gauge;

use crate::config::Config;

/// How often the Lease is read.
pub const PERIOD: Duration = Duration::from_secs(5);

/// Whether a Lease held by `holder` is held by the kube-scheduler beside
/// the instance `identity` (`<identity>_<uuid>`, or `identity` itself).
pub fn holds(holder: &str, identity: &str) -> bool {
    !identity.is_empty()
        && (holder == identity
            || holder
                .strip_prefix(identity)
                .is_some_and(|rest| rest.starts_with('_')))
}

/// This instance's name, as kube-scheduler's identity begins.
pub fn identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// Sets `gauge` every [`PERIOD`] until `stop`: 1 while the Lease names
/// this instance's kube-scheduler (or no Lease is configured), 0 while it
/// names another, is missing or cannot be read.
pub async fn watch_lease(
    client: Client,
    config: Arc<ArcSwap<Config>>,
    gauge: Gauge,
    stop: impl std::future::Future<Output = ()>,
) {
    let me = identity();
    let mut ticks = crate::supervisor::Ticks::new(PERIOD, stop);
    while ticks.next().await {
        let config = config.load_full();
        let Some((namespace, name)) = config.scheduler.leader_lease() else {
            gauge.set(1);
            continue;
        };
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let leads = match tokio::time::timeout(PERIOD, leases.get_opt(name)).await {
            Ok(Ok(lease)) => lease
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .is_some_and(|holder| holds(&holder, &me)),
            Ok(Err(e)) => {
                tracing::debug!(lease = %format!("{namespace}/{name}"), error = %e, "leader lease not read");
                false
            }
            Err(_) => false,
        };
        gauge.set(i64::from(leads));
    }
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn kube_schedulers_identity_is_the_pods_name_and_a_uuid() {
        assert!(holds(
            "gpugate-7d9f-abcde_3f2a9c1e-0000",
            "gpugate-7d9f-abcde"
        ));
        assert!(holds("gpugate-7d9f-abcde", "gpugate-7d9f-abcde"));
        assert!(!holds("gpugate-7d9f-abcdex_3f2a", "gpugate-7d9f-abcde"));
        assert!(!holds("other_3f2a", "gpugate-7d9f-abcde"));
        assert!(!holds("gpugate_1", ""));
    }
}
