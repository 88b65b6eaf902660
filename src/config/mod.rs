//! gpugate's configuration file: one typed YAML document with defaults.
//!
//! Every key is optional; `{}` (or no file) gives HAMi's defaults for
//! NVIDIA. A file with no content at all is refused: a file caught
//! truncated must not silently replace the config in force. Unknown keys are refused so that a typo does not silently
//! fall back to a default. The `nvidia` section uses the key names of HAMi's
//! device config so that it can be copied over when migrating.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub mod api;
pub mod kueue;
pub mod namespace_policy;
pub mod server;

use crate::engine::policy::{GpuPolicy, NodePolicy};
pub use crate::engine::resources::DeviceConfig;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    pub scheduler: SchedulerConfig,
    pub nvidia: DeviceConfig,
    /// Hygon DCUs: HAMi's `hygon` device config section.
    pub hygon: KindSection<{ crate::devices::KindId::HYGON.index() }>,
    /// Hygon HCUs: HAMi master's `hygon` section (its HCU names).
    pub hcu: KindSection<{ crate::devices::KindId::HCU.index() }>,
    /// Ascend NPUs: HAMi's `vnpus` section, one entry per chip.
    pub vnpus: Vnpus,
    /// Kunlunxin vXPUs, then whole XPUs: HAMi's `kunlun` section.
    pub kunlun: SharedSection<
        { crate::devices::KindId::KUNLUN_VXPU.index() },
        { crate::devices::KindId::KUNLUN_XPU.index() },
    >,
    /// Cambricon MLUs: HAMi's `cambricon` section.
    pub cambricon: KindSection<{ crate::devices::KindId::CAMBRICON.index() }>,
    /// AWS Neuron devices: HAMi's `awsneuron` section.
    pub awsneuron: KindSection<{ crate::devices::KindId::AWS_NEURON.index() }>,
    /// Biren GPUs: HAMi's `biren` section.
    pub biren: KindSection<{ crate::devices::KindId::BIREN.index() }>,
    /// Whole Metax GPUs, then sGPUs: HAMi's `metax` section.
    pub metax: SharedSection<
        { crate::devices::KindId::METAX_GPU.index() },
        { crate::devices::KindId::METAX_SGPU.index() },
    >,
    /// Whole Enflame GCUs, then DRS slices: HAMi's `enflame` section.
    pub enflame: SharedSection<
        { crate::devices::KindId::ENFLAME_GCU.index() },
        { crate::devices::KindId::ENFLAME_DRS.index() },
    >,
    /// Vastai devices: HAMi's `vastai` section.
    pub vastai: KindSection<{ crate::devices::KindId::VASTAI.index() }>,
    /// Iluvatar GPUs: HAMi's `iluvatars` section, one entry per chip.
    pub iluvatars: Iluvatars,
    /// AMD GPUs: HAMi's `amd` section.
    pub amd: KindSection<{ crate::devices::KindId::AMD.index() }>,
    /// Moore Threads GPUs: HAMi's `mthreads` section.
    pub mthreads: KindSection<{ crate::devices::KindId::MTHREADS.index() }>,
    /// Per-namespace defaults and limits (docs/configuration.md).
    pub namespace_policies: Vec<namespace_policy::NamespacePolicy>,
    /// gpugate's own webhook configurations, whose `caBundle` it keeps
    /// current with `serve --self-signed-secret`.
    pub webhooks: WebhookConfigNames,
    /// Rate limit and timeout of gpugate's API calls (bind and node lock;
    /// events go through their own bounded queue), and how often watches
    /// re-list. Read at start; a reload does not change them.
    pub api: api::ApiLimits,
    /// What a client can make the server hold, and for how long
    /// (connections, deadlines, body budget, shutdown). Read at start.
    pub server: server::ServerConfig,
    /// Kueue's admission check: which AdmissionChecks gpugate answers, and
    /// how long it holds an admitted workload's places.
    pub kueue: kueue::KueueConfig,
}

/// A device kind's config section, read over the kind's own defaults
/// (`devices::ConfigDefaults`): a key the file leaves out keeps the kind's
/// value, not NVIDIA's. `KIND` is the kind's `KindId::index`.
#[derive(Debug, Clone, PartialEq)]
pub struct KindSection<const KIND: u8>(pub DeviceConfig);

impl<const KIND: u8> KindSection<KIND> {
    fn kind() -> crate::devices::KindId {
        // KIND is always one of KindId's constants (see `Config`).
        crate::devices::KindId::at(KIND).unwrap_or_default()
    }
}

impl<const KIND: u8> Default for KindSection<KIND> {
    fn default() -> Self {
        KindSection(DeviceConfig::for_kind(Self::kind()))
    }
}

impl<const KIND: u8> std::ops::Deref for KindSection<KIND> {
    type Target = DeviceConfig;
    fn deref(&self) -> &DeviceConfig {
        &self.0
    }
}

impl<const KIND: u8> std::ops::DerefMut for KindSection<KIND> {
    fn deref_mut(&mut self) -> &mut DeviceConfig {
        &mut self.0
    }
}

impl<'de, const KIND: u8> Deserialize<'de> for KindSection<KIND> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let given = Option::<serde_yaml_ng::Mapping>::deserialize(d)?.unwrap_or_default();
        read_over_defaults(Self::kind(), given)
            .map(KindSection)
            .map_err(D::Error::custom)
    }
}

/// A kind's section as a file gives it, read over the kind's defaults.
fn read_over_defaults(
    kind: crate::devices::KindId,
    given: serde_yaml_ng::Mapping,
) -> Result<DeviceConfig, String> {
    use serde_yaml_ng::{Mapping, Value};
    let mut merged = match serde_yaml_ng::to_value(DeviceConfig::for_kind(kind)) {
        Ok(Value::Mapping(m)) => m,
        Ok(_) | Err(_) => Mapping::new(),
    };
    // HAMi's key names, where they are not gpugate's (`section_keys`).
    let keys = kind.kind().section_keys;
    let renamed = given.into_iter().filter_map(|(key, value)| {
        match keys.iter().find(|(hami, _)| key.as_str() == Some(*hami)) {
            None => Some((key, value)),
            Some((_, ours)) => ours.map(|ours| (Value::from(ours), value)),
        }
    });
    for (key, value) in renamed.collect::<Vec<_>>() {
        merged.insert(key, value);
    }
    let mut section = DeviceConfig::deserialize(Value::Mapping(merged))
        .map_err(|e| format!("{}: {e}", kind.kind().name))?;
    section.kind = kind;
    Ok(section)
}

/// A config section of HAMi's that names two backends (`kunlun`: vXPUs
/// and whole XPUs), read once for each kind, each under its own key names
/// (`DeviceKind::section_keys`). `A` and `B` are the kinds' `KindId`
/// indexes; the section dereferences to `A`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedSection<const A: u8, const B: u8>(pub DeviceConfig, pub DeviceConfig);

impl<const A: u8, const B: u8> SharedSection<A, B> {
    /// The second kind's section.
    pub fn second(&self) -> &DeviceConfig {
        &self.1
    }
}

impl<const A: u8, const B: u8> Default for SharedSection<A, B> {
    fn default() -> Self {
        SharedSection(KindSection::<A>::default().0, KindSection::<B>::default().0)
    }
}

impl<const A: u8, const B: u8> std::ops::Deref for SharedSection<A, B> {
    type Target = DeviceConfig;
    fn deref(&self) -> &DeviceConfig {
        &self.0
    }
}

impl<'de, const A: u8, const B: u8> Deserialize<'de> for SharedSection<A, B> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let given = Option::<serde_yaml_ng::Mapping>::deserialize(d)?.unwrap_or_default();
        let read = |kind| read_over_defaults(kind, given.clone()).map_err(D::Error::custom);
        Ok(SharedSection(
            read(KindSection::<A>::kind())?,
            read(KindSection::<B>::kind())?,
        ))
    }
}

/// Ascend NPUs: HAMi's `vnpus` section. Each entry of `configs` is read
/// over the defaults of the chip its `commonWord` names (HAMi's chart
/// values, `devices::ascend`); a chip the file leaves out keeps its
/// defaults (gpugate places a kind as soon as a node registers it).
#[derive(Debug, Clone, PartialEq)]
pub struct Vnpus {
    /// Nodes whose device plugin does not say (`hami-vnpu-core`) split
    /// softly (`hami-core`) when true, into templates when false.
    pub hami_vnpu_core: bool,
    /// One section per chip, in the order of `devices::ascend::CHIPS`.
    pub chips: Vec<DeviceConfig>,
}

impl Default for Vnpus {
    fn default() -> Self {
        Vnpus {
            hami_vnpu_core: false,
            chips: ascend_kinds().map(DeviceConfig::for_kind).collect(),
        }
    }
}

fn ascend_kinds() -> impl Iterator<Item = crate::devices::KindId> {
    let first = crate::devices::KindId::ASCEND_FIRST.index();
    (0..crate::devices::ascend::CHIPS.len())
        .filter_map(move |i| crate::devices::KindId::at(first + i as u8))
}

impl<'de> Deserialize<'de> for Vnpus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase", deny_unknown_fields, default)]
        struct Given {
            hami_vnpu_core: bool,
            configs: Vec<serde_yaml_ng::Mapping>,
        }
        let given = Option::<Given>::deserialize(d)?.unwrap_or_default();
        let mut out = Vnpus {
            hami_vnpu_core: given.hami_vnpu_core,
            ..Vnpus::default()
        };
        read_chip_entries("vnpus.configs", given.configs, &mut out.chips)
            .map_err(D::Error::custom)?;
        Ok(out)
    }
}

/// Entries of a section with one entry per chip (`vnpus.configs`,
/// `iluvatars`), each read over the defaults of the chip its `commonWord`
/// names, into `chips` (the sections of those chips' kinds, in order). A
/// chip gpugate has no kind for, or one given twice, is an error.
fn read_chip_entries(
    section: &str,
    entries: Vec<serde_yaml_ng::Mapping>,
    chips: &mut [DeviceConfig],
) -> Result<(), String> {
    let words: Vec<&'static str> = chips.iter().map(|c| c.kind.kind().vendor).collect();
    let mut seen = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let word = entry
            .get("commonWord")
            .and_then(serde_yaml_ng::Value::as_str)
            .ok_or_else(|| format!("{section}[{i}] has no commonWord"))?
            .to_string();
        let Some(at) = words.iter().position(|w| *w == word) else {
            return Err(format!(
                "{section}[{i}]: commonWord {word:?} is not a chip gpugate places: it places {}",
                words.join(", ")
            ));
        };
        if seen.contains(&at) {
            return Err(format!("{section}[{i}]: commonWord {word:?} comes twice"));
        }
        seen.push(at);
        chips[at] = read_over_defaults(chips[at].kind, entry)
            .map_err(|e| format!("{section}[{i}] ({e})"))?;
    }
    Ok(())
}

/// Iluvatar GPUs: HAMi's `iluvatars` section, one entry per chip. Each
/// entry is read over the defaults of the chip its `commonWord` names
/// (`devices::iluvatar`); a chip the file leaves out keeps its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Iluvatars(pub Vec<DeviceConfig>);

impl Default for Iluvatars {
    fn default() -> Self {
        let first = crate::devices::KindId::ILUVATAR_FIRST.index();
        Iluvatars(
            (0..crate::devices::iluvatar::CHIPS.len())
                .filter_map(|i| crate::devices::KindId::at(first + i as u8))
                .map(DeviceConfig::for_kind)
                .collect(),
        )
    }
}

impl<'de> Deserialize<'de> for Iluvatars {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let given = Option::<Vec<serde_yaml_ng::Mapping>>::deserialize(d)?.unwrap_or_default();
        let mut out = Iluvatars::default();
        read_chip_entries("iluvatars", given, &mut out.0).map_err(D::Error::custom)?;
        Ok(out)
    }
}

/// Names of the MutatingWebhookConfiguration and
/// ValidatingWebhookConfiguration that call gpugate.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WebhookConfigNames {
    pub mutating: String,
    pub validating: String,
}

impl Default for WebhookConfigNames {
    fn default() -> Self {
        Self {
            mutating: "gpugate".to_string(),
            validating: "gpugate".to_string(),
        }
    }
}

/// Scheduling defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Written into `spec.schedulerName` of vGPU pods (HAMi: `--scheduler-name`).
    pub name: String,
    /// Default node policy when a pod sets no `hami.io/node-scheduler-policy`.
    pub node_scheduler_policy: NodePolicy,
    /// Default GPU policy when a pod sets no `hami.io/gpu-scheduler-policy`.
    pub gpu_scheduler_policy: GpuPolicy,
    /// Take over vGPU pods whose schedulerName is `default-scheduler`
    /// (HAMi: `--force-overwrite-default-scheduler`).
    pub force_overwrite_default_scheduler: bool,
    /// What `/filter` answers: the `filterTopNodes` best under the node
    /// policy (`top`, the default: kube-scheduler's own scoring chooses
    /// among them, with `/prioritize`), every feasible node (`all`, so
    /// that kube-scheduler's own scoring and `/prioritize` choose among
    /// all; it costs kube-scheduler and gpugate per node, docs/benchmarks.md)
    /// or only the best one (`best`, as HAMi does).
    pub filter_mode: FilterMode,
    /// How many nodes `filterMode: top` offers (1 to [`MAX_FILTER_TOP_NODES`]).
    pub filter_top_nodes: usize,
    /// HAMi's node lock, taken by `/bind` against an API server.
    pub node_lock: NodeLockConfig,
    /// Everything one `/bind` does against the API server (waiting for its
    /// turn, for HAMi's node lock and for the API rate limit, and every
    /// call) ends within this; keep it below the extender's `httpTimeout`
    /// in kube-scheduler's configuration (deploy/ sets 60 s), so that
    /// kube-scheduler hears every bind's own answer.
    pub bind_timeout_seconds: f64,
    /// How long the GPUs of the node `/prioritize` ranked first stay held
    /// for the pod when no bind comes (kube-scheduler chose, then gave up
    /// before binding); a bind replaces them at once. 0 turns it off.
    pub assume_seconds: f64,
    /// A `BindingSucceeded` event on each pod bound (the node and GPUs).
    /// Off by default: kube-scheduler's own `Scheduled` event says where
    /// the pod went, the GPUs are in its annotations, and at scale the
    /// event is one more API write and etcd object per pod. Failures are
    /// always reported (`BindingFailed`, `FilteringFailed`).
    pub binding_succeeded_events: bool,
    /// Gang scheduling (pods labelled `pod-group.scheduling.sigs.k8s.io/name`).
    pub gang: GangConfig,
    /// NUMA alignment on nodes with a NodeResourceTopology object.
    pub numa: NumaConfig,
    /// gpugate's own preemption, for pods short only of GPU.
    pub preemption: PreemptionConfig,
    /// Moving pods of opted-in namespaces to make room for a pod that fits
    /// nowhere only because free GPU is scattered.
    pub defragmentation: DefragmentationConfig,
    /// The Lease (`namespace/name`) that gpugate's kube-scheduler holds
    /// while it leads (its `leaderElection.resourceNamespace` and
    /// `resourceName`): `hami_scheduler_is_leader` is 1 on the replica whose
    /// kube-scheduler holds it. Empty: no leader election, every replica
    /// reports 1.
    pub leader_lease: String,
    /// Device kinds gpugate leaves to another scheduler, by section name
    /// (`nvidia`, `hygon`, `hcu`, `kunlun`, `kunlun-xpu`, `metax`,
    /// `enflame`, `vastai`…, an Ascend chip's common word such as
    /// `Ascend910B3`; each `DeviceKind::name`): the mutating webhook leaves their pods
    /// alone, the validating webhook admits them, and `/filter` refuses
    /// them with the reason. Empty: gpugate places every kind a node
    /// registers.
    pub disabled_device_kinds: Vec<String>,
}

/// Defragmentation (docs/policies.md, "Defragmentation"): for a pod that
/// fits nowhere, the fewest pods of namespaces whose policy says
/// `movable: true` whose eviction lets it fit while each of them fits
/// elsewhere; they are evicted, and the freed GPUs and the destinations
/// held. Nothing moves unless a namespace policy opts in.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DefragmentationConfig {
    /// The switch: off, nothing is ever moved (explain still shows plans).
    pub enabled: bool,
    /// Plans of more moves are not made.
    pub max_moves: usize,
    /// Pods evicted per minute at most, over all plans; a plan that does
    /// not fit in what is left waits for the pod's next attempt.
    pub moves_per_minute: u32,
    /// A pod created (started, or moved: a replacement is a new pod) less
    /// than this ago is not moved: no ping-pong.
    pub min_seconds_between_moves: u64,
    /// How long the freed GPUs stay held for the pending pod and the
    /// destinations for the replacements (from the evictions).
    pub hold_seconds: u64,
    /// The search's bound, in node fits tried (evaluating every node for
    /// one pod counts each node): the same cluster gives the same plan.
    pub search_budget: u64,
    /// The search's bound in time, whichever comes first (a plan found by
    /// then is taken; none, and the pod is tried again later).
    pub search_millis: u64,
}

impl Default for DefragmentationConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_moves: 4,
            moves_per_minute: 10,
            min_seconds_between_moves: 600,
            hold_seconds: 180,
            search_budget: 2_000_000,
            search_millis: 500,
        }
    }
}

/// gpugate's own preemption (docs/operations.md, "Preemption"):
/// kube-scheduler does not preempt for a pod whose only shortage is GPU,
/// so gpugate evicts the fewest lower-priority GPU holders itself.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PreemptionConfig {
    /// Off: such pods stay pending with their reasons, as before.
    pub enabled: bool,
    /// How long after a `/filter` that left the pod no node gpugate waits
    /// for kube-scheduler's own preemption (`/preempt`, or a nominated
    /// node) before it preempts itself.
    pub grace_seconds: f64,
    /// How long the GPUs freed for a pod stay held for it (from the
    /// eviction): its victims' termination and its next scheduling cycle
    /// must fit in this.
    pub hold_seconds: u64,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            grace_seconds: 5.0,
            hold_seconds: 120,
        }
    }
}

/// How feasible nodes are ranked by their NUMA zones, for Guaranteed pods
/// in a cluster with NodeResourceTopology objects (alignment itself, on
/// nodes whose kubelet refuses what spans zones, is not optional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NumaConfig {
    /// `LeastAllocated`, `MostAllocated`, `BalancedAllocation` or
    /// `LeastNUMANodes` (the names of scheduler-plugins'
    /// NodeResourceTopologyMatch).
    pub scoring_strategy: crate::engine::numa_score::NumaStrategy,
    /// The NUMA score's weight beside the node policy's (1); 0 ranks by
    /// the node policy alone.
    pub weight: u32,
}

impl Default for NumaConfig {
    fn default() -> Self {
        let d = crate::engine::numa_score::NumaScoring::default();
        Self {
            scoring_strategy: d.strategy,
            weight: d.weight,
        }
    }
}

impl NumaConfig {
    pub fn scoring(&self) -> crate::engine::numa_score::NumaScoring {
        crate::engine::numa_score::NumaScoring {
            strategy: self.scoring_strategy,
            weight: self.weight,
        }
    }
}

/// Gang scheduling.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GangConfig {
    /// How long capacity stays held for the members of a group that is
    /// being placed (from the last member bound); then it is released.
    pub hold_seconds: u64,
}

impl Default for GangConfig {
    fn default() -> Self {
        Self { hold_seconds: 60 }
    }
}

/// The deepest `scheduler.nodeLock.queueDepth` accepted (and the deepest
/// `auto` gives): at a 2.5 s hold, 16 holds are 40 s, four fifths of
/// deploy/'s 50 s wait.
pub const MAX_QUEUE_DEPTH: u32 = 16;

/// `queueDepth: auto` gives a binpack pod this many lock holds per second
/// that locks are held. Little's law: a burst keeps (bind rate × hold)
/// nodes busy without a queue, so a short hold needs few nodes and a
/// short queue (a deep one only makes binpack's nodes lock-bound, one pod
/// per hold each, while the rest of the cluster idles), and a long hold
/// needs many nodes unless binds queue. 7 gives 4 holds at 0.6 s (a fast
/// control plane at HAMi's 500 ms Allocate), 7 at 1 s and 16 at 2.3 s
/// (HAMi's 2 s), where the scale benchmark keeps a burst within 2.5 times
/// the nodes it needs (docs/benchmarks.md, "Binpack's packing and the
/// queue depth").
pub const AUTO_DEPTH_PER_SECOND_OF_HOLD: f64 = 7.0;

/// The most of a bind's wait for its node that `queueDepth: auto` fills
/// with the lock holds ahead of a binpack pod: the rest is the margin for
/// device plugins slower than lately (p99 holds ran 1.2 to 1.6 times the
/// median in the scale benchmark).
pub const AUTO_QUEUE_SHARE_OF_WAIT: f64 = 0.8;

/// HAMi's node lock (`hami.io/mutex.lock`, hami-compat.md 4.3).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NodeLockConfig {
    /// Take the lock at bind. HAMi's device plugin finds the pod it sets up
    /// through it; turn it off only without HAMi's device plugin.
    pub enabled: bool,
    /// Age after which a lock is taken over (HAMi: 5 minutes).
    pub expiry_seconds: u64,
    /// How long a bind waits for its node (binds before it in this
    /// gpugate, and a lock held by another pod) before it fails
    /// (kube-scheduler then retries). Capped by `bindTimeoutSeconds`
    /// less the time the Binding itself needs.
    pub wait_seconds: f64,
    /// `/filter` offers only the feasible nodes promised the fewest lock
    /// holds (a held lock, gpugate's binds in progress or assumed there):
    /// binds then run on many nodes at once instead of queueing on one
    /// (the node policy still orders the nodes offered).
    pub steer: bool,
    /// `/filter` offers the feasible nodes with at most this many lock
    /// holds ahead, or with the fewest any feasible node has when that is
    /// more (the node policy then chooses among them: binpack keeps
    /// filling the nodes it has begun instead of opening a free one for
    /// every pod that arrives while their locks are held). 0: only the
    /// least promised nodes. `auto` (the default): for binpack pods 7 holds
    /// per second that locks have been held lately, at most four fifths of
    /// the bind's wait, for spread pods 0 ([`QueueDepth::for_policy`]).
    pub queue_depth: QueueDepth,
}

/// `scheduler.nodeLock.queueDepth`: a number of lock holds, or `auto`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueDepth {
    /// By the pod's node policy: binpack [`AUTO_DEPTH_PER_SECOND_OF_HOLD`]
    /// holds per second of the recent lock hold (it keeps filling the
    /// nodes it has begun when locks are released slowly, and does not
    /// make them lock-bound when they are released fast), at most four
    /// fifths of a bind's wait for its node (no bind waits past its
    /// budget); spread 0 (its pods prefer empty nodes anyway, and would
    /// only wait longer).
    #[default]
    Auto,
    /// The same depth for every pod.
    Holds(u32),
}

/// The lock hold `queueDepth: auto` assumes until gpugate has seen enough
/// locks released: about the pace of HAMi's device plugin.
pub const ASSUMED_LOCK_HOLD: Duration = Duration::from_secs(2);

impl QueueDepth {
    /// The depth applied to a pod placed under `policy`. Under `auto` a
    /// binpack pod may queue behind [`AUTO_DEPTH_PER_SECOND_OF_HOLD`] lock
    /// holds per second of `hold` (how long locks have been held lately;
    /// [`ASSUMED_LOCK_HOLD`] while that is unknown), rounded, but no more
    /// than fill [`AUTO_QUEUE_SHARE_OF_WAIT`] of `wait` (how long a bind
    /// may wait for its node), 0 to [`MAX_QUEUE_DEPTH`]; a spread pod
    /// behind none.
    pub fn for_policy(self, policy: NodePolicy, hold: Option<Duration>, wait: Duration) -> u32 {
        match (self, policy) {
            (Self::Holds(depth), _) => depth,
            (Self::Auto, NodePolicy::Spread) => 0,
            (Self::Auto, NodePolicy::Binpack) => {
                let hold = hold
                    .unwrap_or(ASSUMED_LOCK_HOLD)
                    .max(Duration::from_millis(10))
                    .as_secs_f64();
                let for_hold = (hold * AUTO_DEPTH_PER_SECOND_OF_HOLD).round();
                let fits = (wait.as_secs_f64() * AUTO_QUEUE_SHARE_OF_WAIT / hold).floor();
                let depth = for_hold.min(fits);
                // In 0..=MAX_QUEUE_DEPTH, so the cast is exact (0: not even
                // one hold fits in the wait, or holds are too short to
                // need a queue).
                depth.clamp(0.0, f64::from(MAX_QUEUE_DEPTH)) as u32
            }
        }
    }
}

impl SchedulerConfig {
    /// How long a bind may wait for its node: `nodeLock.waitSeconds`, at
    /// most `bindTimeoutSeconds`.
    pub fn node_wait(&self) -> Duration {
        Duration::from_secs_f64(
            self.node_lock
                .wait_seconds
                .min(self.bind_timeout_seconds)
                .max(0.0),
        )
    }
}

impl<'de> Deserialize<'de> for QueueDepth {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Depth;
        fn out_of_range<E: serde::de::Error>(v: impl fmt::Display) -> E {
            E::custom(format!(
                "queueDepth is {v}, allowed 0 to {MAX_QUEUE_DEPTH} or auto"
            ))
        }
        /// Any other integer: through u64, or out of range as given.
        fn narrowed<E, N>(v: N) -> Result<QueueDepth, E>
        where
            E: serde::de::Error,
            N: TryInto<u64> + fmt::Display + Copy,
        {
            use serde::de::Visitor;
            v.try_into()
                .map_err(|_| out_of_range(v))
                .and_then(|v| Depth.visit_u64(v))
        }
        impl serde::de::Visitor<'_> for Depth {
            type Value = QueueDepth;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a number of lock holds (0 to {MAX_QUEUE_DEPTH}) or \"auto\""
                )
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<QueueDepth, E> {
                match u32::try_from(v) {
                    Ok(depth) if depth <= MAX_QUEUE_DEPTH => Ok(QueueDepth::Holds(depth)),
                    _ => Err(out_of_range(v)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<QueueDepth, E> {
                narrowed(v)
            }
            fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<QueueDepth, E> {
                narrowed(v)
            }
            fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<QueueDepth, E> {
                narrowed(v)
            }
            /// `auto`, or a number written as a string (what
            /// `helm --set-string` renders).
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<QueueDepth, E> {
                match v {
                    "auto" => Ok(QueueDepth::Auto),
                    _ if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v
                        .parse::<u64>()
                        .map_err(|_| out_of_range(format_args!("{v:?}")))
                        .and_then(|n| self.visit_u64(n)),
                    _ => Err(out_of_range(format_args!("{v:?}"))),
                }
            }
        }
        d.deserialize_any(Depth)
    }
}

impl Default for NodeLockConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            expiry_seconds: 300,
            wait_seconds: 20.0,
            steer: true,
            queue_depth: QueueDepth::Auto,
        }
    }
}

/// See [`SchedulerConfig::filter_mode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterMode {
    All,
    Best,
    #[default]
    Top,
}

/// The most nodes `filterMode: top` may offer: beyond this, `all` costs
/// about the same.
pub const MAX_FILTER_TOP_NODES: usize = 100;

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            name: "hami-scheduler".to_string(),
            node_scheduler_policy: NodePolicy::Binpack,
            gpu_scheduler_policy: GpuPolicy::Spread,
            force_overwrite_default_scheduler: true,
            filter_mode: FilterMode::Top,
            filter_top_nodes: 10,
            numa: NumaConfig::default(),
            node_lock: NodeLockConfig::default(),
            bind_timeout_seconds: 25.0,
            assume_seconds: 5.0,
            binding_succeeded_events: false,
            gang: GangConfig::default(),
            preemption: PreemptionConfig::default(),
            defragmentation: DefragmentationConfig::default(),
            leader_lease: String::new(),
            disabled_device_kinds: Vec::new(),
        }
    }
}

impl SchedulerConfig {
    /// `leaderLease` as (namespace, name); `None` when empty.
    pub fn leader_lease(&self) -> Option<(&str, &str)> {
        self.leader_lease.trim().split_once('/')
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: String,
        source: serde_yaml_ng::Error,
    },
    #[error("config file {path}: {problem}")]
    Invalid { path: String, problem: String },
}

impl Config {
    /// Each device kind's section (resource names and defaults), in the
    /// order of [`crate::devices::KINDS`].
    pub fn device_configs(&self) -> [&DeviceConfig; crate::devices::KINDS.len()] {
        use crate::devices::KindId;
        let first = usize::from(KindId::ASCEND_FIRST.index());
        std::array::from_fn(|i| match KindId::at(i as u8).unwrap_or_default() {
            KindId::NVIDIA => &self.nvidia,
            KindId::HYGON => &*self.hygon,
            KindId::HCU => &*self.hcu,
            KindId::KUNLUN_VXPU => &*self.kunlun,
            KindId::CAMBRICON => &*self.cambricon,
            KindId::AWS_NEURON => &*self.awsneuron,
            KindId::BIREN => &*self.biren,
            KindId::KUNLUN_XPU => self.kunlun.second(),
            KindId::METAX_GPU => &*self.metax,
            KindId::ENFLAME_GCU => &*self.enflame,
            KindId::ENFLAME_DRS => self.enflame.second(),
            KindId::METAX_SGPU => self.metax.second(),
            KindId::VASTAI => &*self.vastai,
            KindId::AMD => &*self.amd,
            KindId::MTHREADS => &*self.mthreads,
            k if k >= KindId::ILUVATAR_FIRST
                && i < usize::from(KindId::ILUVATAR_FIRST.index()) + self.iluvatars.0.len() =>
            {
                &self.iluvatars.0[i - usize::from(KindId::ILUVATAR_FIRST.index())]
            }
            _ => self.vnpus.chips.get(i - first).unwrap_or(&self.nvidia),
        })
    }

    /// Whether gpugate places `kind` (`scheduler.disabledDeviceKinds`).
    pub fn kind_enabled(&self, kind: crate::devices::KindId) -> bool {
        let name = kind.kind().name;
        !self
            .scheduler
            .disabled_device_kinds
            .iter()
            .any(|d| d == name)
    }

    /// Whether a container asks for devices of `cfg`'s kind while the
    /// config turns that kind off: then the pod is not gpugate's.
    pub fn left_to_another_scheduler<'c, C>(
        &self,
        cfg: &DeviceConfig,
        mut containers: impl Iterator<Item = &'c C>,
    ) -> bool
    where
        C: crate::engine::request::ContainerSpec + 'c,
    {
        !self.kind_enabled(cfg.kind)
            && containers.any(|c| {
                cfg.gpu_resource_names()
                    .iter()
                    .any(|n| !n.is_empty() && crate::engine::request::asks_for(c, n))
            })
    }

    /// Refuses a request for devices of a kind the config turns off, naming
    /// the first container that asks for them.
    pub fn placed_here(
        &self,
        request: &crate::engine::PodRequest,
    ) -> Result<(), crate::engine::request::RequestError> {
        let kind = request.device_kind;
        match request.containers.iter().find(|c| c.gpu.is_some()) {
            Some(c) if !self.kind_enabled(kind) => Err(crate::engine::request::RequestError {
                container: c.name.clone(),
                resource: self.device_config(kind).resource_count_name.clone(),
                problem: format!(
                    "asks for {}s, which gpugate's config leaves to another scheduler \
                     (scheduler.disabledDeviceKinds names {}): give the pod that scheduler's name",
                    kind.kind().noun,
                    kind.kind().name
                ),
            }),
            _ => Ok(()),
        }
    }

    /// The section of one device kind.
    pub fn device_config(&self, kind: crate::devices::KindId) -> &DeviceConfig {
        self.device_configs()
            .into_iter()
            .find(|c| c.kind == kind)
            .unwrap_or(&self.nvidia)
    }

    /// The section a pod's containers are read with: the first kind one of
    /// whose resource names a container asks for (a quantity above 0, or
    /// one that cannot be read, so that the error names it), else the
    /// first kind one of whose names a container gives, else the first
    /// kind (the pod asks for no device).
    pub fn device_config_for<'c, C>(
        &self,
        containers: impl Iterator<Item = &'c C> + Clone,
    ) -> &DeviceConfig
    where
        C: crate::engine::request::ContainerSpec + 'c,
    {
        let gives = |cfg: &&DeviceConfig, asked: bool| {
            containers.clone().any(|c| {
                cfg.gpu_resource_names().iter().any(|name| {
                    if asked {
                        crate::engine::request::asks_for(c, name)
                    } else {
                        c.quantity(name).is_some()
                    }
                })
            })
        };
        let sections = self.device_configs();
        sections
            .iter()
            .find(|cfg| gives(cfg, true))
            .or_else(|| sections.iter().find(|cfg| gives(cfg, false)))
            .copied()
            .unwrap_or(&self.nvidia)
    }

    /// The sections a pod's containers are read with: the one
    /// [`Config::device_config_for`] chooses, then every other kind one of
    /// whose resources a container asks for, in the order of
    /// [`crate::devices::KINDS`]. Never empty.
    pub fn asked_device_configs<'c, C>(
        &self,
        containers: impl Iterator<Item = &'c C> + Clone,
    ) -> Vec<&DeviceConfig>
    where
        C: crate::engine::request::ContainerSpec + 'c,
    {
        let first = self.device_config_for(containers.clone());
        std::iter::once(first)
            .chain(self.device_configs().into_iter().filter(|cfg| {
                cfg.kind != first.kind
                    && containers.clone().any(|c| {
                        cfg.gpu_resource_names()
                            .iter()
                            .any(|n| !n.is_empty() && crate::engine::request::asks_for(c, n))
                    })
            }))
            .collect()
    }

    /// A pod's request, from its init containers then its app containers:
    /// read with the section [`Config::device_config_for`] chooses, and
    /// every other kind a container asks for read with its own section
    /// into `also` (a pod may take an NVIDIA GPU and an Ascend NPU on one
    /// node, as HAMi places it; hami-vendors.md 1.3). A kind the config
    /// leaves to another scheduler, or one gpugate does not place, is
    /// refused, naming the container; templates are applied per kind.
    pub fn read_request<'c, C, I>(
        &self,
        init: I,
        app: I,
        annotations: &impl crate::engine::annotations::Annotations,
    ) -> Result<crate::engine::PodRequest, crate::engine::request::RequestError>
    where
        C: crate::engine::request::ContainerSpec + 'c,
        I: IntoIterator<Item = &'c C> + Clone,
        I::IntoIter: Clone,
    {
        let asked = self.asked_device_configs(init.clone().into_iter().chain(app.clone()));
        let first = asked[0];
        let read = |cfg: &DeviceConfig| {
            let request = crate::engine::PodRequest::from_containers(
                init.clone(),
                app.clone(),
                cfg,
                &self.other_device_configs(cfg.kind),
            )?;
            self.placed_here(&request)?;
            request.split_into_templates(cfg, annotations)
        };
        let mut request = read(first)?;
        for cfg in &asked[1..] {
            request.also.push(read(cfg)?);
        }
        Ok(request)
    }

    /// The sections of every kind but `kind`: read on their own when a pod
    /// read as `kind`'s asks for them too.
    pub fn other_device_configs(&self, kind: crate::devices::KindId) -> Vec<&DeviceConfig> {
        self.device_configs()
            .into_iter()
            .filter(|c| c.kind != kind)
            .collect()
    }

    /// The policies of a pod that names none.
    pub fn default_policies(&self) -> crate::engine::DefaultPolicies {
        crate::engine::DefaultPolicies {
            node: self.scheduler.node_scheduler_policy,
            gpu: self.scheduler.gpu_scheduler_policy,
        }
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_file_text(&text, &shown)
    }

    /// Parses and validates the text of a config file: as
    /// [`Config::from_yaml`], but a file with no content (empty, or only
    /// comments) is refused.
    pub fn from_file_text(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let document: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|source| ConfigError::Parse {
                path: origin.to_string(),
                source,
            })?;
        if document.is_null() {
            return Err(ConfigError::Invalid {
                path: origin.to_string(),
                problem: "the file is empty: refused, so that a file caught truncated cannot \
                          replace the config in force; write {} to use every default"
                    .to_string(),
            });
        }
        Self::from_yaml(text, origin)
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let config: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|source| ConfigError::Parse {
                path: origin.to_string(),
                source,
            })?
        };
        config.validate().map_err(|problem| ConfigError::Invalid {
            path: origin.to_string(),
            problem,
        })?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        if let Some(unknown) = self
            .scheduler
            .disabled_device_kinds
            .iter()
            .find(|d| !crate::devices::kinds().any(|(_, k)| k.name == d.as_str()))
        {
            return Err(format!(
                "scheduler.disabledDeviceKinds names {unknown:?}, which is not a device kind: \
                 allowed {}",
                crate::devices::kinds()
                    .map(|(_, k)| k.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        // HAMi master's `hygon` section names HCUs; copied into gpugate's
        // (HAMi v2.10's DCUs) it would write DCU lists for HCU pods.
        if let Some(name) = self
            .hygon
            .gpu_resource_names()
            .into_iter()
            .find(|n| n.starts_with("hygon.com/hcu"))
        {
            return Err(format!(
                "hygon.* names {name}, HAMi master's HCU resource: the hygon section is HAMi \
                 v2.10's DCUs (hami.io/dcu-devices-*); give HCU names in the hcu section"
            ));
        }
        let sections = self.device_configs();
        for (i, section) in sections.iter().enumerate() {
            section.validate()?;
            // A kind read from node capacity is read under the chart's
            // names (the node's view does not follow config reloads).
            let kind = section.kind.kind();
            if let Some(inventory) = kind.capacity
                && let Some(name) = inventory
                    .resources
                    .iter()
                    .find(|r| !section.gpu_resource_names().contains(r))
            {
                return Err(format!(
                    "{}.* renames {name}: {}s are read from node capacity of {} (what the \
                     device plugin advertises), so those names cannot change",
                    kind.name,
                    kind.noun,
                    inventory.resources.join(" and ")
                ));
            }
            // A resource name read by two kinds would make a pod's kind
            // depend on the order of the sections.
            for other in &sections[i + 1..] {
                if let Some(name) = section
                    .gpu_resource_names()
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .find(|n| other.gpu_resource_names().contains(n))
                {
                    return Err(format!(
                        "{name} is a resource of both {} and {}: give each kind its own names",
                        section.kind.kind().name,
                        other.kind.kind().name
                    ));
                }
            }
        }
        self.kueue.validate()?;
        if self.scheduler.name.trim().is_empty() {
            return Err("scheduler.name must not be empty".to_string());
        }
        let top = self.scheduler.filter_top_nodes;
        if !(1..=MAX_FILTER_TOP_NODES).contains(&top) {
            return Err(format!(
                "scheduler.filterTopNodes is {top}, allowed 1 to {MAX_FILTER_TOP_NODES}"
            ));
        }
        let lease = self.scheduler.leader_lease.trim();
        if !lease.is_empty()
            && !lease
                .split_once('/')
                .is_some_and(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        {
            return Err(format!(
                "scheduler.leaderLease is {lease:?}: give the Lease as namespace/name (the \
                 leaderElection.resourceNamespace and resourceName of gpugate's kube-scheduler), \
                 or \"\" for none"
            ));
        }
        let lock = &self.scheduler.node_lock;
        if lock.expiry_seconds == 0 {
            return Err("scheduler.nodeLock.expirySeconds must be at least 1".to_string());
        }
        if !(lock.wait_seconds.is_finite() && (0.0..=600.0).contains(&lock.wait_seconds)) {
            return Err(format!(
                "scheduler.nodeLock.waitSeconds is {}, allowed 0 to 600",
                lock.wait_seconds
            ));
        }
        if let QueueDepth::Holds(depth) = lock.queue_depth
            && depth > MAX_QUEUE_DEPTH
        {
            return Err(format!(
                "scheduler.nodeLock.queueDepth is {depth}, allowed 0 to {MAX_QUEUE_DEPTH} or auto"
            ));
        }
        let bind = self.scheduler.bind_timeout_seconds;
        if !(bind.is_finite() && (1.0..=600.0).contains(&bind)) {
            return Err(format!(
                "scheduler.bindTimeoutSeconds is {bind}, allowed 1 to 600"
            ));
        }
        let assume = self.scheduler.assume_seconds;
        if !(assume.is_finite() && (0.0..=60.0).contains(&assume)) {
            return Err(format!(
                "scheduler.assumeSeconds is {assume}, allowed 0 to 60"
            ));
        }
        if self.scheduler.gang.hold_seconds == 0 || self.scheduler.gang.hold_seconds > 3600 {
            return Err(format!(
                "scheduler.gang.holdSeconds is {}, allowed 1 to 3600",
                self.scheduler.gang.hold_seconds
            ));
        }
        let p = &self.scheduler.preemption;
        if !(p.grace_seconds.is_finite() && (1.0..=300.0).contains(&p.grace_seconds)) {
            return Err(format!(
                "scheduler.preemption.graceSeconds is {}, allowed 1 to 300",
                p.grace_seconds
            ));
        }
        if !(10..=3600).contains(&p.hold_seconds) {
            return Err(format!(
                "scheduler.preemption.holdSeconds is {}, allowed 10 to 3600",
                p.hold_seconds
            ));
        }
        let d = &self.scheduler.defragmentation;
        if !(1..=8).contains(&d.max_moves) {
            return Err(format!(
                "scheduler.defragmentation.maxMoves is {}, allowed 1 to 8",
                d.max_moves
            ));
        }
        if !(1..=1000).contains(&d.moves_per_minute) {
            return Err(format!(
                "scheduler.defragmentation.movesPerMinute is {}, allowed 1 to 1000",
                d.moves_per_minute
            ));
        }
        if (d.moves_per_minute as usize) < d.max_moves {
            return Err(format!(
                "scheduler.defragmentation.movesPerMinute ({}) is below maxMoves ({}): a plan of maxMoves would never fit in a minute",
                d.moves_per_minute, d.max_moves
            ));
        }
        if d.min_seconds_between_moves > 7 * 24 * 3600 {
            return Err(format!(
                "scheduler.defragmentation.minSecondsBetweenMoves is {}, allowed 0 to 604800",
                d.min_seconds_between_moves
            ));
        }
        if !(30..=3600).contains(&d.hold_seconds) {
            return Err(format!(
                "scheduler.defragmentation.holdSeconds is {}, allowed 30 to 3600",
                d.hold_seconds
            ));
        }
        if !(1_000..=100_000_000).contains(&d.search_budget) {
            return Err(format!(
                "scheduler.defragmentation.searchBudget is {}, allowed 1000 to 100000000",
                d.search_budget
            ));
        }
        if !(10..=10_000).contains(&d.search_millis) {
            return Err(format!(
                "scheduler.defragmentation.searchMillis is {}, allowed 10 to 10000",
                d.search_millis
            ));
        }
        if self.scheduler.numa.weight > 100 {
            return Err(format!(
                "scheduler.numa.weight is {}, allowed 0 to 100",
                self.scheduler.numa.weight
            ));
        }
        self.api.validate()?;
        self.server.validate()?;
        namespace_policy::validate_policies(&self.namespace_policies)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_own_section() {
        // A kind left out of `device_configs` would silently be read with
        // another kind's names.
        let c = Config::default();
        for (i, cfg) in c.device_configs().iter().enumerate() {
            assert_eq!(usize::from(cfg.kind.index()), i, "{}", cfg.kind.kind().name);
        }
    }

    #[test]
    fn filter_top_nodes_is_bounded() {
        let c =
            Config::from_yaml("scheduler: {filterMode: top, filterTopNodes: 3}", "test").unwrap();
        assert_eq!(c.scheduler.filter_mode, FilterMode::Top);
        assert_eq!(c.scheduler.filter_top_nodes, 3);
        for bad in [0, 101] {
            let e = Config::from_yaml(&format!("scheduler: {{filterTopNodes: {bad}}}"), "test")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("filterTopNodes is {bad}, allowed 1 to 100")),
                "{e}"
            );
        }
        let e = Config::from_yaml("scheduler: {filterMode: some}", "test")
            .unwrap_err()
            .to_string();
        assert!(e.contains("filterMode"), "{e}");
    }

    #[test]
    fn queue_depth_is_bounded() {
        let c = Config::from_yaml("scheduler: {nodeLock: {queueDepth: 10}}", "test").unwrap();
        assert_eq!(c.scheduler.node_lock.queue_depth, QueueDepth::Holds(10));
        for bad in [
            "17",
            "4294967296",
            "-1",
            "99999999999999999999999",
            "deep",
            "true",
            "1.5",
            "\"\"",
            "[1]",
        ] {
            let yaml = format!("scheduler: {{nodeLock: {{queueDepth: {bad}}}}}");
            let e = Config::from_yaml(&yaml, "test").unwrap_err().to_string();
            assert!(e.contains("queueDepth"), "{bad}: {e}");
        }
        // The number given is the number said, not a clamped one.
        for big in ["4294967296", "17"] {
            let yaml = format!("scheduler: {{nodeLock: {{queueDepth: {big}}}}}");
            let e = Config::from_yaml(&yaml, "test").unwrap_err().to_string();
            assert!(
                e.contains(&format!("queueDepth is {big}, allowed 0 to 16 or auto")),
                "{e}"
            );
        }
        // A number written as a string, as `helm --set-string` renders it.
        let c = Config::from_yaml("scheduler: {nodeLock: {queueDepth: \"2\"}}", "test").unwrap();
        assert_eq!(c.scheduler.node_lock.queue_depth, QueueDepth::Holds(2));
    }

    #[test]
    fn queue_depth_auto_follows_the_node_policy() {
        let c = Config::from_yaml("scheduler: {nodeLock: {queueDepth: auto}}", "test").unwrap();
        assert_eq!(c, Config::default());
        let auto = c.scheduler.node_lock.queue_depth;
        let wait = c.scheduler.node_wait();
        assert_eq!(wait, Duration::from_secs(20));
        let secs = |s: f64| Some(Duration::from_secs_f64(s));
        // Seven holds per second of the hold seen lately, within four
        // fifths of the 20 s wait.
        for (hold, depth) in [
            (secs(1.5), 10),
            (secs(3.0), 5),
            (secs(0.4), 3),
            (secs(0.05), 0),
            (secs(0.0), 0),
            (secs(12.0), 1),
            (secs(1e9), 0),
            (None, 8),
        ] {
            assert_eq!(
                auto.for_policy(NodePolicy::Binpack, hold, wait),
                depth,
                "{hold:?}"
            );
            assert_eq!(auto.for_policy(NodePolicy::Spread, hold, wait), 0);
        }
        assert_eq!(
            auto.for_policy(NodePolicy::Binpack, secs(1.0), Duration::ZERO),
            0
        );
        let fixed = QueueDepth::Holds(0);
        assert_eq!(fixed.for_policy(NodePolicy::Binpack, secs(0.1), wait), 0);
        assert_eq!(
            QueueDepth::Holds(3).for_policy(NodePolicy::Spread, None, wait),
            3
        );
        // A bind waits for its node no longer than its whole budget.
        let c = Config::from_yaml(
            "scheduler: {bindTimeoutSeconds: 8, nodeLock: {waitSeconds: 20}}",
            "test",
        )
        .unwrap();
        assert_eq!(c.scheduler.node_wait(), Duration::from_secs(8));
        // deploy/'s 50 s wait: the hold decides up to 2.5 s, the wait
        // beyond.
        let wait = Duration::from_secs(50);
        for (hold, depth) in [
            (secs(0.5), 4),
            (secs(0.6), 4),
            (secs(1.0), 7),
            (secs(2.3), 16),
            (secs(2.5), 16),
            (secs(2.54), 15),
            (secs(5.0), 8),
            (None, 14),
        ] {
            assert_eq!(
                auto.for_policy(NodePolicy::Binpack, hold, wait),
                depth,
                "{hold:?}"
            );
        }
    }

    #[test]
    fn empty_file_gives_hami_defaults() {
        let c = Config::from_yaml("", "test").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.nvidia.default_gpu_num, 1);
        assert_eq!(c.scheduler.gpu_scheduler_policy, GpuPolicy::Spread);
        assert_eq!(c.scheduler.node_scheduler_policy, NodePolicy::Binpack);
    }

    /// The NUMA scoring strategy by scheduler-plugins' names; anything
    /// else is refused with the names allowed.
    #[test]
    fn numa_scoring_is_read_and_checked() {
        use crate::engine::numa_score::NumaStrategy;
        let c = Config::from_yaml(
            "scheduler: {numa: {scoringStrategy: LeastNUMANodes, weight: 3}}",
            "test",
        )
        .unwrap();
        assert_eq!(
            c.scheduler.numa.scoring_strategy,
            NumaStrategy::LeastNumaNodes
        );
        assert_eq!(c.scheduler.numa.scoring().weight, 3);
        assert_eq!(
            Config::default().scheduler.numa.scoring_strategy,
            NumaStrategy::LeastAllocated
        );
        let e = Config::from_yaml("scheduler: {numa: {scoringStrategy: Packed}}", "test")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown NUMA scoring strategy \"Packed\""),
            "{e}"
        );
        assert!(e.contains("LeastNUMANodes"), "{e}");
        let e = Config::from_yaml("scheduler: {numa: {weight: 101}}", "test")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scheduler.numa.weight is 101"), "{e}");
    }

    /// gpugate's own preemption: on by default, its times bounded.
    #[test]
    fn preemption_settings() {
        let c = Config::default();
        assert!(c.scheduler.preemption.enabled);
        let c = Config::from_yaml(
            "scheduler: {preemption: {enabled: false, graceSeconds: 2, holdSeconds: 30}}",
            "test",
        )
        .unwrap();
        assert_eq!(
            c.scheduler.preemption,
            PreemptionConfig {
                enabled: false,
                grace_seconds: 2.0,
                hold_seconds: 30
            }
        );
        for (yaml, said) in [
            (
                "{graceSeconds: 0.5}",
                "scheduler.preemption.graceSeconds is 0.5",
            ),
            ("{holdSeconds: 5}", "scheduler.preemption.holdSeconds is 5"),
            ("{grace: 5}", "unknown field `grace`"),
        ] {
            let e = Config::from_yaml(&format!("scheduler: {{preemption: {yaml}}}"), "test")
                .unwrap_err()
                .to_string();
            assert!(e.contains(said), "{e}");
        }
    }

    /// HAMi v2.10's chains are accepted as the default GPU policy and in a
    /// namespace policy; an unknown word is refused with the key's path.
    #[test]
    fn gpu_policy_chains_as_defaults() {
        let c = Config::from_yaml(
            "scheduler:\n  gpuSchedulerPolicy: binpack,numa\nnamespacePolicies:\n  - name: t\n    namespaces: [t]\n    defaults: {gpuSchedulerPolicy: numa}\n",
            "test",
        )
        .unwrap();
        assert_eq!(c.scheduler.gpu_scheduler_policy.to_string(), "binpack,numa");
        assert_eq!(
            c.namespace_policies[0]
                .defaults
                .gpu_scheduler_policy
                .map(|p| p.to_string()),
            Some("numa".to_string())
        );
        let e = Config::from_yaml("scheduler:\n  gpuSchedulerPolicy: binpack,fast\n", "test")
            .unwrap_err();
        assert!(e.to_string().contains("binpack,fast"), "{e}");
    }

    #[test]
    fn an_empty_file_is_refused_but_braces_give_the_defaults() {
        for text in ["", "  \n", "# only a comment\n", "---\n", "~\n"] {
            let e = Config::from_file_text(text, "f.yaml").unwrap_err();
            assert!(e.to_string().contains("the file is empty"), "{text:?}: {e}");
        }
        assert_eq!(
            Config::from_file_text("{}\n", "f.yaml").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn hami_nvidia_section_is_accepted() {
        let text = "nvidia:\n  resourceCountName: nvidia.com/gpu\n  defaultMemory: 1024\n  defaultGPUNum: 2\n  deviceSplitCount: 10\n  deviceMemoryScaling: 1\n  migProfileAllowlist: []\n";
        let c = Config::from_yaml(text, "test").unwrap();
        assert_eq!(c.nvidia.default_memory, 1024);
        assert_eq!(c.nvidia.default_gpu_num, 2);
    }

    #[test]
    fn typos_and_bad_values_are_refused() {
        let err = Config::from_yaml("nvidia:\n  defaultMemroy: 5\n", "f.yaml").unwrap_err();
        assert!(err.to_string().contains("defaultMemroy"), "{err}");
        let err =
            Config::from_yaml("scheduler:\n  gpuSchedulerPolicy: fastest\n", "f.yaml").unwrap_err();
        assert!(err.to_string().contains("fastest"), "{err}");
        let err = Config::from_yaml("nvidia:\n  defaultCores: 150\n", "f.yaml").unwrap_err();
        assert!(err.to_string().contains("defaultCores"), "{err}");
        let err = Config::from_yaml("nvidia:\n  memoryFactor: 0\n", "f.yaml").unwrap_err();
        assert!(err.to_string().contains("memoryFactor"), "{err}");
    }
}
