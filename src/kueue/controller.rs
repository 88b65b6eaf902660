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
use crate::cluster::events::{EventSink, PodEvent};
use crate::config::Config;
use crate::engine::gang::GangKey;
use crate::kueue::check::{Answer, answer, group_of};
use crate::kueue::workload::{
    ADMISSION_CHECKS, CheckState, GROUP, RESOURCE_FLAVORS, VERSION, WORKLOADS, Workload,
    active_patch, check_patch,
};
use crate::placement::scheduler_checks::excluded;

/// How often the Workloads are looked at.
const TICK: Duration = Duration::from_secs(1);

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
        }
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

    fn release_all(&mut self) {
        let uids: Vec<String> = self.held.keys().cloned().collect();
        for uid in uids {
            self.release(&uid);
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
        self.told.retain(|uid, _| live.contains(uid.as_str()));
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
            let decided = {
                let mut view = self.cluster.write();
                let decided = answer(&view, &config, wl, &flavor_labels, &candidates);
                if let Answer::Ready(r) = &decided {
                    view.replace_gang_holds(
                        &r.group,
                        r.holds.clone(),
                        now.as_millisecond().saturating_add(config.kueue.hold_ms()),
                    );
                }
                decided
            };
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
