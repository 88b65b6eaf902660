//! Events on pods (`events.k8s.io/v1`), so that `kubectl describe pod` says
//! why a GPU pod is pending or where it was bound. Sending never blocks a
//! request: events go through a bounded queue to one background task, and
//! when the queue is full they are dropped and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

/// Events waiting to be sent; beyond this they are dropped.
const QUEUE: usize = 1024;
/// kube-apiserver refuses notes above 1 kB.
const NOTE_LIMIT: usize = 1000;

/// One event about one pod.
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
    dropped: Arc<AtomicU64>,
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
                dropped: Arc::default(),
            },
            rx,
        )
    }

    /// Publishes events with `client` as `controller` until every sink clone
    /// is dropped.
    pub fn spawn(client: Client, controller: &str, instance: Option<String>) -> Self {
        let (sink, mut rx) = Self::channel(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: controller.to_string(),
                instance,
            },
        );
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
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
        });
        sink
    }

    /// Queues an event; never waits.
    pub fn emit(&self, event: PodEvent) {
        if let Some(tx) = &self.tx
            && tx.try_send(event).is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
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
}
