//! What HAMi's device plugin does once kubelet has a pod to start: for a
//! node locked by a pod that is now bound to it with `hami.io/bind-phase:
//! allocating`, mark the pod `success` and release the node lock. Without
//! this, a second bind to the same node would wait for the lock, as it does
//! in a real cluster while the device plugin sets the first pod up.
//!
//! Driven by two watches (node metadata for the locks, bound pods for
//! `spec.nodeName` and the bind phase), so that it costs nothing on a
//! thousand idle nodes. Each lock is handled by a task of its own, which
//! waits for the Allocate delay (counted from when the plugin first saw the
//! pod bound to the node, as kubelet would call Allocate some time after
//! the bind) and then does the two writes; at most `CONCURRENT_WRITES`
//! tasks write at a time. A lock whose holder is gone is left alone:
//! gpugate takes it over.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail};
use futures::StreamExt as _;
use gpugate::hami::keys::{BIND_PHASE, NODE_LOCK};
use gpugate::hami::node_lock::decode_node_lock;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::json;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Lock tasks writing to the API server at the same time.
const CONCURRENT_WRITES: usize = 64;
/// Tries of one write that meets a conflict (a newer resourceVersion).
const CONFLICT_TRIES: usize = 20;

pub struct DevicePlugin {
    /// Node locks released.
    pub released: Arc<AtomicU64>,
    /// Failed watches and failed lock tasks (a lock is tried again at the
    /// next event about it, or within a second).
    pub errors: Arc<AtomicU64>,
    delay_ms: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl DevicePlugin {
    /// Starts watching; `delay` is how long Allocate takes.
    pub fn start(client: Client, delay: Duration) -> DevicePlugin {
        let plugin = Shared {
            client,
            released: Arc::new(AtomicU64::new(0)),
            errors: Arc::new(AtomicU64::new(0)),
            delay_ms: Arc::new(AtomicU64::new(millis(delay))),
            writers: Arc::new(Semaphore::new(CONCURRENT_WRITES)),
        };
        let (stop, stopped) = watch::channel(false);
        let (released, errors, delay_ms) = (
            plugin.released.clone(),
            plugin.errors.clone(),
            plugin.delay_ms.clone(),
        );
        let task = tokio::spawn(run(plugin, stopped));
        DevicePlugin {
            released,
            errors,
            delay_ms,
            stop,
            task,
        }
    }

    /// The Allocate delay for pods first seen bound from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(millis(delay), Ordering::Relaxed);
    }

    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms.load(Ordering::Relaxed))
    }

    /// Stops the watches and every lock task (a task cut short leaves its
    /// lock, which gpugate takes over).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Clone)]
struct Shared {
    client: Client,
    released: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    delay_ms: Arc<AtomicU64>,
    writers: Arc<Semaphore>,
}

/// A pod by namespace and name.
type PodKey = (String, String);

/// A bound pod as the watch last showed it.
struct BoundPod {
    node: String,
    phase: Option<String>,
    /// When the plugin first saw it bound to `node`.
    since: Instant,
}

/// One lock to release: the node and the pod holding it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Job {
    node: String,
    pod: PodKey,
}

#[derive(Default)]
struct State {
    /// Node → the pod its lock names.
    locks: HashMap<String, PodKey>,
    pods: HashMap<PodKey, BoundPod>,
    /// Locks with a task running.
    running: HashSet<Job>,
    /// Locks a task has dealt with (released, or found not to be the
    /// pod's any more): never tried again, even while the node watch still
    /// shows the lock.
    done: HashSet<Job>,
    /// Keys seen during a re-list, to drop what the list no longer has.
    relisting_nodes: Option<HashSet<String>>,
    relisting_pods: Option<HashSet<PodKey>>,
}

impl State {
    fn node(&mut self, node: &PartialObjectMeta<Node>) -> Option<String> {
        let name = node.metadata.name.clone()?;
        if let Some(seen) = self.relisting_nodes.as_mut() {
            seen.insert(name.clone());
        }
        let holder = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_LOCK))
            .and_then(|v| decode_node_lock(v).ok())
            .and_then(|l| l.holder);
        match holder {
            Some(h) => {
                self.locks.insert(name.clone(), (h.namespace, h.name));
            }
            None => {
                self.locks.remove(&name);
            }
        }
        Some(name)
    }

    fn pod(&mut self, pod: &Pod) -> Option<String> {
        let key = (pod.metadata.namespace.clone()?, pod.metadata.name.clone()?);
        if let Some(seen) = self.relisting_pods.as_mut() {
            seen.insert(key.clone());
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone())?;
        let phase = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BIND_PHASE))
            .cloned();
        let since = match self.pods.get(&key) {
            Some(p) if p.node == node => p.since,
            _ => Instant::now(),
        };
        self.pods.insert(
            key,
            BoundPod {
                node: node.clone(),
                phase,
                since,
            },
        );
        Some(node)
    }

    /// The lock on `node` is ready for Allocate: its holder is bound to the
    /// node with `allocating` (or already `success`, when an earlier try
    /// marked the pod but could not release the lock). Returns the job and
    /// when it is due.
    fn due(&self, node: &str, delay: Duration) -> Option<(Job, Instant)> {
        let holder = self.locks.get(node)?;
        let pod = self.pods.get(holder)?;
        if pod.node != node || !matches!(pod.phase.as_deref(), Some("allocating" | "success")) {
            return None;
        }
        let job = Job {
            node: node.to_string(),
            pod: holder.clone(),
        };
        (!self.running.contains(&job) && !self.done.contains(&job))
            .then_some((job, pod.since + delay))
    }
}

async fn run(plugin: Shared, mut stopped: watch::Receiver<bool>) {
    let nodes = watcher(
        Api::<PartialObjectMeta<Node>>::all(plugin.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff();
    // Only bound pods: the API server filters out the pending ones.
    let pods = watcher(
        Api::<Pod>::all(plugin.client.clone()),
        watcher::Config::default().fields("spec.nodeName!="),
    )
    .default_backoff();
    let (mut nodes, mut pods) = (nodes.boxed(), pods.boxed());
    let mut state = State::default();
    let mut tasks: JoinSet<(Job, bool)> = JoinSet::new();
    // A second look at every lock now and then: a task that failed is
    // tried again even if no event comes.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut touched: Vec<String> = Vec::new();
        tokio::select! {
            _ = stopped.changed() => return,
            Some(event) = nodes.next() => match event {
                Ok(Event::Apply(n) | Event::InitApply(n)) => touched.extend(state.node(&n)),
                Ok(Event::Delete(n)) => {
                    if let Some(name) = n.metadata.name {
                        state.locks.remove(&name);
                    }
                }
                Ok(Event::Init) => state.relisting_nodes = Some(HashSet::new()),
                Ok(Event::InitDone) => {
                    if let Some(seen) = state.relisting_nodes.take() {
                        state.locks.retain(|n, _| seen.contains(n));
                    }
                    touched.extend(state.locks.keys().cloned());
                }
                Err(_) => {
                    plugin.errors.fetch_add(1, Ordering::Relaxed);
                }
            },
            Some(event) = pods.next() => match event {
                Ok(Event::Apply(p) | Event::InitApply(p)) => touched.extend(state.pod(&p)),
                Ok(Event::Delete(p)) => {
                    if let (Some(ns), Some(name)) = (p.metadata.namespace, p.metadata.name) {
                        let key = (ns, name);
                        state.done.retain(|j| j.pod != key);
                        state.pods.remove(&key);
                    }
                }
                Ok(Event::Init) => state.relisting_pods = Some(HashSet::new()),
                Ok(Event::InitDone) => {
                    if let Some(seen) = state.relisting_pods.take() {
                        state.pods.retain(|k, _| seen.contains(k));
                        state.done.retain(|j| seen.contains(&j.pod));
                    }
                    touched.extend(state.locks.keys().cloned());
                }
                Err(_) => {
                    plugin.errors.fetch_add(1, Ordering::Relaxed);
                }
            },
            Some(done) = tasks.join_next() => {
                if let Ok((job, finished)) = done {
                    state.running.remove(&job);
                    if finished {
                        state.done.insert(job);
                    } else {
                        touched.push(job.node);
                    }
                }
            }
            _ = tick.tick() => touched.extend(state.locks.keys().cloned()),
        }
        let delay = Duration::from_millis(plugin.delay_ms.load(Ordering::Relaxed));
        for node in touched {
            if let Some((job, at)) = state.due(&node, delay) {
                state.running.insert(job.clone());
                tasks.spawn(allocate(plugin.clone(), job, at));
            }
        }
    }
}

/// Allocate for one lock: wait until it is due, then mark the pod and
/// release the lock. True when the lock needs nothing more (released, or
/// not this pod's to release); false after an error.
async fn allocate(plugin: Shared, job: Job, at: Instant) -> (Job, bool) {
    tokio::time::sleep_until(at).await;
    let Ok(_permit) = plugin.writers.acquire().await else {
        return (job, false);
    };
    let finished = match allocate_once(&plugin.client, &job).await {
        Ok(released) => {
            if released {
                plugin.released.fetch_add(1, Ordering::Relaxed);
            }
            true
        }
        Err(_) => {
            plugin.errors.fetch_add(1, Ordering::Relaxed);
            false
        }
    };
    (job, finished)
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Sets the pod's phase to `success` (if it is still `allocating` and bound
/// to the node) and removes the lock if it still names the pod, both with
/// the resourceVersion read as precondition. `Ok(true)`: released.
async fn allocate_once(client: &Client, job: &Job) -> anyhow::Result<bool> {
    let (ns, name) = &job.pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut marked = false;
    for _ in 0..CONFLICT_TRIES {
        let pod = match pods.get(name).await {
            Ok(p) => p,
            Err(e) if not_found(&e) => return Ok(false), // gone: gpugate takes the lock over
            Err(e) => return Err(e.into()),
        };
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(job.node.as_str()) {
            return Ok(false);
        }
        let phase = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BIND_PHASE))
            .map(String::as_str);
        match phase {
            Some("success") => {
                marked = true;
                break;
            }
            Some("allocating") => {}
            _ => return Ok(false), // failed, or not ours to judge
        }
        let patch = json!({"metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "annotations": {BIND_PHASE: "success"},
        }});
        match pods
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                marked = true;
                break;
            }
            Err(e) if conflict(&e) => continue,
            Err(e) if not_found(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    if !marked {
        bail!("pod {ns}/{name}: {CONFLICT_TRIES} conflicts in a row");
    }

    let nodes: Api<Node> = Api::all(client.clone());
    for _ in 0..CONFLICT_TRIES {
        let node = match nodes.get_metadata(&job.node).await {
            Ok(n) => n,
            Err(e) if not_found(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let Some(value) = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_LOCK))
        else {
            return Ok(false); // released already
        };
        let lock = decode_node_lock(value).map_err(|e| anyhow!("{NODE_LOCK}: {e}"))?;
        if !lock.is_held_by(ns, name) {
            return Ok(false); // another pod's lock: never ours to remove
        }
        // Released with the version read, so a lock taken since is kept.
        let patch = json!({"metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": {NODE_LOCK: null},
        }});
        match nodes
            .patch(&job.node, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(e) if conflict(&e) => continue,
            Err(e) if not_found(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    bail!("node {}: {CONFLICT_TRIES} conflicts in a row", job.node)
}
