//! The per-GPU checks with their reason codes, in HAMi's order
//! (hami-compat.md 5.4.3): whether one GPU can take one container's share,
//! and what it takes; and which GPUs a container may take at all
//! ([`ZoneRule`], NUMA alignment).

use super::device::{Gpu, Usage};
use super::policy::GpuPolicy;
use super::reason::Reason;
use super::request::GpuRequest;
use super::selection::Selection;

/// The per-GPU checks, in HAMi's order; the first failure is the reason.
/// Inlined: it runs for every GPU of every candidate node.
#[inline]
pub fn check_gpu(
    gpu: &Gpu,
    used: &Usage,
    req: &GpuRequest,
    selection: &Selection,
    policy: GpuPolicy,
) -> Result<Usage, Reason> {
    if !gpu.healthy {
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
    if policy.is_mutex() && used.slots > 0 {
        return Err(Reason::ExclusiveDeviceAllocateConflict);
    }
    let mem = req.mem_on(cap.mem_mib);
    if cap.mem_mib.saturating_sub(used.mem_mib) < mem {
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
    Ok(Usage {
        slots: 1,
        mem_mib: mem,
        cores: req.cores,
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
