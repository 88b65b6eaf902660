//! The cluster view's metrics: what the watchers listed, missed and failed
//! at, by kind, and the view's counts, sampled on every scrape.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::view::ViewCounts;
use super::watch::WatchObserver;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// Watch errors and re-list drift, by kind; handed to the watchers.
#[derive(Clone, Debug, Default)]
pub struct WatchMetrics {
    pub errors: Family<KindLabels, Counter>,
    pub drift: Family<KindLabels, Counter>,
    pub objects: Family<KindLabels, Gauge>,
}

impl WatchMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_watch_errors",
            "API watch failures (retried with backoff), by kind",
            self.errors.clone(),
        );
        registry.register(
            "gpugate_ledger_drift",
            "Objects a re-list found gone that the watch had missed, by kind",
            self.drift.clone(),
        );
        registry.register(
            "gpugate_watch_listed_objects",
            "Objects in the last full list, by kind",
            self.objects.clone(),
        );
    }
}

impl WatchObserver for WatchMetrics {
    fn listed(&self, kind: &'static str, objects: usize, drift: usize) {
        let labels = KindLabels { kind };
        self.objects
            .get_or_create(&labels)
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.drift
            .get_or_create(&labels)
            .inc_by(u64::try_from(drift).unwrap_or(u64::MAX));
    }

    fn error(&self, kind: &'static str, _error: &str) {
        self.errors.get_or_create(&KindLabels { kind }).inc();
    }
}

/// Gauges sampled from the cluster view when metrics are scraped.
#[derive(Debug, Default)]
pub struct ViewGauges {
    synced: Gauge,
    current: Gauge,
    nodes: Gauge,
    gpus: Gauge,
    allocations: Gauge,
    unaccounted: Gauge,
    nodes_with_problems: Gauge,
    pod_groups: Gauge,
    node_topologies: Gauge,
    numa_zone_takes: Gauge,
    mig_inconsistent_gpus: Gauge,
    unreadable_allocations: Gauge,
    unreadable_blocked_gpus: Gauge,
    /// HAMi master's name for `current` (#2757, #2913).
    hami_cache_synced: Gauge,
    /// HAMi master's `hami_scheduler_is_leader` (#2757), set by
    /// [`super::leader::watch_lease`] (1 until it knows better).
    pub hami_is_leader: Gauge,
    /// How long node locks have been held lately (-1 until known).
    lock_hold: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The queue depth binpack pods get now.
    binpack_queue_depth: Gauge,
}

impl ViewGauges {
    pub fn register(&self, registry: &mut Registry) {
        for (name, help, gauge) in [
            (
                "gpugate_cluster_synced",
                "1 once every watched kind has been listed (or the snapshot loaded)",
                &self.synced,
            ),
            (
                "gpugate_cluster_view_current",
                "1 while the cluster view may be placed from: every gating watch listed since it last (re)started and the API server answering within api.staleAfterSeconds (or a snapshot); /readyz follows it",
                &self.current,
            ),
            (
                "gpugate_cluster_nodes",
                "Nodes known (with or without readable GPUs)",
                &self.nodes,
            ),
            (
                "gpugate_cluster_gpus",
                "GPUs registered on known nodes",
                &self.gpus,
            ),
            (
                "gpugate_ledger_allocations",
                "Pods the ledger holds GPUs for",
                &self.allocations,
            ),
            (
                "gpugate_ledger_unaccounted",
                "Held allocations not counted on any node (unknown node or GPU, unreadable)",
                &self.unaccounted,
            ),
            (
                "gpugate_cluster_nodes_with_problems",
                "Nodes whose inventory, cordon list or pair scores cannot be read",
                &self.nodes_with_problems,
            ),
            (
                "gpugate_cluster_pod_groups",
                "PodGroups (scheduling.x-k8s.io/v1alpha1) known; -1 until the API server serves the kind and gpugate has listed them",
                &self.pod_groups,
            ),
            (
                "gpugate_cluster_node_topologies",
                "NodeResourceTopology objects (topology.node.k8s.io) known; -1 while the API server does not serve the kind",
                &self.node_topologies,
            ),
            (
                "gpugate_numa_zone_takes_unsettled",
                "Aligned pods whose CPUs and memory gpugate counts against their NUMA zones because the node's NodeResourceTopology does not show them yet",
                &self.numa_zone_takes,
            ),
            (
                "gpugate_mig_inconsistent_gpus",
                "GPUs that take no new pod because a pod on them holds a MIG instance inconsistent with the GPU's mode (a MIG share without its instance, or an instance on a GPU not in MIG mode; HAMi v2.10 marks them unhealthy); each such pod gets a MigInconsistent event",
                &self.mig_inconsistent_gpus,
            ),
            (
                "gpugate_ledger_unreadable_allocations",
                "Pods whose allocation annotations (hami.io/vgpu-devices-allocated, hami.io/vgpu-mig-allocations) cannot be read; each gets an AllocationUnreadable event, and the GPUs it may hold take no new pod (fail closed)",
                &self.unreadable_allocations,
            ),
            (
                "hami_scheduler_cache_synced",
                "1 while the cluster view may be placed from (as gpugate_cluster_view_current; HAMi master's name)",
                &self.hami_cache_synced,
            ),
            (
                "hami_scheduler_is_leader",
                "1 on the replica whose kube-scheduler holds scheduler.leaderLease (or on every replica when none is set; HAMi master's name)",
                &self.hami_is_leader,
            ),
            (
                "gpugate_gpus_blocked_by_unreadable_allocations",
                "GPUs that take no new pod because a pod whose allocation cannot be read may hold them (CardAllocationUnreadable)",
                &self.unreadable_blocked_gpus,
            ),
        ] {
            registry.register(name, help, gauge.clone());
        }
        registry.register(
            "gpugate_node_lock_hold_seconds",
            "How long hami.io/mutex.lock values have been held lately: the median of the last 64 \
             seen released (from when the node watch first showed a value to when it showed it gone or another pod's); \
             -1 until 8 were",
            self.lock_hold.clone(),
        );
        registry.register(
            "gpugate_node_lock_queue_depth_binpack",
            "The lock holds a binpack pod may queue behind on a node and still be offered there: \
             nodeLock.queueDepth, or under auto 7 per second of gpugate_node_lock_hold_seconds, \
             at most four fifths of a bind's wait for its node (0 to 16)",
            self.binpack_queue_depth.clone(),
        );
    }

    /// Sets how long locks have been held lately and the queue depth
    /// binpack pods get from it.
    pub fn set_lock_queue(&self, hold: Option<std::time::Duration>, binpack_depth: u32) {
        self.lock_hold.set(hold.map_or(-1.0, |h| h.as_secs_f64()));
        self.binpack_queue_depth.set(i64::from(binpack_depth));
    }

    /// Sets the gauges from the view's counts.
    pub fn set(&self, synced: bool, current: bool, c: ViewCounts) {
        let set = |gauge: &Gauge, n: usize| {
            gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        set(&self.synced, usize::from(synced));
        set(&self.current, usize::from(current));
        set(&self.hami_cache_synced, usize::from(current));
        set(&self.nodes, c.nodes);
        set(&self.gpus, c.gpus);
        set(&self.allocations, c.allocations);
        set(&self.unaccounted, c.unaccounted);
        set(&self.nodes_with_problems, c.nodes_with_problems);
        set(&self.numa_zone_takes, c.numa_zone_takes);
        set(&self.mig_inconsistent_gpus, c.mig_inconsistent_gpus);
        set(&self.unreadable_allocations, c.unreadable_allocations);
        set(&self.unreadable_blocked_gpus, c.unreadable_blocked_gpus);
        for (gauge, count) in [
            (&self.pod_groups, c.pod_groups),
            (&self.node_topologies, c.node_topologies),
        ] {
            match count {
                Some(n) => set(gauge, n),
                None => {
                    gauge.set(-1);
                }
            }
        }
    }
}
