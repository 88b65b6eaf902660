//! The per-GPU checks with their reason codes, in HAMi's order
//! (hami-compat.md 5.4.3): whether one GPU can take one container's share,
//! and what it takes; and which GPUs a container may take at all
//! ([`ZoneRule`], NUMA alignment).

use super::device::{Gpu, Usage};
use super::reason::Reason;
use super::request::GpuRequest;
use super::selection::Selection;

/// The per-GPU checks, in HAMi's order; the first failure is the reason.
/// `mutex`: the GPU policy takes only idle GPUs (`GpuPolicy::is_mutex`,
/// read once by the caller, not per GPU: inlined here, the compiler
/// sometimes left the policy's match in the loop, 4 instructions a GPU).
/// Inlined: it runs for every GPU of every candidate node, and a call
/// per GPU cost a fifth of a 5,000-node evaluation's instructions
/// (docs/benchmarks.md, "Counted, not timed").
#[inline(always)]
pub fn check_gpu(
    gpu: &Gpu,
    used: &Usage,
    req: &GpuRequest,
    selection: &Selection,
    mutex: bool,
) -> Result<Usage, Reason> {
    if !gpu.healthy {
        return Err(Reason::CardNotHealth);
    }
    // What a pod holds here cannot be read: fail closed.
    if used.unreadable > 0 {
        return Err(Reason::CardAllocationUnreadable);
    }
    // A GPU holding a pod whose MIG instance is inconsistent with it is
    // unhealthy, as HAMi v2.10 marks it (`Node::is_inconsistent`).
    if used.unreserved > 0 {
        return Err(Reason::CardNotHealth);
    }
    if gpu.cordoned {
        return Err(Reason::CardCordoned);
    }
    if !selection.accepts_model(gpu) {
        return Err(Reason::CardTypeMismatch);
    }
    if !selection.accepts_uuid(gpu) {
        return Err(Reason::CardUuidMismatch);
    }
    let cap = &gpu.capacity;
    if used.slots >= cap.slots {
        return Err(Reason::CardTimeSlicingExhausted);
    }
    if mutex && used.slots > 0 {
        return Err(Reason::ExclusiveDeviceAllocateConflict);
    }
    let mem = req.mem_on(u64::from(cap.mem_mib));
    if u64::from(cap.mem_mib.saturating_sub(used.mem_mib)) < mem {
        return Err(Reason::CardInsufficientMemory);
    }
    if cap.cores.saturating_sub(used.cores) < req.cores {
        return Err(Reason::CardInsufficientCore);
    }
    if cap.cores == 100 && req.cores == 100 && used.slots > 0 {
        return Err(Reason::ExclusiveDeviceAllocateConflict);
    }
    if cap.cores != 0 && used.cores >= cap.cores && req.cores == 0 {
        return Err(Reason::CardComputeUnitsExhausted);
    }
    if gpu.is_mig() {
        return mig_take(gpu, used, mem, selection).ok_or(Reason::CardMigTopologyInfeasible);
    }
    Ok(Usage {
        slices: 0,
        unreserved: 0,
        unreadable: 0,
        slots: 1,
        // At most the GPU's own memory, checked above.
        mem_mib: u32::try_from(mem).unwrap_or(u32::MAX),
        cores: req.cores,
    })
}

/// A MIG GPU's share for `mem` MiB, as HAMi v2.10 chooses it: the first
/// profile in its order (least memory, then fewest slices) whose memory
/// holds the request and that has a placement free of the instances
/// `used` shows, in its placement order; it takes one slot, the profile's
/// memory and cores, and the placement's slices. Kept out of line, so
/// that `check_gpu` stays small enough to be inlined for the other GPUs.
#[inline(never)]
fn mig_take(gpu: &Gpu, used: &Usage, mem: u64, selection: &Selection) -> Option<Usage> {
    selection
        .mig_profiles_holding(gpu, mem)
        .find_map(|(p, masks)| {
            masks
                .iter()
                .find(|mask| *mask & used.slices == 0)
                .map(|&mask| Usage {
                    slots: 1,
                    mem_mib: p.memory_mib,
                    cores: p.cores,
                    slices: mask,
                    unreserved: 0,
                    unreadable: 0,
                })
        })
}

/// Which GPUs of the node a container may take: NUMA alignment
/// ([`super::align`]) keeps a container's GPUs in its zone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ZoneRule {
    /// Any GPU of the node.
    #[default]
    Any,
    /// Only GPUs on this NUMA node (and GPUs whose NUMA node is unknown,
    /// a negative id: the kubelet aligns them with any zone).
    Only(i32),
    /// Left out of this fit (a check of the containers before it).
    Skip,
}

impl ZoneRule {
    /// Whether a container under this rule may take `gpu`.
    pub fn allows(self, gpu: &Gpu) -> bool {
        match self {
            ZoneRule::Any => true,
            ZoneRule::Only(zone) => gpu.numa == zone || gpu.numa < 0,
            ZoneRule::Skip => false,
        }
    }
}

/// Whether `gpu` could hold one slice of `req` with nothing on it: its
/// memory and cores, or on a MIG GPU a profile the pod may get with that
/// much memory. Health, cordon, model and mode are the caller's.
pub fn holds_when_empty(gpu: &Gpu, req: &GpuRequest, selection: &Selection) -> bool {
    let cap = &gpu.capacity;
    let mem = req.mem_on(u64::from(cap.mem_mib));
    if gpu.is_mig() {
        selection.mig_profiles_holding(gpu, mem).next().is_some()
    } else {
        mem <= u64::from(cap.mem_mib) && req.cores <= cap.cores
    }
}
