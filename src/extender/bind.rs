//! `/bind` against the API server: the one place where gpugate commits a
//! placement (design.md). In order, all within one budget
//! (`scheduler.bindTimeoutSeconds`, below kube-scheduler's `httpTimeout`):
//!
//! 1. the pod: the one kube-scheduler sent to `/filter` (its UID must be
//!    the one bound), read from the API server only when gpugate did not
//!    see it or the ledger says it was bound before;
//! 2. choose the GPUs on the node against the ledger and reserve them
//!    under the pod's UID, with the namespace quota checked, under the
//!    ledger's write lock: from here on `/filter` and `/prioritize` count
//!    them, while the bind waits;
//! 3. wait for this process's turn on the node, then take HAMi's node lock
//!    (when a regular container asks for GPUs), waiting for the watch to
//!    show it free rather than polling the API server;
//! 4. create the Binding, carrying HAMi's allocation annotations and label:
//!    the API server writes them onto the pod with the node in one write
//!    (a pod already bound, or replaced, is refused by the API server).
//!
//! A failure at any step undoes the steps before it (node lock released,
//! reservation dropped) and is answered with what failed; a rollback that
//! fails too is named in the answer and counted.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::cluster::SharedCluster;
use crate::cluster::api::{self, ApiCalls, ApiError};
use crate::cluster::convert::{NUMA_ZONES, encode_numa_zones};
use crate::cluster::events::{EventSink, PodEvent};
use crate::cluster::lock::{NodeLocks, Taken};
use crate::config::Config;
use crate::engine::{Allocation, PodPlan};
use crate::hami::binding::binding_metadata;
use crate::hami::keys;
use crate::hami::pod_devices::encode_pod_devices;
use crate::placement::{self, ReserveError};

pub use super::bind_outcome::{BindCode, BindFailure, BindMetrics};
use super::error::ExtenderError;
use super::wire::BindingArgs;

/// What is kept of a bind's budget for the Binding itself: the node is
/// waited for until then.
const BINDING_TIME: Duration = Duration::from_secs(2);
/// Reads of the pod after a `POST binding` without a clear answer.
const OUTCOME_READS: usize = 3;
const OUTCOME_READ_PAUSE: Duration = Duration::from_millis(300);

/// Binds through the API server.
#[derive(Debug)]
pub struct ApiBinder {
    api: ApiCalls,
    locks: NodeLocks,
    events: EventSink,
    pub metrics: BindMetrics,
    /// Transactions running in their own tasks, which a stop waits for.
    running: Arc<Running>,
}

/// A count of running bind transactions and a wake-up when it reaches 0.
#[derive(Debug, Default)]
struct Running {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Running {
    /// Waits until the count is 0, for at most `within`; whether it is.
    async fn wait_idle(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            // Registered before the check, so a drop to 0 in between is seen.
            let idle = self.idle.notified();
            if self.count.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return false;
            }
        }
    }
}

/// One running transaction; counted until dropped.
struct RunningBind(Arc<Running>);

impl RunningBind {
    fn start(running: &Arc<Running>) -> Self {
        running
            .count
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self(running.clone())
    }
}

impl Drop for RunningBind {
    fn drop(&mut self) {
        if self
            .0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl ApiBinder {
    pub fn new(api: ApiCalls, events: EventSink, metrics: BindMetrics) -> Self {
        Self {
            api,
            locks: NodeLocks::default(),
            events,
            metrics,
            running: Arc::default(),
        }
    }

    /// Waits until no bind transaction runs, for at most `within`; whether
    /// none does. A stop calls it after the listeners have drained: a bind
    /// whose caller gave up still runs to its end (bound, or undone) in its
    /// own task, and must not be cut off half way.
    pub async fn wait_for_binds(&self, within: Duration) -> bool {
        self.running.wait_idle(within).await
    }

    /// The API calls, rate-limited with the binds.
    pub fn api(&self) -> &ApiCalls {
        &self.api
    }

    pub fn events(&self) -> &EventSink {
        &self.events
    }

    /// Runs the transaction in its own task, so that kube-scheduler giving
    /// up on the request (its `httpTimeout`) cannot stop it half way; the
    /// answer's error is empty on success.
    pub async fn bind(
        self: &Arc<Self>,
        cluster: &Arc<SharedCluster>,
        config: Arc<Config>,
        args: BindingArgs,
        known: Option<Pod>,
    ) -> Result<(), ExtenderError> {
        let (binder, cluster) = (self.clone(), cluster.clone());
        let running = RunningBind::start(&self.running);
        // Counted in the task: a bind whose caller gave up counts too.
        // The task logs in the call's span, even after the caller gave up.
        let span = tracing::Span::current();
        let task = tokio::spawn(
            async move {
                let _running = running;
                let result = binder.transaction(&cluster, &config, &args, known).await;
                binder
                    .metrics
                    .record(result.as_ref().map(|c| *c).map_err(|f| f.code));
                result
            }
            .instrument(span),
        );
        match task.await {
            Ok(result) => result.map(|_| ()).map_err(ExtenderError::Bind),
            Err(e) => Err(ExtenderError::BindTask(e.to_string())),
        }
    }

    async fn transaction(
        &self,
        cluster: &SharedCluster,
        config: &Config,
        args: &BindingArgs,
        known: Option<Pod>,
    ) -> Result<BindCode, BindFailure> {
        let asked = Instant::now();
        let budget = Duration::from_secs_f64(config.scheduler.bind_timeout_seconds);
        let deadline = asked + budget;
        api::within(
            deadline,
            self.transaction_by(cluster, config, args, known, asked, deadline),
        )
        .await
    }

    async fn transaction_by(
        &self,
        cluster: &SharedCluster,
        config: &Config,
        args: &BindingArgs,
        known: Option<Pod>,
        asked: Instant,
        deadline: Instant,
    ) -> Result<BindCode, BindFailure> {
        let (ns, name, node) = (
            args.pod_namespace.as_str(),
            args.pod_name.as_str(),
            args.node.as_str(),
        );
        let who = format!("{ns}/{name}");
        let lock_config = &config.scheduler.node_lock;
        // The node may be waited for until the Binding's own time is left.
        let node_deadline = (asked + Duration::from_secs_f64(lock_config.wait_seconds))
            .min(deadline.checked_sub(BINDING_TIME).unwrap_or(asked));
        // Binds of one pod run one after the other: a retry (kube-scheduler
        // gave up on the first) sees what the first did.
        let _pod_turn = self
            .locks
            .local_turn(&format!("pod/{}", args.pod_uid), node_deadline)
            .await
            .map_err(|_| {
                BindFailure::new(
                    BindCode::BindInProgress,
                    format!("pod {who}: another bind of this pod is still running"),
                )
            })?;
        // The pod kube-scheduler filtered is the pod it binds; it is read
        // from the API server only when gpugate did not see it, or when
        // the ledger holds an allocation for it (bound before, perhaps).
        // Anything the ledger holds for the pod but an assumption means an
        // earlier bind got at least as far as its reservation: the API
        // server says whether it bound (a retry must not take the node
        // lock again for a pod the device plugin has already set up).
        let settled = {
            let view = cluster.read();
            view.held_allocation(&args.pod_uid).is_some() && !view.is_assumed(&args.pod_uid)
        };
        let pod = match known.filter(|p| {
            !settled
                && p.metadata.uid.as_deref() == Some(args.pod_uid.as_str())
                && p.metadata.name.as_deref() == Some(name)
                && crate::cluster::pod_namespace(p) == ns
        }) {
            Some(pod) => pod,
            None => self
                .api
                .get_pod(ns, name)
                .await
                .map_err(|e| BindFailure::api(&who, &e))?,
        };
        if pod.metadata.uid.as_deref() != Some(args.pod_uid.as_str()) {
            return Err(replaced(&who, &pod, args));
        }
        if let Some(bound) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            // kube-scheduler retries a bind whose answer it did not get.
            return if bound == node {
                Ok(BindCode::AlreadyBound)
            } else {
                Err(BindFailure::new(
                    BindCode::BoundElsewhere,
                    format!("pod {who}: already bound to node {bound}, not {node}"),
                ))
            };
        }
        let plan = crate::cluster::convert::pod_plan(&pod, config)
            .map_err(|e| BindFailure::new(BindCode::InvalidPod, format!("pod {who}: {e}")))?;
        if !plan.request.has_gpus() {
            return match self.api.bind_pod(ns, name, &args.pod_uid, node, None).await {
                Ok(()) => Ok(BindCode::BoundWithoutGpus),
                Err(e) => match self.binding_outcome(&pod, args, None, &e).await {
                    BindingOutcome::Bound => Ok(BindCode::BoundWithoutGpus),
                    BindingOutcome::NotBound(f) => {
                        Err(f.unwrap_or_else(|| BindFailure::api(&who, &e)))
                    }
                    BindingOutcome::Unknown(why) => Err(BindFailure::new(
                        BindCode::BindingUnknown,
                        format!("pod {who}: {e}; whether the Binding landed is unknown ({why})"),
                    )),
                },
            };
        }

        // The GPUs are reserved as soon as the bind arrives, before it waits
        // for the node: /filter and /prioritize count them from now on, so
        // binds queued behind a node's lock cannot over-book it.
        let allocation =
            reserve(cluster, config, &pod, &plan, args, &who).map_err(|f| self.failed(&pod, f))?;
        // Should this task die between here and the end, the reservation
        // does not outlive it.
        let guard = ReservationGuard {
            cluster,
            uid: &args.pod_uid,
        };
        let mut locked = false;
        let node_turn = self.locks.local_turn(node, node_deadline).await;
        let _node_turn = match node_turn {
            Ok(turn) => turn,
            Err(e) => {
                let f = BindFailure::new(e.code().into(), format!("pod {who}: {e}"));
                return Err(self.undo(cluster, config, &pod, args, locked, f).await);
            }
        };
        // HAMi locks only for GPUs of containers that are not init
        // containers; a sidecar runs like an app container, so it counts.
        let regular_gpus = plan
            .request
            .containers
            .iter()
            .any(|c| c.kind.runs_with_app() && c.gpu.is_some());
        if lock_config.enabled && regular_gpus {
            let expiry = Duration::from_secs(lock_config.expiry_seconds);
            match self
                .locks
                .acquire(&self.api, cluster, node, (ns, name), expiry, node_deadline)
                .await
            {
                Ok(taken) => {
                    // Even a lock this pod held already (a bind before
                    // that could not release it) is released on failure.
                    locked = true;
                    if let Taken::TakenOver(why) = &taken {
                        tracing::warn!(pod = %who, node, %why, "node lock taken over");
                    }
                }
                Err(e) => {
                    let f = BindFailure::new(e.code().into(), format!("pod {who}: {e}"));
                    return Err(self.undo(cluster, config, &pod, args, locked, f).await);
                }
            }
        }
        self.metrics
            .lock_wait
            .observe(asked.elapsed().as_secs_f64());

        // One write: the API server copies the Binding's annotations (and,
        // from 1.35, labels) onto the pod as it assigns the node, so the
        // pod never carries an allocation for a node it is not bound to.
        let pod_devices = allocation.to_pod_devices();
        let devices = encode_pod_devices(&pod_devices);
        let mut metadata =
            binding_metadata(&allocation.node, &pod_devices, Timestamp::now().as_second());
        if let Some(grant) = &allocation.numa {
            metadata["metadata"]["annotations"][NUMA_ZONES] =
                serde_json::Value::String(encode_numa_zones(grant));
        }
        let metadata = &metadata["metadata"];
        if let Err(e) = self
            .api
            .bind_pod(ns, name, &args.pod_uid, node, Some(metadata))
            .await
        {
            match self.binding_outcome(&pod, args, Some(&devices), &e).await {
                BindingOutcome::Bound => {}
                BindingOutcome::Unknown(why) => {
                    // Undoing a Binding that may have landed would leave a
                    // bound pod without its GPUs: keep everything, and let
                    // the watch show the truth.
                    cluster.write().mark_bound(&args.pod_uid);
                    guard.disarm();
                    let f = BindFailure::new(
                        BindCode::BindingUnknown,
                        format!(
                            "pod {who}: {e}; whether the Binding landed is unknown ({why}); \
                             the allocation and node lock are kept"
                        ),
                    );
                    return Err(self.failed(&pod, f));
                }
                BindingOutcome::NotBound(f) => {
                    let f = f.unwrap_or_else(|| BindFailure::api(&who, &e));
                    return Err(self.undo(cluster, config, &pod, args, locked, f).await);
                }
            }
        }
        cluster.write().mark_bound(&args.pod_uid);
        guard.disarm();
        if !self.api.binding_copies_labels().await
            && let Some(labels) = metadata
                .get("labels")
                .filter(|l| l.as_object().is_some_and(|o| !o.is_empty()))
        {
            // An API server before 1.35 drops a Binding's labels: HAMi's
            // `hami.io/vgpu-node` label is written on its own (the device
            // plugin reads the annotations; the label is for people).
            let patch = json!({"metadata": {"labels": labels}});
            if let Err(e) = api::without_deadline(self.api.merge_patch_pod(ns, name, &patch)).await
            {
                tracing::warn!(pod = %who, "bound, but the hami.io/vgpu-node label was not written: {e}");
            }
        }
        tracing::info!(pod = %who, node, devices = %devices, "bound");
        self.events.emit(PodEvent::new(
            &pod,
            false,
            "BindingSucceeded",
            format!(
                "bound to node {node} with GPUs {}",
                gpu_list(&allocation).join(", ")
            ),
        ));
        Ok(BindCode::Bound)
    }

    /// After a failed `POST binding`: whether the pod is bound to the node
    /// by this Binding after all (a lost answer), surely not (with why,
    /// when the pod says more than the error), or unknown. Reads the pod
    /// again, a few times when the failure left the outcome open.
    /// `devices` is the allocation the Binding carried.
    async fn binding_outcome(
        &self,
        pod: &Pod,
        args: &BindingArgs,
        devices: Option<&str>,
        error: &ApiError,
    ) -> BindingOutcome {
        let who = format!("{}/{}", args.pod_namespace, args.pod_name);
        let open = error.outcome_unknown();
        let attempts = if open { OUTCOME_READS } else { 1 };
        // The last read's failure; None once a read showed the pod unbound.
        let mut unreadable = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(OUTCOME_READ_PAUSE).await;
            }
            let read =
                api::without_deadline(self.api.get_pod(&args.pod_namespace, &args.pod_name)).await;
            match read {
                Ok(p) if p.metadata.uid != pod.metadata.uid => {
                    return BindingOutcome::NotBound(Some(replaced(&who, &p, args)));
                }
                Ok(p) => match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    Some(n) if n == args.node => {
                        let carried = p
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(keys::VGPU_DEVICES_ALLOCATED))
                            .map(String::as_str);
                        return if devices.is_none() || carried == devices {
                            BindingOutcome::Bound
                        } else {
                            // Bound here by an earlier Binding, with other
                            // GPUs (or none of gpugate's): not this one.
                            BindingOutcome::NotBound(Some(BindFailure::new(
                                BindCode::BoundElsewhere,
                                format!(
                                    "pod {who}: already bound to node {n} by an earlier Binding, with devices {:?}",
                                    carried.unwrap_or("")
                                ),
                            )))
                        };
                    }
                    Some(n) => {
                        return BindingOutcome::NotBound(Some(BindFailure::new(
                            BindCode::BoundElsewhere,
                            format!("pod {who}: already bound to node {n}, not {}", args.node),
                        )));
                    }
                    None if !open => return BindingOutcome::NotBound(None),
                    None => unreadable = None,
                },
                Err(e) if e.is_not_found() => {
                    return BindingOutcome::NotBound(Some(BindFailure::api(&who, &e)));
                }
                Err(e) => unreadable = Some(e.to_string()),
            }
        }
        match unreadable {
            // Read unbound, last, after the failure: the Binding did not land.
            None => BindingOutcome::NotBound(None),
            Some(e) => BindingOutcome::Unknown(e),
        }
    }

    /// Releases the node lock if this bind took it, drops the reservation
    /// (holding the capacity of its gang group's members again), and
    /// returns the failure with any undo step that failed too. Runs to its
    /// end even when the bind's budget is spent.
    async fn undo(
        &self,
        cluster: &SharedCluster,
        config: &Config,
        pod: &Pod,
        args: &BindingArgs,
        locked: bool,
        mut failure: BindFailure,
    ) -> BindFailure {
        let (ns, name) = (args.pod_namespace.as_str(), args.pod_name.as_str());
        let mut problems = Vec::new();
        if locked
            && let Err(e) =
                api::without_deadline(self.locks.release(&self.api, cluster, &args.node, ns, name))
                    .await
        {
            problems.push(format!("releasing the node lock: {e}"));
        }
        {
            let mut view = cluster.write();
            view.release_reservation(&args.pod_uid);
            placement::reserve::rehold_gang(
                &mut view,
                config,
                pod,
                &args.pod_uid,
                Timestamp::now(),
            );
        }
        if !problems.is_empty() {
            self.metrics
                .rollback_failures
                .inc_by(u64::try_from(problems.len()).unwrap_or(u64::MAX));
            failure.message = format!(
                "{}; undo incomplete: {}",
                failure.message,
                problems.join("; ")
            );
        }
        self.failed(pod, failure)
    }

    fn failed(&self, pod: &Pod, failure: BindFailure) -> BindFailure {
        self.events.emit(PodEvent::new(
            pod,
            true,
            "BindingFailed",
            failure.message.clone(),
        ));
        failure
    }
}

/// The pod under the name is another pod than the one kube-scheduler binds.
fn replaced(who: &str, found: &Pod, args: &BindingArgs) -> BindFailure {
    BindFailure::new(
        BindCode::PodReplaced,
        format!(
            "pod {who}: its uid is {}, not {} (deleted and created again)",
            found.metadata.uid.as_deref().unwrap_or("(none)"),
            args.pod_uid
        ),
    )
}

/// What a failed `POST binding` left.
enum BindingOutcome {
    Bound,
    /// Not bound by this Binding; the failure to answer when the pod told
    /// more than the error did.
    NotBound(Option<BindFailure>),
    Unknown(String),
}

/// Releases an in-flight reservation when a bind ends without saying what
/// became of it (its task panicked or was dropped).
struct ReservationGuard<'a> {
    cluster: &'a SharedCluster,
    uid: &'a str,
}

impl ReservationGuard<'_> {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for ReservationGuard<'_> {
    fn drop(&mut self) {
        self.cluster.write().release_reservation(self.uid);
    }
}

/// Step 3: the GPUs on the node, reserved under the pod's UID.
fn reserve(
    cluster: &SharedCluster,
    config: &Config,
    pod: &Pod,
    plan: &PodPlan,
    args: &BindingArgs,
    who: &str,
) -> Result<Allocation, BindFailure> {
    let mut view = cluster.write();
    if view.is_binding(&args.pod_uid) {
        return Err(BindFailure::new(
            BindCode::BindInProgress,
            format!("pod {who}: another bind of this pod is in progress"),
        ));
    }
    // The pod read unbound (under this pod's turn, so no earlier bind of it
    // is still running): whatever the ledger holds for it (annotations of a
    // bind that failed, HAMi's filter) is on no node.
    view.forget_allocation(&args.pod_uid);
    placement::reserve(
        &mut view,
        config,
        pod,
        plan,
        &args.pod_uid,
        &args.node,
        Timestamp::now(),
    )
    .map_err(|e| reserve_failure(&e, who))
}

/// A reservation that failed, as the failure of the bind of pod `who`.
pub fn reserve_failure(e: &ReserveError, who: &str) -> BindFailure {
    let code = match e {
        ReserveError::Quota(_) => BindCode::QuotaExceeded,
        ReserveError::GangInvalid(_) => BindCode::GangInvalid,
        ReserveError::DoesNotFit { .. } | ReserveError::Ledger(_) => BindCode::DoesNotFit,
        ReserveError::GangNotFit { .. } => BindCode::GangNotFit,
    };
    BindFailure::new(code, e.message(who))
}

/// `uuid` of every GPU granted, in container order, without repeats.
fn gpu_list(allocation: &Allocation) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for d in allocation.containers.iter().flatten() {
        if !out.contains(&d.uuid.as_str()) {
            out.push(&d.uuid);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_waits_for_running_binds_within_its_drain() {
        let running = Arc::new(Running::default());
        assert!(running.wait_idle(Duration::ZERO).await, "none running");
        let first = RunningBind::start(&running);
        let second = RunningBind::start(&running);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(first);
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(second);
        });
        let started = Instant::now();
        assert!(running.wait_idle(Duration::from_secs(5)).await);
        assert!(started.elapsed() >= Duration::from_millis(90));
        // One that never ends: the wait gives up at its deadline.
        let _stuck = RunningBind::start(&running);
        assert!(!running.wait_idle(Duration::from_millis(50)).await);
    }
}
