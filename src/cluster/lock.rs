//! Taking and releasing HAMi's node lock (`hami.io/mutex.lock` on the Node,
//! hami-compat.md 4.3) so that HAMi's device plugin, which releases it when
//! the pod's GPUs are set up, sees the same protocol as with hami-scheduler:
//!
//! - free: taken, with a resourceVersion precondition, so two writers
//!   cannot both win;
//! - held by the same pod: already ours (a retried bind);
//! - held by another pod: taken over only as [`NodeLock::takeover`] allows
//!   (the holder is gone, has finished, is bound to another node, was never
//!   bound within a bind's budget, or the lock expired while the holder is
//!   not waiting for its device plugin); otherwise waited for until the
//!   deadline, watching the node (the watch's copy, no API calls) and
//!   asking about the holder again every few seconds (a holder the watch
//!   shows bound to the node, or being bound there, is not asked about
//!   while the lock is young). A lock whose holder is bound to the node
//!   and still waits for its device plugin is never taken over, however
//!   old: the plugin finds the pod an `Allocate` is for through this lock
//!   (HAMi #3096);
//! - unreadable: refused with the value, never overwritten (a writer gpugate
//!   does not understand may rely on it).
//!
//! Inside one gpugate process binds to the same node also queue on an
//! in-process mutex first, so they do not race each other on the API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::json;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::hami::keys::NODE_LOCK;
use crate::hami::node_lock::{
    HolderState, Kept, LockRules, Takeover, decode_node_lock, encode_node_lock,
};
use crate::hami::{LockHolder, NodeLock};

use super::api::{ApiCalls, ApiError};
use super::shared::SharedCluster;
use super::view::SeenLock;

/// How often a held lock is re-read from the API server while waiting for
/// it, for a node the watch has not shown.
const POLL: Duration = Duration::from_millis(200);
/// How often the watch's view of a held lock is looked at (no API call).
const WATCH_POLL: Duration = Duration::from_millis(10);
/// How long the watch's copy of a held lock is waited on before the API
/// server is asked again.
const CACHE_TRUST: Duration = Duration::from_secs(2);
/// How long a holder found alive is not asked about again.
const HOLDER_RECHECK: Duration = Duration::from_secs(5);
/// Release attempts when the node keeps changing under us.
const RELEASE_ATTEMPTS: usize = 5;

/// Beyond the bind budget (`scheduler.bindTimeoutSeconds`), before a lock
/// whose holder is not bound counts as left behind.
pub const BIND_MARGIN: Duration = Duration::from_secs(5);

/// The lock rules of `config`: its expiry, and the longest a bind may run.
pub fn rules(config: &crate::config::Config) -> LockRules {
    LockRules {
        expiry: Duration::from_secs(config.scheduler.node_lock.expiry_seconds),
        unbound_after: Duration::from_secs_f64(config.scheduler.bind_timeout_seconds) + BIND_MARGIN,
    }
}

/// Why the lock was not taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LockError {
    #[error(
        "node {node} is locked by pod {holder} since {since} (hami.io/mutex.lock; released by HAMi's \
         device plugin once that pod's GPUs are set up, or after {expiry_seconds} s); \
         waited {waited_ms} ms"
    )]
    Contention {
        node: String,
        holder: String,
        since: String,
        expiry_seconds: u64,
        waited_ms: u128,
    },
    #[error(
        "node {node} is locked by pod {holder} since {since} (hami.io/mutex.lock), which is bound \
         to the node and has waited {waiting_seconds} s for its device plugin (Pending, \
         hami.io/bind-phase: allocating); the lock is kept past its expiry until that pod is \
         admitted or gone, because HAMi's device plugin finds the pod an Allocate is for through \
         the lock: taken over, it would give {holder}'s containers another pod's devices; \
         waited {waited_ms} ms"
    )]
    AwaitingAllocation {
        node: String,
        holder: String,
        since: String,
        waiting_seconds: i64,
        waited_ms: u128,
    },
    #[error("another bind to node {node} in this gpugate did not finish within {waited_ms} ms")]
    LocalBusy { node: String, waited_ms: u128 },
    #[error(
        "node {node}: hami.io/mutex.lock {value:?} cannot be read ({problem}); it is left alone: \
         remove the annotation if no scheduler holds it"
    )]
    Unreadable {
        node: String,
        value: String,
        problem: String,
    },
    #[error("node {node} kept changing while its lock was being taken")]
    Changing { node: String },
    #[error(
        "node {node} is locked since {since} ({key}, taken by a bind of the kind's devices and \
         released by its device plugin, or replaced after {hold_seconds} s); waited {waited_ms} ms"
    )]
    VendorHeld {
        node: String,
        key: &'static str,
        since: String,
        hold_seconds: u64,
        waited_ms: u128,
    },
    #[error(
        "node {node}: {key} {value:?} is not an RFC 3339 time; it is left alone: remove the \
         annotation if no scheduler holds it"
    )]
    VendorUnreadable {
        node: String,
        key: &'static str,
        value: String,
    },
    #[error("node lock: {0}")]
    Api(#[from] ApiError),
}

/// A stable code for a [`LockError`], for metrics and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockCode {
    /// Held by another pod, or by another bind in this process, or the
    /// node kept changing: the bind may try again.
    Contention,
    /// Expired, but held by a pod bound to the node that still waits for
    /// its device plugin: kept until it is admitted or gone.
    AwaitingAllocation,
    /// A value that cannot be read, left alone.
    Unreadable,
    Api,
}

impl LockCode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockCode::Contention => "node_lock_contention",
            LockCode::AwaitingAllocation => "node_lock_awaiting_allocation",
            LockCode::Unreadable => "node_lock_unreadable",
            LockCode::Api => "api_error",
        }
    }
}

impl LockError {
    pub fn code(&self) -> LockCode {
        match self {
            LockError::Contention { .. }
            | LockError::LocalBusy { .. }
            | LockError::Changing { .. }
            | LockError::VendorHeld { .. } => LockCode::Contention,
            LockError::AwaitingAllocation { .. } => LockCode::AwaitingAllocation,
            LockError::Unreadable { .. } | LockError::VendorUnreadable { .. } => {
                LockCode::Unreadable
            }
            LockError::Api(_) => LockCode::Api,
        }
    }
}

/// How the lock was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    Free,
    /// The same pod held it already (a retried bind).
    AlreadyOurs,
    /// Taken over as [`NodeLock::takeover`] allows; says why.
    TakenOver(String),
}

/// Per-node in-process queues.
#[derive(Debug, Default)]
pub struct NodeLocks {
    local: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// One bind's turn on a node inside this process. Dropping it lets the
/// next bind to the node go.
#[derive(Debug)]
pub struct LocalTurn {
    _guard: OwnedMutexGuard<()>,
}

impl NodeLocks {
    /// Waits for this process's turn on `node`, until `deadline`.
    pub async fn local_turn(&self, node: &str, deadline: Instant) -> Result<LocalTurn, LockError> {
        let start = Instant::now();
        let mutex = {
            let mut map = self.local.lock().unwrap_or_else(|e| e.into_inner());
            // Forget queues nobody uses, so node churn does not grow the map.
            if map.len() > 1024 {
                map.retain(|_, m| Arc::strong_count(m) > 1);
            }
            map.entry(node.to_string()).or_default().clone()
        };
        match tokio::time::timeout_at(deadline, mutex.lock_owned()).await {
            Ok(guard) => Ok(LocalTurn { _guard: guard }),
            Err(_) => Err(LockError::LocalBusy {
                node: node.to_string(),
                waited_ms: start.elapsed().as_millis(),
            }),
        }
    }

    /// Takes the lock on `node` for pod `namespace/name`, waiting until
    /// `deadline` for a holder that keeps it under `rules`.
    ///
    /// The lock's state comes from the node watch (`cluster`): waiting
    /// costs no API call, and the lock is tried within milliseconds of the
    /// watch showing it released. The API server is read only for a node
    /// the watch has not shown, after a write lost a race (the watch may
    /// lag), and to see whether a new holder is still alive.
    pub async fn acquire(
        &self,
        api: &ApiCalls,
        cluster: &SharedCluster,
        node: &str,
        (namespace, name): (&str, &str),
        rules: LockRules,
        deadline: Instant,
    ) -> Result<Taken, LockError> {
        let start = Instant::now();
        let expiry = rules.expiry;
        let mut read_api = false;
        // The lock value last found kept by its holder, how, and when.
        let mut known: Option<(String, Kept, Instant)> = None;
        // The watch's copy is trusted for a while; a watch that broke must
        // not keep a bind waiting for a lock long released.
        let mut api_read_at = start;
        loop {
            if api_read_at.elapsed() >= CACHE_TRUST {
                read_api = true;
            }
            let cached = if read_api {
                None
            } else {
                cluster.read().seen_lock(node).cloned()
            };
            let from_watch = cached.is_some();
            let seen = match cached {
                Some(seen) => seen,
                None => {
                    let current = api.get_node(node).await?;
                    api_read_at = Instant::now();
                    SeenLock {
                        value: lock_of(&current).map(str::to_string),
                        resource_version: current.metadata.resource_version.clone(),
                    }
                }
            };
            read_api = false;
            let taken = match seen.value {
                None => Taken::Free,
                Some(value) => {
                    let lock = decode_node_lock(&value).map_err(|e| LockError::Unreadable {
                        node: node.to_string(),
                        value: value.clone(),
                        problem: e.problem.clone(),
                    })?;
                    if lock.is_held_by(namespace, name) {
                        // Written again with a new time: the orphan sweep
                        // (controllers/orphaned_locks.rs) judges a lock by
                        // its age, and this retry is alive.
                        return self
                            .stamp(
                                api,
                                cluster,
                                node,
                                (namespace, name),
                                seen.resource_version.clone(),
                                deadline,
                            )
                            .await
                            .map(|()| Taken::AlreadyOurs);
                    }
                    let now = Timestamp::now();
                    let recent = known
                        .as_ref()
                        .filter(|(v, _, at)| *v == value && at.elapsed() < HOLDER_RECHECK)
                        .map(|(_, kept, _)| *kept);
                    let verdict = match recent {
                        Some(kept) => Takeover::Kept(kept),
                        None if !lock.is_expired(now, expiry)
                            && holder_bound_here(cluster, node, &lock) =>
                        {
                            Takeover::Kept(Kept::Live)
                        }
                        None => {
                            let state = holder_state(api, node, &lock).await?;
                            let verdict = lock.takeover(&state, now, rules);
                            if let Takeover::Kept(kept) = verdict {
                                known = Some((value.clone(), kept, Instant::now()));
                            }
                            verdict
                        }
                    };
                    match verdict {
                        Takeover::Allowed(why) => Taken::TakenOver(why),
                        Takeover::Kept(kept) => {
                            let pause = if from_watch { WATCH_POLL } else { POLL };
                            if Instant::now() + pause > deadline {
                                return Err(kept_error(node, &lock, kept, expiry, start));
                            }
                            tokio::time::sleep(pause).await;
                            if from_watch {
                                // Looked at again when the node changes,
                                // the watch's copy is too old to trust, or
                                // a live holder's lock expires (it may then
                                // be taken over).
                                let mut until = api_read_at + CACHE_TRUST;
                                if let (Kept::Live, Some(left)) =
                                    (kept, lock.expires_in(Timestamp::now(), expiry))
                                {
                                    until = until.min(Instant::now() + left);
                                }
                                wait_for_change(
                                    cluster,
                                    node,
                                    seen.resource_version.as_deref(),
                                    until,
                                    deadline,
                                )
                                .await;
                            }
                            continue;
                        }
                    }
                }
            };
            let value = encode_node_lock(&NodeLock::new(Timestamp::now(), namespace, name));
            let patch = json!({"metadata": {
                "resourceVersion": seen.resource_version,
                "annotations": {NODE_LOCK: value},
            }});
            match api.merge_patch_node(node, &patch).await {
                Ok(written) => {
                    // The next bind to this node need not wait for the
                    // watch to learn what this one wrote.
                    cluster.write().note_node_lock_if_watched(&written);
                    return Ok(taken);
                }
                // Someone changed the node since it was seen (or the watch
                // lags behind): read the API server, then try again.
                Err(e) if e.is_conflict() && Instant::now() < deadline => read_api = true,
                Err(e) if e.is_conflict() => {
                    return Err(LockError::Changing {
                        node: node.to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Writes the lock anew for `namespace/name`, which the node at
    /// `resource_version` shows holding it already; a conflict is read
    /// again until `deadline`.
    async fn stamp(
        &self,
        api: &ApiCalls,
        cluster: &SharedCluster,
        node: &str,
        (namespace, name): (&str, &str),
        mut resource_version: Option<String>,
        deadline: Instant,
    ) -> Result<(), LockError> {
        loop {
            let value = encode_node_lock(&NodeLock::new(Timestamp::now(), namespace, name));
            let patch = json!({"metadata": {
                "resourceVersion": resource_version,
                "annotations": {NODE_LOCK: value},
            }});
            match api.merge_patch_node(node, &patch).await {
                Ok(written) => {
                    cluster.write().note_node_lock_if_watched(&written);
                    return Ok(());
                }
                Err(e) if e.is_conflict() && Instant::now() < deadline => {
                    let current = api.get_node(node).await?;
                    if !held_by(&current, namespace, name) {
                        return Err(LockError::Changing {
                            node: node.to_string(),
                        });
                    }
                    resource_version = current.metadata.resource_version;
                }
                Err(e) if e.is_conflict() => {
                    return Err(LockError::Changing {
                        node: node.to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Releases the lock if pod `namespace/name` holds it; a lock held by
    /// anyone else, or none, is left alone.
    pub async fn release(
        &self,
        api: &ApiCalls,
        cluster: &SharedCluster,
        node: &str,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        remove_while(api, cluster, node, NODE_LOCK, |n| {
            held_by(n, namespace, name)
        })
        .await
    }
}

/// A vendor's own node lock (`devices::NodeLockStyle::Own`, Cambricon's
/// `cambricon.com/dsmlu.lock`, hami-vendors.md 4.2): the time it was
/// taken, nothing else. One younger than `hold` is waited for until
/// `deadline`; an older one is replaced (HAMi releases it, then sets it).
/// Written with a resourceVersion precondition, so two writers cannot both
/// win. Returns the value written, for [`release_vendor_lock`].
pub async fn acquire_vendor_lock(
    api: &ApiCalls,
    node: &str,
    key: &'static str,
    hold: Duration,
    deadline: Instant,
) -> Result<String, LockError> {
    let start = Instant::now();
    loop {
        let current = api.get_node(node).await?;
        let held = current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty());
        if let Some(value) = held {
            let since: Timestamp =
                value
                    .trim()
                    .parse()
                    .map_err(|_| LockError::VendorUnreadable {
                        node: node.to_string(),
                        key,
                        value: value.clone(),
                    })?;
            let age = Timestamp::now().duration_since(since);
            if age.is_negative() || age.unsigned_abs() < hold {
                if Instant::now() + POLL > deadline {
                    return Err(LockError::VendorHeld {
                        node: node.to_string(),
                        key,
                        since: value.clone(),
                        hold_seconds: hold.as_secs(),
                        waited_ms: start.elapsed().as_millis(),
                    });
                }
                tokio::time::sleep(POLL).await;
                continue;
            }
        }
        let value = Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| Timestamp::now())
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let patch = json!({"metadata": {
            "resourceVersion": current.metadata.resource_version,
            "annotations": {key: value},
        }});
        match api.merge_patch_node(node, &patch).await {
            Ok(_) => return Ok(value),
            Err(e) if e.is_conflict() && Instant::now() < deadline => continue,
            Err(e) if e.is_conflict() => {
                return Err(LockError::Changing {
                    node: node.to_string(),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Removes a vendor lock [`acquire_vendor_lock`] wrote, if the node still
/// holds exactly `value` (the device plugin may have released it, and
/// another bind taken it, since).
pub async fn release_vendor_lock(
    api: &ApiCalls,
    cluster: &SharedCluster,
    node: &str,
    key: &'static str,
    value: &str,
) -> Result<(), ApiError> {
    remove_while(api, cluster, node, key, |n| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
            == Some(value)
    })
    .await
}

/// Removes the node's `key` while `ours` says the node still carries what
/// the caller took (read anew after each conflict, at most
/// [`RELEASE_ATTEMPTS`] times); a node gone, or carrying something else,
/// is left alone.
async fn remove_while(
    api: &ApiCalls,
    cluster: &SharedCluster,
    node: &str,
    key: &'static str,
    ours: impl Fn(&k8s_openapi::api::core::v1::Node) -> bool,
) -> Result<(), ApiError> {
    let mut last = None;
    for _ in 0..RELEASE_ATTEMPTS {
        let current = match api.get_node(node).await {
            Ok(n) => n,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        if !ours(&current) {
            return Ok(());
        }
        match clear(api, cluster, node, key, current.metadata.resource_version).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_conflict() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| ApiError::Conflict {
        what: format!("remove {key} on {node}"),
        message: "the node kept changing".to_string(),
    }))
}

/// Removes the node's `key` at `resource_version` (a conflict if the node
/// changed since), and tells the view what was written.
async fn clear(
    api: &ApiCalls,
    cluster: &SharedCluster,
    node: &str,
    key: &str,
    resource_version: Option<String>,
) -> Result<(), ApiError> {
    let patch = json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": {key: null},
    }});
    let written = api.merge_patch_node(node, &patch).await?;
    cluster.write().note_node_lock_if_watched(&written);
    Ok(())
}

/// The node's `hami.io/mutex.lock` value.
fn lock_of(node: &k8s_openapi::api::core::v1::Node) -> Option<&str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_LOCK))
        .map(String::as_str)
}

/// Whether the node's lock names pod `namespace/name`.
fn held_by(node: &k8s_openapi::api::core::v1::Node, namespace: &str, name: &str) -> bool {
    lock_of(node)
        .and_then(|v| decode_node_lock(v).ok())
        .is_some_and(|l| l.is_held_by(namespace, name))
}

/// Releases the node lock `value` (exactly that value, at the node's
/// current resourceVersion) when a bind left it behind: it is older than
/// `rules.unbound_after` (longer than any bind may run) and
/// [`NodeLock::takeover`] allows it, its holder gone, finished, bound
/// elsewhere or never bound. A lock whose holder is bound to this node is
/// the device plugin's to release, and is left to it (or to a bind's
/// takeover once expired, never while its holder waits for the plugin);
/// an unreadable or unnamed one is left to its expiry. Returns why it was
/// released.
pub async fn release_if_orphaned(
    api: &ApiCalls,
    cluster: &SharedCluster,
    node: &str,
    value: &str,
    rules: LockRules,
) -> Result<Option<String>, ApiError> {
    let Ok(lock) = decode_node_lock(value) else {
        return Ok(None);
    };
    let now = Timestamp::now();
    if lock.holder.is_none() || !lock.is_expired(now, rules.unbound_after) {
        return Ok(None);
    }
    let state = holder_state(api, node, &lock).await?;
    if matches!(state, HolderState::BoundHere { .. }) {
        return Ok(None);
    }
    let Takeover::Allowed(why) = lock.takeover(&state, now, rules) else {
        return Ok(None);
    };
    let current = match api.get_node(node).await {
        Ok(n) => n,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    if lock_of(&current) != Some(value) {
        return Ok(None);
    }
    match clear(
        api,
        cluster,
        node,
        NODE_LOCK,
        current.metadata.resource_version,
    )
    .await
    {
        Ok(()) => Ok(Some(why)),
        // Changed since: someone else acts on it; the next sweep looks again.
        Err(e) if e.is_conflict() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Waits until the watch shows `node` changed since `seen_version`, `until`
/// has passed (the watch's copy is then too old to trust, or the lock has
/// expired) or `deadline` is one poll away: the waiting bind looks again at
/// the lock and its holder only then.
/// One bind per node waits here (the others queue on the in-process
/// mutex), and each look at the view is one map lookup: at a thousand
/// busy nodes that is cheap, where decoding the lock and asking about its
/// holder every poll was not.
async fn wait_for_change(
    cluster: &SharedCluster,
    node: &str,
    seen_version: Option<&str>,
    until: Instant,
    deadline: Instant,
) {
    loop {
        let next = Instant::now() + WATCH_POLL;
        if next >= until || next + WATCH_POLL > deadline {
            return;
        }
        let unchanged = cluster
            .read()
            .seen_lock(node)
            .is_some_and(|now| now.resource_version.as_deref() == seen_version);
        if !unchanged {
            return;
        }
        tokio::time::sleep_until(next).await;
    }
}

/// Whether the watch shows the lock's holder bound to `node`, or being
/// bound there by gpugate: alive, with no API read (the usual holder, a pod
/// this gpugate just bound, while the device plugin sets it up). Anything
/// else is asked of the API server ([`holder_gone`]): only a live holder
/// is taken from the view, never a gone one.
fn holder_bound_here(cluster: &SharedCluster, node: &str, lock: &NodeLock) -> bool {
    lock.holder
        .as_ref()
        .is_some_and(|h| cluster.read().holds_on(&h.namespace, &h.name, node))
}

/// The state of the pod `lock` names, from the API server.
async fn holder_state(
    api: &ApiCalls,
    node: &str,
    lock: &NodeLock,
) -> Result<HolderState, ApiError> {
    let Some(LockHolder { namespace, name }) = &lock.holder else {
        return Ok(HolderState::Unnamed);
    };
    match api.get_pod(namespace, name).await {
        Err(e) if e.is_not_found() => Ok(HolderState::Gone),
        Err(e) => Err(e),
        Ok(pod) => Ok(holder_state_of(&pod, node)),
    }
}

/// The state of `pod`, named by a lock on `node`. Only the name counts,
/// as it does for HAMi's device plugin: a pod created again under the
/// holder's name, Pending on this node with `bind-phase: allocating`, is
/// the pod the plugin would serve, so it keeps the lock like the first.
fn holder_state_of(pod: &k8s_openapi::api::core::v1::Pod, node: &str) -> HolderState {
    if super::convert::pod_finished(pod) {
        return HolderState::Finished;
    }
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        None | Some("") => HolderState::Unbound,
        Some(other) if other != node => HolderState::BoundElsewhere(other.to_string()),
        Some(_) => HolderState::BoundHere {
            awaiting_allocation: super::convert::pod_awaiting_allocation(pod),
        },
    }
}

/// Why a bind gave up on a lock its holder keeps.
fn kept_error(
    node: &str,
    lock: &NodeLock,
    kept: Kept,
    expiry: Duration,
    start: Instant,
) -> LockError {
    let holder = lock.holder.as_ref().map_or_else(
        || "(unnamed, old HAMi)".to_string(),
        |h| format!("{}/{}", h.namespace, h.name),
    );
    let since = encode_node_lock(&NodeLock {
        time: lock.time,
        holder: None,
    });
    let waited_ms = start.elapsed().as_millis();
    match kept {
        Kept::Live => LockError::Contention {
            node: node.to_string(),
            holder,
            since,
            expiry_seconds: expiry.as_secs(),
            waited_ms,
        },
        Kept::AwaitingAllocation => LockError::AwaitingAllocation {
            node: node.to_string(),
            holder,
            since,
            waiting_seconds: Timestamp::now().duration_since(lock.time).as_secs(),
            waited_ms,
        },
    }
}
