//! kube-scheduler's extender: `/filter`, `/prioritize`, `/bind` and
//! `/preempt`, answered from the cluster view by the placement rules.
//!
//! Each verb reads its arguments, reads the pod once into a
//! [`PodToPlace`], asks the translation in `filter.rs` / `preempt.rs` (or
//! the committer in `crate::bind`) and carries out what the answer says
//! should follow: events, a note for gpugate's own preemption
//! (`crate::controllers::preemption`), `/prioritize`'s assumption.
//!
//! Every answer is HTTP 200 with problems in the `Error` field, as
//! kube-scheduler expects; a body that cannot be read is such a problem.

pub mod error;
pub mod filter;
pub mod fuzzing;
pub mod metrics;
pub mod preempt;
pub mod recent;
pub mod span;
pub mod wire;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::bind::{self, ApiBinder, BindError, Target};
use crate::cluster::events::PodEvent;
use crate::cluster::{SharedCluster, pod_name, pod_namespace};
use crate::config::Config;
use crate::controllers::preemption::Preemptor;
use crate::placement::{self, PodToPlace};

pub use error::ExtenderError;
use filter::{Effect, Filtered};
use recent::RecentPods;
use span::{record_binding, record_pod};
use wire::{
    BindingArgs, BindingResult, ExtenderArgs, HostPriority, PreemptionArgs, PreemptionResult,
};

/// How `/bind` commits.
#[derive(Debug)]
pub enum BindMode {
    /// Standalone (`--cluster`): the ledger is the whole truth.
    Ledger,
    /// With an API server: the transaction of [`crate::bind`].
    Api(Arc<ApiBinder>),
}

/// The extender over one cluster view.
#[derive(Debug)]
pub struct Extender {
    cluster: Arc<SharedCluster>,
    recent: RecentPods,
    bind_mode: BindMode,
    /// gpugate's own preemption (with an API server only), told of pods
    /// left without a node and of pods handled.
    preemptor: Option<Arc<Preemptor>>,
}

impl Extender {
    pub fn new(cluster: Arc<SharedCluster>, bind_mode: BindMode) -> Self {
        Self {
            cluster,
            recent: RecentPods::default(),
            bind_mode,
            preemptor: None,
        }
    }

    /// Tells `preemptor` of the pods `/filter` leaves without a node.
    pub fn with_preemptor(mut self, preemptor: Option<Arc<Preemptor>>) -> Self {
        self.preemptor = preemptor;
        self
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

    /// The pod of a call, read once against the view.
    fn read_pod(&self, pod: Pod, config: &Config) -> Result<PodToPlace, ExtenderError> {
        let who = pod_name(&pod);
        PodToPlace::read(pod, config, &self.cluster.read())
            .map_err(|source| ExtenderError::Plan { pod: who, source })
    }

    pub fn filter(&self, config: &Config, body: &[u8]) -> Filtered {
        let args = match ExtenderArgs::parse(body) {
            Ok(a) => a,
            Err(e) => return Filtered::failed(&e.into()),
        };
        record_pod(&args.pod);
        if let Err(stale) = self.cluster.current() {
            return Filtered::failed(&stale.into());
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
        let ExtenderArgs { pod, candidates } = args;
        let pod = match self.read_pod(pod, config) {
            Ok(p) => p,
            Err(e) => return Filtered::failed(&e),
        };
        let now = Timestamp::now();
        let mut result = filter::filter(&self.cluster.read(), config, &pod, &candidates, now);
        self.carry_out(config, &pod, std::mem::take(&mut result.effects));
        // One node offered: kube-scheduler takes it without /prioritize,
        // so the hold /prioritize would make is made here.
        if let Some(node) = &result.chosen {
            self.assume(config, &pod, node, now);
        }
        result
    }

    /// What `/filter` says should follow its answer, where this extender
    /// can: events and preemption need an API server.
    fn carry_out(&self, config: &Config, pod: &PodToPlace, effects: Vec<Effect>) {
        let Some(binder) = self.api_binder() else {
            return;
        };
        for effect in effects {
            match effect {
                Effect::Event {
                    warning,
                    reason,
                    note,
                } => binder
                    .events()
                    .emit(PodEvent::new(pod.pod(), warning, reason, note)),
                // kube-scheduler may preempt for it; if it does not,
                // gpugate does, or moves pods to make room.
                Effect::Unplaced { shortage } => {
                    if crate::controllers::preemption::may_make_room(config, pod)
                        && let Some(p) = &self.preemptor
                    {
                        p.unplaced(pod, shortage);
                    }
                }
            }
        }
    }

    pub fn prioritize(
        &self,
        config: &Config,
        body: &[u8],
    ) -> Result<Vec<HostPriority>, ExtenderError> {
        let args = ExtenderArgs::parse(body)?;
        record_pod(&args.pod);
        self.cluster.current()?;
        let ExtenderArgs { pod, candidates } = args;
        let pod = self.read_pod(pod, config)?;
        let now = Timestamp::now();
        let prioritized = filter::prioritize(&self.cluster.read(), config, &pod, &candidates, now);
        if let Some(node) = &prioritized.likely {
            self.assume(config, &pod, node, now);
        }
        Ok(prioritized.scores)
    }

    /// Holds the pod's GPUs on `node` until its bind arrives (see
    /// `placement::assume`); only when binding through an API server,
    /// where binds wait for their node.
    fn assume(&self, config: &Config, pod: &PodToPlace, node: &str, now: Timestamp) {
        if let Some(binder) = self.api_binder()
            && placement::assume(&mut self.cluster.write(), config, pod, node, now)
        {
            binder.metrics.assumed.inc();
        }
    }

    /// Commits kube-scheduler's choice of node: through the API server (see
    /// [`crate::bind`]), or, standalone, into the ledger only.
    pub async fn bind(&self, config: Arc<Config>, body: &[u8]) -> BindingResult {
        let parsed = BindingArgs::parse(body);
        if let Ok(args) = &parsed {
            record_binding(args);
        }
        let result = match parsed {
            Err(e) => Err(ExtenderError::from(e)),
            Ok(args) => match self.cluster.current() {
                Err(stale) => Err(stale.into()),
                Ok(()) => {
                    let target = Target {
                        namespace: args.pod_namespace,
                        name: args.pod_name,
                        uid: args.pod_uid,
                        node: args.node,
                    };
                    match &self.bind_mode {
                        BindMode::Api(binder) => self.bind_api(binder, config, target).await,
                        BindMode::Ledger => self.bind_in_ledger(&config, &target),
                    }
                }
            },
        };
        BindingResult {
            error: result.err().map(|e| e.to_string()).unwrap_or_default(),
        }
    }

    async fn bind_api(
        &self,
        binder: &Arc<ApiBinder>,
        config: Arc<Config>,
        target: Target,
    ) -> Result<(), ExtenderError> {
        let known = self.recent.get(&target.uid);
        let uid = target.uid.clone();
        binder
            .bind(&self.cluster, config, target, known)
            .await
            .map_err(|e| match e {
                BindError::Failed(f) => ExtenderError::Bind(f),
                BindError::Task(e) => ExtenderError::BindTask(e),
            })?;
        self.recent.forget(&uid);
        if let Some(p) = &self.preemptor {
            p.handled(&uid);
        }
        let mut view = self.cluster.write();
        if view.nomination(&uid).is_some() {
            view.drop_nomination(&uid);
        }
        Ok(())
    }

    /// Standalone bind of the pod the latest `/filter` call with that UID
    /// carried.
    fn bind_in_ledger(&self, config: &Config, target: &Target) -> Result<(), ExtenderError> {
        let who = target.who();
        if let Some(answer) = bind::ledger::already_bound(&self.cluster.read(), target) {
            return answer.map_err(ExtenderError::Bind);
        }
        let pod = self
            .recent
            .get(&target.uid)
            .ok_or_else(|| ExtenderError::NotFiltered {
                pod: who.clone(),
                uid: target.uid.clone(),
            })?;
        if pod.metadata.name.as_deref() != Some(&target.name)
            || pod_namespace(&pod) != target.namespace
        {
            return Err(ExtenderError::UidMismatch {
                pod: who,
                uid: target.uid.clone(),
                owner: pod_name(&pod),
            });
        }
        let pod = self.read_pod(pod, config)?;
        bind::ledger::bind(&self.cluster, config, &pod, target).map_err(ExtenderError::Bind)?;
        self.recent.forget(&target.uid);
        Ok(())
    }

    pub fn preempt(&self, config: &Config, body: &[u8]) -> Result<PreemptionResult, ExtenderError> {
        let args = PreemptionArgs::parse(body)?;
        record_pod(&args.pod);
        self.cluster.current()?;
        let pod = self.read_pod(args.pod.clone(), config)?;
        let result = preempt::preempt(&self.cluster.read(), config, &pod, &args);
        // kube-scheduler preempts for this pod on a node gpugate kept:
        // gpugate does not. (With no node kept, it may still, elsewhere.)
        if !result.node_name_to_meta_victims.is_empty()
            && let Some(p) = &self.preemptor
            && !pod.uid().is_empty()
        {
            p.handled(pod.uid());
        }
        Ok(result)
    }
}
