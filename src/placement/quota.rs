//! The namespace's ResourceQuotas on GPU memory and cores that cover the
//! pod (from `ClusterView::quotas`): checked on the request before a GPU is chosen
//! (every candidate gets the same answer), and on the allocation once the
//! GPUs are chosen (a request in percent of a GPU's memory has its MiB only
//! then).

use crate::engine::{Allocation, Memory, NamespaceQuota, PodPlan, QuotaAmount};

use super::reason::QuotaRefusal;

/// The request against the namespace's quota. A request in percent of a
/// GPU's memory has no MiB yet: it is refused only when the namespace has
/// no memory left at all.
pub fn check_request(quota: &NamespaceQuota, plan: &PodPlan) -> Result<(), QuotaRefusal> {
    if quota.is_empty() {
        return Ok(());
    }
    quota
        .check(QuotaAmount::of_request(&plan.request))
        .map_err(QuotaRefusal::Exceeded)?;
    let percent = plan.request.containers.iter().any(|c| {
        c.gpu
            .is_some_and(|g| matches!(g.memory, Memory::Percent(_)))
    });
    if percent && let Some((quota, used_mib, limit_mib)) = quota.memory_used_up() {
        return Err(QuotaRefusal::NoMemoryLeft {
            used_mib,
            limit_mib,
            quota: quota.to_string(),
        });
    }
    Ok(())
}

/// The GPUs chosen against the namespace's quota.
pub fn check_allocation(
    quota: &NamespaceQuota,
    allocation: &Allocation,
) -> Result<(), QuotaRefusal> {
    quota
        .check(QuotaAmount::of_allocation(allocation))
        .map_err(QuotaRefusal::Exceeded)
}
