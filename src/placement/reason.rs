//! Why a node cannot take a pod, typed from the engine to the edge: a
//! stable code ([`ReasonCode`]: a metric label, and the first word of every
//! text) and the text kube-scheduler and events show. Rendered only at the
//! wire (`/filter`'s answer), in events and in metrics.

use std::collections::BTreeMap;
use std::fmt;

use crate::engine::gang::GangShortfall;
use crate::engine::{NodePolicy, QuotaExceeded, Reason, Rejection};

/// The stable code of a [`NodeReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReasonCode {
    /// A per-GPU reason of the engine (`CardInsufficientMemory`, ...).
    Card(Reason),
    NodeUnregistered,
    NodeInsufficientDevice,
    /// No profile of the node's gives the request (Enflame DRS).
    ModeNotFit,
    ResourceQuotaNotFit,
    GangInvalid,
    GangIncomplete,
    GangNotFit,
    GangPlacement,
    MoveDestination,
    NodeLockBusy,
    NodeLockAwaitingAllocation,
    NotBestNode,
    NumaTopologiesListing,
}

impl ReasonCode {
    /// The codes beside the per-GPU ones.
    pub const NODE: [ReasonCode; 13] = [
        ReasonCode::NodeUnregistered,
        ReasonCode::NodeInsufficientDevice,
        ReasonCode::ModeNotFit,
        ReasonCode::ResourceQuotaNotFit,
        ReasonCode::GangInvalid,
        ReasonCode::GangIncomplete,
        ReasonCode::GangNotFit,
        ReasonCode::GangPlacement,
        ReasonCode::MoveDestination,
        ReasonCode::NodeLockBusy,
        ReasonCode::NodeLockAwaitingAllocation,
        ReasonCode::NotBestNode,
        ReasonCode::NumaTopologiesListing,
    ];

    /// Every code there is.
    pub fn all() -> impl Iterator<Item = ReasonCode> {
        Reason::ALL
            .into_iter()
            .map(ReasonCode::Card)
            .chain(Self::NODE)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::Card(r) => r.as_str(),
            ReasonCode::NodeUnregistered => "NodeUnregistered",
            ReasonCode::NodeInsufficientDevice => "NodeInsufficientDevice",
            ReasonCode::ModeNotFit => "ModeNotFit",
            ReasonCode::ResourceQuotaNotFit => "ResourceQuotaNotFit",
            ReasonCode::GangInvalid => "GangInvalid",
            ReasonCode::GangIncomplete => "GangIncomplete",
            ReasonCode::GangNotFit => "GangNotFit",
            ReasonCode::GangPlacement => "GangPlacement",
            ReasonCode::MoveDestination => "MoveDestination",
            ReasonCode::NodeLockBusy => "NodeLockBusy",
            ReasonCode::NodeLockAwaitingAllocation => "NodeLockAwaitingAllocation",
            ReasonCode::NotBestNode => "NotBestNode",
            ReasonCode::NumaTopologiesListing => "NumaTopologiesListing",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the namespace's ResourceQuota refuses the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaRefusal {
    Exceeded(QuotaExceeded),
    /// GPU memory asked in percent of a GPU (no MiB until a GPU is
    /// chosen) while the namespace has no memory left at all.
    NoMemoryLeft {
        /// The kind of device whose memory it is.
        kind: crate::devices::KindId,
        used_mib: u64,
        limit_mib: u64,
        /// The ResourceQuota's name.
        quota: String,
    },
}

impl fmt::Display for QuotaRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaRefusal::Exceeded(e) => write!(f, "ResourceQuotaNotFit ({e})"),
            QuotaRefusal::NoMemoryLeft {
                kind,
                used_mib,
                limit_mib,
                quota,
            } => {
                let device = kind.kind().unit();
                write!(
                    f,
                    "ResourceQuotaNotFit ({device} memory in percent of a {device} requested, \
                     {used_mib} MiB of {limit_mib} MiB already used (ResourceQuota {quota}))"
                )
            }
        }
    }
}

/// What steering found promised on a node it set aside
/// (`placement::steering`), kept as numbers and put in words only when
/// the reason is read: `/filter` sets hundreds of nodes aside per call at
/// full rate, and reads the reasons only when it offers none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockBusy {
    /// gpugate's binds promised there (assumed, running, unconfirmed).
    pub binds: u32,
    /// The node's lock, when a pod holds it (shared with the view).
    pub lock: Option<std::sync::Arc<crate::hami::NodeLock>>,
    /// The fewest lock holds ahead on a feasible node.
    pub least: u32,
    /// `nodeLock.queueDepth` as applied.
    pub queue_depth: u32,
    /// When that depth came from `queueDepth: auto` (the pod's node policy
    /// and the lock holds seen), not a number in the config: how long
    /// locks had been held lately, if known.
    pub auto_hold: Option<Option<std::time::Duration>>,
}

impl LockBusy {
    /// The promised work these numbers came from.
    fn work(&self) -> crate::cluster::view::PromisedWork<'_> {
        crate::cluster::view::PromisedWork {
            binds: self.binds,
            lock: self.lock.as_ref(),
        }
    }

    /// Lock holds ahead of a new bind.
    pub fn holds(&self) -> u32 {
        self.work().holds()
    }
}

impl fmt::Display for LockBusy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.work().describe().unwrap_or_default())?;
        if self.least < self.queue_depth {
            let (holds, depth) = (self.holds(), self.queue_depth);
            if let Some(hold) = self.auto_hold {
                let hold = match hold {
                    Some(h) => format!("locks held {:.1} s lately", h.as_secs_f64()),
                    None => format!(
                        "locks assumed held {} s (too few released yet)",
                        crate::config::ASSUMED_LOCK_HOLD.as_secs()
                    ),
                };
                write!(
                    f,
                    " ({holds} lock holds ahead, more than the queue depth {depth} that \
                     nodeLock.queueDepth auto gives binpack pods: {} per second of lock hold, \
                     at most four fifths of the bind's wait for its node, {hold})",
                    crate::config::AUTO_DEPTH_PER_SECOND_OF_HOLD
                )
            } else {
                write!(
                    f,
                    " ({holds} lock holds ahead, more than nodeLock.queueDepth {depth})"
                )
            }
        } else if self.least > 0 {
            write!(
                f,
                " ({} lock hold(s) ahead; other nodes have {})",
                self.holds(),
                self.least
            )
        } else {
            Ok(())
        }
    }
}

/// Why a node cannot take the pod.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeReason {
    /// The engine's verdict on the node's GPUs.
    Engine(Rejection),
    Quota(QuotaRefusal),
    /// The pod's group labels cannot be read.
    GangInvalid(String),
    /// The pod's group is short of members, or they do not fit together.
    Gang(GangShortfall),
    /// The pod's group is being placed and puts this member on `node`.
    GangPlacement {
        node: String,
    },
    /// The pod replaces one defragmentation moved, and its place is held
    /// on `node`.
    MoveDestination {
        node: String,
    },
    /// A bind here would wait behind more lock holds (node lock held,
    /// binds in progress or assumed) than on the nodes offered.
    NodeLockBusy(LockBusy),
    /// The node's lock is kept past its expiry for a pod bound there that
    /// still waits for its device plugin: no other pod binds there until
    /// it is admitted or gone (`now` is when that was found).
    NodeLockAwaitingAllocation {
        lock: Box<crate::cluster::view::AwaitedLock>,
        now: jiff::Timestamp,
    },
    /// `filterMode: best` offers only the best node, `top` (`Some(k)`)
    /// only the `k` best.
    NotBestNode {
        policy: NodePolicy,
        top: Option<usize>,
    },
    /// A Guaranteed pod while NodeResourceTopology objects are still being
    /// listed: which nodes align it is not known yet.
    NumaTopologiesListing,
}

impl NodeReason {
    pub fn code(&self) -> ReasonCode {
        match self {
            NodeReason::Engine(Rejection::OfKind { rejection, .. }) => {
                NodeReason::Engine((**rejection).clone()).code()
            }
            NodeReason::Engine(Rejection::NodeUnregistered) => ReasonCode::NodeUnregistered,
            NodeReason::Engine(Rejection::NodeInsufficientDevice { .. }) => {
                ReasonCode::NodeInsufficientDevice
            }
            NodeReason::Engine(Rejection::ModeNotFit { .. }) => ReasonCode::ModeNotFit,
            // The first reason the text names.
            NodeReason::Engine(
                Rejection::Devices { counts, .. } | Rejection::NumaZones { counts, .. },
            ) => counts
                .iter()
                .next()
                .map_or(ReasonCode::NodeInsufficientDevice, |(r, _)| {
                    ReasonCode::Card(r)
                }),
            NodeReason::Quota(_) => ReasonCode::ResourceQuotaNotFit,
            NodeReason::GangInvalid(_) => ReasonCode::GangInvalid,
            NodeReason::Gang(GangShortfall::Incomplete { .. }) => ReasonCode::GangIncomplete,
            NodeReason::Gang(GangShortfall::NotFit { .. }) => ReasonCode::GangNotFit,
            NodeReason::GangPlacement { .. } => ReasonCode::GangPlacement,
            NodeReason::MoveDestination { .. } => ReasonCode::MoveDestination,
            NodeReason::NodeLockBusy(_) => ReasonCode::NodeLockBusy,
            NodeReason::NodeLockAwaitingAllocation { .. } => ReasonCode::NodeLockAwaitingAllocation,
            NodeReason::NotBestNode { .. } => ReasonCode::NotBestNode,
            NodeReason::NumaTopologiesListing => ReasonCode::NumaTopologiesListing,
        }
    }

    /// Whether preempting pods cannot help: the node lacks the GPUs, the
    /// pod's group label is malformed or its members are missing, or the
    /// node's lock waits for a device plugin.
    pub fn is_unresolvable(&self) -> bool {
        match self {
            NodeReason::Engine(r) => r.is_unresolvable(),
            NodeReason::GangInvalid(_)
            | NodeReason::Gang(GangShortfall::Incomplete { .. })
            | NodeReason::NodeLockAwaitingAllocation { .. }
            | NodeReason::NumaTopologiesListing => true,
            _ => false,
        }
    }
}

impl fmt::Display for NodeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeReason::Engine(r) => r.fmt(f),
            NodeReason::Quota(q) => q.fmt(f),
            NodeReason::GangInvalid(e) => write!(f, "GangInvalid ({e})"),
            NodeReason::Gang(s) => s.fmt(f),
            NodeReason::GangPlacement { node } => write!(
                f,
                "GangPlacement (the group is placed together; this member's place is node {node})"
            ),
            NodeReason::MoveDestination { node } => write!(
                f,
                "MoveDestination (this pod replaces one moved to make room; its place is held on node {node})"
            ),
            NodeReason::NodeLockBusy(busy) => {
                write!(f, "NodeLockBusy ({busy}; other nodes have fewer lock holds ahead)")
            }
            NodeReason::NodeLockAwaitingAllocation { lock, now } => {
                write!(f, "NodeLockAwaitingAllocation ({})", lock.describe(*now))
            }
            NodeReason::NotBestNode { policy, top: None } => write!(
                f,
                "NotBestNode (filterMode best keeps only the best node under the {policy} node policy)"
            ),
            NodeReason::NotBestNode {
                policy,
                top: Some(k),
            } => write!(
                f,
                "NotBestNode (filterMode top keeps only the {k} best node(s) under the {policy} node policy)"
            ),
            NodeReason::NumaTopologiesListing => f.write_str(
                "NumaTopologiesListing (NodeResourceTopology objects are still being listed; a Guaranteed pod is placed once they are, a second or so)",
            ),
        }
    }
}

/// Nodes named in one event note, at most.
const NOTE_NODES: usize = 20;

/// For a pod no node can hold: one note per reason code with the nodes
/// that gave it, most frequent first, for `FilteringFailed` events.
pub fn failure_notes<'r>(
    rejected: impl IntoIterator<Item = (&'r str, &'r NodeReason)>,
) -> Vec<String> {
    let mut by_code: BTreeMap<ReasonCode, Vec<(&str, &NodeReason)>> = BTreeMap::new();
    for (node, reason) in rejected {
        by_code
            .entry(reason.code())
            .or_default()
            .push((node, reason));
    }
    let mut groups: Vec<(ReasonCode, Vec<(&str, &NodeReason)>)> = by_code.into_iter().collect();
    groups.sort_by(|a, b| {
        b.1.len()
            .cmp(&a.1.len())
            .then(a.0.as_str().cmp(b.0.as_str()))
    });
    groups
        .into_iter()
        .map(|(code, mut nodes)| {
            nodes.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let shown = nodes.len().min(NOTE_NODES);
            let more = nodes.len() - shown;
            let names: Vec<&str> = nodes[..shown].iter().map(|(n, _)| *n).collect();
            let mut note = format!("{code} on {} node(s): {}", nodes.len(), names.join(", "));
            if more > 0 {
                note.push_str(&format!(" and {more} more"));
            }
            let (first, example) = nodes[0];
            note.push_str(&format!(" (e.g. {first}: {example})"));
            note
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::gang::GangKey;
    use crate::engine::quota::QuotaResource;
    use crate::engine::reason::devices_rejection;

    fn devices(reasons: &[(Reason, u32)]) -> NodeReason {
        NodeReason::Engine(devices_rejection(8, reasons))
    }

    /// Every reason's code is the first word of its text (after `n/m` for
    /// per-GPU reasons): kube-scheduler's users read the text, metrics and
    /// events group by the code, and the two must agree.
    #[test]
    fn the_code_is_the_first_word_of_the_text() {
        let group = GangKey {
            namespace: "ml".into(),
            name: "g".into(),
        };
        let reasons = [
            devices(&[
                (Reason::CardNotHealth, 7),
                (Reason::CardInsufficientCore, 1),
            ]),
            devices(&[(Reason::CardInsufficientMemory, 2)]),
            NodeReason::Engine(Rejection::NodeUnregistered),
            NodeReason::Engine(Rejection::NumaZones {
                subject: crate::engine::reason::ZoneSubject::Container("c".into()),
                zones: 2,
                counts: {
                    let mut c = crate::engine::reason::ReasonCounts::default();
                    c.add(Reason::NumaZoneInsufficientGPU, 1);
                    c.add(Reason::NumaZoneInsufficientCPU, 1);
                    c
                },
            }),
            NodeReason::Engine(Rejection::NodeInsufficientDevice {
                container: "c".into(),
                requested: 4,
                available: 2,
            }),
            NodeReason::Quota(QuotaRefusal::Exceeded(QuotaExceeded {
                kind: crate::devices::KindId::NVIDIA,
                resource: QuotaResource::Memory,
                used: 1,
                requested: 2,
                limit: 2,
                quota: "gpu".into(),
            })),
            NodeReason::Quota(QuotaRefusal::NoMemoryLeft {
                kind: crate::devices::KindId::NVIDIA,
                used_mib: 5,
                limit_mib: 5,
                quota: "gpu".into(),
            }),
            NodeReason::GangInvalid("label x".into()),
            NodeReason::Gang(GangShortfall::Incomplete {
                group: group.clone(),
                members: 1,
                min_available: 2,
            }),
            NodeReason::Gang(GangShortfall::NotFit {
                group,
                placed: 0,
                fit: 1,
                min_available: 2,
            }),
            NodeReason::GangPlacement { node: "n".into() },
            NodeReason::MoveDestination { node: "n".into() },
            NodeReason::NodeLockBusy(LockBusy {
                binds: 1,
                lock: None,
                least: 0,
                queue_depth: 0,
                auto_hold: None,
            }),
            NodeReason::NodeLockAwaitingAllocation {
                lock: Box::new(crate::cluster::view::AwaitedLock {
                    node: "n".into(),
                    uid: "u".into(),
                    namespace: "ml".into(),
                    name: "p".into(),
                    since: jiff::Timestamp::UNIX_EPOCH,
                }),
                now: jiff::Timestamp::UNIX_EPOCH,
            },
            NodeReason::NotBestNode {
                policy: NodePolicy::Binpack,
                top: None,
            },
            NodeReason::NumaTopologiesListing,
            NodeReason::Engine(Rejection::ModeNotFit {
                container: "c".into(),
                request: crate::engine::GpuRequest {
                    count: 1,
                    memory: crate::engine::Memory::Slices(2),
                    cores: 0,
                },
                profiles: "1g.6gb, 6g.40gb".into(),
            }),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for r in &reasons {
            let text = r.to_string();
            let first = text
                .split([' ', '(', ','])
                .find(|w| !w.is_empty() && !w.contains('/'))
                .unwrap_or_default();
            let first = if text == "node unregistered" {
                "NodeUnregistered"
            } else {
                first
            };
            assert_eq!(r.code().as_str(), first, "{text}");
            seen.insert(r.code());
        }
        assert_eq!(
            reasons[0].code(),
            ReasonCode::Card(Reason::CardInsufficientCore)
        );
        // Every node-level code is covered above.
        for code in ReasonCode::NODE {
            assert!(seen.contains(&code), "{code} untested");
        }
        assert_eq!(
            ReasonCode::all().count(),
            Reason::ALL.len() + ReasonCode::NODE.len()
        );
    }

    #[test]
    fn notes_group_nodes_by_code_most_frequent_first() {
        let memory = devices(&[(Reason::CardInsufficientMemory, 1)]);
        let unregistered = NodeReason::Engine(Rejection::NodeUnregistered);
        let rejected = vec![
            ("c", &memory),
            ("a", &memory),
            ("cpu", &unregistered),
            ("b", &memory),
        ];
        let notes = failure_notes(rejected);
        assert_eq!(notes.len(), 2);
        assert!(
            notes[0].starts_with("CardInsufficientMemory on 3 node(s): a, b, c (e.g. a: 1/8"),
            "{}",
            notes[0]
        );
        assert!(
            notes[1].starts_with("NodeUnregistered on 1 node(s): cpu"),
            "{}",
            notes[1]
        );
    }
}
