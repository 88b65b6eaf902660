//! `/bind` against the API server: the one place where gpugate commits a
//! placement (design.md). In order:
//!
//! 1. read the pod from the API server (its UID must be the one bound;
//!    a pod already on that node is success, on another node an error);
//! 2. wait for this process's turn on the node (bounded);
//! 3. choose the GPUs on that node against the ledger and reserve them
//!    under the pod's UID, with the namespace quota checked, under the
//!    ledger's write lock;
//! 4. take HAMi's node lock (when a regular container asks for GPUs);
//! 5. patch the pod's allocation annotations and label, with the
//!    resourceVersion read in 1 as precondition (re-read on conflict);
//! 6. create the Binding.
//!
//! A failure at any step undoes the steps before it (annotations removed,
//! node lock released, reservation dropped) and is answered with what
//! failed; a rollback that fails too is named in the answer and counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::cluster::api::{ApiCalls, ApiError};
use crate::cluster::events::{EventSink, PodEvent};
use crate::cluster::lock::{NodeLocks, Taken};
use crate::cluster::{ClusterView, SharedCluster};
use crate::config::Config;
use crate::engine::{Allocation, PodPlan, QuotaAmount};
use crate::hami::keys;
use crate::hami::pod_devices::encode_pod_devices;

use super::filter::quota_check;
use super::gang;
use super::wire::BindingArgs;

/// Re-reads of the pod when its resourceVersion moved under the patch.
const PATCH_ATTEMPTS: usize = 3;
/// Reads of the pod after a `POST binding` without a clear answer.
const OUTCOME_READS: usize = 3;
const OUTCOME_READ_PAUSE: Duration = Duration::from_millis(300);
/// Label values are at most 63 characters; longer node names get only the
/// annotation (HAMi's device plugin reads the annotation).
const LABEL_VALUE_MAX: usize = 63;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BindLabels {
    /// `ok` or `error`.
    pub result: &'static str,
    /// What happened: `bound`, `already_bound`, `node_lock_contention`, …
    pub code: &'static str,
}

/// What bind reports to Prometheus.
#[derive(Debug, Clone)]
pub struct BindMetrics {
    pub outcomes: Family<BindLabels, Counter>,
    /// Time from asking for the node (in-process turn and HAMi's lock) to
    /// holding it, for binds that got it.
    pub lock_wait: Histogram,
    /// Undo steps that failed (each is also in the bind's error).
    pub rollback_failures: Counter,
}

impl Default for BindMetrics {
    fn default() -> Self {
        Self {
            outcomes: Family::default(),
            // 1 ms to about 33 s.
            lock_wait: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            rollback_failures: Counter::default(),
        }
    }
}

/// A bind that did not happen: a stable code and the whole story.
#[derive(Debug, Clone, PartialEq)]
pub struct BindFailure {
    pub code: &'static str,
    pub message: String,
}

impl BindFailure {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn api(who: &str, e: &ApiError) -> Self {
        let code = match e {
            ApiError::NotFound { .. } => "pod_not_found",
            ApiError::Conflict { .. } => "conflict",
            ApiError::Timeout { .. } => "api_timeout",
            _ => "api_error",
        };
        Self::new(code, format!("pod {who}: {e}"))
    }
}

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

/// What the steps so far changed, for the undo.
#[derive(Debug, Default)]
struct Done {
    locked: bool,
    /// The annotation patch was (or may have been) applied.
    annotated: Option<Written>,
}

/// The annotations bind wrote: the pod's resourceVersion after the write,
/// when known.
#[derive(Debug)]
struct Written {
    version: Option<String>,
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
    ) -> Result<(), String> {
        let (binder, cluster) = (self.clone(), cluster.clone());
        let running = RunningBind::start(&self.running);
        // Counted in the task: a bind whose caller gave up counts too.
        let task = tokio::spawn(async move {
            let _running = running;
            let result = binder.transaction(&cluster, &config, &args).await;
            let (result_label, code) = match &result {
                Ok(code) => ("ok", *code),
                Err(f) => ("error", f.code),
            };
            binder
                .metrics
                .outcomes
                .get_or_create(&BindLabels {
                    result: result_label,
                    code,
                })
                .inc();
            result
        });
        match task.await {
            Ok(result) => result.map(|_| ()).map_err(|f| f.message),
            Err(e) => Err(format!("bind task failed: {e}")),
        }
    }

    async fn transaction(
        &self,
        cluster: &SharedCluster,
        config: &Config,
        args: &BindingArgs,
    ) -> Result<&'static str, BindFailure> {
        let (ns, name, node) = (
            args.pod_namespace.as_str(),
            args.pod_name.as_str(),
            args.node.as_str(),
        );
        let who = format!("{ns}/{name}");
        let lock_config = &config.scheduler.node_lock;
        let asked = Instant::now();
        let deadline = asked + Duration::from_secs_f64(lock_config.wait_seconds);
        // Binds of one pod run one after the other: a retry (kube-scheduler
        // gave up on the first) sees what the first did.
        let _pod_turn = self
            .locks
            .local_turn(&format!("pod/{}", args.pod_uid), deadline)
            .await
            .map_err(|_| {
                BindFailure::new(
                    "bind_in_progress",
                    format!("pod {who}: another bind of this pod is still running"),
                )
            })?;
        let pod = self
            .api
            .get_pod(ns, name)
            .await
            .map_err(|e| BindFailure::api(&who, &e))?;
        if pod.metadata.uid.as_deref() != Some(args.pod_uid.as_str()) {
            return Err(BindFailure::new(
                "pod_replaced",
                format!(
                    "pod {who}: its uid is {}, not {} (deleted and created again)",
                    pod.metadata.uid.as_deref().unwrap_or("(none)"),
                    args.pod_uid
                ),
            ));
        }
        if let Some(bound) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            // kube-scheduler retries a bind whose answer it did not get.
            return if bound == node {
                Ok("already_bound")
            } else {
                Err(BindFailure::new(
                    "bound_elsewhere",
                    format!("pod {who}: already bound to node {bound}, not {node}"),
                ))
            };
        }
        let plan = PodPlan::from_pod(&pod, config)
            .map_err(|e| BindFailure::new("invalid_pod", format!("pod {who}: {e}")))?;
        if !plan.request.has_gpus() {
            self.api
                .bind_pod(ns, name, &args.pod_uid, node)
                .await
                .map_err(|e| BindFailure::api(&who, &e))?;
            return Ok("bound_without_gpus");
        }

        let _node_turn = self.locks.local_turn(node, deadline).await.map_err(|e| {
            self.failed(&pod, BindFailure::new(e.code(), format!("pod {who}: {e}")))
        })?;
        let allocation =
            reserve(cluster, config, &pod, &plan, args, &who).map_err(|f| self.failed(&pod, f))?;
        // Should this task die between here and the end, the reservation
        // does not outlive it.
        let guard = ReservationGuard {
            cluster,
            uid: &args.pod_uid,
        };

        let mut done = Done::default();
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
                .acquire(&self.api, node, (ns, name), expiry, deadline)
                .await
            {
                Ok(taken) => {
                    // Even a lock this pod held already (a bind before
                    // that could not release it) is released on failure.
                    done.locked = true;
                    if let Taken::TakenOver(why) = &taken {
                        tracing::warn!(pod = %who, node, %why, "node lock taken over");
                    }
                }
                Err(e) => {
                    let f = BindFailure::new(e.code(), format!("pod {who}: {e}"));
                    return Err(self.undo(cluster, config, &pod, args, done, f).await);
                }
            }
        }
        self.metrics
            .lock_wait
            .observe(asked.elapsed().as_secs_f64());

        let devices = encode_pod_devices(&allocation.to_pod_devices());
        match self.annotate(&pod, args, &allocation, &who).await {
            Ok(version) => done.annotated = Some(Written { version }),
            Err((f, maybe_written)) => {
                if maybe_written {
                    done.annotated = Some(Written { version: None });
                }
                return Err(self.undo(cluster, config, &pod, args, done, f).await);
            }
        }

        if let Err(e) = self.api.bind_pod(ns, name, &args.pod_uid, node).await {
            match self.binding_outcome(&pod, args, &e).await {
                BindingOutcome::Bound => {}
                BindingOutcome::Unknown(why) => {
                    // Undoing a Binding that may have landed would leave a
                    // bound pod without its GPUs: keep everything, and let
                    // the watch show the truth.
                    cluster.write().mark_bound(&args.pod_uid);
                    guard.disarm();
                    let f = BindFailure::new(
                        "binding_unknown",
                        format!(
                            "pod {who}: {e}; whether the Binding landed is unknown ({why}); \
                             the allocation, annotations and node lock are kept"
                        ),
                    );
                    return Err(self.failed(&pod, f));
                }
                BindingOutcome::NotBound => {
                    let f = BindFailure::api(&who, &e);
                    return Err(self.undo(cluster, config, &pod, args, done, f).await);
                }
            }
        }
        cluster.write().mark_bound(&args.pod_uid);
        guard.disarm();
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
        Ok("bound")
    }

    /// After a failed `POST binding`: whether the pod is bound to the node
    /// after all (a lost answer), surely not, or unknown. Reads the pod
    /// again, a few times when the failure left the outcome open.
    async fn binding_outcome(
        &self,
        pod: &Pod,
        args: &BindingArgs,
        error: &ApiError,
    ) -> BindingOutcome {
        let open = error.outcome_unknown();
        let attempts = if open { OUTCOME_READS } else { 1 };
        // The last read's failure; None once a read showed the pod unbound.
        let mut unreadable = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(OUTCOME_READ_PAUSE).await;
            }
            match self.api.get_pod(&args.pod_namespace, &args.pod_name).await {
                Ok(p) if p.metadata.uid != pod.metadata.uid => return BindingOutcome::NotBound,
                Ok(p) => match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    Some(n) if n == args.node => return BindingOutcome::Bound,
                    Some(_) => return BindingOutcome::NotBound,
                    None if !open => return BindingOutcome::NotBound,
                    None => unreadable = None,
                },
                Err(e) if e.is_not_found() => return BindingOutcome::NotBound,
                Err(e) => unreadable = Some(e.to_string()),
            }
        }
        match unreadable {
            // Read unbound, last, after the failure: the Binding did not land.
            None => BindingOutcome::NotBound,
            Some(e) => BindingOutcome::Unknown(e),
        }
    }

    /// Writes the allocation onto the pod, with its resourceVersion as
    /// precondition; on a conflict, reads the pod again and retries if it
    /// is still the same, unbound pod. Returns the pod's resourceVersion
    /// after the write, or the failure and whether the write may have been
    /// applied.
    async fn annotate(
        &self,
        pod: &Pod,
        args: &BindingArgs,
        allocation: &Allocation,
        who: &str,
    ) -> Result<Option<String>, (BindFailure, bool)> {
        let (ns, name) = (args.pod_namespace.as_str(), args.pod_name.as_str());
        let mut version = pod.metadata.resource_version.clone();
        let mut patch = allocation_patch(allocation, Timestamp::now().as_second());
        let mut attempt = 0;
        loop {
            attempt += 1;
            patch["metadata"]["resourceVersion"] = json!(version);
            match self.api.merge_patch_pod(ns, name, &patch).await {
                Ok(p) => return Ok(p.metadata.resource_version),
                Err(e) if e.is_conflict() => {
                    if attempt == PATCH_ATTEMPTS {
                        return Err((
                            BindFailure::new(
                                "conflict",
                                format!(
                                    "pod {who}: changed {PATCH_ATTEMPTS} times while bind wrote its annotations"
                                ),
                            ),
                            false,
                        ));
                    }
                    let fresh = self
                        .api
                        .get_pod(ns, name)
                        .await
                        .map_err(|e| (BindFailure::api(who, &e), false))?;
                    if fresh.metadata.uid != pod.metadata.uid {
                        return Err((
                            BindFailure::new(
                                "pod_replaced",
                                format!("pod {who}: deleted and created again during bind"),
                            ),
                            false,
                        ));
                    }
                    if let Some(n) = fresh.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                        return Err((
                            BindFailure::new(
                                "bound_elsewhere",
                                format!("pod {who}: bound to node {n} by someone else during bind"),
                            ),
                            false,
                        ));
                    }
                    version = fresh.metadata.resource_version;
                }
                // Refused outright: nothing was written. No answer: it may
                // have been.
                Err(e) => return Err((BindFailure::api(who, &e), e.outcome_unknown())),
            }
        }
    }

    /// Removes the annotations this bind wrote, only while the pod is the
    /// same unbound pod and still carries them (never another writer's).
    async fn remove_annotations(
        &self,
        pod: &Pod,
        args: &BindingArgs,
        written: &Written,
        devices: &str,
    ) -> Result<(), ApiError> {
        let (ns, name) = (args.pod_namespace.as_str(), args.pod_name.as_str());
        let mut version = written.version.clone();
        for _ in 0..PATCH_ATTEMPTS {
            let v = match version.take() {
                Some(v) => v,
                None => {
                    let fresh = match self.api.get_pod(ns, name).await {
                        Err(e) if e.is_not_found() => return Ok(()),
                        r => r?,
                    };
                    let ann = fresh.metadata.annotations.as_ref();
                    let ours = fresh.metadata.uid == pod.metadata.uid
                        && fresh.spec.as_ref().is_none_or(|s| s.node_name.is_none())
                        && ann.and_then(|a| a.get(keys::VGPU_NODE)) == Some(&args.node)
                        && ann
                            .and_then(|a| a.get(keys::VGPU_DEVICES_ALLOCATED))
                            .map(String::as_str)
                            == Some(devices);
                    if !ours {
                        return Ok(());
                    }
                    fresh.metadata.resource_version.unwrap_or_default()
                }
            };
            let mut patch = removal_patch();
            patch["metadata"]["resourceVersion"] = json!(v);
            patch["metadata"]["uid"] = json!(pod.metadata.uid);
            match self.api.merge_patch_pod(ns, name, &patch).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::Conflict {
            what: format!("PATCH pod {ns}/{name}"),
            message: "the pod kept changing".to_string(),
        })
    }

    /// Undoes what `done` says was done, drops the reservation (holding the
    /// capacity of its gang group's members again), and returns the failure
    /// with any undo step that failed too.
    async fn undo(
        &self,
        cluster: &SharedCluster,
        config: &Config,
        pod: &Pod,
        args: &BindingArgs,
        done: Done,
        mut failure: BindFailure,
    ) -> BindFailure {
        let (ns, name) = (args.pod_namespace.as_str(), args.pod_name.as_str());
        let mut problems = Vec::new();
        if let Some(written) = &done.annotated {
            let devices = cluster
                .read()
                .held_allocation(&args.pod_uid)
                .map(|a| encode_pod_devices(&a.to_pod_devices()))
                .unwrap_or_default();
            if let Err(e) = self.remove_annotations(pod, args, written, &devices).await {
                problems.push(format!("removing the allocation annotations: {e}"));
            }
        }
        if done.locked
            && let Err(e) = self.locks.release(&self.api, &args.node, ns, name).await
        {
            problems.push(format!("releasing the node lock: {e}"));
        }
        {
            let mut view = cluster.write();
            view.release_reservation(&args.pod_uid);
            if let Ok(Some(label)) = gang::label_of(pod)
                && let Err(e) = gang::hold_for_rest(
                    &mut view,
                    config,
                    &label,
                    &args.pod_uid,
                    Timestamp::now().as_millisecond(),
                )
            {
                tracing::info!(group = %label.key, "gang: no capacity held after a failed bind: {e}");
            }
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

/// What a failed `POST binding` left.
enum BindingOutcome {
    Bound,
    NotBound,
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
            "bind_in_progress",
            format!("pod {who}: another bind of this pod is in progress"),
        ));
    }
    // The pod read unbound (under this pod's turn, so no earlier bind of it
    // is still running): whatever the ledger holds for it (annotations of a
    // bind that failed, HAMi's filter) is on no node.
    view.forget_allocation(&args.pod_uid);
    reserve_in_view(&mut view, config, pod, plan, &args.pod_uid, &args.node, who)
}

/// Chooses the pod's GPUs on `node` against the view (its gang group's
/// holds set aside), checks the namespace quota, reserves them under `uid`,
/// and for a gang member checks that the members still needed fit and
/// holds their capacity. On failure the view is as it was. The caller
/// holds the view's write lock.
pub fn reserve_in_view(
    view: &mut ClusterView,
    config: &Config,
    pod: &Pod,
    plan: &PodPlan,
    uid: &str,
    node: &str,
    who: &str,
) -> Result<Allocation, BindFailure> {
    quota_check(view, pod, plan, config)
        .map_err(|reason| BindFailure::new("quota_exceeded", format!("pod {who}: {reason}")))?;
    let label = gang::label_of(pod)
        .map_err(|reason| BindFailure::new("gang_invalid", format!("pod {who}: {reason}")))?;
    // Members are placed on the state without their group's holds; the
    // holds are recomputed below, or put back on failure.
    let taken = label
        .as_ref()
        .map(|l| view.take_gang_holds(&l.key))
        .unwrap_or_default();
    let restore = |view: &mut ClusterView, taken| {
        if let Some(l) = &label {
            view.restore_gang_holds(&l.key, taken);
        }
    };
    let chosen = view.state().assign(plan, node).map_err(|r| {
        BindFailure::new(
            "does_not_fit",
            format!("pod {who} does not fit on node {node}: {r}"),
        )
    });
    let allocation = match chosen {
        Ok(a) => a,
        Err(f) => {
            restore(view, taken);
            return Err(f);
        }
    };
    // Requests in percent of a GPU's memory have their MiB only now.
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let (quota, _) = view.quota(namespace, &config.nvidia);
    if let Err(e) = quota.check(QuotaAmount::of_allocation(&allocation)) {
        restore(view, taken);
        return Err(BindFailure::new(
            "quota_exceeded",
            format!("pod {who}: ResourceQuotaNotFit ({e})"),
        ));
    }
    if let Err(e) = view.reserve(uid, pod, allocation.clone()) {
        restore(view, taken);
        return Err(BindFailure::new("does_not_fit", format!("pod {who}: {e}")));
    }
    if let Some(l) = &label {
        match gang::hold_for_rest(view, config, l, uid, Timestamp::now().as_millisecond()) {
            Ok(0) => {}
            Ok(held) => {
                tracing::info!(pod = %who, members = held, "gang: capacity held for the rest of the group");
            }
            Err(shortfall) => {
                view.release_reservation(uid);
                restore(view, taken);
                return Err(BindFailure::new(
                    "gang_not_fit",
                    format!("pod {who} on node {node}: {shortfall}"),
                ));
            }
        }
    }
    Ok(allocation)
}

/// HAMi's allocation annotations and label (hami-compat.md 4.1), as a merge
/// patch.
pub fn allocation_patch(allocation: &Allocation, now_unix: i64) -> Value {
    let devices = encode_pod_devices(&allocation.to_pod_devices());
    let now = now_unix.to_string();
    let mut labels = BTreeMap::new();
    if allocation.node.len() <= LABEL_VALUE_MAX {
        labels.insert(keys::VGPU_NODE, json!(allocation.node));
    }
    json!({"metadata": {
        "annotations": {
            keys::VGPU_NODE: allocation.node,
            keys::VGPU_TIME: now,
            keys::VGPU_DEVICES_TO_ALLOCATE: devices,
            keys::VGPU_DEVICES_ALLOCATED: devices,
            keys::BIND_PHASE: "allocating",
            keys::BIND_TIME: now,
        },
        "labels": labels,
    }})
}

/// Removes everything [`allocation_patch`] writes.
pub fn removal_patch() -> Value {
    json!({"metadata": {
        "annotations": {
            keys::VGPU_NODE: null,
            keys::VGPU_TIME: null,
            keys::VGPU_DEVICES_TO_ALLOCATE: null,
            keys::VGPU_DEVICES_ALLOCATED: null,
            keys::BIND_PHASE: null,
            keys::BIND_TIME: null,
        },
        "labels": {keys::VGPU_NODE: null},
    }})
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
    use crate::engine::DeviceGrant;

    #[test]
    fn the_patch_writes_what_hamis_device_plugin_reads() {
        let a = Allocation {
            node: "gpu-1".into(),
            containers: vec![
                vec![],
                vec![DeviceGrant {
                    uuid: "GPU-a".into(),
                    mem_mib: 3000,
                    cores: 30,
                }],
            ],
            kinds: vec![crate::engine::ContainerKind::Init],
        };
        let p = allocation_patch(&a, 1_700_000_000);
        let ann = &p["metadata"]["annotations"];
        assert_eq!(ann["hami.io/vgpu-node"], "gpu-1");
        assert_eq!(
            ann["hami.io/vgpu-devices-allocated"],
            ";GPU-a,NVIDIA,3000,30:;"
        );
        assert_eq!(
            ann["hami.io/vgpu-devices-to-allocate"],
            ann["hami.io/vgpu-devices-allocated"]
        );
        assert_eq!(ann["hami.io/bind-phase"], "allocating");
        assert_eq!(ann["hami.io/bind-time"], "1700000000");
        assert_eq!(ann["hami.io/vgpu-time"], "1700000000");
        assert_eq!(p["metadata"]["labels"]["hami.io/vgpu-node"], "gpu-1");
        // Everything written is removed by the undo.
        let mut pod = json!({"metadata": {"annotations": {"keep": "x"}, "labels": {"app": "y"}}});
        json_patch::merge(&mut pod, &p);
        json_patch::merge(&mut pod, &removal_patch());
        assert_eq!(
            pod,
            json!({"metadata": {"annotations": {"keep": "x"}, "labels": {"app": "y"}}})
        );
    }

    #[test]
    fn a_node_name_too_long_for_a_label_is_only_annotated() {
        let a = Allocation {
            node: "n".repeat(64),
            containers: vec![],
            kinds: vec![],
        };
        let p = allocation_patch(&a, 0);
        assert_eq!(p["metadata"]["labels"], json!({}));
        assert_eq!(
            p["metadata"]["annotations"]["hami.io/vgpu-node"],
            "n".repeat(64)
        );
    }
}
