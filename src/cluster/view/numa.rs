//! Nodes' NUMA layout from their NodeResourceTopology objects, and the
//! stale-data rule: an object lags behind its node (the exporter writes it
//! every so often), so what gpugate placed in a zone counts against the
//! zone until the object shows it.
//!
//! A placed pod's zone take is dropped (settled) when an object written
//! after the kubelet admitted the pod arrives: the pod's `status.startTime`
//! (set by the kubelet once it has admitted the pod and assigned its CPUs
//! and memory) more than [`SETTLE_MARGIN`] earlier than the object's last
//! write by its exporter (the `managedFields` entry that owns `zones`). An
//! object without a write time (a snapshot made with `kubectl get`, which
//! leaves `managedFields` out) settles the pods seen admitted before it
//! arrived. Until then
//! gpugate counts the pod on top of the object, so two pods are never put
//! into the same zone's last CPUs; the price is that a zone may look
//! fuller than it is for one exporter period.

use jiff::Timestamp;

use crate::engine::numa::NodeTopology;

use super::ClusterView;

impl ClusterView {
    /// Whether the API server serves NodeResourceTopology; when it stops,
    /// the objects known are forgotten.
    pub fn set_node_topologies_served(&mut self, served: bool) {
        if !served {
            for node in self.node_topology_keys() {
                self.state.set_topology(&node, None);
            }
        }
        self.topologies.set_served(served);
    }

    /// A node's NUMA layout from its NodeResourceTopology, written at
    /// `written` (kept only while the kind is served). Settles the zone
    /// takes of the pods on it that the object shows.
    pub fn upsert_node_topology(
        &mut self,
        node: &str,
        topology: NodeTopology,
        written: Option<Timestamp>,
    ) {
        self.topologies.upsert(node.to_string(), written);
        if self.topologies.served().is_none() {
            return;
        }
        self.state.set_topology(node, Some(topology));
        self.settle_node(node);
    }

    /// After a snapshot file is read whole: settles what each node's
    /// object shows, whichever came first in the file.
    pub fn settle_shown_takes(&mut self) {
        for node in self.node_topology_keys() {
            self.settle_node(&node);
        }
    }

    /// Settles the zone takes on `node` that its object shows.
    fn settle_node(&mut self, node: &str) {
        let Some(written) = self.topologies.served().and_then(|t| t.get(node)).copied() else {
            return;
        };
        for uid in self.state.unsettled_zone_takes(node) {
            let started = self.pods.get(&uid).and_then(|p| p.started);
            if shows(written, started) {
                self.state.settle_zone_take(&uid);
            }
        }
    }

    /// The first list of NodeResourceTopology objects has completed.
    pub fn node_topologies_listed(&mut self) {
        self.topologies.mark_listed();
    }

    /// Whether the kind is served and its first list has not completed:
    /// which nodes align pods is not known yet.
    pub fn node_topologies_listing(&self) -> bool {
        self.topologies.served().is_some() && !self.topologies.is_listed()
    }

    pub fn delete_node_topology(&mut self, node: &str) {
        self.topologies.remove(&node.to_string());
        self.state.set_topology(node, None);
    }

    /// A node's topology as its object gives it (before gpugate's own
    /// placements since it was written are taken off).
    pub fn node_topology(&self, node: &str) -> Option<&NodeTopology> {
        self.state.topology(node)
    }

    /// The nodes with a NodeResourceTopology known.
    pub fn node_topology_keys(&self) -> Vec<String> {
        self.topologies.keys().cloned().collect()
    }

    /// After pod `uid` on `node` was seen admitted: settles its zone take
    /// when the node's object was written long enough after that already
    /// (an object without a write time arrived before the pod was seen
    /// admitted, and shows nothing of it).
    pub(super) fn settle_if_shown(&mut self, uid: &str, node: &str) {
        let started = self.pods.get(uid).and_then(|p| p.started);
        let written = self
            .topologies
            .served()
            .and_then(|t| t.get(node))
            .copied()
            .flatten();
        if written.is_some() && shows(written, started) {
            self.state.settle_zone_take(uid);
        }
    }
}

/// How much later than a pod's admission an object must be written to be
/// taken as showing it: the exporter reads the node, then writes, and the
/// kubelet's clock (`startTime`) and the API server's (`managedFields`)
/// may differ by a little; both times have whole seconds.
pub const SETTLE_MARGIN: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// Whether an object written at `written` (`None`: no write time; it
/// arrives now) shows a pod the kubelet admitted at `started`.
fn shows(written: Option<Timestamp>, started: Option<Timestamp>) -> bool {
    match (started, written) {
        (Some(started), Some(written)) => started
            .checked_add(SETTLE_MARGIN)
            .is_ok_and(|late_enough| late_enough < written),
        // No write time: this object arrived after the pod was seen
        // admitted.
        (Some(_), None) => true,
        (None, _) => false,
    }
}
