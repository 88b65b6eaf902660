//! What the kubelet and HAMi's device plugin do once a GPU pod is bound to
//! a node: some time after the bind (the Allocate delay, counted from when
//! the pod was first seen bound) the kubelet admits the pod and calls
//! Allocate for each of its containers that asks for GPUs, init containers
//! first. Allocate carries no pod name: HAMi's device plugin finds the pod
//! through the node lock (`hami.io/mutex.lock`), as HAMi master does
//! (#3126): the lock must name a pod that is Pending and bound to the node.
//! It hands each container the next non-empty entry of that pod's
//! `hami.io/vgpu-devices-to-allocate` (a Hygon DCU pod's
//! `hami.io/dcu-devices-to-allocate`, which Hygon's plugin reads the same
//! way, hami-vendors.md 3.6), writes back what is left with
//! `hami.io/bind-phase: success` once nothing is, and releases the lock.
//!
//! So the simulation sees the protocol's hazards as a real node would: a
//! pod admitted while the lock names another pod gets that pod's devices
//! (HAMi #3096), and a pod admitted without a lock gets none. Each is
//! recorded ([`DevicePlugin::mistakes`]); what each container got is kept
//! ([`DevicePlugin::served`]).
//!
//! Driven by two watches (node metadata for the locks, bound pods for
//! `spec.nodeName`, the bind phase and the containers), so that it costs
//! nothing on a thousand idle nodes. Each admission is a task of its own;
//! at most `CONCURRENT_WRITES` write at a time. A pod can be held back
//! ([`DevicePlugin::hold`]: its kubelet is down) and let go again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail};
use futures::StreamExt as _;
use gpugate::hami::keys::{BIND_PHASE, NODE_LOCK};
use gpugate::hami::node_lock::decode_node_lock;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Admissions writing to the API server at the same time.
const CONCURRENT_WRITES: usize = 64;
/// Tries of one write that meets a conflict (a newer resourceVersion).
const CONFLICT_TRIES: usize = 20;

/// What one container was given by Allocate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub container: String,
    /// The device-list entry handed to it (`uuid,NVIDIA,mem,cores:`...).
    pub entry: String,
    /// `namespace/name` of the pod whose list the entry came from (the
    /// lock's holder): the pod itself, unless the protocol failed.
    pub from: String,
}

pub struct DevicePlugin {
    /// Node locks released.
    pub released: Arc<AtomicU64>,
    /// Failed watches and failed admissions (an admission is tried again
    /// at the next event about its pod, or within a second).
    pub errors: Arc<AtomicU64>,
    delay_ms: Arc<AtomicU64>,
    record: Arc<Record>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// How long a node lock the plugin released was held: from the time its
/// value names (gpugate's clock when it took it) to the release, and of
/// that the part since the plugin first saw the pod bound (the Allocate
/// delay, the plugin's own writes).
#[derive(Debug, Clone, Copy)]
pub struct LockHold {
    pub held: Duration,
    pub after_bound: Duration,
}

/// What the plugin did and was told, shared with its tasks.
#[derive(Default)]
struct Record {
    /// Pods whose kubelet does not admit them yet.
    held: Mutex<HashSet<PodKey>>,
    /// What each admitted pod's containers got.
    served: Mutex<HashMap<PodKey, Vec<Served>>>,
    /// Admissions that gave a container another pod's devices, or none.
    mistakes: Mutex<Vec<String>>,
    /// How long each lock the plugin released was held.
    holds: Mutex<Vec<LockHold>>,
}

impl DevicePlugin {
    /// Starts watching; `delay` is how long after the bind the kubelet
    /// admits a pod.
    pub fn start(client: Client, delay: Duration) -> DevicePlugin {
        let plugin = Shared {
            client,
            released: Arc::new(AtomicU64::new(0)),
            errors: Arc::new(AtomicU64::new(0)),
            delay_ms: Arc::new(AtomicU64::new(millis(delay))),
            writers: Arc::new(Semaphore::new(CONCURRENT_WRITES)),
            record: Arc::new(Record::default()),
        };
        let (stop, stopped) = watch::channel(false);
        let (released, errors, delay_ms, record) = (
            plugin.released.clone(),
            plugin.errors.clone(),
            plugin.delay_ms.clone(),
            plugin.record.clone(),
        );
        let task = tokio::spawn(run(plugin, stopped));
        DevicePlugin {
            released,
            errors,
            delay_ms,
            record,
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

    /// The kubelet does not admit pod `namespace/name` until [`Self::let_go`].
    pub fn hold(&self, namespace: &str, name: &str) {
        lock(&self.record.held).insert((namespace.to_string(), name.to_string()));
    }

    /// The kubelet admits the pod again (within a second).
    pub fn let_go(&self, namespace: &str, name: &str) {
        lock(&self.record.held).remove(&(namespace.to_string(), name.to_string()));
    }

    /// What the containers of pod `namespace/name` got, in the order the
    /// kubelet asked (init containers first); empty until it is admitted.
    pub fn served(&self, namespace: &str, name: &str) -> Vec<Served> {
        lock(&self.record.served)
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// The lock holds of every lock released since the last call.
    pub fn take_holds(&self) -> Vec<LockHold> {
        std::mem::take(&mut *lock(&self.record.holds))
    }

    /// Every admission so far that gave a container another pod's devices
    /// or found no lock naming a pending pod, in words.
    pub fn mistakes(&self) -> Vec<String> {
        lock(&self.record.mistakes).clone()
    }

    /// Stops the watches and every admission (one cut short leaves its
    /// lock, which gpugate takes over).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    record: Arc<Record>,
}

/// A pod by namespace and name.
type PodKey = (String, String);

/// A bound pod as the watch last showed it.
struct BoundPod {
    node: String,
    phase: Option<String>,
    /// The containers that ask for GPUs, init containers first: the
    /// kubelet calls Allocate for each.
    gpu_containers: Vec<String>,
    /// When the plugin first saw it bound to `node`.
    since: Instant,
}

#[derive(Default)]
struct State {
    /// Node → the pod its lock names.
    locks: HashMap<String, PodKey>,
    pods: HashMap<PodKey, BoundPod>,
    /// Pods with an admission running.
    running: HashSet<PodKey>,
    /// Pods admitted (or found not to need it any more): never again,
    /// even while the watch still shows them allocating.
    done: HashSet<PodKey>,
    /// Keys seen during a re-list, to drop what the list no longer has.
    relisting_nodes: Option<HashSet<String>>,
    relisting_pods: Option<HashSet<PodKey>>,
}

/// The pod a node's readable `hami.io/mutex.lock` names.
fn lock_holder(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<gpugate::hami::LockHolder> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(NODE_LOCK))
        .and_then(|v| decode_node_lock(v).ok())
        .and_then(|l| l.holder)
}

/// Whether a container asks for devices: a `…/gpu` count resource, under
/// any resource name prefix, or any of another device kind's resources.
fn asks_for_gpus(c: &Container) -> bool {
    resource_names(c).any(|k| {
        k.ends_with("/gpu")
            || gpugate::devices::kinds().any(|(_, kind)| names_of(kind).contains(&k))
    })
}

/// Whether a container asks for devices of `kind` (any of its resources).
fn asks_for_kind(c: &Container, kind: &gpugate::devices::DeviceKind) -> bool {
    let names = names_of(kind);
    resource_names(c).any(|k| names.contains(&k) || (kind.hami_core && k.ends_with("/gpu")))
}

/// The resource names of a container's limits and requests.
fn resource_names(c: &Container) -> impl Iterator<Item = &str> {
    let r = c.resources.as_ref();
    [
        r.and_then(|r| r.limits.as_ref()),
        r.and_then(|r| r.requests.as_ref()),
    ]
    .into_iter()
    .flatten()
    .flat_map(|m| m.keys().map(String::as_str))
}

/// A kind's resource names, as HAMi's chart names them.
fn names_of(kind: &gpugate::devices::DeviceKind) -> Vec<&'static str> {
    let c = &kind.config;
    [
        c.resource_count_name,
        c.resource_memory_name,
        c.resource_memory_percentage_name,
        c.resource_core_name,
    ]
    .into_iter()
    .filter(|n| !n.is_empty())
    .collect()
}

/// The device kinds whose allocated list the pod carries, in `KINDS`
/// order.
fn kinds_held(
    annotations: &std::collections::BTreeMap<String, String>,
) -> Vec<&'static gpugate::devices::DeviceKind> {
    gpugate::devices::kinds()
        .map(|(_, k)| k)
        .filter(|k| annotations.contains_key(k.pod_lists.allocated))
        .collect()
}

/// The pod's containers (init first) that ask for `kind`: for a HAMi-core
/// kind (whose resources may be renamed), those asking for devices but
/// none of the other kinds in `held`.
fn containers_of(
    pod: &Pod,
    kind: &gpugate::devices::DeviceKind,
    held: &[&gpugate::devices::DeviceKind],
) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .filter(|c| {
            if kind.hami_core {
                asks_for_gpus(c)
                    && !held
                        .iter()
                        .any(|k| !std::ptr::eq(*k, kind) && asks_for_kind(c, k))
            } else {
                asks_for_kind(c, kind)
            }
        })
        .map(|c| c.name.clone())
        .collect()
}

impl State {
    fn node(&mut self, node: &PartialObjectMeta<Node>) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        if let Some(seen) = self.relisting_nodes.as_mut() {
            seen.insert(name.clone());
        }
        match lock_holder(&node.metadata) {
            Some(h) => {
                self.locks.insert(name, (h.namespace, h.name));
            }
            None => {
                self.locks.remove(&name);
            }
        }
    }

    /// Records a bound pod; returns its key.
    fn pod(&mut self, pod: &Pod) -> Option<PodKey> {
        let key = (pod.metadata.namespace.clone()?, pod.metadata.name.clone()?);
        if let Some(seen) = self.relisting_pods.as_mut() {
            seen.insert(key.clone());
        }
        let spec = pod.spec.as_ref()?;
        let node = spec.node_name.clone()?;
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
        let gpu_containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .filter(|c| asks_for_gpus(c))
            .map(|c| c.name.clone())
            .collect();
        self.pods.insert(
            key.clone(),
            BoundPod {
                node,
                phase,
                gpu_containers,
                since,
            },
        );
        Some(key)
    }

    /// The pod is ready for the kubelet: bound with `allocating` (or
    /// already `success` while the lock still names it, when an earlier
    /// try marked the pod but could not release the lock). Returns its
    /// admission and when it is due.
    fn due(&self, key: &PodKey, delay: Duration, held: &HashSet<PodKey>) -> Option<(Job, Instant)> {
        let pod = self.pods.get(key)?;
        let ready = match pod.phase.as_deref() {
            Some("allocating") => true,
            Some("success") => self.locks.get(&pod.node) == Some(key),
            _ => false,
        };
        if !ready
            || pod.gpu_containers.is_empty()
            || held.contains(key)
            || self.running.contains(key)
            || self.done.contains(key)
        {
            return None;
        }
        let job = Job {
            node: pod.node.clone(),
            pod: key.clone(),
            containers: pod.gpu_containers.clone(),
            since: pod.since,
        };
        Some((job, pod.since + delay))
    }
}

/// One pod to admit on its node.
#[derive(Clone)]
struct Job {
    node: String,
    pod: PodKey,
    containers: Vec<String>,
    /// When the plugin first saw the pod bound.
    since: Instant,
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
    let mut tasks: JoinSet<(PodKey, bool)> = JoinSet::new();
    // A second look at every pod now and then: an admission that failed,
    // or a pod let go, is tried even if no event comes.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut touched: Vec<PodKey> = Vec::new();
        let mut all = false;
        tokio::select! {
            _ = stopped.changed() => return,
            Some(event) = nodes.next() => match event {
                // A lock released may let a pod marked `success` be done.
                Ok(Event::Apply(n) | Event::InitApply(n)) => state.node(&n),
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
                        state.done.remove(&key);
                        state.pods.remove(&key);
                    }
                }
                Ok(Event::Init) => state.relisting_pods = Some(HashSet::new()),
                Ok(Event::InitDone) => {
                    if let Some(seen) = state.relisting_pods.take() {
                        state.pods.retain(|k, _| seen.contains(k));
                        state.done.retain(|k| seen.contains(k));
                    }
                    all = true;
                }
                Err(_) => {
                    plugin.errors.fetch_add(1, Ordering::Relaxed);
                }
            },
            Some(done) = tasks.join_next() => {
                if let Ok((key, finished)) = done {
                    state.running.remove(&key);
                    if finished {
                        state.done.insert(key);
                    } else {
                        touched.push(key);
                    }
                }
            }
            _ = tick.tick() => all = true,
        }
        if all {
            touched.extend(state.pods.keys().cloned());
        }
        let delay = Duration::from_millis(plugin.delay_ms.load(Ordering::Relaxed));
        let held = lock(&plugin.record.held).clone();
        for key in touched {
            if let Some((job, at)) = state.due(&key, delay, &held) {
                state.running.insert(key);
                tasks.spawn(admit(plugin.clone(), job, at));
            }
        }
    }
}

/// One admission: wait until it is due, then Allocate for the pod's GPU
/// containers. True when the pod needs nothing more; false after an error.
async fn admit(plugin: Shared, job: Job, at: Instant) -> (PodKey, bool) {
    tokio::time::sleep_until(at).await;
    let Ok(_permit) = plugin.writers.acquire().await else {
        return (job.pod, false);
    };
    let finished = match admit_once(&plugin, &job).await {
        Ok(released) => {
            if let Some(taken) = released {
                plugin.released.fetch_add(1, Ordering::Relaxed);
                let held = jiff::Timestamp::now().duration_since(taken);
                lock(&plugin.record.holds).push(LockHold {
                    held: Duration::try_from(held).unwrap_or_default(),
                    after_bound: job.since.elapsed(),
                });
            }
            true
        }
        Err(_) => {
            plugin.errors.fetch_add(1, Ordering::Relaxed);
            false
        }
    };
    (job.pod, finished)
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The non-empty entries of a device list, and the list with the first
/// `n` of them emptied (what HAMi's plugin writes back).
fn pop_entries(list: &str, n: usize) -> (Vec<String>, String) {
    let mut taken = Vec::new();
    let mut rest = Vec::new();
    let mut pieces: Vec<&str> = list.split(';').collect();
    if pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    }
    for entry in pieces {
        if !entry.is_empty() && taken.len() < n {
            taken.push(entry.to_string());
            rest.push("");
        } else {
            rest.push(entry);
        }
    }
    let rest = rest.iter().map(|e| format!("{e};")).collect();
    (taken, rest)
}

/// For a kind split into templates, the first device of `entries` that
/// its `huawei.com/<chip>` JSON does not name (or that JSON unreadable).
fn runtime_info_missing(
    annotations: &std::collections::BTreeMap<String, String>,
    key: &str,
    entries: &[String],
) -> Option<String> {
    let chip = gpugate::devices::kinds()
        .find(|(_, k)| k.pod_lists.to_allocate == key)
        .and_then(|(_, k)| k.templates)
        .filter(|c| !c.runtime_info.is_empty())?;
    let info: Vec<Value> = annotations
        .get(chip.runtime_info)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    entries
        .iter()
        .flat_map(|e| e.split(':').filter(|d| !d.is_empty()))
        .filter_map(|d| d.split(',').next())
        .find(|uuid| !info.iter().any(|o| o["UUID"] == *uuid))
        .map(|uuid| format!("{} names no {uuid}", chip.runtime_info))
}

/// For Metax sGPUs (hami-vendors.md 5.3), the first device of `entries`
/// that `metax-tech.com/gpu-devices-allocated` does not give with the
/// entry's memory and cores (0 left out), or a `predicate-time` that is
/// not a number: what Metax's plugin reads instead of HAMi's list.
fn sgpu_problem(
    annotations: &std::collections::BTreeMap<String, String>,
    key: &str,
    entries: &[String],
) -> Option<String> {
    use gpugate::devices::metax;
    if key != metax::METAX_SGPU.pod_lists.to_allocate {
        return None;
    }
    let given: Vec<Vec<Value>> = annotations
        .get(metax::GPU_DEVICES_ALLOCATED)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let given: Vec<&Value> = given.iter().flatten().collect();
    if annotations
        .get(metax::PREDICATE_TIME)
        .is_none_or(|t| t.parse::<i128>().is_err())
    {
        return Some(format!("{} is not a time", metax::PREDICATE_TIME));
    }
    let number = |o: &Value, k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0).to_string();
    entries
        .iter()
        .flat_map(|e| e.split(':').filter(|d| !d.is_empty()))
        .map(|d| d.split(',').collect::<Vec<_>>())
        .find(|f| {
            !given.iter().any(|o| {
                o["uuid"] == f[0]
                    && Some(number(o, "vRam").as_str()) == f.get(2).copied()
                    && Some(number(o, "compute").as_str()) == f.get(3).copied()
            })
        })
        .map(|f| format!("{} gives no {f:?}", metax::GPU_DEVICES_ALLOCATED))
}

/// Allocate for each of the pod's device containers, by the protocol of
/// each kind it holds: HAMi's lock ([`admit_hami`]) for most, Cambricon's
/// own lock and AWS's `NEURON_ALLOCATED` for theirs ([`admit_vendor`]).
/// `Ok(Some(t))`: HAMi's lock, taken at `t`, was released.
async fn admit_once(plugin: &Shared, job: &Job) -> anyhow::Result<Option<jiff::Timestamp>> {
    let pods: Api<Pod> = Api::namespaced(plugin.client.clone(), &job.pod.0);
    let pod = match pods.get(&job.pod.1).await {
        Ok(p) => p,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let held = kinds_held(&pod.metadata.annotations.clone().unwrap_or_default());
    let hami = gpugate::devices::NodeLockStyle::Hami;
    let mut released = None;
    if held.is_empty() || held.iter().any(|k| k.node_lock == hami) {
        released = admit_hami(plugin, job).await?;
    }
    for kind in held.iter().filter(|k| k.node_lock != hami) {
        admit_vendor(plugin, job, kind, &held).await?;
    }
    Ok(released)
}

/// Allocate for a kind whose plugin does not go through HAMi's lock
/// (inferred from the keys HAMi writes for it; hami-vendors.md 4.6, 10.6):
///
/// - Cambricon: the node carries `cambricon.com/dsmlu.lock`; the pod's
///   `CAMBRICON_DSMLU_PROFILE` describes its first MLU entry
///   (`<index>_<cores>_<units>`); the plugin hands out the to-allocate
///   entries, sets `CAMBRICON_DSMLU_ASSIGNED: "true"` and removes the
///   lock.
/// - AWS Neuron: the pod names the node (`aws.amazon.com/predicate-node`)
///   and lists its devices or cores (`AWS_NEURON_IDS`); the plugin hands
///   out the allocated entries and sets `NEURON_ALLOCATED: "true"`.
/// - Any other kind without a lock (whole Metax GPUs, Enflame GCUs and
///   Kunlunxin XPUs; 5.6, 8.7, 9.6): the pod is bound to the node
///   (`hami.io/vgpu-node`) and `allocating`; the plugin hands out the
///   to-allocate entries (the allocated ones when HAMi writes no
///   to-allocate list), writes back what is left and marks the pod
///   `success`. Kunlunxin's plugin hands out `BAIDU_COM_DEVICE_IDX`, which
///   must name the last entry's XPUs.
/// - Enflame DRS (9.3, 9.6): `enflame.com/gcu-assigned` is `false`; the
///   GCU (`gcu-assigned-index`, `-id`), its minor and the slices
///   (`gcu-request-size`, the entry's fifth field) are the first entry's,
///   and `assigned-containers` names each asking container with its
///   slices and profile; the plugin makes the slices and sets
///   `gcu-assigned: "true"`.
async fn admit_vendor(
    plugin: &Shared,
    job: &Job,
    kind: &'static gpugate::devices::DeviceKind,
    held: &[&gpugate::devices::DeviceKind],
) -> anyhow::Result<()> {
    use gpugate::devices::{aws_neuron, cambricon, enflame, kunlun};
    let who = format!("{}/{}", job.pod.0, job.pod.1);
    let pods: Api<Pod> = Api::namespaced(plugin.client.clone(), &job.pod.0);
    let nodes: Api<Node> = Api::all(plugin.client.clone());
    let cambricon = std::ptr::eq(kind, &cambricon::CAMBRICON);
    let aws = std::ptr::eq(kind, &aws_neuron::AWS_NEURON);
    let drs = std::ptr::eq(kind, &enflame::ENFLAME_DRS);
    let (done_key, list_key, (pending, done)) = if drs {
        let key = kind.pod_lists.allocated;
        (enflame::GCU_ASSIGNED, key, ("false", "true"))
    } else if cambricon {
        let key = kind.pod_lists.to_allocate;
        (cambricon::DSMLU_ASSIGNED, key, ("false", "true"))
    } else if aws {
        let key = kind.pod_lists.allocated;
        (aws_neuron::ALLOCATED, key, ("false", "true"))
    } else if kind.pod_lists.to_allocate.is_empty() {
        let key = kind.pod_lists.allocated;
        (BIND_PHASE, key, ("allocating", "success"))
    } else {
        let key = kind.pod_lists.to_allocate;
        (BIND_PHASE, key, ("allocating", "success"))
    };
    for _ in 0..CONFLICT_TRIES {
        let pod = match pods.get(&job.pod.1).await {
            Ok(p) => p,
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        match annotations.get(done_key).map(String::as_str) {
            Some(v) if v == done => return Ok(()),
            Some(v) if v == pending => {}
            other => {
                mistake(
                    plugin,
                    format!("Allocate for {who}: {done_key} is {other:?}"),
                );
                return Ok(());
            }
        }
        let containers = containers_of(&pod, kind, held);
        let list = annotations.get(list_key).cloned().unwrap_or_default();
        let (entries, rest) = pop_entries(&list, containers.len());
        let problem = if cambricon {
            let node = nodes.get_metadata(&job.node).await?;
            let locked = node
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(cambricon::NODE_LOCK));
            // The first device of the first entry.
            let profile = entries.first().and_then(|e| {
                let f: Vec<&str> = e.split(':').next()?.split(',').collect();
                let index = f.first()?.rsplit('-').next()?;
                let units = f.get(2)?.parse::<u64>().ok()? / 256;
                Some(format!("{index}_{}_{units}", f.get(3)?))
            });
            if !locked {
                Some(format!("node {} has no {}", job.node, cambricon::NODE_LOCK))
            } else if annotations.get(cambricon::DSMLU_PROFILE) != profile.as_ref() {
                Some(format!(
                    "{} is {:?}, its first MLU {profile:?}",
                    cambricon::DSMLU_PROFILE,
                    annotations.get(cambricon::DSMLU_PROFILE)
                ))
            } else {
                None
            }
        } else if drs {
            drs_problem(&annotations, &entries, &containers, &job.node)
        } else if !aws {
            let last: Vec<&str> = entries
                .last()
                .map(|e| {
                    e.split(':')
                        .filter(|d| !d.is_empty())
                        .filter_map(|d| d.split(',').next()?.rsplit('-').next())
                        .collect()
                })
                .unwrap_or_default();
            if annotations.get(gpugate::hami::keys::VGPU_NODE) != Some(&job.node) {
                Some(format!("the pod is not bound to node {}", job.node))
            } else if std::ptr::eq(kind, &kunlun::KUNLUN_XPU)
                && annotations.get(kunlun::DEVICE_IDX) != Some(&last.join(","))
            {
                Some(format!(
                    "{} is {:?}, the last entry's XPUs {last:?}",
                    kunlun::DEVICE_IDX,
                    annotations.get(kunlun::DEVICE_IDX)
                ))
            } else {
                None
            }
        } else if annotations.get(aws_neuron::PREDICATE_NODE) != Some(&job.node)
            || annotations
                .get(aws_neuron::NEURON_IDS)
                .is_none_or(|v| v.is_empty())
        {
            Some(format!(
                "{} and {} do not name node {} and its devices",
                aws_neuron::PREDICATE_NODE,
                aws_neuron::NEURON_IDS,
                job.node
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            mistake(plugin, format!("Allocate for {who}: {problem}"));
            return Ok(());
        }
        let mut changes = serde_json::Map::new();
        changes.insert(done_key.to_string(), json!(done));
        if list_key == kind.pod_lists.to_allocate {
            changes.insert(list_key.to_string(), json!(rest));
        }
        let patch = json!({"metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "annotations": changes,
        }});
        match pods
            .patch(&job.pod.1, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(e) if conflict(&e) => continue,
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let served: Vec<Served> = containers
            .iter()
            .enumerate()
            .map(|(i, container)| Served {
                container: container.clone(),
                entry: entries.get(i).cloned().unwrap_or_default(),
                from: who.clone(),
            })
            .collect();
        if served.iter().any(|s| s.entry.is_empty()) {
            mistake(
                plugin,
                format!("Allocate for {who}: a container got no entry: {served:?}"),
            );
        }
        lock(&plugin.record.served)
            .entry(job.pod.clone())
            .or_default()
            .extend(served);
        if cambricon {
            // Released without an owner check, as HAMi's own release does.
            let patch = json!({"metadata": {"annotations": {cambricon::NODE_LOCK: null}}});
            nodes
                .patch(&job.node, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
        return Ok(());
    }
    bail!("pod {who}: {CONFLICT_TRIES} conflicts in a row")
}

/// What Enflame's DRS plugin would find wrong in the pod's annotations
/// (see [`admit_vendor`]): `entries` are the asking containers' entries of
/// `hami.io/enflame-vgpu-devices-allocated`, `containers` their names.
fn drs_problem(
    annotations: &std::collections::BTreeMap<String, String>,
    entries: &[String],
    containers: &[String],
    node: &str,
) -> Option<String> {
    use gpugate::devices::enflame;
    let get = |k: &str| annotations.get(k).map(String::as_str);
    // `<node>-enflame-drs-<index>,Enflame,mem,cores[,slices]`.
    let first: Vec<&str> = entries
        .first()
        .map(|e| e.trim_end_matches(':').split(',').collect())
        .unwrap_or_default();
    let index = first
        .first()
        .and_then(|u| u.strip_prefix(&format!("{node}-enflame-drs-")));
    let slices = first.get(4).copied().unwrap_or("1");
    if index.is_none() || get(enflame::GCU_ASSIGNED_INDEX) != index {
        return Some(format!(
            "gcu-assigned-index is not the first entry's: {first:?}"
        ));
    }
    if get(enflame::GCU_ASSIGNED_ID) != index || get(enflame::GCU_ASSIGNED_MINOR).is_none() {
        return Some("gcu-assigned-id or -minor missing".to_string());
    }
    if get(enflame::GCU_REQUEST_SIZE) != Some(slices) {
        return Some(format!(
            "gcu-request-size is not the entry's {slices} slices"
        ));
    }
    let assigned: serde_json::Map<String, Value> = get(enflame::ASSIGNED_CONTAINERS)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let named = containers.iter().zip(entries).all(|(c, e)| {
        let s = e.trim_end_matches(':').split(',').nth(4).unwrap_or("1");
        assigned.get(c).is_some_and(|o| {
            o["allocated"] == false
                && o["request"].as_u64().is_some_and(|n| n.to_string() == s)
                && o["profileName"]
                    .as_str()
                    .is_some_and(|p| p.starts_with(&format!("{s}g.")))
        })
    });
    (!named).then(|| format!("assigned-containers is {assigned:?} for {containers:?}"))
}

/// Allocate for each of the pod's GPU containers, as HAMi's plugin does:
/// the pod is the one the node's lock names (Pending and bound here), its
/// next entries go to the containers, then it is marked `success` and the
/// lock released, each write with the resourceVersion read as
/// precondition. `Ok(Some(t))`: a lock taken at `t` was released.
async fn admit_hami(plugin: &Shared, job: &Job) -> anyhow::Result<Option<jiff::Timestamp>> {
    let client = &plugin.client;
    let who = format!("{}/{}", job.pod.0, job.pod.1);
    let nodes: Api<Node> = Api::all(client.clone());
    let node = match nodes.get_metadata(&job.node).await {
        Ok(n) => n,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(holder) = lock_holder(&node.metadata) else {
        // Marked `success` by an earlier try, the lock since released:
        // nothing left to do. Otherwise the plugin finds no pod.
        if !already_marked(client, &job.pod, &job.node).await? {
            mistake(
                plugin,
                format!(
                    "Allocate for {who} on node {}: no node lock names a pending pod",
                    job.node
                ),
            );
        }
        return Ok(None);
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &holder.namespace);
    let from = format!("{}/{}", holder.namespace, holder.name);
    let mut marked = false;
    for _ in 0..CONFLICT_TRIES {
        let pod = match pods.get(&holder.name).await {
            Ok(p) => p,
            // The pod itself was deleted meanwhile: no kubelet admits it.
            Err(e) if not_found(&e) && from == who => return Ok(None),
            Err(e) if not_found(&e) => {
                mistake(
                    plugin,
                    format!(
                        "Allocate for {who} on node {}: the lock names {from}, which is gone",
                        job.node
                    ),
                );
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let pending_here = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
            == Some(job.node.as_str())
            && matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                None | Some("Pending")
            );
        match annotations.get(BIND_PHASE).map(String::as_str) {
            // Marked by an earlier try that could not release the lock.
            Some("success") if from == who => {
                marked = true;
                break;
            }
            Some("allocating") if pending_here => {}
            _ => {
                mistake(
                    plugin,
                    format!(
                        "Allocate for {who} on node {}: the lock names {from}, which is not \
                         waiting for its devices",
                        job.node
                    ),
                );
                return Ok(None);
            }
        }
        // Each kind behind HAMi's lock hands its own list to its own
        // containers (a pod may hold two kinds; hami-vendors.md 1.3).
        let all_held = kinds_held(&annotations);
        let mut hami_kinds: Vec<_> = all_held
            .iter()
            .copied()
            .filter(|k| k.node_lock == gpugate::devices::NodeLockStyle::Hami)
            .collect();
        if hami_kinds.is_empty() {
            hami_kinds.push(gpugate::devices::KindId::NVIDIA.kind());
        }
        let mut served: Vec<Served> = Vec::new();
        let mut rests = serde_json::Map::new();
        let mut done = true;
        for (n, kind) in hami_kinds.iter().enumerate() {
            let key = kind.pod_lists.to_allocate;
            // The pod's own containers of the kind; for another pod's
            // list (a hazard), the admitted pod's containers.
            let containers = if from == who {
                containers_of(&pod, kind, &all_held)
            } else if n == 0 {
                job.containers.clone()
            } else {
                Vec::new()
            };
            let list = annotations.get(key).cloned().unwrap_or_default();
            let (entries, rest) = pop_entries(&list, containers.len());
            // Ascend's plugin looks each device up by UUID in
            // huawei.com/<chip> for its template (hami-vendors.md 2.6), and
            // Metax's sGPU plugin in its own JSON (5.3): one missing is an
            // error.
            if let Some(missing) = runtime_info_missing(&annotations, key, &entries)
                .or_else(|| sgpu_problem(&annotations, key, &entries))
            {
                mistake(plugin, format!("Allocate for {who}: {missing}"));
                return Ok(None);
            }
            served.extend(containers.iter().enumerate().map(|(i, container)| Served {
                container: container.clone(),
                entry: entries.get(i).cloned().unwrap_or_default(),
                from: from.clone(),
            }));
            done &= rest.split(';').all(str::is_empty);
            rests.insert(key.to_string(), json!(rest));
        }
        let mut patch = json!({"metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "annotations": rests,
        }});
        if done {
            patch["metadata"]["annotations"][BIND_PHASE] = json!("success");
        }
        match pods
            .patch(&holder.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                if from != who || served.iter().any(|s| s.entry.is_empty()) {
                    mistake(
                        plugin,
                        format!(
                            "Allocate for {who} on node {}: its containers got {from}'s devices \
                             {:?}",
                            job.node,
                            served.iter().map(|s| s.entry.as_str()).collect::<Vec<_>>()
                        ),
                    );
                }
                lock(&plugin.record.served).insert(job.pod.clone(), served);
                if !done {
                    return Ok(None);
                }
                marked = true;
                break;
            }
            Err(e) if conflict(&e) => continue,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    if !marked {
        bail!("pod {from}: {CONFLICT_TRIES} conflicts in a row");
    }
    // The node as first read: its resourceVersion is the release's
    // precondition, so a lock changed since is read again, not removed.
    release(&nodes, node, &job.node, &holder.namespace, &holder.name).await
}

/// Whether the pod is marked `success` already (an earlier try).
async fn already_marked(client: &Client, pod: &PodKey, node: &str) -> anyhow::Result<bool> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.0);
    match pods.get(&pod.1).await {
        Ok(p) => Ok(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                && p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(BIND_PHASE))
                    .is_some_and(|v| v == "success"),
        ),
        Err(e) if not_found(&e) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Removes the node's lock if it still names `namespace/name`, with the
/// node's resourceVersion as precondition: first the version of `read`
/// (the node as read before Allocate, so one read serves both, as in
/// HAMi's plugin), after a conflict the node read again. `Ok(Some(t))`:
/// released, the lock taken at `t`.
async fn release(
    nodes: &Api<Node>,
    read: PartialObjectMeta<Node>,
    node: &str,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<jiff::Timestamp>> {
    let mut read = Some(read);
    for _ in 0..CONFLICT_TRIES {
        let current = match read.take() {
            Some(first) => first,
            None => match nodes.get_metadata(node).await {
                Ok(n) => n,
                Err(e) if not_found(&e) => return Ok(None),
                Err(e) => return Err(e.into()),
            },
        };
        let Some(value) = current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_LOCK))
        else {
            return Ok(None); // released already
        };
        let lock = decode_node_lock(value).map_err(|e| anyhow!("{NODE_LOCK}: {e}"))?;
        if !lock.is_held_by(namespace, name) {
            return Ok(None); // another pod's lock: never ours to remove
        }
        // Released with the version read, so a lock taken since is kept.
        let patch = json!({"metadata": {
            "resourceVersion": current.metadata.resource_version,
            "annotations": {NODE_LOCK: null},
        }});
        match nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(Some(lock.time)),
            Err(e) if conflict(&e) => continue,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    bail!("node {node}: {CONFLICT_TRIES} conflicts in a row")
}

fn mistake(plugin: &Shared, what: String) {
    lock(&plugin.record.mistakes).push(what);
}
