//! kube-scheduler's extender: `/filter`, `/prioritize`, `/bind` and
//! `/preempt`, answered from the cluster view by the placement engine.
//!
//! Every answer is HTTP 200 with problems in the `Error` field, as
//! kube-scheduler expects; a body that cannot be read is such a problem.

pub mod filter;
pub mod preempt;
pub mod recent;
pub mod wire;

use std::sync::Arc;

use crate::cluster::{SharedCluster, pod_name};
use crate::config::Config;
use crate::engine::{PodPlan, QuotaAmount};

use recent::RecentPods;
use wire::{
    BindingArgs, BindingResult, ExtenderArgs, FilterResult, HostPriority, PreemptionArgs,
    PreemptionResult,
};

/// How `/bind` commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// Standalone (`--cluster`): the ledger is the whole truth.
    Ledger,
    /// With an API server, bind must write the pod's annotations, take the
    /// node lock and create the Binding; until that transaction exists,
    /// `/bind` refuses rather than record GPUs for a pod that stays Pending.
    ApiUnsupported,
}

/// The extender over one cluster view.
#[derive(Debug)]
pub struct Extender {
    cluster: Arc<SharedCluster>,
    recent: RecentPods,
    bind_mode: BindMode,
}

impl Extender {
    pub fn new(cluster: Arc<SharedCluster>, bind_mode: BindMode) -> Self {
        Self {
            cluster,
            recent: RecentPods::default(),
            bind_mode,
        }
    }

    pub fn cluster(&self) -> &Arc<SharedCluster> {
        &self.cluster
    }

    pub fn filter(&self, config: &Config, body: &[u8]) -> FilterResult {
        let args = match ExtenderArgs::parse(body) {
            Ok(a) => a,
            Err(e) => return FilterResult::error(e.to_string()),
        };
        if !self.cluster.is_synced() {
            return FilterResult::error("gpugate: cluster state not synced yet");
        }
        self.recent.remember(&args.pod);
        filter::filter(&self.cluster.read(), config, &args)
    }

    pub fn prioritize(&self, config: &Config, body: &[u8]) -> Result<Vec<HostPriority>, String> {
        let args = ExtenderArgs::parse(body).map_err(|e| e.to_string())?;
        if !self.cluster.is_synced() {
            return Err("gpugate: cluster state not synced yet".to_string());
        }
        filter::prioritize(&self.cluster.read(), config, &args)
    }

    /// Standalone bind: the GPUs are chosen on the node kube-scheduler
    /// picked, against the current ledger, and recorded there under the
    /// pod's UID. The pod is the one the latest `/filter` call with that UID
    /// carried.
    pub fn bind(&self, config: &Config, body: &[u8]) -> BindingResult {
        if self.bind_mode == BindMode::ApiUnsupported {
            return BindingResult {
                error: "gpugate: /bind against an API server is not available in this version; \
                        configure kube-scheduler without bindVerb (filter and prioritize work)"
                    .to_string(),
            };
        }
        let result = BindingArgs::parse(body)
            .map_err(|e| e.to_string())
            .and_then(|args| self.bind_in_ledger(config, &args));
        BindingResult {
            error: result.err().unwrap_or_default(),
        }
    }

    fn bind_in_ledger(&self, config: &Config, args: &BindingArgs) -> Result<(), String> {
        let who = format!("{}/{}", args.pod_namespace, args.pod_name);
        if let Some(answer) = already_bound(&self.cluster.read(), args, &who) {
            return answer;
        }
        let pod = self.recent.get(&args.pod_uid).ok_or_else(|| {
            format!(
                "pod {who} (uid {}): not seen in a filter call; gpugate binds only pods it filtered",
                args.pod_uid
            )
        })?;
        if pod.metadata.name.as_deref() != Some(&args.pod_name)
            || pod.metadata.namespace.as_deref().unwrap_or("default") != args.pod_namespace
        {
            return Err(format!(
                "pod {who}: uid {} belongs to pod {}",
                args.pod_uid,
                pod_name(&pod)
            ));
        }
        let plan = PodPlan::from_pod(&pod, config).map_err(|e| format!("pod {who}: {e}"))?;
        if !plan.request.has_gpus() {
            // Nothing for the ledger to hold.
            self.recent.forget(&args.pod_uid);
            return Ok(());
        }
        let mut view = self.cluster.write();
        // A concurrent bind of the same pod may have won meanwhile.
        if let Some(answer) = already_bound(&view, args, &who) {
            return answer;
        }
        if let Err(reason) = filter::quota_check(&view, &pod, &plan, config) {
            return Err(format!("pod {who}: {reason}"));
        }
        let allocation = view
            .state()
            .assign(&plan, &args.node)
            .map_err(|r| format!("pod {who} does not fit on node {}: {r}", args.node))?;
        // Requests in percent of a GPU's memory have their MiB only now.
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let (quota, _) = view.quota(namespace, &config.nvidia);
        if let Err(e) = quota.check(QuotaAmount::of_allocation(&allocation)) {
            return Err(format!("pod {who}: ResourceQuotaNotFit ({e})"));
        }
        view.reserve(&args.pod_uid, &pod, allocation)
            .map_err(|e| format!("pod {who}: {e}"))?;
        self.recent.forget(&args.pod_uid);
        tracing::info!(pod = %who, node = %args.node, "bound (ledger)");
        Ok(())
    }

    pub fn preempt(&self, config: &Config, body: &[u8]) -> Result<PreemptionResult, String> {
        let args = PreemptionArgs::parse(body).map_err(|e| e.to_string())?;
        if !self.cluster.is_synced() {
            return Err("gpugate: cluster state not synced yet".to_string());
        }
        preempt::preempt(&self.cluster.read(), config, &args)
    }
}

/// The answer to a bind of a pod the ledger already holds: kube-scheduler
/// retries a bind whose answer it did not get, so the same node is success.
fn already_bound(
    view: &crate::cluster::ClusterView,
    args: &BindingArgs,
    who: &str,
) -> Option<Result<(), String>> {
    let held = view.held_allocation(&args.pod_uid)?;
    Some(if held.node == args.node {
        Ok(())
    } else {
        Err(format!(
            "pod {who}: already bound to node {}, not {}",
            held.node, args.node
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_with_an_api_server_refuses_instead_of_pretending() {
        let x = Extender::new(
            Arc::new(SharedCluster::new(Default::default(), true)),
            BindMode::ApiUnsupported,
        );
        let r = x.bind(
            &Config::default(),
            br#"{"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":"n"}"#,
        );
        assert!(r.error.contains("not available"), "{}", r.error);
        assert_eq!(x.cluster().read().counts().allocations, 0);
    }
}
