//! `/bind` against an API server (the in-memory one of support/fake_api.rs,
//! behind kube's tower-test mock): every write of the transaction, the node
//! lock's rules, the undo after each failure point, many binds at once with
//! injected failures, and a ledger rebuilt from the annotations.

mod support {
    pub mod fake_api;
}

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpugate::bind::{ApiBinder, BindMetrics};
use gpugate::cluster::api::{ApiCalls, ClientLimit, ClientMetrics};
use gpugate::cluster::events::{EventSink, PodEvent};
use gpugate::cluster::{ClusterView, SharedCluster, pod_allocation};
use gpugate::config::api::ApiLimits;
use gpugate::config::{Config, QueueDepth};
use gpugate::extender::{BindMode, Extender};
use http::Method;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};
use support::fake_api::FakeApi;
use tokio::sync::mpsc::Receiver;

const LOCK: &str = "hami.io/mutex.lock";

fn node_path(name: &str) -> String {
    format!("/api/v1/nodes/{name}")
}

fn pod_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{name}")
}

/// A node with `gpus` T4s of 16 GiB, each shared by up to 4 pods.
fn node(name: &str, gpus: usize) -> Value {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            json!({"id": format!("GPU-{name}-{i}"), "index": i, "count": 4, "devmem": 16384,
                   "devcore": 100, "type": "NVIDIA Tesla T4", "numa": 0, "health": true,
                   "mode": "hami-core"})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {
            "hami.io/node-nvidia-register": serde_json::to_string(&devices).unwrap()
        }},
        "status": {"allocatable": {"nvidia.com/gpu": (gpus * 4).to_string()}}
    })
}

/// A pending pod of one container asking for `mem` MiB and `cores` of one GPU.
fn pod(ns: &str, name: &str, uid: &str, mem: u64, cores: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": mem.to_string(),
                "nvidia.com/gpucores": cores.to_string(),
            }}}]
        },
        "status": {"phase": "Pending"}
    })
}

struct Rig {
    api: FakeApi,
    cluster: Arc<SharedCluster>,
    extender: Extender,
    events: Receiver<PodEvent>,
    config: Config,
}

fn config(wait_seconds: f64) -> Config {
    let mut c = Config::default();
    c.scheduler.node_lock.wait_seconds = wait_seconds;
    c
}

impl Rig {
    fn new(nodes: &[Value], pods: &[Value], config: Config) -> Self {
        let api = FakeApi::default();
        let mut view = ClusterView::new();
        for n in nodes {
            api.put(
                &node_path(n["metadata"]["name"].as_str().unwrap()),
                n.clone(),
            );
            let k: Node = serde_json::from_value(n.clone()).unwrap();
            view.upsert_node(&k);
        }
        for p in pods {
            let m = &p["metadata"];
            api.put(
                &pod_path(
                    m["namespace"].as_str().unwrap(),
                    m["name"].as_str().unwrap(),
                ),
                p.clone(),
            );
            let k: Pod = serde_json::from_value(p.clone()).unwrap();
            view.upsert_pod(m["uid"].as_str().unwrap(), &k);
        }
        let cluster = Arc::new(SharedCluster::new(view, true));
        let (sink, events) = EventSink::channel(1000);
        let binder = ApiBinder::new(
            ApiCalls::new(api.client(), &ApiLimits::default(), no_limit()),
            sink,
            BindMetrics::default(),
        );
        let extender = Extender::new(cluster.clone(), BindMode::Api(Arc::new(binder)));
        Rig {
            api,
            cluster,
            extender,
            events,
            config,
        }
    }

    /// kube-scheduler's ExtenderBindingArgs; returns the answer's error.
    async fn bind(&self, ns: &str, name: &str, uid: &str, node: &str) -> String {
        let body = json!({"PodName": name, "PodNamespace": ns, "PodUID": uid, "Node": node});
        self.extender
            .bind(Arc::new(self.config.clone()), body.to_string().as_bytes())
            .await
            .error
    }

    fn pod(&self, ns: &str, name: &str) -> Value {
        self.api.get(&pod_path(ns, name)).unwrap()
    }

    fn lock(&self, node: &str) -> Option<String> {
        self.api.get(&node_path(node)).unwrap()["metadata"]["annotations"][LOCK]
            .as_str()
            .map(str::to_string)
    }

    fn held(&self, uid: &str) -> Option<gpugate::engine::Allocation> {
        self.cluster.read().held_allocation(uid).cloned()
    }

    /// What the API server holds, fed to the view as the watch would.
    fn deliver_watch_events(&self) {
        let mut view = self.cluster.write();
        for (_, p) in self.api.list("/api/v1/namespaces/") {
            let k: Pod = serde_json::from_value(p.clone()).unwrap();
            view.upsert_pod(p["metadata"]["uid"].as_str().unwrap(), &k);
        }
    }

    /// The nodes as the API server holds them, fed to the view's copy of
    /// their locks as the node watch would.
    fn deliver_node_events(&self) {
        let mut view = self.cluster.write();
        for (_, n) in self.api.list("/api/v1/nodes/") {
            let k: Node = serde_json::from_value(n).unwrap();
            view.note_node_lock(&k);
        }
    }

    fn filter(&self, pod: &Value, nodes: &[&str]) -> gpugate::extender::wire::FilterResult {
        let body = json!({"Pod": pod, "NodeNames": nodes});
        self.extender
            .filter(&self.config, body.to_string().as_bytes())
            .answer
    }

    /// Every node `/filter` turned down and why (the answer names them only
    /// when no node is offered).
    fn refused(&self, pod: &Value, nodes: &[&str]) -> BTreeMap<String, String> {
        let body = json!({"Pod": pod, "NodeNames": nodes});
        self.extender
            .filter(&self.config, body.to_string().as_bytes())
            .rejected
            .into_iter()
            .map(|(node, why)| (node, why.to_string()))
            .collect()
    }

    fn prioritize(&self, pod: &Value, nodes: &[&str]) -> Vec<(String, i64)> {
        let body = json!({"Pod": pod, "NodeNames": nodes});
        self.extender
            .prioritize(&self.config, body.to_string().as_bytes())
            .unwrap()
            .into_iter()
            .map(|h| (h.host, h.score))
            .collect()
    }

    fn writes(&self) -> Vec<(Method, String)> {
        self.api
            .seen()
            .into_iter()
            .filter(|s| s.method != Method::GET)
            .map(|s| (s.method, s.path))
            .collect()
    }

    fn drain_events(&mut self) -> Vec<PodEvent> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e);
        }
        out
    }
}

/// Removes a node's lock, as HAMi's device plugin does.
fn release_lock(api: &FakeApi, node: &str) {
    api.update(&node_path(node), |n| {
        n["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(LOCK);
    });
}

fn annotations(pod: &Value) -> &serde_json::Map<String, Value> {
    static EMPTY: std::sync::OnceLock<serde_json::Map<String, Value>> = std::sync::OnceLock::new();
    pod["metadata"]["annotations"]
        .as_object()
        .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
}

fn has_allocation_annotations(pod: &Value) -> bool {
    annotations(pod).keys().any(|k| k.starts_with("hami.io/"))
        || pod["metadata"]["labels"]["hami.io/vgpu-node"].is_string()
}

#[tokio::test]
async fn a_bind_locks_the_node_annotates_the_pod_and_creates_the_binding() {
    let mut c = config(1.0);
    c.scheduler.binding_succeeded_events = true;
    let mut rig = Rig::new(
        &[node("gpu-1", 2)],
        &[pod("ml", "train-0", "u-0", 4000, 30)],
        c,
    );
    assert_eq!(rig.bind("ml", "train-0", "u-0", "gpu-1").await, "");

    let p = rig.pod("ml", "train-0");
    assert_eq!(p["spec"]["nodeName"], "gpu-1");
    let a = annotations(&p);
    assert_eq!(a["hami.io/vgpu-node"], "gpu-1");
    assert_eq!(a["hami.io/bind-phase"], "allocating");
    let devices = a["hami.io/vgpu-devices-allocated"].as_str().unwrap();
    assert!(
        devices.starts_with("GPU-gpu-1-") && devices.ends_with(",NVIDIA,4000,30:;"),
        "{devices}"
    );
    assert_eq!(a["hami.io/vgpu-devices-to-allocate"], devices);
    assert_eq!(p["metadata"]["labels"]["hami.io/vgpu-node"], "gpu-1");
    // HAMi's device plugin finds the pod through the lock and releases it.
    let lock = rig.lock("gpu-1").unwrap();
    assert!(lock.ends_with("Z,ml,train-0"), "{lock}");

    // Two writes, in order: the lock with its precondition, then the
    // Binding, which carries the annotations and label onto the pod.
    assert_eq!(
        rig.writes(),
        [
            (Method::PATCH, node_path("gpu-1")),
            (
                Method::POST,
                format!("{}/binding", pod_path("ml", "train-0"))
            ),
        ]
    );
    let seen = rig.api.seen();
    let patches: Vec<_> = seen.iter().filter(|s| s.method == Method::PATCH).collect();
    for p in &patches {
        assert_eq!(
            p.content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        assert!(
            p.body["metadata"]["resourceVersion"].is_string(),
            "no precondition: {}",
            p.body
        );
    }
    let binding = &seen
        .iter()
        .find(|s| s.path.ends_with("/binding"))
        .unwrap()
        .body;
    assert_eq!(
        binding["target"],
        json!({"apiVersion": "v1", "kind": "Node", "name": "gpu-1"})
    );
    assert_eq!(binding["metadata"]["uid"], "u-0");
    assert_eq!(
        binding["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"],
        devices
    );
    assert_eq!(binding["metadata"]["labels"]["hami.io/vgpu-node"], "gpu-1");

    // The ledger holds the same allocation the pod carries.
    let held = rig.held("u-0").unwrap();
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert_eq!(pod_allocation(&k).unwrap().unwrap(), held);
    let events = rig.drain_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, "BindingSucceeded");
    assert!(events[0].note.contains("gpu-1"), "{}", events[0].note);

    // kube-scheduler retries when it lost the answer: success, no writes.
    let before = rig.writes().len();
    assert_eq!(rig.bind("ml", "train-0", "u-0", "gpu-1").await, "");
    assert_eq!(rig.writes().len(), before);
    // ... but not to another node.
    let e = rig.bind("ml", "train-0", "u-0", "gpu-2").await;
    assert!(e.contains("already bound to node gpu-1"), "{e}");
}

/// By default a bind that succeeds sends no event (kube-scheduler's
/// `Scheduled` says where the pod went); one that fails does.
#[tokio::test]
async fn a_successful_bind_sends_no_event_by_default() {
    let mut rig = Rig::new(
        &[node("gpu-1", 1)],
        &[
            pod("ml", "a", "u-a", 16384, 100),
            pod("ml", "b", "u-b", 16384, 100),
        ],
        config(0.2),
    );
    assert_eq!(rig.bind("ml", "a", "u-a", "gpu-1").await, "");
    assert!(rig.drain_events().is_empty());
    assert_ne!(rig.bind("ml", "b", "u-b", "gpu-1").await, "");
    let events = rig.drain_events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].reason, "BindingFailed");
}

#[tokio::test]
async fn a_node_locked_by_a_live_pod_is_waited_for_then_refused_and_nothing_stays() {
    let holder = pod("ml", "holder", "u-h", 1000, 0);
    let mut n = node("gpu-1", 1);
    let since = jiff::Timestamp::now().to_string();
    n["metadata"]["annotations"][LOCK] = json!(format!("{since},ml,holder"));
    let mut rig = Rig::new(&[n], &[holder, pod("ml", "p", "u-p", 1000, 0)], config(0.5));
    let e = rig.bind("ml", "p", "u-p", "gpu-1").await;
    assert!(e.contains("node gpu-1 is locked by pod ml/holder"), "{e}");
    assert!(e.contains("waited"), "{e}");
    assert!(rig.lock("gpu-1").unwrap().ends_with(",ml,holder"));
    assert!(!has_allocation_annotations(&rig.pod("ml", "p")));
    assert_eq!(rig.held("u-p"), None);
    assert!(rig.writes().is_empty(), "{:?}", rig.writes());
    assert_eq!(rig.drain_events()[0].reason, "BindingFailed");

    // Released meanwhile (as HAMi's device plugin does): the next try binds.
    release_lock(&rig.api, "gpu-1");
    assert_eq!(rig.bind("ml", "p", "u-p", "gpu-1").await, "");
}

#[tokio::test]
async fn a_lock_that_expired_or_whose_holder_is_gone_is_taken_over() {
    let mut expired = node("gpu-1", 1);
    expired["metadata"]["annotations"][LOCK] = json!("2020-01-01T00:00:00Z,ml,old");
    let mut dangling = node("gpu-2", 1);
    let now = jiff::Timestamp::now().to_string();
    dangling["metadata"]["annotations"][LOCK] = json!(format!("{now},ml,deleted-pod"));
    // Written by an old HAMi without a holder, and recent: contention.
    let mut legacy = node("gpu-3", 1);
    legacy["metadata"]["annotations"][LOCK] = json!(now);
    // Held by a pod whose bind here was cut short and that was then bound
    // to another node: this node's device plugin will never release it.
    let mut elsewhere = node("gpu-4", 1);
    elsewhere["metadata"]["annotations"][LOCK] = json!(format!("{now},ml,moved"));
    // Held by a live, unbound pod: still contention.
    let mut pending = node("gpu-5", 1);
    pending["metadata"]["annotations"][LOCK] = json!(format!("{now},ml,waiting"));
    let mut moved = pod("ml", "moved", "u-moved", 1000, 0);
    moved["spec"]["nodeName"] = json!("gpu-1");
    let rig = Rig::new(
        &[expired, dangling, legacy, elsewhere, pending],
        &[
            pod("ml", "a", "u-a", 1000, 0),
            pod("ml", "b", "u-b", 1000, 0),
            pod("ml", "c", "u-c", 1000, 0),
            pod("ml", "d", "u-d", 1000, 0),
            pod("ml", "e", "u-e", 1000, 0),
            pod("ml", "waiting", "u-waiting", 1000, 0),
            moved,
        ],
        config(0.3),
    );
    assert_eq!(rig.bind("ml", "a", "u-a", "gpu-1").await, "");
    assert!(rig.lock("gpu-1").unwrap().ends_with(",ml,a"));
    assert_eq!(rig.bind("ml", "b", "u-b", "gpu-2").await, "");
    assert!(rig.lock("gpu-2").unwrap().ends_with(",ml,b"));
    let e = rig.bind("ml", "c", "u-c", "gpu-3").await;
    assert!(e.contains("(unnamed, old HAMi)"), "{e}");
    assert_eq!(rig.bind("ml", "d", "u-d", "gpu-4").await, "");
    assert!(rig.lock("gpu-4").unwrap().ends_with(",ml,d"));
    let e = rig.bind("ml", "e", "u-e", "gpu-5").await;
    assert!(e.contains("ml/waiting"), "{e}");
}

/// A pod bound to `node`, Pending with `hami.io/bind-phase: allocating`
/// (the kubelet has not admitted it), created long ago.
fn awaiting_allocation(name: &str, node: &str) -> Value {
    let mut p = pod("ml", name, &format!("u-{name}"), 1000, 0);
    p["metadata"]["creationTimestamp"] = json!("2019-01-01T00:00:00Z");
    p["metadata"]["annotations"] = json!({"hami.io/bind-phase": "allocating"});
    p["spec"]["nodeName"] = json!(node);
    p
}

/// An expired lock whose holder is bound to the node and still waits for
/// its device plugin is kept (HAMi #3096, master #3127): the bind waits,
/// then fails naming the holder and why, and the lock is untouched, also
/// when the pod of that name was created after the lock (the device
/// plugin finds the pod by name). Once the holder is admitted
/// (bind-phase success) or no longer Pending, the lock is taken over.
#[tokio::test]
async fn an_expired_lock_is_kept_while_its_holder_waits_for_its_device_plugin() {
    let expired = "2020-01-01T00:00:00Z,ml,holder";
    let mut n = node("gpu-1", 1);
    n["metadata"]["annotations"][LOCK] = json!(expired);
    let mut rig = Rig::new(
        &[n],
        &[
            awaiting_allocation("holder", "gpu-1"),
            pod("ml", "p", "u-p", 1000, 0),
        ],
        config(0.5),
    );
    let e = rig.bind("ml", "p", "u-p", "gpu-1").await;
    assert!(e.contains("node gpu-1 is locked by pod ml/holder"), "{e}");
    assert!(e.contains("waited"), "{e}");
    assert!(e.contains("for its device plugin"), "{e}");
    assert!(e.contains("hami.io/bind-phase: allocating"), "{e}");
    assert_eq!(rig.lock("gpu-1").as_deref(), Some(expired));
    assert_eq!(rig.held("u-p"), None);
    assert!(rig.writes().is_empty(), "{:?}", rig.writes());
    let events = rig.drain_events();
    assert_eq!(events[0].reason, "BindingFailed");
    assert!(
        events[0].note.contains("for its device plugin"),
        "{:?}",
        events[0]
    );

    // A pod of the holder's name created after the lock, in the same
    // state: the plugin would serve it through this lock, so it is kept.
    let mut recreated = awaiting_allocation("holder", "gpu-1");
    recreated["metadata"]["creationTimestamp"] = json!("2020-01-01T00:10:00Z");
    rig.api.put(&pod_path("ml", "holder"), recreated);
    let e = rig.bind("ml", "p", "u-p", "gpu-1").await;
    assert!(e.contains("for its device plugin"), "{e}");
    assert_eq!(rig.lock("gpu-1").as_deref(), Some(expired));

    // Each way the holder stops waiting lets the lock be taken over.
    let admitted =
        |p: &mut Value| p["metadata"]["annotations"]["hami.io/bind-phase"] = json!("success");
    let running = |p: &mut Value| p["status"]["phase"] = json!("Running");
    for (i, change) in [admitted, running].into_iter().enumerate() {
        let mut holder = awaiting_allocation("holder", "gpu-1");
        change(&mut holder);
        rig.api.put(&pod_path("ml", "holder"), holder);
        rig.api.update(&node_path("gpu-1"), |n| {
            n["metadata"]["annotations"][LOCK] = json!(expired);
        });
        let (name, uid) = (format!("q{i}"), format!("u-q{i}"));
        rig.api
            .put(&pod_path("ml", &name), pod("ml", &name, &uid, 1000, 0));
        assert_eq!(rig.bind("ml", &name, &uid, "gpu-1").await, "", "case {i}");
        assert!(rig.lock("gpu-1").unwrap().ends_with(&format!(",ml,{name}")));
    }
}

/// A pod whose only GPU is in an init container takes the node lock like
/// any other: the kubelet calls Allocate for init containers too, and the
/// device plugin finds the pod through the lock.
#[tokio::test]
async fn an_init_container_only_pod_takes_the_lock() {
    let mut init_only = pod("ml", "init", "u-init", 1000, 0);
    let container = init_only["spec"]["containers"][0].clone();
    init_only["spec"]["initContainers"] = json!([container]);
    init_only["spec"]["containers"] = json!([{"name": "app", "image": "busybox"}]);
    let rig = Rig::new(&[node("gpu-1", 1)], &[init_only], config(0.5));
    assert_eq!(rig.bind("ml", "init", "u-init", "gpu-1").await, "");
    assert!(rig.lock("gpu-1").unwrap().ends_with(",ml,init"));
    let bound = rig.pod("ml", "init");
    assert_eq!(
        annotations(&bound)["hami.io/vgpu-devices-allocated"],
        json!("GPU-gpu-1-0,NVIDIA,1000,0:;;")
    );
}

#[tokio::test]
async fn an_unreadable_lock_is_never_overwritten() {
    let mut n = node("gpu-1", 1);
    n["metadata"]["annotations"][LOCK] = json!("locked by ops, do not touch");
    let rig = Rig::new(&[n], &[pod("ml", "p", "u-p", 1000, 0)], config(1.0));
    let e = rig.bind("ml", "p", "u-p", "gpu-1").await;
    assert!(e.contains("cannot be read"), "{e}");
    assert!(e.contains("remove the annotation"), "{e}");
    assert_eq!(rig.lock("gpu-1").unwrap(), "locked by ops, do not touch");
    assert!(rig.writes().is_empty());
    assert_eq!(rig.held("u-p"), None);
}

/// Each failure point, then: no annotations, no lock, nothing in the ledger,
/// and the same bind succeeds once the API server is well again.
#[tokio::test]
async fn every_failure_point_is_undone() {
    let cases: [(Method, &str, u16, &str); 4] = [
        (Method::GET, "/pods/p", 500, "GET pod ml/p"),
        (Method::PATCH, "/nodes/gpu-1", 500, "PATCH node gpu-1"),
        (Method::POST, "/binding", 500, "POST binding"),
        (Method::POST, "/binding", 404, "not found"),
    ];
    for (method, fragment, code, needle) in cases {
        let mut rig = Rig::new(
            &[node("gpu-1", 1)],
            &[pod("ml", "p", "u-p", 2000, 10)],
            config(1.0),
        );
        rig.api.fail(method.clone(), fragment, code, 1);
        let e = rig.bind("ml", "p", "u-p", "gpu-1").await;
        let case = format!("{method} {fragment} {code}");
        assert!(e.contains(needle), "{case}: {e}");
        assert!(!e.contains("undo incomplete"), "{case}: {e}");
        let p = rig.pod("ml", "p");
        assert!(!has_allocation_annotations(&p), "{case}: {p}");
        assert!(p["spec"]["nodeName"].is_null(), "{case}");
        assert_eq!(rig.lock("gpu-1"), None, "{case}");
        assert_eq!(rig.held("u-p"), None, "{case}");
        assert_eq!(
            rig.cluster.read().state().node("gpu-1").unwrap().usage[0].slots,
            0,
            "{case}"
        );
        // A pod that could not be read gets no event (there is nothing to
        // attach it to); every other failure is on the pod.
        let events = rig.drain_events();
        if method == Method::GET {
            assert!(events.is_empty(), "{case}");
        } else {
            assert_eq!(events.len(), 1, "{case}");
            assert_eq!(events[0].reason, "BindingFailed", "{case}");
            assert!(events[0].warning, "{case}");
        }
        assert_eq!(rig.bind("ml", "p", "u-p", "gpu-1").await, "", "{case}");
        assert_eq!(rig.pod("ml", "p")["spec"]["nodeName"], "gpu-1", "{case}");
    }
}

#[tokio::test]
async fn an_undo_that_fails_too_is_reported() {
    let rig = Rig::new(
        &[node("gpu-1", 1)],
        &[pod("ml", "p", "u-p", 2000, 10)],
        config(1.0),
    );
    rig.api.fail(Method::POST, "/binding", 500, 1);
    // The lock goes through; releasing it does not.
    rig.api.fail_after(Method::PATCH, "/nodes/gpu-1", 500, 1, 1);
    let e = rig.bind("ml", "p", "u-p", "gpu-1").await;
    assert!(e.contains("POST binding"), "{e}");
    assert!(e.contains("undo incomplete"), "{e}");
    assert!(e.contains("releasing the node lock"), "{e}");
    // The ledger is released regardless; what is left on the API server is
    // named in the error (and counted in gpugate_bind_rollback_failures).
    assert_eq!(rig.held("u-p"), None);
    assert!(rig.lock("gpu-1").unwrap().ends_with(",ml,p"));
    // The Binding carried the annotations, so none were left behind.
    assert!(!has_allocation_annotations(&rig.pod("ml", "p")));
    // The next bind of the same pod finds the lock its own and binds.
    assert_eq!(rig.bind("ml", "p", "u-p", "gpu-1").await, "");
}

#[tokio::test]
async fn a_node_changed_between_read_and_lock_is_read_again() {
    let rig = Rig::new(
        &[node("gpu-1", 1)],
        &[pod("ml", "p", "u-p", 2000, 10)],
        config(1.0),
    );
    rig.api.fail(Method::PATCH, "/nodes/gpu-1", 409, 1);
    assert_eq!(rig.bind("ml", "p", "u-p", "gpu-1").await, "");
    let node_patches: Vec<_> = rig
        .api
        .seen()
        .into_iter()
        .filter(|s| s.method == Method::PATCH && s.path.contains("/nodes/"))
        .collect();
    assert_eq!(node_patches.len(), 2);
    // The retry carries the version read again, not the stale one.
    let versions: Vec<&Value> = node_patches
        .iter()
        .map(|p| &p.body["metadata"]["resourceVersion"])
        .collect();
    assert!(versions[0].is_string() && versions[1].is_string());
    assert_ne!(versions[0], versions[1]);
    assert!(has_allocation_annotations(&rig.pod("ml", "p")));
}

#[tokio::test]
async fn a_replaced_pod_or_unknown_pod_is_refused() {
    let rig = Rig::new(
        &[node("gpu-1", 1)],
        &[pod("ml", "p", "u-new", 2000, 10)],
        config(1.0),
    );
    let e = rig.bind("ml", "p", "u-old", "gpu-1").await;
    assert!(e.contains("its uid is u-new, not u-old"), "{e}");
    let e = rig.bind("ml", "nope", "u-x", "gpu-1").await;
    assert!(e.contains("not found"), "{e}");
    let e = rig.bind("ml", "p", "u-new", "no-such-node").await;
    assert!(e.contains("does not fit on node no-such-node"), "{e}");
    assert!(rig.writes().is_empty());
}

#[tokio::test]
async fn a_pod_that_does_not_fit_any_more_is_refused_before_any_write() {
    let rig = Rig::new(
        &[node("gpu-1", 1)],
        &[
            pod("ml", "a", "u-a", 12000, 10),
            pod("ml", "b", "u-b", 12000, 10),
        ],
        config(1.0),
    );
    assert_eq!(rig.bind("ml", "a", "u-a", "gpu-1").await, "");
    let writes = rig.writes().len();
    let e = rig.bind("ml", "b", "u-b", "gpu-1").await;
    assert!(e.contains("does not fit on node gpu-1"), "{e}");
    assert_eq!(rig.writes().len(), writes);
}

/// Without HAMi's device plugin to release locks, the lock is off; many
/// binds at once across nodes and on one node, with API failures injected:
/// afterwards the ledger equals the annotations, no GPU is over-committed,
/// and a ledger rebuilt from the API server's objects (a restart) is equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_binds_at_once_with_failures_leave_ledger_and_annotations_equal() {
    let nodes: Vec<Value> = (0..3).map(|i| node(&format!("gpu-{i}"), 2)).collect();
    // 3 nodes × 2 GPUs × 4 slots = 24 slots; 40 pods of 5,000 MiB: at most
    // 3 per GPU by memory (16,384 MiB), so at most 18 can be placed.
    let pods: Vec<Value> = (0..40)
        .map(|i| pod("ml", &format!("p{i}"), &format!("u-{i}"), 5000, 10))
        .collect();
    let mut c = config(2.0);
    c.scheduler.node_lock.enabled = false;
    let rig = Arc::new(Rig::new(&nodes, &pods, c));
    rig.api.fail(Method::PATCH, "/pods/p1", 500, 1);
    rig.api.fail(Method::POST, "/binding", 500, 3);
    rig.api.fail(Method::PATCH, "/pods/p2", 409, 2);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let rig = rig.clone();
        tasks.push(tokio::spawn(async move {
            // Half go to gpu-0 (one node, contended), the rest spread.
            let node = match i % 4 {
                1 => "gpu-1",
                3 => "gpu-2",
                _ => "gpu-0",
            };
            rig.bind("ml", &format!("p{i}"), &format!("u-{i}"), node)
                .await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap().is_empty() {
            ok += 1;
        }
    }
    assert!(ok >= 12, "only {ok} binds succeeded");
    check_consistent(&rig);
    rig.deliver_watch_events();
    check_consistent(&rig);

    // Restart: a ledger built from what the API server holds.
    let mut fresh = ClusterView::new();
    for (_, n) in rig.api.list("/api/v1/nodes/") {
        fresh.upsert_node(&serde_json::from_value(n).unwrap());
    }
    for (_, p) in rig.api.list("/api/v1/namespaces/") {
        let k: Pod = serde_json::from_value(p.clone()).unwrap();
        fresh.upsert_pod(p["metadata"]["uid"].as_str().unwrap(), &k);
    }
    let before = rig.cluster.read();
    let mut a: Vec<_> = before
        .held_pods()
        .map(|u| (u.to_string(), before.held_allocation(u).cloned()))
        .collect();
    let mut b: Vec<_> = fresh
        .held_pods()
        .map(|u| (u.to_string(), fresh.held_allocation(u).cloned()))
        .collect();
    a.sort_by(|x, y| x.0.cmp(&y.0));
    b.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(a, b);
    for n in before.state().nodes() {
        let m = fresh.state().node(&n.name).unwrap();
        assert_eq!(n.usage, m.usage, "{}", n.name);
    }
}

/// Bound pods carry exactly what the ledger holds; unbound pods carry
/// nothing and hold nothing; no GPU holds more than it has.
fn check_consistent(rig: &Rig) {
    let view = rig.cluster.read();
    let mut per_gpu: std::collections::HashMap<String, (u64, u32, u32)> = Default::default();
    for (path, p) in rig.api.list("/api/v1/namespaces/") {
        let uid = p["metadata"]["uid"].as_str().unwrap();
        let k: Pod = serde_json::from_value(p.clone()).unwrap();
        if p["spec"]["nodeName"].is_string() {
            let a = pod_allocation(&k)
                .unwrap()
                .expect("bound pod without annotations");
            assert_eq!(a.node, p["spec"]["nodeName"].as_str().unwrap());
            assert_eq!(view.held_allocation(uid), Some(&a), "{path}");
            for (uuid, u) in a.usage_by_gpu() {
                let e = per_gpu.entry(uuid.to_string()).or_default();
                e.0 += u64::from(u.mem_mib);
                e.1 += u.cores;
                e.2 += u.slots;
            }
        } else {
            assert!(!has_allocation_annotations(&p), "{path}: {p}");
            assert_eq!(view.held_allocation(uid), None, "{path}");
        }
    }
    for n in view.state().nodes() {
        for (g, used) in n.gpus.iter().zip(&n.usage) {
            let (mem, cores, slots) = per_gpu.get(&g.uuid).copied().unwrap_or_default();
            let cap = &g.capacity;
            assert!(
                mem <= u64::from(cap.mem_mib) && cores <= cap.cores && slots <= cap.slots,
                "{} over-committed",
                g.uuid
            );
            assert_eq!(
                (u64::from(used.mem_mib), used.cores, used.slots),
                (mem, cores, slots)
            );
        }
    }
}

/// With the node lock on, binds to one node queue: a simulated device
/// plugin releases each lock as HAMi's does, and every bind gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn binds_to_one_node_wait_for_the_lock_the_device_plugin_releases() {
    let pods: Vec<Value> = (0..6)
        .map(|i| pod("ml", &format!("p{i}"), &format!("u-{i}"), 1000, 0))
        .collect();
    let rig = Arc::new(Rig::new(&[node("gpu-1", 2)], &pods, config(10.0)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let plugin = {
        let api = rig.api.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut released = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(30)).await;
                let Some(holder) = api.get(&node_path("gpu-1")).unwrap()["metadata"]["annotations"]
                    [LOCK]
                    .as_str()
                    .map(str::to_string)
                else {
                    continue;
                };
                let name = holder.rsplit(',').next().unwrap().to_string();
                // Only once the holder is bound, as kubelet calls Allocate then.
                if api.get(&pod_path("ml", &name)).unwrap()["spec"]["nodeName"].is_string() {
                    api.update(&pod_path("ml", &name), |p| {
                        p["metadata"]["annotations"]["hami.io/bind-phase"] = json!("success");
                    });
                    release_lock(&api, "gpu-1");
                    released += 1;
                }
            }
            released
        })
    };
    let mut tasks = Vec::new();
    for i in 0..6 {
        let rig = rig.clone();
        tasks.push(tokio::spawn(async move {
            rig.bind("ml", &format!("p{i}"), &format!("u-{i}"), "gpu-1")
                .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), "");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(plugin.await.unwrap() >= 5);
    // Each bind read its own pod once; a waiting bind took its holder's
    // life from the view (a pod gpugate itself is binding or bound there),
    // not from the API server.
    let pod_reads = rig
        .api
        .seen()
        .iter()
        .filter(|s| s.method == Method::GET && s.path.contains("/pods/"))
        .count();
    assert_eq!(pod_reads, 6);
    rig.deliver_watch_events();
    check_consistent(&rig);
}

#[tokio::test]
async fn events_reach_the_api_server() {
    let api = FakeApi::default();
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let supervisor = gpugate::supervisor::Supervisor::new(stopping, Default::default());
    let sink = EventSink::spawn(
        &supervisor,
        api.client(),
        "hami-scheduler",
        Some("gpugate-0".into()),
        Default::default(),
    );
    let p: Pod = serde_json::from_value(pod("ml", "p", "u-p", 1, 0)).unwrap();
    sink.emit(PodEvent::new(
        &p,
        true,
        "FilteringFailed",
        "CardInsufficientMemory on 2 node(s): a, b".into(),
    ));
    let mut found = None;
    for _ in 0..100 {
        found = api
            .list("/apis/events.k8s.io/v1/namespaces/ml/events/")
            .into_iter()
            .next();
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, e) = found.expect("no event posted");
    assert_eq!(e["reason"], "FilteringFailed");
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["regarding"]["uid"], "u-p");
    assert_eq!(e["reportingController"], "hami-scheduler");
    assert!(
        e["note"]
            .as_str()
            .unwrap()
            .contains("CardInsufficientMemory")
    );
}

/// A gang member of group `g` (min-available `min`) asking for `mem` MiB.
fn member(name: &str, mem: u64, min: u32) -> Value {
    let mut p = pod("ml", name, &format!("u-{name}"), mem, 0);
    p["metadata"]["labels"] = json!({
        "pod-group.scheduling.sigs.k8s.io/name": "g",
        "pod-group.scheduling.sigs.k8s.io/min-available": min.to_string(),
    });
    p
}

#[tokio::test]
async fn a_bind_whose_caller_gives_up_still_finishes_and_leaves_nothing() {
    let holder = pod("ml", "holder", "u-h", 1000, 0);
    let mut n = node("gpu-1", 1);
    let since = jiff::Timestamp::now().to_string();
    n["metadata"]["annotations"][LOCK] = json!(format!("{since},ml,holder"));
    let rig = Rig::new(&[n], &[holder, pod("ml", "p", "u-p", 1000, 0)], config(0.8));
    // kube-scheduler's httpTimeout runs out while the bind waits for the lock.
    let cut = tokio::time::timeout(
        Duration::from_millis(200),
        rig.bind("ml", "p", "u-p", "gpu-1"),
    )
    .await;
    assert!(cut.is_err());
    assert!(rig.cluster.read().is_binding("u-p"));
    // The transaction goes on by itself, fails on the lock, and undoes.
    for _ in 0..50 {
        if !rig.cluster.read().is_binding("u-p") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rig.held("u-p"), None);
    assert!(!has_allocation_annotations(&rig.pod("ml", "p")));
    release_lock(&rig.api, "gpu-1");
    assert_eq!(rig.bind("ml", "p", "u-p", "gpu-1").await, "");
}

#[tokio::test]
async fn a_pod_bound_by_someone_else_meanwhile_keeps_their_annotations() {
    let holder = pod("ml", "holder", "u-h", 1000, 0);
    let mut n = node("gpu-1", 1);
    let since = jiff::Timestamp::now().to_string();
    n["metadata"]["annotations"][LOCK] = json!(format!("{since},ml,holder"));
    let rig = Arc::new(Rig::new(
        &[n, node("gpu-2", 1)],
        &[holder, pod("ml", "p", "u-p", 1000, 0)],
        config(3.0),
    ));
    let bind = {
        let rig = rig.clone();
        tokio::spawn(async move { rig.bind("ml", "p", "u-p", "gpu-1").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another scheduler binds the pod to gpu-2 with its own annotations,
    // then the lock on gpu-1 is released.
    rig.api.update(&pod_path("ml", "p"), |p| {
        p["spec"]["nodeName"] = json!("gpu-2");
        p["metadata"]["annotations"] = json!({
            "hami.io/vgpu-node": "gpu-2",
            "hami.io/vgpu-devices-allocated": "GPU-gpu-2-0,NVIDIA,1000,0:;",
        });
    });
    release_lock(&rig.api, "gpu-1");
    let e = bind.await.unwrap();
    assert!(e.contains("already bound to node gpu-2, not gpu-1"), "{e}");
    let p = rig.pod("ml", "p");
    assert_eq!(annotations(&p)["hami.io/vgpu-node"], "gpu-2");
    assert_eq!(rig.lock("gpu-1"), None, "our lock is released");
    assert_eq!(rig.held("u-p"), None);
}

#[tokio::test]
async fn lost_answers_are_told_apart_from_failures() {
    let rig = Rig::new(
        &[node("gpu-1", 1)],
        &[pod("ml", "p", "u-p", 2000, 10)],
        config(1.0),
    );
    // The Binding lands but its answer is lost: success.
    rig.api.lose(Method::POST, "/binding", 1);
    assert_eq!(rig.bind("ml", "p", "u-p", "gpu-1").await, "");
    assert_eq!(rig.pod("ml", "p")["spec"]["nodeName"], "gpu-1");
    assert!(rig.held("u-p").is_some());

    // The Binding's fate cannot be read: everything is kept for the watch.
    let rig = Rig::new(
        &[node("gpu-1", 1)],
        &[pod("ml", "q", "u-q", 2000, 10)],
        config(1.0),
    );
    rig.api.fail(Method::POST, "/binding", 503, 1);
    rig.api.fail_after(Method::GET, "/pods/q", 503, 1, 10);
    let e = rig.bind("ml", "q", "u-q", "gpu-1").await;
    assert!(e.contains("whether the Binding landed is unknown"), "{e}");
    // Kept: the watch will show whether the pod is bound (here it is not:
    // the Binding, annotations included, did not land).
    assert!(rig.held("u-q").is_some());
    assert!(rig.lock("gpu-1").is_some());
    assert!(!has_allocation_annotations(&rig.pod("ml", "q")));
}

#[tokio::test]
async fn a_gang_members_failed_bind_keeps_the_groups_capacity_held() {
    // Two nodes with one 16 GiB GPU each... and one more: 3 GPUs, a gang of
    // 3 members taking a whole GPU each by memory.
    let mut c = config(1.0);
    c.scheduler.node_lock.enabled = false;
    let rig = Rig::new(
        &[node("gpu-1", 1), node("gpu-2", 1), node("gpu-3", 1)],
        &[
            member("m0", 16000, 3),
            member("m1", 16000, 3),
            member("m2", 16000, 3),
            pod("ml", "outsider", "u-outsider", 16000, 0),
        ],
        c,
    );
    assert_eq!(rig.bind("ml", "m0", "u-m0", "gpu-1").await, "");
    assert_eq!(rig.cluster.read().gang_hold_count(), 2);
    rig.api.fail(Method::POST, "/binding", 500, 1);
    let e = rig.bind("ml", "m1", "u-m1", "gpu-2").await;
    assert!(e.contains("POST binding"), "{e}");
    // m1 is pending again, and its place is held again.
    assert_eq!(rig.cluster.read().gang_hold_count(), 2);
    let e = rig.bind("ml", "outsider", "u-outsider", "gpu-2").await;
    assert!(e.contains("does not fit"), "{e}");
    // A member placed where the rest no longer fits is refused before any write.
    let writes = rig.writes().len();
    let e = rig.bind("ml", "m1", "u-m1", "gpu-1").await;
    assert!(e.contains("does not fit on node gpu-1"), "{e}");
    assert_eq!(rig.writes().len(), writes);
    assert_eq!(rig.bind("ml", "m1", "u-m1", "gpu-2").await, "");
    assert_eq!(rig.bind("ml", "m2", "u-m2", "gpu-3").await, "");
    assert_eq!(rig.cluster.read().gang_hold_count(), 0);
}

/// Three one-GPU nodes, gpu-1's lock held by pod ml/holder, and pods p
/// and q to place, under `config`: the steering tests' start.
fn steering_rig(config: Config) -> (Rig, Value, Value) {
    let holder = pod("ml", "holder", "u-h", 1000, 0);
    let mut locked = node("gpu-1", 1);
    let since = jiff::Timestamp::now().to_string();
    locked["metadata"]["annotations"][LOCK] = json!(format!("{since},ml,holder"));
    let (p, q) = (
        pod("ml", "p", "u-p", 1000, 0),
        pod("ml", "q", "u-q", 1000, 0),
    );
    let rig = Rig::new(
        &[locked, node("gpu-2", 1), node("gpu-3", 1)],
        &[holder, p.clone(), q.clone()],
        config,
    );
    rig.deliver_node_events();
    (rig, p, q)
}

impl Rig {
    /// Assumes pod `ns/name` (UID `uid`) on `on`'s first GPU, with the
    /// allocation `like` holds but moved there: one more bind promised to
    /// that node.
    fn assume_like(&self, like: &str, (uid, name): (&str, &str), on: &str) {
        let mut a = self.held(like).unwrap();
        a.node = on.into();
        for d in a.containers.iter_mut().flatten() {
            d.uuid = format!("GPU-{on}-0");
        }
        let other: Pod = serde_json::from_value(pod("ml", name, uid, 1000, 0)).unwrap();
        assert!(self.cluster.write().assume(uid, &other, a, i64::MAX));
    }
}

/// kube-scheduler's cycle for two pods at once, as at scale: the first
/// pod's `/prioritize` holds its GPUs on the node it ranked first, the
/// second pod is steered away from that node and from a node whose lock is
/// held, and the first pod's bind takes the pod from its `/filter` call
/// (no read) and writes only the lock and the Binding.
#[tokio::test]
async fn pods_are_steered_to_free_nodes_and_bind_takes_the_filtered_pod() {
    let mut c = config(1.0);
    c.scheduler.node_lock.queue_depth = QueueDepth::Holds(0);
    let (rig, p, q) = steering_rig(c);
    let all = ["gpu-1", "gpu-2", "gpu-3"];

    let r = rig.filter(&p, &all);
    assert_eq!(
        r.node_names,
        Some(vec!["gpu-2".to_string(), "gpu-3".to_string()])
    );
    // Reasons are not sent while some node is offered (kube-scheduler
    // would drop them); gpugate still knows them.
    assert!(r.failed_nodes.is_empty(), "{r:?}");
    let why = &rig.refused(&p, &all)["gpu-1"];
    assert!(
        why.starts_with("NodeLockBusy (hami.io/mutex.lock held by pod ml/holder"),
        "{why}"
    );
    // Ranked: the free nodes only; the first of them is assumed.
    let scores = rig.prioritize(&p, &["gpu-2", "gpu-3"]);
    // Both are empty: binpack scores them 0, and a node at 0 is left out.
    assert!(scores.is_empty(), "{scores:?}");
    assert_eq!(rig.held("u-p").unwrap().node, "gpu-2");
    assert_eq!(rig.extender.api_binder().unwrap().metrics.assumed.get(), 1);

    // The next pod: gpu-2 now has p's assumption, gpu-1 the lock.
    let r = rig.filter(&q, &all);
    assert_eq!(r.node_names, Some(vec!["gpu-3".to_string()]));
    let why = &rig.refused(&q, &all)["gpu-2"];
    assert!(why.contains("1 pod(s) promised there by gpugate"), "{why}");
    // Every feasible node promised as much: none is refused for it (the
    // bind waits).
    let r = rig.filter(&q, &["gpu-1", "gpu-2"]);
    assert_eq!(
        r.node_names,
        Some(vec!["gpu-1".to_string(), "gpu-2".to_string()])
    );
    // A node promised more than the others is set aside even when none is
    // free: gpu-1 has its lock and an assumption, gpu-2 one assumption.
    rig.assume_like("u-p", ("u-o", "o"), "gpu-1");
    let r = rig.filter(&q, &["gpu-1", "gpu-2"]);
    assert_eq!(r.node_names, Some(vec!["gpu-2".to_string()]));
    // One node offered: kube-scheduler takes it without `/prioritize`, so
    // q is held there at once.
    assert_eq!(rig.held("u-q").unwrap().node, "gpu-2");
    assert!(rig.cluster.write().drop_assumed("u-q"));
    let why = &rig.refused(&q, &["gpu-1", "gpu-2"])["gpu-1"];
    assert!(
        why.contains("2 lock hold(s) ahead; other nodes have 1"),
        "{why}"
    );
    assert!(rig.cluster.write().drop_assumed("u-q"));
    assert!(rig.cluster.write().drop_assumed("u-o"));

    // kube-scheduler chose gpu-3 for p after all: the bind's reservation
    // replaces the assumption.
    assert_eq!(rig.bind("ml", "p", "u-p", "gpu-3").await, "");
    assert_eq!(rig.held("u-p").unwrap().node, "gpu-3");
    assert_eq!(
        rig.cluster.read().state().node("gpu-2").unwrap().usage[0].slots,
        0
    );
    assert_eq!(
        rig.writes(),
        [
            (Method::PATCH, node_path("gpu-3")),
            (Method::POST, format!("{}/binding", pod_path("ml", "p"))),
        ]
    );
    let reads_of_p = rig
        .api
        .seen()
        .iter()
        .filter(|s| s.method == Method::GET && s.path == pod_path("ml", "p"))
        .count();
    assert_eq!(reads_of_p, 0, "the pod came from /filter");
    let p_now = rig.pod("ml", "p");
    assert_eq!(annotations(&p_now)["hami.io/vgpu-node"], "gpu-3");
    assert_eq!(p_now["metadata"]["labels"]["hami.io/vgpu-node"], "gpu-3");
}

/// `nodeLock.queueDepth: 1`: while a node is free, a node with one lock
/// hold ahead is still offered beside it (binpack then keeps filling it);
/// a node with two is not; once no node is free, only the least promised
/// are offered, as with depth 0.
#[tokio::test]
async fn queue_depth_offers_begun_nodes_beside_free_ones() {
    let mut c = config(1.0);
    c.scheduler.node_lock.queue_depth = QueueDepth::Holds(1);
    let (mut rig, p, q) = steering_rig(c);
    let all = ["gpu-1", "gpu-2", "gpu-3"];

    // gpu-1's lock is one hold: within the depth, offered beside the free
    // nodes (depth 0 would offer gpu-2 and gpu-3 only, the test above).
    let r = rig.filter(&p, &all);
    assert_eq!(
        r.node_names,
        Some(vec!["gpu-1".into(), "gpu-2".into(), "gpu-3".into()])
    );
    // p is assumed on gpu-1: its lock and p are two holds, beyond the depth
    // while gpu-2 and gpu-3 are free.
    rig.prioritize(&p, &["gpu-1"]);
    assert_eq!(rig.held("u-p").unwrap().node, "gpu-1");
    let r = rig.filter(&q, &all);
    assert_eq!(r.node_names, Some(vec!["gpu-2".into(), "gpu-3".into()]));
    let why = &rig.refused(&q, &all)["gpu-1"];
    assert!(
        why.contains("2 lock holds ahead, more than nodeLock.queueDepth 1"),
        "{why}"
    );
    // Every node promised something: gpu-2 one hold, gpu-3 two, gpu-1 two.
    // Only the least promised is offered, whatever the depth.
    rig.assume_like("u-p", ("u-a", "a"), "gpu-2");
    rig.assume_like("u-p", ("u-b", "b"), "gpu-3");
    rig.assume_like("u-p", ("u-c", "c"), "gpu-3");
    let r = rig.filter(&q, &all);
    assert_eq!(r.node_names, Some(vec!["gpu-2".into()]));
    let why = &rig.refused(&q, &all)["gpu-3"];
    assert!(
        why.contains("2 lock hold(s) ahead; other nodes have 1"),
        "{why}"
    );
    // Depth 2: the fewest holds (1) is below it, so every node with up to
    // 2 is offered.
    rig.config.scheduler.node_lock.queue_depth = QueueDepth::Holds(2);
    let r = rig.filter(&q, &all);
    assert_eq!(
        r.node_names,
        Some(vec!["gpu-1".into(), "gpu-2".into(), "gpu-3".into()])
    );
}

/// `nodeLock.queueDepth: auto` (the default) with a 2.5 s wait for the
/// node and no holds seen yet (2 s assumed): one hold fits in four fifths
/// of the wait, so depth 1 for a binpack pod, and depth 0 for a spread
/// pod: a node with one lock hold ahead is offered beside the free ones to
/// the first, not to the second.
#[tokio::test]
async fn queue_depth_auto_is_one_for_binpack_and_zero_for_spread() {
    let c = config(2.5);
    assert_eq!(c.scheduler.node_lock.queue_depth, QueueDepth::Auto);
    let (rig, p, q) = steering_rig(c);
    let all = ["gpu-1", "gpu-2", "gpu-3"];
    // deploy/'s default node policy is binpack.
    let r = rig.filter(&p, &all);
    assert_eq!(
        r.node_names,
        Some(vec!["gpu-1".into(), "gpu-2".into(), "gpu-3".into()])
    );
    let mut spread = pod("ml", "s", "u-s", 1000, 0);
    spread["metadata"]["annotations"]["hami.io/node-scheduler-policy"] = json!("spread");
    let r = rig.filter(&spread, &all);
    assert_eq!(r.node_names, Some(vec!["gpu-2".into(), "gpu-3".into()]));
    let why = &rig.refused(&spread, &all)["gpu-1"];
    assert!(
        why.contains("held by pod ml/holder; other nodes have fewer"),
        "{why}"
    );
    // p assumed on gpu-1 makes two holds there: beyond auto's depth for
    // the next binpack pod, and the words say where the 1 came from.
    rig.prioritize(&p, &["gpu-1"]);
    let r = rig.filter(&q, &all);
    assert_eq!(r.node_names, Some(vec!["gpu-2".into(), "gpu-3".into()]));
    let why = &rig.refused(&q, &all)["gpu-1"];
    assert!(
        why.contains(
            "2 lock holds ahead, more than the queue depth 1 that nodeLock.queueDepth auto gives \
             binpack pods: 7 per second of lock hold, at most four fifths of the bind's wait for \
             its node, locks assumed held 2 s"
        ),
        "{why}"
    );
}

/// A bind's budget (scheduler.bindTimeoutSeconds) covers the wait for the
/// node lock: it fails in time, with the holder named, and leaves nothing.
#[tokio::test]
async fn a_bind_ends_within_its_budget() {
    let holder = pod("ml", "holder", "u-h", 1000, 0);
    let mut n = node("gpu-1", 1);
    let since = jiff::Timestamp::now().to_string();
    n["metadata"]["annotations"][LOCK] = json!(format!("{since},ml,holder"));
    let mut c = config(600.0);
    c.scheduler.bind_timeout_seconds = 2.5;
    let rig = Rig::new(&[n], &[holder, pod("ml", "p", "u-p", 1000, 0)], c);
    rig.deliver_node_events();
    let started = std::time::Instant::now();
    let e = rig.bind("ml", "p", "u-p", "gpu-1").await;
    let took = started.elapsed();
    assert!(e.contains("locked by pod ml/holder"), "{e}");
    // The lock is waited for until the Binding's own 2 s are left.
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    assert_eq!(rig.held("u-p"), None);
    assert!(rig.writes().is_empty());
}

/// The wait for the API rate limiter counts against the caller's deadline:
/// a call that cannot get a token in time is not sent, and says why.
#[tokio::test]
async fn the_rate_limiters_wait_counts_against_the_deadline() {
    let api = FakeApi::default();
    api.put(&node_path("gpu-1"), node("gpu-1", 1));
    let limits = ApiLimits {
        qps: Some(0.5),
        burst: Some(1),
        ..ApiLimits::default()
    };
    let limit = ClientLimit::new(&limits, &ClientMetrics::default());
    let calls = ApiCalls::new(api.client(), &limits, limit);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
    gpugate::cluster::api::within(deadline, async {
        calls.get_node("gpu-1").await.unwrap();
        let e = calls.get_node("gpu-1").await.unwrap_err();
        assert!(
            matches!(e, gpugate::cluster::api::ApiError::NotSent { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("api.qps"), "{e}");
        assert!(!e.outcome_unknown(), "not sent: nothing to read back");
    })
    .await;
    assert_eq!(api.seen().len(), 1);
}

/// Two nodes in the same 0..=10 level under binpack: the fuller one ranks
/// above, so kube-scheduler's own scores (which prefer the emptier node)
/// cannot spread a burst over the level.
#[tokio::test]
async fn the_node_binpack_ranks_best_stands_out_of_its_level() {
    let (a, b, c) = (
        pod("ml", "a", "u-a", 1000, 0),
        pod("ml", "b", "u-b", 1000, 0),
        pod("ml", "c", "u-c", 1000, 0),
    );
    let rig = Rig::new(
        &[node("gpu-1", 2), node("gpu-2", 2), node("gpu-3", 2)],
        &[],
        config(1.0),
    );
    {
        // One slice on gpu-1, two on gpu-2: both binpack level 1.
        let mut view = rig.cluster.write();
        for (uid, p, n) in [
            ("u-a", &a, "gpu-1"),
            ("u-b", &b, "gpu-2"),
            ("u-c", &c, "gpu-2"),
        ] {
            let k: Pod = serde_json::from_value(p.clone()).unwrap();
            let plan = gpugate::cluster::convert::pod_plan(&k, &rig.config).unwrap();
            let alloc = view.state().assign(&plan, n).unwrap();
            view.reserve(uid, &k, alloc).unwrap().settle(&mut view);
        }
    }
    let new = pod("ml", "d", "u-d", 1000, 0);
    let scores = rig.prioritize(&new, &["gpu-1", "gpu-2", "gpu-3"]);
    // A node not listed scores 0.
    let score = |n: &str| scores.iter().find(|(h, _)| h == n).map_or(0, |s| s.1);
    assert!(score("gpu-2") > score("gpu-1"), "{scores:?}");
    assert!(score("gpu-1") >= score("gpu-3"), "{scores:?}");
    assert_eq!(score("gpu-3"), 0, "empty");
    assert!(scores.iter().all(|(_, s)| *s > 0), "{scores:?}");
    // The pod is assumed on the node ranked best.
    assert_eq!(rig.held("u-d").unwrap().node, "gpu-2");
}

/// Under spread most candidates often share the lowest level (in an
/// empty cluster every node is at 10): `/prioritize` takes the lowest
/// level off every candidate, which ranks them exactly as before once
/// kube-scheduler adds its own scores, and lists only those above it. A
/// candidate that can no longer hold the pod keeps the floor at 0.
#[tokio::test]
async fn prioritize_leaves_out_the_lowest_level_under_spread() {
    let mut spread = config(1.0);
    spread.scheduler.node_scheduler_policy = gpugate::engine::NodePolicy::Spread;
    // Without steering: the holds `/prioritize` makes would set nodes aside.
    spread.scheduler.node_lock.steer = false;
    let nodes = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"];
    let rig = Rig::new(&nodes.map(|n| node(n, 2)), &[], spread);
    {
        // gpu-1 more than half used: below the empty nodes' 10.
        let used = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ml", "uid": "u-a"},
            "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "10000", "nvidia.com/gpucores": "50"}}}]},
            "status": {"phase": "Pending"}
        });
        let mut view = rig.cluster.write();
        let k: Pod = serde_json::from_value(used).unwrap();
        let plan = gpugate::cluster::convert::pod_plan(&k, &rig.config).unwrap();
        let alloc = view.state().assign(&plan, "gpu-1").unwrap();
        view.reserve("u-a", &k, alloc).unwrap().settle(&mut view);
    }
    let new = pod("ml", "d", "u-d", 1000, 0);
    let scores = rig.prioritize(&new, &nodes);
    // The empty nodes share the top level, one step or more above gpu-1,
    // which is the floor and left out.
    let levels: Vec<(&str, i64)> = scores.iter().map(|(h, s)| (h.as_str(), *s)).collect();
    let top = levels.first().map_or(0, |l| l.1);
    assert!(top > 0, "{scores:?}");
    assert_eq!(
        levels,
        [("gpu-2", top), ("gpu-3", top), ("gpu-4", top)],
        "{scores:?}"
    );
    assert_eq!(rig.held("u-d").unwrap().node, "gpu-2");

    // Only empty candidates: all at the floor, nothing listed (kube-scheduler
    // ranks them by its own scores, as it would with all at 10).
    let other = pod("ml", "e", "u-e", 1000, 0);
    assert_eq!(rig.prioritize(&other, &["gpu-3", "gpu-4"]), []);
    // Still assumed on the node gpugate ranks first.
    assert_eq!(rig.held("u-e").unwrap().node, "gpu-3");

    // A candidate that cannot hold the pod any more (10 GB does not fit
    // beside gpu-1's slices) scores 0, and the floor with it: the others
    // keep their whole level.
    let big = pod("ml", "f", "u-f", 10000, 0);
    let scores = rig.prioritize(&big, &["gpu-1", "gpu-3", "gpu-4"]);
    let hosts: Vec<&str> = scores.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(hosts, ["gpu-3", "gpu-4"], "{scores:?}");
    assert!(scores.iter().all(|(_, s)| *s >= 9), "{scores:?}");
}

/// Each verb reads the pod once: `/filter`, `/prioritize` and `/bind`
/// (through the API server, and standalone) each make one plan per call
/// for a pod in no gang group. (Counted on this thread: a
/// current-thread runtime runs the bind's own task here too.)
#[tokio::test]
async fn each_verb_plans_the_pod_once_per_call() {
    use gpugate::placement::pod::plans_made_on_this_thread as plans;
    let rig = Rig::new(&[node("gpu-1", 2)], &[], config(1.0));
    let p = pod("ml", "p", "u-p", 1000, 10);
    rig.api.put(&pod_path("ml", "p"), p.clone());
    let before = plans();
    let answer = rig.filter(&p, &["gpu-1"]);
    assert_eq!(
        answer.node_names.as_deref(),
        Some(&["gpu-1".to_string()][..])
    );
    assert_eq!(plans() - before, 1, "/filter");
    let before = plans();
    let scores = rig.prioritize(&p, &["gpu-1"]);
    assert!(scores.len() <= 1, "{scores:?}");
    assert_eq!(plans() - before, 1, "/prioritize");
    let before = plans();
    assert_eq!(rig.bind("ml", "p", "u-p", "gpu-1").await, "");
    assert_eq!(plans() - before, 1, "/bind through the API server");

    // Standalone: the ledger is the truth.
    let view = ClusterView::new();
    let cluster = Arc::new(SharedCluster::new(view, true));
    cluster
        .write()
        .upsert_node(&serde_json::from_value::<Node>(node("gpu-1", 2)).unwrap());
    let extender = Extender::new(cluster.clone(), BindMode::Ledger);
    let q = pod("ml", "q", "u-q", 1000, 10);
    let body = json!({"Pod": q, "NodeNames": ["gpu-1"]});
    let filtered = extender.filter(&rig.config, body.to_string().as_bytes());
    assert_eq!(filtered.answer.error, "");
    let before = plans();
    let body = json!({"PodName": "q", "PodNamespace": "ml", "PodUID": "u-q", "Node": "gpu-1"});
    let bound = extender
        .bind(Arc::new(rig.config.clone()), body.to_string().as_bytes())
        .await;
    assert_eq!(bound.error, "");
    assert_eq!(plans() - before, 1, "standalone /bind");
    assert_eq!(cluster.read().held_allocation("u-q").unwrap().node, "gpu-1");
}

/// The orphan sweep's rule (issue 27): a lock older than the bind budget
/// whose holder is gone, finished, bound elsewhere or never bound is
/// released, that exact value only; a young lock, or one whose holder is
/// bound to the node (the device plugin's to release), is left.
#[tokio::test]
async fn the_orphan_sweep_releases_only_locks_a_dead_bind_left() {
    use gpugate::cluster::lock::release_if_orphaned;
    use gpugate::hami::NodeLock;
    use gpugate::hami::node_lock::{LockRules, encode_node_lock};
    let old = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
    let young = jiff::Timestamp::now();
    let value = |at, name: &str| encode_node_lock(&NodeLock::new(at, "ml", name));
    let mut bound_here = pod("ml", "bound-here", "u1", 1000, 10);
    bound_here["spec"]["nodeName"] = json!("n1");
    let mut bound_elsewhere = pod("ml", "bound-elsewhere", "u2", 1000, 10);
    bound_elsewhere["spec"]["nodeName"] = json!("n9");
    let unbound = pod("ml", "unbound", "u3", 1000, 10);
    let ancient = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(2);
    let rig = Rig::new(
        &[node("n1", 1)],
        &[
            bound_here,
            bound_elsewhere,
            unbound,
            awaiting_allocation("allocating", "n1"),
        ],
        config(1.0),
    );
    let api = ApiCalls::new(rig.api.client(), &ApiLimits::default(), no_limit());
    let rules = LockRules {
        expiry: Duration::from_secs(300),
        unbound_after: Duration::from_secs(30),
    };
    let set = |v: &str| {
        let v = v.to_string();
        rig.api.update(&node_path("n1"), move |n| {
            n["metadata"]["annotations"][LOCK] = json!(v);
        });
    };
    let cases = [
        (value(old, "gone"), true, "is gone"),
        (value(old, "unbound"), true, "is not bound"),
        (value(old, "bound-elsewhere"), true, "bound to node n9"),
        (value(old, "bound-here"), false, ""),
        (value(young, "unbound"), false, ""),
        // Bound here and still waiting for its device plugin, however old
        // the lock: never released by the sweep (HAMi #3096).
        (value(ancient, "allocating"), false, ""),
    ];
    for (lock, released, why) in cases {
        set(&lock);
        let answer = release_if_orphaned(&api, &rig.cluster, "n1", &lock, rules)
            .await
            .unwrap();
        assert_eq!(answer.is_some(), released, "{lock}: {answer:?}");
        if released {
            assert!(answer.unwrap().contains(why));
            assert_eq!(rig.lock("n1"), None, "{lock}");
        } else {
            assert_eq!(rig.lock("n1").as_deref(), Some(lock.as_str()));
        }
    }
    // The node's lock changed since the sweep saw it (a retry wrote it
    // anew): the value it saw is not the one there, nothing is released.
    let seen = value(old, "unbound");
    set(&value(young, "unbound"));
    assert_eq!(
        release_if_orphaned(&api, &rig.cluster, "n1", &seen, rules)
            .await
            .unwrap(),
        None
    );
    assert!(rig.lock("n1").is_some());
}

/// A retried bind of the pod that holds the lock writes it anew, so the
/// orphan sweep never takes a live bind's lock for a dead one's.
#[tokio::test]
async fn a_retried_bind_stamps_its_lock_anew() {
    use gpugate::hami::NodeLock;
    use gpugate::hami::node_lock::{decode_node_lock, encode_node_lock};
    let rig = Rig::new(
        &[node("n1", 1)],
        &[pod("ml", "p", "u-p", 1000, 10)],
        config(1.0),
    );
    let old = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
    let stale = encode_node_lock(&NodeLock::new(old, "ml", "p"));
    rig.api.update(&node_path("n1"), |n| {
        n["metadata"]["annotations"][LOCK] = json!(stale);
    });
    assert_eq!(rig.bind("ml", "p", "u-p", "n1").await, "");
    let lock = decode_node_lock(&rig.lock("n1").expect("lock held")).unwrap();
    assert!(lock.is_held_by("ml", "p"));
    assert!(
        jiff::Timestamp::now().duration_since(lock.time) < jiff::SignedDuration::from_secs(10),
        "the lock keeps its old time: {}",
        lock.time
    );
}

/// `filterMode: best` (issue 26): the one node offered, no `NotBestNode`
/// entries for the others (kube-scheduler does not need them, and at
/// 1,000 nodes they were about 100 KB per call), and the pod's GPUs held there
/// at once, since kube-scheduler skips `/prioritize` for a single node:
/// the next pod's filter counts them and is offered the other node.
#[tokio::test]
async fn filter_mode_best_offers_one_node_and_holds_it() {
    let mut c = config(1.0);
    c.scheduler.filter_mode = gpugate::config::FilterMode::Best;
    let first = pod("ml", "first", "u-first", 16384, 100);
    let second = pod("ml", "second", "u-second", 16384, 100);
    let rig = Rig::new(
        &[node("n1", 1), node("n2", 1)],
        &[first.clone(), second.clone()],
        c,
    );
    let a = rig.filter(&first, &["n1", "n2"]);
    let offered = a.node_names.clone().unwrap();
    assert_eq!(offered.len(), 1, "{a:?}");
    assert!(a.failed_nodes.is_empty(), "{a:?}");
    assert!(rig.cluster.read().is_assumed("u-first"));
    let b = rig.filter(&second, &["n1", "n2"]);
    let other = b.node_names.clone().unwrap();
    assert_eq!(other.len(), 1, "{b:?}");
    assert_ne!(other, offered, "the first pod's GPU was offered again");
}

/// `filterMode: top`: the `filterTopNodes` nodes binpack ranks first, in
/// name order, the others turned down as `NotBestNode` (not named in the
/// answer); `/prioritize` then ranks the offered ones and holds the pod on
/// the first.
#[tokio::test]
async fn filter_mode_top_offers_the_best_few() {
    let mut c = config(1.0);
    c.scheduler.filter_mode = gpugate::config::FilterMode::Top;
    c.scheduler.filter_top_nodes = 2;
    let nodes = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"];
    let rig = Rig::new(&nodes.map(|n| node(n, 2)), &[], c);
    {
        // Two slices on gpu-3, one on gpu-1: binpack ranks gpu-3, gpu-1,
        // then the empty ones.
        let mut view = rig.cluster.write();
        for (uid, n) in [("u-a", "gpu-3"), ("u-b", "gpu-3"), ("u-c", "gpu-1")] {
            let k: Pod = serde_json::from_value(pod("ml", uid, uid, 4000, 10)).unwrap();
            let plan = gpugate::cluster::convert::pod_plan(&k, &rig.config).unwrap();
            let alloc = view.state().assign(&plan, n).unwrap();
            view.reserve(uid, &k, alloc).unwrap().settle(&mut view);
        }
    }
    let p = pod("ml", "p", "u-p", 1000, 0);
    let r = rig.filter(&p, &nodes);
    assert_eq!(
        r.node_names,
        Some(vec!["gpu-1".to_string(), "gpu-3".to_string()])
    );
    assert!(r.failed_nodes.is_empty(), "{r:?}");
    assert!(
        !rig.cluster.read().is_assumed("u-p"),
        "two offered: held at /prioritize"
    );
    let why = rig.refused(&p, &nodes);
    assert_eq!(why.len(), 2, "{why:?}");
    assert_eq!(
        why["gpu-2"],
        "NotBestNode (filterMode top keeps only the 2 best node(s) under the binpack node policy)"
    );
    assert!(why.contains_key("gpu-4"), "{why:?}");
    let scores = rig.prioritize(&p, &["gpu-1", "gpu-3"]);
    let score = |n: &str| scores.iter().find(|(h, _)| h == n).map_or(0, |s| s.1);
    assert!(score("gpu-3") > score("gpu-1"), "{scores:?}");
    assert_eq!(rig.held("u-p").unwrap().node, "gpu-3");

    // As many feasible nodes as offered, or fewer: all of them.
    let big = pod("ml", "big", "u-big", 12000, 0);
    let r = rig.filter(&big, &["gpu-2", "gpu-4"]);
    assert_eq!(
        r.node_names,
        Some(vec!["gpu-2".to_string(), "gpu-4".to_string()])
    );
    assert!(rig.held("u-big").is_none(), "two offered");
    // One: held at once, kube-scheduler takes it without `/prioritize`.
    let r = rig.filter(&big, &["gpu-4"]);
    assert_eq!(r.node_names, Some(vec!["gpu-4".to_string()]));
    assert_eq!(rig.held("u-big").unwrap().node, "gpu-4");
}

/// A single node offered is held at `/filter` whatever the mode:
/// kube-scheduler takes it without `/prioritize`, so no other hold would be
/// made before the bind, and the next pod's filter would offer the same
/// GPU.
#[tokio::test]
async fn a_single_node_offered_is_held_under_filter_mode_all() {
    let mut c = config(1.0);
    c.scheduler.filter_mode = gpugate::config::FilterMode::All;
    let first = pod("ml", "first", "u-first", 16384, 100);
    let second = pod("ml", "second", "u-second", 16384, 100);
    let rig = Rig::new(&[node("n1", 1), node("n2", 1)], &[], c);
    let a = rig.filter(&first, &["n1"]);
    assert_eq!(a.node_names, Some(vec!["n1".to_string()]));
    assert_eq!(rig.held("u-first").unwrap().node, "n1");
    let b = rig.filter(&second, &["n1", "n2"]);
    assert_eq!(
        b.node_names,
        Some(vec!["n2".to_string()]),
        "n1's GPU is held"
    );
    let third = pod("ml", "third", "u-third", 1000, 0);
    let r = rig.filter(&third, &["n1", "n2"]);
    assert_eq!(
        r.node_names.map(|n| n.len()),
        Some(0),
        "both GPUs are taken"
    );
    // Two offered: nothing held until `/prioritize`.
    let fourth = pod("ml", "fourth", "u-fourth", 1000, 0);
    let rig2 = Rig::new(&[node("n1", 1), node("n2", 1)], &[], config(1.0));
    let r = rig2.filter(&fourth, &["n1", "n2"]);
    assert_eq!(r.node_names.map(|n| n.len()), Some(2));
    assert!(rig2.held("u-fourth").is_none());
}

/// No client-side limit unless `api.qps` sets one.
fn no_limit() -> ClientLimit {
    ClientLimit::new(&ApiLimits::default(), &ClientMetrics::default())
}

/// A node with two NVIDIA T4s and two Hygon DCUs, each registered by its
/// own device plugin (hami-vendors.md 3.2: legacy text, no index).
fn mixed_node(name: &str) -> Value {
    let mut n = node(name, 2);
    n["metadata"]["annotations"]["hami.io/node-dcu-register"] = json!(format!(
        "DCU-{name}-0,4,65520,100,DCU-Z100L,0,true:DCU-{name}-1,4,65520,100,DCU-Z100L,0,true:"
    ));
    n
}

#[tokio::test]
async fn a_dcu_pod_gets_hamis_dcu_lists_and_the_ledger_reads_them_back() {
    // hami-vendors.md 3.3 and 1.5: `hami.io/dcu-devices-to-allocate` =
    // `-allocated`, vendor word DCU, entries for the DCU containers only
    // (Hygon's types are `DCU-<model>`); no NVIDIA list; the shared lock.
    let dcu_pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "infer", "namespace": "ml", "uid": "u-dcu"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {"name": "logs", "image": "busybox"},
                {"name": "infer", "image": "busybox", "resources": {"limits": {
                    "hygon.com/dcunum": "1", "hygon.com/dcumem": "2000",
                    "hygon.com/dcucores": "60"}}}
            ]
        },
        "status": {"phase": "Pending"}
    });
    let rig = Rig::new(
        &[mixed_node("mix-1")],
        &[dcu_pod, pod("ml", "train", "u-gpu", 4000, 30)],
        config(1.0),
    );
    assert_eq!(rig.bind("ml", "infer", "u-dcu", "mix-1").await, "");
    let p = rig.pod("ml", "infer");
    let a = annotations(&p);
    let list = a["hami.io/dcu-devices-allocated"].as_str().unwrap();
    assert!(
        list == "DCU-mix-1-0,DCU,2000,60:;" || list == "DCU-mix-1-1,DCU,2000,60:;",
        "{list}"
    );
    assert_eq!(a["hami.io/dcu-devices-to-allocate"], list);
    assert!(!a.contains_key("hami.io/vgpu-devices-allocated"), "{a:?}");
    assert!(!a.contains_key("hami.io/vgpu-devices-to-allocate"), "{a:?}");
    assert_eq!(a["hami.io/vgpu-node"], "mix-1");
    assert_eq!(a["hami.io/bind-phase"], "allocating");
    assert!(rig.lock("mix-1").unwrap().ends_with("Z,ml,infer"));
    // What the annotations say, read back, is what the ledger holds as
    // they write it; the ledger keeps the DCU on its container (`infer`).
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    let read = pod_allocation(&k).unwrap().unwrap();
    let held = rig.held("u-dcu").unwrap();
    assert!(held.written_as(&read), "{held:?} vs {read:?}");
    assert_eq!(held.clone().as_written(), read);
    assert!(held.containers[0].is_empty() && held.containers[1].len() == 1);
    rig.deliver_watch_events();
    assert_eq!(rig.held("u-dcu").unwrap(), held, "the watch's copy kept");
    assert_eq!(
        read.usage_by_gpu()
            .iter()
            .map(|(g, u)| (g.to_string(), u.mem_mib, u.cores))
            .collect::<Vec<_>>(),
        [(list.split(',').next().unwrap().to_string(), 2000, 60)]
    );

    // The NVIDIA pod on the same node gets NVIDIA's list only, one entry
    // per container, once the device plugin has released the lock.
    release_lock(&rig.api, "mix-1");
    rig.deliver_node_events();
    assert_eq!(rig.bind("ml", "train", "u-gpu", "mix-1").await, "");
    let p = rig.pod("ml", "train");
    let a = annotations(&p);
    let gpus = a["hami.io/vgpu-devices-allocated"].as_str().unwrap();
    assert!(
        gpus.starts_with("GPU-mix-1-") && gpus.ends_with(",NVIDIA,4000,30:;"),
        "{gpus}"
    );
    assert!(!a.contains_key("hami.io/dcu-devices-allocated"), "{a:?}");
}

#[tokio::test]
async fn an_hcu_pod_gets_hami_masters_hcu_lists() {
    // hami-vendors.md 3.8: `hami.io/hcu-devices-to-allocate` = `-allocated`,
    // vendor word HCU.
    let mut n = node("hcu-node", 0);
    n["metadata"]["annotations"] = json!({"hami.io/node-hcu-register":
        "HCU-a,4,65520,100,HCU-K100AI,0,true:"});
    let hcu_pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hcu", "namespace": "ml", "uid": "u-hcu"},
        "spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "main", "image": "busybox", "resources": {"limits": {
                "hygon.com/hcunum": "1", "hygon.com/hcumem": "1000"}}}]},
        "status": {"phase": "Pending"}
    });
    let rig = Rig::new(&[n], &[hcu_pod], config(1.0));
    assert_eq!(rig.bind("ml", "hcu", "u-hcu", "hcu-node").await, "");
    let p = rig.pod("ml", "hcu");
    let a = annotations(&p);
    assert_eq!(a["hami.io/hcu-devices-allocated"], "HCU-a,HCU,1000,100:;");
    assert_eq!(a["hami.io/hcu-devices-to-allocate"], "HCU-a,HCU,1000,100:;");
    assert!(!a.contains_key("hami.io/dcu-devices-allocated"), "{a:?}");
    assert!(!a.contains_key("hami.io/vgpu-devices-allocated"), "{a:?}");
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-hcu")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

#[tokio::test]
async fn an_ascend_pod_gets_hamis_lists_template_json_and_predicate_time() {
    // hami-vendors.md 2.3: `hami.io/<chip>-devices-to-allocate` =
    // `-allocated`, vendor word the chip's common word, one entry per
    // container (1.5: the plugin's type is the common word), the template
    // in `huawei.com/<chip>` (UUID, temp, memory; zero core left out) and
    // `predicate-time`; the shared lock.
    let mut n = node("npu-node", 0);
    n["metadata"]["annotations"] = json!({"hami.io/node-register-Ascend910B3":
        r#"[{"index":0,"id":"NPU-a","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":0}}]"#});
    let npu_pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "npu", "namespace": "ml", "uid": "u-npu"},
        "spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "logs", "image": "busybox"},
            {"name": "main", "image": "busybox", "resources": {"limits": {
                "huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}}}]},
        "status": {"phase": "Pending"}
    });
    let soft_pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "soft", "namespace": "ml", "uid": "u-soft",
                     "annotations": {"huawei.com/vnpu-mode": "hami-core"}},
        "spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "main", "image": "busybox", "resources": {"limits": {
                "huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "3000",
                "huawei.com/Ascend910B3-core": "25"}}}]},
        "status": {"phase": "Pending"}
    });
    let mut soft_node = node("soft-node", 0);
    soft_node["metadata"]["annotations"] = json!({
        "hami.io/node-register-Ascend910B3":
            r#"[{"index":0,"id":"NPU-s","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true}]"#,
        "hami-vnpu-core": "true"});
    let rig = Rig::new(&[n, soft_node], &[npu_pod, soft_pod], config(1.0));
    assert_eq!(rig.bind("ml", "npu", "u-npu", "npu-node").await, "");
    let p = rig.pod("ml", "npu");
    let a = annotations(&p);
    assert_eq!(
        a["hami.io/Ascend910B3-devices-allocated"],
        ";NPU-a,Ascend910B3,16384,0:;"
    );
    assert_eq!(
        a["hami.io/Ascend910B3-devices-to-allocate"],
        ";NPU-a,Ascend910B3,16384,0:;"
    );
    assert_eq!(
        a["huawei.com/Ascend910B3"],
        r#"[{"UUID":"NPU-a","temp":"vir05_1c_16g","memory":16384}]"#
    );
    assert_eq!(a["predicate-time"], a["hami.io/bind-time"]);
    assert!(!a.contains_key("hami.io/vgpu-devices-allocated"), "{a:?}");
    assert!(rig.lock("npu-node").unwrap().ends_with("Z,ml,npu"));
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-npu")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
    // The soft split: memory and cores as asked, no template.
    assert_eq!(rig.bind("ml", "soft", "u-soft", "soft-node").await, "");
    let p = rig.pod("ml", "soft");
    let a = annotations(&p);
    assert_eq!(
        a["hami.io/Ascend910B3-devices-allocated"],
        "NPU-s,Ascend910B3,3000,25:;"
    );
    assert_eq!(
        a["huawei.com/Ascend910B3"],
        r#"[{"UUID":"NPU-s","memory":3000,"core":25}]"#
    );
}

#[tokio::test]
async fn a_kunlun_vxpu_pod_gets_hamis_xpu_lists() {
    // hami-vendors.md 8.3: `hami.io/xpu-devices-to-allocate` = `-allocated`,
    // vendor word XPU, one entry per container, a half's memory and
    // cores (8.1); the shared lock.
    let mut n = node("xpu-node", 0);
    n["metadata"]["annotations"] = json!({"hami.io/node-register-xpu":
        r#"[{"id":"xpu-0","index":0,"count":1,"devmem":98304,"devcore":100,"type":"XPU","health":true}]"#});
    let xpu_pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "xpu", "namespace": "ml", "uid": "u-xpu"},
        "spec": {"schedulerName": "hami-scheduler", "initContainers": [
            {"name": "fetch", "image": "busybox"}], "containers": [
            {"name": "main", "image": "busybox", "resources": {"limits": {
                "kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "40000"}}}]},
        "status": {"phase": "Pending"}
    });
    let rig = Rig::new(&[n], &[xpu_pod], config(1.0));
    assert_eq!(rig.bind("ml", "xpu", "u-xpu", "xpu-node").await, "");
    let p = rig.pod("ml", "xpu");
    let a = annotations(&p);
    assert_eq!(a["hami.io/xpu-devices-allocated"], ";xpu-0,XPU,49152,50:;");
    assert_eq!(
        a["hami.io/xpu-devices-to-allocate"],
        ";xpu-0,XPU,49152,50:;"
    );
    assert!(!a.contains_key("predicate-time"), "{a:?}");
    assert!(rig.lock("xpu-node").unwrap().ends_with("Z,ml,xpu"));
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-xpu")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

/// A node with `mlus` Cambricon MLUs of 16,384 MiB, as its device plugin
/// advertises them (node capacity only, hami-vendors.md 4.2).
fn mlu_node(name: &str, mlus: u64) -> Value {
    let mut n = node(name, 0);
    n["metadata"]["annotations"] = json!({});
    n["status"] = json!({"capacity": {
        "cambricon.com/mlu.smlu.vcore": (mlus * 100).to_string(),
        "cambricon.com/mlu.smlu.vmemory": (mlus * 64).to_string()}});
    n
}

/// A pending pod with an init container and one container asking for an
/// MLU slice of 16 units (4,096 MiB) and 30 cores.
fn mlu_pod(name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid},
        "spec": {"schedulerName": "hami-scheduler", "initContainers": [
            {"name": "fetch", "image": "busybox"}], "containers": [
            {"name": "main", "image": "busybox", "resources": {"limits": {
                "cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "16",
                "cambricon.com/mlu.smlu.vcore": "30"}}}]},
        "status": {"phase": "Pending"}
    })
}

const MLU_LOCK: &str = "cambricon.com/dsmlu.lock";

fn node_annotation(rig: &Rig, node: &str, key: &str) -> Option<String> {
    rig.api.get(&node_path(node)).unwrap()["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn a_cambricon_pod_gets_hamis_mlu_lists_its_profile_and_cambricons_lock() {
    // hami-vendors.md 4.3: `hami.io/cambricon-mlu-devices-to-allocate` =
    // `-allocated`, vendor word MLU, one entry per container; the profile
    // `<index>_<cores>_<units>` of the first MLU and ASSIGNED "false"; 4.2:
    // Cambricon's own lock (an RFC 3339 time), not HAMi's.
    let rig = Rig::new(
        &[mlu_node("mlu-node", 2)],
        &[mlu_pod("mlu", "u-mlu")],
        config(1.0),
    );
    assert_eq!(rig.bind("ml", "mlu", "u-mlu", "mlu-node").await, "");
    let p = rig.pod("ml", "mlu");
    let a = annotations(&p);
    let list = ";mlu-node-cambricon-mlu-0,MLU,4096,30:;";
    assert_eq!(a["hami.io/cambricon-mlu-devices-allocated"], list);
    assert_eq!(a["hami.io/cambricon-mlu-devices-to-allocate"], list);
    assert_eq!(a["CAMBRICON_DSMLU_PROFILE"], "0_30_16");
    assert_eq!(a["CAMBRICON_DSMLU_ASSIGNED"], "false");
    assert!(!a.contains_key("predicate-time"), "{a:?}");
    assert_eq!(rig.lock("mlu-node"), None);
    let taken = node_annotation(&rig, "mlu-node", MLU_LOCK).unwrap();
    let at: jiff::Timestamp = taken.parse().unwrap();
    assert!(
        jiff::Timestamp::now().duration_since(at).as_secs() < 5,
        "{taken}"
    );
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-mlu")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

#[tokio::test]
async fn cambricons_lock_is_waited_for_two_minutes_then_replaced() {
    // 4.2: a lock younger than 2 minutes stops the bind (here after the
    // 1 s wait), an older one is replaced; an unreadable one is left alone.
    let young = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30))
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut n = mlu_node("mlu-node", 2);
    n["metadata"]["annotations"] = json!({MLU_LOCK: young});
    let rig = Rig::new(&[n], &[mlu_pod("mlu", "u-mlu")], config(1.0));
    let e = rig.bind("ml", "mlu", "u-mlu", "mlu-node").await;
    assert!(e.contains(MLU_LOCK) && e.contains("120 s"), "{e}");
    assert_eq!(node_annotation(&rig, "mlu-node", MLU_LOCK), Some(young));
    assert!(!has_allocation_annotations(&rig.pod("ml", "mlu")));
    assert!(rig.held("u-mlu").is_none());

    // Taken three minutes ago (in another zone, as HAMi writes local time).
    let old = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(180))
        .to_zoned(jiff::tz::TimeZone::fixed(jiff::tz::offset(8)))
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string();
    rig.api.update(&node_path("mlu-node"), |n| {
        n["metadata"]["annotations"][MLU_LOCK] = json!(old)
    });
    assert_eq!(rig.bind("ml", "mlu", "u-mlu", "mlu-node").await, "");
    let now = node_annotation(&rig, "mlu-node", MLU_LOCK).unwrap();
    assert_ne!(now, old);

    let mut n = mlu_node("mlu-node", 2);
    n["metadata"]["annotations"] = json!({MLU_LOCK: "yesterday"});
    let rig = Rig::new(&[n], &[mlu_pod("mlu", "u-mlu")], config(1.0));
    let e = rig.bind("ml", "mlu", "u-mlu", "mlu-node").await;
    assert!(e.contains("not an RFC 3339 time"), "{e}");
    assert_eq!(
        node_annotation(&rig, "mlu-node", MLU_LOCK).as_deref(),
        Some("yesterday")
    );
}

#[tokio::test]
async fn a_failed_cambricon_bind_releases_the_lock_it_took() {
    let rig = Rig::new(
        &[mlu_node("mlu-node", 2)],
        &[mlu_pod("mlu", "u-mlu")],
        config(1.0),
    );
    rig.api.fail(Method::POST, "/binding", 500, 1);
    let e = rig.bind("ml", "mlu", "u-mlu", "mlu-node").await;
    assert!(!e.is_empty());
    assert!(!e.contains("undo incomplete"), "{e}");
    assert_eq!(node_annotation(&rig, "mlu-node", MLU_LOCK), None);
    assert!(rig.held("u-mlu").is_none());
}

/// A node with `devices` AWS Neuron devices of two cores, as AWS's plugin
/// advertises them (node capacity only, hami-vendors.md 10.2).
fn neuron_node(name: &str, devices: u64, instance_type: &str) -> Value {
    let mut n = node(name, 0);
    n["metadata"]["annotations"] = json!({});
    n["metadata"]["labels"] = json!({"node.kubernetes.io/instance-type": instance_type});
    n["status"] = json!({"capacity": {
        "aws.amazon.com/neuron": devices.to_string(),
        "aws.amazon.com/neuroncore": (devices * 2).to_string()}});
    n
}

#[tokio::test]
async fn aws_neuron_pods_get_hamis_list_and_the_ids_awss_plugin_reads() {
    // hami-vendors.md 10.3: only `hami.io/aws-neuron-devices-allocated`
    // (cores as a bit mask), `AWS_NEURON_IDS` (core indexes for a cores
    // request, with NEURON_RESOURCE_TYPE; device indexes for a count in
    // limits), the time, NEURON_ALLOCATED and the node; no node lock.
    let core = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "core", "namespace": "ml", "uid": "u-core"},
        "spec": {"schedulerName": "hami-scheduler", "initContainers": [
            {"name": "fetch", "image": "busybox"}], "containers": [
            {"name": "main", "image": "neuron", "resources": {"limits": {
                "aws.amazon.com/neuroncore": "1"}}}]},
        "status": {"phase": "Pending"}
    });
    let mut devices = core.clone();
    devices["metadata"] = json!({"name": "devices", "namespace": "ml", "uid": "u-devices"});
    devices["spec"]["containers"][0]["resources"]["limits"] = json!({"aws.amazon.com/neuron": "2"});
    let rig = Rig::new(
        &[neuron_node("inf-node", 4, "inf2.24xlarge")],
        &[core, devices],
        config(1.0),
    );
    let before = jiff::Timestamp::now().as_nanosecond();
    assert_eq!(rig.bind("ml", "core", "u-core", "inf-node").await, "");
    let p = rig.pod("ml", "core");
    let a = annotations(&p);
    assert_eq!(
        a["hami.io/aws-neuron-devices-allocated"],
        ";inf-node-AWSNeuron-0,AWSNeuron,0,1:;"
    );
    assert!(!a.keys().any(|k| k.contains("to-allocate")), "{a:?}");
    assert_eq!(a["AWS_NEURON_IDS"], "0");
    assert_eq!(a["NEURON_RESOURCE_TYPE"], "aws.amazon.com/neuroncore");
    assert_eq!(a["NEURON_ALLOCATED"], "false");
    assert_eq!(a["aws.amazon.com/predicate-node"], "inf-node");
    let at: i128 = a["NEURON_ALLOC_TIME"].as_str().unwrap().parse().unwrap();
    assert!(at >= before && at <= jiff::Timestamp::now().as_nanosecond());
    assert_eq!(rig.lock("inf-node"), None);
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-core")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );

    // Two whole devices from the ring, by device index; device 0's other
    // core stays free.
    assert_eq!(rig.bind("ml", "devices", "u-devices", "inf-node").await, "");
    let a = annotations(&rig.pod("ml", "devices")).clone();
    assert_eq!(
        a["hami.io/aws-neuron-devices-allocated"],
        ";inf-node-AWSNeuron-1,AWSNeuron,0,3:inf-node-AWSNeuron-2,AWSNeuron,0,3:;"
    );
    assert_eq!(a["AWS_NEURON_IDS"], "1,2");
    assert!(!a.contains_key("NEURON_RESOURCE_TYPE"), "{a:?}");
    assert_eq!(rig.lock("inf-node"), None);
}

#[tokio::test]
async fn a_pod_asking_for_two_kinds_gets_both_lists_and_both_locks() {
    // hami-vendors.md 1.3 and 1.8: an NVIDIA GPU in one container and a
    // Cambricon MLU slice in another, on a node holding both: each kind's
    // lists (one entry per container), the MLU profile, HAMi's lock and
    // Cambricon's.
    let mut n = node("both", 1);
    n["status"] = json!({"capacity": {
        "cambricon.com/mlu.smlu.vcore": "100", "cambricon.com/mlu.smlu.vmemory": "64"}});
    let two = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "two", "namespace": "ml", "uid": "u-two"},
        "spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "train", "image": "cuda", "resources": {"limits": {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"}}},
            {"name": "infer", "image": "cambricon", "resources": {"limits": {
                "cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "16",
                "cambricon.com/mlu.smlu.vcore": "30"}}}]},
        "status": {"phase": "Pending"}
    });
    let rig = Rig::new(&[n], &[two], config(1.0));
    assert_eq!(rig.bind("ml", "two", "u-two", "both").await, "");
    let p = rig.pod("ml", "two");
    let a = annotations(&p);
    assert_eq!(
        a["hami.io/vgpu-devices-allocated"],
        "GPU-both-0,NVIDIA,2000,10:;;"
    );
    assert_eq!(
        a["hami.io/cambricon-mlu-devices-allocated"],
        ";both-cambricon-mlu-0,MLU,4096,30:;"
    );
    assert_eq!(a["CAMBRICON_DSMLU_PROFILE"], "0_30_16");
    assert!(rig.lock("both").unwrap().ends_with("Z,ml,two"));
    assert!(node_annotation(&rig, "both", MLU_LOCK).is_some());
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-two")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

#[tokio::test]
async fn a_gpu_and_dcu_pod_is_read_back_as_it_was_placed() {
    // NVIDIA's list has an entry per container, Hygon's only for the DCU
    // containers (1.5): the ledger reads both back to the allocation held.
    let two = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "two", "namespace": "ml", "uid": "u-two"},
        "spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "logs", "image": "busybox"},
            {"name": "infer", "image": "busybox", "resources": {"limits": {
                "hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "60"}}},
            {"name": "train", "image": "cuda", "resources": {"limits": {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"}}}]},
        "status": {"phase": "Pending"}
    });
    let rig = Rig::new(&[mixed_node("mix-1")], &[two], config(1.0));
    assert_eq!(rig.bind("ml", "two", "u-two", "mix-1").await, "");
    let p = rig.pod("ml", "two");
    let a = annotations(&p);
    assert!(
        a["hami.io/vgpu-devices-allocated"]
            .as_str()
            .unwrap()
            .starts_with(";;GPU-"),
        "{a:?}"
    );
    assert!(
        a["hami.io/dcu-devices-allocated"]
            .as_str()
            .unwrap()
            .ends_with(",DCU,2000,60:;"),
        "{a:?}"
    );
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    let read = pod_allocation(&k).unwrap().unwrap();
    assert!(rig.held("u-two").unwrap().written_as(&read), "{read:?}");
}

#[tokio::test]
async fn a_biren_pod_gets_hamis_biren_lists() {
    // hami-vendors.md 12.3: `hami.io/Biren-devices-to-allocate` =
    // `-allocated` (capital B), vendor word Biren, usedmem and usedcores 0,
    // one entry per container; HAMi's lock.
    let mut n = node("br-node", 0);
    n["metadata"]["annotations"] = json!({"hami.io/node-biren-register":
        r#"[{"id":"BR-0","index":0,"count":1,"devmem":65024,"type":"Biren","health":true}]"#});
    let br = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "br", "namespace": "ml", "uid": "u-br"},
        "spec": {"schedulerName": "hami-scheduler", "initContainers": [
            {"name": "fetch", "image": "busybox"}], "containers": [
            {"name": "main", "image": "biren", "resources": {"limits": {
                "birentech.com/gpu": "1"}}}]},
        "status": {"phase": "Pending"}
    });
    let rig = Rig::new(&[n], &[br], config(1.0));
    assert_eq!(rig.bind("ml", "br", "u-br", "br-node").await, "");
    let p = rig.pod("ml", "br");
    let a = annotations(&p);
    assert_eq!(a["hami.io/Biren-devices-allocated"], ";BR-0,Biren,0,0:;");
    assert_eq!(a["hami.io/Biren-devices-to-allocate"], ";BR-0,Biren,0,0:;");
    assert!(rig.lock("br-node").unwrap().ends_with("Z,ml,br"));
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-br")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

/// A node whose capacity gives `capacity` (resource, count) and nothing
/// else: a whole-device backend's node (hami-vendors.md 1.2, source 3).
fn capacity_node(name: &str, capacity: Value) -> Value {
    let mut n = node(name, 0);
    n["metadata"]["annotations"] = json!({});
    n["status"] = json!({"capacity": capacity});
    n
}

/// A pending pod with an init container without devices and `main` with
/// `limits`.
fn pending_pod(name: &str, uid: &str, limits: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid},
        "spec": {"schedulerName": "hami-scheduler", "initContainers": [
            {"name": "fetch", "image": "busybox"}], "containers": [
            {"name": "main", "image": "app", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"}
    })
}

#[tokio::test]
async fn whole_device_pods_get_hamis_lists_byte_exact() {
    // Metax GPUs (5.3): both lists, `<node>-metax-<i>,Metax-GPU,65536,100`,
    // no lock. Enflame GCUs (9.3): both lists, `devmem` 100. Kunlunxin
    // XPUs (8.3): `hami.io/kunlun-allocated` only, and
    // `BAIDU_COM_DEVICE_IDX` with the container's indexes. Vastai (13.3):
    // `hami.io/Vastai-devices-*`, HAMi's lock. One entry per container.
    let mut va = node("va-node", 0);
    va["metadata"]["annotations"] = json!({"hami.io/node-va-register":
        r#"[{"id":"VA-0","index":0,"count":2,"devmem":16384,"type":"Vastai","health":true}]"#});
    let rig = Rig::new(
        &[
            capacity_node("mx-node", json!({"metax-tech.com/gpu": "2"})),
            capacity_node("gcu-node", json!({"enflame.com/gcu": "1"})),
            capacity_node("xpu-node", json!({"kunlunxin.com/xpu": "8"})),
            va,
        ],
        &[
            pending_pod("mx", "u-mx", json!({"metax-tech.com/gpu": "2"})),
            pending_pod("gcu", "u-gcu", json!({"enflame.com/gcu": "1"})),
            pending_pod("xpu", "u-xpu", json!({"kunlunxin.com/xpu": "2"})),
            pending_pod("va", "u-va", json!({"vastaitech.com/va": "1"})),
        ],
        config(1.0),
    );
    for (pod, uid, node) in [
        ("mx", "u-mx", "mx-node"),
        ("gcu", "u-gcu", "gcu-node"),
        ("xpu", "u-xpu", "xpu-node"),
        ("va", "u-va", "va-node"),
    ] {
        assert_eq!(rig.bind("ml", pod, uid, node).await, "", "{pod}");
        let k: Pod = serde_json::from_value(rig.pod("ml", pod)).unwrap();
        assert!(
            rig.held(uid)
                .unwrap()
                .written_as(&pod_allocation(&k).unwrap().unwrap()),
            "{pod}"
        );
    }
    let mx = annotations(&rig.pod("ml", "mx")).clone();
    let list = ";mx-node-metax-0,Metax-GPU,65536,100:mx-node-metax-1,Metax-GPU,65536,100:;";
    assert_eq!(mx["hami.io/metax-gpu-devices-allocated"], list);
    assert_eq!(mx["hami.io/metax-gpu-devices-to-allocate"], list);
    assert_eq!(rig.lock("mx-node"), None);
    let gcu = annotations(&rig.pod("ml", "gcu")).clone();
    assert_eq!(
        gcu["hami.io/enflame-gcu-devices-allocated"],
        ";gcu-node-GCU-0,GCU,100,100:;"
    );
    assert_eq!(
        gcu["hami.io/enflame-gcu-devices-to-allocate"],
        ";gcu-node-GCU-0,GCU,100,100:;"
    );
    assert_eq!(rig.lock("gcu-node"), None);
    let xpu = annotations(&rig.pod("ml", "xpu")).clone();
    let xpus: Vec<&str> = xpu["hami.io/kunlun-allocated"]
        .as_str()
        .unwrap()
        .trim_matches(';')
        .trim_end_matches(':')
        .split(':')
        .collect();
    // Two linked XPUs of one wing (8.5), whole.
    assert_eq!(xpus.len(), 2, "{xpu:?}");
    let idx: Vec<String> = xpus
        .iter()
        .map(|e| {
            let (id, rest) = e.split_once(',').unwrap();
            assert_eq!(rest, "kunlun,98304,100", "{e}");
            id.trim_start_matches("xpu-node-kunlun-").to_string()
        })
        .collect();
    assert_eq!(xpu["BAIDU_COM_DEVICE_IDX"], idx.join(","));
    assert!(!xpu.keys().any(|k| k.contains("to-allocate")), "{xpu:?}");
    assert_eq!(rig.lock("xpu-node"), None);
    let va = annotations(&rig.pod("ml", "va")).clone();
    assert_eq!(va["hami.io/Vastai-devices-allocated"], ";VA-0,Vastai,0,0:;");
    assert_eq!(
        va["hami.io/Vastai-devices-to-allocate"],
        ";VA-0,Vastai,0,0:;"
    );
    assert!(rig.lock("va-node").unwrap().ends_with("Z,ml,va"));
}

#[tokio::test]
async fn an_iluvatar_pod_gets_its_chips_lists() {
    // hami-vendors.md 6.3: `hami.io/<cw>-devices-to-allocate` =
    // `-allocated`, the chip's word, memory in MiB (units × 256), one entry
    // per container; HAMi's lock (1.8).
    let mut n = node("il-node", 0);
    n["metadata"]["annotations"] = json!({"hami.io/node-BI-V150-register":
        "BI-V150-0,4,32768,100,BI-V150,0,true:"});
    let p = pending_pod(
        "il",
        "u-il",
        json!({"iluvatar.ai/BI-V150-vgpu": "1", "iluvatar.ai/BI-V150.vMem": "16",
               "iluvatar.ai/BI-V150.vCore": "25"}),
    );
    let rig = Rig::new(&[n], &[p], config(1.0));
    assert_eq!(rig.bind("ml", "il", "u-il", "il-node").await, "");
    let p = rig.pod("ml", "il");
    let a = annotations(&p);
    assert_eq!(
        a["hami.io/BI-V150-devices-allocated"],
        ";BI-V150-0,BI-V150,4096,25:;"
    );
    assert_eq!(
        a["hami.io/BI-V150-devices-to-allocate"],
        ";BI-V150-0,BI-V150,4096,25:;"
    );
    assert!(rig.lock("il-node").unwrap().ends_with("Z,ml,il"));
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-il")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

#[tokio::test]
async fn an_amd_pod_gets_compute_units_under_the_product_name() {
    // hami-vendors.md 11.3: `hami.io/amd-devices-to-allocate` =
    // `-allocated`, the GPU's product name as the vendor word, memory in
    // MiB and cores as compute units (25% of 304 = 76); entries only for
    // the asking containers (the type is not the word, 1.5); HAMi's lock.
    let mut n = node("amd-node", 0);
    n["metadata"]["annotations"] = json!({"hami.io/node-amd-register":
        r#"[{"id":"GPU-amd-0","index":0,"count":4,"devmem":196608,"devcore":304,"type":"AMD Instinct MI300X VF","health":true}]"#});
    let p = pending_pod(
        "amd",
        "u-amd",
        json!({"amd.com/gpu": "1", "amd.com/gpumem": "16384", "amd.com/gpucores": "25"}),
    );
    let rig = Rig::new(&[n], &[p], config(1.0));
    assert_eq!(rig.bind("ml", "amd", "u-amd", "amd-node").await, "");
    let p = rig.pod("ml", "amd");
    let a = annotations(&p);
    let list = "GPU-amd-0,AMD Instinct MI300X VF,16384,76:;";
    assert_eq!(a["hami.io/amd-devices-allocated"], list);
    assert_eq!(a["hami.io/amd-devices-to-allocate"], list);
    assert!(rig.lock("amd-node").unwrap().ends_with("Z,ml,amd"));
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-amd")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

#[tokio::test]
async fn an_mthreads_pod_gets_the_allocated_list_and_its_gpu_index() {
    // hami-vendors.md 7.3: only `hami.io/mthreads-vgpu-devices-allocated`;
    // `mthreads.com/gpu-index` (the last container's indexes),
    // `predicate-node` and `predicate-time` (Unix ns); no node lock.
    let p = pending_pod(
        "mt",
        "u-mt",
        json!({"mthreads.com/vgpu": "2", "mthreads.com/sgpu-memory": "192",
               "mthreads.com/sgpu-core": "32"}),
    );
    let rig = Rig::new(
        &[capacity_node(
            "mt-node",
            json!({"mthreads.com/sgpu-core": "32", "mthreads.com/sgpu-memory": "192"}),
        )],
        &[p],
        config(1.0),
    );
    let before = jiff::Timestamp::now().as_nanosecond();
    assert_eq!(rig.bind("ml", "mt", "u-mt", "mt-node").await, "");
    let p = rig.pod("ml", "mt");
    let a = annotations(&p);
    assert_eq!(
        a["hami.io/mthreads-vgpu-devices-allocated"],
        ";mt-node-mthreads-0,Mthreads,49152,16:mt-node-mthreads-1,Mthreads,49152,16:;"
    );
    assert!(!a.keys().any(|k| k.contains("to-allocate")), "{a:?}");
    assert_eq!(a["mthreads.com/gpu-index"], "0,1");
    assert_eq!(a["mthreads.com/predicate-node"], "mt-node");
    let at: i128 = a["mthreads.com/predicate-time"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(at >= before && at <= jiff::Timestamp::now().as_nanosecond());
    assert_eq!(rig.lock("mt-node"), None);
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    assert!(
        rig.held("u-mt")
            .unwrap()
            .written_as(&pod_allocation(&k).unwrap().unwrap())
    );
}

#[tokio::test]
async fn an_enflame_drs_pod_gets_its_profile_and_what_enflames_plugin_reads() {
    // hami-vendors.md 9.3: `hami.io/enflame-vgpu-devices-allocated` only,
    // entries `uuid,Enflame,<GB × 1024>,<core%>` (with HAMi master's fifth
    // field, the slices, when above 1; v2.10's decoder ignores it);
    // `enflame.com/gcu-assigned` "false", `gcu-assigned-time` (Unix ns),
    // `assigned-containers` with the profile, the first container's index
    // (as `-index` and `-id`), minor and slices; no node lock.
    let mut n = node("drs-node", 0);
    n["metadata"]["annotations"] = json!({"enflame.com/gcu-drs-capacity":
        r#"{"devices":[{"index":"0","minor":"4","capacity":6},{"index":"1","minor":"5","capacity":"6"}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}"#});
    let p = pending_pod("drs", "u-drs", json!({"enflame.com/drs-gcu": "3"}));
    let rig = Rig::new(&[n], &[p], config(1.0));
    let before = jiff::Timestamp::now().as_nanosecond();
    assert_eq!(rig.bind("ml", "drs", "u-drs", "drs-node").await, "");
    let p = rig.pod("ml", "drs");
    let a = annotations(&p);
    assert_eq!(
        a["hami.io/enflame-vgpu-devices-allocated"],
        ";drs-node-enflame-drs-0,Enflame,20480,50,3:;"
    );
    assert!(!a.keys().any(|k| k.contains("to-allocate")), "{a:?}");
    assert_eq!(a["enflame.com/gcu-assigned"], "false");
    assert_eq!(
        a["assigned-containers"],
        r#"{"main":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}"#
    );
    assert_eq!(a["enflame.com/gcu-assigned-index"], "0");
    assert_eq!(a["enflame.com/gcu-assigned-id"], "0");
    assert_eq!(a["enflame.com/gcu-assigned-minor"], "4");
    assert_eq!(a["enflame.com/gcu-request-size"], "3");
    let at: i128 = a["enflame.com/gcu-assigned-time"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(at >= before && at <= jiff::Timestamp::now().as_nanosecond());
    assert_eq!(rig.lock("drs-node"), None);
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    let read = pod_allocation(&k).unwrap().unwrap();
    assert!(rig.held("u-drs").unwrap().written_as(&read));
    assert_eq!(read.containers[1][0].slots, 3, "the slices read back");
}

#[tokio::test]
async fn a_metax_sgpu_pod_gets_hamis_lists_and_what_metaxs_plugin_reads() {
    // hami-vendors.md 5.3: both lists under `Metax-SGPU`, an online pod's
    // entry with no cores (5.5); `metax-tech.com/gpu-devices-allocated`
    // with each container's devices (`[]` for the init container, `vRam`
    // and a 0 `compute` left out), `predicate-time` (Unix ns); HAMi's node
    // lock (5.2). The ledger reads back the pod's class.
    let mut n = node("sg-node", 0);
    n["metadata"]["annotations"] = json!({"metax-tech.com/node-gpu-devices":
        r#"[{"uuid":"GPU-a","totalDevCount":16,"totalCompute":100,"totalVRam":65536,"healthy":true,"qosPolicy":"best-effort"},
            {"uuid":"GPU-b","totalDevCount":16,"totalCompute":100,"totalVRam":65536,"healthy":true,"linkZone":1}]"#});
    let mut p = pending_pod(
        "sg",
        "u-sg",
        json!({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "30"}),
    );
    p["metadata"]["annotations"] = json!({"metax-tech.com/sgpu-app-class": "online",
                                          "metax-tech.com/use-gpuuuid": "GPU-b"});
    let rig = Rig::new(&[n], &[p], config(1.0));
    let before = jiff::Timestamp::now().as_nanosecond();
    assert_eq!(rig.bind("ml", "sg", "u-sg", "sg-node").await, "");
    let p = rig.pod("ml", "sg");
    let a = annotations(&p);
    let list = ";GPU-b,Metax-SGPU,4096,0:;";
    assert_eq!(a["hami.io/metax-sgpu-devices-allocated"], list);
    assert_eq!(a["hami.io/metax-sgpu-devices-to-allocate"], list);
    assert_eq!(
        a["metax-tech.com/gpu-devices-allocated"],
        r#"[[],[{"uuid":"GPU-b","vRam":4096}]]"#
    );
    let at: i128 = a["metax-tech.com/predicate-time"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(at >= before && at <= jiff::Timestamp::now().as_nanosecond());
    assert!(rig.lock("sg-node").unwrap().ends_with("Z,ml,sg"));
    let k: Pod = serde_json::from_value(p.clone()).unwrap();
    let read = pod_allocation(&k).unwrap().unwrap();
    assert!(rig.held("u-sg").unwrap().written_as(&read));
    assert_eq!(
        read.tenancy.class,
        gpugate::engine::tenancy::AppClass::Online
    );
}
