//! Why a node cannot take a pod, in words for a person (`gpugate
//! explain`): what each reason code means and what the pod's author or the
//! cluster's operator can do about it. The codes and their terse texts are
//! in `reason.rs`; these words never go to kube-scheduler.

use crate::config::Config;
use crate::engine::gang::GangShortfall;
use crate::engine::request::{DeviceConfig, GpuRequest, Memory};
use crate::engine::{PodPlan, Reason, Rejection};

use super::reason::{NodeReason, QuotaRefusal};

/// What one per-device (or per-zone) reason says, after "n of m GPUs",
/// in the words of the pod's device kind (`cfg`: its section, with the
/// resource names as configured).
fn card_words(reason: Reason, cfg: &DeviceConfig) -> String {
    let kind = cfg.kind.kind();
    let unit = kind.unit();
    let keys = &kind.selection;
    // `gpucores` of `nvidia.com/gpucores`.
    let cores = cfg
        .resource_core_name
        .rsplit('/')
        .next()
        .unwrap_or_default();
    match reason {
        Reason::CardNotHealth => format!(
            "are reported unhealthy by the device plugin, or hold a pod whose MIG instance is inconsistent with the {unit} (a MigInconsistent event on that pod says which)"
        ),
        Reason::CardCordoned => "are cordoned (hami.io/device-cordon on the node)".to_string(),
        Reason::CardTypeMismatch if keys.mode.is_empty() => format!(
            "are of another kind of device, or of a type the pod excludes or does not name ({}, {})",
            keys.use_type, keys.nouse_type
        ),
        Reason::CardTypeMismatch => format!(
            "are of a model or mode the pod excludes or does not name ({}, {}, {}), or in MIG mode without a usable profile",
            keys.use_type, keys.nouse_type, keys.mode
        ),
        Reason::CardUuidMismatch => format!(
            "are excluded by UUID ({}, {})",
            keys.use_uuid, keys.nouse_uuid
        ),
        Reason::CardTimeSlicingExhausted => {
            "have every slice taken (as many pods as the device plugin's split count)".to_string()
        }
        Reason::ExclusiveDeviceAllocateConflict => format!(
            "already hold other pods, and this pod needs a {unit} to itself ({cores} 100, or an exclusive {unit} policy)"
        ),
        Reason::CardInsufficientMemory => format!("have too little free {unit} memory"),
        Reason::CardTemplateMismatch => format!(
            "hold slices of another size, and the device plugin splits a {unit} into one size at a time"
        ),
        Reason::CardNotFoundCustomFilterRule => format!(
            "are not the {unit}s an earlier container of the pod took, and every container of the pod must share them (the device plugin hands each the same {unit}s)"
        ),
        Reason::CardAppClassMismatch => {
            let key = kind.tenancy.map_or("", |t| t.class);
            format!(
                "hold pods of another app class ({key}: a {unit} in use takes pods with a class only beside pods with one, pods without only beside pods without, and offline never beside online)"
            )
        }
        Reason::CardQosPolicyMismatch => {
            let key = kind.tenancy.map_or("", |t| t.policy);
            format!(
                "are shared under another QoS policy than the pod's ({key}: the policy the {unit}'s pods set, else the one the device plugin registered)"
            )
        }
        Reason::CardInsufficientCore => {
            format!("have too few free cores ({})", cfg.resource_core_name)
        }
        Reason::CardComputeUnitsExhausted => {
            "have all their cores given out, so a pod asking for no cores cannot share them"
                .to_string()
        }
        Reason::CardMigTopologyInfeasible => {
            "are in MIG mode with no free instance that holds the request (no allowed profile is that large, or every placement of those that are overlaps an instance already there)".to_string()
        }
        Reason::NumaNotFit => format!(
            "could hold a slice, but not enough of them sit on one NUMA node ({})",
            keys.numa_bind
        ),
        Reason::AllocatedCardsInsufficientRequest => {
            "could hold a slice, fewer than the container asks for".to_string()
        }
        Reason::NumaZoneInsufficientCPU => "lack the free CPUs".to_string(),
        Reason::NumaZoneInsufficientMemory => "lack the free memory".to_string(),
        Reason::NumaZoneInsufficientGPU => format!("lack {unit}s that can hold the slices"),
        Reason::CardAllocationUnreadable => {
            "hold a pod whose allocation annotations cannot be read (an AllocationUnreadable event on that pod says why), so what is free there is unknown; they take no new pod until the annotations can be read or the pod is gone".to_string()
        }
    }
}

/// `n of m GPUs <words>; k of m GPUs <words>`.
fn counted(
    of: u32,
    unit: &str,
    counts: &crate::engine::reason::ReasonCounts,
    cfg: &DeviceConfig,
) -> String {
    counts
        .iter()
        .map(|(r, n)| format!("{n} of {of} {unit} {}", card_words(r, cfg)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the node cannot take the pod, in a sentence or two, in the words
/// of the pod's device kind (`cfg`, its config section).
pub fn in_words(reason: &NodeReason, cfg: &DeviceConfig) -> String {
    match reason {
        NodeReason::Engine(r) => rejection_words(r, cfg),
        NodeReason::Quota(q) => match q {
            QuotaRefusal::Exceeded(e) => format!(
                "the namespace's ResourceQuota {} has no room for it: {}; wait for pods the quota covers to finish, or raise the quota",
                e.quota,
                e.numbers()
            ),
            QuotaRefusal::NoMemoryLeft {
                kind,
                used_mib,
                limit_mib,
                quota,
            } => {
                let device = kind.kind().unit();
                format!(
                    "the namespace's ResourceQuota {quota} for {device} memory is used up ({used_mib} of {limit_mib} MiB), and the pod asks for a percentage of a {device}"
                )
            }
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

fn rejection_words(r: &Rejection, cfg: &DeviceConfig) -> String {
    let kind = cfg.kind.kind();
    let units = format!("{}s", kind.unit());
    match r {
        Rejection::OfKind { kind, rejection } => {
            rejection_words(rejection, &DeviceConfig::for_kind(*kind))
        }
        Rejection::NodeUnregistered => format!(
            "the node has no {units} registered by HAMi's device plugin ({}). If kube-scheduler offers it anyway, its {units} may come through DRA (a DeviceClass whose extendedResourceName is the pod's {} resource): gpugate places slices only on {units} HAMi's device plugin registers",
            match kind.capacity {
                Some(c) => format!("no capacity of {}", c.resources.join(" or ")),
                None => format!("no readable {} annotation", kind.register_key),
            },
            kind.unit()
        ),
        Rejection::NodeInsufficientDevice {
            container,
            requested,
            available,
        } => format!(
            "container {container} asks for {requested} {units} and the node has {available}"
        ),
        Rejection::ModeNotFit {
            container,
            request,
            profiles,
        } => format!(
            "container {container} asks for {}, and no profile the node's {units} split into \
             ({profiles}) gives it",
            profile_request_words(request)
        ),
        Rejection::Devices {
            container,
            gpus,
            counts,
        } => format!(
            "for container {container}, {}",
            counted(*gpus, &units, counts, cfg)
        ),
        Rejection::NumaZones {
            subject,
            zones,
            counts,
        } => format!(
            "the node's kubelet puts a Guaranteed pod's CPUs, memory and {units} on one NUMA zone, and for {subject}, {}",
            counted(*zones, "zones", counts, cfg)
        ),
    }
}

/// Each GPU container's request in words; for a chip split into
/// templates, the template the device plugin will make and how the
/// devices must sit together (`explain`, and `simulate`'s pods that fit
/// nowhere).
pub fn request_words(plan: &PodPlan, config: &Config) -> Vec<String> {
    let id = plan.request.device_kind;
    let kind = id.kind();
    let cfg = config.device_config(id);
    let soft = plan
        .selection
        .mode
        .as_deref()
        .is_some_and(|m| m.trim() == crate::devices::ascend::HAMI_CORE);
    plan.request
        .containers
        .iter()
        .filter_map(|c| {
            let g = c.gpu?;
            let mut words = format!("container {}: {}", c.name, kind_request_words(&g, kind));
            if kind.templates.is_some() {
                words.push_str(&template_words(&g, cfg, soft));
            } else {
                words.push_str(&grouping_words(&g, kind, kind.unit()));
            }
            Some(words)
        })
        .collect()
}

/// `, template vir05_1c_16g of Ascend910B3, …`: what a chip split into
/// templates makes of a request, and how its devices are chosen
/// (hami-vendors.md 2.4, 2.5).
fn template_words(g: &GpuRequest, cfg: &DeviceConfig, soft: bool) -> String {
    let chip = &cfg.vnpu.common_word;
    let mib = g.mem_on(0);
    let mut out = if soft {
        format!(", a soft split of {chip} (huawei.com/vnpu-mode: hami-core)")
    } else {
        match crate::engine::templates::template_of(cfg, mib) {
            Some(t) => format!(
                ", template {t} of {chip} (the smallest of {} that holds it)",
                crate::engine::templates::template_list(cfg)
            ),
            None => format!(
                ", whole {}s (no template: {mib} MiB each)",
                cfg.kind.kind().unit()
            ),
        }
    };
    out.push_str(&grouping_words(g, cfg.kind.kind(), chip));
    out
}

/// `; XPUs sit on boards of eight …`: how a kind's devices must sit
/// together, for a request of `g.count` of them (`chip` names them), and
/// how its nodes rank (`devices::NodePreference`).
fn grouping_words(g: &GpuRequest, kind: &crate::devices::DeviceKind, chip: &str) -> String {
    let mut out = String::new();
    match kind.grouping {
        crate::devices::Grouping::CardPairs => out.push_str(&format!(
            "; {chip} NPUs come by cards of two: {} whole card{} (NPUs 2k and 2k+1)",
            g.count / 2,
            if g.count / 2 == 1 { "" } else { "s" }
        )),
        crate::devices::Grouping::NetworkGroups if g.count > 1 => {
            out.push_str("; taken from the largest network group (NetworkID) of fitting NPUs first")
        }
        crate::devices::Grouping::Board8 => out.push_str(&format!(
            "; {chip}s sit on boards of eight cards in two wings (0-3, 4-7): {} must be {}",
            g.count,
            match g.count {
                1 | 2 | 4 => "in one wing, or linked across the wings",
                8 => "a whole board",
                _ => "1, 2, 4 or 8, so no board can take them",
            }
        )),
        _ => {}
    }
    match kind.node_preference {
        crate::devices::NodePreference::None => {}
        crate::devices::NodePreference::Wings => out.push_str(&format!(
            "; nodes rank first by the wings their {chip}s would leave partly used (the fewer the better), then by the node policy"
        )),
        crate::devices::NodePreference::SizeTables { losses, scores } => out.push_str(&format!(
            "; nodes rank first by the device plugin's tables for {} {chip}s ({losses} under binpack, the lower the better; {scores} under spread, the higher the better), then by the node policy",
            g.count
        )),
        crate::devices::NodePreference::NetworkShare if g.count > 1 => out.push_str(&format!(
            "; nodes rank first by the share of the {chip}s in one network group (NetworkID), then by the node policy"
        )),
        crate::devices::NodePreference::NetworkShare => {}
        crate::devices::NodePreference::Tenants { links } => out.push_str(&format!(
            "; nodes rank first by the pods on the {chip}s it would take (a latency-sensitive pod: the fewer the better) or, for whole {chip}s with {links}, by the links among them, then by the node policy"
        )),
    }
    out
}

/// What a container of a kind split into profiles asks, as written
/// (`engine::profiles`): a size, or memory and cores.
pub fn profile_request_words(g: &GpuRequest) -> String {
    let cores = (g.cores > 0).then(|| format!("{}% of the cores", g.cores));
    match g.memory {
        Memory::Mib(m) if m > 0 => {
            let memory = format!(
                "memory {m} (GB, or MiB when above twice the GB of the profile with the most slices)"
            );
            match cores {
                Some(c) => format!("{memory} and {c}"),
                None => memory,
            }
        }
        Memory::Mib(_) | Memory::Percent(_) => cores.unwrap_or_else(|| "a profile".to_string()),
        Memory::Slices(_) => memory_words(g),
    }
}

/// `8000 MiB`, or `30% of the memory`.
pub fn memory_words(g: &GpuRequest) -> String {
    match g.memory {
        Memory::Mib(m) => format!("{m} MiB"),
        Memory::Percent(p) => format!("{p}% of the memory"),
        Memory::Slices(1) => "a profile of 1 slice".to_string(),
        Memory::Slices(n) => format!("a profile of {n} slices"),
    }
}

/// What a container asks of `kind`, in words: [`gpu_words`], or for a
/// kind split into profiles one device with its profile's terms.
pub fn kind_request_words(g: &GpuRequest, kind: &crate::devices::DeviceKind) -> String {
    if kind.slice_profiles {
        format!("1 {} with {}", kind.unit(), profile_request_words(g))
    } else {
        gpu_words(g, kind.unit())
    }
}

/// `2 GPUs with 8000 MiB and 30 cores each`, counted in `unit` (`GPU`,
/// `DCU`).
pub fn gpu_words(g: &GpuRequest, unit: &str) -> String {
    let memory = memory_words(g);
    let gpus = if g.count == 1 {
        format!("1 {unit}")
    } else {
        format!("{} {unit}s", g.count)
    };
    let each = if g.count == 1 { "" } else { " each" };
    format!("{gpus} with {memory} and {} cores{each}", g.cores)
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
        let nvidia = DeviceConfig::default();
        assert_eq!(
            in_words(
                &NodeReason::NotBestNode {
                    policy: NodePolicy::Binpack,
                    top: None
                },
                &nvidia
            ),
            "the pod fits, but filterMode best offers kube-scheduler only the best node under the binpack policy"
        );
        assert_eq!(
            in_words(
                &NodeReason::NotBestNode {
                    policy: NodePolicy::Spread,
                    top: Some(10)
                },
                &nvidia
            ),
            "the pod fits, but filterMode top offers kube-scheduler only the 10 best node(s) under the spread policy"
        );
        assert_eq!(
            in_words(&NodeReason::NumaTopologiesListing, &nvidia),
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
            in_words(&mig, &nvidia),
            "for container main, 1 of 1 GPUs are in MIG mode with no free instance that holds the request (no allowed profile is that large, or every placement of those that are overlaps an instance already there)"
        );
    }

    /// A DCU pod's reasons name DCUs and the DCU kind's keys and resources.
    #[test]
    fn a_dcu_pods_reasons_are_in_dcu_words() {
        let dcu = DeviceConfig::for_kind(crate::devices::KindId::HYGON);
        let mut counts = crate::engine::reason::ReasonCounts::default();
        counts.add(Reason::CardTypeMismatch, 2);
        counts.add(Reason::CardInsufficientCore, 1);
        let r = NodeReason::Engine(Rejection::Devices {
            container: "main".into(),
            gpus: 4,
            counts,
        });
        let words = in_words(&r, &dcu);
        for needle in [
            "4 DCUs are of another kind of device, or of a type the pod excludes or does not name (hygon.com/use-dcutype, hygon.com/nouse-dcutype)",
            "have too few free cores (hygon.com/dcucores)",
        ] {
            assert!(words.contains(needle), "{words}");
        }
        assert!(!words.contains("nvidia.com"), "{words}");
        let r = NodeReason::Engine(Rejection::NodeInsufficientDevice {
            container: "main".into(),
            requested: 4,
            available: 2,
        });
        assert_eq!(
            in_words(&r, &dcu),
            "container main asks for 4 DCUs and the node has 2"
        );
    }
}
