//! Events on pods (`events.k8s.io/v1`), so that `kubectl describe pod` says
//! why a GPU pod is pending or where it was bound. Sending never blocks a
//! request: events go through a bounded queue to one background task, and
//! when the queue is full they are dropped and counted.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;

/// Events waiting to be sent; beyond this they are dropped.
const QUEUE: usize = 1024;
/// kube-apiserver refuses notes above 1 kB.
const NOTE_LIMIT: usize = 1000;

/// One event about one pod (or, with [`PodEvent::about_object`], another
/// object).
#[derive(Debug, Clone, PartialEq)]
pub struct PodEvent {
    pub pod: ObjectReference,
    pub warning: bool,
    /// `FilteringFailed`, `BindingSucceeded`, `BindingFailed`.
    pub reason: &'static str,
    pub note: String,
}

impl PodEvent {
    pub fn new(pod: &Pod, warning: bool, reason: &'static str, note: String) -> Self {
        Self {
            pod: ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Pod".to_string()),
                name: pod.metadata.name.clone(),
                namespace: Some(
                    pod.metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".to_string()),
                ),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            },
            warning,
            reason,
            note: truncate(note),
        }
    }
}

impl PodEvent {
    /// An event about a pod known by namespace, name and UID (the view's
    /// record of it rather than the object).
    pub fn about(
        namespace: &str,
        name: &str,
        uid: &str,
        warning: bool,
        reason: &'static str,
        note: String,
    ) -> Self {
        Self::about_object(("v1", "Pod"), (namespace, name, uid), warning, reason, note)
    }

    /// An event about any namespaced object (a Kueue Workload) known by
    /// its API version, kind, namespace, name and UID.
    pub fn about_object(
        (api_version, kind): (&str, &str),
        (namespace, name, uid): (&str, &str, &str),
        warning: bool,
        reason: &'static str,
        note: String,
    ) -> Self {
        Self {
            pod: ObjectReference {
                api_version: Some(api_version.to_string()),
                kind: Some(kind.to_string()),
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                uid: Some(uid.to_string()),
                ..Default::default()
            },
            warning,
            reason,
            note: truncate(note),
        }
    }
}

fn truncate(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let mut cut = NOTE_LIMIT - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

/// Where events go: the API server (through the queue), or nowhere
/// (standalone mode, tests).
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    tx: Option<mpsc::Sender<PodEvent>>,
    metrics: EventMetrics,
}

/// Events dropped because the queue was full.
#[derive(Debug, Clone, Default)]
pub struct EventMetrics {
    pub dropped: Counter,
}

impl EventMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_events_dropped",
            "Pod events (FilteringFailed, BindingFailed, BindingSucceeded) dropped because \
             the queue to the API server was full",
            self.dropped.clone(),
        );
    }
}

impl EventSink {
    /// A sink that discards events.
    pub fn none() -> Self {
        Self::default()
    }

    /// A sink whose events the returned receiver gets (tests).
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<PodEvent>) {
        let (tx, rx) = mpsc::channel(capacity);
        (
            Self {
                tx: Some(tx),
                metrics: EventMetrics::default(),
            },
            rx,
        )
    }

    /// Publishes events with `client` as `controller`, under `supervisor`
    /// (a restarted publisher takes the same queue), until every sink clone
    /// is dropped.
    pub fn spawn(
        supervisor: &crate::supervisor::Supervisor,
        client: Client,
        controller: &str,
        instance: Option<String>,
        metrics: EventMetrics,
    ) -> Self {
        let (mut sink, rx) = Self::channel(QUEUE);
        sink.metrics = metrics;
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: controller.to_string(),
                instance,
            },
        );
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
        supervisor.spawn("events", move |_| {
            let (rx, recorder) = (rx.clone(), recorder.clone());
            async move {
                let mut rx = rx.lock().await;
                while let Some(ev) = rx.recv().await {
                    publish(&recorder, &ev).await;
                }
                // Every sink is gone: nothing more will come.
                std::future::pending::<()>().await;
            }
        });
        sink
    }

    /// Queues an event; never waits.
    pub fn emit(&self, event: PodEvent) {
        if let Some(tx) = &self.tx
            && tx.try_send(event).is_err()
        {
            self.metrics.dropped.inc();
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.metrics.dropped.get()
    }
}

async fn publish(recorder: &Recorder, ev: &PodEvent) {
    let event = Event {
        type_: if ev.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: ev.reason.to_string(),
        note: Some(ev.note.clone()),
        action: ev.reason.to_string(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &ev.pod).await {
        tracing::debug!(reason = ev.reason, error = %e, "event not recorded");
    }
}

/// A reference to a pod known only by namespace, name and UID (a victim or
/// a moved pod, not read again), for an event about it.
pub fn pod_ref(namespace: &str, name: &str, uid: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some(namespace.to_string());
    p.metadata.name = Some(name.to_string());
    p.metadata.uid = Some(uid.to_string());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_to_what_the_api_server_takes() {
        let long = "é".repeat(800);
        let cut = truncate(long);
        assert!(cut.len() <= NOTE_LIMIT);
        assert!(cut.ends_with("..."));
        assert_eq!(truncate("short".into()), "short");
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let (sink, _rx) = EventSink::channel(1);
        let pod = Pod::default();
        sink.emit(PodEvent::new(&pod, true, "FilteringFailed", "a".into()));
        sink.emit(PodEvent::new(&pod, true, "FilteringFailed", "b".into()));
        assert_eq!(sink.dropped(), 1);
        EventSink::none().emit(PodEvent::new(&pod, false, "BindingSucceeded", "c".into()));
    }

    #[test]
    fn drops_are_exported_as_a_metric() {
        let metrics = EventMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let (mut sink, _rx) = EventSink::channel(1);
        sink.metrics = metrics;
        let pod = Pod::default();
        for note in ["a", "b", "c"] {
            sink.emit(PodEvent::new(&pod, true, "FilteringFailed", note.into()));
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("gpugate_events_dropped_total 2"), "{text}");
    }
}
