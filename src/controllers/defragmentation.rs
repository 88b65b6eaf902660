//! Defragmentation, acted on: for a pod `/filter` left without a node and
//! that preemption cannot help (same or lower priority than the GPU
//! holders, or nothing to preempt), the plan of `placement::defrag`, made
//! like gpugate's own preemption (`controllers::preemption`, which calls
//! it after its grace):
//!
//! 1. the movable pods of opted-in namespaces are listed, the plan is
//!    searched on a copy of the view's state (no lock held meanwhile);
//! 2. the destination nodes are read, and a plan whose replacement
//!    kube-scheduler would not let onto its destination (nodeSelector,
//!    affinity, taints) is searched again without that node;
//! 3. the pending pod is claimed (`gpugate.io/defragmentation`, written
//!    only if the pod is unchanged: one replica acts), within the moves per
//!    minute;
//! 4. the GPUs the moved pods free on the target are nominated for it (held
//!    once they are gone, then the pod is nudged), and a place is held for
//!    each replacement on its destination;
//! 5. the moved pods are evicted through the Eviction API (which refuses
//!    to break a PodDisruptionBudget); if one is refused, the plan stops:
//!    the pending pod's nomination and the places of pods not moved are
//!    given back.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::cluster::SharedCluster;
use crate::cluster::api::ApiCalls;
use crate::cluster::events::{EventSink, PodEvent, pod_ref};
use crate::cluster::view::gang_moves;
use crate::config::Config;
use crate::engine::PodPlan;
use crate::engine::gang::GangKey;
use crate::placement::PodToPlace;
use crate::placement::defrag::{
    DefragPlan, GangDefragPlan, GangOutcome, Inputs, Outcome, PlannedMove, finish_movers,
    held_movers, hold_gang_plan, hold_replacements, moved_pods_in_place, namespace_movable,
    plan_gang_on, plan_on,
};
use crate::placement::scheduler_checks;

/// Defragmentation's claim on the pending pod: `<node>,<unix seconds>`.
/// Only gpugate writes it (the validating webhook refuses it on create).
pub const CLAIM: &str = "gpugate.io/defragmentation";

/// Searches again at most this often when a destination turns out to be
/// one kube-scheduler would not use.
const REPLANS: usize = 3;

/// What an attempt came to, for `gpugate_defrag_plans_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefragOutcome {
    /// Moved: the pods are evicted, the places held.
    Moved,
    /// No plan (nothing movable, or no set of moves makes room).
    NoPlan,
    /// The plan needs more moves than the minute's limit leaves.
    RateLimited,
    /// Another replica claimed the pod, or it fits now.
    Handled,
    /// An eviction was refused (a PodDisruptionBudget) or a call failed:
    /// the plan was abandoned.
    Abandoned,
}

impl DefragOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            DefragOutcome::Moved => "moved",
            DefragOutcome::NoPlan => "no_plan",
            DefragOutcome::RateLimited => "rate_limited",
            DefragOutcome::Handled => "handled",
            DefragOutcome::Abandoned => "abandoned",
        }
    }
}

/// The moves of the last minute, and the metrics.
#[derive(Debug, Default)]
pub struct Defragmenter {
    moves: Mutex<VecDeque<Instant>>,
    pub metrics: DefragMetrics,
}

impl Defragmenter {
    pub fn new(metrics: DefragMetrics) -> Self {
        Self {
            moves: Mutex::default(),
            metrics,
        }
    }

    /// One attempt for `pod` (read just now, unbound, unclaimed), among
    /// `nodes` (those `/filter` refused for capacity).
    pub async fn make_room(
        &self,
        (api, events): (&ApiCalls, &EventSink),
        cluster: &SharedCluster,
        config: &Config,
        pod: &PodToPlace,
        nodes: &[String],
    ) -> DefragOutcome {
        let outcome = self
            .attempt((api, events), cluster, config, pod, nodes)
            .await;
        self.metrics.plan(outcome.as_str());
        outcome
    }

    async fn attempt(
        &self,
        (api, events): (&ApiCalls, &EventSink),
        cluster: &SharedCluster,
        config: &Config,
        pod: &PodToPlace,
        nodes: &[String],
    ) -> DefragOutcome {
        let who = pod.who().to_string();
        let d = &config.scheduler.defragmentation;
        if !matches!(pod.gang(), Ok(None)) {
            // Gangs are preempted for whole, not defragmented for.
            return DefragOutcome::NoPlan;
        }
        let pods = match movable_pods(api, cluster, config, &who).await {
            Ok(p) => p,
            Err(o) => return o,
        };
        let search = |inputs: &Inputs<'_>| {
            // Under the view's lock: who may move, and a copy of the state
            // that only they can leave (GPU inventories shared), so that
            // no lock is held while the search runs.
            let (state, budgets, movers) = {
                let view = cluster.read();
                let held = held_movers(&view, config, pod, &pods, Timestamp::now());
                let keys = held
                    .iter()
                    .filter_map(|(i, _)| pods.get(*i)?.metadata.uid.as_deref());
                (
                    view.state().copy_for_moves(keys),
                    view.budgets().clone(),
                    held,
                )
            };
            let movers = finish_movers(config, &pods, movers);
            let outcome = self.timed(d.search_millis, |stop| {
                plan_on(state, &budgets, config, pod, movers, inputs, stop)
            });
            match outcome {
                Outcome::Plan(p) => Ok(p),
                Outcome::NotNeeded => Err(DefragOutcome::Handled),
                Outcome::GangMember => Err(DefragOutcome::NoPlan),
                Outcome::NoPlan {
                    exhaustive,
                    movable,
                } => {
                    tracing::info!(pod = %who, movable, exhaustive, "defragmentation: no set of at most {} moves makes room", d.max_moves);
                    Err(DefragOutcome::NoPlan)
                }
            }
        };
        let plan = match checked_plan(api, &who, Some(nodes), &pods, search, |p| &p.moves).await {
            Ok(p) => p,
            Err(o) => return o,
        };
        if !self.take_moves(plan.moves.len(), d.moves_per_minute) {
            tracing::info!(pod = %who, moves = plan.moves.len(), "defragmentation: the plan needs more moves than the minute's limit leaves; tried again on its next attempt");
            return DefragOutcome::RateLimited;
        }
        // The claim: only on the pod as read, so one replica acts.
        let (namespace, name) = who.split_once('/').unwrap_or(("", ""));
        let claim = json!({"metadata": {
            "resourceVersion": pod.pod().metadata.resource_version,
            "annotations": {CLAIM: format!("{},{}", plan.node, Timestamp::now().as_second())},
        }});
        if let Err(e) = api.merge_patch_pod(namespace, name, &claim).await {
            self.give_back_moves(plan.moves.len());
            if e.is_conflict() {
                return DefragOutcome::Handled;
            }
            tracing::warn!(pod = %who, "defragmentation: claim failed: {e}");
            return DefragOutcome::Abandoned;
        }
        if let Err(why) = self.hold(cluster, pod, &plan, d.hold_seconds) {
            // Binds since the search took part of the plan: nothing is
            // evicted, and the pod may be planned again at once.
            self.give_back_moves(plan.moves.len());
            tracing::info!(pod = %who, "defragmentation: the plan no longer holds ({why}); nothing evicted");
            release_claim(api, namespace, name, &who).await;
            return DefragOutcome::Abandoned;
        }
        tracing::info!(pod = %who, plan = %plan.describe(), "defragmentation: moving");
        events.emit(PodEvent::new(
            pod.pod(),
            false,
            "Defragmenting",
            format!(
                "{}; the freed GPUs and each replacement's place are held {} s",
                plan.describe(),
                d.hold_seconds
            ),
        ));
        if let Err((moved, refusal)) = self.evict(api, events, &plan.moves, &who).await {
            events.emit(PodEvent::new(
                pod.pod(),
                true,
                "DefragmentationAbandoned",
                refusal,
            ));
            {
                let mut view = cluster.write();
                view.abandon_nominations(pod.uid());
                view.release_destinations(pod.uid(), &moved);
            }
            release_claim(api, namespace, name, &who).await;
            return DefragOutcome::Abandoned;
        }
        self.metrics
            .gpus_freed
            .inc_by(plan.allocation.grant_count() as u64);
        DefragOutcome::Moved
    }

    /// Runs a search (given its stop: `millis` from now) off the runtime,
    /// counting its time.
    fn timed<T>(&self, millis: u64, search: impl FnOnce(&dyn Fn() -> bool) -> T) -> T {
        let started = Instant::now();
        let deadline = started + Duration::from_millis(millis);
        let out_of_time = || Instant::now() >= deadline;
        let found = off_the_runtime(|| search(&out_of_time));
        self.metrics
            .search_micros
            .inc_by(started.elapsed().as_micros() as u64);
        found
    }

    /// Counts `n` moves against the minute's limit, if they fit in it (one
    /// lock: gpugate's preemption and Kueue's check take moves at once).
    fn take_moves(&self, n: usize, per_minute: u32) -> bool {
        let mut moves = self.moves.lock().unwrap_or_else(|e| e.into_inner());
        while moves
            .front()
            .is_some_and(|t| t.elapsed() >= Duration::from_secs(60))
        {
            moves.pop_front();
        }
        if n > (per_minute as usize).saturating_sub(moves.len()) {
            return false;
        }
        moves.extend(std::iter::repeat_n(Instant::now(), n));
        true
    }

    /// Moves counted but not made (the plan stopped before its evictions).
    fn give_back_moves(&self, n: usize) {
        let mut moves = self.moves.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..n {
            moves.pop_back();
        }
    }

    /// Evicts the pods of `moves` (each event says it makes room for
    /// `whom`), in order; stops at the first refusal (a
    /// PodDisruptionBudget, a failed call). `Err` holds the UIDs moved
    /// before it, and the refusal in words.
    async fn evict(
        &self,
        api: &ApiCalls,
        events: &EventSink,
        moves: &[PlannedMove],
        whom: &str,
    ) -> Result<(), (Vec<String>, String)> {
        let mut moved: Vec<String> = Vec::new();
        for m in moves {
            let Some((moved_ns, moved_name)) = m.pod.split_once('/') else {
                continue;
            };
            match api.evict_pod(moved_ns, moved_name, &m.uid).await {
                Ok(()) => {
                    moved.push(m.uid.clone());
                    self.metrics.moves.inc();
                    events.emit(PodEvent::new(
                        &pod_ref(moved_ns, moved_name, &m.uid),
                        false,
                        "Moved",
                        format!(
                            "evicted from node {} to make room for {whom} (GPU fragmentation); its {} recreates it, and its place is held on node {}",
                            m.from, m.owner.0, m.to
                        ),
                    ));
                }
                Err(e) if e.is_not_found() => moved.push(m.uid.clone()),
                Err(e) => {
                    tracing::warn!(for_whom = %whom, victim = %m.pod, "defragmentation: eviction refused, plan abandoned: {e}");
                    return Err((moved, format!("moving {} from node {}: {e}", m.pod, m.from)));
                }
            }
        }
        Ok(())
    }

    /// One attempt to make room for a gang whose members must all be placed
    /// at once (a Kueue workload's pods), named `whom` in events: the plan
    /// of [`plan_gang_on`] on what the view leaves the gang
    /// ([`crate::cluster::ClusterView::state_without_gang_holds`]), its
    /// destinations checked as for a pod. If it is made, the pods are
    /// evicted, each replacement's place is held (group
    /// [`gang_moves`]), and each member's place waits for it
    /// ([`crate::cluster::ClusterView::hold_gang_place`]), for the config's
    /// `holdSeconds`. Movers are chosen as for `priority_of` (its priority;
    /// never itself).
    pub async fn make_room_for_gang(
        &self,
        (api, events): (&ApiCalls, &EventSink),
        cluster: &SharedCluster,
        config: &Config,
        gang: &GangToPlace<'_>,
    ) -> Result<GangDefragPlan, DefragOutcome> {
        let outcome = self
            .attempt_for_gang((api, events), cluster, config, gang)
            .await;
        self.metrics.plan(match &outcome {
            Ok(_) => DefragOutcome::Moved.as_str(),
            Err(o) => o.as_str(),
        });
        outcome
    }

    async fn attempt_for_gang(
        &self,
        (api, events): (&ApiCalls, &EventSink),
        cluster: &SharedCluster,
        config: &Config,
        gang: &GangToPlace<'_>,
    ) -> Result<GangDefragPlan, DefragOutcome> {
        let who = gang.whom;
        let d = &config.scheduler.defragmentation;
        let pods = movable_pods(api, cluster, config, who).await?;
        let candidates: Vec<Option<&[String]>> =
            gang.candidates.iter().map(|c| c.as_deref()).collect();
        let search = |inputs: &Inputs<'_>| {
            let (state, budgets, movers) = {
                let view = cluster.read();
                let held = held_movers(&view, config, gang.priority_of, &pods, Timestamp::now());
                let keys = held
                    .iter()
                    .filter_map(|(i, _)| pods.get(*i)?.metadata.uid.as_deref());
                let state = view.state_without_gang_holds(gang.group);
                (state.copy_for_moves(keys), view.budgets().clone(), held)
            };
            let movers = finish_movers(config, &pods, movers);
            let outcome = self.timed(d.search_millis, |stop| {
                plan_gang_on(
                    state,
                    &budgets,
                    config,
                    gang.pending,
                    &candidates,
                    movers,
                    inputs,
                    stop,
                )
            });
            match outcome {
                GangOutcome::Plan(p) => Ok(p),
                GangOutcome::NotNeeded => Err(DefragOutcome::Handled),
                GangOutcome::NoPlan {
                    exhaustive,
                    movable,
                } => {
                    tracing::info!(gang = %who, movable, exhaustive, "defragmentation: no set of at most {} moves makes room", d.max_moves);
                    Err(DefragOutcome::NoPlan)
                }
            }
        };
        let plan = checked_plan(api, who, None, &pods, search, |p| &p.moves).await?;
        if !self.take_moves(plan.moves.len(), d.moves_per_minute) {
            tracing::info!(gang = %who, moves = plan.moves.len(), "defragmentation: the plan needs more moves than the minute's limit leaves; tried again on its next attempt");
            return Err(DefragOutcome::RateLimited);
        }
        let until = Timestamp::now().as_millisecond()
            + i64::try_from(d.hold_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        let moves = gang_moves(gang.group, until);
        let held = hold_gang_plan(
            &mut cluster.write(),
            (gang.group, &moves),
            gang.pending,
            &plan,
            until,
        );
        if let Err(why) = held {
            self.give_back_moves(plan.moves.len());
            tracing::info!(gang = %who, "defragmentation: the plan no longer holds ({why}); nothing evicted");
            return Err(DefragOutcome::Abandoned);
        }
        tracing::info!(gang = %who, plan = %plan.describe(), "defragmentation: moving");
        if let Err((moved, refusal)) = self.evict(api, events, &plan.moves, who).await {
            tracing::info!(gang = %who, "defragmentation abandoned: {refusal}");
            let mut view = cluster.write();
            view.release_gang_places(gang.group);
            view.release_destinations(&moves, &moved);
            return Err(DefragOutcome::Abandoned);
        }
        let freed: usize = plan.places.iter().map(|(_, a)| a.grant_count()).sum();
        self.metrics.gpus_freed.inc_by(freed as u64);
        Ok(plan)
    }

    /// Nominates the target's freed GPUs for the pending pod and holds a
    /// place for each replacement, until `hold_seconds` from now, after
    /// checking under the write lock that the plan, made on a copy, still
    /// holds: every moved pod where it was, the pending pod fitting on the
    /// target once they are gone, and every place free now but those on a
    /// node another moved pod leaves (a chain: held once it has). If not,
    /// nothing is held and why is returned.
    fn hold(
        &self,
        cluster: &SharedCluster,
        pod: &PodToPlace,
        plan: &DefragPlan,
        hold_seconds: u64,
    ) -> Result<(), String> {
        let until = Timestamp::now().as_millisecond()
            + i64::try_from(hold_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        let uid = pod.uid();
        let mut view = cluster.write();
        moved_pods_in_place(&view, &plan.moves)?;
        let on_target: Vec<String> = plan
            .moves
            .iter()
            .filter(|m| m.from == plan.node)
            .map(|m| m.uid.clone())
            .collect();
        let removed: Vec<(&str, &crate::engine::Allocation)> = on_target
            .iter()
            .filter_map(|u| Some((u.as_str(), view.state().allocation(u)?)))
            .collect();
        if let Err(r) = view.state().fit_without(&pod.plan, &plan.node, &removed) {
            return Err(format!("node {} was taken meanwhile: {r}", plan.node));
        }
        view.nominate(
            uid,
            uid,
            pod.pod(),
            &pod.plan,
            &plan.node,
            &on_target,
            until,
        );
        if let Err(why) = hold_replacements(&mut view, uid, &plan.moves, until) {
            view.abandon_nominations(uid);
            return Err(why);
        }
        Ok(())
    }
}

/// Runs `work` (the search: up to `searchMillis` of CPU) where it does not
/// hold up the runtime's other tasks: on a multi-threaded runtime (serve's)
/// the worker hands its tasks to another first; elsewhere inline.
fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// A gang defragmentation makes room for: its members, by member key,
/// each with the nodes kube-scheduler would offer it (`None`: every
/// node).
#[derive(Debug)]
pub struct GangToPlace<'g> {
    pub group: &'g GangKey,
    /// Named in events and logs: "workload ml/train".
    pub whom: &'g str,
    pub pending: &'g [(String, PodPlan)],
    pub candidates: &'g [Option<Vec<String>>],
    /// A member, for the rules of who may move for it (its priority).
    pub priority_of: &'g PodToPlace,
}

/// The pods of the namespaces whose policy lets theirs move (those holding
/// GPUs), listed.
async fn movable_pods(
    api: &ApiCalls,
    cluster: &SharedCluster,
    config: &Config,
    who: &str,
) -> Result<Vec<Pod>, DefragOutcome> {
    let namespaces: Vec<String> = {
        let view = cluster.read();
        view.quotas()
            .used_namespaces()
            .filter(|ns| namespace_movable(&view, config, ns))
            .map(str::to_string)
            .collect()
    };
    if namespaces.is_empty() {
        tracing::debug!(for_whom = %who, "defragmentation: no namespace holding GPUs lets its pods move (namespace policy movable: true)");
        return Err(DefragOutcome::NoPlan);
    }
    let mut pods: Vec<Pod> = Vec::new();
    for ns in &namespaces {
        match api.list_pods(ns).await {
            Ok(mut p) => pods.append(&mut p),
            Err(e) => {
                tracing::warn!(for_whom = %who, "defragmentation: {e}");
                return Err(DefragOutcome::Abandoned);
            }
        }
    }
    Ok(pods)
}

/// The plan `search` finds (given the destinations barred so far and the
/// node objects read), searched again (at most [`REPLANS`] times) while
/// one of its moves lands where kube-scheduler's own filters (nodeSelector,
/// affinity, taints) would not let the replacement. `nodes`: the pending
/// pod's nodes (every node when `None`).
async fn checked_plan<P>(
    api: &ApiCalls,
    who: &str,
    nodes: Option<&[String]>,
    pods: &[Pod],
    mut search: impl FnMut(&Inputs<'_>) -> Result<P, DefragOutcome>,
    moves_of: impl Fn(&P) -> &[PlannedMove],
) -> Result<P, DefragOutcome> {
    let mut barred: Vec<(String, String)> = Vec::new();
    let mut node_objects: Vec<Node> = Vec::new();
    for _ in 0..=REPLANS {
        let plan = search(&Inputs {
            nodes,
            pods,
            node_objects: Some(&node_objects),
            barred: &barred,
        })?;
        let mut refused = false;
        for m in moves_of(&plan) {
            if !node_objects
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some(&m.to))
            {
                match api.get_node(&m.to).await {
                    Ok(n) => node_objects.push(n),
                    Err(e) => {
                        tracing::warn!(for_whom = %who, "defragmentation: {e}");
                        return Err(DefragOutcome::Abandoned);
                    }
                }
            }
            let node = node_objects
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(&m.to));
            let moved = pods
                .iter()
                .find(|p| p.metadata.uid.as_deref() == Some(&m.uid));
            if let (Some(n), Some(p)) = (node, moved)
                && scheduler_checks::excluded(p, n).is_some()
            {
                barred.push((m.uid.clone(), m.to.clone()));
                refused = true;
            }
        }
        if !refused {
            return Ok(plan);
        }
    }
    Err(DefragOutcome::NoPlan)
}

/// Removes the claim from a pod whose plan was abandoned, so that it may be
/// planned again on its next failed `/filter` (a failure is logged: the
/// claim then lapses after `holdSeconds`).
async fn release_claim(api: &ApiCalls, namespace: &str, name: &str, who: &str) {
    let patch = json!({"metadata": {"annotations": {CLAIM: null}}});
    if let Err(e) = api.merge_patch_pod(namespace, name, &patch).await {
        tracing::warn!(pod = %who, "defragmentation: the claim could not be removed ({e}); it lapses after holdSeconds");
    }
}

/// What defragmentation reports to Prometheus.
#[derive(Debug, Clone, Default)]
pub struct DefragMetrics {
    plans: Family<PlanLabels, Counter>,
    /// Pods evicted to be moved.
    pub moves: Counter,
    /// GPUs the pending pods were given room on.
    pub gpus_freed: Counter,
    /// Time spent searching, in microseconds.
    pub search_micros: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanLabels {
    outcome: &'static str,
}

impl DefragMetrics {
    pub fn plan(&self, outcome: &'static str) {
        self.plans.get_or_create(&PlanLabels { outcome }).inc();
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_defrag_plans",
            "Defragmentation attempts for pods that fit nowhere, by outcome (moved, no_plan, \
             rate_limited, handled: another replica or it fits now, abandoned: an eviction \
             refused or a call failed)",
            self.plans.clone(),
        );
        registry.register(
            "gpugate_defrag_moves",
            "Pods evicted by defragmentation to be recreated elsewhere",
            self.moves.clone(),
        );
        registry.register(
            "gpugate_defrag_gpus_freed",
            "GPUs pending pods were given room on by defragmentation",
            self.gpus_freed.clone(),
        );
        registry.register(
            "gpugate_defrag_search_microseconds",
            "Time defragmentation's plan searches took, in microseconds",
            self.search_micros.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search runs inline on a single-threaded runtime and hands the
    /// worker's tasks over on a multi-threaded one; either way it runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_search_runs_off_a_multi_threaded_runtime() {
        assert_eq!(off_the_runtime(|| 7), 7);
    }

    #[tokio::test]
    async fn the_search_runs_inline_on_a_single_threaded_runtime() {
        assert_eq!(off_the_runtime(|| 8), 8);
    }

    /// The minute's limit counts moves, refuses a plan that does not fit
    /// in what is left, and forgets moves older than a minute.
    #[test]
    fn moves_per_minute_are_counted() {
        let d = Defragmenter::default();
        assert!(d.take_moves(3, 5));
        assert!(!d.take_moves(3, 5));
        assert!(d.take_moves(2, 5));
        assert!(!d.take_moves(1, 5));
        d.give_back_moves(1);
        assert!(d.take_moves(1, 5));
        d.moves
            .lock()
            .unwrap()
            .iter_mut()
            .for_each(|t| *t = t.checked_sub(Duration::from_secs(61)).unwrap());
        assert!(d.take_moves(5, 5));
    }
}
