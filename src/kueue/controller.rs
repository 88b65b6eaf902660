//! Kueue's admission check, answered (docs/install.md, "Kueue"): on the
//! replica that leads, for each Workload that has reserved quota in a
//! ClusterQueue listing one of gpugate's AdmissionChecks (those whose
//! `spec.controllerName` is `kueue.controllerName`) and whose check is
//! Pending, the answer of [`crate::kueue::check::answer`], written into
//! the Workload's status; Ready holds the places first.
//!
//! What is held lives only in this process (as gang holds in the view).
//! A replica that starts leading rebuilds it from the Workloads before it
//! answers a Pending check: every admitted workload whose pods have not
//! come gets its places again, until its check's Ready time plus
//! `kueue.holdSeconds`. A workload that finishes, is evicted (Kueue sets
//! its check back to Pending) or is deleted gives its holds back.
//!
//! A workload that would fit once movable pods moved gets them moved
//! (gpugate's own defragmentation, `controllers::defragmentation`, whose
//! moves per minute it shares): its check stays Pending with the plan in
//! its message while its places wait on what the moved pods leave, and
//! turns Ready on them once they are gone. What is being moved for is not
//! rebuilt by a new leader: it answers Retry until the moves are done.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::cluster::SharedCluster;
use crate::cluster::api::ApiCalls;
use crate::cluster::events::{EventSink, PodEvent};
use crate::config::Config;
use crate::controllers::defragmentation::{Defragmenter, GangToPlace};
use crate::engine::gang::GangKey;
use crate::kueue::check::{Answer, WorkloadGang, answer, answer_and_gang, group_of};
use crate::kueue::workload::{
    ADMISSION_CHECKS, CheckState, GROUP, RESOURCE_FLAVORS, VERSION, WORKLOADS, Workload,
    active_patch, bounded, check_patch,
};
use crate::placement::scheduler_checks::excluded;

/// How often the Workloads are looked at.
const TICK: Duration = Duration::from_secs(1);

/// How long after looking for a plan to move pods for a workload the check
/// looks again (Kueue asks again about a Retry within a second or two).
const PLAN_AGAIN: Duration = Duration::from_secs(10);

/// `gpugate_kueue_check_answers_total`: answers given, by answer
/// (`ready`, `retry`, `rejected`) and whether the write landed.
#[derive(Debug, Clone, Default)]
pub struct KueueMetrics {
    answers: Family<AnswerLabels, Counter>,
    /// Admitted workloads gpugate holds places for.
    held: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnswerLabels {
    answer: &'static str,
    written: bool,
}

impl KueueMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_kueue_check_answers",
            "Answers of Kueue's admission check (kueue.controllerName), by answer (ready, retry, \
             rejected) and whether the Workload's status took it (false: it changed since it \
             was read, or the write failed; answered again a second later)",
            self.answers.clone(),
        );
        registry.register(
            "gpugate_kueue_workloads_held",
            "Admitted Kueue workloads whose places this replica holds (until their pods have \
             come, finished or kueue.holdSeconds from their check's Ready)",
            self.held.clone(),
        );
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: VERSION.to_string(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// A cache of one Kueue kind, fed by its own watch (which retries with a
/// backoff while Kueue's CRDs are not installed).
fn cache(
    client: &Client,
    kind: &str,
    plural: &str,
) -> (
    Store<DynamicObject>,
    impl std::future::Future<Output = ()> + Send + use<>,
) {
    let ar = resource(kind, plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let writer = reflector::store::Writer::new(ar);
    let reader = writer.as_reader();
    let kind = kind.to_string();
    let feed = async move {
        let mut events = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            if let Err(e) = event {
                tracing::debug!(kind, error = %e, "Kueue watch: retrying");
            }
        }
    };
    (reader, feed)
}

/// What is held for one admitted workload.
#[derive(Debug, Clone)]
struct Held {
    group: GangKey,
}

/// A workload pods are being moved for: its places wait for it (as gang
/// places in the view) until `until_ms`, and its check stays Pending with
/// `message`.
#[derive(Debug, Clone)]
struct Moving {
    group: GangKey,
    until_ms: i64,
    message: String,
}

pub struct AdmissionCheck {
    client: Client,
    cluster: Arc<SharedCluster>,
    config: Arc<ArcSwap<Config>>,
    /// `hami_scheduler_is_leader`: 1 where this replica's kube-scheduler
    /// leads (or no Lease is configured).
    leader: Gauge,
    metrics: KueueMetrics,
    events: EventSink,
    held: HashMap<String, Held>,
    /// The last answer told each workload in an event (by UID): Kueue
    /// resets a Retry to Pending and asks again a second later, so an
    /// unchanged answer is not told again.
    told: HashMap<String, String>,
    nodes: NodeCache,
    /// Defragmentation (shared with gpugate's own, for its moves per
    /// minute) and the API it evicts through; `None`: never moves.
    defrag: Option<(Arc<Defragmenter>, ApiCalls)>,
    /// Workloads pods are being moved for, by UID.
    moving: HashMap<String, Moving>,
    /// When a plan was last looked for each workload (by UID), and whether
    /// one was looked for in this tick.
    planned: HashMap<String, std::time::Instant>,
    planned_this_tick: bool,
}

impl AdmissionCheck {
    pub fn new(
        client: Client,
        cluster: Arc<SharedCluster>,
        config: Arc<ArcSwap<Config>>,
        leader: Gauge,
        metrics: KueueMetrics,
        events: EventSink,
    ) -> Self {
        Self {
            client,
            cluster,
            config,
            leader,
            metrics,
            events,
            held: HashMap::new(),
            told: HashMap::new(),
            nodes: NodeCache::default(),
            defrag: None,
            moving: HashMap::new(),
            planned: HashMap::new(),
            planned_this_tick: false,
        }
    }

    /// Lets the check move pods for a workload that would fit if they
    /// moved (`scheduler.defragmentation`), through `defrag` (gpugate's own,
    /// whose moves per minute it shares) and `api`.
    pub fn with_defragmentation(mut self, defrag: Arc<Defragmenter>, api: ApiCalls) -> Self {
        self.defrag = Some((defrag, api));
        self
    }

    /// Runs until `stop`.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        let (workloads, feed_w) = cache(&self.client, "Workload", WORKLOADS);
        let (checks, feed_c) = cache(&self.client, "AdmissionCheck", ADMISSION_CHECKS);
        let (flavors, feed_f) = cache(&self.client, "ResourceFlavor", RESOURCE_FLAVORS);
        let feeds = async move {
            tokio::join!(feed_w, feed_c, feed_f);
        };
        let work = async {
            let mut ticks = crate::supervisor::Ticks::new(TICK, std::future::pending::<()>());
            while ticks.next().await {
                self.tick(&workloads, &checks, &flavors).await;
            }
        };
        tokio::select! {
            () = stop => {}
            () = feeds => {}
            () = work => {}
        }
        self.release_all();
    }

    fn release(&mut self, uid: &str) {
        if let Some(h) = self.held.remove(uid) {
            let _ = self
                .cluster
                .write()
                .replace_gang_holds(&h.group, Vec::new(), 0);
        }
    }

    /// Forgets that pods are being moved for the workload `uid`, and gives
    /// back the places waiting for it (the moved pods' replacements keep
    /// theirs).
    fn stop_moving(&mut self, uid: &str) {
        if let Some(m) = self.moving.remove(uid) {
            self.cluster.write().release_gang_places(&m.group);
        }
    }

    fn release_all(&mut self) {
        let uids: Vec<String> = self.held.keys().cloned().collect();
        for uid in uids {
            self.release(&uid);
        }
        let uids: Vec<String> = self.moving.keys().cloned().collect();
        for uid in uids {
            self.stop_moving(&uid);
        }
        self.metrics.held.set(0);
    }

    async fn tick(
        &mut self,
        workloads: &Store<DynamicObject>,
        checks: &Store<DynamicObject>,
        flavors: &Store<DynamicObject>,
    ) {
        let config = self.config.load_full();
        if !config.kueue.enabled() || self.leader.get() != 1 {
            self.release_all();
            return;
        }
        if self.cluster.current().is_err() || checks.wait_until_ready().await.is_err() {
            return;
        }
        let controller = config.kueue.controller_name.as_str();
        let now = jiff::Timestamp::now();
        // Ours: the AdmissionChecks naming gpugate's controller, marked
        // Active (a ClusterQueue with an inactive check admits nothing).
        let mut ours = HashSet::new();
        for ac in checks.state() {
            let raw = serde_json::to_value(&*ac).unwrap_or_default();
            if raw.pointer("/spec/controllerName").and_then(Value::as_str) != Some(controller) {
                continue;
            }
            let Some(name) = ac.metadata.name.clone() else {
                continue;
            };
            if let Some(patch) = active_patch(&raw, controller, now) {
                let api: Api<DynamicObject> = Api::all_with(
                    self.client.clone(),
                    &resource("AdmissionCheck", ADMISSION_CHECKS),
                );
                if let Err(e) = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::warn!(check = %name, error = %e, "AdmissionCheck not marked Active");
                }
            }
            ours.insert(name);
        }
        if workloads.wait_until_ready().await.is_err() {
            return;
        }
        // Only the workloads that have one of gpugate's checks are read
        // whole (a copy of each, pod templates and all).
        let asks_us = |w: &DynamicObject| {
            w.data
                .pointer("/status/admissionChecks")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.get("name")
                            .and_then(Value::as_str)
                            .is_some_and(|n| ours.contains(n))
                    })
                })
        };
        let all: Vec<(Value, Workload)> = workloads
            .state()
            .iter()
            .filter(|w| asks_us(w))
            .filter_map(|w| {
                let raw = serde_json::to_value(&**w).ok()?;
                let wl = Workload::read(&raw)?;
                Some((raw, wl))
            })
            .collect();
        let ours_of = |wl: &Workload| -> Option<(String, CheckState, Option<jiff::Timestamp>)> {
            wl.checks
                .iter()
                .find(|c| ours.contains(&c.name))
                .map(|c| (c.name.clone(), c.state.clone(), c.last_transition))
        };
        // 1. Give back what is held for workloads gone, done or no longer
        //    Ready; rebuild what a Ready one should hold and does not.
        let live: HashSet<&str> = all.iter().map(|(_, w)| w.uid.as_str()).collect();
        let gone: Vec<String> = self
            .held
            .keys()
            .filter(|uid| !live.contains(uid.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            self.release(&uid);
        }
        let now_ms = now.as_millisecond();
        let stopped: Vec<String> = self
            .moving
            .iter()
            .filter(|(uid, m)| {
                m.until_ms <= now_ms
                    || !all.iter().any(|(_, wl)| {
                        wl.uid == **uid
                            && !wl.done
                            && wl.quota_reserved
                            && matches!(ours_of(wl), Some((_, CheckState::Pending, _)))
                    })
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in stopped {
            self.stop_moving(&uid);
        }
        self.told.retain(|uid, _| live.contains(uid.as_str()));
        self.planned.retain(|uid, _| live.contains(uid.as_str()));
        self.planned_this_tick = false;
        let flavor_labels = flavor_node_labels(flavors);
        let names: Vec<String> = self
            .cluster
            .read()
            .state()
            .nodes()
            .map(|n| n.name.clone())
            .collect();
        for (_, wl) in &all {
            let ready = matches!(ours_of(wl), Some((_, CheckState::Ready, _)));
            if !ready || wl.done || !wl.quota_reserved {
                self.release(&wl.uid);
                continue;
            }
            if self.held.contains_key(&wl.uid) {
                continue;
            }
            let since = ours_of(wl).and_then(|(_, _, t)| t).unwrap_or(now);
            let until = since
                .as_millisecond()
                .saturating_add(config.kueue.hold_ms());
            let group = group_of(wl);
            let held = Held {
                group: group.clone(),
            };
            // Pods of the workload seen: the gang's own rules hold their
            // places from here; nothing to rebuild.
            let pods_came = self.cluster.read().gang_members(&group).is_some();
            if until > now.as_millisecond() && !pods_came {
                let nodes = self.nodes.get(&self.client).await;
                let candidates =
                    |pod: &k8s_openapi::api::core::v1::Pod| candidates_of(pod, &names, &nodes);
                let mut view = self.cluster.write();
                if let Answer::Ready(r) = answer(&view, &config, wl, &flavor_labels, &candidates) {
                    let n = view.replace_gang_holds(&group, r.holds, until);
                    tracing::info!(workload = %wl.key(), holds = n, "Kueue: places of an admitted workload held again");
                } else {
                    tracing::warn!(workload = %wl.key(), "Kueue: an admitted workload's places are taken; its pods wait like any gang's");
                }
            }
            self.held.insert(wl.uid.clone(), held);
        }
        // 2. Answer the Pending checks, one workload after the other (each
        //    sees what the ones before it hold).
        for (raw, wl) in &all {
            let Some((check, CheckState::Pending, _)) = ours_of(wl) else {
                continue;
            };
            if wl.done || !wl.quota_reserved {
                continue;
            }
            let nodes = self.nodes.get(&self.client).await;
            let candidates =
                |pod: &k8s_openapi::api::core::v1::Pod| candidates_of(pod, &names, &nodes);
            let (decided, gang) = {
                let mut view = self.cluster.write();
                let (decided, gang) =
                    answer_and_gang(&view, &config, wl, &flavor_labels, &candidates);
                if let Answer::Ready(r) = &decided {
                    // Its own holds take over from the places that waited
                    // for it while pods moved.
                    view.release_gang_places(&r.group);
                    view.replace_gang_holds(
                        &r.group,
                        r.holds.clone(),
                        now.as_millisecond().saturating_add(config.kueue.hold_ms()),
                    );
                }
                (decided, gang)
            };
            if let (Answer::Retry(retry), Some(gang)) = (&decided, gang) {
                // It would fit if pods moved: moving them (or waiting for
                // those moved), the check stays Pending.
                if let Some(message) = self.make_room(&config, wl, retry, &gang).await {
                    // Written once (and again if Kueue changed it), not
                    // every tick while the moved pods go.
                    let current = wl.check(&check).map(|c| c.message.as_str());
                    if current != Some(bounded(&message).as_str()) {
                        let written = self
                            .write_check(raw, wl, &check, &CheckState::Pending, &message, &[], now)
                            .await;
                        self.metrics
                            .answers
                            .get_or_create(&AnswerLabels {
                                answer: "defragmenting",
                                written,
                            })
                            .inc();
                    }
                    continue;
                }
            }
            // Ready (its holds took over), or no longer a question of room
            // (a quota, the webhooks): what waited for it is given back.
            self.stop_moving(&wl.uid);
            let (state, message, updates, label) = match &decided {
                Answer::NoDevices => (
                    CheckState::Ready,
                    "no pod set asks gpugate for a device".to_string(),
                    Vec::new(),
                    "ready",
                ),
                Answer::Ready(r) => (
                    CheckState::Ready,
                    format!(
                        "fits now: {}; held for {} s on {}",
                        r.needed,
                        config.kueue.hold_seconds,
                        r.places()
                    ),
                    r.pod_set_updates.clone(),
                    "ready",
                ),
                Answer::Retry(m) => (CheckState::Retry, m.clone(), Vec::new(), "retry"),
                Answer::Rejected(m) => (CheckState::Rejected, m.clone(), Vec::new(), "rejected"),
            };
            let written = self
                .write_check(raw, wl, &check, &state, &message, &updates, now)
                .await;
            self.metrics
                .answers
                .get_or_create(&AnswerLabels {
                    answer: label,
                    written,
                })
                .inc();
            let news = written && self.told.get(&wl.uid) != Some(&message);
            if news {
                let reason = match state {
                    CheckState::Ready => "PlacementReady",
                    CheckState::Retry => "PlacementRetry",
                    _ => "PlacementRejected",
                };
                self.events.emit(PodEvent::about_object(
                    (&format!("{GROUP}/{VERSION}"), "Workload"),
                    (&wl.namespace, &wl.name, &wl.uid),
                    !matches!(state, CheckState::Ready),
                    reason,
                    format!("{check}: {message}"),
                ));
                self.told.insert(wl.uid.clone(), message.clone());
            }
            match (&decided, written) {
                (Answer::Ready(r), true) => {
                    tracing::info!(workload = %wl.key(), pods = r.members, "Kueue: Ready, places held");
                    self.held.insert(
                        wl.uid.clone(),
                        Held {
                            group: r.group.clone(),
                        },
                    );
                }
                (Answer::Ready(r), false) => {
                    let _ = self
                        .cluster
                        .write()
                        .replace_gang_holds(&r.group, Vec::new(), 0);
                }
                (_, true) if news => {
                    tracing::info!(workload = %wl.key(), state = state.as_str(), %message, "Kueue: answered")
                }
                (_, true) => {
                    tracing::debug!(workload = %wl.key(), state = state.as_str(), "Kueue: answered as before")
                }
                _ => {}
            }
        }
        let holding = {
            let view = self.cluster.read();
            self.held
                .values()
                .filter(|h| view.has_gang_holds(&h.group))
                .count()
        };
        self.metrics
            .held
            .set(i64::try_from(holding).unwrap_or(i64::MAX));
    }

    /// For a workload that would fit if pods moved: the Pending message
    /// while pods are (or were just) moved for it, or `None` (answer
    /// Retry) when defragmentation is off, finds no plan, or its plan was
    /// not made.
    async fn make_room(
        &mut self,
        config: &Config,
        wl: &Workload,
        retry: &str,
        gang: &WorkloadGang,
    ) -> Option<String> {
        if let Some(m) = self.moving.get(&wl.uid) {
            return Some(m.message.clone());
        }
        let (defrag, api) = self.defrag.as_ref()?;
        // A search costs up to searchMillis and lists the movable pods: one
        // per tick, and one per workload every PLAN_AGAIN.
        let recent = self
            .planned
            .get(&wl.uid)
            .is_some_and(|t| t.elapsed() < PLAN_AGAIN);
        if !config.scheduler.defragmentation.enabled || self.planned_this_tick || recent {
            return None;
        }
        self.planned_this_tick = true;
        self.planned
            .insert(wl.uid.clone(), std::time::Instant::now());
        let whom = format!("workload {}", wl.key());
        let target = GangToPlace {
            group: &gang.group,
            whom: &whom,
            pending: &gang.pending,
            candidates: &gang.candidates,
            priority_of: &gang.first,
        };
        let plan = defrag
            .make_room_for_gang((api, &self.events), &self.cluster, config, &target)
            .await
            .ok()?;
        let hold = config.scheduler.defragmentation.hold_seconds;
        let message = format!(
            "{retry}; {} to make room, its places held {hold} s; Ready once they are gone",
            plan.describe()
        );
        tracing::info!(workload = %wl.key(), plan = %plan.describe(), "Kueue: moving pods to make room");
        self.events.emit(PodEvent::about_object(
            (&format!("{GROUP}/{VERSION}"), "Workload"),
            (&wl.namespace, &wl.name, &wl.uid),
            false,
            "PlacementDefragmenting",
            message.clone(),
        ));
        self.told.insert(wl.uid.clone(), message.clone());
        let until_ms = jiff::Timestamp::now()
            .as_millisecond()
            .saturating_add(i64::try_from(hold.saturating_mul(1000)).unwrap_or(i64::MAX));
        self.moving.insert(
            wl.uid.clone(),
            Moving {
                group: gang.group.clone(),
                until_ms,
                message: message.clone(),
            },
        );
        Some(message)
    }

    /// Writes the check's state; false when the write did not land (the
    /// workload changed since it was read: the next tick reads it again).
    #[allow(clippy::too_many_arguments)]
    async fn write_check(
        &self,
        raw: &Value,
        wl: &Workload,
        check: &str,
        state: &CheckState,
        message: &str,
        updates: &[Value],
        now: jiff::Timestamp,
    ) -> bool {
        let Some(patch) = check_patch(raw, check, state, message, updates, now) else {
            return false;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &wl.namespace,
            &resource("Workload", WORKLOADS),
        );
        match api
            .patch_status(&wl.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::debug!(workload = %wl.key(), "Kueue: the workload changed; answered again next tick");
                false
            }
            Err(e) => {
                tracing::warn!(workload = %wl.key(), error = %e, "Kueue: the check's state was not written");
                false
            }
        }
    }
}

/// Each ResourceFlavor's `spec.nodeLabels`.
fn flavor_node_labels(
    flavors: &Store<DynamicObject>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    flavors
        .state()
        .iter()
        .filter_map(|f| {
            let labels = f
                .data
                .pointer("/spec/nodeLabels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            Some((f.metadata.name.clone()?, labels))
        })
        .collect()
}

/// How long a list of the nodes serves: Kueue asks again about a workload
/// that does not fit every second or two, and a list of thousands of nodes
/// is megabytes.
const NODES_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// The node objects, for the checks kube-scheduler makes before it asks
/// gpugate (selectors, affinity, taints), listed at most every
/// [`NODES_FRESH`]. A failed list keeps the last one (or none).
#[derive(Default)]
struct NodeCache {
    nodes: Arc<BTreeMap<String, Node>>,
    listed: Option<std::time::Instant>,
}

impl NodeCache {
    async fn get(&mut self, client: &Client) -> Arc<BTreeMap<String, Node>> {
        if self.listed.is_none_or(|t| t.elapsed() >= NODES_FRESH) {
            let api: Api<Node> = Api::all(client.clone());
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    self.nodes = Arc::new(
                        list.items
                            .into_iter()
                            .filter_map(|n| Some((n.metadata.name.clone()?, n)))
                            .collect(),
                    );
                    self.listed = Some(std::time::Instant::now());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Kueue: nodes not listed; the last list serves");
                }
            }
        }
        self.nodes.clone()
    }
}

/// The nodes of the view kube-scheduler would offer `pod`: those whose
/// object does not exclude it (a node not listed yet is kept).
fn candidates_of(
    pod: &k8s_openapi::api::core::v1::Pod,
    names: &[String],
    nodes: &BTreeMap<String, Node>,
) -> Option<Vec<String>> {
    Some(
        names
            .iter()
            .filter(|n| {
                nodes
                    .get(*n)
                    .is_none_or(|node| excluded(pod, node).is_none())
            })
            .cloned()
            .collect(),
    )
}
