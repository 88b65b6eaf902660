//! kube-scheduler's extender: `/filter`, `/prioritize`, `/bind` and
//! `/preempt`, answered from the cluster view by the placement engine.
//!
//! Every answer is HTTP 200 with problems in the `Error` field, as
//! kube-scheduler expects; a body that cannot be read is such a problem.

pub mod bind;
pub mod bind_outcome;
pub mod error;
pub mod filter;
pub mod gpu_preempt;
pub mod metrics;
pub mod preempt;
pub mod recent;
pub mod wire;

use std::sync::Arc;

use jiff::Timestamp;

use crate::cluster::events::PodEvent;
use crate::cluster::{SharedCluster, pod_name, pod_namespace};
use crate::config::Config;
use crate::engine::gang;
use crate::placement;

use bind::ApiBinder;
use bind_outcome::{BindCode, BindFailure};
pub use error::ExtenderError;
use recent::RecentPods;
use wire::{
    BindingArgs, BindingResult, ExtenderArgs, FilterResult, HostPriority, PreemptionArgs,
    PreemptionResult,
};

/// How `/bind` commits.
#[derive(Debug)]
pub enum BindMode {
    /// Standalone (`--cluster`): the ledger is the whole truth.
    Ledger,
    /// With an API server: the transaction of [`bind`].
    Api(Arc<ApiBinder>),
}

/// The extender over one cluster view.
#[derive(Debug)]
pub struct Extender {
    cluster: Arc<SharedCluster>,
    recent: RecentPods,
    bind_mode: BindMode,
    /// gpugate's own preemption (with an API server only).
    preemptor: Option<Arc<gpu_preempt::GpuPreemptor>>,
}

impl Extender {
    pub fn new(cluster: Arc<SharedCluster>, bind_mode: BindMode) -> Self {
        let preemptor = matches!(bind_mode, BindMode::Api(_)).then(Arc::default);
        Self {
            cluster,
            recent: RecentPods::default(),
            bind_mode,
            preemptor,
        }
    }

    /// gpugate's own preemption and the binder it works through, when
    /// binding through an API server (its loop is started by `serve`).
    pub fn gpu_preemptor(&self) -> Option<(Arc<gpu_preempt::GpuPreemptor>, Arc<ApiBinder>)> {
        match (&self.preemptor, &self.bind_mode) {
            (Some(p), BindMode::Api(b)) => Some((p.clone(), b.clone())),
            _ => None,
        }
    }

    /// The API-server binder, when binding through one.
    pub fn api_binder(&self) -> Option<&ApiBinder> {
        match &self.bind_mode {
            BindMode::Api(b) => Some(b),
            BindMode::Ledger => None,
        }
    }

    pub fn cluster(&self) -> &Arc<SharedCluster> {
        &self.cluster
    }

    pub fn filter(&self, config: &Config, body: &[u8]) -> filter::Filtered {
        let failed = |e: ExtenderError| filter::Filtered {
            answer: FilterResult::error(e.to_string()),
            rejected: Vec::new(),
        };
        let args = match ExtenderArgs::parse(body) {
            Ok(a) => a,
            Err(e) => return failed(e.into()),
        };
        record_pod(&args.pod);
        if !self.cluster.is_synced() {
            return failed(ExtenderError::NotSynced);
        }
        // A new scheduling cycle of the pod: what its last /prioritize
        // assumed is not its choice any more.
        if let Some(uid) = args.pod.metadata.uid.as_deref()
            && self.cluster.read().is_assumed(uid)
        {
            self.cluster.write().drop_assumed(uid);
        }
        // Bind takes the pod from here (standalone: the only source; with an
        // API server: saves a read per bind). Weighed by its own size, not
        // the body's: a body with many full Node objects must not push
        // every pod out.
        let weight = serde_json::to_vec(&args.pod).map_or(body.len(), |v| v.len());
        self.recent.remember(&args.pod, weight);
        let view = self.cluster.read();
        let result = filter::filter(&view, config, &args, Timestamp::now());
        let unserved_group = args
            .pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| gang::pod_group_unserved(l, view.pod_groups()));
        drop(view);
        if unserved_group && let Some(binder) = self.api_binder() {
            let group = args
                .pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(gang::POD_GROUP_LABEL))
                .cloned()
                .unwrap_or_default();
            binder.events().emit(PodEvent::new(
                &args.pod,
                true,
                "PodGroupNotServed",
                format!(
                    "label {}={group}: the API server does not serve PodGroups (scheduling.x-k8s.io/v1alpha1; install the CRD), so this pod is placed on its own, not as a gang",
                    gang::POD_GROUP_LABEL
                ),
            ));
        }
        if let Some(binder) = self.api_binder()
            && result.answer.feasible_count() == 0
            && result.answer.error.is_empty()
        {
            let rejected = result.rejected.iter().map(|(n, r)| (n.as_str(), r));
            for note in placement::failure_notes(rejected) {
                binder
                    .events()
                    .emit(PodEvent::new(&args.pod, true, "FilteringFailed", note));
            }
            // kube-scheduler may preempt for it; if it does not, gpugate
            // does (see gpu_preempt).
            if config.scheduler.preemption.enabled
                && let Some(p) = &self.preemptor
            {
                let shortage = result
                    .rejected
                    .iter()
                    .filter(|(_, r)| placement::preemption::preemption_may_help(r))
                    .map(|(n, _)| n.clone());
                p.unplaced(&args.pod, shortage);
            }
        }
        result
    }

    pub fn prioritize(
        &self,
        config: &Config,
        body: &[u8],
    ) -> Result<Vec<HostPriority>, ExtenderError> {
        let args = ExtenderArgs::parse(body)?;
        record_pod(&args.pod);
        if !self.cluster.is_synced() {
            return Err(ExtenderError::NotSynced);
        }
        let now = Timestamp::now();
        let prioritized = filter::prioritize(&self.cluster.read(), config, &args, now)?;
        // Held from here until the bind arrives (see placement::assume);
        // only when binding through an API server, where binds wait for
        // their node.
        if let (Some(binder), Some((node, plan))) = (self.api_binder(), &prioritized.likely)
            && placement::assume(
                &mut self.cluster.write(),
                config,
                &args.pod,
                plan,
                node,
                now,
            )
        {
            binder.metrics.assumed.inc();
        }
        Ok(prioritized.scores)
    }

    /// Commits kube-scheduler's choice of node: through the API server (see
    /// [`bind`]), or, standalone, into the ledger only.
    pub async fn bind(&self, config: Arc<Config>, body: &[u8]) -> BindingResult {
        let parsed = BindingArgs::parse(body);
        if let Ok(args) = &parsed {
            record_binding(args);
        }
        let result = match parsed {
            Err(e) => Err(ExtenderError::from(e)),
            Ok(_) if !self.cluster.is_synced() => Err(ExtenderError::NotSynced),
            Ok(args) => match &self.bind_mode {
                BindMode::Api(binder) => {
                    let known = self.recent.get(&args.pod_uid);
                    let result = binder
                        .bind(&self.cluster, config, args.clone(), known)
                        .await;
                    if result.is_ok() {
                        self.recent.forget(&args.pod_uid);
                        if let Some(p) = &self.preemptor {
                            p.handled(&args.pod_uid);
                        }
                        let mut view = self.cluster.write();
                        if view.nomination(&args.pod_uid).is_some() {
                            view.drop_nomination(&args.pod_uid);
                        }
                    }
                    result
                }
                BindMode::Ledger => self.bind_in_ledger(&config, &args),
            },
        };
        BindingResult {
            error: result.err().map(|e| e.to_string()).unwrap_or_default(),
        }
    }

    /// Standalone bind: the GPUs are chosen on the node kube-scheduler
    /// picked, against the current ledger, and recorded there under the
    /// pod's UID. The pod is the one the latest `/filter` call with that UID
    /// carried.
    fn bind_in_ledger(&self, config: &Config, args: &BindingArgs) -> Result<(), ExtenderError> {
        let who = format!("{}/{}", args.pod_namespace, args.pod_name);
        if let Some(answer) = already_bound(&self.cluster.read(), args, &who) {
            return answer;
        }
        let pod = self
            .recent
            .get(&args.pod_uid)
            .ok_or_else(|| ExtenderError::NotFiltered {
                pod: who.clone(),
                uid: args.pod_uid.clone(),
            })?;
        if pod.metadata.name.as_deref() != Some(&args.pod_name)
            || pod_namespace(&pod) != args.pod_namespace
        {
            return Err(ExtenderError::UidMismatch {
                pod: who,
                uid: args.pod_uid.clone(),
                owner: pod_name(&pod),
            });
        }
        let plan = crate::cluster::convert::pod_plan(&pod, config).map_err(|source| {
            ExtenderError::Plan {
                pod: who.clone(),
                source,
            }
        })?;
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
        placement::reserve(
            &mut view,
            config,
            &pod,
            &plan,
            &args.pod_uid,
            &args.node,
            Timestamp::now(),
        )
        .map_err(|e| ExtenderError::Bind(bind::reserve_failure(&e, &who)))?;
        view.settle(&args.pod_uid);
        self.recent.forget(&args.pod_uid);
        tracing::info!(pod = %who, node = %args.node, "bound (ledger)");
        Ok(())
    }

    pub fn preempt(&self, config: &Config, body: &[u8]) -> Result<PreemptionResult, ExtenderError> {
        let args = PreemptionArgs::parse(body)?;
        record_pod(&args.pod);
        if !self.cluster.is_synced() {
            return Err(ExtenderError::NotSynced);
        }
        let result = preempt::preempt(&self.cluster.read(), config, &args)?;
        // kube-scheduler preempts for this pod on a node gpugate kept:
        // gpugate does not. (With no node kept, it may still, elsewhere.)
        if !result.node_name_to_meta_victims.is_empty()
            && let (Some(p), Some(uid)) = (&self.preemptor, args.pod.metadata.uid.as_deref())
        {
            p.handled(uid);
        }
        Ok(result)
    }
}

/// Names the pod in the current span (the extender call's).
fn record_pod(pod: &k8s_openapi::api::core::v1::Pod) {
    let span = tracing::Span::current();
    span.record("namespace", pod_namespace(pod));
    if let Some(name) = pod.metadata.name.as_deref() {
        span.record("pod", name);
    }
    if let Some(uid) = pod.metadata.uid.as_deref() {
        span.record("uid", uid);
    }
}

/// Names the pod and node of a bind in the current span.
fn record_binding(args: &BindingArgs) {
    let span = tracing::Span::current();
    span.record("namespace", args.pod_namespace.as_str());
    span.record("pod", args.pod_name.as_str());
    span.record("uid", args.pod_uid.as_str());
    span.record("node", args.node.as_str());
}

/// The answer to a bind of a pod the ledger already holds: kube-scheduler
/// retries a bind whose answer it did not get, so the same node is success.
fn already_bound(
    view: &crate::cluster::ClusterView,
    args: &BindingArgs,
    who: &str,
) -> Option<Result<(), ExtenderError>> {
    let held = view.held_allocation(&args.pod_uid)?;
    Some(if held.node == args.node {
        Ok(())
    } else {
        Err(ExtenderError::Bind(BindFailure::new(
            BindCode::BoundElsewhere,
            format!(
                "pod {who}: already bound to node {}, not {}",
                held.node, args.node
            ),
        )))
    })
}
