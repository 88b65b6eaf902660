//! The cluster read once through the API server with the caller's own
//! kubeconfig and rights, into a [`Snapshot`], for `gpugate top` and
//! `gpugate explain` (no call into a running gpugate).

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ResourceQuota};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};

use super::Snapshot;
use super::node_topology::{NrtV1Alpha1, NrtV1Alpha2};

/// Nodes and Pods (both required), and what else the placement rules read
/// when it is served and readable with these rights: Namespaces (policy
/// selectors), ResourceQuotas (GPU quotas), PodDisruptionBudgets
/// (preemption victims) and NodeResourceTopology. The
/// names of what could not be read are returned beside.
pub async fn read_cluster(client: kube::Client) -> Result<(Snapshot, Vec<String>), kube::Error> {
    let lp = ListParams::default();
    let nodes = Api::<Node>::all(client.clone()).list(&lp).await?.items;
    let pods = Api::<Pod>::all(client.clone()).list(&lp).await?.items;
    let mut unread = Vec::new();
    let namespaces = match Api::<Namespace>::all(client.clone()).list(&lp).await {
        Ok(list) => list.items,
        Err(e) => {
            unread.push(format!("namespaces ({e})"));
            Vec::new()
        }
    };
    let quotas = match Api::<ResourceQuota>::all(client.clone()).list(&lp).await {
        Ok(list) => list.items,
        Err(e) => {
            unread.push(format!("resourcequotas ({e})"));
            Vec::new()
        }
    };
    let budgets = match Api::<PodDisruptionBudget>::all(client.clone())
        .list(&lp)
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            unread.push(format!("poddisruptionbudgets ({e})"));
            Vec::new()
        }
    };
    let topologies = match Api::<NrtV1Alpha2>::all(client.clone()).list(&lp).await {
        Ok(list) => list.items.into_iter().map(|o| o.0).collect(),
        Err(_) => match Api::<NrtV1Alpha1>::all(client).list(&lp).await {
            Ok(list) => list.items.into_iter().map(|o| o.0).collect(),
            // Not served (no CRD: nothing to align), or not readable.
            Err(_) => Vec::new(),
        },
    };
    Ok((
        Snapshot {
            nodes,
            pods,
            namespaces,
            quotas,
            budgets,
            topologies,
        },
        unread,
    ))
}
