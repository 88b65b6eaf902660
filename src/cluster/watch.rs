//! Feeding the cluster view from the API server: one watcher per kind
//! (Nodes, Pods, ResourceQuotas, PodDisruptionBudgets, Namespaces when a
//! policy selects by labels, and PodGroups and NodeResourceTopology while
//! the API server serves them). Objects are applied to the view as they arrive and not kept, so
//! memory is the view's, not a copy of every Pod.
//!
//! A watcher's (re)list is applied object by object as its pages arrive
//! (kube's watcher lists 500 at a time), and objects that vanished while
//! the watch was down are removed at its end (counted as drift). So a
//! restarted watch never shows a half-listed cluster: every object keeps
//! its last state until its listed state replaces it, and nothing is
//! dropped before the list is complete. Only the listed keys are kept
//! until then, not the objects: buffering a 40,000-pod list whole held
//! every Pod (managed fields and all) at once, hundreds of MB.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ResourceQuota};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::node_topology::{self, NrtObject, NrtV1Alpha1, NrtV1Alpha2};
use super::pod_group::{self, PodGroup};
use super::shared::SharedCluster;
use super::view::ClusterView;

/// A kind the view is fed with.
trait Watched: Resource + Clone + Debug + DeserializeOwned + Send + 'static {
    const KIND: &'static str;
    /// The view's key for this object (`None` when it has none).
    fn key(&self) -> Option<String>;
    fn apply(view: &mut ClusterView, key: &str, obj: &Self);
    fn delete(view: &mut ClusterView, key: &str);
    /// A re-list lacks an object the view holds.
    fn missing(view: &mut ClusterView, key: &str) {
        Self::delete(view, key);
    }
    /// A re-list has the object but only its key was kept.
    fn holds_nothing(view: &mut ClusterView, key: &str) {
        Self::delete(view, key);
    }
    /// Keys of every object of this kind the view holds.
    fn held(view: &ClusterView) -> Vec<String>;
    /// Whether a listed object is applied whole; when not, it is applied
    /// as "holds nothing" by its key alone.
    fn worth_keeping(&self) -> bool {
        true
    }
}

impl Watched for Node {
    const KIND: &'static str = "Node";
    fn key(&self) -> Option<String> {
        self.metadata.name.clone()
    }
    fn apply(view: &mut ClusterView, key: &str, obj: &Self) {
        view.note_node_lock(obj);
        if view.node_unchanged(obj) {
            return;
        }
        let problems = view.upsert_node(obj);
        if !view.is_plain_node(key) {
            for problem in problems {
                tracing::warn!(%problem, "node inventory");
            }
        }
    }
    fn delete(view: &mut ClusterView, key: &str) {
        view.delete_node(key);
    }
    fn held(view: &ClusterView) -> Vec<String> {
        view.state().nodes().map(|n| n.name.clone()).collect()
    }
}

impl Watched for Pod {
    const KIND: &'static str = "Pod";
    fn key(&self) -> Option<String> {
        self.metadata.uid.clone()
    }
    fn apply(view: &mut ClusterView, key: &str, obj: &Self) {
        if let Some(problem) = view.upsert_pod(key, obj) {
            tracing::warn!(%problem, "allocation not counted on a node");
        }
    }
    fn delete(view: &mut ClusterView, key: &str) {
        view.delete_pod(key);
    }
    fn missing(view: &mut ClusterView, key: &str) {
        view.pod_missing_from_list(key);
    }
    fn holds_nothing(view: &mut ClusterView, key: &str) {
        view.pod_holds_nothing(key);
    }
    fn held(view: &ClusterView) -> Vec<String> {
        view.tracked_pods()
    }
    /// Most pods hold no GPUs and are in no gang group: a re-list only
    /// makes sure the view holds nothing for them.
    fn worth_keeping(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(crate::hami::keys::VGPU_NODE))
            || self.metadata.labels.as_ref().is_some_and(|l| {
                l.contains_key(crate::engine::gang::GROUP_NAME)
                    || l.contains_key(crate::engine::gang::POD_GROUP_LABEL)
            })
            || self
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_group.as_ref())
                .is_some_and(|g| g.pod_group_name.is_some())
    }
}

impl Watched for PodGroup {
    const KIND: &'static str = "PodGroup";
    fn key(&self) -> Option<String> {
        PodGroup::key(self).map(|k| k.to_string())
    }
    fn apply(view: &mut ClusterView, _: &str, obj: &Self) {
        if let Some(key) = PodGroup::key(obj) {
            view.upsert_pod_group(key, obj.spec());
        }
    }
    fn delete(view: &mut ClusterView, key: &str) {
        if let Some((namespace, name)) = key.split_once('/') {
            view.delete_pod_group(&crate::engine::gang::GangKey {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
    }
    fn held(view: &ClusterView) -> Vec<String> {
        view.pod_group_keys()
    }
}

macro_rules! watched_nrt {
    ($t:ty) => {
        impl Watched for $t {
            const KIND: &'static str = "NodeResourceTopology";
            fn key(&self) -> Option<String> {
                self.0.node().map(str::to_string)
            }
            fn apply(view: &mut ClusterView, key: &str, obj: &Self) {
                apply_node_topology(view, key, &obj.0);
            }
            fn delete(view: &mut ClusterView, key: &str) {
                view.delete_node_topology(key);
            }
            fn held(view: &ClusterView) -> Vec<String> {
                view.node_topology_keys()
            }
        }
    };
}
watched_nrt!(NrtV1Alpha2);
watched_nrt!(NrtV1Alpha1);

fn apply_node_topology(view: &mut ClusterView, node: &str, obj: &NrtObject) {
    let (topology, problems) = obj.topology();
    for problem in problems {
        tracing::warn!(node, %problem, "NodeResourceTopology");
    }
    view.upsert_node_topology(node, topology, obj.written());
}

/// How often gpugate asks whether the API server serves an optional kind
/// (PodGroup, NodeResourceTopology: their CRDs may be installed or removed
/// while it runs): one discovery GET each.
const SERVED_CHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether the API server serves `plural` in `group/version`. A group
/// version it does not know is a 404: not served. Other errors are errors.
async fn serves(
    client: &Client,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(&format!("{group}/{version}"))
        .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Watches `K` (listing first, `listed` once done) until a check every
/// [`SERVED_CHECK`] finds `group/version` no longer serving `plural`.
async fn watch_while_served<K>(
    client: &Client,
    shared: &Arc<SharedCluster>,
    observer: &Arc<dyn WatchObserver>,
    resync: std::time::Duration,
    (group, version, plural): (&str, &str, &str),
    listed: impl Fn(),
) where
    K: Watched,
    K::DynamicType: Default,
{
    let watch = feed::<K>(
        Api::all(client.clone()),
        shared.clone(),
        observer.clone(),
        listed,
        resync,
    );
    let still_served = async {
        loop {
            tokio::time::sleep(SERVED_CHECK).await;
            if let Ok(false) = serves(client, group, version, plural).await {
                return;
            }
        }
    };
    tokio::select! {
        () = watch => {}
        () = still_served => {}
    }
}

/// Watches NodeResourceTopology, v1alpha2 when served, else v1alpha1,
/// while either is; asks again every 10 seconds. Never gates readiness:
/// until the first list completes, Guaranteed GPU pods are refused with
/// `NumaTopologiesListing` (they may need alignment gpugate cannot judge
/// yet); the others are placed as usual.
async fn feed_node_topologies(
    client: Client,
    shared: Arc<SharedCluster>,
    observer: Arc<dyn WatchObserver>,
    resync: std::time::Duration,
) {
    let kind = "NodeResourceTopology";
    loop {
        let mut version = None;
        let mut failed = false;
        for v in node_topology::VERSIONS {
            match serves(&client, node_topology::GROUP, v, node_topology::PLURAL).await {
                Ok(true) => {
                    version = Some(v);
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    observer.error(kind, &e.to_string());
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            tokio::time::sleep(SERVED_CHECK).await;
            continue;
        }
        shared.write().set_node_topologies_served(version.is_some());
        let what = (
            node_topology::GROUP,
            version.unwrap_or(""),
            node_topology::PLURAL,
        );
        let listed = {
            let shared = shared.clone();
            move || shared.write().node_topologies_listed()
        };
        match version {
            None => tokio::time::sleep(SERVED_CHECK).await,
            Some("v1alpha2") => {
                tracing::info!(version = "v1alpha2", "NodeResourceTopology served");
                watch_while_served::<NrtV1Alpha2>(
                    &client, &shared, &observer, resync, what, listed,
                )
                .await;
            }
            Some(_) => {
                tracing::info!(version = "v1alpha1", "NodeResourceTopology served");
                watch_while_served::<NrtV1Alpha1>(
                    &client, &shared, &observer, resync, what, listed,
                )
                .await;
            }
        }
    }
}

/// Watches PodGroups while the API server serves them; asks again every
/// 10 seconds. Never gates readiness: gangs named by PodGroup wait for their
/// PodGroup like they wait for their members.
async fn feed_pod_groups(
    client: Client,
    shared: Arc<SharedCluster>,
    observer: Arc<dyn WatchObserver>,
    resync: std::time::Duration,
) {
    let what = (pod_group::GROUP, pod_group::VERSION, pod_group::PLURAL);
    loop {
        let served = match serves(&client, what.0, what.1, what.2).await {
            Ok(served) => served,
            Err(e) => {
                observer.error(PodGroup::KIND, &e.to_string());
                tokio::time::sleep(SERVED_CHECK).await;
                continue;
            }
        };
        let was = !matches!(
            shared.read().pod_groups(),
            crate::engine::gang::PodGroups::NotServed
        );
        if served != was {
            tracing::info!(served, "PodGroups (scheduling.x-k8s.io/v1alpha1)");
        }
        shared.write().set_pod_groups_served(served);
        if !served {
            tokio::time::sleep(SERVED_CHECK).await;
            continue;
        }
        let listed = {
            let shared = shared.clone();
            move || shared.write().pod_groups_listed()
        };
        watch_while_served::<PodGroup>(&client, &shared, &observer, resync, what, listed).await;
    }
}

/// `namespace/name`, the key of a namespaced object the view holds by name.
fn namespaced_key(meta: &kube::api::ObjectMeta) -> Option<String> {
    Some(format!(
        "{}/{}",
        meta.namespace.as_deref()?,
        meta.name.as_deref()?
    ))
}

impl Watched for ResourceQuota {
    const KIND: &'static str = "ResourceQuota";
    fn key(&self) -> Option<String> {
        namespaced_key(&self.metadata)
    }
    fn apply(view: &mut ClusterView, _: &str, obj: &Self) {
        view.upsert_quota(obj);
    }
    fn delete(view: &mut ClusterView, key: &str) {
        if let Some((ns, name)) = key.split_once('/') {
            view.delete_quota(ns, name);
        }
    }
    fn held(view: &ClusterView) -> Vec<String> {
        view.quotas().keys()
    }
}

impl Watched for PodDisruptionBudget {
    const KIND: &'static str = "PodDisruptionBudget";
    fn key(&self) -> Option<String> {
        namespaced_key(&self.metadata)
    }
    fn apply(view: &mut ClusterView, _: &str, obj: &Self) {
        view.upsert_budget(obj);
    }
    fn delete(view: &mut ClusterView, key: &str) {
        if let Some((ns, name)) = key.split_once('/') {
            view.delete_budget(ns, name);
        }
    }
    fn held(view: &ClusterView) -> Vec<String> {
        view.budgets().keys()
    }
}

impl Watched for Namespace {
    const KIND: &'static str = "Namespace";
    fn key(&self) -> Option<String> {
        self.metadata.name.clone()
    }
    fn apply(view: &mut ClusterView, _: &str, obj: &Self) {
        view.upsert_namespace(obj);
    }
    fn delete(view: &mut ClusterView, key: &str) {
        view.delete_namespace(key);
    }
    fn held(view: &ClusterView) -> Vec<String> {
        view.namespace_names()
    }
}

/// Which kinds to watch.
#[derive(Debug, Clone, Copy)]
pub struct WatchSet {
    /// Namespaces give namespace policies their labels; they need RBAC
    /// (namespaces list/watch) and do not gate readiness.
    pub namespaces: bool,
    /// Every this often each watch is restarted with a fresh full list:
    /// the reconciliation that finds (and counts as drift) what a watch
    /// missed.
    pub resync: std::time::Duration,
}

/// Told of every complete list of a kind, with the number of objects the
/// view held that the list lacked (drift), and of watch failures.
pub trait WatchObserver: Send + Sync + 'static {
    fn listed(&self, kind: &'static str, objects: usize, drift: usize);
    fn error(&self, kind: &'static str, error: &str);
}

/// Runs the watchers until `stop` resolves. The view is current (see
/// [`super::freshness`]) once every gating kind has been listed; when this
/// task ends or panics, it is stale at once (the supervisor restarts it).
pub async fn run(
    client: Client,
    shared: Arc<SharedCluster>,
    set: WatchSet,
    observer: Arc<dyn WatchObserver>,
    stop: impl std::future::Future<Output = ()>,
) {
    let freshness = shared.freshness().clone();
    // Nodes, Pods and ResourceQuotas gate readiness (freshness::GATING_KINDS);
    // Namespaces (labels for policy selectors) do not: without RBAC for
    // them, policies fall back to matching by name.
    let nodes = feed::<Node>(
        Api::all(client.clone()),
        shared.clone(),
        observer.clone(),
        || {},
        set.resync,
    );
    let pods = feed::<Pod>(
        Api::all(client.clone()),
        shared.clone(),
        observer.clone(),
        || {},
        set.resync,
    );
    let quotas = feed::<ResourceQuota>(
        Api::all(client.clone()),
        shared.clone(),
        observer.clone(),
        || {},
        set.resync,
    );
    // PodDisruptionBudgets (for the victims `/preempt` adds) do not gate
    // readiness either: without RBAC for them, preemption weighs none.
    let budgets = feed::<PodDisruptionBudget>(
        Api::all(client.clone()),
        shared.clone(),
        observer.clone(),
        || {},
        set.resync,
    );
    let pod_groups = feed_pod_groups(client.clone(), shared.clone(), observer.clone(), set.resync);
    let topologies =
        feed_node_topologies(client.clone(), shared.clone(), observer.clone(), set.resync);
    let namespaces = async {
        if set.namespaces {
            feed::<Namespace>(Api::all(client), shared, observer, || {}, set.resync).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    // Declared after the feeds, so dropped before them when the task ends.
    let _stale_when_gone = freshness.task_guard();
    tokio::select! {
        _ = stop => {}
        () = crate::faults::armed(crate::faults::Point::WatchPanic) => {
            panic!("fault injection: watch-panic");
        }
        _ = nodes => {}
        _ = pods => {}
        _ = quotas => {}
        _ = budgets => {}
        _ = pod_groups => {}
        _ = topologies => {}
        _ = namespaces => {}
    }
}

/// How often the API server is probed (at most; a third of
/// `api.staleAfterSeconds` when that is shorter).
const PROBE_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

/// Asks the API server for its version every [`PROBE_PERIOD`]: a watch on
/// a connection that hangs reports nothing, so silence is how a partition
/// shows. The view turns stale after `api.staleAfterSeconds` without an
/// answer; the first answer after that restarts every watch with a fresh
/// list (see [`super::freshness`]).
pub async fn probe(client: Client, shared: Arc<SharedCluster>) {
    let freshness = shared.freshness().clone();
    let period = PROBE_PERIOD.min(freshness.stale_after() / 3);
    freshness.probe_started();
    loop {
        tokio::time::sleep(period).await;
        match tokio::time::timeout(freshness.stale_after(), client.apiserver_version()).await {
            Ok(Ok(_)) => {
                if freshness.probe_succeeded() {
                    tracing::warn!("the API server answers again: every watch relists");
                }
            }
            Ok(Err(e)) => freshness.probe_failed(&e.to_string()),
            Err(_) => freshness.probe_failed("the probe timed out"),
        }
    }
}

/// A watch that failed waits this long before it lists again, doubling up
/// to [`FEED_MAX_BACKOFF`] while it keeps failing.
const FEED_FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);
const FEED_MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(15);

/// Why one watcher's run ended.
enum FeedEnd {
    /// The resync period passed: list again, the view stays current.
    Resync,
    /// Every watch restarts (the API server answers again after a silence).
    Restart,
    /// The stream failed or ended: events may be lost, the kind relists.
    Failed { error: String, listed: bool },
}

/// Feeds the view with `K` for ever: a fresh watcher (a list, then a
/// watch) after each resync, failure or restart. A failure is not retried
/// on the same watcher: the kind relists (and the view is stale until the
/// list completes), so that a lost event can never go unnoticed.
async fn feed<K>(
    api: Api<K>,
    shared: Arc<SharedCluster>,
    observer: Arc<dyn WatchObserver>,
    on_first_list: impl Fn(),
    resync: std::time::Duration,
) where
    K: Watched,
    K::DynamicType: Default,
{
    // Consistent lists: a list served from a lagging cache would count (and
    // undo) changes the watch has already applied as drift.
    let config = watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
    let freshness = shared.freshness().clone();
    let mut restarts = freshness.restarts();
    restarts.borrow_and_update();
    let mut listed_once = false;
    let mut backoff = FEED_FIRST_BACKOFF;
    loop {
        let events = watcher(api.clone(), config.clone()).boxed();
        let end = feed_until_resync(
            events,
            &shared,
            &*observer,
            (&mut listed_once, &on_first_list),
            resync,
            &mut restarts,
        )
        .await;
        match end {
            FeedEnd::Resync | FeedEnd::Restart => backoff = FEED_FIRST_BACKOFF,
            FeedEnd::Failed { error, listed } => {
                if listed {
                    backoff = FEED_FIRST_BACKOFF;
                }
                tracing::warn!(kind = K::KIND, %error, retry_in = ?backoff, "watch failed; relisting");
                observer.error(K::KIND, &error);
                freshness.relisting(K::KIND, super::freshness::WATCH_FAILED, &error);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    _ = restarts.changed() => {}
                }
                restarts.borrow_and_update();
                backoff = (backoff * 2).min(FEED_MAX_BACKOFF);
            }
        }
    }
}

/// Applies one watcher's events until `resync` after its list completed,
/// until every watch must restart, or until its stream fails or ends.
async fn feed_until_resync<K>(
    mut events: futures::stream::BoxStream<'_, Result<watcher::Event<K>, watcher::Error>>,
    shared: &SharedCluster,
    observer: &dyn WatchObserver,
    (listed_once, on_first_list): (&mut bool, &impl Fn()),
    resync: std::time::Duration,
    restarts: &mut tokio::sync::watch::Receiver<u64>,
) -> FeedEnd
where
    K: Watched,
{
    let mut listing = Listing::default();
    // The clock starts once a list is complete, so that a list slower than
    // the period is never cut short.
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let resync_at = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            next = events.try_next() => next,
            () = resync_at => return FeedEnd::Resync,
            _ = restarts.changed() => {
                restarts.borrow_and_update();
                return FeedEnd::Restart;
            }
        };
        match next {
            Ok(Some(event)) => match event {
                watcher::Event::Init => listing = Listing::default(),
                watcher::Event::InitApply(obj) => {
                    listing.apply(&mut shared.write(), &obj);
                }
                watcher::Event::InitDone => {
                    let listed = std::mem::take(&mut listing);
                    let objects = listed.keys.len();
                    let drift = listed.done::<K>(&mut shared.write());
                    observer.listed(K::KIND, objects, drift);
                    shared.freshness().listed(K::KIND);
                    if !*listed_once {
                        *listed_once = true;
                        on_first_list();
                    }
                    due = Some(tokio::time::Instant::now() + resync);
                }
                watcher::Event::Apply(obj) => {
                    if let Some(key) = obj.key() {
                        K::apply(&mut shared.write(), &key, &obj);
                    }
                }
                watcher::Event::Delete(obj) => {
                    if let Some(key) = obj.key() {
                        K::delete(&mut shared.write(), &key);
                    }
                }
            },
            Ok(None) => {
                return FeedEnd::Failed {
                    error: "the watch stream ended".to_string(),
                    listed: due.is_some(),
                };
            }
            Err(e) => {
                return FeedEnd::Failed {
                    error: e.to_string(),
                    listed: due.is_some(),
                };
            }
        }
    }
}

/// The keys of a (re)list so far; its objects are applied as they come.
#[derive(Default)]
struct Listing {
    keys: HashSet<String>,
}

impl Listing {
    /// Applies a listed object: whole, or as holding nothing when it is not
    /// worth keeping.
    fn apply<K: Watched>(&mut self, view: &mut ClusterView, obj: &K) {
        let Some(key) = obj.key() else {
            return;
        };
        if obj.worth_keeping() {
            K::apply(view, &key, obj);
        } else {
            K::holds_nothing(view, &key);
        }
        self.keys.insert(key);
    }

    /// The list is complete: objects the view holds that it lacked are
    /// removed. Returns how many (drift: deletions the watch missed).
    fn done<K: Watched>(self, view: &mut ClusterView) -> usize {
        let gone: Vec<String> = K::held(view)
            .into_iter()
            .filter(|k| !self.keys.contains(k))
            .collect();
        for key in &gone {
            K::missing(view, key);
        }
        gone.len()
    }
}

/// A complete list of one kind at once (listed objects without a body are
/// applied as holding nothing). Returns the drift.
#[cfg(test)]
fn replace_all<K: Watched>(view: &mut ClusterView, objects: Vec<(String, Option<K>)>) -> usize {
    let mut listing = Listing::default();
    for (key, obj) in objects {
        match obj {
            Some(obj) => listing.apply(view, &obj),
            None => {
                K::holds_nothing(view, &key);
                listing.keys.insert(key);
            }
        }
    }
    listing.done::<K>(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n
    }

    #[test]
    fn a_relist_removes_what_vanished_and_counts_it() {
        let mut view = ClusterView::new();
        for n in ["a", "b", "c"] {
            Node::apply(&mut view, n, &node(n));
        }
        let drift = replace_all(
            &mut view,
            vec![
                ("a".to_string(), Some(node("a"))),
                ("d".to_string(), Some(node("d"))),
            ],
        );
        assert_eq!(drift, 2);
        let mut names = Node::held(&view);
        names.sort();
        assert_eq!(names, ["a", "d"]);
    }

    #[test]
    fn a_relist_keeps_only_the_uids_of_pods_without_gpus() {
        let mut with: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u1", "namespace": "ns", "name": "p",
                         "annotations": {"hami.io/vgpu-node": "n1",
                                         "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,10,0:;"}},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        assert!(with.worth_keeping());
        let mut view = ClusterView::new();
        Pod::apply(&mut view, "u1", &with);
        assert_eq!(Pod::held(&view), ["u1"]);
        // Listed again without its allocation: only the key is buffered, and
        // the pod is applied as holding nothing.
        with.metadata.annotations = None;
        assert!(!with.worth_keeping());
        assert_eq!(replace_all::<Pod>(&mut view, vec![("u1".into(), None)]), 0);
        assert!(Pod::held(&view).is_empty());
    }

    #[test]
    fn a_relist_forgets_pending_gang_members_that_vanished() {
        let member: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u1", "namespace": "ns", "name": "p", "labels": {
                "pod-group.scheduling.sigs.k8s.io/name": "g",
                "pod-group.scheduling.sigs.k8s.io/min-available": "2"}},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        assert!(member.worth_keeping());
        let mut view = ClusterView::new();
        Pod::apply(&mut view, "u1", &member);
        assert_eq!(Pod::held(&view), ["u1"]);
        assert_eq!(replace_all::<Pod>(&mut view, Vec::new()), 1);
        let group = crate::engine::gang::GangKey {
            namespace: "ns".into(),
            name: "g".into(),
        };
        assert!(view.gang_members(&group).is_none());
    }

    #[test]
    fn quota_keys_round_trip_through_delete() {
        let mut view = ClusterView::new();
        let mut q = ResourceQuota::default();
        q.metadata.namespace = Some("team".into());
        q.metadata.name = Some("gpu".into());
        let key = q.key().unwrap();
        ResourceQuota::apply(&mut view, &key, &q);
        assert_eq!(ResourceQuota::held(&view), std::slice::from_ref(&key));
        assert_eq!(replace_all::<ResourceQuota>(&mut view, Vec::new()), 1);
        assert!(ResourceQuota::held(&view).is_empty());
    }
}
