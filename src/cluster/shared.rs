//! The cluster view shared between the watchers (or the snapshot loader)
//! that write it and the request handlers that read it.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use super::freshness::{Freshness, Stale};
use super::view::ClusterView;

/// A [`ClusterView`] behind a lock, with its [`Freshness`]: whether it may
/// be placed from now (`/readyz` and every extender verb ask). Engine calls
/// under the read lock take microseconds to a few milliseconds; writers
/// hold it for one object.
#[derive(Debug)]
pub struct SharedCluster {
    view: RwLock<ClusterView>,
    freshness: Arc<Freshness>,
}

impl SharedCluster {
    /// A view loaded whole (`synced`: a snapshot, always current), or
    /// `!synced`: fed by hand, current once every gating kind is marked
    /// listed.
    pub fn new(view: ClusterView, synced: bool) -> Self {
        Self {
            view: RwLock::new(view),
            freshness: Arc::new(if synced {
                Freshness::always_current()
            } else {
                Freshness::watched(Duration::MAX)
            }),
        }
    }

    /// An empty view the watches fill; stale when the API server has not
    /// answered the probe for `stale_after`.
    pub fn watched(stale_after: Duration) -> Self {
        Self {
            view: RwLock::new(ClusterView::default()),
            freshness: Arc::new(Freshness::watched(stale_after)),
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

    /// Whether every gating kind has been listed once.
    pub fn is_synced(&self) -> bool {
        self.freshness.listed_once()
    }

    /// `Ok` when the view may be placed from now; else why not.
    pub fn current(&self) -> Result<(), Stale> {
        self.freshness.check()
    }

    pub fn freshness(&self) -> &Arc<Freshness> {
        &self.freshness
    }
}
