//! Namespace GPU quotas: how much of `limits.nvidia.com/gpumem` and
//! `limits.nvidia.com/gpucores` (or another kind's memory and core
//! resources) a pod takes, and whether it still fits.
//!
//! Each kind of device is counted under its own resource names, as HAMi's
//! quota cache counts each resource name ([`KindAmounts`]): an Ascend NPU's
//! memory never counts against `limits.nvidia.com/gpumem`, and a pod asking
//! for two kinds must fit each kind's quotas ([`PodQuota`]).
//!
//! A ResourceQuota with `scopes` or a `scopeSelector` covers only the pods
//! its scopes match, as Kubernetes' quota controller counts them
//! ([`QuotaScope::covers`] over a pod's [`ScopeFacts`]): it counts what
//! those pods hold and refuses only those pods. Each quota that covers a
//! pod must have room for it, so the tightest binds. (HAMi master skips
//! scoped quotas instead, #3094.)
//!
//! A pod's amount is GPU count x per-GPU amount per container, combined by
//! Kubernetes' pod rule ([`super::lifecycle::pod_peak`]): init containers
//! at their peak (each beside the sidecars started before it), app
//! containers and sidecars added up. A request in percent of a GPU's memory
//! has no MiB value before a GPU is chosen and counts 0 MiB at admission, as
//! in HAMi; its allocation counts in full once it is placed.

use crate::devices::KindId;

use super::allocation::Allocation;
use super::lifecycle::{Amount, pod_peak};
use super::request::{Memory, PodRequest};

/// GPU memory (MiB) and compute (percent of a GPU) counted against quotas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaAmount {
    pub mem_mib: u64,
    pub cores: u64,
}

impl QuotaAmount {
    pub fn is_zero(&self) -> bool {
        self.mem_mib == 0 && self.cores == 0
    }

    pub fn saturating_add(self, other: QuotaAmount) -> QuotaAmount {
        QuotaAmount {
            mem_mib: self.mem_mib.saturating_add(other.mem_mib),
            cores: self.cores.saturating_add(other.cores),
        }
    }

    pub fn saturating_sub(self, other: QuotaAmount) -> QuotaAmount {
        QuotaAmount {
            mem_mib: self.mem_mib.saturating_sub(other.mem_mib),
            cores: self.cores.saturating_sub(other.cores),
        }
    }

    /// What a pod asks for of its request's kind, before placement.
    pub fn of_request(request: &PodRequest) -> QuotaAmount {
        pod_peak(request.containers.iter().map(|c| {
            let amount = c.gpu.map_or(QuotaAmount::default(), |gpu| {
                let count = u64::from(gpu.count);
                QuotaAmount {
                    mem_mib: match gpu.memory {
                        Memory::Mib(m) => m.saturating_mul(count),
                        Memory::Percent(_) | Memory::Slices(_) => 0,
                    },
                    cores: u64::from(gpu.cores).saturating_mul(count),
                }
            });
            (c.kind, amount)
        }))
    }
}

/// What a pod asks for or holds, kind by kind (in [`KindId`] order, kinds
/// of nothing left out): each kind counts against the quotas on its own
/// resource names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindAmounts(Vec<(KindId, QuotaAmount)>);

impl KindAmounts {
    /// What a pod asks for, before placement: its first kind and each
    /// other kind it asks for ([`PodRequest::also`]).
    pub fn of_request(request: &PodRequest) -> KindAmounts {
        let mut out = KindAmounts::default();
        for r in std::iter::once(request).chain(&request.also) {
            out.add(r.device_kind, QuotaAmount::of_request(r));
        }
        out
    }

    /// What a placed pod holds: per device, the pod rule over its
    /// containers ([`Allocation::usage_by_gpu`]), summed by kind.
    pub fn of_allocation(allocation: &Allocation) -> KindAmounts {
        let mut out = KindAmounts::default();
        for (uuid, u) in allocation.usage_by_gpu() {
            let kind = allocation
                .containers
                .iter()
                .flatten()
                .find(|d| d.uuid == uuid)
                .map_or(KindId::default(), |d| d.kind);
            let amount = QuotaAmount {
                mem_mib: u64::from(u.mem_mib),
                cores: u64::from(u.cores),
            };
            out.add(kind, amount);
        }
        out
    }

    /// The amount of `kind` (zero when none).
    pub fn of(&self, kind: KindId) -> QuotaAmount {
        self.0
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(QuotaAmount::default(), |(_, a)| *a)
    }

    /// Each kind with its amount, in [`KindId`] order.
    pub fn iter(&self) -> impl Iterator<Item = (KindId, QuotaAmount)> + '_ {
        self.0.iter().copied()
    }

    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|(_, a)| a.is_zero())
    }

    /// `amount` more of `kind`.
    pub fn add(&mut self, kind: KindId, amount: QuotaAmount) {
        if amount.is_zero() {
            return;
        }
        match self.0.binary_search_by_key(&kind, |(k, _)| *k) {
            Ok(i) => self.0[i].1 = self.0[i].1.saturating_add(amount),
            Err(i) => self.0.insert(i, (kind, amount)),
        }
    }

    /// Every kind of `other` added.
    pub fn saturating_add(mut self, other: &KindAmounts) -> KindAmounts {
        for (kind, amount) in other.iter() {
            self.add(kind, amount);
        }
        self
    }

    /// Every kind of `other` taken away (none below zero; kinds left at
    /// zero dropped).
    pub fn saturating_sub(mut self, other: &KindAmounts) -> KindAmounts {
        for (kind, amount) in other.iter() {
            if let Ok(i) = self.0.binary_search_by_key(&kind, |(k, _)| *k) {
                self.0[i].1 = self.0[i].1.saturating_sub(amount);
            }
        }
        self.0.retain(|(_, a)| !a.is_zero());
        self
    }
}

impl Amount for QuotaAmount {
    fn plus(self, other: Self) -> Self {
        self.saturating_add(other)
    }

    fn larger(self, other: Self) -> Self {
        QuotaAmount {
            mem_mib: self.mem_mib.max(other.mem_mib),
            cores: self.cores.max(other.cores),
        }
    }
}

/// GPU limits of one ResourceQuota (or the tightest of several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    pub mem_mib: Option<u64>,
    pub cores: Option<u64>,
}

impl QuotaLimits {
    pub fn is_empty(&self) -> bool {
        self.mem_mib.is_none() && self.cores.is_none()
    }

    /// The tighter of two sets of limits, key by key.
    pub fn tightest(self, other: QuotaLimits) -> QuotaLimits {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        QuotaLimits {
            mem_mib: min(self.mem_mib, other.mem_mib),
            cores: min(self.cores, other.cores),
        }
    }

    /// The memory limit as requests count it: scaled by `memoryFactor`.
    pub fn memory_limit_mib(&self, memory_factor: u64) -> Option<u64> {
        self.mem_mib.map(|l| l.saturating_mul(memory_factor.max(1)))
    }
}

/// What a ResourceQuota's scopes look at in a pod, as Kubernetes' quota
/// evaluator reads them (`pkg/quota/v1/evaluator/core/pods.go`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ScopeFacts {
    /// `spec.priorityClassName`, when not empty.
    pub priority_class: Option<String>,
    /// `spec.activeDeadlineSeconds` is set (and not negative).
    pub terminating: bool,
    /// QoS class BestEffort: no CPU or memory request or limit anywhere
    /// (a pod asking only for GPU resources is one).
    pub best_effort: bool,
    /// A pod (anti-)affinity term names other namespaces (`namespaces` or
    /// `namespaceSelector`).
    pub cross_namespace_affinity: bool,
}

/// A scope a ResourceQuota may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeName {
    Terminating,
    NotTerminating,
    BestEffort,
    NotBestEffort,
    PriorityClass,
    CrossNamespacePodAffinity,
    /// A scope of other objects (`VolumeAttributesClass`) or one unknown
    /// to this version: it matches no pod.
    NotPods,
}

impl ScopeName {
    pub fn parse(name: &str) -> ScopeName {
        match name {
            "Terminating" => ScopeName::Terminating,
            "NotTerminating" => ScopeName::NotTerminating,
            "BestEffort" => ScopeName::BestEffort,
            "NotBestEffort" => ScopeName::NotBestEffort,
            "PriorityClass" => ScopeName::PriorityClass,
            "CrossNamespacePodAffinity" => ScopeName::CrossNamespacePodAffinity,
            _ => ScopeName::NotPods,
        }
    }
}

/// A scope selector's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One requirement of a quota's scopes: an entry of `scopes` (operator
/// `Exists`) or of `scopeSelector.matchExpressions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRequirement {
    pub scope: ScopeName,
    /// `None`: an operator Kubernetes does not know, which matches nothing.
    pub op: Option<ScopeOp>,
    pub values: Vec<String>,
}

/// Which pods a ResourceQuota covers: those matching every requirement
/// (none: every pod of its namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuotaScope {
    pub requirements: Vec<ScopeRequirement>,
}

impl QuotaScope {
    /// Whether the quota counts (and limits) a pod with these facts. As
    /// Kubernetes evaluates them: the operator matters for `PriorityClass`
    /// only (the others are facts of the pod); a `PriorityClass` selector
    /// sees a pod without a class as having no such key.
    pub fn covers(&self, pod: &ScopeFacts) -> bool {
        self.requirements.iter().all(|r| match r.scope {
            ScopeName::Terminating => pod.terminating,
            ScopeName::NotTerminating => !pod.terminating,
            ScopeName::BestEffort => pod.best_effort,
            ScopeName::NotBestEffort => !pod.best_effort,
            ScopeName::CrossNamespacePodAffinity => pod.cross_namespace_affinity,
            ScopeName::NotPods => false,
            ScopeName::PriorityClass => {
                let class = pod.priority_class.as_deref();
                match r.op {
                    Some(ScopeOp::Exists) => class.is_some(),
                    Some(ScopeOp::DoesNotExist) => class.is_none(),
                    Some(ScopeOp::In) => class.is_some_and(|c| r.values.iter().any(|v| v == c)),
                    Some(ScopeOp::NotIn) => class.is_none_or(|c| !r.values.iter().any(|v| v == c)),
                    None => false,
                }
            }
        })
    }

    /// Whether the quota covers every pod of its namespace.
    pub fn is_unscoped(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// One ResourceQuota that covers a pod: its name, GPU limits, and what
/// the pods it covers hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoveringQuota {
    pub name: String,
    pub limits: QuotaLimits,
    pub used: QuotaAmount,
}

/// The quotas a pod is judged against in its namespace for one kind of
/// device (every one whose scopes cover it and that limits the kind's
/// memory or cores), and the kind's `memoryFactor` (which scales memory
/// limits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceQuota {
    pub kind: KindId,
    pub quotas: Vec<CoveringQuota>,
    pub memory_factor: u64,
}

impl NamespaceQuota {
    /// No quota limits the pod.
    pub fn is_empty(&self) -> bool {
        self.quotas.is_empty()
    }

    /// Whether `add` fits in every quota; the first one it does not fit
    /// (by name), with the numbers. The memory limit is in the units users
    /// request and is scaled by `memoryFactor`, as requests are.
    pub fn check(&self, add: QuotaAmount) -> Result<(), QuotaExceeded> {
        for q in &self.quotas {
            let exceeded = |resource, used: u64, requested: u64, limit| QuotaExceeded {
                kind: self.kind,
                resource,
                used,
                requested,
                limit,
                quota: q.name.clone(),
            };
            if let Some(limit) = q.limits.memory_limit_mib(self.memory_factor)
                && add.mem_mib > 0
                && q.used.mem_mib.saturating_add(add.mem_mib) > limit
            {
                return Err(exceeded(
                    QuotaResource::Memory,
                    q.used.mem_mib,
                    add.mem_mib,
                    limit,
                ));
            }
            if let Some(limit) = q.limits.cores
                && add.cores > 0
                && q.used.cores.saturating_add(add.cores) > limit
            {
                return Err(exceeded(
                    QuotaResource::Cores,
                    q.used.cores,
                    add.cores,
                    limit,
                ));
            }
        }
        Ok(())
    }

    /// The first quota whose memory (as requests count it) is used up,
    /// with what it has used and its limit in MiB.
    pub fn memory_used_up(&self) -> Option<(&str, u64, u64)> {
        self.quotas.iter().find_map(|q| {
            let limit = q.limits.memory_limit_mib(self.memory_factor)?;
            (q.used.mem_mib >= limit).then_some((q.name.as_str(), q.used.mem_mib, limit))
        })
    }
}

/// The quotas a pod is judged against, one [`NamespaceQuota`] for each
/// kind of device it asks for (none for a kind no quota limits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodQuota {
    pub kinds: Vec<NamespaceQuota>,
}

impl PodQuota {
    /// No quota limits the pod.
    pub fn is_empty(&self) -> bool {
        self.kinds.iter().all(NamespaceQuota::is_empty)
    }

    /// Whether each kind of `add` fits that kind's quotas; the first that
    /// does not, with the numbers.
    pub fn check(&self, add: &KindAmounts) -> Result<(), QuotaExceeded> {
        self.kinds.iter().try_for_each(|q| q.check(add.of(q.kind)))
    }

    /// The quotas of `kind` (none when no quota limits it).
    pub fn of(&self, kind: KindId) -> Option<&NamespaceQuota> {
        self.kinds.iter().find(|q| q.kind == kind)
    }
}

/// Which quota a pod would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaResource {
    Memory,
    Cores,
}

/// A pod that does not fit a ResourceQuota of its namespace, with the
/// numbers and the quota's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} (ResourceQuota {quota})", self.numbers())]
pub struct QuotaExceeded {
    /// The kind of device whose quota it is.
    pub kind: KindId,
    pub resource: QuotaResource,
    pub used: u64,
    pub requested: u64,
    pub limit: u64,
    /// The ResourceQuota's name.
    pub quota: String,
}

impl QuotaExceeded {
    /// What was asked against what is left, without the quota's name:
    /// `GPU memory 8000 MiB requested, 0 MiB of 4000 MiB already used`.
    pub fn numbers(&self) -> String {
        let unit = self.unit();
        format!(
            "{} {}{unit} requested, {}{unit} of {}{unit} already used",
            self.what(),
            self.requested,
            self.used,
            self.limit
        )
    }

    /// `GPU memory`, `NPU cores`: the kind's word for one device.
    fn what(&self) -> String {
        let device = self.kind.kind().unit();
        match self.resource {
            QuotaResource::Memory => format!("{device} memory"),
            QuotaResource::Cores => format!("{device} cores"),
        }
    }

    fn unit(&self) -> &'static str {
        match self.resource {
            QuotaResource::Memory => " MiB",
            QuotaResource::Cores => "%",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::lifecycle::ContainerKind;
    use crate::engine::request::{ContainerRequest, GpuRequest};
    use crate::engine::{DeviceGrant, Memory};

    fn container(init: bool, count: u32, memory: Memory, cores: u32) -> ContainerRequest {
        kind_container(ContainerKind::of(init, None), count, memory, cores)
    }

    fn kind_container(
        kind: ContainerKind,
        count: u32,
        memory: Memory,
        cores: u32,
    ) -> ContainerRequest {
        ContainerRequest {
            name: "c".into(),
            kind,
            gpu: Some(GpuRequest {
                count,
                memory,
                cores,
            }),
        }
    }

    /// MiB and cores a pod of these containers counts against quota.
    fn counted(containers: Vec<ContainerRequest>) -> (u64, u64) {
        let a = QuotaAmount::of_request(&PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers,
        });
        (a.mem_mib, a.cores)
    }

    #[test]
    fn init_containers_count_as_their_maximum_and_apps_as_their_sum() {
        // init: max(9000, 2000) MiB, max(10, 100) cores; app: 7000 MiB, 50 cores.
        let pod = vec![
            container(true, 1, Memory::Mib(9000), 10),
            container(true, 2, Memory::Mib(1000), 50),
            container(false, 2, Memory::Mib(3000), 20),
            container(false, 1, Memory::Mib(1000), 10),
        ];
        assert_eq!(counted(pod), (9000, 100));
    }

    #[test]
    fn sidecars_count_beside_the_app_containers() {
        use ContainerKind::{App, Init, Sidecar};
        let c = |kind, mib, cores| kind_container(kind, 1, Memory::Mib(mib), cores);
        // A 10,000 MiB sidecar and a 10,000 MiB app container: 20,000.
        assert_eq!(
            counted(vec![c(Sidecar, 10_000, 0), c(App, 10_000, 0)]).0,
            20_000
        );
        // An init container after a sidecar counts with it.
        let pod = vec![c(Sidecar, 4_000, 10), c(Init, 9_000, 50), c(App, 1_000, 10)];
        assert_eq!(counted(pod), (13_000, 60));
    }

    /// Scopes as Kubernetes' quota evaluator matches them.
    #[test]
    fn scopes_cover_the_pods_they_match() {
        let req = |scope, op, values: &[&str]| ScopeRequirement {
            scope,
            op,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let scope = |r: Vec<ScopeRequirement>| QuotaScope { requirements: r };
        let high = ScopeFacts {
            priority_class: Some("high".into()),
            ..Default::default()
        };
        let plain = ScopeFacts::default();
        let deadline = ScopeFacts {
            terminating: true,
            best_effort: true,
            ..Default::default()
        };
        let cross = ScopeFacts {
            cross_namespace_affinity: true,
            priority_class: Some("low".into()),
            ..Default::default()
        };
        use ScopeName::*;
        use ScopeOp::*;
        let cases: Vec<(QuotaScope, [bool; 4])> = vec![
            (scope(vec![]), [true, true, true, true]),
            (
                scope(vec![req(PriorityClass, Some(In), &["high"])]),
                [true, false, false, false],
            ),
            (
                scope(vec![req(PriorityClass, Some(NotIn), &["high"])]),
                [false, true, true, true],
            ),
            (
                scope(vec![req(PriorityClass, Some(Exists), &[])]),
                [true, false, false, true],
            ),
            (
                scope(vec![req(PriorityClass, Some(DoesNotExist), &[])]),
                [false, true, true, false],
            ),
            (
                scope(vec![req(Terminating, Some(Exists), &[])]),
                [false, false, true, false],
            ),
            // The operator of a scope other than PriorityClass is not read.
            (
                scope(vec![req(NotTerminating, Some(DoesNotExist), &[])]),
                [true, true, false, true],
            ),
            (
                scope(vec![req(BestEffort, Some(Exists), &[])]),
                [false, false, true, false],
            ),
            (
                scope(vec![req(NotBestEffort, Some(Exists), &[])]),
                [true, true, false, true],
            ),
            (
                scope(vec![req(CrossNamespacePodAffinity, Some(Exists), &[])]),
                [false, false, false, true],
            ),
            (
                scope(vec![req(NotPods, Some(Exists), &[])]),
                [false, false, false, false],
            ),
            (
                scope(vec![req(PriorityClass, None, &["high"])]),
                [false, false, false, false],
            ),
            (
                scope(vec![
                    req(PriorityClass, Some(In), &["high", "low"]),
                    req(NotTerminating, Some(Exists), &[]),
                ]),
                [true, false, false, true],
            ),
        ];
        for (i, (s, want)) in cases.iter().enumerate() {
            let got = [&high, &plain, &deadline, &cross].map(|f| s.covers(f));
            assert_eq!(&got, want, "case {i}: {s:?}");
        }
        assert_eq!(ScopeName::parse("VolumeAttributesClass"), NotPods);
        assert_eq!(ScopeName::parse("priorityclass"), NotPods);
    }

    /// Every covering quota must have room; the first that has not is
    /// named.
    #[test]
    fn the_tightest_covering_quota_refuses_by_name() {
        let q = |name: &str, mem: Option<u64>, used: u64| CoveringQuota {
            name: name.into(),
            limits: QuotaLimits {
                mem_mib: mem,
                cores: None,
            },
            used: QuotaAmount {
                mem_mib: used,
                cores: 0,
            },
        };
        let ns = NamespaceQuota {
            kind: KindId::NVIDIA,
            quotas: vec![
                q("big", Some(100_000), 90_000),
                q("high", Some(20_000), 5_000),
            ],
            memory_factor: 1,
        };
        let add = |mem_mib| QuotaAmount { mem_mib, cores: 10 };
        assert_eq!(ns.check(add(10_000)), Ok(()));
        let e = ns.check(add(12_000)).unwrap_err();
        assert_eq!(
            (e.quota.as_str(), e.limit, e.used),
            ("big", 100_000, 90_000)
        );
        let e = ns.check(add(16_000)).unwrap_err();
        assert_eq!(e.quota, "big");
        assert_eq!(
            e.to_string(),
            "GPU memory 16000 MiB requested, 90000 MiB of 100000 MiB already used (ResourceQuota big)"
        );
        let only_high = NamespaceQuota {
            kind: KindId::NVIDIA,
            quotas: vec![q("high", Some(20_000), 5_000)],
            memory_factor: 1,
        };
        assert_eq!(only_high.check(add(16_000)).unwrap_err().quota, "high");
        assert_eq!(only_high.memory_used_up(), None);
        let full = NamespaceQuota {
            kind: KindId::NVIDIA,
            quotas: vec![q("high", Some(2), 2_048)],
            memory_factor: 1024,
        };
        assert_eq!(full.memory_used_up(), Some(("high", 2_048, 2_048)));
    }

    #[test]
    fn percent_memory_counts_zero_before_placement() {
        let request = PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers: vec![container(false, 2, Memory::Percent(50), 30)],
        };
        assert_eq!(
            QuotaAmount::of_request(&request),
            QuotaAmount {
                mem_mib: 0,
                cores: 60
            }
        );
    }

    #[test]
    fn allocations_count_their_collapsed_usage_kind_by_kind() {
        let grant = |uuid: &str, kind, mem_mib, cores| DeviceGrant {
            uuid: uuid.into(),
            kind,
            mem_mib,
            cores,
            slots: 1,
            unreadable: false,
            device_type: None,
            mig: None,
        };
        let (nv, dcu) = (KindId::NVIDIA, KindId::HYGON);
        let a = Allocation {
            node: "n".into(),
            containers: vec![
                vec![grant("g0", nv, 8000, 50)],
                vec![
                    grant("g0", nv, 2000, 10),
                    grant("g1", nv, 2000, 10),
                    grant("d0", dcu, 3000, 40),
                ],
            ],
            kinds: vec![ContainerKind::Init],
            numa: None,
            tenancy: Default::default(),
        };
        // g0: max(init 8000/50, app 2000/10); g1: 2000/10. The DCU counts
        // apart: a quota on nvidia.com/gpumem never sees it.
        let held = KindAmounts::of_allocation(&a);
        assert_eq!(held.of(nv), amount(10000, 60));
        assert_eq!(held.of(dcu), amount(3000, 40));
        assert_eq!(held.of(KindId::CAMBRICON), QuotaAmount::default());
        assert_eq!(held.iter().map(|(k, _)| k).collect::<Vec<_>>(), [nv, dcu]);
        // Taking it away again leaves nothing, not zero entries.
        let none = held.clone().saturating_sub(&held);
        assert!(none.is_zero());
        assert_eq!(none, KindAmounts::default());
        assert_eq!(
            KindAmounts::default()
                .saturating_add(&held)
                .saturating_add(&held)
                .of(dcu),
            amount(6000, 80)
        );
    }

    /// A pod asking for two kinds fits only when each kind fits its own
    /// quotas; the refusal names the kind's device.
    #[test]
    fn each_kind_of_a_pod_is_checked_against_its_own_quotas() {
        let mut request = PodRequest {
            device_kind: KindId::NVIDIA,
            also: Vec::new(),
            containers: vec![container(false, 1, Memory::Mib(4000), 0)],
        };
        request.also.push(PodRequest {
            device_kind: KindId::HYGON,
            also: Vec::new(),
            containers: vec![container(false, 2, Memory::Mib(3000), 0)],
        });
        let ask = KindAmounts::of_request(&request);
        assert_eq!(ask.of(KindId::NVIDIA), amount(4000, 0));
        assert_eq!(ask.of(KindId::HYGON), amount(6000, 0));
        let limits = QuotaLimits {
            mem_mib: Some(5000),
            cores: None,
        };
        let mut dcu = one(limits, amount(0, 0), 1);
        dcu.kind = KindId::HYGON;
        let nv = one(limits, amount(0, 0), 1);
        // The GPU's 4,000 MiB fit NVIDIA's 5,000; the DCUs' 6,000 do not
        // fit Hygon's.
        assert_eq!(
            PodQuota {
                kinds: vec![nv.clone()]
            }
            .check(&ask),
            Ok(())
        );
        let both = PodQuota {
            kinds: vec![nv, dcu],
        };
        let e = both.check(&ask).unwrap_err();
        assert_eq!((e.kind, e.requested), (KindId::HYGON, 6000));
        assert_eq!(
            e.to_string(),
            "DCU memory 6000 MiB requested, 0 MiB of 5000 MiB already used (ResourceQuota q)"
        );
        assert_eq!(both.of(KindId::HYGON).map(|q| q.kind), Some(KindId::HYGON));
        assert!(both.of(KindId::CAMBRICON).is_none());
        assert!(!both.is_empty());
        assert!(PodQuota::default().is_empty());
    }

    /// One quota `q` of `limits` that covers the pod, its pods using `used`.
    fn one(limits: QuotaLimits, used: QuotaAmount, memory_factor: u64) -> NamespaceQuota {
        NamespaceQuota {
            kind: KindId::NVIDIA,
            quotas: vec![CoveringQuota {
                name: "q".into(),
                limits,
                used,
            }],
            memory_factor,
        }
    }

    fn amount(mem_mib: u64, cores: u64) -> QuotaAmount {
        QuotaAmount { mem_mib, cores }
    }

    #[test]
    fn check_names_the_exceeded_resource_with_numbers() {
        let limits = QuotaLimits {
            mem_mib: Some(10000),
            cores: Some(100),
        };
        let used = amount(8000, 50);
        assert_eq!(one(limits, used, 1).check(amount(2000, 50)), Ok(()));
        let e = one(limits, used, 1).check(amount(2001, 0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GPU memory 2001 MiB requested, 8000 MiB of 10000 MiB already used (ResourceQuota q)"
        );
        let e = one(limits, used, 1).check(amount(0, 51)).unwrap_err();
        assert_eq!(e.resource, QuotaResource::Cores);
        // memoryFactor scales the limit as it scales requests.
        assert_eq!(one(limits, used, 2).check(amount(12000, 0)), Ok(()));
    }

    #[test]
    fn a_zero_limit_blocks_every_request_but_not_an_empty_one() {
        let limits = QuotaLimits {
            mem_mib: Some(0),
            cores: Some(0),
        };
        let zero = QuotaAmount::default();
        assert!(one(limits, zero, 1).check(amount(1, 0)).is_err());
        assert_eq!(one(limits, zero, 1).check(zero), Ok(()));
    }

    #[test]
    fn the_tightest_limit_of_several_quotas_wins() {
        let a = QuotaLimits {
            mem_mib: Some(100),
            cores: None,
        };
        let b = QuotaLimits {
            mem_mib: Some(50),
            cores: Some(30),
        };
        assert_eq!(
            a.tightest(b),
            QuotaLimits {
                mem_mib: Some(50),
                cores: Some(30)
            }
        );
    }
}
