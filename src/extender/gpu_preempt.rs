//! gpugate's own preemption, for pods short only of GPU. kube-scheduler
//! preempts only where its own filters need a victim; HAMi's resources are
//! `ignoredByScheduler`, so a pod that lacks only GPU memory or cores is
//! never offered to `/preempt` (docs/operations.md, "Preemption"). So:
//!
//! 1. `/filter` that leaves a GPU pod no node notes it here.
//! 2. After `scheduler.preemption.graceSeconds`, unless kube-scheduler has
//!    preempted for it meanwhile (a `/preempt` call, or a nominated node),
//!    or it was bound, the pod is read again and
//!    `placement::preemption::candidates` chooses the node and the fewest
//!    lower-priority victims among the nodes that `/filter` refused for
//!    capacity: kube-scheduler offered only nodes that passed its own
//!    filters (nodeSelector, affinity, taints, CPU and memory).
//! 3. The pod is claimed with the annotation `gpugate.io/preemption`
//!    (written only if the pod is unchanged: one replica preempts), the
//!    freed GPUs are nominated for it in the view, and the victims are
//!    evicted through the Eviction API (which refuses to break a
//!    PodDisruptionBudget).
//! 4. When the last victim is gone from the ledger, its GPUs are assumed
//!    for the pod, and the pod is labelled `gpugate.io/gpus-freed` so that
//!    kube-scheduler tries it again at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::cluster::events::PodEvent;
use crate::cluster::{SharedCluster, pod_namespace};
use crate::config::Config;
use crate::placement::preemption::{candidates, gang_plan};

use super::bind::ApiBinder;

use crate::cluster::convert::{GPUS_FREED, PREEMPTION};

/// Pods noted at most; more wait for their next `/filter`.
const CAPACITY: usize = 256;
/// Nodes kept per pod at most (those refused for capacity, in name order):
/// each is searched for victims under the view's read lock. kube-scheduler
/// itself tries at least 100 candidates, or 10% of the nodes.
const NODES_KEPT: usize = 64;

/// What a preemption attempt came to, for `gpugate_preemptions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Victims evicted.
    Evicted,
    /// No node where evicting lower-priority pods makes room.
    Nowhere,
    /// kube-scheduler preempted, bound or nominated it, or another replica
    /// claimed it.
    Handled,
    /// The API server refused an eviction (a PodDisruptionBudget), or a
    /// call failed.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Evicted => "evicted",
            Outcome::Nowhere => "nowhere",
            Outcome::Handled => "handled",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug)]
struct Waiting {
    namespace: String,
    name: String,
    since: Instant,
    /// The nodes kube-scheduler offered that `/filter` refused for
    /// capacity: where evictions may help.
    nodes: Vec<String>,
}

/// The pods waiting for a preemption, and the ones whose freed GPUs are
/// held.
#[derive(Debug, Default)]
pub struct GpuPreemptor {
    waiting: Mutex<HashMap<String, Waiting>>,
    /// Nominated pods already labelled, by UID.
    nudged: Mutex<std::collections::HashSet<String>>,
}

impl GpuPreemptor {
    /// `/filter` left the pod no node; `nodes` are those it refused for
    /// capacity.
    pub fn unplaced(&self, pod: &Pod, nodes: impl Iterator<Item = String>) {
        let Some(uid) = pod.metadata.uid.clone().filter(|u| !u.is_empty()) else {
            return;
        };
        let spec = pod.spec.as_ref();
        if spec.and_then(|s| s.priority).unwrap_or(0) <= 0
            || spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never")
        {
            // It may not preempt, or nothing is below it that it may evict
            // (priorities below 0 are not used in practice).
            return;
        }
        let nodes: Vec<String> = nodes.take(NODES_KEPT).collect();
        if nodes.is_empty() {
            return;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.len() >= CAPACITY && !waiting.contains_key(&uid) {
            return;
        }
        let w = waiting.entry(uid).or_insert_with(|| Waiting {
            namespace: pod_namespace(pod).to_string(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            since: Instant::now(),
            nodes: Vec::new(),
        });
        // The latest cycle's nodes; the wait counts from the first.
        w.nodes = nodes;
    }

    /// kube-scheduler preempts for the pod, or it was placed: nothing to do.
    pub fn handled(&self, uid: &str) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }

    /// Pods noted for longer than `grace`, taken out.
    fn due(&self, grace: Duration) -> Vec<(String, Waiting)> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let due: Vec<String> = waiting
            .iter()
            .filter(|(_, w)| w.since.elapsed() >= grace)
            .map(|(uid, _)| uid.clone())
            .collect();
        due.into_iter()
            .filter_map(|uid| waiting.remove(&uid).map(|w| (uid, w)))
            .collect()
    }

    /// Runs until `stop`: every half second, the pods due, then the nudges
    /// and expiries of nominations.
    pub async fn run(
        self: Arc<Self>,
        cluster: Arc<SharedCluster>,
        binder: Arc<ApiBinder>,
        config: Arc<ArcSwap<Config>>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = tick.tick() => {}
            }
            let config = config.load_full();
            let p = &config.scheduler.preemption;
            if !p.enabled {
                self.waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
                continue;
            }
            for (uid, w) in self.due(Duration::from_secs_f64(p.grace_seconds)) {
                let outcome = preempt_for(&cluster, &binder, &config, &uid, &w).await;
                binder.metrics.preemptions(outcome.as_str());
            }
            self.nudge(&cluster, &binder).await;
            let now = Timestamp::now().as_millisecond();
            if cluster.read().nomination_count() > 0 {
                let ended = cluster.write().expire_nominations(now);
                if ended > 0 {
                    tracing::info!(pods = ended, "preemption: nominations ended (hold time up)");
                }
            }
        }
    }

    /// Labels each nominated pod whose freed GPUs are now held (with those
    /// of every pod of the same preemption), once.
    async fn nudge(&self, cluster: &SharedCluster, binder: &ApiBinder) {
        let ready: Vec<(String, String)> = {
            let view = cluster.read();
            let nudged = self.nudged.lock().unwrap_or_else(|e| e.into_inner());
            view.nominated_ready()
                .into_iter()
                .filter(|uid| !nudged.contains(*uid))
                .filter_map(|uid| Some((uid.to_string(), view.nominated_name(uid)?)))
                .collect()
        };
        for (uid, who) in ready {
            let Some((ns, name)) = who.split_once('/') else {
                continue;
            };
            let patch = json!({"metadata": {"labels": {
                GPUS_FREED: Timestamp::now().as_second().to_string()}}});
            match binder.api().merge_patch_pod(ns, name, &patch).await {
                Ok(_) => {
                    tracing::info!(pod = %who, "preemption: freed GPUs held; pod nudged");
                    self.nudged
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(uid);
                }
                // Tried again on the next tick.
                Err(e) => tracing::warn!(pod = %who, "preemption: nudge failed: {e}"),
            }
        }
        let mut nudged = self.nudged.lock().unwrap_or_else(|e| e.into_inner());
        if !nudged.is_empty() {
            let view = cluster.read();
            nudged.retain(|uid| view.nomination(uid).is_some());
        }
    }
}

/// One preemption attempt for the pod `uid`.
async fn preempt_for(
    cluster: &SharedCluster,
    binder: &ApiBinder,
    config: &Config,
    uid: &str,
    w: &Waiting,
) -> Outcome {
    let api = binder.api();
    let who = format!("{}/{}", w.namespace, w.name);
    let pod = match api.get_pod(&w.namespace, &w.name).await {
        Ok(p) => p,
        Err(e) if e.is_not_found() => return Outcome::Handled,
        Err(e) => {
            tracing::warn!(pod = %who, "preemption: {e}");
            return Outcome::Failed;
        }
    };
    let spec = pod.spec.as_ref();
    let claimed = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PREEMPTION))
        .and_then(|v| v.rsplit_once(',')?.1.parse::<i64>().ok())
        .is_some_and(|at| {
            Timestamp::now().as_second() - at < config.scheduler.preemption.hold_seconds as i64
        });
    if pod.metadata.uid.as_deref() != Some(uid)
        || pod.metadata.deletion_timestamp.is_some()
        || spec.and_then(|s| s.node_name.as_deref()).is_some()
        || pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        || claimed
        || cluster.read().nomination(uid).is_some()
    {
        return Outcome::Handled;
    }
    let Some(decision) = decide(cluster, config, &pod, &w.nodes) else {
        tracing::info!(pod = %who, "preemption: no node where evicting lower-priority pods makes room (for a gang: for every member still needed); nothing evicted");
        return Outcome::Nowhere;
    };
    if decision.victims.is_empty() {
        // It fits now (a gang: its members fit together again).
        return Outcome::Handled;
    }
    // The claim: only on the pod as read, so one replica preempts.
    let claim = json!({"metadata": {
        "resourceVersion": pod.metadata.resource_version,
        "annotations": {PREEMPTION: format!("{},{}", decision.nodes, Timestamp::now().as_second())},
    }});
    if let Err(e) = api.merge_patch_pod(&w.namespace, &w.name, &claim).await {
        // Changed since read: claimed by another replica, or only updated
        // (then tried again after its next failed /filter).
        let claimed = e.is_conflict()
            && api.get_pod(&w.namespace, &w.name).await.is_ok_and(|p| {
                p.metadata
                    .annotations
                    .is_some_and(|a| a.contains_key(PREEMPTION))
            });
        if claimed {
            return Outcome::Handled;
        }
        tracing::warn!(pod = %who, "preemption: claim failed: {e}");
        return Outcome::Failed;
    }
    let hold = config.scheduler.preemption.hold_seconds;
    let until = Timestamp::now().as_millisecond() + i64::try_from(hold * 1000).unwrap_or(i64::MAX);
    let victims: Vec<(String, String)> = {
        let mut view = cluster.write();
        for n in &decision.nominations {
            view.nominate(&n.uid, uid, &n.pod, &n.plan, &n.node, &n.victims, until);
        }
        decision
            .victims
            .iter()
            .map(|v| (v.clone(), view.held_name(v).unwrap_or_default()))
            .collect()
    };
    let names: Vec<&str> = victims.iter().map(|(_, n)| n.as_str()).collect();
    let priority = spec.and_then(|s| s.priority).unwrap_or(0);
    tracing::info!(pod = %who, nodes = %decision.nodes, victims = ?names, "preemption: evicting");
    binder.events().emit(PodEvent::new(
        &pod,
        false,
        "Preempting",
        format!(
            "evicting {} on node {} to free GPU for this pod{} (priority {priority}); kube-scheduler does not preempt for GPU alone",
            names.join(", "),
            decision.nodes,
            if decision.nominations.len() > 1 {
                " and its gang group"
            } else {
                ""
            },
        ),
    ));
    for (victim_uid, victim) in &victims {
        let Some((ns, name)) = victim.split_once('/') else {
            continue;
        };
        match api.evict_pod(ns, name, victim_uid).await {
            Ok(()) => {
                binder.metrics.preemption_victims.inc();
                binder.events().emit(PodEvent::new(
                    &stub_pod(ns, name, victim_uid),
                    false,
                    "Preempted",
                    format!("by {who} (priority {priority}) on node {}", decision.nodes),
                ));
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(pod = %who, victim = %victim, "preemption: eviction refused: {e}");
                binder.events().emit(PodEvent::new(
                    &pod,
                    true,
                    "PreemptionFailed",
                    format!("evicting {victim} on node {}: {e}", decision.nodes),
                ));
                cluster.write().abandon_nominations(uid);
                return Outcome::Failed;
            }
        }
    }
    Outcome::Evicted
}

/// What one preemption evicts, and for whom the freed GPUs are held.
struct Decision {
    /// The node (or, for a gang, the nodes joined by `+`).
    nodes: String,
    victims: Vec<String>,
    nominations: Vec<Nominee>,
}

struct Nominee {
    uid: String,
    pod: Pod,
    plan: crate::engine::PodPlan,
    node: String,
    victims: Vec<String>,
}

/// The preemption for `pod` among `nodes`: the best candidate node for a
/// pod in no group; for a gang member, all or none for its group (see
/// `placement::preemption::gang_plan`).
fn decide(
    cluster: &SharedCluster,
    config: &Config,
    pod: &Pod,
    nodes: &[String],
) -> Option<Decision> {
    let view = cluster.read();
    let plan = crate::cluster::convert::pod_plan(pod, config).ok()?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let Ok(Some(label)) = crate::placement::gang::label_of(&view, pod) else {
        // The Eviction API refuses what breaks a budget, after evicting the
        // victims before it: only sets that break none are taken.
        let c = candidates(&view, config, pod, &plan, nodes, Timestamp::now())
            .into_iter()
            .find(|c| c.victims.violations == 0)?;
        return Some(Decision {
            nodes: c.node.clone(),
            victims: c.victims.pods.clone(),
            nominations: vec![Nominee {
                uid,
                pod: pod.clone(),
                plan,
                node: c.node,
                victims: c.victims.pods,
            }],
        });
    };
    let g = gang_plan(&view, config, pod, Some(nodes))?;
    // Counted over all of them: a budget may select victims on several
    // nodes.
    let all: Vec<&str> = g
        .victims
        .values()
        .flat_map(|v| v.pods.iter().map(String::as_str))
        .collect();
    if view.budget_violations(&all).contains(&true) {
        return None;
    }
    let members = view.gang_members(&label.key)?;
    let nominations = g
        .members
        .iter()
        .filter_map(|(member, node)| {
            let pod = members.get(member)?.clone();
            let plan = crate::cluster::convert::pod_plan(&pod, config).ok()?;
            Some(Nominee {
                uid: member.clone(),
                pod,
                plan,
                node: node.clone(),
                victims: g
                    .victims
                    .get(node)
                    .map(|v| v.pods.clone())
                    .unwrap_or_default(),
            })
        })
        .collect();
    Some(Decision {
        nodes: g.victims.keys().cloned().collect::<Vec<_>>().join("+"),
        victims: g.victims.values().flat_map(|v| v.pods.clone()).collect(),
        nominations,
    })
}

/// A pod reference for an event on a victim.
fn stub_pod(namespace: &str, name: &str, uid: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some(namespace.to_string());
    p.metadata.name = Some(name.to_string());
    p.metadata.uid = Some(uid.to_string());
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pod_name;

    fn pod(uid: &str, priority: i32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ml", "uid": uid},
            "spec": {"priority": priority, "containers": [{"name": "c"}]},
        }))
        .unwrap()
    }

    /// Pods are due after the grace, once; a handled one never; one of
    /// priority 0 has nobody below it and is not noted.
    #[test]
    fn pods_are_due_after_the_grace_unless_handled() {
        let p = GpuPreemptor::default();
        let nodes = || ["n".to_string()].into_iter();
        p.unplaced(&pod("a", 100), nodes());
        p.unplaced(&pod("b", 100), nodes());
        p.unplaced(&pod("zero", 0), nodes());
        p.unplaced(&pod("nowhere", 100), std::iter::empty());
        p.handled("b");
        assert!(p.due(Duration::from_secs(60)).is_empty());
        let due: Vec<String> = p.due(Duration::ZERO).into_iter().map(|(u, _)| u).collect();
        assert_eq!(due, ["a"]);
        assert!(p.due(Duration::ZERO).is_empty());
        assert_eq!(pod_name(&pod("a", 1)), "ml/a");
    }
}
