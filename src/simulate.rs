//! `gpugate simulate`: place pods one after another on a cluster snapshot and
//! show where each lands, or why it cannot, and what every GPU holds after.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use jiff::Timestamp;

use crate::cluster::convert::pod_name;
use crate::cluster::snapshot::snapshot_pod_key;
use crate::cluster::{ClusterView, Snapshot, StateReport};
use crate::config::Config;
use crate::engine::{Allocation, ClusterState};
use crate::placement::{self, PodToPlace, Verdict};

/// The outcome of a simulation, in the shape `--output json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub placements: Vec<Placement>,
    pub unschedulable: Vec<Unschedulable>,
    /// Pods that ask for no GPU: gpugate leaves them to other schedulers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Snapshot objects that could not be used (unregistered nodes, pods
    /// whose allocation annotations are unreadable).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub gpus: Vec<GpuRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub pod: String,
    pub node: String,
    /// HAMi's node score of the chosen node before the pod (0..=30).
    pub score: f64,
    pub devices: Vec<PlacedDevice>,
    /// The NUMA zone of each aligned container, by name (on nodes whose
    /// kubelet aligns the pod).
    #[serde(rename = "numaZones", skip_serializing_if = "BTreeMap::is_empty")]
    pub numa_zones: BTreeMap<String, i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacedDevice {
    pub container: String,
    pub uuid: String,
    #[serde(rename = "memMiB")]
    pub mem_mib: u64,
    pub cores: u32,
    /// On a MIG GPU, the instance: `2g.10gb@2-3` (profile, then the
    /// memory slices it occupies).
    #[serde(rename = "migInstance", skip_serializing_if = "Option::is_none")]
    pub mig: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unschedulable {
    pub pod: String,
    /// Its request in words (`explain`'s), with a chip's template and
    /// grouping rule.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<String>,
    /// Why each node was rejected.
    pub reasons: BTreeMap<String, String>,
    /// Set when the pod itself is invalid (then `reasons` is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One GPU's use: (used, of) each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuRow {
    pub node: String,
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub slots: (u32, u32),
    #[serde(rename = "memMiB")]
    pub mem_mib: (u64, u64),
    pub cores: (u32, u32),
}

/// Places `pods` in order on the snapshot, as `serve --cluster` would
/// place them one after another (`/filter`, then the best node under the
/// node policy, then `/bind`): through the same placement rules, namespace
/// quotas and gang groups included, at `now`.
pub fn simulate(cluster: &Snapshot, pods: &[Pod], config: &Config, now: Timestamp) -> Report {
    let (
        mut view,
        StateReport {
            unregistered_nodes,
            unaccounted_pods,
        },
    ) = cluster.to_view();
    let mut report = Report {
        placements: Vec::new(),
        unschedulable: Vec::new(),
        skipped: Vec::new(),
        warnings: unregistered_nodes
            .into_iter()
            .chain(unaccounted_pods)
            .collect(),
        gpus: Vec::new(),
    };
    // The pods exist before they are placed, as a watch would show them
    // pending: a gang group among them is placed all or nothing.
    for (i, pod) in pods.iter().enumerate() {
        view.upsert_pod(&snapshot_pod_key(pod, "pods", i), pod);
    }
    for (i, pod) in pods.iter().enumerate() {
        let name = pod_name(pod);
        let pod = match PodToPlace::read(pod.clone(), config, &view) {
            Ok(pod) => pod,
            Err(e) => {
                report.unschedulable.push(Unschedulable {
                    pod: name,
                    asks: Vec::new(),
                    reasons: BTreeMap::new(),
                    error: Some(e.to_string()),
                });
                continue;
            }
        };
        let key = snapshot_pod_key(pod.pod(), "pods", i);
        match place_one(&mut view, config, &pod, &key, now) {
            Placed::NoGpus => report.skipped.push(name),
            Placed::On(node, score, allocation) => {
                let plan = &pod.plan;
                let devices = plan
                    .request
                    .containers
                    .iter()
                    .zip(&allocation.containers)
                    .flat_map(|(c, grants)| {
                        grants.iter().map(|g| PlacedDevice {
                            container: c.name.clone(),
                            uuid: g.uuid.clone(),
                            mem_mib: g.mem_mib,
                            cores: g.cores,
                            mig: g.mig.as_ref().map(|m| {
                                let end = m.placement.start + m.placement.size.saturating_sub(1);
                                format!("{}@{}-{end}", m.profile, m.placement.start)
                            }),
                        })
                    })
                    .collect();
                let numa_zones = allocation
                    .numa
                    .iter()
                    .flat_map(|g| plan.request.containers.iter().zip(&g.zones))
                    .filter_map(|(c, z)| Some((c.name.clone(), (*z)?)))
                    .collect();
                report.placements.push(Placement {
                    pod: name,
                    node,
                    score: (score * 100.0).round() / 100.0,
                    devices,
                    numa_zones,
                });
            }
            Placed::Nowhere(reasons) => report.unschedulable.push(Unschedulable {
                pod: name,
                asks: crate::placement::words::request_words(&pod.plan, config),
                reasons,
                error: None,
            }),
        }
    }
    report.gpus = gpu_rows(view.state());
    report
}

enum Placed {
    NoGpus,
    On(String, f64, Allocation),
    Nowhere(BTreeMap<String, String>),
}

/// The pod's verdict on every node, then a reservation on the best one,
/// settled at once (as a standalone bind does).
fn place_one(
    view: &mut ClusterView,
    config: &Config,
    pod: &PodToPlace,
    key: &str,
    now: Timestamp,
) -> Placed {
    let verdicts = match placement::judge(view, config, pod, None, now) {
        Verdict::NoGpus => return Placed::NoGpus,
        Verdict::Everywhere(reason) => {
            let text = reason.to_string();
            return Placed::Nowhere(
                view.state()
                    .nodes()
                    .map(|n| (n.name.clone(), text.clone()))
                    .collect(),
            );
        }
        Verdict::Nodes(v) => v,
    };
    let Some(best) = verdicts.best() else {
        return Placed::Nowhere(
            verdicts
                .rejected
                .iter()
                .map(|(n, r)| (n.clone(), r.to_string()))
                .collect(),
        );
    };
    let (node, score) = (best.node.clone(), best.score);
    match placement::reserve(view, config, pod, key, &node, now) {
        Ok((allocation, reservation)) => {
            reservation.settle(view);
            Placed::On(node, score, allocation)
        }
        Err(e) => Placed::Nowhere(BTreeMap::from([(node, e.to_string())])),
    }
}

/// Every GPU of the state with what is used of it and what it has.
pub fn gpu_rows(state: &ClusterState) -> Vec<GpuRow> {
    state
        .nodes()
        .flat_map(|n| {
            n.gpus.iter().zip(&n.usage).map(|(g, u)| GpuRow {
                node: n.name.clone(),
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                slots: (u.slots, g.capacity.slots),
                mem_mib: (u64::from(u.mem_mib), u64::from(g.capacity.mem_mib)),
                cores: (u.cores, g.capacity.cores),
            })
        })
        .collect()
}

impl Report {
    /// Exactly one JSON object.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings and numbers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A table for a person.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let mut rows = vec![vec![
            "POD".to_string(),
            "NODE".into(),
            "SCORE".into(),
            "CONTAINER".into(),
            "GPU".into(),
            "MEM(MiB)".into(),
            "CORES".into(),
            "NUMA".into(),
        ]];
        for p in &self.placements {
            for (i, d) in p.devices.iter().enumerate() {
                let first = i == 0;
                rows.push(vec![
                    if first { p.pod.clone() } else { String::new() },
                    if first { p.node.clone() } else { String::new() },
                    if first {
                        format!("{:.2}", p.score)
                    } else {
                        String::new()
                    },
                    d.container.clone(),
                    match &d.mig {
                        Some(m) => format!("{} ({m})", d.uuid),
                        None => d.uuid.clone(),
                    },
                    d.mem_mib.to_string(),
                    d.cores.to_string(),
                    p.numa_zones
                        .get(&d.container)
                        .map_or_else(|| "-".to_string(), i32::to_string),
                ]);
            }
        }
        let _ = writeln!(out, "PLACEMENTS ({})", self.placements.len());
        out.push_str(&render(&rows));
        if !self.unschedulable.is_empty() {
            let mut rows = vec![vec!["POD".to_string(), "NODE".into(), "REASON".into()]];
            for u in &self.unschedulable {
                if let Some(e) = &u.error {
                    rows.push(vec![u.pod.clone(), "-".into(), e.clone()]);
                }
                for ask in &u.asks {
                    rows.push(vec![u.pod.clone(), "(asks)".into(), ask.clone()]);
                }
                let named = !u.asks.is_empty();
                for (i, (node, reason)) in u.reasons.iter().enumerate() {
                    let pod = if i == 0 && !named {
                        u.pod.clone()
                    } else {
                        String::new()
                    };
                    rows.push(vec![pod, node.clone(), reason.clone()]);
                }
            }
            let _ = writeln!(out, "\nUNSCHEDULABLE ({})", self.unschedulable.len());
            out.push_str(&render(&rows));
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(
                out,
                "\nSKIPPED, NO GPU REQUEST: {}",
                self.skipped.join(", ")
            );
        }
        let _ = writeln!(out, "\nGPU USAGE");
        out.push_str(&gpu_table(&self.gpus, false));
        if !self.warnings.is_empty() {
            let _ = writeln!(out, "\nWARNINGS");
            for w in &self.warnings {
                let _ = writeln!(out, "  {w}");
            }
        }
        out
    }
}

/// The GPUs as a table: slices, memory and cores used of what each has,
/// and with `free`, the memory and cores left.
pub(crate) fn gpu_table(gpus: &[GpuRow], free: bool) -> String {
    let mut header = vec!["NODE", "INDEX", "GPU", "MODEL", "SLICES", "MEM(MiB)"];
    if free {
        header.push("FREE MEM(MiB)");
    }
    header.push("CORES");
    if free {
        header.push("FREE CORES");
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for g in gpus {
        let mut row = vec![
            g.node.clone(),
            g.index.to_string(),
            g.uuid.clone(),
            g.model.clone(),
            format!("{}/{}", g.slots.0, g.slots.1),
            format!("{}/{}", g.mem_mib.0, g.mem_mib.1),
        ];
        if free {
            row.push(g.mem_mib.1.saturating_sub(g.mem_mib.0).to_string());
        }
        row.push(format!("{}/{}", g.cores.0, g.cores.1));
        if free {
            row.push(g.cores.1.saturating_sub(g.cores.0).to_string());
        }
        rows.push(row);
    }
    render(&rows)
}

/// Left-aligned columns separated by two spaces.
pub(crate) fn render(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            line.push_str(cell);
            if c + 1 < r.len() {
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
