//! Gang scheduling: pods of one group are placed all or nothing. A group
//! lives in the pod's namespace and is named either
//!
//! - by the label `scheduling.x-k8s.io/pod-group` (scheduler-plugins'
//!   Coscheduling, as HAMi v2.10 reads it), or, without it, by
//!   `spec.schedulingGroup.podGroupName` (Kubernetes 1.36, alpha; HAMi
//!   v2.10 reads it too), with `minMember` and `scheduleTimeoutSeconds`
//!   from the PodGroup object of that name (`scheduling.x-k8s.io/v1alpha1`);
//!   or
//! - by the older lightweight-coscheduling labels
//!   `pod-group.scheduling.sigs.k8s.io/name` and `.../min-available`,
//!   which win when a pod carries both.
//!
//! The question the extender asks: can `min-available` members be running
//! at once, counting those already placed and placing the others one by one
//! (each on the best node under its policy) on what is left?

use std::collections::BTreeMap;

use super::allocation::Allocation;
use super::plan::PodPlan;
use super::state::ClusterState;

/// The group's name.
pub const GROUP_NAME: &str = "pod-group.scheduling.sigs.k8s.io/name";
/// How many members must be placed together.
pub const GROUP_MIN_AVAILABLE: &str = "pod-group.scheduling.sigs.k8s.io/min-available";

/// The group of scheduler-plugins' Coscheduling: a PodGroup's name.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// What gpugate reads of a PodGroup (`scheduling.x-k8s.io/v1alpha1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodGroupSpec {
    /// `spec.minMember`.
    pub min_member: u32,
    /// `spec.scheduleTimeoutSeconds`: bounds how long capacity is held for
    /// the group's members.
    pub schedule_timeout_seconds: Option<u64>,
}

/// What gpugate knows of PodGroups.
#[derive(Debug, Clone, Copy)]
pub enum PodGroups<'a> {
    /// The API server does not serve the kind (the CRD is not installed).
    NotServed,
    /// Served, and the first list has not completed: a PodGroup not known
    /// yet may exist.
    Listing,
    /// Listed (and watched): by namespace and name.
    Listed(&'a std::collections::HashMap<GangKey, PodGroupSpec>),
}

/// A group: namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GangKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for GangKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod's membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangLabel {
    pub key: GangKey,
    pub min_available: u32,
    /// The PodGroup's `scheduleTimeoutSeconds`, if it has one.
    pub hold_limit_seconds: Option<u64>,
}

impl GangLabel {
    /// `min_available` as a count of members.
    pub fn min_members(&self) -> usize {
        usize::try_from(self.min_available).unwrap_or(usize::MAX)
    }
}

/// What names a pod's group: its labels, and its
/// `spec.schedulingGroup.podGroupName`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Membership<'a> {
    pub labels: Option<&'a BTreeMap<String, String>>,
    /// `spec.schedulingGroup.podGroupName` (Kubernetes 1.36, alpha).
    pub pod_group_name: Option<&'a str>,
}

impl<'a> From<&'a BTreeMap<String, String>> for Membership<'a> {
    fn from(labels: &'a BTreeMap<String, String>) -> Self {
        Membership {
            labels: Some(labels),
            pod_group_name: None,
        }
    }
}

impl<'a> Membership<'a> {
    fn label(&self, key: &str) -> Option<&'a str> {
        self.labels?
            .get(key)
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }

    /// The PodGroup the pod names, and how it names it (for messages):
    /// the label, or else the field.
    fn pod_group(&self) -> Option<(&'a str, String)> {
        match self.label(POD_GROUP_LABEL) {
            Some(name) => Some((name, format!("label {POD_GROUP_LABEL}={name}"))),
            None => self
                .pod_group_name
                .filter(|n| !n.is_empty())
                .map(|name| (name, format!("spec.schedulingGroup.podGroupName={name}"))),
        }
    }
}

/// The group a pod names, whichever way it names it (membership; how many
/// members the group needs is [`gang_label`]'s).
pub fn group_key<'a>(namespace: &str, names: impl Into<Membership<'a>>) -> Option<GangKey> {
    let m = names.into();
    m.label(GROUP_NAME)
        .or_else(|| m.pod_group().map(|(name, _)| name))
        .map(|name| GangKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
}

/// Whether the pod names a PodGroup that cannot be enforced because the
/// PodGroup kind is not served: it is then placed on its own (and the
/// extender says so in a warning event). The naming, e.g.
/// `label scheduling.x-k8s.io/pod-group=train`, when it does.
pub fn pod_group_unserved<'a>(
    names: impl Into<Membership<'a>>,
    groups: PodGroups<'_>,
) -> Option<String> {
    let m = names.into();
    if !matches!(groups, PodGroups::NotServed) || m.label(GROUP_NAME).is_some() {
        return None;
    }
    m.pod_group().map(|(_, named)| named)
}

/// Reads a pod's group. No group label: `Ok(None)`. The old labels with a
/// missing, non-numeric or zero `min-available` are an error (the pod
/// cannot be placed as its author meant), and so is a PodGroup label whose
/// PodGroup does not exist or has no `minMember` (or is not listed yet). A
/// PodGroup label while PodGroups are not served is no group.
pub fn gang_label<'a>(
    namespace: &str,
    names: impl Into<Membership<'a>>,
    groups: PodGroups<'_>,
) -> Result<Option<GangLabel>, String> {
    let m = names.into();
    let Some(name) = m.label(GROUP_NAME) else {
        return pod_group_label(namespace, m, groups);
    };
    let min_available = match m.labels.and_then(|l| l.get(GROUP_MIN_AVAILABLE)) {
        None => {
            return Err(format!(
                "label {GROUP_NAME}={name} needs {GROUP_MIN_AVAILABLE} (how many members must run together)"
            ));
        }
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                format!("label {GROUP_MIN_AVAILABLE}={v:?} must be a whole number of at least 1")
            })?,
    };
    Ok(Some(GangLabel {
        key: GangKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
        min_available,
        hold_limit_seconds: None,
    }))
}

fn pod_group_label(
    namespace: &str,
    m: Membership<'_>,
    groups: PodGroups<'_>,
) -> Result<Option<GangLabel>, String> {
    let Some((name, named)) = m.pod_group() else {
        return Ok(None);
    };
    let key = GangKey {
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let groups = match groups {
        PodGroups::NotServed => return Ok(None),
        PodGroups::Listing => {
            return Err(format!(
                "{named}: PodGroups are still being listed; PodGroup {key} is read once they are"
            ));
        }
        PodGroups::Listed(groups) => groups,
    };
    let Some(spec) = groups.get(&key) else {
        let remove = if m.label(POD_GROUP_LABEL).is_some() {
            "the label"
        } else {
            "the field"
        };
        return Err(format!(
            "{named}: PodGroup {key} does not exist; create it (scheduling.x-k8s.io/v1alpha1, spec.minMember) or remove {remove}"
        ));
    };
    if spec.min_member == 0 {
        return Err(format!(
            "PodGroup {key} has no spec.minMember (at least 1): how many members must run together"
        ));
    }
    Ok(Some(GangLabel {
        key,
        min_available: spec.min_member,
        hold_limit_seconds: spec.schedule_timeout_seconds,
    }))
}

/// Why the group cannot be placed now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GangShortfall {
    #[error(
        "GangIncomplete (group {group} has {members} member(s), min-available is {min_available}; \
         waiting for more)"
    )]
    Incomplete {
        group: GangKey,
        members: usize,
        min_available: u32,
    },
    #[error(
        "GangNotFit (group {group}: {placed} member(s) placed and {fit} more fit at once, \
         min-available is {min_available})"
    )]
    NotFit {
        group: GangKey,
        placed: usize,
        fit: usize,
        min_available: u32,
    },
}

/// What a pod takes, to order a gang's members largest first: devices,
/// then MiB, then percent of memory, then cores, summed over containers.
fn size(plan: &PodPlan) -> (u64, u64, u64, u64) {
    plan.request.containers.iter().filter_map(|c| c.gpu).fold(
        (0, 0, 0, 0),
        |(n, mib, pct, cores), g| {
            let count = u64::from(g.count);
            let (m, p) = match g.memory {
                super::request::Memory::Mib(m) => (m, 0),
                super::request::Memory::Percent(p) => (0, u64::from(p)),
                // Slices weigh as their share: a slice a percent.
                super::request::Memory::Slices(n) => (0, u64::from(n)),
            };
            (
                n + count,
                mib + count * m,
                pct + count * p,
                cores + count * u64::from(g.cores),
            )
        },
    )
}

/// The order in which members that must all fit are placed: largest
/// first ([`size`]), ties in the order given.
pub fn placing_order<'p>(plans: impl Iterator<Item = &'p PodPlan>) -> Vec<usize> {
    let sizes: Vec<_> = plans.map(size).collect();
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|a, b| sizes[*b].cmp(&sizes[*a]));
    order
}

/// Places pending members one by one (largest first when all must fit),
/// each on the best node under its policy among its candidates
/// (`candidates[i]` for `pending[i]`; every node when it is `None` or
/// missing), until `min_available` members are placed counting the
/// `placed` ones. `state` is left as it was. Returns the new placements by
/// member key, or why the group cannot be placed.
pub fn place_gang(
    state: &mut ClusterState,
    label: &GangLabel,
    placed: usize,
    pending: &[(String, PodPlan)],
    candidates: &[Option<&[String]>],
) -> Result<Vec<(String, Allocation)>, GangShortfall> {
    let members = placed + pending.len();
    let min = label.min_members();
    if members < min {
        return Err(GangShortfall::Incomplete {
            group: label.key.clone(),
            members,
            min_available: label.min_available,
        });
    }
    // When every member must fit, the largest go first (what greedy
    // packing fits best, and the order gpugate's admission check for Kueue
    // plans in); otherwise in the order given, the pod being judged first.
    let order: Vec<usize> = if members <= min {
        placing_order(pending.iter().map(|(_, p)| p))
    } else {
        (0..pending.len()).collect()
    };
    let mut out = Vec::new();
    for i in order {
        let (key, plan) = &pending[i];
        if placed + out.len() >= min {
            break;
        }
        let best = state
            .evaluate(plan, candidates.get(i).copied().flatten())
            .best()
            .map(|b| b.node.to_string());
        let choice = best.and_then(|node| state.assign(plan, &node).ok());
        if let Some(a) = choice
            && state.apply(&format!("gang-trial/{key}"), a.clone()).is_ok()
        {
            out.push((key.clone(), a));
        }
    }
    for (key, _) in &out {
        state.remove(&format!("gang-trial/{key}"));
    }
    if placed + out.len() < min {
        return Err(GangShortfall::NotFit {
            group: label.key.clone(),
            placed,
            fit: out.len(),
            min_available: label.min_available,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::{Gpu, Node, Usage};
    use crate::engine::policy::NodePolicy;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Members that must all fit go largest first: devices, then MiB,
    /// then percent of memory, then cores; equals keep their order.
    #[test]
    fn the_largest_members_are_placed_first() {
        use crate::engine::lifecycle::ContainerKind;
        use crate::engine::request::{ContainerRequest, GpuRequest, Memory, PodRequest};
        let plan = |count: u32, memory: Memory, cores: u32| {
            let mut p = crate::engine::plan::whole_gpu_plan(NodePolicy::Binpack);
            p.request = PodRequest {
                containers: vec![ContainerRequest {
                    name: "c".into(),
                    kind: ContainerKind::App,
                    gpu: Some(GpuRequest {
                        count,
                        memory,
                        cores,
                    }),
                }],
                device_kind: crate::devices::KindId::NVIDIA,
                also: Vec::new(),
            };
            p
        };
        let plans = [
            plan(1, Memory::Mib(8000), 0),
            plan(1, Memory::Mib(12000), 0),
            plan(2, Memory::Mib(4000), 0),
            plan(1, Memory::Mib(8000), 30),
            plan(1, Memory::Mib(8000), 0),
            plan(1, Memory::Percent(50), 0),
        ];
        assert_eq!(placing_order(plans.iter()), [2, 1, 3, 0, 4, 5]);
    }

    #[test]
    fn labels_are_read_and_checked() {
        assert_eq!(
            gang_label("ns", &labels(&[("app", "x")]), PodGroups::NotServed),
            Ok(None)
        );
        let g = gang_label(
            "ns",
            &labels(&[(GROUP_NAME, "train"), (GROUP_MIN_AVAILABLE, "4")]),
            PodGroups::NotServed,
        )
        .unwrap()
        .unwrap();
        assert_eq!(g.key.to_string(), "ns/train");
        assert_eq!(g.min_available, 4);
        for bad in ["0", "-1", "four", ""] {
            let e = gang_label(
                "ns",
                &labels(&[(GROUP_NAME, "train"), (GROUP_MIN_AVAILABLE, bad)]),
                PodGroups::NotServed,
            )
            .unwrap_err();
            assert!(e.contains("at least 1"), "{bad}: {e}");
        }
        let e = gang_label(
            "ns",
            &labels(&[(GROUP_NAME, "train")]),
            PodGroups::NotServed,
        )
        .unwrap_err();
        assert!(e.contains("needs"), "{e}");
    }

    /// scheduler-plugins' Coscheduling: the label names a PodGroup, whose
    /// minMember and scheduleTimeoutSeconds count; the old labels win when
    /// a pod carries both.
    /// `spec.schedulingGroup.podGroupName` (Kubernetes 1.36) names a
    /// PodGroup as the label does, as HAMi v2.10 reads it; the label wins
    /// when a pod carries both, and messages say which one named it.
    #[test]
    fn the_scheduling_group_field_names_a_pod_group() {
        let groups: std::collections::HashMap<GangKey, PodGroupSpec> = [(
            GangKey {
                namespace: "ns".into(),
                name: "train".into(),
            },
            PodGroupSpec {
                min_member: 2,
                schedule_timeout_seconds: None,
            },
        )]
        .into_iter()
        .collect();
        let none = labels(&[]);
        let field = |name: &'static str| Membership {
            labels: Some(&none),
            pod_group_name: Some(name),
        };
        let g = gang_label("ns", field("train"), PodGroups::Listed(&groups))
            .unwrap()
            .unwrap();
        assert_eq!((g.key.name.as_str(), g.min_available), ("train", 2));
        assert_eq!(group_key("ns", field("train")).unwrap().name, "train");
        let e = gang_label("ns", field("nope"), PodGroups::Listed(&groups)).unwrap_err();
        assert!(
            e.starts_with(
                "spec.schedulingGroup.podGroupName=nope: PodGroup ns/nope does not exist"
            ) && e.ends_with("remove the field"),
            "{e}"
        );
        assert_eq!(
            pod_group_unserved(field("train"), PodGroups::NotServed).as_deref(),
            Some("spec.schedulingGroup.podGroupName=train")
        );
        assert_eq!(
            gang_label("ns", field(""), PodGroups::Listed(&groups)),
            Ok(None)
        );
        let label = labels(&[(POD_GROUP_LABEL, "other")]);
        let both = Membership {
            labels: Some(&label),
            pod_group_name: Some("train"),
        };
        assert_eq!(group_key("ns", both).unwrap().name, "other");
    }

    #[test]
    fn pod_group_label_reads_the_pod_group() {
        let key = |n: &str| GangKey {
            namespace: "ns".into(),
            name: n.into(),
        };
        let groups: std::collections::HashMap<GangKey, PodGroupSpec> = [
            (
                key("train"),
                PodGroupSpec {
                    min_member: 3,
                    schedule_timeout_seconds: Some(20),
                },
            ),
            (
                key("empty"),
                PodGroupSpec {
                    min_member: 0,
                    schedule_timeout_seconds: None,
                },
            ),
        ]
        .into_iter()
        .collect();
        let pg = labels(&[(POD_GROUP_LABEL, "train")]);
        let g = gang_label("ns", &pg, PodGroups::Listed(&groups))
            .unwrap()
            .unwrap();
        assert_eq!(
            (g.key.to_string(), g.min_available, g.hold_limit_seconds),
            ("ns/train".to_string(), 3, Some(20))
        );
        assert_eq!(group_key("ns", &pg), Some(key("train")));
        // Without the PodGroup kind served: no gang, and the caller warns.
        assert_eq!(gang_label("ns", &pg, PodGroups::NotServed), Ok(None));
        assert_eq!(
            pod_group_unserved(&pg, PodGroups::NotServed).as_deref(),
            Some("label scheduling.x-k8s.io/pod-group=train")
        );
        // Served but not listed yet: the member waits, with that reason.
        let e = gang_label("ns", &pg, PodGroups::Listing).unwrap_err();
        assert!(e.contains("still being listed"), "{e}");
        assert_eq!(pod_group_unserved(&pg, PodGroups::Listing), None);
        assert_eq!(pod_group_unserved(&pg, PodGroups::Listed(&groups)), None);
        // A PodGroup that does not exist, or has no minMember.
        let e = gang_label(
            "ns",
            &labels(&[(POD_GROUP_LABEL, "nope")]),
            PodGroups::Listed(&groups),
        )
        .unwrap_err();
        assert!(e.contains("PodGroup ns/nope does not exist"), "{e}");
        let e = gang_label(
            "ns",
            &labels(&[(POD_GROUP_LABEL, "empty")]),
            PodGroups::Listed(&groups),
        )
        .unwrap_err();
        assert!(e.contains("minMember"), "{e}");
        // Both styles: the old labels win.
        let both = labels(&[
            (POD_GROUP_LABEL, "train"),
            (GROUP_NAME, "old"),
            (GROUP_MIN_AVAILABLE, "2"),
        ]);
        let g = gang_label("ns", &both, PodGroups::Listed(&groups))
            .unwrap()
            .unwrap();
        assert_eq!((g.key.name.as_str(), g.min_available), ("old", 2));
        assert_eq!(pod_group_unserved(&both, PodGroups::NotServed), None);
    }

    fn state(nodes: usize, gpus: u32) -> ClusterState {
        let mut s = ClusterState::new();
        for n in 0..nodes {
            let name = format!("n{n}");
            s.upsert_node(Node::new(
                name.clone(),
                (0..gpus)
                    .map(|i| {
                        Gpu::new(
                            format!("GPU-{name}-{i}"),
                            i,
                            "NVIDIA A100",
                            Usage {
                                slices: 0,
                                unreserved: 0,
                                unreadable: 0,
                                slots: 10,
                                mem_mib: 40960,
                                cores: 100,
                            },
                        )
                    })
                    .collect(),
            ));
        }
        s
    }

    fn pending(n: usize) -> Vec<(String, PodPlan)> {
        (0..n)
            .map(|i| {
                (
                    format!("m{i}"),
                    crate::engine::plan::whole_gpu_plan(NodePolicy::Binpack),
                )
            })
            .collect()
    }

    fn label(min: u32) -> GangLabel {
        GangLabel {
            key: GangKey {
                namespace: "ns".into(),
                name: "g".into(),
            },
            min_available: min,
            hold_limit_seconds: None,
        }
    }

    #[test]
    fn a_gang_that_fits_only_as_a_whole_is_placed_whole() {
        let mut s = state(2, 2);
        let placed = place_gang(&mut s, &label(4), 0, &pending(4), &[]).unwrap();
        assert_eq!(placed.len(), 4);
        let mut gpus: Vec<&str> = placed
            .iter()
            .flat_map(|(_, a)| a.containers.iter().flatten().map(|d| d.uuid.as_str()))
            .collect();
        gpus.sort_unstable();
        gpus.dedup();
        assert_eq!(gpus.len(), 4, "each member on its own GPU");
        // The trial placements are not left in the state.
        assert_eq!(s.allocations().count(), 0);
    }

    #[test]
    fn one_gpu_short_places_nobody() {
        let mut s = state(1, 3);
        let e = place_gang(&mut s, &label(4), 0, &pending(4), &[]).unwrap_err();
        assert_eq!(
            e,
            GangShortfall::NotFit {
                group: label(4).key,
                placed: 0,
                fit: 3,
                min_available: 4
            }
        );
        assert!(e.to_string().starts_with("GangNotFit"), "{e}");
        assert_eq!(s.allocations().count(), 0);
    }

    #[test]
    fn placed_members_count_and_only_the_rest_must_fit() {
        let mut s = state(1, 2);
        let placed = place_gang(&mut s, &label(4), 2, &pending(3), &[]).unwrap();
        assert_eq!(placed.len(), 2);
    }

    #[test]
    fn too_few_members_is_incomplete() {
        let mut s = state(4, 4);
        let e = place_gang(&mut s, &label(4), 1, &pending(2), &[]).unwrap_err();
        assert!(e.to_string().starts_with("GangIncomplete"), "{e}");
        assert!(e.to_string().contains("3 member(s)"), "{e}");
    }

    #[test]
    fn the_first_member_is_placed_among_its_candidates() {
        let mut s = state(3, 1);
        let names = ["n2".to_string()];
        let placed = place_gang(&mut s, &label(2), 0, &pending(2), &[Some(&names[..])]).unwrap();
        assert_eq!(placed[0].1.node, "n2");
        assert_ne!(placed[1].1.node, "n2");
        let none = ["n9".to_string()];
        let e = place_gang(&mut s, &label(3), 0, &pending(3), &[Some(&none[..])]).unwrap_err();
        assert!(matches!(e, GangShortfall::NotFit { fit: 2, .. }), "{e}");
    }
}
