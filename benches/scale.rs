//! Scheduling throughput at scale: gpugate (webhooks + extender + binds)
//! behind kube-scheduler, against kube-scheduler alone, on the e2e suite's
//! real etcd, kube-apiserver and kube-scheduler (docs/e2e.md,
//! docs/benchmarks.md).
//!
//! Run: `cargo bench --bench scale -- --nodes 1000 --pods 2000 --policy binpack`
//! (`-- --help` lists the flags). One run:
//!
//! 1. starts the control plane as the e2e suite does (deploy/'s RBAC,
//!    config, webhooks and KubeSchedulerConfiguration, gpugate built in the
//!    bench profile);
//! 2. creates N nodes of 8 × V100 32 GB split 10 ways, 32 at a time, and
//!    waits until gpugate's `gpugate_cluster_nodes` shows N;
//! 3. starts the simulated device plugin with its Allocate delay;
//! 4. runs the phases, by default the reference first:
//!    - reference: kube-scheduler alone (deploy/'s configuration without
//!      the extender, its profile named `default-scheduler`, the same
//!      client QPS and burst), M plain pods (cpu 100m, memory 64Mi) that
//!      the webhook leaves alone;
//!    - gpugate: deploy/'s kube-scheduler with the extender, M pods of
//!      1 GPU, 4096 MiB, 20 cores through the webhooks, node policy binpack
//!      or spread (`hami.io/node-scheduler-policy`);
//!
//!    each phase creates its M pods with 64 clients at once and measures,
//!    per pod, create returned → first seen bound (a watch), kube-scheduler's
//!    `scheduler_schedule_attempts_total` and gpugate's `gpugate_bind_total`
//!    (deltas over the phase); a gpugate phase then checks every GPU
//!    against its capacity and gpugate's ledger against the annotations;
//!    the pods are deleted before the next phase;
//! 5. prints a markdown table with the ratio gpugate / reference.
//!
//! It exits non-zero if a pod was still unbound at the deadline, a GPU was
//! over-committed or the ledger disagreed with the annotations. The
//! processes' logs stay in the work directory it prints.

#[allow(dead_code)]
#[path = "../tests/e2e/burst.rs"]
mod burst;
#[allow(dead_code)]
#[path = "../tests/e2e/control_plane.rs"]
mod control_plane;
#[path = "support/costs.rs"]
mod costs;
#[allow(dead_code)]
#[path = "../tests/e2e/device_plugin.rs"]
mod device_plugin;
#[allow(dead_code)]
#[path = "../tests/e2e/fixtures.rs"]
mod fixtures;
#[allow(dead_code)]
#[path = "../tests/e2e/http.rs"]
mod http;
#[allow(dead_code)]
#[path = "../tests/e2e/manifests.rs"]
mod manifests;
#[allow(dead_code)]
#[path = "../tests/e2e/pki.rs"]
mod pki;
#[path = "support/proc_cpu.rs"]
mod proc_cpu;
#[allow(dead_code)]
#[path = "../tests/e2e/procs.rs"]
mod procs;
#[path = "support/protocol_replay.rs"]
mod protocol_replay;
#[allow(dead_code)]
#[path = "../tests/e2e/wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

use crate::burst::{Burst, Outcome, Placement, Workload};
use crate::control_plane::ControlPlane;

const NAMESPACE: &str = "scale-bench";
const NODE_LABEL_VALUE: &str = "scale";

const USAGE: &str = "\
usage: cargo bench --bench scale -- [flags]

  --nodes N            nodes of 8 x V100 32 GB split 10 (default 1000)
  --pods M             pods per phase (default 2000)
  --policy P           gpugate's node policy: binpack, spread or both (default binpack)
  --delay D            the simulated device plugin's Allocate delay (default 1s)
  --deadline D         longest wait for a phase's pods to be bound (default 15m)
  --order O            reference-first (default) or gpugate-first
  --no-reference       gpugate phases only
  --creators C         clients creating pods at once (default 64)
  --node-creators C    clients creating nodes at once (default 32)
  --scheduler-qps Q    kube-scheduler's client QPS, burst 2 x Q (default deploy/'s, 50)
  --filter-mode M      gpugate's scheduler.filterMode: top (deploy/'s), all or best
  --filter-top K       gpugate's scheduler.filterTopNodes (default gpugate's, 10)
  --queue-depth N      gpugate's scheduler.nodeLock.queueDepth: N or auto (default deploy/'s)
  --api-qps Q          gpugate's client-side limit api.qps, burst 2 x Q (default deploy/'s: none);
                       gpugate is restarted with it before the phases
  --protocol-floor     also kube-scheduler alone with HAMi's device-plugin protocol
                       replayed for each pod it binds, no gpugate (after the reference)
  --sample-depth       scrape gpugate's /metrics every second during its phases for its binpack
                       queue depth and lock hold (costs CPU: each scrape encodes every GPU's
                       series, so leave it off where rates are compared)
  --help               this text

Durations: 500ms, 1s, 2m; a bare number is seconds.";

#[derive(Debug)]
struct Args {
    nodes: usize,
    pods: usize,
    policies: Vec<String>,
    delay: Duration,
    deadline: Duration,
    reference_first: bool,
    reference: bool,
    creators: usize,
    node_creators: usize,
    /// kube-scheduler's client QPS (burst twice that); `None`: deploy/'s.
    scheduler_qps: Option<u32>,
    /// gpugate's `scheduler.filterMode`, when not deploy/'s.
    filter_mode: Option<String>,
    /// gpugate's `scheduler.filterTopNodes`, when not gpugate's default.
    filter_top: Option<u32>,
    /// gpugate's `scheduler.nodeLock.queueDepth`, when not deploy/'s.
    queue_depth: Option<String>,
    /// gpugate's `api.qps` (burst twice that), when not deploy/'s (none).
    api_qps: Option<u32>,
    /// A phase of kube-scheduler alone with HAMi's protocol replayed
    /// (`support/protocol_replay.rs`), after the reference.
    protocol_floor: bool,
    /// Sample gpugate's queue depth and hold during its phases.
    sample_depth: bool,
    /// The flags as given, for the report.
    given: Vec<String>,
}

fn duration(v: &str) -> Result<Duration, String> {
    let num = |s: &str| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| format!("not a duration: {v:?}"))
    };
    let secs = if let Some(ms) = v.strip_suffix("ms") {
        num(ms)? / 1000.0
    } else if let Some(s) = v.strip_suffix('s') {
        num(s)?
    } else if let Some(m) = v.strip_suffix('m') {
        num(m)? * 60.0
    } else {
        num(v)?
    };
    Ok(Duration::from_secs_f64(secs))
}

/// `None`: `--help`.
fn parse(raw: &[String]) -> Result<Option<Args>, String> {
    let mut a = Args {
        nodes: 1000,
        pods: 2000,
        policies: vec!["binpack".into()],
        delay: Duration::from_secs(1),
        deadline: Duration::from_secs(15 * 60),
        reference_first: true,
        reference: true,
        creators: 64,
        node_creators: 32,
        scheduler_qps: None,
        filter_mode: None,
        filter_top: None,
        queue_depth: None,
        api_qps: None,
        protocol_floor: false,
        sample_depth: false,
        given: Vec::new(),
    };
    let mut it = raw.iter();
    while let Some(arg) = it.next() {
        // cargo bench passes `--bench` to a harness-less bench.
        if arg == "--bench" {
            continue;
        }
        a.given.push(arg.clone());
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = || -> Result<String, String> {
            let v = match &inline {
                Some(v) => v.clone(),
                None => {
                    let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
                    a.given.push(v.clone());
                    v.clone()
                }
            };
            Ok(v)
        };
        let count = |v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag}: not a positive number: {v:?}"))
        };
        match flag {
            "--help" | "-h" => return Ok(None),
            "--nodes" => a.nodes = count(value()?)?,
            "--pods" => a.pods = count(value()?)?,
            "--creators" => a.creators = count(value()?)?,
            "--node-creators" => a.node_creators = count(value()?)?,
            "--scheduler-qps" => {
                a.scheduler_qps = Some(
                    u32::try_from(count(value()?)?).map_err(|_| format!("{flag}: too large"))?,
                )
            }
            "--api-qps" => {
                a.api_qps = Some(
                    u32::try_from(count(value()?)?).map_err(|_| format!("{flag}: too large"))?,
                )
            }
            "--delay" => a.delay = duration(&value()?)?,
            "--deadline" => a.deadline = duration(&value()?)?,
            "--policy" => {
                a.policies = match value()?.as_str() {
                    "binpack" => vec!["binpack".into()],
                    "spread" => vec!["spread".into()],
                    "both" => vec!["binpack".into(), "spread".into()],
                    other => {
                        return Err(format!("--policy: binpack, spread or both, not {other:?}"));
                    }
                }
            }
            "--order" => {
                a.reference_first = match value()?.as_str() {
                    "reference-first" => true,
                    "gpugate-first" => false,
                    other => {
                        return Err(format!(
                            "--order: reference-first or gpugate-first, not {other:?}"
                        ));
                    }
                }
            }
            "--no-reference" => a.reference = false,
            "--protocol-floor" => a.protocol_floor = true,
            "--sample-depth" => a.sample_depth = true,
            "--filter-mode" => {
                a.filter_mode = match value()?.as_str() {
                    "all" => Some("all".to_string()),
                    "best" => Some("best".to_string()),
                    "top" => Some("top".to_string()),
                    other => {
                        return Err(format!("--filter-mode: all, best or top, not {other:?}"));
                    }
                }
            }
            "--filter-top" => {
                let v = value()?;
                a.filter_top = Some(
                    v.parse()
                        .map_err(|_| format!("--filter-top: a whole number, not {v:?}"))?,
                );
            }
            "--queue-depth" => {
                let v = value()?;
                if v != "auto" && v.parse::<u32>().is_err() {
                    return Err(format!("--queue-depth: a whole number or auto, not {v:?}"));
                }
                a.queue_depth = Some(v);
            }
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --benches` runs bench targets without arguments; this one
    // takes minutes and starts a control plane, so it only runs when asked.
    if raw.is_empty() {
        println!("scale: not run without flags; `cargo bench --bench scale -- --help`");
        return ExitCode::SUCCESS;
    }
    let args = match parse(&raw) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("scale: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = std::env::temp_dir().join(format!("gpugate-scale-{}", std::process::id()));
    let result = runtime.block_on(async {
        // Ctrl-C drops the run, and with it the control plane's processes.
        tokio::select! {
            r = run(&args, &dir) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        }
    });
    // The logs stay; etcd's data does not (hundreds of MB at 1,000 nodes).
    let _ = std::fs::remove_dir_all(dir.join("etcd"));
    println!("scale: logs kept in {}", dir.join("logs").display());
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            println!("scale: FAILED (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("scale: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What one phase measured.
struct Row {
    label: String,
    /// kube-scheduler alone on plain pods: what the others are compared to.
    reference: bool,
    gpus: bool,
    outcome: Outcome,
    /// kube-scheduler's attempts by result, or why they are unknown.
    attempts: Result<BTreeMap<String, f64>, String>,
    /// gpugate's binds by `result/code`.
    binds: BTreeMap<String, f64>,
    placement: Placement,
    /// What each bound pod cost, or why it is unknown.
    costs: Result<costs::PerPod, String>,
    /// How long the simulated device plugin's node locks were held (gpugate
    /// phases).
    holds: Option<Holds>,
    /// What gpugate itself saw (gpugate phases): its binpack queue depth
    /// as it changed over the phase, and its lock hold at the end.
    seen: Option<GpugateSeen>,
}

/// gpugate's `gpugate_node_lock_queue_depth_binpack`, sampled every second
/// while a phase runs (`--sample-depth`) (each change with the second it was first seen and
/// the `gpugate_node_lock_hold_seconds` it came from), and the hold at the
/// end.
#[derive(Default)]
struct GpugateSeen {
    depths: Vec<(f64, f64, f64)>,
    hold_seconds: Option<f64>,
}

impl GpugateSeen {
    fn show(&self) -> String {
        let depths: Vec<String> = self
            .depths
            .iter()
            .map(|(at, d, hold)| format!("{d} from {at:.1} s ({hold:.2} s)"))
            .collect();
        format!(
            "binpack queue depth {} (lock hold, its median of the last 64, then); at the end {}",
            if depths.is_empty() {
                "not seen".to_string()
            } else {
                depths.join(", ")
            },
            self.hold_seconds
                .map_or("not seen".to_string(), |h| format!("{h:.2} s")),
        )
    }
}

/// Samples gpugate's binpack queue depth until `stop` is set.
async fn sample_depth(
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<(f64, f64, f64)> {
    let start = Instant::now();
    let mut seen: Vec<(f64, f64, f64)> = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let (depth, hold) = match http::metrics(port).await {
            Ok(text) => (
                http::gauge(&text, "gpugate_node_lock_queue_depth_binpack"),
                http::gauge(&text, "gpugate_node_lock_hold_seconds"),
            ),
            Err(_) => (None, None),
        };
        if let Some(d) = depth
            && seen.last().is_none_or(|(_, last, _)| *last != d)
        {
            seen.push((start.elapsed().as_secs_f64(), d, hold.unwrap_or(f64::NAN)));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    seen
}

/// The node locks released in a phase: how long each was held, from the
/// time its value names to its release (p50, p99), and the median of the
/// part after the device plugin saw the pod bound.
struct Holds {
    count: usize,
    p50: Duration,
    p99: Duration,
    after_bound_p50: Duration,
}

impl Holds {
    fn of(holds: &[device_plugin::LockHold]) -> Option<Holds> {
        let quantile = |mut v: Vec<Duration>, q: f64| {
            v.sort();
            v[((v.len() - 1) as f64 * q).round() as usize]
        };
        (!holds.is_empty()).then(|| Holds {
            count: holds.len(),
            p50: quantile(holds.iter().map(|h| h.held).collect(), 0.5),
            p99: quantile(holds.iter().map(|h| h.held).collect(), 0.99),
            after_bound_p50: quantile(holds.iter().map(|h| h.after_bound).collect(), 0.5),
        })
    }

    /// Nodes a rate needs when each node takes one pod per lock hold
    /// (Little's law on HAMi's per-node lock): pods/s × median hold.
    fn nodes_needed(&self, pods_per_second: f64) -> f64 {
        pods_per_second * self.p50.as_secs_f64()
    }

    fn show(&self) -> String {
        format!(
            "{} p50, {} p99 ({} after the bind was seen)",
            secs(self.p50),
            secs(self.p99),
            secs(self.after_bound_p50)
        )
    }
}

/// Which kube-scheduler runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scheduler {
    WithExtender,
    Alone,
}

async fn run(args: &Args, dir: &Path) -> anyhow::Result<bool> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let started = Instant::now();
    let Some(bin) = control_plane::build(&root)? else {
        bail!(
            "`go` is not installed; the benchmark builds etcd, kube-apiserver and kube-scheduler as the e2e suite does (docs/e2e.md)"
        );
    };
    let deployed = control_plane::render(&bin, &root, "cert-manager")?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    println!("scale: work dir {} (logs in logs/)", dir.display());
    let cp = ControlPlane::start(
        &bin,
        Path::new(env!("CARGO_BIN_EXE_gpugate")),
        dir,
        &deployed,
    )
    .await?;
    println!(
        "scale: etcd, kube-apiserver, gpugate and kube-scheduler up in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let names: Vec<String> = (0..args.nodes).map(|i| format!("scale-{i:05}")).collect();
    burst::create_nodes(&cp.admin, NODE_LABEL_VALUE, &names, args.node_creators).await?;
    let created = t.elapsed();
    wait_all_nodes(&cp, args.nodes).await?;
    println!(
        "scale: {} nodes created in {:.1} s ({} at a time), gpugate saw them all after {:.1} s",
        args.nodes,
        created.as_secs_f64(),
        args.node_creators,
        t.elapsed().as_secs_f64()
    );
    if args.filter_mode.is_some()
        || args.filter_top.is_some()
        || args.queue_depth.is_some()
        || args.api_qps.is_some()
    {
        set_scheduler_options(&cp, args).await?;
    }
    let plugin = device_plugin::DevicePlugin::start(cp.admin.clone(), args.delay);
    let names = std::sync::Arc::new(names);
    let mut replay_failures = 0;
    control_plane::ensure_namespace(&cp.admin, NAMESPACE).await?;

    let gpu_phases = args.policies.iter().map(|p| Workload::Gpu {
        node_policy: p.clone(),
    });
    let mut references = Vec::new();
    if args.reference {
        references.push(Workload::Plain);
    }
    if args.protocol_floor {
        let (annotations, labels) = protocol_replay::pod_metadata();
        references.push(Workload::Replayed {
            annotations,
            labels,
        });
    }
    // The references before or after gpugate's phases (`append` empties
    // `references`, so they run once).
    let mut phases: Vec<Workload> = Vec::new();
    if args.reference_first {
        phases.append(&mut references);
    }
    phases.extend(gpu_phases);
    phases.append(&mut references);

    // The same client limits for both kube-schedulers.
    let with_extender = match args.scheduler_qps {
        Some(qps) => {
            let mut c: serde_json::Value = serde_json::from_str(&cp.scheduler_config)?;
            c["clientConnection"]["qps"] = qps.into();
            c["clientConnection"]["burst"] = (2 * qps).into();
            serde_json::to_string_pretty(&c)?
        }
        None => cp.scheduler_config.clone(),
    };
    let reference_config = manifests::reference_scheduler_config(&with_extender)?;
    // deploy/'s kube-scheduler runs already, unless its QPS is changed.
    let mut running = args
        .scheduler_qps
        .is_none()
        .then_some(Scheduler::WithExtender);
    let mut rows = Vec::new();
    for (i, workload) in phases.iter().enumerate() {
        let want = match workload {
            Workload::Plain | Workload::Replayed { .. } => Scheduler::Alone,
            Workload::Gpu { .. } => Scheduler::WithExtender,
        };
        if Some(want) != running {
            cp.stop_scheduler();
            match want {
                Scheduler::Alone => {
                    cp.start_scheduler("kube-scheduler-reference", &reference_config)
                        .await?
                }
                Scheduler::WithExtender => {
                    cp.start_scheduler("kube-scheduler", &with_extender).await?
                }
            }
            running = Some(want);
        }
        // The replay runs for its own phase only, so that its pod watch
        // is not one more watcher in the others.
        let replay = matches!(workload, Workload::Replayed { .. }).then(|| {
            protocol_replay::Replay::start(cp.admin.clone(), NAMESPACE, args.delay, names.clone())
        });
        let after = match (workload, &replay) {
            (Workload::Plain, _) => None,
            (_, Some(r)) => Some(AfterBind {
                done: &r.done,
                failed: Some(&r.failed),
            }),
            _ => Some(AfterBind {
                done: &plugin.released,
                failed: None,
            }),
        };
        plugin.take_holds();
        let mut row = phase(&cp, args, workload, &format!("p{i}"), after).await?;
        if row.gpus {
            row.holds = Holds::of(&plugin.take_holds());
        }
        if let Some(replay) = replay {
            let failed = replay.failed.load(std::sync::atomic::Ordering::Relaxed);
            println!(
                "scale: the protocol replay made {} pods' requests ({failed} failed, {} watch errors)",
                replay.done.load(std::sync::atomic::Ordering::Relaxed),
                replay
                    .watch_errors
                    .load(std::sync::atomic::Ordering::Relaxed),
            );
            replay_failures += failed;
            replay.stop().await;
        }
        print_row_details(&row);
        let t = Instant::now();
        let gpus = matches!(workload, Workload::Gpu { .. });
        burst::delete_pods(
            &cp.admin,
            NAMESPACE,
            gpus.then_some(cp.gpugate_admin_port),
            Duration::from_secs(600),
        )
        .await?;
        println!(
            "scale: {} pods deleted in {:.1} s",
            row.outcome.created,
            t.elapsed().as_secs_f64()
        );
        rows.push(row);
    }
    println!(
        "scale: the simulated device plugin released {} node locks ({} errors)",
        plugin.released.load(std::sync::atomic::Ordering::Relaxed),
        plugin.errors.load(std::sync::atomic::Ordering::Relaxed)
    );
    // Allocates that gave a container another pod's devices, or none.
    let mistakes = plugin.mistakes();
    for m in mistakes.iter().take(10) {
        println!("scale: FAILED: {m}");
    }
    plugin.stop().await;
    if replay_failures > 0 {
        println!(
            "scale: FAILED: {replay_failures} pods' protocol replay failed, so the floor's costs are too low"
        );
    }

    let ok = replay_failures == 0
        && mistakes.is_empty()
        && rows.iter().all(|r| {
            r.outcome.unbound_count == 0
                && r.placement.overcommitted.is_empty()
                && r.placement.ledger_mismatch.is_none()
        });
    print_table(args, &rows);
    Ok(ok)
}

async fn phase(
    cp: &ControlPlane,
    args: &Args,
    workload: &Workload,
    prefix: &str,
    after: Option<AfterBind<'_>>,
) -> anyhow::Result<Row> {
    let gpus = matches!(workload, Workload::Gpu { .. });
    let profile = workload.profile();
    println!(
        "scale: phase {}: {} pods, {} creators; load average before: {}",
        workload.label(),
        args.pods,
        args.creators,
        load_average()
    );
    let sched_before = cp
        .scheduler_metrics()
        .await
        .map(|t| burst::schedule_attempts(&t, profile));
    let binds_before = burst::bind_outcomes(&http::metrics(cp.gpugate_admin_port).await?);
    let costs_before = costs::sample(cp).await;
    let settled_before = after.as_ref().map(AfterBind::settled);
    let profiles = control_plane::profiling().then(|| cpu_profiles(cp, prefix));
    let stop_sampler = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = (gpus && args.sample_depth)
        .then(|| tokio::spawn(sample_depth(cp.gpugate_admin_port, stop_sampler.clone())));
    let outcome = burst::run(
        &cp.admin,
        &Burst {
            ns: NAMESPACE.to_string(),
            prefix: prefix.to_string(),
            pods: args.pods,
            creators: args.creators,
            workload: workload.clone(),
            deadline: args.deadline,
        },
    )
    .await?;
    if let Some(p) = profiles {
        // Off the runtime's workers: the device plugin's releases run there.
        let _ = tokio::task::spawn_blocking(move || p.join()).await;
    }
    // The device plugin's work for the last pods bound (a lock release
    // each; the replay's requests for the floor) belongs to the phase: wait
    // for it before the costs are read (at most 60 s; a GPU pod's lock is
    // released a delay after its bind).
    if let (Some(after), Some(before)) = (&after, settled_before) {
        let want = before + outcome.bound as u64;
        let until = Instant::now() + Duration::from_secs(60);
        while after.settled() < want && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        match (
            want.saturating_sub(after.settled()),
            outcome.bound_at.last(),
        ) {
            (0, Some(last)) => println!(
                "scale: the work after the binds (device plugin or replay) ended {:.1} s after the last pod was bound",
                last.elapsed().as_secs_f64()
            ),
            (0, None) => {}
            (missing, _) => println!(
                "scale: gave up after 60 s on the work after the binds of {missing} pods; the costs below leave it out"
            ),
        }
    }
    let costs = match (costs_before, costs::sample(cp).await) {
        (Ok(before), Ok(after)) => Ok(costs::PerPod::of(&before, &after, outcome.bound)),
        (Err(e), _) | (_, Err(e)) => Err(format!("{e:#}")),
    };
    let attempts = match (sched_before, cp.scheduler_metrics().await) {
        (Ok(before), Ok(after)) => Ok(burst::delta(
            &burst::schedule_attempts(&after, profile),
            &before,
        )),
        (Err(e), _) | (_, Err(e)) => Err(format!("{e:#}")),
    };
    stop_sampler.store(true, std::sync::atomic::Ordering::Relaxed);
    let after_text = http::metrics(cp.gpugate_admin_port).await?;
    let seen = match sampler {
        Some(task) => Some(GpugateSeen {
            depths: task.await.unwrap_or_default(),
            hold_seconds: http::gauge(&after_text, "gpugate_node_lock_hold_seconds"),
        }),
        None => None,
    };
    let binds = burst::delta(&burst::bind_outcomes(&after_text), &binds_before);
    let all_bound = outcome.unbound_count == 0;
    let placement = burst::placement(
        &cp.admin,
        NAMESPACE,
        gpus,
        (gpus && all_bound).then_some(cp.gpugate_admin_port),
    )
    .await?;
    Ok(Row {
        label: workload.label(),
        reference: matches!(workload, Workload::Plain),
        gpus,
        outcome,
        attempts,
        binds,
        placement,
        costs,
        holds: None,
        seen,
    })
}

/// What a phase's bound pods set off after their bind, which belongs to the
/// phase: the simulated device plugin's lock releases, or the protocol
/// replay's sequences.
struct AfterBind<'a> {
    done: &'a std::sync::atomic::AtomicU64,
    /// Pods whose work failed for good (never done).
    failed: Option<&'a std::sync::atomic::AtomicU64>,
}

impl AfterBind<'_> {
    /// Pods whose work is done or failed for good.
    fn settled(&self) -> u64 {
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        load(self.done) + self.failed.map_or(0, load)
    }
}

/// `GPUGATE_PROFILE=1`: 10 s CPU profiles of kube-apiserver and
/// kube-scheduler, 4 s into the phase (`GPUGATE_PROFILE_AT=S`: S seconds
/// in, to see a long phase after its pods are created), written to
/// `profiles/<phase>-{apiserver,scheduler}.pb.gz` in the work directory
/// (read them with `go tool pprof -top FILE`), and of gpugate with `perf
/// record` when perf is installed (`<phase>-gpugate.perf.data`).
fn cpu_profiles(cp: &ControlPlane, prefix: &str) -> std::thread::JoinHandle<()> {
    let dir = cp.dir.join("profiles");
    let _ = std::fs::create_dir_all(&dir);
    let pki = |n: &str| cp.pki.path(n).display().to_string();
    let targets = [
        (
            format!("{prefix}-apiserver.pb.gz"),
            cp.api_port,
            vec![
                "--cacert".to_string(),
                pki("ca.crt"),
                "--cert".into(),
                pki("admin.crt"),
                "--key".into(),
                pki("admin.key"),
            ],
        ),
        (
            format!("{prefix}-scheduler.pb.gz"),
            cp.scheduler_port(),
            vec!["-k".to_string()],
        ),
    ];
    let gpugate = cp.gpugate.lock().unwrap().as_ref().map(|p| p.pid());
    let prefix = prefix.to_string();
    let at = match std::env::var("GPUGATE_PROFILE_AT") {
        Err(_) => 4,
        Ok(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("scale: GPUGATE_PROFILE_AT={s:?} is not whole seconds; profiling 4 s in");
            4
        }),
    };
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(at));
        // gpugate through `perf record` (flat: the bench profile keeps
        // symbols, not frame pointers), when perf is there.
        // `GPUGATE_PROFILE=dwarf`: with call graphs (build with
        // `CARGO_PROFILE_BENCH_DEBUG=line-tables-only`; costs gpugate CPU).
        let dwarf = std::env::var("GPUGATE_PROFILE").is_ok_and(|v| v == "dwarf");
        let perf = gpugate.and_then(|pid| {
            std::process::Command::new("perf")
                .args(["record", "-q", "-F", "499", "-p", &pid.to_string()])
                .args(if dwarf {
                    &["--call-graph", "dwarf"][..]
                } else {
                    &[]
                })
                .arg("-o")
                .arg(dir.join(format!("{prefix}-gpugate.perf.data")))
                .args(["--", "sleep", "10"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()
        });
        let running: Vec<_> = targets
            .into_iter()
            .filter_map(|(file, port, tls)| {
                std::process::Command::new("curl")
                    .args(["-s", "-o"])
                    .arg(dir.join(&file))
                    .args(tls)
                    .arg(format!(
                        "https://127.0.0.1:{port}/debug/pprof/profile?seconds=10"
                    ))
                    .spawn()
                    .ok()
            })
            .collect();
        for mut c in running.into_iter().chain(perf) {
            let _ = c.wait();
        }
    })
}

/// Writes gpugate's config file with `scheduler.filterMode`,
/// `scheduler.nodeLock.queueDepth` and `api.qps` set (those given) and
/// waits until gpugate has put the new version in force: it re-reads the
/// file every second, but reads `api` only at start, so with `api.qps` it
/// is restarted (and waited for until it sees every node again).
async fn set_scheduler_options(cp: &ControlPlane, args: &Args) -> anyhow::Result<()> {
    let (filter_mode, queue_depth) = (args.filter_mode.as_deref(), args.queue_depth.as_deref());
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&cp.gpugate_config)?;
    if let Some(mode) = filter_mode {
        config["scheduler"]["filterMode"] = mode.into();
    }
    if let Some(top) = args.filter_top {
        config["scheduler"]["filterTopNodes"] = top.into();
    }
    if let Some(depth) = queue_depth {
        config["scheduler"]["nodeLock"]["queueDepth"] = match depth.parse::<u32>() {
            Ok(holds) => holds.into(),
            Err(_) => depth.into(),
        };
    }
    if let Some(qps) = args.api_qps {
        config["api"]["qps"] = qps.into();
        config["api"]["burst"] = (2 * qps).into();
    }
    let loaded = |text: &str| http::gauge(text, "gpugate_config_loaded_timestamp_seconds");
    let before = loaded(&http::metrics(cp.gpugate_admin_port).await?);
    std::fs::write(
        cp.dir.join("gpugate.yaml"),
        serde_yaml_ng::to_string(&config)?,
    )?;
    if let Some(qps) = args.api_qps {
        cp.kill_gpugate();
        cp.start_gpugate().await?;
        wait_all_nodes(cp, args.nodes).await?;
        println!(
            "scale: gpugate restarted with api.qps {qps}, burst {}",
            2 * qps
        );
    }
    wait::eventually(
        "gpugate puts the new config in force",
        Duration::from_secs(30),
        || async {
            let text = http::metrics(cp.gpugate_admin_port)
                .await
                .map_err(|e| e.to_string())?;
            if loaded(&text) != before {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        },
    )
    .await?;
    println!(
        "scale: gpugate's scheduler.filterMode is now {} (filterTopNodes {}), nodeLock.queueDepth {}",
        filter_mode.unwrap_or("deploy/'s"),
        args.filter_top
            .map_or("gpugate's".to_string(), |k| k.to_string()),
        queue_depth.unwrap_or("deploy/'s")
    );
    Ok(())
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// (attempts per pod, failed attempts per pod), as text.
fn attempts_per_pod(row: &Row) -> (String, String) {
    match &row.attempts {
        Ok(a) => {
            let n = row.outcome.pods.max(1) as f64;
            let total: f64 = a.values().sum();
            let failed = total - a.get("scheduled").copied().unwrap_or(0.0);
            (format!("{:.2}", total / n), format!("{:.2}", failed / n))
        }
        Err(_) => ("?".into(), "?".into()),
    }
}

fn print_row_details(row: &Row) {
    let o = &row.outcome;
    println!(
        "scale:   {}: {}/{} bound ({} creates retried; all created after {:.1} s), {:.1} pods/s, \
         create→bound p50 {}, p99 {}, max {}",
        row.label,
        o.bound,
        o.pods,
        o.create_retries,
        o.create_span.as_secs_f64(),
        o.pods_per_second(),
        secs(o.quantile(0.5)),
        secs(o.quantile(0.99)),
        secs(o.max()),
    );
    match &row.attempts {
        Ok(a) => println!(
            "scale:   kube-scheduler attempts (scheduler_schedule_attempts_total): {}",
            burst::show(a)
        ),
        Err(e) => println!("scale:   kube-scheduler's metrics could not be read: {e}"),
    }
    if row.gpus {
        println!(
            "scale:   gpugate binds (gpugate_bind_total): {}",
            burst::show(&row.binds)
        );
        if let Some(h) = &row.holds {
            println!(
                "scale:   {} node locks held {}; at {:.1} pods/s one pod per hold and node needs {:.0} nodes",
                h.count,
                h.show(),
                o.pods_per_second(),
                h.nodes_needed(o.pods_per_second())
            );
        }
        if let Some(seen) = &row.seen {
            println!("scale:   gpugate saw: {}", seen.show());
        }
        let p = &row.placement;
        println!(
            "scale:   {} nodes used (min {}), {} GPUs; over-committed GPUs: {}; ledger = annotations: {}",
            p.nodes_used,
            burst::min_nodes(p.bound),
            p.gpus_used,
            if p.overcommitted.is_empty() {
                "none".to_string()
            } else {
                p.overcommitted.join("; ")
            },
            match (&p.ledger_mismatch, o.unbound_count) {
                (_, n) if n > 0 => "not checked (pods unbound)".to_string(),
                (None, _) => "yes".to_string(),
                (Some(m), _) => format!("NO: {m}"),
            }
        );
    } else {
        println!("scale:   {} nodes used", row.placement.nodes_used);
    }
    match &row.costs {
        Ok(c) => {
            let show = |m: &BTreeMap<String, f64>| {
                let mut v: Vec<_> = m.iter().collect();
                v.sort_by(|a, b| b.1.total_cmp(a.1));
                v.iter()
                    .map(|(k, n)| format!("{k} {n:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!("scale:   CPU ms per bound pod: {}", show(&c.cpu_ms));
            println!(
                "scale:   API requests per bound pod ({:.1}): {}",
                c.total_requests(),
                show(&c.requests)
            );
            println!(
                "scale:   watch events per bound pod ({:.1}): {}; KiB: {}",
                c.total_watch_events(),
                show(&c.watch_events),
                show(&c.watch_kib)
            );
            println!(
                "scale:   kube-apiserver's etcd requests per bound pod: {}",
                show(&c.etcd_requests)
            );
            if row.gpus {
                println!(
                    "scale:   extender calls per bound pod: {}; body bytes per call: {}",
                    show(&c.extender_calls),
                    show(&c.bytes_per_call)
                );
            }
        }
        Err(e) => println!("scale:   costs could not be sampled: {e}"),
    }
    if o.unbound_count > 0 {
        println!(
            "scale:   {} pods NOT bound by the deadline, e.g. {:?}",
            o.unbound_count, o.unbound
        );
    }
}

fn print_table(args: &Args, rows: &[Row]) {
    println!();
    println!(
        "Command: `cargo bench --bench scale -- {}`  ",
        args.given.join(" ")
    );
    println!(
        "Date: {}; {} nodes × 8 {} (split {}), {} pods per phase created by {} clients, \
         device plugin Allocate delay {} ms, kube-scheduler client QPS {} burst {}, \
         gpugate filterMode {}, queueDepth {}, client limit {}, deadline {} s",
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or(jiff::Timestamp::now()),
        args.nodes,
        burst::MODEL,
        burst::SPLIT,
        args.pods,
        args.creators,
        args.delay.as_millis(),
        args.scheduler_qps.unwrap_or(manifests::SCHEDULER_QPS),
        args.scheduler_qps
            .map_or(manifests::SCHEDULER_BURST, |q| 2 * q),
        args.filter_mode.as_deref().unwrap_or("deploy/'s"),
        args.queue_depth.as_deref().unwrap_or("deploy/'s"),
        args.api_qps
            .map_or("none (deploy/'s)".to_string(), |q| format!(
                "api.qps {q} burst {}",
                2 * q
            )),
        args.deadline.as_secs(),
    );
    println!("Load average at the end (1, 5, 15 min): {}", load_average());
    println!();
    println!(
        "| phase | bound | pods/s | create→bound p50 | p99 | max | attempts/pod | failed attempts/pod | nodes used (min) | gpugate binds by code | gpugate's wait for its client limit per pod | node lock held p50, p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let o = &r.outcome;
        let (attempts, failed) = attempts_per_pod(r);
        println!(
            "| {} | {}/{} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            o.bound,
            o.pods,
            o.pods_per_second(),
            secs(o.quantile(0.5)),
            secs(o.quantile(0.99)),
            secs(o.max()),
            attempts,
            failed,
            if r.gpus {
                format!(
                    "{} ({})",
                    r.placement.nodes_used,
                    burst::min_nodes(r.placement.bound)
                )
            } else {
                format!("{} (—)", r.placement.nodes_used)
            },
            if r.gpus {
                burst::show(&r.binds)
            } else {
                "—".to_string()
            },
            match (&r.costs, r.gpus) {
                (Ok(c), true) => format!("{:.2} ms", c.client_wait_ms),
                (Err(_), true) => "unknown".to_string(),
                (_, false) => "—".to_string(),
            },
            r.holds.as_ref().map_or("—".to_string(), |h| format!(
                "{}, {}",
                secs(h.p50),
                secs(h.p99)
            )),
        );
    }
    if let Some(reference) = rows.iter().find(|r| r.reference) {
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.3}×", a / b)
            } else {
                "—".to_string()
            }
        };
        for r in rows.iter().filter(|r| !r.reference) {
            let (o, b) = (&r.outcome, &reference.outcome);
            println!(
                "| ratio {} / {} | | {} | {} | {} | {} | | | | | | |",
                r.label,
                reference.label,
                ratio(o.pods_per_second(), b.pods_per_second()),
                ratio(o.quantile(0.5).as_secs_f64(), b.quantile(0.5).as_secs_f64()),
                ratio(
                    o.quantile(0.99).as_secs_f64(),
                    b.quantile(0.99).as_secs_f64()
                ),
                ratio(o.max().as_secs_f64(), b.max().as_secs_f64()),
            );
        }
    }
    println!();
    print_costs(rows);
}

/// Per bound pod: CPU of each process, API requests, watch events, and
/// the ratio to the reference.
fn print_costs(rows: &[Row]) {
    let costed: Vec<(&Row, &costs::PerPod)> = rows
        .iter()
        .filter_map(|r| r.costs.as_ref().ok().map(|c| (r, c)))
        .collect();
    if costed.is_empty() {
        return;
    }
    let head: Vec<&str> = costed.iter().map(|(r, _)| r.label.as_str()).collect();
    println!("| per bound pod | {} |", head.join(" | "));
    println!("|---|{}", "---|".repeat(head.len()));
    let line = |name: &str, value: &dyn Fn(&costs::PerPod) -> f64, unit: &str| {
        let cells: Vec<String> = costed
            .iter()
            .map(|(_, c)| format!("{:.2}{unit}", value(c)))
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    for process in [
        "kube-apiserver",
        "kube-scheduler",
        "etcd",
        "gpugate",
        "harness",
    ] {
        line(
            &format!("CPU {process}"),
            &|c| c.cpu_ms.get(process).copied().unwrap_or(0.0),
            " ms",
        );
    }
    line(
        "CPU control plane (all but the harness)",
        &|c| c.control_plane_cpu_ms(),
        " ms",
    );
    line("API requests", &|c| c.total_requests(), "");
    let mut keys: Vec<&String> = costed.iter().flat_map(|(_, c)| c.requests.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        line(
            &format!("  {k}"),
            &|c| c.requests.get(k).copied().unwrap_or(0.0),
            "",
        );
    }
    line(
        "gpugate events dropped (queue full)",
        &|c| c.events_dropped,
        "",
    );
    line(
        "gpugate's wait for its client limit (api.qps)",
        &|c| c.client_wait_ms,
        " ms",
    );
    line("watch events sent", &|c| c.total_watch_events(), "");
    let mut kinds: Vec<&String> = costed
        .iter()
        .flat_map(|(_, c)| c.watch_events.keys())
        .collect();
    kinds.sort();
    kinds.dedup();
    for k in kinds {
        line(
            &format!("  {k}"),
            &|c| c.watch_events.get(k).copied().unwrap_or(0.0),
            "",
        );
    }
    let mut ops: Vec<&String> = costed
        .iter()
        .flat_map(|(_, c)| c.etcd_requests.keys())
        .filter(|k| k.ends_with(" nodes") || k.ends_with(" pods"))
        .collect();
    ops.sort();
    ops.dedup();
    for k in ops {
        line(
            &format!("etcd {k}"),
            &|c| c.etcd_requests.get(k).copied().unwrap_or(0.0),
            "",
        );
    }
    for verb in ["filter", "prioritize", "bind", "preempt"] {
        line(
            &format!("extender {verb} calls"),
            &|c| c.extender_calls.get(verb).copied().unwrap_or(0.0),
            "",
        );
    }
    for verb in ["filter", "prioritize", "bind"] {
        for direction in ["request", "answer"] {
            let key = format!("{verb} {direction}");
            line(
                &format!("extender {key} bytes per call"),
                &|c| c.bytes_per_call.get(&key).copied().unwrap_or(0.0),
                "",
            );
        }
    }
    if let Some((_, reference)) = costed.iter().find(|(r, _)| r.reference) {
        for (r, c) in costed.iter().filter(|(r, _)| !r.reference) {
            println!(
                "\n{}: control-plane CPU per bound pod {:.2}× the reference's, API requests {:.2}×, watch events {:.2}×",
                r.label,
                c.control_plane_cpu_ms() / reference.control_plane_cpu_ms().max(1e-9),
                c.total_requests() / reference.total_requests().max(1e-9),
                c.total_watch_events() / reference.total_watch_events().max(1e-9),
            );
        }
    }
    println!();
}

/// The machine's load average (1, 5, 15 minutes), for the report: the
/// numbers of a run are only comparable on an equally quiet machine.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Until gpugate has seen all `nodes` nodes (a minute or two, and 0.1 s
/// more per node).
async fn wait_all_nodes(cp: &ControlPlane, nodes: usize) -> anyhow::Result<()> {
    burst::wait_gpugate_nodes(
        cp.gpugate_admin_port,
        nodes,
        Duration::from_secs(120) + Duration::from_millis(100 * nodes as u64),
    )
    .await
}
