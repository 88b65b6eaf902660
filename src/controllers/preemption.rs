//! gpugate's own preemption, for pods short only of GPU. kube-scheduler
//! preempts only where its own filters need a victim; HAMi's resources are
//! `ignoredByScheduler`, so a pod that lacks only GPU memory or cores is
//! never offered to `/preempt` (docs/operations.md, "Preemption"). So:
//!
//! A controller beside the extender, with its own API handle (its own
//! rate limit) and events; `/filter` only notes pods here (its
//! `Effect::Unplaced`), `/bind` and `/preempt` say when one is handled.
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
use serde_json::json;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::cluster::SharedCluster;
use crate::cluster::api::ApiCalls;
use crate::cluster::events::{EventSink, PodEvent, pod_ref};
use crate::config::Config;
use crate::placement::PodToPlace;

use super::defragmentation::{self, DefragMetrics, Defragmenter};
use crate::placement::preemption::{candidates, gang_plan};

/// gpugate's own preemption's claim on a pod: `<node>,<unix seconds>`.
/// Only gpugate writes it (the validating webhook refuses it on create).
pub const CLAIM: &str = "gpugate.io/preemption";

/// Label set on a pod when the GPUs freed for it are held: a pod update,
/// which makes kube-scheduler try the pod again.
pub const GPUS_FREED: &str = "gpugate.io/gpus-freed";

/// Whether gpugate may make room for a pod `/filter` left without a node:
/// preempt for it (preemption on, a priority above 0, `preemptionPolicy`
/// not `Never`) or move pods for it (defragmentation on, and some
/// namespace policy lets its pods move). Others are not noted: nothing
/// would be done for them but reading them again.
pub fn may_make_room(config: &Config, pod: &PodToPlace) -> bool {
    let s = &config.scheduler;
    (s.preemption.enabled && pod.priority > 0 && pod.preempts)
        || (s.defragmentation.enabled && config.namespace_policies.iter().any(|p| p.movable))
}

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

/// gpugate's own preemption: the pods waiting for one, the ones whose
/// freed GPUs are held, and what it works through.
#[derive(Debug)]
pub struct Preemptor {
    noted: Noted,
    /// Nominated pods already labelled, by UID.
    nudged: Mutex<std::collections::HashSet<String>>,
    api: ApiCalls,
    events: EventSink,
    metrics: PreemptionMetrics,
    /// For pods preemption cannot help (shared with Kueue's admission
    /// check: one limit of moves per minute).
    defrag: Arc<Defragmenter>,
}

/// The pods `/filter` left without a node, by UID.
#[derive(Debug, Default)]
struct Noted {
    waiting: Mutex<HashMap<String, Waiting>>,
}

impl Preemptor {
    pub fn new(api: ApiCalls, events: EventSink, metrics: PreemptionMetrics) -> Self {
        Self {
            noted: Noted::default(),
            nudged: Mutex::default(),
            api,
            events,
            defrag: Arc::new(Defragmenter::new(metrics.defrag.clone())),
            metrics,
        }
    }

    /// `/filter` left the pod no node; `nodes` are those it refused for
    /// capacity.
    pub fn unplaced(&self, pod: &PodToPlace, nodes: Vec<String>) {
        self.noted.unplaced(pod, nodes);
    }

    /// Defragmentation, for the others that make room (Kueue's admission
    /// check).
    pub fn defragmenter(&self) -> Arc<Defragmenter> {
        self.defrag.clone()
    }

    /// kube-scheduler preempts for the pod, or it was placed: nothing to do.
    pub fn handled(&self, uid: &str) {
        self.noted.handled(uid);
    }
}

impl Noted {
    fn unplaced(&self, pod: &PodToPlace, mut nodes: Vec<String>) {
        let uid = pod.uid();
        if uid.is_empty() {
            return;
        }
        nodes.truncate(NODES_KEPT);
        if nodes.is_empty() {
            return;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.len() >= CAPACITY && !waiting.contains_key(uid) {
            return;
        }
        let w = waiting.entry(uid.to_string()).or_insert_with(|| Waiting {
            namespace: pod.namespace().to_string(),
            name: pod.pod().metadata.name.clone().unwrap_or_default(),
            since: Instant::now(),
            nodes: Vec::new(),
        });
        // The latest cycle's nodes; the wait counts from the first.
        w.nodes = nodes;
    }

    fn handled(&self, uid: &str) {
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

    fn clear(&self) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Preemptor {
    /// Runs until `stop`: every half second, the pods due, then the nudges.
    /// (Nominations whose time is up end with the other holds:
    /// `controllers::expiry`.)
    pub async fn run(
        self: Arc<Self>,
        cluster: Arc<SharedCluster>,
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
            // Never evict from a stale view: the pods noted stay noted
            // and are judged once it is current again.
            if cluster.current().is_err() {
                continue;
            }
            if !p.enabled && !config.scheduler.defragmentation.enabled {
                self.noted.clear();
            }
            for (uid, w) in self.noted.due(Duration::from_secs_f64(p.grace_seconds)) {
                if let Some(outcome) = self.preempt_for(&cluster, &config, &uid, &w).await {
                    self.metrics.attempt(outcome.as_str());
                }
            }
            self.nudge(&cluster).await;
        }
    }

    /// Labels each nominated pod whose freed GPUs are now held (with those
    /// of every pod of the same preemption), once.
    async fn nudge(&self, cluster: &SharedCluster) {
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
            match self.api.merge_patch_pod(ns, name, &patch).await {
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

impl Preemptor {
    /// One preemption attempt for the pod `uid`.
    async fn preempt_for(
        &self,
        cluster: &SharedCluster,
        config: &Config,
        uid: &str,
        w: &Waiting,
    ) -> Option<Outcome> {
        let api = &self.api;
        let who = format!("{}/{}", w.namespace, w.name);
        let pod = match api.get_pod(&w.namespace, &w.name).await {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Some(Outcome::Handled),
            Err(e) => {
                tracing::warn!(pod = %who, "preemption: {e}");
                return Some(Outcome::Failed);
            }
        };
        let spec = pod.spec.as_ref();
        // Claimed by preemption or defragmentation within its hold.
        let claimed_within = |key: &str, hold: u64| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .and_then(|v| v.rsplit_once(',')?.1.parse::<i64>().ok())
                .is_some_and(|at| Timestamp::now().as_second().saturating_sub(at) < hold as i64)
        };
        let claimed = claimed_within(CLAIM, config.scheduler.preemption.hold_seconds)
            || claimed_within(
                defragmentation::CLAIM,
                config.scheduler.defragmentation.hold_seconds,
            );
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
            return Some(Outcome::Handled);
        }
        // A pod that cannot be planned was never left without a node by
        // /filter for want of capacity: nothing to preempt for.
        let Ok(pod) = PodToPlace::read(pod, config, &cluster.read()) else {
            return Some(Outcome::Nowhere);
        };
        // A replacement of a moved pod waits for its held place (a chain's
        // is held once another moved pod has left): nothing to do for it.
        if crate::placement::defrag::held_destination(&cluster.read(), &pod).is_some() {
            return Some(Outcome::Handled);
        }
        // Preemption first (it may: enabled, a priority above 0, not
        // `preemptionPolicy: Never`); where it cannot help, defragmentation.
        let may_preempt = config.scheduler.preemption.enabled && pod.priority > 0 && pod.preempts;
        let decision = if may_preempt {
            decide(cluster, config, &pod, &w.nodes)
        } else {
            None
        };
        let Some(decision) = decision else {
            if may_preempt {
                tracing::info!(pod = %who, "preemption: no node where evicting lower-priority pods makes room (for a gang: for every member still needed); nothing evicted");
            }
            if config.scheduler.defragmentation.enabled {
                self.defrag
                    .make_room((api, &self.events), cluster, config, &pod, &w.nodes)
                    .await;
            }
            return may_preempt.then_some(Outcome::Nowhere);
        };
        if decision.victims.is_empty() {
            // It fits now (a gang: its members fit together again).
            return Some(Outcome::Handled);
        }
        // The claim: only on the pod as read, so one replica preempts.
        let claim = json!({"metadata": {
            "resourceVersion": pod.pod().metadata.resource_version,
            "annotations": {CLAIM: format!("{},{}", decision.nodes, Timestamp::now().as_second())},
        }});
        if let Err(e) = api.merge_patch_pod(&w.namespace, &w.name, &claim).await {
            // Changed since read: claimed by another replica, or only updated
            // (then tried again after its next failed /filter).
            let claimed = e.is_conflict()
                && api.get_pod(&w.namespace, &w.name).await.is_ok_and(|p| {
                    p.metadata
                        .annotations
                        .is_some_and(|a| a.contains_key(CLAIM))
                });
            if claimed {
                return Some(Outcome::Handled);
            }
            tracing::warn!(pod = %who, "preemption: claim failed: {e}");
            return Some(Outcome::Failed);
        }
        let hold = config.scheduler.preemption.hold_seconds;
        let until =
            Timestamp::now().as_millisecond() + i64::try_from(hold * 1000).unwrap_or(i64::MAX);
        let victims: Vec<(String, String)> = {
            let mut view = cluster.write();
            for n in &decision.nominations {
                view.nominate(
                    &n.uid,
                    uid,
                    n.pod.pod(),
                    &n.pod.plan,
                    &n.node,
                    &n.victims,
                    until,
                );
            }
            decision
                .victims
                .iter()
                .map(|v| (v.clone(), view.held_name(v).unwrap_or_default()))
                .collect()
        };
        let names: Vec<&str> = victims.iter().map(|(_, n)| n.as_str()).collect();
        let priority = pod.priority;
        tracing::info!(pod = %who, nodes = %decision.nodes, victims = ?names, "preemption: evicting");
        self.events.emit(PodEvent::new(
        pod.pod(),
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
                    self.metrics.victims.inc();
                    self.events.emit(PodEvent::new(
                        &pod_ref(ns, name, victim_uid),
                        false,
                        "Preempted",
                        format!("by {who} (priority {priority}) on node {}", decision.nodes),
                    ));
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    tracing::warn!(pod = %who, victim = %victim, "preemption: eviction refused: {e}");
                    self.events.emit(PodEvent::new(
                        pod.pod(),
                        true,
                        "PreemptionFailed",
                        format!("evicting {victim} on node {}: {e}", decision.nodes),
                    ));
                    cluster.write().abandon_nominations(uid);
                    return Some(Outcome::Failed);
                }
            }
        }
        Some(Outcome::Evicted)
    }
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
    pod: PodToPlace,
    node: String,
    victims: Vec<String>,
}

/// The preemption for `pod` among `nodes`: the best candidate node for a
/// pod in no group; for a gang member, all or none for its group (see
/// `placement::preemption::gang_plan`).
fn decide(
    cluster: &SharedCluster,
    config: &Config,
    pod: &PodToPlace,
    nodes: &[String],
) -> Option<Decision> {
    let view = cluster.read();
    let Ok(Some(label)) = pod.gang() else {
        // The Eviction API refuses what breaks a budget, after evicting the
        // victims before it: only sets that break none are taken.
        let c = candidates(&view, config, pod, nodes, Timestamp::now())
            .into_iter()
            .find(|c| c.victims.violations == 0)?;
        return Some(Decision {
            nodes: c.node.clone(),
            victims: c.victims.pods.clone(),
            nominations: vec![Nominee {
                uid: pod.uid().to_string(),
                pod: pod.clone(),
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
            let member_pod = members.get(member)?.clone();
            Some(Nominee {
                uid: member.clone(),
                pod: PodToPlace::read(member_pod, config, &view).ok()?,
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

/// What gpugate's own preemption reports to Prometheus.
#[derive(Debug, Clone, Default)]
pub struct PreemptionMetrics {
    /// Attempts, by outcome.
    attempts: Family<PreemptionLabels, Counter>,
    /// Pods evicted.
    pub victims: Counter,
    /// Defragmentation's, for pods preemption cannot help.
    pub defrag: DefragMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PreemptionLabels {
    /// `evicted`, `nowhere`, `handled` or `failed`.
    outcome: &'static str,
}

impl PreemptionMetrics {
    /// Counts one attempt, by its outcome ([`Outcome::as_str`]).
    pub fn attempt(&self, outcome: &'static str) {
        self.attempts
            .get_or_create(&PreemptionLabels { outcome })
            .inc();
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_preemptions",
            "gpugate's own preemption attempts for pods short only of GPU, by outcome \
             (evicted, nowhere, handled: kube-scheduler or another replica did, failed)",
            self.attempts.clone(),
        );
        registry.register(
            "gpugate_preemption_victims",
            "Pods evicted by gpugate's own preemption",
            self.victims.clone(),
        );
        self.defrag.register(registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::pod_name;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(uid: &str, priority: i32) -> PodToPlace {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ml", "uid": uid},
            "spec": {"priority": priority, "containers": [{"name": "c"}]},
        }))
        .unwrap();
        let groups = crate::engine::gang::PodGroups::NotServed;
        PodToPlace::with_groups(pod, &Config::default(), groups).unwrap()
    }

    /// A pod is noted only if something can be done for it: preemption
    /// for a priority above 0, defragmentation once a namespace opted in.
    #[test]
    fn only_pods_room_can_be_made_for_are_noted() {
        let mut config = Config::default();
        assert!(!may_make_room(&config, &pod("zero", 0)));
        assert!(may_make_room(&config, &pod("high", 100)));
        config.scheduler.preemption.enabled = false;
        assert!(!may_make_room(&config, &pod("high", 100)));
        config.namespace_policies = Config::from_yaml(
            "namespacePolicies: [{name: apps, namespaces: [apps], movable: true}]",
            "test",
        )
        .unwrap()
        .namespace_policies;
        assert!(may_make_room(&config, &pod("zero", 0)));
        config.scheduler.defragmentation.enabled = false;
        assert!(!may_make_room(&config, &pod("zero", 0)));
    }

    /// Pods are due after the grace, once; a handled one never; one of
    /// priority 0 is noted too (nothing is below it to preempt, but
    /// defragmentation may make room); one with no node refused for
    /// capacity is not.
    #[test]
    fn pods_are_due_after_the_grace_unless_handled() {
        let p = Noted::default();
        let nodes = || vec!["n".to_string()];
        p.unplaced(&pod("a", 100), nodes());
        p.unplaced(&pod("b", 100), nodes());
        p.unplaced(&pod("zero", 0), nodes());
        p.unplaced(&pod("nowhere", 100), Vec::new());
        p.handled("b");
        assert!(p.due(Duration::from_secs(60)).is_empty());
        let mut due: Vec<String> = p.due(Duration::ZERO).into_iter().map(|(u, _)| u).collect();
        due.sort();
        assert_eq!(due, ["a", "zero"]);
        assert!(p.due(Duration::ZERO).is_empty());
        assert_eq!(pod_name(pod("a", 1).pod()), "ml/a");
    }
}
