//! GPUs, their capacity and their usage, and the nodes that hold them.

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
    /// Memory in MiB.
    pub mem_mib: u64,
    /// Compute in percent of the GPU's SMs (100 per whole GPU; HAMi's
    /// `devcore` may be higher with core scaling).
    pub cores: u32,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.slots = self.slots.saturating_add(other.slots);
        self.mem_mib = self.mem_mib.saturating_add(other.mem_mib);
        self.cores = self.cores.saturating_add(other.cores);
    }

    pub fn sub(&mut self, other: &Usage) {
        self.slots = self.slots.saturating_sub(other.slots);
        self.mem_mib = self.mem_mib.saturating_sub(other.mem_mib);
        self.cores = self.cores.saturating_sub(other.cores);
    }

    /// Element-wise maximum (an init container's peak against the app's sum).
    pub fn max(&self, other: &Usage) -> Usage {
        Usage {
            slots: self.slots.max(other.slots),
            mem_mib: self.mem_mib.max(other.mem_mib),
            cores: self.cores.max(other.cores),
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub uuid: String,
    /// NVML index; GPUs on a node are kept sorted by it.
    pub index: u32,
    /// Model string, e.g. `NVIDIA A100-SXM4-40GB`.
    pub model: String,
    pub numa: i32,
    pub healthy: bool,
    /// Listed in the node's `hami.io/device-cordon`.
    pub cordoned: bool,
    /// HAMi's device mode (`hami-core`, `mig`, `mps`; empty = `hami-core`);
    /// see [`Gpu::set_mode`].
    mode: String,
    /// Whether `mode` is one gpugate can share, precomputed: the check runs
    /// for every GPU of every candidate node, and reading the mode string
    /// there cost a cache miss per GPU (a third of a 5,000-node filter).
    shareable: bool,
    /// Slots (split count), memory (MiB) and cores the GPU offers.
    pub capacity: Usage,
    /// Lower-case words of `model`, precomputed for type selection.
    pub(crate) model_words: Vec<String>,
}

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
            model_words: model_words(&model),
            model,
            numa: 0,
            healthy: true,
            cordoned: false,
            mode: String::new(),
            shareable: true,
            capacity,
        }
    }

    /// HAMi's device mode (`hami-core`, `mig`, `mps`; empty = `hami-core`).
    pub fn mode(&self) -> &str {
        &self.mode
    }

    /// The mode, `hami-core` when the device plugin registered none.
    pub fn mode_or_default(&self) -> &str {
        if self.mode.is_empty() {
            "hami-core"
        } else {
            &self.mode
        }
    }

    /// Sets the mode and whether gpugate can share the GPU under it.
    pub fn set_mode(&mut self, mode: impl Into<String>) {
        self.mode = mode.into();
        self.shareable = matches!(self.mode.as_str(), "" | "hami-core" | "mps");
    }

    /// Whether gpugate can hand out slices of this GPU (MIG is not supported).
    pub fn is_shareable_mode(&self) -> bool {
        self.shareable
    }
}

/// A node's GPUs, their current usage and their pairwise topology scores.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    /// Sorted by `index`.
    pub gpus: Vec<Gpu>,
    /// `usage[i]` is what is allocated of `gpus[i]`.
    pub usage: Vec<Usage>,
    /// Row-major `gpus.len()²` matrix of pair scores (0 when unknown).
    pub(crate) pair_scores: Vec<i32>,
    pub(crate) totals: NodeTotals,
}

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
            totals.mem_mib += g.capacity.mem_mib;
        }
        Node {
            name: name.into(),
            usage: vec![Usage::default(); n],
            pair_scores: vec![0; n * n],
            gpus,
            totals,
        }
    }

    /// Sets the symmetric pair score of two GPUs (by UUID); unknown UUIDs are
    /// ignored and reported as `false`.
    pub fn set_pair_score(&mut self, a: &str, b: &str, score: i32) -> bool {
        let (Some(i), Some(j)) = (self.position(a), self.position(b)) else {
            return false;
        };
        let n = self.gpus.len();
        self.pair_scores[i * n + j] = score;
        self.pair_scores[j * n + i] = score;
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

    /// Adds `delta` to the usage of GPU `pos`.
    pub(crate) fn add_usage(&mut self, pos: usize, delta: &Usage) {
        if let Some(u) = self.usage.get_mut(pos) {
            u.add(delta);
            self.totals.slots_used += u64::from(delta.slots);
            self.totals.cores_used += u64::from(delta.cores);
            self.totals.mem_used_mib += delta.mem_mib;
        }
    }

    /// Removes `delta` from the usage of GPU `pos`.
    pub(crate) fn sub_usage(&mut self, pos: usize, delta: &Usage) {
        if let Some(u) = self.usage.get_mut(pos) {
            let before = *u;
            u.sub(delta);
            self.totals.slots_used -= u64::from(before.slots - u.slots);
            self.totals.cores_used -= u64::from(before.cores - u.cores);
            self.totals.mem_used_mib -= before.mem_mib - u.mem_mib;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_keeps_totals_in_step() {
        let cap = Usage {
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
            slots: 1,
            mem_mib: 1000,
            cores: 30,
        };
        n.add_usage(1, &d);
        assert_eq!(n.totals().mem_used_mib, 1000);
        n.sub_usage(1, &d);
        n.sub_usage(1, &d);
        assert_eq!(*n.totals(), Node::new("x", n.gpus.clone()).totals);
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
            g.set_mode(mode);
            assert_eq!(g.mode(), mode);
            assert_eq!(g.is_shareable_mode(), shareable, "{mode}");
        }
    }
}
