//! deploy/ as the suite uses it: rendered with kustomize, applied with
//! server-side apply (for real or as a dry run), and the pieces the local
//! processes need (gpugate's config, the webhook configurations, the
//! kube-scheduler configuration) taken from the rendered objects.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, anyhow, bail};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, ValidationDirective};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use serde_json::Value;

/// The objects `kustomize build <dir>` prints.
pub fn render(kustomize: &Path, dir: &Path) -> anyhow::Result<Vec<Value>> {
    let what = format!("kustomize build {}", dir.display());
    objects_printed(Command::new(kustomize).arg("build").arg(dir), &what)
}

/// The version the e2e control plane runs; `helm template` has no cluster
/// to ask for it.
pub const KUBE_VERSION: &str = "v1.36.3";

/// The objects `helm template gpugate deploy/helm/gpugate -n gpugate`
/// prints with these extra arguments (values files, `--set`).
pub fn helm_template(helm: &Path, root: &Path, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    objects_printed(
        Command::new(helm)
            .current_dir(root)
            .args(["template", "gpugate", "deploy/helm/gpugate"])
            .args(["-n", "gpugate", "--kube-version", KUBE_VERSION])
            .args(args),
        &format!("helm template {args:?}"),
    )
}

/// The objects a rendering command prints; its stderr when it fails.
fn objects_printed(cmd: &mut Command, what: &str) -> anyhow::Result<Vec<Value>> {
    let out = cmd.output().with_context(|| format!("run {what}"))?;
    if !out.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&out.stderr));
    }
    documents(&String::from_utf8(out.stdout)?)
}

/// The documents of a multi-document YAML text, empty ones left out.
pub fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

pub fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or("")
}

pub fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

/// The rendered object of this kind and name.
pub fn find<'a>(objects: &'a [Value], kind_: &str, name_: &str) -> anyhow::Result<&'a Value> {
    objects
        .iter()
        .find(|o| kind(o) == kind_ && name(o) == name_)
        .ok_or_else(|| anyhow!("deploy/ renders no {kind_} {name_}"))
}

/// A ConfigMap's data entry.
pub fn config_map_entry(objects: &[Value], cm: &str, key: &str) -> anyhow::Result<String> {
    find(objects, "ConfigMap", cm)?["data"][key]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("ConfigMap {cm} has no data.{key}"))
}

/// Server-side apply of one object, strict field validation; `dry_run`
/// asks the API server to run every admission step and store nothing.
pub async fn apply(
    client: &Client,
    discovery: &Discovery,
    object: &Value,
    dry_run: bool,
) -> anyhow::Result<()> {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind(object));
    let (resource, caps) = discovery.resolve_gvk(&gvk).ok_or_else(|| {
        anyhow!(
            "the API server does not serve {api_version} {}",
            kind(object)
        )
    })?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .ok_or_else(|| anyhow!("{} {} has no namespace", kind(object), name(object)))?;
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let mut params = PatchParams::apply("gpugate-e2e").force();
    params.dry_run = dry_run;
    params.field_validation = Some(ValidationDirective::Strict);
    api.patch(name(object), &params, &Patch::Apply(object))
        .await
        .with_context(|| format!("{} {}", kind(object), name(object)))?;
    Ok(())
}

/// The webhook configurations of a rendered variant, pointed at gpugate on
/// 127.0.0.1 with the given CA, as envtest does (a `url:` instead of the
/// Service), and without cert-manager's injection annotation. Everything
/// else (rules, selectors, matchConditions, failure policy, timeouts)
/// stays as deployed.
pub fn local_webhooks(objects: &[Value], port: u16, ca_pem: &str) -> anyhow::Result<Vec<Value>> {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut out = Vec::new();
    for o in objects.iter().filter(|o| {
        matches!(
            kind(o),
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"
        )
    }) {
        let mut o = o.clone();
        if let Some(a) = o["metadata"]["annotations"].as_object_mut() {
            a.remove("cert-manager.io/inject-ca-from");
        }
        let config_name = name(&o).to_string();
        for w in o["webhooks"]
            .as_array_mut()
            .ok_or_else(|| anyhow!("{config_name} has no webhooks"))?
        {
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .ok_or_else(|| anyhow!("webhook {} has no service path", w["name"]))?
                .to_string();
            w["clientConfig"] = serde_json::json!({
                "url": format!("https://127.0.0.1:{port}{path}"),
                "caBundle": ca,
            });
        }
        out.push(o);
    }
    if out.len() != 2 {
        bail!(
            "expected 2 webhook configurations, deploy/ renders {}",
            out.len()
        );
    }
    Ok(out)
}

/// kube-scheduler's own defaults for its API client (deploy/ sets none),
/// written out so that the scale benchmark's two kube-schedulers, with and
/// without the extender, are visibly configured alike.
pub const SCHEDULER_QPS: u32 = 50;
pub const SCHEDULER_BURST: u32 = 100;

/// deploy/'s KubeSchedulerConfiguration with what differs outside a pod:
/// the kubeconfig (instead of the in-cluster service account), the
/// extender's URL and CA file (instead of 127.0.0.1:9443 and the mounted
/// volume), and the API client's QPS and burst at kube-scheduler's
/// defaults. Leader election, profiles, verbs, managedResources and the
/// rest stay as deployed.
pub fn local_scheduler_config(
    objects: &[Value],
    kubeconfig: &Path,
    gpugate_port: u16,
    ca_file: &Path,
) -> anyhow::Result<String> {
    let text = config_map_entry(objects, "gpugate-scheduler-config", "config.yaml")?;
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)?;
    let map = config
        .as_mapping_mut()
        .ok_or_else(|| anyhow!("config.yaml is not a mapping"))?;
    map.insert(
        "clientConnection".into(),
        serde_yaml_ng::to_value(serde_json::json!({
            "kubeconfig": kubeconfig,
            "qps": SCHEDULER_QPS,
            "burst": SCHEDULER_BURST,
        }))?,
    );
    let extenders = config["extenders"]
        .as_sequence_mut()
        .filter(|e| e.len() == 1)
        .ok_or_else(|| anyhow!("config.yaml must have exactly one extender"))?;
    let e = &mut extenders[0];
    e["urlPrefix"] = format!("https://127.0.0.1:{gpugate_port}").into();
    e["tlsConfig"]["caFile"] = ca_file.display().to_string().into();
    // As JSON (YAML too): serde_yaml_ng writes a string such as "on"
    // unquoted, which kube-scheduler's YAML 1.1 reader takes for a bool.
    Ok(serde_json::to_string_pretty(&config)?)
}

/// The reference for the scale benchmark: the same KubeSchedulerConfiguration
/// (leader election, client, percentageOfNodesToScore) without the extender,
/// its one profile named `default-scheduler`, so that it schedules plain
/// pods the webhook leaves alone.
#[allow(dead_code)] // benches/scale.rs
pub fn reference_scheduler_config(config: &str) -> anyhow::Result<String> {
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(config)?;
    let map = config
        .as_mapping_mut()
        .ok_or_else(|| anyhow!("the scheduler config is not a mapping"))?;
    map.remove("extenders")
        .ok_or_else(|| anyhow!("the scheduler config has no extenders"))?;
    let profiles = map
        .get_mut("profiles")
        .and_then(|p| p.as_sequence_mut())
        .filter(|p| p.len() == 1)
        .ok_or_else(|| anyhow!("the scheduler config must have exactly one profile"))?;
    profiles[0]["schedulerName"] = "default-scheduler".into();
    Ok(serde_json::to_string_pretty(&config)?)
}
