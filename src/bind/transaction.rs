//! One bind's transaction, in steps, all within one budget
//! (`scheduler.bindTimeoutSeconds`, below kube-scheduler's `httpTimeout`):
//!
//! 1. this pod's turn: binds of one pod run one after the other, so a
//!    retry sees what the first did;
//! 2. the pod: the one kube-scheduler sent to `/filter` (its UID must be
//!    the one bound), read from the API server only when gpugate did not
//!    see it or the ledger says it was bound before; read once into a
//!    [`PodToPlace`];
//! 3. reserve: the GPUs on the node chosen against the ledger and
//!    reserved under the pod's UID, with the namespace quota and gang
//!    checked, under the ledger's write lock: from here on `/filter` and
//!    `/prioritize` count them, while the bind waits;
//! 4. the node: this process's turn on it, then HAMi's node lock (when
//!    any container asks for GPUs, init containers included), waiting for
//!    the watch to show it free rather than polling the API server;
//! 5. the Binding, carrying HAMi's allocation annotations and label: the
//!    API server writes them onto the pod with the node in one write (a
//!    pod already bound, or replaced, is refused by the API server).
//!
//! What steps 3 and 4 took is recorded in an [`Undo`] guard: a failure
//! after them runs it (node lock released, reservation dropped, gang
//! holds put back), and a failed undo step is named in the answer and
//! counted; success (or a Binding whose outcome is unknown) keeps all.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::time::Instant;

use crate::cluster::api::{self, ApiError};
use crate::cluster::lock::{LocalTurn, LockError, Taken};
use crate::cluster::pod_annotations::BindingAnnotations;
use crate::devices::NodeLockStyle;
use crate::engine::Allocation;
use crate::placement::{self, PodToPlace, ReserveError};

use super::Target;
use super::outcome::{BindCode, BindFailure};
use super::undo::{Bind, Undo};

/// What is kept of a bind's budget for the Binding itself: the node is
/// waited for until then.
const BINDING_TIME: Duration = Duration::from_secs(2);
/// Reads of the pod after a `POST binding` without a clear answer.
const OUTCOME_READS: usize = 3;
const OUTCOME_READ_PAUSE: Duration = Duration::from_millis(300);

/// One bind.
pub(super) struct Transaction<'a> {
    pub bind: Bind<'a>,
    /// When kube-scheduler asked.
    pub asked: Instant,
    /// The end of the whole budget.
    pub deadline: Instant,
}

/// The pod as step 2 found it.
enum Read {
    /// Not bound yet: to be placed.
    Unbound(Box<Pod>),
    /// Bound already (kube-scheduler retried a bind that landed).
    Done(BindCode),
}

/// Why step 5 did not bind the pod.
enum NotWritten {
    /// Whether the Binding landed is unknown (why).
    Unknown(String),
    Failed(BindFailure),
}

/// What a failed `POST binding` left.
enum BindingOutcome {
    Bound,
    /// Not bound by this Binding; the failure to answer when the pod told
    /// more than the error did.
    NotBound(Option<BindFailure>),
    Unknown(String),
}

impl Transaction<'_> {
    /// The steps in order; the answer's code, or what failed.
    pub async fn run(self, known: Option<Pod>) -> Result<BindCode, BindFailure> {
        let who = self.bind.target.who();
        let node_deadline = self.node_deadline();
        let _pod_turn = self.pod_turn(node_deadline).await?;
        let pod = match self.read_pod(known).await? {
            Read::Done(code) => return Ok(code),
            Read::Unbound(pod) => *pod,
        };
        let pod = PodToPlace::read(pod, self.bind.config, &self.bind.cluster.read())
            .map_err(|e| BindFailure::new(BindCode::InvalidPod, format!("pod {who}: {e}")))?;
        if !pod.has_gpus() {
            return self.bind_without_gpus(&pod).await;
        }
        // The GPUs are reserved as soon as the bind arrives, before it waits
        // for the node: /filter and /prioritize count them from now on, so
        // binds queued behind a node's lock cannot over-book it.
        let (allocation, mut undo) = self.reserve(&pod)?;
        let _node_turn = match self.node_turn(node_deadline, &pod, &mut undo).await {
            Ok(turn) => turn,
            Err(f) => return Err(undo.run(f).await),
        };
        self.bind
            .binder
            .metrics
            .lock_wait
            .observe(self.asked.elapsed().as_secs_f64());
        crate::faults::abort_if_armed(crate::faults::Point::BindAbortAfterLock);
        let annotations = BindingAnnotations::of(&allocation).for_device_plugin(
            &allocation,
            self.bind.config,
            pod.pod(),
            self.bind.cluster.read().state().node(&allocation.node),
        );
        match self.write_binding(&pod, &annotations).await {
            Ok(()) => {
                crate::faults::abort_if_armed(crate::faults::Point::BindAbortAfterBinding);
                undo.bound();
            }
            Err(NotWritten::Unknown(why)) => {
                // Undoing a Binding that may have landed would leave a
                // bound pod without its GPUs: keep everything, and let
                // the watch show the truth.
                undo.bound();
                let f = BindFailure::new(
                    BindCode::BindingUnknown,
                    format!("pod {who}: {why}; the allocation and node lock are kept"),
                );
                return Err(self.bind.binder.failed(pod.pod(), f));
            }
            Err(NotWritten::Failed(f)) => return Err(undo.run(f).await),
        }
        self.bind
            .binder
            .metrics
            .hami
            .allocated(pod.plan.request.device_kind.kind().vendor);
        self.write_label(&annotations).await;
        tracing::info!(pod = %who, node = %self.bind.target.node, devices = %annotations.devices(), "bound");
        if self.bind.config.scheduler.binding_succeeded_events {
            self.bind
                .binder
                .events
                .emit(crate::cluster::events::PodEvent::new(
                    pod.pod(),
                    false,
                    "BindingSucceeded",
                    format!(
                        "bound to node {} with GPUs {}",
                        self.bind.target.node,
                        gpu_list(&allocation).join(", ")
                    ),
                ));
        }
        Ok(BindCode::Bound)
    }

    /// The node may be waited for until the Binding's own time is left.
    fn node_deadline(&self) -> Instant {
        let lock = &self.bind.config.scheduler.node_lock;
        (self.asked + Duration::from_secs_f64(lock.wait_seconds)).min(
            self.deadline
                .checked_sub(BINDING_TIME)
                .unwrap_or(self.asked),
        )
    }

    /// Step 1: binds of one pod run one after the other: a retry
    /// (kube-scheduler gave up on the first) sees what the first did.
    async fn pod_turn(&self, until: Instant) -> Result<LocalTurn, BindFailure> {
        self.bind
            .binder
            .locks
            .local_turn(&format!("pod/{}", self.bind.target.uid), until)
            .await
            .map_err(|_| {
                BindFailure::new(
                    BindCode::BindInProgress,
                    format!(
                        "pod {}: another bind of this pod is still running",
                        self.bind.target.who()
                    ),
                )
            })
    }

    /// Step 2: the pod kube-scheduler filtered is the pod it binds; it is
    /// read from the API server only when gpugate did not see it, or when
    /// the ledger holds an allocation for it (bound before, perhaps).
    /// Anything the ledger holds for the pod but an assumption means an
    /// earlier bind got at least as far as its reservation: the API server
    /// says whether it bound (a retry must not take the node lock again for
    /// a pod the device plugin has already set up).
    async fn read_pod(&self, known: Option<Pod>) -> Result<Read, BindFailure> {
        let t = self.bind.target;
        let who = t.who();
        let settled = {
            let view = self.bind.cluster.read();
            view.held_allocation(&t.uid).is_some() && !view.is_assumed(&t.uid)
        };
        let pod = match known.filter(|p| {
            !settled
                && p.metadata.uid.as_deref() == Some(t.uid.as_str())
                && p.metadata.name.as_deref() == Some(t.name.as_str())
                && crate::cluster::pod_namespace(p) == t.namespace
        }) {
            Some(pod) => pod,
            None => self
                .bind
                .binder
                .api
                .get_pod(&t.namespace, &t.name)
                .await
                .map_err(|e| BindFailure::api(&who, &e))?,
        };
        if pod.metadata.uid.as_deref() != Some(t.uid.as_str()) {
            return Err(replaced(&who, &pod, t));
        }
        match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            // kube-scheduler retries a bind whose answer it did not get.
            Some(bound) if bound == t.node => Ok(Read::Done(BindCode::AlreadyBound)),
            Some(bound) => Err(BindFailure::new(
                BindCode::BoundElsewhere,
                format!("pod {who}: already bound to node {bound}, not {}", t.node),
            )),
            None => Ok(Read::Unbound(Box::new(pod))),
        }
    }

    /// A pod that asks for no GPU: the Binding alone.
    async fn bind_without_gpus(&self, pod: &PodToPlace) -> Result<BindCode, BindFailure> {
        let t = self.bind.target;
        let who = t.who();
        match self
            .bind
            .binder
            .api
            .bind_pod(&t.namespace, &t.name, &t.uid, &t.node, None)
            .await
        {
            Ok(()) => Ok(BindCode::BoundWithoutGpus),
            Err(e) => match self.binding_outcome(pod.pod(), None, &e).await {
                BindingOutcome::Bound => Ok(BindCode::BoundWithoutGpus),
                BindingOutcome::NotBound(f) => Err(f.unwrap_or_else(|| BindFailure::api(&who, &e))),
                BindingOutcome::Unknown(why) => Err(BindFailure::new(
                    BindCode::BindingUnknown,
                    format!("pod {who}: {e}; whether the Binding landed is unknown ({why})"),
                )),
            },
        }
    }

    /// Step 3: the GPUs on the node, reserved under the pod's UID, and the
    /// guard that undoes it.
    fn reserve<'s>(&'s self, pod: &'s PodToPlace) -> Result<(Allocation, Undo<'s>), BindFailure> {
        let t = self.bind.target;
        let who = t.who();
        let mut view = self.bind.cluster.write();
        // The pod read unbound (under this pod's turn, so no earlier bind
        // of it is still running): whatever the ledger holds for it is on
        // no node.
        view.begin_bind(&t.uid).map_err(|_| {
            let f = BindFailure::new(
                BindCode::BindInProgress,
                format!("pod {who}: another bind of this pod is in progress"),
            );
            self.bind.binder.failed(pod.pod(), f)
        })?;
        let (allocation, reservation) = placement::reserve(
            &mut view,
            self.bind.config,
            pod,
            &t.uid,
            &t.node,
            Timestamp::now(),
        )
        .map_err(|e| {
            self.bind
                .binder
                .failed(pod.pod(), reserve_failure(&e, &who))
        })?;
        Ok((allocation, Undo::new(self.bind, pod, reservation)))
    }

    /// Step 4: this process's turn on the node, then HAMi's node lock when
    /// any container asks for GPUs. HAMi v2.10 locks only for containers
    /// that are not init containers, but the kubelet calls Allocate for init
    /// containers too, and HAMi's device plugin finds the pod an Allocate
    /// is for through the lock: an init-only pod bound while another pod
    /// holds the lock would get that pod's devices (and HAMi master's
    /// plugin, #3126, fails every Allocate without a lock naming the pod).
    async fn node_turn(
        &self,
        until: Instant,
        pod: &PodToPlace,
        undo: &mut Undo<'_>,
    ) -> Result<LocalTurn, BindFailure> {
        let t = self.bind.target;
        let who = t.who();
        let turn = self
            .bind
            .binder
            .locks
            .local_turn(&t.node, until)
            .await
            .map_err(|e| BindFailure::new(e.code().into(), format!("pod {who}: {e}")))?;
        if !self.bind.config.scheduler.node_lock.enabled {
            return Ok(turn);
        }
        // Each lock the pod's kinds take, once (hami-vendors.md 1.8).
        let mut styles: Vec<NodeLockStyle> = Vec::new();
        for kind in pod.plan.request.device_kinds() {
            let style = kind.kind().node_lock;
            if !styles.contains(&style) {
                styles.push(style);
            }
        }
        let failed = |e: LockError| BindFailure::new(e.code().into(), format!("pod {who}: {e}"));
        for style in styles {
            match style {
                NodeLockStyle::Hami => {
                    let taken = self
                        .bind
                        .binder
                        .locks
                        .acquire(
                            &self.bind.binder.api,
                            self.bind.cluster,
                            &t.node,
                            (&t.namespace, &t.name),
                            crate::cluster::lock::rules(self.bind.config),
                            until,
                        )
                        .await
                        .map_err(failed)?;
                    // Even a lock this pod held already (a bind before that
                    // could not release it) is released on failure.
                    undo.locked();
                    if let Taken::TakenOver(why) = &taken {
                        tracing::warn!(pod = %who, node = %t.node, %why, "node lock taken over");
                    }
                }
                NodeLockStyle::Own { key, hold } => {
                    let value = crate::cluster::lock::acquire_vendor_lock(
                        &self.bind.binder.api,
                        &t.node,
                        key,
                        hold,
                        until,
                    )
                    .await
                    .map_err(failed)?;
                    undo.vendor_locked(key, value);
                }
                NodeLockStyle::None => {}
            }
        }
        Ok(turn)
    }

    /// Step 5: one write: the API server copies the Binding's annotations
    /// (and, from 1.35, labels) onto the pod as it assigns the node, so
    /// the pod never carries an allocation for a node it is not bound to.
    async fn write_binding(
        &self,
        pod: &PodToPlace,
        annotations: &BindingAnnotations,
    ) -> Result<(), NotWritten> {
        let t = self.bind.target;
        let metadata = annotations.metadata(Timestamp::now().as_second());
        let Err(e) = self
            .bind
            .binder
            .api
            .bind_pod(&t.namespace, &t.name, &t.uid, &t.node, Some(&metadata))
            .await
        else {
            return Ok(());
        };
        match self
            .binding_outcome(pod.pod(), Some(annotations.carried()), &e)
            .await
        {
            BindingOutcome::Bound => Ok(()),
            BindingOutcome::Unknown(why) => Err(NotWritten::Unknown(format!(
                "{e}; whether the Binding landed is unknown ({why})"
            ))),
            BindingOutcome::NotBound(f) => Err(NotWritten::Failed(
                f.unwrap_or_else(|| BindFailure::api(&t.who(), &e)),
            )),
        }
    }

    /// An API server before 1.35 drops a Binding's labels: HAMi's
    /// `hami.io/vgpu-node` label is written on its own (the device plugin
    /// reads the annotations; the label is for people).
    async fn write_label(&self, annotations: &BindingAnnotations) {
        if self.bind.binder.api.binding_copies_labels().await {
            return;
        }
        let metadata = annotations.metadata(0);
        let Some(labels) = metadata
            .get("labels")
            .filter(|l| l.as_object().is_some_and(|o| !o.is_empty()))
        else {
            return;
        };
        let t = self.bind.target;
        let patch = json!({"metadata": {"labels": labels}});
        if let Err(e) = api::without_deadline(self.bind.binder.api.merge_patch_pod(
            &t.namespace,
            &t.name,
            &patch,
        ))
        .await
        {
            tracing::warn!(pod = %t.who(), "bound, but the hami.io/vgpu-node label was not written: {e}");
        }
    }

    /// After a failed `POST binding`: whether the pod is bound to the node
    /// by this Binding after all (a lost answer), surely not (with why,
    /// when the pod says more than the error), or unknown. Reads the pod
    /// again, a few times when the failure left the outcome open.
    /// `devices` is the allocation the Binding carried (its first device
    /// list: key and value).
    async fn binding_outcome(
        &self,
        pod: &Pod,
        devices: Option<(&str, &str)>,
        error: &ApiError,
    ) -> BindingOutcome {
        let args = self.bind.target;
        let who = args.who();
        let open = error.outcome_unknown();
        let attempts = if open { OUTCOME_READS } else { 1 };
        // The last read's failure; None once a read showed the pod unbound.
        let mut unreadable = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(OUTCOME_READ_PAUSE).await;
            }
            let read =
                api::without_deadline(self.bind.binder.api.get_pod(&args.namespace, &args.name))
                    .await;
            match read {
                Ok(p) if p.metadata.uid != pod.metadata.uid => {
                    return BindingOutcome::NotBound(Some(replaced(&who, &p, args)));
                }
                Ok(p) => match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                    Some(n) if n == args.node => {
                        let carried = devices.and_then(|(key, _)| {
                            p.metadata
                                .annotations
                                .as_ref()?
                                .get(key)
                                .map(String::as_str)
                        });
                        return if devices.is_none_or(|(_, list)| carried == Some(list)) {
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
}

/// The pod under the name is another pod than the one kube-scheduler binds.
fn replaced(who: &str, found: &Pod, args: &Target) -> BindFailure {
    BindFailure::new(
        BindCode::PodReplaced,
        format!(
            "pod {who}: its uid is {}, not {} (deleted and created again)",
            found.metadata.uid.as_deref().unwrap_or("(none)"),
            args.uid
        ),
    )
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
