//! Scenario 30: Kueue v0.17.0 admits GPU jobs through gpugate's admission
//! check, on the real control plane: Kueue's manager built from its Go
//! module (tests/e2e/build-kueue.sh) with its CRDs from that module,
//! kube-controller-manager running only its Job controller, and the recipe
//! of docs/install.md ("Kueue") applied as written there.
//!
//! Four nodes of two 16,384 MiB GPUs.
//!
//! 1. A job of two 8 GiB pods fits: Ready, and its pods bind to exactly the
//!    places the check held (named in its message).
//! 2. Eight 10,000 MiB pods (no queue) leave 6,384 MiB on every GPU: a job
//!    of two 12 GiB pods is answered Retry with the numbers, while a 4 GiB
//!    job behind it is admitted and binds.
//! 3. Two of those pods deleted: the 12 GiB job is admitted and binds.
//! 4. A 32 GiB pod (more than any GPU) is Rejected: Kueue deactivates it.
//! 5. No double admission across a restart: with the Job controller
//!    stopped (so an admitted job's pods do not come), a job of two whole
//!    GPUs is admitted onto the only two free GPUs; gpugate is killed and
//!    started again; a job of one whole GPU is then answered Retry (the
//!    restarted gpugate held the first job's places again from its
//!    Workload), and once the Job controller runs the first job's pods bind
//!    on those GPUs. Nothing is over-committed and gpugate's ledger equals
//!    the annotations. Before the Job controller starts again, a failover
//!    without a restart: kube-scheduler stopped and its Lease taken by
//!    another holder, gpugate stops leading and holds nothing; a new
//!    kube-scheduler takes the Lease, gpugate leads again and holds the
//!    first job's places again, and the rival is still not admitted.
//! 6. Admitted after a planned move: two 4,000 MiB slices of a Deployment
//!    (namespace e2e-kueue-movable, which the suite's config lets move)
//!    share one GPU; 10,000 MiB pods fill the seven others. A job of two
//!    8 GiB pods fits only if both slices move: the check stays Pending
//!    while gpugate moves them (`PlacementDefragmenting`), the
//!    Deployment's replacements bind on the places held for them, and the
//!    job is admitted and binds on the GPU the slices left.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, PropagationPolicy};
use kube::discovery::{ApiResource, Discovery};
use serde_json::{Value, json};

use crate::control_plane::ensure_namespace;
use crate::fixtures::{
    bound_pods, create_pod, devices, gpu_node, gpu_pod, is_bound, ledger_matches, usage_by_gpu,
    wait_event,
};
use crate::manifests;
use crate::procs::{Proc, free_port};
use crate::scenarios::{Ctx, wait_gauge};
use crate::wait::eventually;

const T4: &str = "NVIDIA Tesla T4";
const KUEUE_VERSION: &str = "v0.17.0";
const QUEUE: &str = "team-queue";
const WAIT: Duration = Duration::from_secs(60);
/// The Job controller, the garbage collector that deletes a deleted Job's
/// Workload (its owner) as in any cluster, and the Deployment and
/// ReplicaSet controllers that recreate the pods defragmentation moves.
const JOB_CONTROLLERS: &str = "job,garbagecollector,deployment,replicaset";
/// A namespace the suite's config lets defragmentation move pods of.
const MOVABLE: &str = "e2e-kueue-movable";

/// The recipe's block after `<!-- e2e: NAME -->` in docs/install.md.
fn recipe(root: &Path, name: &str) -> anyhow::Result<String> {
    let doc = std::fs::read_to_string(root.join("docs/install.md"))?;
    let marker = format!("<!-- e2e: {name} -->");
    let rest = doc
        .split_once(&marker)
        .with_context(|| format!("docs/install.md has no {marker}"))?
        .1;
    let body = rest
        .trim_start()
        .strip_prefix("```yaml\n")
        .with_context(|| format!("{marker} is not followed by a yaml block"))?;
    let end = body.find("\n```").context("unterminated yaml block")?;
    Ok(body[..=end].to_string())
}

/// Builds (or finds cached) Kueue's manager and CRDs.
fn build_kueue(root: &Path) -> anyhow::Result<PathBuf> {
    let out = Command::new("bash")
        .arg(root.join("tests/e2e/build-kueue.sh"))
        .env("KUEUE_VERSION", KUEUE_VERSION)
        .output()?;
    ensure!(
        out.status.success(),
        "build-kueue.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    Ok(PathBuf::from(dir))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "kueue.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "kueue.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn install_crds(ctx: &Ctx, dir: &Path) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(ctx.cp.admin.clone());
    let mut kinds = Vec::new();
    for entry in std::fs::read_dir(dir.join("crds"))? {
        let path = entry?.path();
        for doc in manifests::documents(&std::fs::read_to_string(&path)?)? {
            let crd: CustomResourceDefinition = serde_json::from_value(doc)?;
            for v in crd.spec.versions.iter().filter(|v| v.served) {
                kinds.push(kube::api::GroupVersionKind::gvk(
                    &crd.spec.group,
                    &v.name,
                    &crd.spec.names.kind,
                ));
            }
            match api.create(&PostParams::default(), &crd).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e).with_context(|| path.display().to_string()),
            }
        }
    }
    // Every kind, not one: the apiserver serves each CRD when it is
    // established, one by one, and Kueue's manager exits at start if one
    // it indexes (ResourceFlavor, say) is not served yet.
    let admin = ctx.cp.admin.clone();
    eventually("Kueue's CRDs served", WAIT, || {
        let (admin, kinds) = (admin.clone(), kinds.clone());
        async move {
            let d = Discovery::new(admin)
                .run()
                .await
                .map_err(|e| e.to_string())?;
            match kinds.iter().find(|gvk| d.resolve_gvk(gvk).is_none()) {
                Some(gvk) => Err(format!(
                    "{}/{} {} not served yet",
                    gvk.group, gvk.version, gvk.kind
                )),
                None => Ok(()),
            }
        }
    })
    .await
}

/// Kueue's manager with the recipe's configuration, made runnable here: no
/// leader election, its serving certificate from the suite's PKI, the Job
/// integration only, and no visibility server.
fn start_kueue(ctx: &Ctx, dir: &Path) -> anyhow::Result<Proc> {
    let mut config: Value = serde_yaml_ng::from_str(&recipe(&ctx.root, "kueue-configuration")?)?;
    let certs = ctx.cp.dir.join("kueue-certs");
    std::fs::create_dir_all(&certs)?;
    std::fs::copy(ctx.cp.pki.path("apiserver.crt"), certs.join("tls.crt"))?;
    std::fs::copy(ctx.cp.pki.path("apiserver.key"), certs.join("tls.key"))?;
    config["leaderElection"] = json!({"leaderElect": false});
    config["internalCertManagement"] = json!({"enable": false});
    config["webhook"] = json!({"host": "127.0.0.1", "port": free_port()?, "certDir": certs});
    config["metrics"] = json!({"bindAddress": format!("127.0.0.1:{}", free_port()?)});
    config["health"] = json!({"healthProbeBindAddress": format!("127.0.0.1:{}", free_port()?)});
    config["integrations"] = json!({"frameworks": ["batch/job"]});
    config["featureGates"] = json!({"VisibilityOnDemand": false, "MultiKueue": false});
    let file = ctx.cp.dir.join("kueue.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&config)?)?;
    let mut cmd = Command::new(dir.join("bin/kueue"));
    cmd.arg(format!("--config={}", file.display()))
        .env("KUBECONFIG", ctx.cp.dir.join("admin.kubeconfig"))
        .env("KUEUE_METRICS_CERT_DIR", &certs);
    Proc::spawn("kueue", &mut cmd, &ctx.cp.dir)
}

/// A suspended Job (Kueue's own webhook is not registered here) on the
/// team's queue, of `pods` pods each asking one GPU with `mib` MiB.
fn job(name: &str, ns: &str, pods: u32, mib: u32) -> Value {
    let mut pod = gpu_pod(
        "template",
        &[
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpumem", &mib.to_string()),
        ],
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(0);
    pod["spec"]["restartPolicy"] = json!("Never");
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "suspend": true, "parallelism": pods, "completions": pods,
            "template": {"metadata": {"labels": {"job": name}}, "spec": pod["spec"]},
        },
    })
}

fn jobs(ctx: &Ctx, ns: &str) -> Api<Job> {
    Api::namespaced(ctx.cp.admin.clone(), ns)
}

/// The pods of job `name` (its template's label `job`).
async fn pods_of_job(pods: &Api<Pod>, name: &str) -> Result<Vec<Pod>, String> {
    pods.list(&ListParams::default().labels(&format!("job={name}")))
        .await
        .map(|l| l.items)
        .map_err(|e| e.to_string())
}

async fn create_job(ctx: &Ctx, ns: &str, job: &Value) -> anyhow::Result<()> {
    let job: Job = serde_json::from_value(job.clone())?;
    jobs(ctx, ns).create(&PostParams::default(), &job).await?;
    Ok(())
}

async fn delete_job(ctx: &Ctx, ns: &str, name: &str) -> anyhow::Result<()> {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..now.clone()
    };
    jobs(ctx, ns).delete(name, &background).await?;
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    eventually(&format!("job {name}'s pods gone"), WAIT, || {
        let (pods, now) = (pods.clone(), now.clone());
        async move {
            let left = pods_of_job(&pods, name).await?;
            for p in &left {
                let _ = pods
                    .delete(p.metadata.name.as_deref().unwrap_or_default(), &now)
                    .await;
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} left", left.len()))
            }
        }
    })
    .await
}

/// The Workload Kueue made for job `name`.
async fn workload_of(ctx: &Ctx, ns: &str, name: &str) -> anyhow::Result<Value> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.cp.admin.clone(), ns, &resource("Workload", "workloads"));
    let owner = name.to_string();
    eventually(&format!("the Workload of job {name}"), WAIT, || {
        let (api, owner) = (api.clone(), owner.clone());
        async move {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|w| {
                    w.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "Job" && o.name == owner)
                })
                .map(|w| serde_json::to_value(w).unwrap_or_default())
                .ok_or_else(|| "none yet".to_string())
        }
    })
    .await
}

/// Waits for an event about job `name`'s Workload with this reason whose
/// note contains `needle`; returns the note.
async fn wait_answer(
    ctx: &Ctx,
    ns: &str,
    job: &str,
    reason: &str,
    needle: &str,
) -> anyhow::Result<String> {
    let wl = workload_of(ctx, ns, job).await?;
    let wl_name = wl["metadata"]["name"].as_str().unwrap_or_default();
    wait_event(&ctx.cp.admin, ns, wl_name, reason, needle, WAIT).await
}

/// The bound pods of job `name`, once there are `count`.
async fn job_pods_bound(ctx: &Ctx, ns: &str, name: &str, count: usize) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    eventually(&format!("{count} pods of job {name} bound"), WAIT, || {
        let pods = pods.clone();
        async move {
            let bound: Vec<Pod> = pods_of_job(&pods, name)
                .await?
                .into_iter()
                .filter(|p| {
                    is_bound(p)
                        && p.metadata.deletion_timestamp.is_none()
                        && devices(p).is_ok_and(|d| !d.is_empty())
                })
                .collect();
            if bound.len() == count {
                Ok(bound)
            } else {
                Err(format!("{} bound", bound.len()))
            }
        }
    })
    .await
}

/// Waits until gpugate says it holds the places of `n` admitted workloads.
async fn held_gauge(ctx: &Ctx, n: f64) -> anyhow::Result<()> {
    wait_gauge(ctx, "gpugate_kueue_workloads_held", WAIT, move |v| v == n).await
}

/// `(node, GPU)` of each device the pods hold, sorted.
fn places(pods: &[Pod]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = pods
        .iter()
        .flat_map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            devices(p)
                .unwrap_or_default()
                .into_iter()
                .map(move |d| (node.clone(), d.uuid))
        })
        .collect();
    out.sort();
    out
}

/// `(node, GPU)` named by a Ready message (`... held for 300 s on kq-1
/// (GPU-kq-1-0, GPU-kq-1-1), kq-2 (GPU-kq-2-0)`), sorted.
fn held_places(message: &str) -> Vec<(String, String)> {
    let list = message
        .rsplit_once(" s on ")
        .map(|(_, l)| l)
        .unwrap_or_default();
    let mut out = Vec::new();
    for part in list.split("), ") {
        if let Some((node, gpus)) = part.trim_end_matches(')').split_once(" (") {
            for g in gpus.split(", ") {
                out.push((node.to_string(), g.to_string()));
            }
        }
    }
    out.sort();
    out
}

/// `n` bare pods of 10,000 MiB named `<prefix>-<i>`, bound.
async fn fillers(ctx: &Ctx, ns: &str, prefix: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let mut pod = gpu_pod(
            &name,
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "10000")],
        );
        pod["spec"]["terminationGracePeriodSeconds"] = json!(0);
        create_pod(&ctx.cp.admin, ns, &pod).await?;
        names.push(name);
    }
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    eventually("the fillers bound", WAIT, || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("!job"))
                .await
                .map_err(|e| e.to_string())?;
            let bound = list
                .items
                .iter()
                .filter(|p| {
                    is_bound(p)
                        && p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(&format!("{prefix}-")))
                })
                .count();
            if bound == n {
                Ok(())
            } else {
                Err(format!("{bound} of {n}"))
            }
        }
    })
    .await?;
    Ok(names)
}

pub async fn kueue(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let dir = build_kueue(&ctx.root)?;
    install_crds(ctx, &dir).await?;
    let kcm = crate::defrag::controller_manager(ctx, JOB_CONTROLLERS)?;
    let kueue = start_kueue(ctx, &dir)?;
    let gpugate_config = format!(
        "{}\n{}",
        ctx.cp.gpugate_config,
        recipe(&ctx.root, "kueue-gpugate-config")?
    );
    let result = async {
        ctx.cp.redeploy(&ctx.variants[0].1, &gpugate_config).await?;
        let discovery = Discovery::new(ctx.cp.admin.clone()).run().await?;
        for mut o in manifests::documents(&recipe(&ctx.root, "kueue-objects")?)? {
            if o["kind"] == "LocalQueue" {
                o["metadata"]["namespace"] = json!(ns);
            }
            manifests::apply(&ctx.cp.admin, &discovery, &o, false).await?;
        }
        queue_active(ctx).await?;
        let nodes: Vec<Value> = (1..=4)
            .map(|i| gpu_node(&format!("kq-{i}"), 2, 10, 16384, T4))
            .collect();
        ctx.nodes(scenario, &nodes).await?;
        steps(ctx, ns, kcm).await
    }
    .await;
    drop(kueue);
    let cleaned = async {
        let _ = jobs(ctx, ns)
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await;
        ctx.cp
            .redeploy(&ctx.variants[0].1, &ctx.cp.gpugate_config)
            .await
    }
    .await;
    result?;
    cleaned
}

/// The ClusterQueue admits: gpugate marked its AdmissionCheck Active.
async fn queue_active(ctx: &Ctx) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::all_with(
        ctx.cp.admin.clone(),
        &resource("ClusterQueue", "clusterqueues"),
    );
    eventually(
        "ClusterQueue gpu-queue Active (gpugate's check marked Active)",
        WAIT,
        || {
            let api = api.clone();
            async move {
                let cq = api.get("gpu-queue").await.map_err(|e| e.to_string())?;
                let conditions = cq.data["status"]["conditions"].clone();
                let active = conditions
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Active" && c["status"] == "True");
                if active {
                    Ok(())
                } else {
                    Err(conditions.to_string())
                }
            }
        },
    )
    .await
}

async fn steps(ctx: &Ctx, ns: &str, kcm: Proc) -> anyhow::Result<()> {
    // 1. Fits: the pods bind to the held places.
    create_job(ctx, ns, &job("fits", ns, 2, 8192)).await?;
    let ready = wait_answer(ctx, ns, "fits", "PlacementReady", "held for").await?;
    let bound = job_pods_bound(ctx, ns, "fits", 2).await?;
    ensure!(
        places(&bound) == held_places(&ready),
        "job fits: pods on {:?}, check held {:?} ({ready})",
        places(&bound),
        held_places(&ready)
    );
    println!("    fits: {ready}");
    delete_job(ctx, ns, "fits").await?;

    // 2. Scattered: Retry with the numbers; a smaller job behind it runs.
    let fill = fillers(ctx, ns, "filler", 8).await?;
    create_job(ctx, ns, &job("big", ns, 2, 12288)).await?;
    let retry = wait_answer(
        ctx,
        ns,
        "big",
        "PlacementRetry",
        "largest free slice 6384 MiB; 2 × 12 GiB needed (0 of 2 pods fit now)",
    )
    .await?;
    println!("    big, scattered: {retry}");
    create_job(ctx, ns, &job("small", ns, 1, 4096)).await?;
    job_pods_bound(ctx, ns, "small", 1).await?;
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    let big_pods = pods_of_job(&pods, "big")
        .await
        .map_err(anyhow::Error::msg)?;
    ensure!(
        big_pods.iter().all(|p| !is_bound(p)),
        "a pod of the big job bound while it did not fit"
    );

    // 3. Room appears: two fillers deleted, two whole GPUs free.
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let mut freed = Vec::new();
    for name in fill.iter().take(2) {
        let p = pods.get(name).await?;
        freed.extend(places(std::slice::from_ref(&p)));
        pods.delete(name, &now).await?;
    }
    let big = job_pods_bound(ctx, ns, "big", 2).await?;
    freed.sort();
    ensure!(
        places(&big) == freed,
        "job big: pods on {:?}, the GPUs freed were {freed:?}",
        places(&big)
    );
    println!("    big, after two fillers went: on {:?}", places(&big));

    // 4. Never: 32 GiB on 16 GiB GPUs.
    create_job(ctx, ns, &job("huge", ns, 1, 32768)).await?;
    let rejected = wait_answer(
        ctx,
        ns,
        "huge",
        "PlacementRejected",
        "no node can ever hold",
    )
    .await?;
    let wl = workload_of(ctx, ns, "huge").await?;
    let wl_name = wl["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(ctx.cp.admin.clone(), ns, &resource("Workload", "workloads"));
    eventually("Kueue deactivates the rejected workload", WAIT, || {
        let (workloads, wl_name) = (workloads.clone(), wl_name.clone());
        async move {
            let w = workloads.get(&wl_name).await.map_err(|e| e.to_string())?;
            if w.data["spec"]["active"] == false {
                Ok(())
            } else {
                Err(w.data["spec"].to_string())
            }
        }
    })
    .await?;
    println!("    huge: {rejected}");
    for j in ["big", "small", "huge"] {
        delete_job(ctx, ns, j).await?;
    }

    // 5. A restart never double-admits. Six fillers hold 10,000 MiB on six
    //    GPUs; two GPUs are free.
    drop(kcm);
    create_job(ctx, ns, &job("held", ns, 2, 16384)).await?;
    let ready = wait_answer(ctx, ns, "held", "PlacementReady", "held for").await?;
    let held = held_places(&ready);
    ensure!(held.len() == 2, "{ready}");
    ctx.cp.kill_gpugate();
    ctx.cp.start_gpugate().await?;
    create_job(ctx, ns, &job("rival", ns, 1, 16384)).await?;
    let retry = wait_answer(
        ctx,
        ns,
        "rival",
        "PlacementRetry",
        "1 × 16 GiB needed (0 of 1 pods fit now)",
    )
    .await?;
    println!("    after the restart, a rival for the held GPUs: {retry}");
    held_gauge(ctx, 1.0).await?;
    failover(ctx).await?;
    let wl = workload_of(ctx, ns, "rival").await?;
    ensure!(
        !wl["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Admitted" && c["status"] == "True"),
        "the rival was admitted across the failover: {}",
        wl["status"]
    );
    let _kcm = crate::defrag::controller_manager(ctx, JOB_CONTROLLERS)?;
    let pods_held = job_pods_bound(ctx, ns, "held", 2).await?;
    ensure!(
        places(&pods_held) == held,
        "job held: pods on {:?}, check held {held:?}",
        places(&pods_held)
    );
    // Its pods bound: nothing is held for it any more.
    held_gauge(ctx, 0.0).await?;
    let all = bound_pods(&ctx.cp.admin, ns).await?;
    for (gpu, (_, mem, _)) in usage_by_gpu(&all)? {
        if mem > 16384 {
            bail!("GPU {gpu} over-committed: {mem} MiB");
        }
    }
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, WAIT).await?;
    // While the Job controller runs: it takes its finalizer off the pods.
    for j in ["held", "rival"] {
        delete_job(ctx, ns, j).await?;
    }
    for name in fill.iter().skip(2) {
        pods.delete(name, &now).await?;
    }
    let result = admitted_after_a_move(ctx, ns).await;
    let cleaned = crate::defrag::teardown(ctx, MOVABLE).await;
    result?;
    cleaned
}

/// A failover without a restart: kube-scheduler stopped and its Lease
/// taken by another holder, so that gpugate stops leading
/// (`hami_scheduler_is_leader` 0) and gives back what it holds; then a new
/// kube-scheduler takes the Lease, and gpugate, leading again as a
/// replica that starts leading does, holds the admitted workload's places
/// again from its Workload before it answers any check.
async fn failover(ctx: &Ctx) -> anyhow::Result<()> {
    ctx.cp.stop_scheduler();
    let leases: Api<Lease> = Api::namespaced(ctx.cp.admin.clone(), "gpugate");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let taken = json!({"spec": {
        "holderIdentity": "another-replica_e2e", "acquireTime": now, "renewTime": now,
        "leaseDurationSeconds": 15}});
    leases
        .patch(
            "gpugate-scheduler",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&taken),
        )
        .await?;
    leader_gauge(ctx, 0.0).await?;
    held_gauge(ctx, 0.0).await?;
    println!("    failover: the Lease held elsewhere, gpugate holds nothing");
    let config = ctx.cp.local_scheduler_config(&ctx.variants[0].1)?;
    ctx.cp.start_scheduler("kube-scheduler", &config).await?;
    leader_gauge(ctx, 1.0).await?;
    held_gauge(ctx, 1.0).await?;
    println!("    failover: leading again, the admitted workload's places held again");
    Ok(())
}

/// Waits until gpugate's `hami_scheduler_is_leader` is `n`.
async fn leader_gauge(ctx: &Ctx, n: f64) -> anyhow::Result<()> {
    wait_gauge(ctx, "hami_scheduler_is_leader", WAIT, move |v| v == n).await
}

/// The Deployment of two 4,000 MiB slices that share one GPU (binpack on
/// nodes and GPUs).
fn slices() -> anyhow::Result<Deployment> {
    let mut pod = gpu_pod(
        "template",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "4000")],
    );
    pod["spec"]["terminationGracePeriodSeconds"] = json!(0);
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "slices", "namespace": MOVABLE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "slices"}},
            "template": {
                "metadata": {"labels": {"app": "slices"}, "annotations": {
                    "hami.io/node-scheduler-policy": "binpack",
                    "hami.io/gpu-scheduler-policy": "binpack"}},
                "spec": pod["spec"],
            },
        },
    }))?)
}

/// The Deployment's pods, bound and not being deleted, once there are two.
async fn slices_bound(ctx: &Ctx) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), MOVABLE);
    eventually("two slices bound", WAIT, || {
        let pods = pods.clone();
        async move {
            let bound: Vec<Pod> = pods
                .list(&ListParams::default().labels("app=slices"))
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && is_bound(p))
                .collect();
            if bound.len() == 2 {
                Ok(bound)
            } else {
                Err(format!("{} bound", bound.len()))
            }
        }
    })
    .await
}

/// 6: the job is admitted after the planned moves.
async fn admitted_after_a_move(ctx: &Ctx, ns: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(ctx.cp.admin.clone(), ns);
    eventually("the fillers gone", WAIT, || {
        let pods = pods.clone();
        async move {
            let left = pods
                .list(&ListParams::default().labels("!job"))
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            if left == 0 {
                Ok(())
            } else {
                Err(format!("{left} left"))
            }
        }
    })
    .await?;
    ensure_namespace(&ctx.cp.admin, MOVABLE).await?;
    let deployments: Api<Deployment> = Api::namespaced(ctx.cp.admin.clone(), MOVABLE);
    deployments
        .create(&PostParams::default(), &slices()?)
        .await
        .context("create the Deployment")?;
    let before = slices_bound(ctx).await?;
    let shared = places(&before);
    ensure!(
        shared.len() == 2 && shared[0] == shared[1],
        "the slices do not share a GPU: {shared:?}"
    );
    let freed = shared[0].clone();
    let fill = fillers(ctx, ns, "wall", 7).await?;
    let walls: Vec<Pod> = {
        let mut out = Vec::new();
        for name in &fill {
            out.push(pods.get(name).await?);
        }
        out
    };
    ensure!(
        !places(&walls).contains(&freed),
        "a 10,000 MiB pod went on the slices' GPU {freed:?}"
    );
    create_job(ctx, ns, &job("moved", ns, 2, 8192)).await?;
    let moving = wait_answer(ctx, ns, "moved", "PlacementDefragmenting", "moving 2 pods").await?;
    println!("    moved: {moving}");
    let bound = job_pods_bound(ctx, ns, "moved", 2).await?;
    ensure!(
        places(&bound) == vec![freed.clone(), freed.clone()],
        "job moved: pods on {:?}, the slices left {freed:?}",
        places(&bound)
    );
    let after = slices_bound(ctx).await?;
    let was: Vec<&str> = before
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    ensure!(
        after
            .iter()
            .all(|p| !was.contains(&p.metadata.uid.as_deref().unwrap_or_default())),
        "a slice was not moved"
    );
    ensure!(
        !places(&after).contains(&freed),
        "a replacement went back on {freed:?}"
    );
    println!(
        "    moved: job on {:?}, the slices now on {:?}",
        places(&bound),
        places(&after)
    );
    let mut all = bound_pods(&ctx.cp.admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, WAIT).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, MOVABLE, &after, WAIT).await?;
    all.extend(after);
    for (gpu, (_, mem, _)) in usage_by_gpu(&all)? {
        if mem > 16384 {
            bail!("GPU {gpu} over-committed: {mem} MiB");
        }
    }
    delete_job(ctx, ns, "moved").await?;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for name in &fill {
        pods.delete(name, &now).await?;
    }
    Ok(())
}
