//! `gpugate top`: each node's GPUs, what is in use and what is free, from
//! the cluster view the extender places with: a snapshot file, or the API
//! server read once with the caller's own kubeconfig (no call into a
//! running gpugate).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cluster::ClusterView;
use crate::simulate::{GpuRow, gpu_rows, gpu_table, render};

/// Per node and per GPU: slices, memory and cores in use, and free.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopReport {
    pub nodes: Vec<NodeRow>,
    pub gpus: Vec<GpuRow>,
    /// What each node can still take, per kind of device
    /// ([`crate::capacity`]).
    pub capacity: Vec<crate::capacity::NodeCapacity>,
    /// Every MIG instance pods hold, by node, GPU and placement.
    #[serde(rename = "migInstances", skip_serializing_if = "Vec::is_empty")]
    pub mig_instances: Vec<MigInstanceRow>,
    /// Nodes whose GPUs cannot be read, with why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub problems: BTreeMap<String, Vec<String>>,
}

/// One node's GPUs added up: (used, of).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub node: String,
    pub gpus: usize,
    pub slots: (u64, u64),
    #[serde(rename = "memMiB")]
    pub mem_mib: (u64, u64),
    pub cores: (u64, u64),
}

/// One MIG instance and the pod holding it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct MigInstanceRow {
    pub node: String,
    pub gpu: String,
    pub start: u32,
    pub size: u32,
    pub profile: String,
    /// `namespace/name`.
    pub pod: String,
}

/// What the view says of every node with GPUs.
pub fn top(view: &ClusterView) -> TopReport {
    let state = view.state();
    let nodes = state
        .nodes()
        .filter(|n| !n.gpus.is_empty())
        .map(|n| {
            let t = n.totals();
            NodeRow {
                node: n.name.clone(),
                gpus: n.gpus.len(),
                slots: (t.slots_used, t.slots),
                mem_mib: (t.mem_used_mib, t.mem_mib),
                cores: (t.cores_used, t.cores),
            }
        })
        .collect();
    let mut mig_instances: Vec<MigInstanceRow> = view
        .held_pod_allocations()
        .flat_map(|(namespace, pod, a)| {
            a.containers.iter().flatten().filter_map(move |g| {
                let m = g.mig.as_ref()?;
                Some(MigInstanceRow {
                    node: a.node.clone(),
                    gpu: g.uuid.clone(),
                    start: m.placement.start,
                    size: m.placement.size,
                    profile: m.profile.clone(),
                    pod: format!("{namespace}/{pod}"),
                })
            })
        })
        .collect();
    mig_instances.sort();
    TopReport {
        nodes,
        gpus: gpu_rows(state),
        capacity: crate::capacity::capacity(state),
        mig_instances,
        problems: view.node_problems().clone(),
    }
}

impl TopReport {
    /// Exactly one JSON object.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings and numbers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Tables for a person: nodes, then GPUs, each with what is free.
    pub fn to_table(&self) -> String {
        let pair = |(used, of): (u64, u64)| format!("{used}/{of}");
        let mut out = String::new();
        let mut rows = vec![vec![
            "NODE".to_string(),
            "GPUS".into(),
            "SLICES".into(),
            "MEM(MiB)".into(),
            "FREE MEM(MiB)".into(),
            "CORES".into(),
            "FREE CORES".into(),
        ]];
        for n in &self.nodes {
            rows.push(vec![
                n.node.clone(),
                n.gpus.to_string(),
                pair(n.slots),
                pair(n.mem_mib),
                n.mem_mib.1.saturating_sub(n.mem_mib.0).to_string(),
                pair(n.cores),
                n.cores.1.saturating_sub(n.cores.0).to_string(),
            ]);
        }
        let _ = writeln!(out, "NODES ({})", self.nodes.len());
        out.push_str(&render(&rows));
        let _ = writeln!(out, "\nGPUS ({})", self.gpus.len());
        out.push_str(&gpu_table(&self.gpus, true));
        let _ = writeln!(out, "\nCAPACITY ({})", self.capacity.len());
        out.push_str(&crate::capacity::table(&self.capacity, true));
        if !self.mig_instances.is_empty() {
            let mut rows = vec![vec![
                "NODE".to_string(),
                "GPU".into(),
                "PROFILE".into(),
                "SLICES".into(),
                "POD".into(),
            ]];
            for m in &self.mig_instances {
                rows.push(vec![
                    m.node.clone(),
                    m.gpu.clone(),
                    m.profile.clone(),
                    format!("{}-{}", m.start, (m.start + m.size).saturating_sub(1)),
                    m.pod.clone(),
                ]);
            }
            let _ = writeln!(out, "\nMIG INSTANCES ({})", self.mig_instances.len());
            out.push_str(&render(&rows));
        }
        if !self.problems.is_empty() {
            let _ = writeln!(
                out,
                "\nNODES WHOSE GPUS CANNOT BE READ ({})",
                self.problems.len()
            );
            for (node, why) in &self.problems {
                let _ = writeln!(out, "{node}: {}", why.join("; "));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Snapshot;

    /// The demo cluster: per GPU and per node, what its running pod holds
    /// and what is free.
    #[test]
    fn the_demo_cluster() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo/cluster.yaml");
        let (view, _) = Snapshot::load(&path).unwrap().to_view();
        let r = top(&view);
        let used: Vec<(&str, u64)> = r
            .gpus
            .iter()
            .filter(|g| g.mem_mib.0 > 0)
            .map(|g| (g.uuid.as_str(), g.mem_mib.0))
            .collect();
        assert_eq!(used.len(), 1, "{r:?}");
        let table = r.to_table();
        let line = table
            .lines()
            .find(|l| l.contains(used[0].0))
            .expect("the used GPU's row");
        assert!(line.contains(&format!("{}/", used[0].1)), "{line}");
        assert!(table.starts_with("NODES (2)"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["nodes"].as_array().unwrap().len(), 2);
        assert_eq!(json["gpus"].as_array().unwrap().len(), r.gpus.len());
        assert!(json.get("migInstances").is_none(), "no MIG GPU there");
    }

    /// examples/mig: the running pod's 3g.20gb instance on slices 0-3, in
    /// the table and the JSON.
    #[test]
    fn mig_instances_are_listed_with_their_pods() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mig/cluster.yaml");
        let (view, _) = Snapshot::load(&path).unwrap().to_view();
        let r = top(&view);
        assert_eq!(r.mig_instances.len(), 1, "{r:?}");
        let m = &r.mig_instances[0];
        assert_eq!(
            (
                m.node.as_str(),
                m.gpu.as_str(),
                m.profile.as_str(),
                m.start,
                m.size
            ),
            ("mig-1", "GPU-mig-1-0", "3g.20gb", 0, 4)
        );
        let table = r.to_table();
        let line = table
            .lines()
            .skip_while(|l| !l.starts_with("MIG INSTANCES (1)"))
            .nth(2)
            .expect("the instance's row");
        assert!(
            line.contains("3g.20gb") && line.contains("0-3") && line.contains(&m.pod),
            "{line}"
        );
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["migInstances"][0]["profile"], "3g.20gb");
    }
}
