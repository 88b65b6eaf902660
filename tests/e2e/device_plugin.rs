//! What HAMi's device plugin does once kubelet has a pod to start: for a
//! node locked by a pod that is now bound to it with `hami.io/bind-phase:
//! allocating`, mark the pod `success` and release the node lock. Without
//! this, a second bind to the same node would wait for the lock, as it does
//! in a real cluster while the device plugin sets the first pod up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gpugate::hami::keys::{BIND_PHASE, NODE_LOCK};
use gpugate::hami::node_lock::decode_node_lock;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;

pub struct DevicePlugin {
    pub released: Arc<AtomicU64>,
    /// Passes that failed (an API error); a pass is retried 100 ms later.
    pub errors: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl DevicePlugin {
    pub fn start(client: Client) -> DevicePlugin {
        let released = Arc::new(AtomicU64::new(0));
        let (stop, mut stopped) = watch::channel(false);
        let errors = Arc::new(AtomicU64::new(0));
        let (count, failed) = (released.clone(), errors.clone());
        let task = tokio::spawn(async move {
            loop {
                match pass(&client).await {
                    Ok(n) => count.fetch_add(n, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::select! {
                    _ = stopped.changed() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        });
        DevicePlugin {
            released,
            errors,
            stop,
            task,
        }
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// One look at every node; returns how many locks it released.
async fn pass(client: &Client) -> anyhow::Result<u64> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut released = 0;
    for node in nodes.list(&ListParams::default()).await? {
        let name = node.metadata.name.clone().unwrap_or_default();
        let Some(value) = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NODE_LOCK))
        else {
            continue;
        };
        let Some(holder) = decode_node_lock(value).ok().and_then(|l| l.holder) else {
            continue;
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &holder.namespace);
        let Some(pod) = pods.get_opt(&holder.name).await? else {
            continue; // gone: gpugate takes the lock over
        };
        if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(name.as_str()) {
            continue; // not (yet) bound here: kubelet has not seen it
        }
        let phase = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BIND_PHASE))
            .map(String::as_str);
        if phase == Some("allocating") {
            pods.patch(
                &holder.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {BIND_PHASE: "success"}}})),
            )
            .await?;
        }
        // Released with the version read, so a lock taken since is kept.
        let patch = json!({"metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": {NODE_LOCK: null},
        }});
        if nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .is_ok()
        {
            released += 1;
        }
    }
    Ok(released)
}
