//! Why a node cannot take a pod, in words for a person (`gpugate
//! explain`): what each reason code means and what the pod's author or the
//! cluster's operator can do about it. The codes and their terse texts are
//! in `reason.rs`; these words never go to kube-scheduler.

use crate::engine::gang::GangShortfall;
use crate::engine::{Reason, Rejection};

use super::reason::{NodeReason, QuotaRefusal};

/// What one per-GPU (or per-zone) reason says, after "n of m GPUs".
fn card_words(reason: Reason) -> &'static str {
    match reason {
        Reason::CardNotHealth => {
            "are reported unhealthy by the device plugin, or hold a pod whose MIG instance is inconsistent with the GPU (a MigInconsistent event on that pod says which)"
        }
        Reason::CardCordoned => "are cordoned (hami.io/device-cordon on the node)",
        Reason::CardTypeMismatch => {
            "are of a model or mode the pod excludes or does not name (nvidia.com/use-gputype, nvidia.com/nouse-gputype, nvidia.com/vgpu-mode), or in MIG mode without a usable profile"
        }
        Reason::CardUuidMismatch => {
            "are excluded by UUID (nvidia.com/use-gpuuuid, nvidia.com/nouse-gpuuuid)"
        }
        Reason::CardTimeSlicingExhausted => {
            "have every slice taken (as many pods as the device plugin's split count)"
        }
        Reason::ExclusiveDeviceAllocateConflict => {
            "already hold other pods, and this pod needs a GPU to itself (gpucores 100, or an exclusive GPU policy)"
        }
        Reason::CardInsufficientMemory => "have too little free GPU memory",
        Reason::CardInsufficientCore => "have too few free cores (nvidia.com/gpucores)",
        Reason::CardComputeUnitsExhausted => {
            "have all their cores given out, so a pod asking for no cores cannot share them"
        }
        Reason::CardMigTopologyInfeasible => {
            "are in MIG mode with no free instance that holds the request (no allowed profile is that large, or every placement of those that are overlaps an instance already there)"
        }
        Reason::NumaNotFit => {
            "could hold a slice, but not enough of them sit on one NUMA node (nvidia.com/numa-bind)"
        }
        Reason::AllocatedCardsInsufficientRequest => {
            "could hold a slice, fewer than the container asks for"
        }
        Reason::NumaZoneInsufficientCPU => "lack the free CPUs",
        Reason::NumaZoneInsufficientMemory => "lack the free memory",
        Reason::NumaZoneInsufficientGPU => "lack GPUs that can hold the slices",
        Reason::CardAllocationUnreadable => {
            "hold a pod whose allocation annotations cannot be read (an AllocationUnreadable event on that pod says why), so what is free there is unknown; they take no new pod until the annotations can be read or the pod is gone"
        }
    }
}

/// `n of m GPUs <words>; k of m GPUs <words>`.
fn counted(of: u32, unit: &str, counts: &crate::engine::reason::ReasonCounts) -> String {
    counts
        .iter()
        .map(|(r, n)| format!("{n} of {of} {unit} {}", card_words(r)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the node cannot take the pod, in a sentence or two.
pub fn in_words(reason: &NodeReason) -> String {
    match reason {
        NodeReason::Engine(r) => rejection_words(r),
        NodeReason::Quota(q) => match q {
            QuotaRefusal::Exceeded(e) => format!(
                "the namespace's ResourceQuota {} has no room for it: {}; wait for pods the quota covers to finish, or raise the quota",
                e.quota,
                e.numbers()
            ),
            QuotaRefusal::NoMemoryLeft {
                used_mib,
                limit_mib,
                quota,
            } => format!(
                "the namespace's ResourceQuota {quota} for GPU memory is used up ({used_mib} of {limit_mib} MiB), and the pod asks for a percentage of a GPU"
            ),
        },
        NodeReason::GangInvalid(e) => {
            format!("its gang group labels cannot be read ({e}); fix the labels and recreate the pod")
        }
        NodeReason::Gang(GangShortfall::Incomplete {
            group,
            members,
            min_available,
        }) => format!(
            "its gang group {group} has {members} of the {min_available} members that must start together; it waits until the rest are created"
        ),
        NodeReason::Gang(GangShortfall::NotFit {
            group,
            placed,
            fit,
            min_available,
        }) => format!(
            "its gang group {group} needs {min_available} members running together; {placed} are placed and only {fit} more fit now, so none of the rest is placed"
        ),
        NodeReason::GangPlacement { node } => format!(
            "its gang group is placed together, and this member's place in it is node {node}"
        ),
        NodeReason::MoveDestination { node } => format!(
            "it replaces a pod moved to make room for another, and its place is held on node {node}"
        ),
        NodeReason::NodeLockBusy(why) => format!(
            "a bind here would wait ({why}), and other nodes have fewer lock holds ahead"
        ),
        NodeReason::NodeLockAwaitingAllocation { lock, now } => format!(
            "{}; a pod placed there before that would not get its own devices",
            lock.describe(*now)
        ),
        NodeReason::NotBestNode { policy, top: None } => format!(
            "the pod fits, but filterMode best offers kube-scheduler only the best node under the {policy} policy"
        ),
        NodeReason::NotBestNode {
            policy,
            top: Some(k),
        } => format!(
            "the pod fits, but filterMode top offers kube-scheduler only the {k} best node(s) under the {policy} policy"
        ),
        NodeReason::NumaTopologiesListing => "gpugate is still reading the nodes' NodeResourceTopology objects; a Guaranteed pod is placed once it has them (a second or so)".to_string(),
    }
}

fn rejection_words(r: &Rejection) -> String {
    match r {
        Rejection::NodeUnregistered => "the node has no GPUs registered by HAMi's device plugin (no readable hami.io/node-nvidia-register annotation). If kube-scheduler offers it anyway, its GPUs may come through DRA (a DeviceClass whose extendedResourceName is the pod's GPU resource): gpugate places slices only on GPUs HAMi's device plugin registers".to_string(),
        Rejection::NodeInsufficientDevice {
            container,
            requested,
            available,
        } => format!(
            "container {container} asks for {requested} GPUs and the node has {available}"
        ),
        Rejection::Devices {
            container,
            gpus,
            counts,
        } => format!(
            "for container {container}, {}",
            counted(*gpus, "GPUs", counts)
        ),
        Rejection::NumaZones {
            subject,
            zones,
            counts,
        } => format!(
            "the node's kubelet puts a Guaranteed pod's CPUs, memory and GPUs on one NUMA zone, and for {subject}, {}",
            counted(*zones, "zones", counts)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::NodePolicy;

    /// The two codes `gpugate explain` never gives (tests/explain.rs has
    /// every other one, from a snapshot): `/filter`'s `filterMode: best`
    /// and `top`,
    /// and a server still listing NodeResourceTopology objects.
    #[test]
    fn words_of_the_codes_explain_does_not_give() {
        assert_eq!(
            in_words(&NodeReason::NotBestNode {
                policy: NodePolicy::Binpack,
                top: None
            }),
            "the pod fits, but filterMode best offers kube-scheduler only the best node under the binpack policy"
        );
        assert_eq!(
            in_words(&NodeReason::NotBestNode {
                policy: NodePolicy::Spread,
                top: Some(10)
            }),
            "the pod fits, but filterMode top offers kube-scheduler only the 10 best node(s) under the spread policy"
        );
        assert_eq!(
            in_words(&NodeReason::NumaTopologiesListing),
            "gpugate is still reading the nodes' NodeResourceTopology objects; a Guaranteed pod is placed once it has them (a second or so)"
        );
        let mut counts = crate::engine::reason::ReasonCounts::default();
        counts.add(Reason::CardMigTopologyInfeasible, 1);
        let mig = NodeReason::Engine(Rejection::Devices {
            container: "main".into(),
            gpus: 1,
            counts,
        });
        assert_eq!(mig.to_string(), "1/1 CardMigTopologyInfeasible");
        assert_eq!(
            in_words(&mig),
            "for container main, 1 of 1 GPUs are in MIG mode with no free instance that holds the request (no allowed profile is that large, or every placement of those that are overlaps an instance already there)"
        );
    }
}
