//! GPUs, their capacity and their usage, and the nodes that hold them.

use crate::devices::{KindId, Sharing};
use crate::hami::mig::{MigPlacement, MigProfile};

/// Lower-case words of a model name.
pub fn model_words(model: &str) -> Vec<String> {
    model
        .split([' ', '-', '_'])
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Sums of a node's capacity and usage over all its GPUs, kept up to date
/// by the state so that the node score costs O(1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeTotals {
    pub slots: u64,
    pub slots_used: u64,
    pub cores: u64,
    pub cores_used: u64,
    pub mem_mib: u64,
    pub mem_used_mib: u64,
}

/// An amount of one GPU: time-slicing slots, memory and cores. Used both for
/// what a GPU offers and for what is taken of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Concurrent vGPUs (HAMi's split count on the capacity side).
    pub slots: u32,
    /// Memory in MiB (HAMi's `devmem` is an `int32`; requests are bounded
    /// the same way), so that a `Usage` stays 16 bytes: the evaluation of
    /// every node reads every GPU's.
    pub mem_mib: u32,
    /// Compute in percent of the GPU's SMs (100 per whole GPU; HAMi's
    /// `devcore` may be higher with core scaling).
    pub cores: u32,
    /// On a MIG GPU, the memory slices its instances occupy, one bit per
    /// slice (bit `i` is slice `i`); 0 elsewhere. Instances never overlap,
    /// so adding is a union and taking away clears the bits. 16 slices
    /// (A100 and H100 have 8).
    pub slices: u16,
    /// Pods whose MIG instance is inconsistent with the GPU: on a MIG GPU,
    /// a pod placed without its `hami.io/vgpu-mig-allocations` entry; on
    /// any other GPU, a pod with one. While there is one, the GPU takes no
    /// new pod (HAMi marks such a GPU unhealthy).
    pub unreserved: u8,
    /// Pods whose allocation on this GPU cannot be read (a device list or
    /// MIG entry the decoder refuses): the GPU takes no new pod while
    /// there is one, since what they hold is unknown (fail closed).
    pub unreadable: u8,
}

// Every evaluation reads the usage and capacity of every GPU of every
// candidate node: the size is part of its speed (docs/benchmarks.md).
const _: () = assert!(std::mem::size_of::<Usage>() == 16);

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.slots = self.slots.saturating_add(other.slots);
        self.mem_mib = self.mem_mib.saturating_add(other.mem_mib);
        self.cores = self.cores.saturating_add(other.cores);
        self.slices |= other.slices;
        self.unreserved = self.unreserved.saturating_add(other.unreserved);
        self.unreadable = self.unreadable.saturating_add(other.unreadable);
    }

    pub fn sub(&mut self, other: &Usage) {
        self.slots = self.slots.saturating_sub(other.slots);
        self.mem_mib = self.mem_mib.saturating_sub(other.mem_mib);
        self.cores = self.cores.saturating_sub(other.cores);
        self.slices &= !other.slices;
        self.unreserved = self.unreserved.saturating_sub(other.unreserved);
        self.unreadable = self.unreadable.saturating_sub(other.unreadable);
    }

    /// Element-wise maximum (an init container's peak against the app's
    /// sum); MIG slices of both.
    pub fn max(&self, other: &Usage) -> Usage {
        Usage {
            slots: self.slots.max(other.slots),
            mem_mib: self.mem_mib.max(other.mem_mib),
            cores: self.cores.max(other.cores),
            slices: self.slices | other.slices,
            unreserved: self.unreserved.max(other.unreserved),
            unreadable: self.unreadable.max(other.unreadable),
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

impl super::lifecycle::Amount for Usage {
    fn plus(mut self, other: Self) -> Self {
        self.add(&other);
        self
    }

    fn larger(self, other: Self) -> Self {
        self.max(&other)
    }
}

/// One physical GPU as registered by the device plugin.
///
/// Laid out for the evaluation, which reads the GPUs of every candidate
/// node: what every check reads (capacity, health, cordon, mode flags,
/// kind, NUMA node) comes first, in the struct's first 32 bytes, and the
/// struct is 128 bytes aligned to a cache line, so that a GPU's checks
/// touch one cache line (its names and MIG table only when needed). The
/// assertions below keep it so.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Gpu {
    /// Slots (split count), memory (MiB) and cores the GPU offers.
    pub capacity: Usage,
    /// NVML index; GPUs on a node are kept sorted by it.
    pub index: u32,
    pub numa: i32,
    pub healthy: bool,
    /// Listed in the node's `hami.io/device-cordon`.
    pub cordoned: bool,
    /// Whether `mode` is one gpugate can share, precomputed: the check runs
    /// for every GPU of every candidate node, and reading the mode string
    /// there cost a cache miss per GPU (a third of a 5,000-node filter).
    shareable: bool,
    /// Whether pods take MIG instances of it (`mig` mode with a usable
    /// profile), precomputed beside `shareable` for the same reason.
    mig: bool,
    /// The kind of device (the device plugin that registered it); its
    /// modes decide how the GPU is shared ([`Gpu::set_mode`]).
    pub kind: KindId,
    /// The network group the device plugin registered the device in
    /// (Ascend's `NetworkID`; for AWS Neuron devices, 0 when the instance's
    /// devices form a ring, `CapacityInventory::ring_label`),
    /// [`NO_NETWORK`] when none: see [`Gpu::network`]. Two bytes, so that
    /// a GPU stays two cache lines.
    network: i16,
    pub uuid: String,
    /// Model string, e.g. `NVIDIA A100-SXM4-40GB`.
    pub model: String,
    /// HAMi's device mode (`hami-core`, `mig`, `mps`; empty = `hami-core`);
    /// see [`Gpu::set_mode`].
    mode: Box<str>,
    /// A MIG GPU's allowed profiles (HAMi v2.10's `migProfiles`) in the
    /// order HAMi tries them (least memory, then fewest slices, then as
    /// registered), each with its placements' slice masks in the order
    /// HAMi tries them; empty for a GPU shared by HAMi-core. Precomputed:
    /// the choice runs for every MIG GPU of every candidate node.
    mig_profiles: Box<[(MigProfile, Vec<u16>)]>,
    /// Lower-case words of `model`, precomputed for type selection.
    pub(crate) model_words: Box<[String]>,
}

/// [`Gpu::network`] of a device registered in no network group.
const NO_NETWORK: i16 = -1;

// The layout the evaluation's speed depends on (docs/benchmarks.md): two
// cache lines per GPU, the checks' fields in the first 32 bytes.
const _: () = assert!(std::mem::size_of::<Gpu>() == 128);
const _: () = assert!(std::mem::offset_of!(Gpu, kind) < 32);
const _: () = assert!(std::mem::offset_of!(Gpu, uuid) == 32);

impl Gpu {
    pub fn new(
        uuid: impl Into<String>,
        index: u32,
        model: impl Into<String>,
        capacity: Usage,
    ) -> Self {
        let model = model.into();
        Gpu {
            uuid: uuid.into(),
            index,
            model_words: model_words(&model).into_boxed_slice(),
            model,
            numa: 0,
            healthy: true,
            cordoned: false,
            kind: KindId::NVIDIA,
            network: NO_NETWORK,
            mode: Box::default(),
            shareable: true,
            mig: false,
            capacity,
            mig_profiles: Box::default(),
        }
    }

    /// The network group the device was registered in, if any.
    pub fn network(&self) -> Option<u16> {
        u16::try_from(self.network).ok()
    }

    /// Sets the network group; one outside `0..=32767` reads as none.
    pub fn set_network(&mut self, id: Option<i64>) {
        self.network = id
            .and_then(|n| i16::try_from(n).ok())
            .filter(|n| *n >= 0)
            .unwrap_or(NO_NETWORK);
    }

    /// HAMi's device mode (`hami-core`, `mig`, `mps`; empty = `hami-core`).
    pub fn mode(&self) -> &str {
        &self.mode
    }

    /// The mode, the kind's default (`hami-core`) when the device plugin
    /// registered none.
    pub fn mode_or_default(&self) -> &str {
        if self.mode.is_empty() {
            self.kind.kind().default_mode
        } else {
            &self.mode
        }
    }

    /// Sets the mode, the profiles of a GPU in a mode shared by instances
    /// (MIG), and whether gpugate can share the GPU, as its kind says:
    /// HAMi-core and MPS GPUs by slices, MIG GPUs by instances of their
    /// profiles (one without a usable profile not at all), a GPU in a mode
    /// its kind does not list not at all.
    pub fn set_mode(&mut self, mode: impl Into<String>, mig_profiles: Vec<MigProfile>) {
        self.mode = mode.into().into_boxed_str();
        let sharing = self.kind.kind().sharing(&self.mode);
        self.mig_profiles = if sharing == Some(Sharing::Instances) {
            let mut profiles: Vec<(MigProfile, Vec<u16>)> = mig_profiles
                .into_iter()
                .map(|p| {
                    let masks = mig_placement_order(&p)
                        .iter()
                        .filter_map(slice_mask)
                        .collect();
                    (p, masks)
                })
                .filter(|(_, masks): &(MigProfile, Vec<u16>)| !masks.is_empty())
                .collect();
            profiles.sort_by_key(|(p, _)| (p.memory_mib, p.slice_count));
            profiles.into_boxed_slice()
        } else {
            Box::default()
        };
        self.mig = !self.mig_profiles.is_empty();
        self.shareable = match sharing {
            Some(Sharing::Slices) => true,
            Some(Sharing::Instances) => self.mig,
            None => false,
        };
    }

    /// Whether gpugate can hand out shares of this GPU.
    pub fn is_shareable_mode(&self) -> bool {
        self.shareable
    }

    /// The MIG profiles of a GPU in `mig` mode in the order HAMi v2.10
    /// tries them, each with its placements' slice masks in the order it
    /// tries them (empty for other GPUs).
    pub fn mig_profiles(&self) -> &[(MigProfile, Vec<u16>)] {
        &self.mig_profiles
    }

    /// Whether pods take MIG instances of this GPU.
    #[inline]
    pub fn is_mig(&self) -> bool {
        self.mig
    }

    /// The most grants one container could get of this GPU: one, or on a
    /// MIG GPU as many instances as its split count.
    pub fn most_grants(&self) -> u32 {
        if self.mig {
            self.capacity.slots.max(1)
        } else {
            1
        }
    }

    /// The MIG instance a share of this GPU stands for: the profile and
    /// placement of `take` (a share [`super::checks::check_gpu`] gave),
    /// the first profile in choice order with that memory, cores and
    /// placement, which is the one the choice took (3g.20gb and 4g.20gb
    /// share memory and a placement, not cores; an allowlist may have
    /// skipped the first).
    pub fn mig_instance(&self, take: &Usage) -> Option<MigInstance> {
        if take.slices == 0 {
            return None;
        }
        self.mig_profiles
            .iter()
            .find(|(p, masks)| {
                p.memory_mib == take.mem_mib
                    && p.cores == take.cores
                    && masks.contains(&take.slices)
            })
            .map(|(p, _)| MigInstance {
                profile: p.name.clone(),
                placement: MigPlacement {
                    start: take.slices.trailing_zeros(),
                    size: take.slices.count_ones(),
                },
            })
    }
}

/// One MIG instance: its profile and where it sits on its GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigInstance {
    pub profile: String,
    pub placement: MigPlacement,
}

/// The slices a placement occupies, one bit per slice; `None` past the
/// 16 slices a mask holds (A100 and H100 have 8).
pub fn slice_mask(p: &MigPlacement) -> Option<u16> {
    let end = p.start.checked_add(p.size)?;
    if p.size == 0 || end > 16 {
        return None;
    }
    let bits = if p.size == 16 {
        u16::MAX
    } else {
        (1u16 << p.size) - 1
    };
    Some(bits << p.start)
}

/// The placements of `profile` in the order HAMi v2.10 tries them: the
/// highest start first for `1g.*` and `3g.*` profiles, the lowest first
/// for the others.
fn mig_placement_order(profile: &MigProfile) -> Vec<MigPlacement> {
    let mut order = profile.placements.clone();
    order.sort();
    if profile.name.starts_with("1g.") || profile.name.starts_with("3g.") {
        order.reverse();
    }
    order
}

/// A node's GPUs, their current usage and their pairwise topology scores.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    /// Sorted by `index`. Shared between copies of the state (a search's
    /// copy changes only usage).
    pub gpus: std::sync::Arc<[Gpu]>,
    /// `usage[i]` is what is allocated of `gpus[i]`.
    pub usage: Vec<Usage>,
    /// Row-major `gpus.len()²` matrix of pair scores (0 when unknown),
    /// shared between copies like `gpus`. A thin pointer (the topology
    /// search alone reads it), so that `Node` stays 128 bytes with
    /// `profiles` (asserted below).
    pub(crate) pair_scores: std::sync::Arc<Vec<i32>>,
    pub(crate) totals: NodeTotals,
    /// What a kind's own rules read of the node: the profiles its devices
    /// split into (`super::profiles`), the classes of the pods on each
    /// device (`super::tenancy`); `None` for a node with neither (a test
    /// of this field is all another node's fit pays). Shared like `gpus`,
    /// copied when a copy's pods change.
    extras: Option<std::sync::Arc<NodeExtras>>,
}

/// See [`Node::extras`].
#[derive(Debug, Clone, Default, PartialEq)]
struct NodeExtras {
    profiles: super::profiles::NodeProfiles,
    /// `tenants[i]` are the pods on `gpus[i]`, for a kind with tenancy
    /// rules; empty until one is counted.
    tenants: Vec<super::tenancy::Tenants>,
    /// A kind's device plugin's tables of the node, by kind
    /// (`devices::NodePreference::SizeTables`).
    size_tables: Vec<(crate::devices::KindId, super::size_tables::SizeTables)>,
}

// The evaluation walks every candidate `Node`: one larger by 8 bytes cost
// 66,000 instructions an evaluation (docs/benchmarks.md, "Counted, not
// timed").
const _: () = assert!(std::mem::size_of::<Node>() == 128);

impl Node {
    /// A node with the given GPUs, no usage and no pair scores. GPUs are
    /// sorted by index so that "lowest index wins" is a position order.
    pub fn new(name: impl Into<String>, mut gpus: Vec<Gpu>) -> Self {
        gpus.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.uuid.cmp(&b.uuid)));
        let n = gpus.len();
        let mut totals = NodeTotals::default();
        for g in &gpus {
            totals.slots += u64::from(g.capacity.slots);
            totals.cores += u64::from(g.capacity.cores);
            totals.mem_mib += u64::from(g.capacity.mem_mib);
        }
        Node {
            name: name.into(),
            usage: vec![Usage::default(); n],
            pair_scores: std::sync::Arc::new(vec![0; n * n]),
            gpus: gpus.into(),
            totals,
            extras: None,
        }
    }

    /// The profiles its devices split into (`super::profiles`); none for
    /// a node without a kind split so.
    pub fn profiles(&self) -> &super::profiles::NodeProfiles {
        self.extras
            .as_deref()
            .map_or(super::profiles::none(), |e| &e.profiles)
    }

    /// Whether its devices split into profiles.
    pub fn has_profiles(&self) -> bool {
        self.extras
            .as_deref()
            .is_some_and(|e| !e.profiles.profiles.is_empty())
    }

    /// Sets the profiles its devices split into, before any usage is
    /// added (a grant's slices are read from them).
    pub fn set_profiles(&mut self, profiles: super::profiles::NodeProfiles) {
        if profiles.profiles.is_empty() && self.extras.is_none() {
            return;
        }
        std::sync::Arc::make_mut(self.extras.get_or_insert_default()).profiles = profiles;
    }

    /// The tables `kind`'s device plugin wrote on the node
    /// (`super::node_preference`), if any.
    pub fn size_tables(
        &self,
        kind: crate::devices::KindId,
    ) -> Option<&super::size_tables::SizeTables> {
        self.extras
            .as_deref()?
            .size_tables
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, t)| t)
    }

    /// Sets the tables `kind`'s device plugin wrote on the node.
    pub fn set_size_tables(
        &mut self,
        kind: crate::devices::KindId,
        tables: super::size_tables::SizeTables,
    ) {
        let extras = std::sync::Arc::make_mut(self.extras.get_or_insert_default());
        extras.size_tables.retain(|(k, _)| *k != kind);
        extras.size_tables.push((kind, tables));
    }

    /// The pods on GPU `pos` by class (`super::tenancy`); none counted
    /// reads as none.
    pub fn tenants(&self, pos: usize) -> super::tenancy::Tenants {
        self.extras
            .as_deref()
            .and_then(|e| e.tenants.get(pos).copied())
            .unwrap_or_default()
    }

    /// Forgets every pod's class (a copy with nothing placed on it).
    pub(crate) fn clear_tenants(&mut self) {
        if self
            .extras
            .as_deref()
            .is_some_and(|e| !e.tenants.is_empty())
        {
            std::sync::Arc::make_mut(self.extras.get_or_insert_default())
                .tenants
                .clear();
        }
    }

    /// Counts (`add`) or forgets a pod of `tenancy` on GPU `pos`, taking
    /// `cores` of it, when the GPU's kind has tenancy rules.
    pub(crate) fn count_tenant(
        &mut self,
        pos: usize,
        tenancy: super::tenancy::Tenancy,
        cores: u32,
        add: bool,
    ) {
        let ruled = self
            .gpus
            .get(pos)
            .is_some_and(|g| g.kind.kind().tenancy.is_some());
        if !ruled || tenancy.is_none() {
            return;
        }
        let n = self.gpus.len();
        let extras = std::sync::Arc::make_mut(self.extras.get_or_insert_default());
        extras.tenants.resize(n, Default::default());
        if let Some(t) = extras.tenants.get_mut(pos) {
            if add {
                t.add(tenancy, cores >= 100);
            } else {
                t.sub(tenancy, cores >= 100);
            }
        }
    }

    /// The GPUs, to change (tests, and a node read anew): copied first if
    /// another copy of the state shares them.
    pub fn gpus_mut(&mut self) -> &mut [Gpu] {
        std::sync::Arc::make_mut(&mut self.gpus)
    }

    /// Sets the symmetric pair score of two GPUs (by UUID); unknown UUIDs are
    /// ignored and reported as `false`.
    pub fn set_pair_score(&mut self, a: &str, b: &str, score: i32) -> bool {
        let (Some(i), Some(j)) = (self.position(a), self.position(b)) else {
            return false;
        };
        let n = self.gpus.len();
        let scores = std::sync::Arc::make_mut(&mut self.pair_scores);
        scores[i * n + j] = score;
        scores[j * n + i] = score;
        true
    }

    /// Pair score between GPU positions `i` and `j`.
    pub fn pair_score(&self, i: usize, j: usize) -> i32 {
        let n = self.gpus.len();
        self.pair_scores.get(i * n + j).copied().unwrap_or(0)
    }

    /// Position of a GPU by UUID.
    pub fn position(&self, uuid: &str) -> Option<usize> {
        self.gpus.iter().position(|g| g.uuid == uuid)
    }

    pub fn totals(&self) -> &NodeTotals {
        &self.totals
    }

    /// What a pod's `delta` on GPU `pos` counts there. What HAMi v2.10
    /// treats as inconsistent counts as `unreserved`, and the GPU takes
    /// no new pod while it does ([`super::checks::check_gpu`]): on a MIG
    /// GPU a share without a known instance, on any other GPU a share
    /// with one (whose slices mean nothing there).
    fn on_gpu(&self, pos: usize, delta: &Usage) -> Usage {
        let mut d = *delta;
        // A share that cannot be read is not judged for its instance.
        if d.unreadable > 0 {
            return d;
        }
        if let Some(gpu) = self.gpus.get(pos) {
            let inconsistent = if gpu.is_mig() {
                d.slices == 0
            } else {
                std::mem::take(&mut d.slices) != 0
            };
            if inconsistent {
                d.unreserved = d.unreserved.max(1);
            }
        }
        d
    }

    /// Whether GPU `pos` holds a pod whose MIG instance is inconsistent
    /// with the GPU's mode (see `on_gpu`).
    pub fn is_inconsistent(&self, pos: usize) -> bool {
        self.usage.get(pos).is_some_and(|u| u.unreserved > 0)
    }

    /// Adds `delta` to the usage of GPU `pos`.
    pub(crate) fn add_usage(&mut self, pos: usize, delta: &Usage) {
        let delta = &self.on_gpu(pos, delta);
        if let Some(u) = self.usage.get_mut(pos) {
            u.add(delta);
            self.totals.slots_used += u64::from(delta.slots);
            self.totals.cores_used += u64::from(delta.cores);
            self.totals.mem_used_mib += u64::from(delta.mem_mib);
        }
    }

    /// Removes `delta` from the usage of GPU `pos`.
    pub(crate) fn sub_usage(&mut self, pos: usize, delta: &Usage) {
        let delta = &self.on_gpu(pos, delta);
        if let Some(u) = self.usage.get_mut(pos) {
            let before = *u;
            u.sub(delta);
            self.totals.slots_used -= u64::from(before.slots - u.slots);
            self.totals.cores_used -= u64::from(before.cores - u.cores);
            self.totals.mem_used_mib -= u64::from(before.mem_mib - u.mem_mib);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_keeps_totals_in_step() {
        let cap = Usage {
            slices: 0,
            unreserved: 0,
            unreadable: 0,
            slots: 10,
            mem_mib: 8192,
            cores: 100,
        };
        let mut n = Node::new(
            "n",
            vec![
                Gpu::new("b", 1, "NVIDIA T4", cap),
                Gpu::new("a", 0, "NVIDIA T4", cap),
            ],
        );
        assert_eq!(n.gpus[0].uuid, "a");
        assert_eq!(n.totals().mem_mib, 16384);
        let d = Usage {
            slices: 0,
            unreserved: 0,
            unreadable: 0,
            slots: 1,
            mem_mib: 1000,
            cores: 30,
        };
        n.add_usage(1, &d);
        assert_eq!(n.totals().mem_used_mib, 1000);
        n.sub_usage(1, &d);
        n.sub_usage(1, &d);
        assert_eq!(*n.totals(), Node::new("x", n.gpus.to_vec()).totals);
        assert!(n.set_pair_score("a", "b", 7));
        assert_eq!(n.pair_score(1, 0), 7);
        assert!(!n.set_pair_score("a", "zz", 7));
    }

    #[test]
    fn modes_gpugate_can_share() {
        let mut g = Gpu::new("a", 0, "NVIDIA T4", Usage::default());
        assert!(g.is_shareable_mode());
        for (mode, shareable) in [
            ("hami-core", true),
            ("mps", true),
            ("mig", false),
            ("", true),
        ] {
            g.set_mode(mode, Vec::new());
            assert_eq!(g.mode(), mode);
            assert_eq!(g.is_shareable_mode(), shareable, "{mode}");
        }
    }
}
