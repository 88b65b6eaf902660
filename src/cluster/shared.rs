//! The cluster view shared between the watchers (or the snapshot loader)
//! that write it and the request handlers that read it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::view::ClusterView;

/// A [`ClusterView`] behind a lock, with the "first full sync done" flag
/// that `/readyz` reports. Engine calls under the read lock take
/// microseconds to a few milliseconds; writers hold it for one object.
#[derive(Debug, Default)]
pub struct SharedCluster {
    view: RwLock<ClusterView>,
    synced: AtomicBool,
}

impl SharedCluster {
    pub fn new(view: ClusterView, synced: bool) -> Self {
        Self {
            view: RwLock::new(view),
            synced: AtomicBool::new(synced),
        }
    }

    /// Read access. A writer that panicked cannot leave the view half
    /// changed in a way that matters more than refusing every request, so a
    /// poisoned lock is used as is.
    pub fn read(&self) -> RwLockReadGuard<'_, ClusterView> {
        self.view.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, ClusterView> {
        self.view.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether every watched kind has been listed once.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }
}
