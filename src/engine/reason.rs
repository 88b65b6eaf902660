//! Why a node cannot hold a pod: stable reason codes, one per rejected GPU,
//! aggregated as HAMi does (`1/4 CardInsufficientMemory, 3/4 CardTypeMismatch`).

use std::fmt;

/// Why one GPU was not taken. Names are HAMi's and stable: they appear in
/// extender answers, events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    CardNotHealth,
    CardCordoned,
    CardTypeMismatch,
    CardUuidMismatch,
    CardTimeSlicingExhausted,
    ExclusiveDeviceAllocateConflict,
    CardInsufficientMemory,
    CardInsufficientCore,
    CardComputeUnitsExhausted,
    /// A MIG GPU: no allowed profile that holds the request has a
    /// placement free of the instances already on it.
    CardMigTopologyInfeasible,
    NumaNotFit,
    AllocatedCardsInsufficientRequest,
    /// A NUMA zone lacks the CPUs a container (or the pod) needs there.
    NumaZoneInsufficientCPU,
    /// A NUMA zone lacks the memory a container (or the pod) needs there.
    NumaZoneInsufficientMemory,
    /// The GPUs of a NUMA zone cannot hold a container's (or the pod's)
    /// slices beside what the zone gives it already.
    NumaZoneInsufficientGPU,
    /// The GPU holds a pod whose allocation annotations cannot be read:
    /// what it holds is unknown, so the GPU takes no new pod (gpugate's,
    /// not HAMi's, which frees such a GPU).
    CardAllocationUnreadable,
    /// The device holds templates of another size, and its device plugin
    /// splits a device into one size at a time (Kunlun vXPU; gpugate's
    /// code, HAMi counts it as `NumaNotFit`).
    CardTemplateMismatch,
    /// A container's devices are not those an earlier container of the
    /// pod took, on a kind whose containers share their devices
    /// (Mthreads, hami-vendors.md 7.5; HAMi's own code).
    CardNotFoundCustomFilterRule,
    /// The device holds pods of another app class (Metax sGPU,
    /// hami-vendors.md 5.5; HAMi's code).
    CardAppClassMismatch,
    /// The device's pods share it under another QoS policy (Metax sGPU,
    /// 5.5; HAMi's code).
    CardQosPolicyMismatch,
}

impl Reason {
    pub const ALL: [Reason; 20] = [
        Reason::CardNotHealth,
        Reason::CardCordoned,
        Reason::CardTypeMismatch,
        Reason::CardUuidMismatch,
        Reason::CardTimeSlicingExhausted,
        Reason::ExclusiveDeviceAllocateConflict,
        Reason::CardInsufficientMemory,
        Reason::CardInsufficientCore,
        Reason::CardComputeUnitsExhausted,
        Reason::CardMigTopologyInfeasible,
        Reason::NumaNotFit,
        Reason::AllocatedCardsInsufficientRequest,
        Reason::NumaZoneInsufficientCPU,
        Reason::NumaZoneInsufficientMemory,
        Reason::NumaZoneInsufficientGPU,
        Reason::CardAllocationUnreadable,
        Reason::CardTemplateMismatch,
        Reason::CardNotFoundCustomFilterRule,
        Reason::CardAppClassMismatch,
        Reason::CardQosPolicyMismatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CardNotHealth => "CardNotHealth",
            Reason::CardCordoned => "CardCordoned",
            Reason::CardTypeMismatch => "CardTypeMismatch",
            Reason::CardUuidMismatch => "CardUuidMismatch",
            Reason::CardTimeSlicingExhausted => "CardTimeSlicingExhausted",
            Reason::ExclusiveDeviceAllocateConflict => "ExclusiveDeviceAllocateConflict",
            Reason::CardInsufficientMemory => "CardInsufficientMemory",
            Reason::CardInsufficientCore => "CardInsufficientCore",
            Reason::CardComputeUnitsExhausted => "CardComputeUnitsExhausted",
            Reason::CardMigTopologyInfeasible => "CardMigTopologyInfeasible",
            Reason::NumaNotFit => "NumaNotFit",
            Reason::AllocatedCardsInsufficientRequest => "AllocatedCardsInsufficientRequest",
            Reason::NumaZoneInsufficientCPU => "NumaZoneInsufficientCPU",
            Reason::NumaZoneInsufficientMemory => "NumaZoneInsufficientMemory",
            Reason::NumaZoneInsufficientGPU => "NumaZoneInsufficientGPU",
            Reason::CardAllocationUnreadable => "CardAllocationUnreadable",
            Reason::CardTemplateMismatch => "CardTemplateMismatch",
            Reason::CardNotFoundCustomFilterRule => "CardNotFoundCustomFilterRule",
            Reason::CardAppClassMismatch => "CardAppClassMismatch",
            Reason::CardQosPolicyMismatch => "CardQosPolicyMismatch",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counts of rejected GPUs (or NUMA zones) per reason for one container
/// on one node. Two bytes a count (a node holds far fewer devices), so
/// that the counts every refused node carries stay small: the evaluation
/// zeroes one per container and node, and keeps one per refused node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReasonCounts {
    counts: [u16; Reason::ALL.len()],
}

impl ReasonCounts {
    /// Adds `n` (saturating: a count never wraps).
    pub fn add(&mut self, reason: Reason, n: u32) {
        let c = &mut self.counts[reason as usize];
        *c = c.saturating_add(u16::try_from(n).unwrap_or(u16::MAX));
    }

    pub fn get(&self, reason: Reason) -> u32 {
        u32::from(self.counts[reason as usize])
    }

    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|c| *c == 0)
    }

    /// Reasons with their counts, in the order of the rendered string.
    pub fn iter(&self) -> impl Iterator<Item = (Reason, u32)> + '_ {
        let mut v: Vec<(Reason, u32)> = Reason::ALL
            .iter()
            .map(|r| (*r, self.get(*r)))
            .filter(|(_, n)| *n > 0)
            .collect();
        v.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        v.into_iter()
    }
}

/// What a NUMA-aligned node must fit in one zone: one container (the
/// Topology Manager's `container` scope) or the whole pod (`pod` scope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneSubject {
    Pod,
    /// The container's name.
    Container(String),
}

/// `the pod`, `container c0`.
impl fmt::Display for ZoneSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZoneSubject::Pod => f.write_str("the pod"),
            ZoneSubject::Container(name) => write!(f, "container {name}"),
        }
    }
}

/// Why a node was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The node has no registered GPUs (or its registration is unreadable).
    NodeUnregistered,
    /// A container needs more GPUs than the node has at all.
    NodeInsufficientDevice {
        container: String,
        requested: u32,
        available: u32,
    },
    /// A container did not fit: one reason per GPU of the node.
    Devices {
        container: String,
        gpus: u32,
        counts: ReasonCounts,
    },
    /// The node's kubelet aligns the pod on one NUMA zone (Topology
    /// Manager `single-numa-node` or `restricted`) and no zone can hold
    /// `subject` (a container, or the whole pod under the pod scope)
    /// beside what the zones give already: one reason per zone.
    NumaZones {
        subject: ZoneSubject,
        zones: u32,
        counts: ReasonCounts,
    },
    /// No profile of the node's gives what a container asks for, on a
    /// kind split into profiles (Enflame DRS, hami-vendors.md 9.5; HAMi's
    /// `ModeNotFit`).
    ModeNotFit {
        container: String,
        request: super::request::GpuRequest,
        /// The node's profiles, by name (`1g.6gb, 3g.20gb`).
        profiles: String,
    },
    /// The pod's devices of another kind than its first did not fit
    /// (a pod asking for two kinds, `PodPlan::also`).
    OfKind {
        kind: crate::devices::KindId,
        rejection: Box<Rejection>,
    },
}

impl Rejection {
    /// Rejections that no change in usage can cure (kube-scheduler's
    /// "unresolvable"): preemption cannot help on such nodes.
    pub fn is_unresolvable(&self) -> bool {
        match self {
            Rejection::NodeUnregistered
            | Rejection::NodeInsufficientDevice { .. }
            | Rejection::ModeNotFit { .. } => true,
            Rejection::NumaZones { zones, .. } => *zones == 0,
            Rejection::Devices { counts, .. } => Reason::ALL.iter().all(|r| {
                counts.get(*r) == 0
                    || matches!(
                        r,
                        Reason::CardNotHealth
                            | Reason::CardCordoned
                            | Reason::CardTypeMismatch
                            | Reason::CardUuidMismatch
                    )
            }),
            Rejection::OfKind { rejection, .. } => rejection.is_unresolvable(),
        }
    }

    /// The reason codes in this rejection (for events and metrics).
    pub fn codes(&self) -> Vec<&'static str> {
        match self {
            Rejection::NodeUnregistered => vec!["NodeUnregistered"],
            Rejection::NodeInsufficientDevice { .. } => vec!["NodeInsufficientDevice"],
            Rejection::ModeNotFit { .. } => vec!["ModeNotFit"],
            Rejection::Devices { counts, .. } | Rejection::NumaZones { counts, .. } => {
                counts.iter().map(|(r, _)| r.as_str()).collect()
            }
            Rejection::OfKind { rejection, .. } => rejection.codes(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::NodeUnregistered => f.write_str("node unregistered"),
            Rejection::ModeNotFit { profiles, .. } => {
                write!(f, "ModeNotFit (no profile of {profiles} fits)")
            }
            Rejection::NodeInsufficientDevice {
                requested,
                available,
                ..
            } => write!(
                f,
                "NodeInsufficientDevice ({requested} GPUs requested, {available} on the node)"
            ),
            Rejection::NumaZones {
                subject,
                zones,
                counts,
            } => {
                render_counts(f, *zones, counts)?;
                write!(f, " (one NUMA zone for {subject})")
            }
            Rejection::Devices { gpus, counts, .. } => render_counts(f, *gpus, counts),
            Rejection::OfKind { kind, rejection } => {
                write!(f, "{rejection} ({}s)", kind.kind().noun)
            }
        }
    }
}

/// `1/4 CardInsufficientMemory, 3/4 CardTypeMismatch`.
fn render_counts(f: &mut fmt::Formatter<'_>, of: u32, counts: &ReasonCounts) -> fmt::Result {
    for (i, (reason, n)) in counts.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{n}/{of} {reason}")?;
    }
    Ok(())
}

/// A container's rejection on a node of `gpus` GPUs with these counts
/// (tests).
#[cfg(test)]
pub(crate) fn devices_rejection(gpus: u32, counts: &[(Reason, u32)]) -> Rejection {
    let mut c = ReasonCounts::default();
    for (reason, n) in counts {
        c.add(*reason, *n);
    }
    Rejection::Devices {
        container: "c".into(),
        gpus,
        counts: c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_hami() {
        let r = devices_rejection(
            4,
            &[
                (Reason::CardTypeMismatch, 3),
                (Reason::CardInsufficientMemory, 1),
            ],
        );
        assert_eq!(
            r.to_string(),
            "1/4 CardInsufficientMemory, 3/4 CardTypeMismatch"
        );
        assert!(!r.is_unresolvable());
        assert_eq!(r.codes(), ["CardInsufficientMemory", "CardTypeMismatch"]);
        assert_eq!(Rejection::NodeUnregistered.to_string(), "node unregistered");
    }

    #[test]
    fn unresolvable_only_when_usage_cannot_help() {
        let r = devices_rejection(
            4,
            &[(Reason::CardTypeMismatch, 2), (Reason::CardNotHealth, 2)],
        );
        assert!(r.is_unresolvable());
    }

    #[test]
    fn names_are_distinct_and_indexed_in_order() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Reason::ALL.len());
    }
}
