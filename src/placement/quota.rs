//! The namespace's ResourceQuota on GPU memory and cores: checked on the
//! request before a GPU is chosen (every candidate gets the same answer),
//! and on the allocation once the GPUs are chosen (a request in percent of
//! a GPU's memory has its MiB only then).

use crate::cluster::ClusterView;
use crate::engine::request::NvidiaConfig;
use crate::engine::{Allocation, Memory, PodPlan, QuotaAmount};

use super::reason::QuotaRefusal;

/// The request against the namespace's quota. A request in percent of a
/// GPU's memory has no MiB yet: it is refused only when the namespace has
/// no memory left at all.
pub fn check_request(
    view: &ClusterView,
    namespace: &str,
    plan: &PodPlan,
    nv: &NvidiaConfig,
) -> Result<(), QuotaRefusal> {
    let (quota, _) = view.quotas().quota(namespace, nv);
    if quota.limits.is_empty() {
        return Ok(());
    }
    quota
        .check(QuotaAmount::of_request(&plan.request))
        .map_err(QuotaRefusal::Exceeded)?;
    let percent = plan.request.containers.iter().any(|c| {
        c.gpu
            .is_some_and(|g| matches!(g.memory, Memory::Percent(_)))
    });
    if let Some(limit_mib) = quota.memory_limit_mib()
        && percent
        && quota.used.mem_mib >= limit_mib
    {
        return Err(QuotaRefusal::NoMemoryLeft {
            used_mib: quota.used.mem_mib,
            limit_mib,
        });
    }
    Ok(())
}

/// The GPUs chosen against the namespace's quota.
pub fn check_allocation(
    view: &ClusterView,
    namespace: &str,
    allocation: &Allocation,
    nv: &NvidiaConfig,
) -> Result<(), QuotaRefusal> {
    let (quota, _) = view.quotas().quota(namespace, nv);
    quota
        .check(QuotaAmount::of_allocation(allocation))
        .map_err(QuotaRefusal::Exceeded)
}
