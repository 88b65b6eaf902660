//! The namespace's ResourceQuotas that cover the pod (from
//! `ClusterView::quotas`), each kind of device the pod asks for against the
//! quotas on that kind's resource names: checked on the request before a
//! device is chosen (every candidate gets the same answer), and on the
//! allocation once the devices are chosen (a request in percent of a
//! device's memory has its MiB only then).

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::engine::{Allocation, KindAmounts, Memory, PodPlan, PodQuota};

use super::reason::QuotaRefusal;

/// The quotas that cover the pod, for each kind it asks for.
pub fn of_pod(
    view: &ClusterView,
    config: &Config,
    namespace: &str,
    facts: &crate::engine::ScopeFacts,
    plan: &PodPlan,
) -> PodQuota {
    let kinds = plan.request.device_kinds();
    view.quotas().pod_quota(namespace, facts, config, kinds).0
}

/// The request against the namespace's quotas. A request in percent of a
/// device's memory has no MiB yet: it is refused only when the namespace
/// has no memory of that kind left at all.
pub fn check_request(quota: &PodQuota, plan: &PodPlan) -> Result<(), QuotaRefusal> {
    if quota.is_empty() {
        return Ok(());
    }
    quota
        .check(&KindAmounts::of_request(&plan.request))
        .map_err(QuotaRefusal::Exceeded)?;
    for request in std::iter::once(&plan.request).chain(&plan.request.also) {
        let percent = request.containers.iter().any(|c| {
            c.gpu
                .is_some_and(|g| matches!(g.memory, Memory::Percent(_)))
        });
        if let Some(kind) = quota.of(request.device_kind).filter(|_| percent)
            && let Some((quota, used_mib, limit_mib)) = kind.memory_used_up()
        {
            return Err(QuotaRefusal::NoMemoryLeft {
                kind: request.device_kind,
                used_mib,
                limit_mib,
                quota: quota.to_string(),
            });
        }
    }
    Ok(())
}

/// The devices chosen against the namespace's quotas.
pub fn check_allocation(quota: &PodQuota, allocation: &Allocation) -> Result<(), QuotaRefusal> {
    quota
        .check(&KindAmounts::of_allocation(allocation))
        .map_err(QuotaRefusal::Exceeded)
}
