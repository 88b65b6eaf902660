//! The end-to-end suite: gpugate with a real etcd, kube-apiserver and
//! kube-scheduler on 127.0.0.1, configured from deploy/ (docs/e2e.md).
//!
//! A plain binary (`harness = false`): it builds the control plane with
//! `build-control-plane.sh` (Go modules, cached outside the repository),
//! starts it once, runs the scenarios of `scenarios.rs` one after another
//! and ends with `e2e: N passed, M failed`. Without `go` it says it was
//! skipped and why. `GPUGATE_E2E=skip` skips it on purpose (for quick local
//! runs); CI never sets it.

mod api_usage;
mod burst;
mod control_plane;
mod defrag;
mod device_plugin;
mod fixtures;
mod ha;
mod hazards;
mod http;
mod kueue;
mod manifests;
mod pki;
mod procs;
mod scenarios;
mod vendors;
mod wait;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::control_plane::ControlPlane;
use crate::scenarios::{Ctx, SCENARIOS};

/// How long the simulated device plugin's Allocate takes (scenario 10 sets
/// its own).
const PLUGIN_DELAY: Duration = Duration::from_millis(0);

/// Longest a scenario may take, its cleanup included.
const SCENARIO_LIMIT: Duration = Duration::from_secs(300);

fn main() -> ExitCode {
    if std::env::var("GPUGATE_E2E").as_deref() == Ok("skip") {
        println!("e2e: skipped: GPUGATE_E2E=skip is set");
        return ExitCode::SUCCESS;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let started = Instant::now();
    let bin = match control_plane::build(&root) {
        Ok(Some(bin)) => bin,
        Ok(None) => {
            println!(
                "e2e: skipped: `go` is not installed; the suite builds etcd, kube-apiserver and kube-scheduler from their Go modules (docs/e2e.md)"
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("e2e: building the control plane failed: {e:#}");
            println!("e2e: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "e2e: control plane binaries in {} ({:.0} s)",
        bin.display(),
        started.elapsed().as_secs_f64()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (passed, failed) = runtime.block_on(run(&root, &bin));
    println!(
        "e2e: {passed} passed, {failed} failed ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn run(root: &Path, bin: &Path) -> (usize, usize) {
    match setup(root, bin).await {
        Ok((ctx, dir)) => {
            let (passed, failed) = scenarios(&ctx).await;
            let logs = ctx.cp.log_dir();
            drop(ctx);
            if failed == 0 {
                let _ = std::fs::remove_dir_all(&dir);
            } else {
                println!("e2e: logs kept in {}", logs.display());
            }
            (passed, failed)
        }
        Err(e) => {
            println!("e2e: setting up the control plane failed: {e:#}");
            println!(
                "e2e: logs kept in {}",
                std::env::temp_dir()
                    .join(format!("gpugate-e2e-{}", std::process::id()))
                    .join("logs")
                    .display()
            );
            (0, SCENARIOS.len())
        }
    }
}

async fn setup(root: &Path, bin: &Path) -> anyhow::Result<(Ctx, PathBuf)> {
    let tools = bin.parent().context("bin has no parent")?.join("tools");
    let mut variants = Vec::new();
    for variant in ["cert-manager", "self-signed"] {
        variants.push((
            variant.to_string(),
            control_plane::render(bin, root, variant)?,
        ));
    }
    variants.push((
        scenarios::HELM_HAMI.to_string(),
        control_plane::render_chart(bin, root, &["-f", scenarios::HAMI_VALUES])?,
    ));
    // The chart's other shape: no kube-scheduler of its own (extender
    // Service, NetworkPolicy, snippet), URL-mode webhooks on a NodePort.
    variants.push((
        "helm-own-scheduler-off".to_string(),
        control_plane::render_chart(
            bin,
            root,
            &[
                "--set",
                "scheduler.kubeScheduler.enabled=false,scheduler.service.type=NodePort",
                "--set",
                "scheduler.admissionWebhook.customURL.enabled=true",
            ],
        )?,
    ));
    let dir = std::env::temp_dir().join(format!("gpugate-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let started = Instant::now();
    // The processes run the way the cert-manager variant runs them:
    // certificate files, reloaded when they change.
    let cp = ControlPlane::start(
        bin,
        Path::new(env!("CARGO_BIN_EXE_gpugate")),
        &dir,
        &variants[0].1,
    )
    .await?;
    println!(
        "e2e: etcd, kube-apiserver, gpugate and kube-scheduler up in {:.1} s (work dir {})",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    Ok((
        Ctx {
            cp,
            root: root.to_path_buf(),
            bin: bin.to_path_buf(),
            crds: tools.join("crds"),
            variants,
        },
        dir,
    ))
}

async fn scenarios(ctx: &Ctx) -> (usize, usize) {
    let plugin = device_plugin::DevicePlugin::start(ctx.cp.admin.clone(), PLUGIN_DELAY);
    let only = std::env::var("GPUGATE_E2E_ONLY").ok();
    let (mut passed, mut failed, mut ran) = (0, 0, 0);
    for (i, (name, ns, scenario)) in SCENARIOS.iter().enumerate() {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|n| n.trim() == (i + 1).to_string()))
        {
            continue;
        }
        let started = Instant::now();
        ran += 1;
        if let Err(e) = ctx.cp.ensure_gpugate().await {
            println!("e2e: FAIL {}. {name}: gpugate is not running: {e:#}", i + 1);
            failed += 1;
            continue;
        }
        let result =
            match tokio::time::timeout(SCENARIO_LIMIT, scenarios::run(ctx, &plugin, i)).await {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!(
                    "timed out after {} s",
                    SCENARIO_LIMIT.as_secs()
                )),
            };
        // Whatever happened, leave no pods or nodes behind for the next one.
        let cleaned = tokio::time::timeout(Duration::from_secs(60), ctx.clean(ns, scenario)).await;
        let secs = started.elapsed().as_secs_f64();
        match (result, cleaned) {
            (Ok(()), Ok(Ok(()))) => {
                passed += 1;
                println!("e2e: ok   {}. {name} ({secs:.1} s)", i + 1);
            }
            (result, cleaned) => {
                failed += 1;
                println!("e2e: FAIL {}. {name} ({secs:.1} s)", i + 1);
                if let Err(e) = result {
                    println!("    {e:#}");
                }
                match cleaned {
                    Ok(Err(e)) => println!("    cleanup: {e:#}"),
                    Err(_) => println!("    cleanup timed out"),
                    Ok(Ok(())) => {}
                }
                println!("{}", ctx.cp.logs());
            }
        }
    }
    if ran == 0 {
        println!(
            "e2e: GPUGATE_E2E_ONLY={only:?} names no scenario (1 to {})",
            SCENARIOS.len()
        );
        failed += 1;
    }
    println!(
        "e2e: the simulated device plugin released {} node locks ({} errors)",
        plugin.released.load(std::sync::atomic::Ordering::Relaxed),
        plugin.errors.load(std::sync::atomic::Ordering::Relaxed)
    );
    // In every scenario, each container got its own pod's devices: the
    // lock named the pod the kubelet admitted.
    let mistakes = plugin.mistakes();
    if !mistakes.is_empty() {
        failed += 1;
        println!(
            "e2e: FAIL: the simulated device plugin served {} Allocate(s) without the pod's own \
             lock:",
            mistakes.len()
        );
        for m in &mistakes {
            println!("    {m}");
        }
    }
    plugin.stop().await;
    (passed, failed)
}
