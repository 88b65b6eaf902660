//! What a bind took, to give back if it fails: the reservation (step 3)
//! and the node locks (step 4). The transaction records each as it is
//! taken; on failure [`Undo::run`] gives them back, on success (or a
//! Binding whose outcome is unknown) [`Undo::bound`] keeps them. Should
//! the task end otherwise (a panic), dropping the guard releases the
//! reservation; a lock it took then expires (`scheduler.nodeLock`).

use jiff::Timestamp;

use crate::cluster::view::Reservation;
use crate::cluster::{SharedCluster, api};
use crate::config::Config;
use crate::placement::{self, PodToPlace};

use super::outcome::BindFailure;
use super::{ApiBinder, Target};

/// Whose bind it is: what an undo works through.
#[derive(Clone, Copy)]
pub(super) struct Bind<'a> {
    pub binder: &'a ApiBinder,
    pub cluster: &'a SharedCluster,
    pub config: &'a Config,
    pub target: &'a Target,
}

pub(super) struct Undo<'a> {
    tx: Bind<'a>,
    pod: &'a PodToPlace,
    reservation: Option<Reservation>,
    locked: bool,
    /// Vendor locks taken (`devices::NodeLockStyle::Own`): key and value.
    vendor_locks: Vec<(&'static str, String)>,
}

impl<'a> Undo<'a> {
    pub fn new(tx: Bind<'a>, pod: &'a PodToPlace, reservation: Reservation) -> Self {
        Undo {
            tx,
            pod,
            reservation: Some(reservation),
            locked: false,
            vendor_locks: Vec::new(),
        }
    }

    /// HAMi's node lock is held for the pod.
    pub fn locked(&mut self) {
        self.locked = true;
    }

    /// A vendor's own node lock is held for the pod, with `value`.
    pub fn vendor_locked(&mut self, key: &'static str, value: String) {
        self.vendor_locks.push((key, value));
    }

    /// The Binding landed (or may have): the reservation is held until the
    /// watch shows the pod carrying it, and the lock is the device
    /// plugin's to release.
    pub fn bound(mut self) {
        if let Some(r) = self.reservation.take() {
            r.bound(&mut self.tx.cluster.write());
        }
    }

    /// Releases the node lock if this bind took it, drops the reservation
    /// (holding the capacity of its gang group's members again), and
    /// returns the failure with any undo step that failed too. Runs to its
    /// end even when the bind's budget is spent.
    pub async fn run(mut self, mut failure: BindFailure) -> BindFailure {
        let tx = self.tx;
        let t = tx.target;
        let mut problems = Vec::new();
        if self.locked || !self.vendor_locks.is_empty() || self.reservation.is_some() {
            tx.binder.metrics.hami.rollbacks.inc();
        }
        if self.locked
            && let Err(e) = api::without_deadline(tx.binder.locks.release(
                &tx.binder.api,
                tx.cluster,
                &t.node,
                &t.namespace,
                &t.name,
            ))
            .await
        {
            problems.push(format!("releasing the node lock: {e}"));
        }
        for (key, value) in std::mem::take(&mut self.vendor_locks) {
            if let Err(e) = api::without_deadline(crate::cluster::lock::release_vendor_lock(
                &tx.binder.api,
                tx.cluster,
                &t.node,
                key,
                &value,
            ))
            .await
            {
                problems.push(format!("releasing {key}: {e}"));
            }
        }
        if let Some(r) = self.reservation.take() {
            let mut view = tx.cluster.write();
            let _ = r.release(&mut view);
            placement::reserve::rehold_gang(
                &mut view,
                tx.config,
                self.pod,
                &t.uid,
                Timestamp::now(),
            );
        }
        if !problems.is_empty() {
            tx.binder
                .metrics
                .rollback_failures
                .inc_by(u64::try_from(problems.len()).unwrap_or(u64::MAX));
            failure.message = format!(
                "{}; undo incomplete: {}",
                failure.message,
                problems.join("; ")
            );
        }
        tx.binder.failed(self.pod.pod(), failure)
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            let _ = r.release(&mut self.tx.cluster.write());
        }
    }
}
