//! HAMi's device-plugin protocol, replayed without gpugate: the scale
//! benchmark's `--protocol-floor` phase. kube-scheduler alone binds plain
//! pods (no webhook, no extender, no extended resources); for each pod
//! bound, this makes the API requests a GPU pod's bind adds in a real
//! cluster, with the same verbs on the same objects:
//!
//! 1. at once: a PATCH of a node that adds a lock annotation naming the
//!    pod (gpugate takes HAMi's node lock before its Binding);
//! 2. after the device plugin's Allocate delay: a GET of the pod, a PATCH
//!    of its bind phase to `success` (with the resourceVersion read, as the
//!    device plugin writes it), a GET of the node's metadata and a PATCH
//!    that removes the lock.
//!
//! With the pod's create, Binding and kube-scheduler's `Scheduled` event
//! that is the eight requests per pod a gpugate phase makes. What the
//! phase leaves out is what gpugate and its configuration add: the two
//! webhook calls per create, the extender's calls, kube-scheduler's checks
//! of the pod's extended resources on every node, and the wait for a
//! node's lock. So its pods per second bound what any scheduler extender
//! that keeps HAMi's protocol can reach on this control plane, and its
//! control-plane CPU per pod is that protocol's floor.
//!
//! The node locked is chosen from the pod's name among all the nodes, not
//! the one kube-scheduler bound the pod to: kube-scheduler alone puts a
//! phase's plain pods on about 13 nodes, and 64 writers on 13 nodes make
//! kube-apiserver retry its writes against etcd (34.5 ms of its CPU per
//! pod in a first run, against 13.6 ms in the gpugate phase of that run,
//! whose binds wait for each node's lock and spread over hundreds of
//! nodes). Any node costs the same to write: they are alike.
//!
//! The keys are this benchmark's own (`replay.gpugate.io/...`), not
//! HAMi's, so that neither the simulated device plugin nor gpugate nor
//! the validating webhook (which refuses pods created with HAMi's
//! allocation keys) acts on them; each is the size of the HAMi key it
//! stands for.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use gpugate::hami::node_lock::{NodeLock, encode_node_lock};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// The label that marks the replayed pods (the watch selects them by it).
pub const LABEL: &str = "replay.gpugate.io/protocol";
/// Stands for `hami.io/mutex.lock` on the node.
const LOCK: &str = "replay.gpugate.io/mutex.lock";
/// Stands for `hami.io/bind-phase` on the pod.
const BIND_PHASE: &str = "replay.gpugate.io/bind-phase";
/// Pods whose requests are in flight at once: enough that the replay
/// keeps up with kube-scheduler's binds, so that its requests compete with
/// the binds for the control plane's CPU while the phase runs rather than
/// after it. At 64 (what the simulated device plugin allows) about a third
/// of them came after the phase's last bind at 1,000 nodes; at 1,024
/// kube-apiserver was flooded and kube-scheduler sent 1.2 Bindings per pod.
const CONCURRENT: usize = 256;

/// The annotations and label a replayed pod is created with: in a gpugate
/// phase the Binding writes HAMi's allocation annotations of about this
/// size onto the pod.
pub fn pod_metadata() -> (Value, Value) {
    let device = "GPU-5a1b4c3d-1111-2222-3333-444455556666,NVIDIA,4096,20:;";
    let annotations = json!({
        BIND_PHASE: "allocating",
        "replay.gpugate.io/bind-time": "1795000000",
        "replay.gpugate.io/vgpu-devices-to-allocate": device,
        "replay.gpugate.io/vgpu-devices-allocated": device,
        "replay.gpugate.io/vgpu-time": "1795000000",
    });
    let labels = json!({ LABEL: "true" });
    (annotations, labels)
}

pub struct Replay {
    /// Pods whose whole sequence was made.
    pub done: Arc<AtomicU64>,
    /// Pods whose sequence stopped at a failed request.
    pub failed: Arc<AtomicU64>,
    /// Failed reads of the pod watch (it lists again and goes on).
    pub watch_errors: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Replay {
    /// Starts watching the bound pods labelled [`LABEL`] in `namespace`;
    /// their locks go to `nodes`.
    pub fn start(
        client: Client,
        namespace: &str,
        delay: Duration,
        nodes: Arc<Vec<String>>,
    ) -> Replay {
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let watch_errors = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(
            client,
            namespace.to_string(),
            (delay, nodes),
            [done.clone(), failed.clone(), watch_errors.clone()],
            stopped,
        ));
        Replay {
            done,
            failed,
            watch_errors,
            stop,
            task,
        }
    }

    /// Stops the watch and every sequence not yet made.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn run(
    client: Client,
    namespace: String,
    (delay, nodes): (Duration, Arc<Vec<String>>),
    [done, failed, watch_errors]: [Arc<AtomicU64>; 3],
    mut stopped: watch::Receiver<bool>,
) {
    let pods = watcher(
        Api::<Pod>::namespaced(client.clone(), &namespace),
        watcher::Config::default()
            .labels(LABEL)
            .fields("spec.nodeName!="),
    )
    .default_backoff();
    let mut pods = pods.boxed();
    let writers = Arc::new(Semaphore::new(CONCURRENT));
    let mut seen: HashSet<String> = HashSet::new();
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            Some(event) = pods.next() => match event {
                Ok(Event::Apply(p) | Event::InitApply(p)) => {
                    let bound = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
                    if let (Some(name), true) = (p.metadata.name, bound)
                        && let Some(node) = node_for(&name, &nodes)
                        && seen.insert(name.clone())
                    {
                        let one = One {
                            client: client.clone(),
                            namespace: namespace.clone(),
                            name,
                            node,
                        };
                        let (writers, done, failed) =
                            (writers.clone(), done.clone(), failed.clone());
                        tasks.spawn(async move {
                            match one.replay(&writers, delay).await {
                                Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                                Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                            };
                        });
                    }
                }
                Ok(Event::Delete(p)) => {
                    if let Some(name) = p.metadata.name {
                        seen.remove(&name);
                    }
                }
                Ok(_) => {}
                Err(_) => {
                    watch_errors.fetch_add(1, Ordering::Relaxed);
                }
            },
            Some(_) = tasks.join_next() => {}
        }
    }
}

/// The node whose lock a pod's replay takes: one of `nodes` by the pod's
/// name.
fn node_for(pod: &str, nodes: &[String]) -> Option<String> {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    pod.hash(&mut h);
    let n = u64::try_from(nodes.len()).ok().filter(|n| *n > 0)?;
    let i = usize::try_from(h.finish() % n).ok()?;
    nodes.get(i).cloned()
}

/// One bound pod's sequence.
struct One {
    client: Client,
    namespace: String,
    name: String,
    node: String,
}

impl One {
    async fn replay(&self, writers: &Semaphore, delay: Duration) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let lock = encode_node_lock(&NodeLock::new(
            Timestamp::now(),
            &self.namespace,
            &self.name,
        ));
        {
            let _w = writers.acquire().await?;
            let patch = json!({"metadata": {"annotations": {LOCK: lock}}});
            nodes
                .patch(&self.node, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
        tokio::time::sleep(delay).await;
        let _w = writers.acquire().await?;
        let pod = pods.get(&self.name).await?;
        let patch = json!({"metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "annotations": {BIND_PHASE: "success"},
        }});
        pods.patch(&self.name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        nodes.get_metadata(&self.node).await?;
        // Without a resourceVersion: other pods' locks on the same node
        // come and go meanwhile, and a conflict would add requests a
        // gpugate phase does not make (its binds wait for the lock).
        let patch = json!({"metadata": {"annotations": {LOCK: null}}});
        nodes
            .patch(&self.node, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }
}
