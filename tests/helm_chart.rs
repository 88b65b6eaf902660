//! deploy/helm/gpugate: `helm lint` and `helm template` with gpugate's
//! defaults, with a HAMi v2.10 values file, with renamed resources, without
//! a kube-scheduler of its own and with customURL; the rendered objects are
//! compared with the kustomize variants, and the rendered config goes
//! through gpugate's own config parser.
//!
//! helm and kustomize come from tests/e2e/build-control-plane.sh (Go
//! modules, cached); without `go`, or with GPUGATE_E2E=skip, the tests say
//! so and pass, like the e2e suite.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use gpugate::config::Config;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const HAMI_VALUES: &str = "tests/fixtures/helm/hami-v2.10-values.yaml";
/// The version the e2e suite runs; `helm template` has no cluster to ask.
const KUBE_VERSION: &str = "v1.36.3";

/// The tools directory (helm, kustomize), or None when the tests cannot
/// build it here.
fn tools() -> Option<&'static Path> {
    static TOOLS: OnceLock<Option<PathBuf>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            if std::env::var("GPUGATE_E2E").as_deref() == Ok("skip") {
                eprintln!("helm_chart: skipped: GPUGATE_E2E=skip is set");
                return None;
            }
            let script = Path::new(ROOT).join("tests/e2e/build-control-plane.sh");
            let out = Command::new("bash")
                .arg(&script)
                .output()
                .expect("bash runs");
            if out.status.code() == Some(3) {
                eprintln!("helm_chart: skipped: `go` is not installed (docs/e2e.md)");
                return None;
            }
            assert!(
                out.status.success(),
                "build-control-plane.sh: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bin = String::from_utf8(out.stdout).unwrap();
            Some(Path::new(bin.trim()).parent().unwrap().join("tools"))
        })
        .as_deref()
}

fn chart() -> PathBuf {
    Path::new(ROOT).join("deploy/helm/gpugate")
}

/// `helm template gpugate <chart> -n gpugate` with these extra arguments:
/// the objects, or helm's error text.
fn template(tools: &Path, args: &[&str]) -> Result<Vec<Value>, String> {
    let out = Command::new(tools.join("helm"))
        .current_dir(ROOT)
        .args(["template", "gpugate"])
        .arg(chart())
        .args(["-n", "gpugate", "--kube-version", KUBE_VERSION])
        .args(args)
        .output()
        .expect("helm runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(documents(&String::from_utf8(out.stdout).unwrap()))
}

fn render(tools: &Path, args: &[&str]) -> Vec<Value> {
    template(tools, args).unwrap_or_else(|e| panic!("helm template {args:?}: {e}"))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn kustomize(tools: &Path, variant: &str) -> Vec<Value> {
    let out = Command::new(tools.join("kustomize"))
        .arg("build")
        .arg(Path::new(ROOT).join("deploy").join(variant))
        .output()
        .expect("kustomize runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).unwrap())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn ids(objects: &[Value]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A YAML document inside a ConfigMap.
fn config_map_yaml(objects: &[Value], name: &str, key: &str) -> Value {
    let text = find(objects, "ConfigMap", name)["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("ConfigMap {name} has no {key}"));
    serde_yaml_ng::from_str(text).unwrap()
}

/// The gpugate config the chart renders, read by gpugate itself.
fn gpugate_config(objects: &[Value]) -> Config {
    let text = find(objects, "ConfigMap", "gpugate-config")["data"]["gpugate.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    Config::from_yaml(&text, "the chart's gpugate-config").unwrap()
}

fn container<'a>(deployment: &'a Value, list: &str, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"][list]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {list} {name}"))
}

fn args(container: &Value, key: &str) -> Vec<String> {
    container[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn webhook<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    &find(objects, kind, "gpugate")["webhooks"][0]
}

#[test]
fn helm_lint_passes_with_defaults_and_hami_values() {
    let Some(tools) = tools() else { return };
    for extra in [vec![], vec!["-f", HAMI_VALUES]] {
        let out = Command::new(tools.join("helm"))
            .current_dir(ROOT)
            .arg("lint")
            .arg(chart())
            .args(["--strict", "--kube-version", KUBE_VERSION])
            .args(&extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm lint {extra:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The chart renders the objects of the kustomize variants, by kind and
/// name (the Namespace aside: Helm installs into one), with the same
/// config, webhook rules and conditions, RBAC rules and scheduler config.
#[test]
fn chart_renders_what_the_kustomize_variants_do() {
    let Some(tools) = tools() else { return };
    for (variant, set) in [
        ("self-signed", "scheduler.certManager.enabled=false"),
        ("cert-manager", "scheduler.certManager.enabled=true"),
    ] {
        let chart = render(tools, &["--set", set]);
        let kust: Vec<Value> = kustomize(tools, variant)
            .into_iter()
            .filter(|o| o["kind"] != "Namespace")
            .collect();
        // Different names for the same CA object: the cert-manager variant
        // names its CA Certificate gpugate-ca as the chart does.
        assert_eq!(ids(&chart), ids(&kust), "{variant}");
        assert_eq!(gpugate_config(&chart), gpugate_config(&kust), "{variant}");
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            let (c, k) = (webhook(&chart, kind), webhook(&kust, kind));
            for field in [
                "name",
                "rules",
                "failurePolicy",
                "sideEffects",
                "timeoutSeconds",
                "clientConfig",
                "admissionReviewVersions",
            ] {
                assert_eq!(c[field], k[field], "{variant} {kind} {field}");
            }
            // The same CEL, whitespace aside.
            let cel = |w: &Value| {
                w["matchConditions"][0]["expression"]
                    .as_str()
                    .unwrap()
                    .split_whitespace()
                    .collect::<String>()
            };
            assert_eq!(cel(c), cel(k), "{variant} {kind}");
            assert_eq!(
                c["namespaceSelector"], k["namespaceSelector"],
                "{variant} {kind}"
            );
            assert_eq!(c["objectSelector"], k["objectSelector"], "{variant} {kind}");
        }
        for (kind, name) in ids(&kust) {
            if kind.ends_with("Role") {
                assert_eq!(
                    find(&chart, &kind, &name)["rules"],
                    find(&kust, &kind, &name)["rules"],
                    "{variant} {kind} {name}"
                );
            }
            if kind.ends_with("RoleBinding") {
                for field in ["roleRef", "subjects"] {
                    assert_eq!(
                        find(&chart, &kind, &name)[field],
                        find(&kust, &kind, &name)[field],
                        "{variant} {kind} {name}"
                    );
                }
            }
        }
        for kind in [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ] {
            let name = "gpugate-scheduler-owned-keys";
            assert_eq!(
                find(&chart, kind, name)["spec"],
                find(&kust, kind, name)["spec"],
                "{variant} {kind}"
            );
        }
        for kind in ["FlowSchema", "PriorityLevelConfiguration"] {
            assert_eq!(
                find(&chart, kind, "gpugate")["spec"],
                find(&kust, kind, "gpugate")["spec"],
                "{variant} {kind}"
            );
        }
        let sched = |o: &[Value]| config_map_yaml(o, "gpugate-scheduler-config", "config.yaml");
        assert_eq!(sched(&chart), sched(&kust), "{variant}");
        let (cd, kd) = (
            find(&chart, "Deployment", "gpugate"),
            find(&kust, "Deployment", "gpugate"),
        );
        assert_eq!(
            args(container(cd, "initContainers", "gpugate"), "args"),
            args(container(kd, "initContainers", "gpugate"), "args"),
            "{variant}"
        );
        // Volumes by name (kustomize's patch puts the replaced one first).
        let volumes = |d: &Value| {
            let mut v = d["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .unwrap()
                .clone();
            v.sort_by_key(|v| v["name"].as_str().unwrap().to_string());
            v
        };
        assert_eq!(volumes(cd), volumes(kd), "{variant}");
    }
}

/// A HAMi v2.10 values file, unchanged: every scheduler-half value lands
/// where gpugate reads it; HAMi's images and flags for its own extender do
/// not leak into gpugate's container.
#[test]
fn hami_values_file_works_unchanged() {
    let Some(tools) = tools() else { return };
    let o = render(tools, &["-f", HAMI_VALUES]);
    let c = gpugate_config(&o);
    assert_eq!(c.scheduler.name, "hami-scheduler");
    assert_eq!(c.scheduler.node_lock.expiry_seconds, 300);
    assert_eq!(c.nvidia.resource_count_name, "nvidia.com/gpu");
    assert_eq!(c.nvidia.memory_factor, 1);
    assert_eq!(c.nvidia.gpu_core_policy, "default");
    // device-config.content's migProfileAllowlist, read (and validated).
    let allow = c.nvidia.mig_allowlist().expect("the values' allowlist");
    assert!(allow.allows("NVIDIA H100 80GB HBM3", "3g.40gb"));
    assert!(!allow.allows("NVIDIA H100 80GB HBM3", "1g.5gb"));
    assert_eq!(c.nvidia.mig_profile_allowlist.len(), 2);

    let sched = config_map_yaml(&o, "gpugate-scheduler-config", "config.yaml");
    assert_eq!(sched["profiles"][0]["schedulerName"], "hami-scheduler");
    assert_eq!(sched["leaderElection"]["leaderElect"], true);
    // scheduler.nodeLabelSelector as NodeAffinity's addedAffinity.
    let term = &sched["profiles"][0]["pluginConfig"][0];
    assert_eq!(term["name"], "NodeAffinity");
    assert_eq!(
        term["args"]["addedAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0],
        serde_json::json!({"key": "gpu", "operator": "In", "values": ["on"]})
    );

    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let w = webhook(&o, kind);
        assert_eq!(w["failurePolicy"], "Fail");
        let exprs = w["namespaceSelector"]["matchExpressions"]
            .as_array()
            .unwrap();
        assert_eq!(
            exprs[0]["values"],
            serde_json::json!(["kube-system", "gpugate", "istio-system", "monitoring"])
        );
        assert_eq!(exprs[2]["key"], "environment");
        assert_eq!(
            find(&o, kind, "gpugate")["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "gpugate/gpugate-tls"
        );
    }
    assert_eq!(
        webhook(&o, "MutatingWebhookConfiguration")["reinvocationPolicy"],
        "Never"
    );

    let d = find(&o, "Deployment", "gpugate");
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["metadata"]["labels"]["team"], "platform");
    let g = container(d, "initContainers", "gpugate");
    assert_eq!(g["image"], "ghcr.io/gpugate/gpugate:0.1.0");
    let gargs = args(g, "args");
    assert!(gargs.contains(&"--admin-listen=0.0.0.0:9395".to_string()));
    assert!(gargs.contains(&"--tls-cert=/etc/gpugate/tls/tls.crt".to_string()));
    assert!(
        !gargs.iter().any(|a| a.contains("node-lock-retry")),
        "{gargs:?}"
    );
    let ks = container(d, "containers", "kube-scheduler");
    // The registry and repository from the file, the tag from the cluster.
    assert_eq!(
        ks["image"],
        "registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v1.36.3"
    );
    let kargs = args(ks, "command");
    assert!(kargs.contains(&"--v=4".to_string()), "{kargs:?}");
    assert_eq!(
        kargs.iter().filter(|a| a.starts_with("--config")).count(),
        1,
        "{kargs:?}"
    );
    assert!(find(&o, "PodDisruptionBudget", "gpugate")["spec"]["minAvailable"] == 1);
    assert_eq!(sched["extenders"][0]["httpTimeout"], "30s");
}

/// HAMi's client, timeout and environment values reach gpugate's config.
#[test]
fn hami_client_and_timeout_values_are_mapped() {
    let Some(tools) = tools() else { return };
    let o = render(
        tools,
        &[
            "--set",
            "scheduler.kubeQPS=50,scheduler.kubeBurst=80,scheduler.kubeTimeout=7,scheduler.extenderHTTPTimeout=45,scheduler.overwriteEnv=true",
        ],
    );
    let c = gpugate_config(&o);
    assert_eq!((c.api.qps, c.api.burst), (Some(50.0), Some(80)));
    // Without them: no client-side limit, priority and fairness instead
    // (which the chart can leave out for a cluster that manages its own).
    let defaults = render(tools, &[]);
    assert_eq!(gpugate_config(&defaults).api.client_limit(), None);
    find(&defaults, "FlowSchema", "gpugate");
    let without = render(tools, &["--set", "gpugate.flowControl.enabled=false"]);
    assert!(
        !without
            .iter()
            .any(|o| o["kind"] == "FlowSchema" || o["kind"] == "PriorityLevelConfiguration")
    );
    assert!(c.nvidia.overwrite_env);
    let sched = config_map_yaml(&o, "gpugate-scheduler-config", "config.yaml");
    assert_eq!(sched["extenders"][0]["httpTimeout"], "45s");
    // The bind's budget follows the extender's timeout: 5 s less for the
    // bind, 10 s less for its wait for a node.
    let timing = |c: &Config| {
        (
            c.scheduler.bind_timeout_seconds,
            c.scheduler.node_lock.wait_seconds,
        )
    };
    assert_eq!(timing(&c), (40.0, 35.0));
    assert_eq!(timing(&gpugate_config(&defaults)), (55.0, 50.0));
    let hami = render(tools, &["--set", "scheduler.extenderHTTPTimeout=30"]);
    assert_eq!(timing(&gpugate_config(&hami)), (25.0, 20.0));
    // kube-scheduler must not cut a bind off before gpugate's own limit.
    let e = template(
        tools,
        &[
            "--set",
            "scheduler.extenderHTTPTimeout=20,gpugate.config.scheduler.bindTimeoutSeconds=25",
        ],
    )
    .unwrap_err();
    assert!(
        e.contains("must be above gpugate's scheduler.bindTimeoutSeconds (25)"),
        "{e}"
    );
}

/// Renamed resources drive gpugate's config, the webhooks' conditions and
/// kube-scheduler's managedResources together.
#[test]
fn renamed_resources_reach_every_object() {
    let Some(tools) = tools() else { return };
    let names = [
        ("resourceName", "hami.io/gpu"),
        ("resourceMem", "hami.io/gpumem"),
        ("resourceMemPercentage", "hami.io/gpumem-percentage"),
        ("resourceCores", "hami.io/gpucores"),
        ("resourcePriority", "hami.io/priority"),
    ];
    let sets: Vec<String> = names.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let o = render(tools, &["--set", &sets.join(",")]);
    let c = gpugate_config(&o);
    assert_eq!(c.nvidia.resource_count_name, "hami.io/gpu");
    assert_eq!(c.nvidia.resource_core_name, "hami.io/gpucores");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let cel = webhook(&o, kind)["matchConditions"][0]["expression"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(cel.contains("r.startsWith('hami.io/')"), "{cel}");
        assert!(!cel.contains("nvidia.com"), "{cel}");
    }
    let managed = managed_resources(&o);
    // The renamed NVIDIA names, then Hygon's, as HAMi's chart lists them.
    let mut want: Vec<&str> = names.map(|(_, v)| v).to_vec();
    want.extend([
        "hygon.com/dcunum",
        "hygon.com/dcumem",
        "hygon.com/dcucores",
        "hygon.com/hcunum",
        "hygon.com/hcumem",
        "hygon.com/hcucores",
    ]);
    // Then every Ascend chip's, in the order of HAMi's chart, then
    // Kunlunxin's vXPU names, then Cambricon's, AWS Neuron's and Biren's,
    // then the whole devices' (Kunlunxin, Metax, Enflame) and Vastai's.
    let ascend: Vec<&str> = gpugate::devices::ascend::CHIPS
        .iter()
        .flat_map(|k| {
            [
                k.config.resource_count_name,
                k.config.resource_memory_name,
                k.config.resource_core_name,
            ]
        })
        .collect();
    want.extend(ascend);
    want.extend(["kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"]);
    want.extend([
        "cambricon.com/vmlu",
        "cambricon.com/mlu.smlu.vmemory",
        "cambricon.com/mlu.smlu.vcore",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "birentech.com/gpu",
        "kunlunxin.com/xpu",
        "metax-tech.com/gpu",
        "enflame.com/gcu",
        "vastaitech.com/va",
    ]);
    // Then every Iluvatar chip's, in the order of HAMi's chart.
    want.extend(gpugate::devices::iluvatar::CHIPS.iter().flat_map(|k| {
        [
            k.config.resource_count_name,
            k.config.resource_memory_name,
            k.config.resource_core_name,
        ]
    }));
    // Then AMD's, then Moore Threads' count (HAMi's chart leaves its memory
    // and cores to kube-scheduler, 7.7).
    want.extend(["amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"]);
    want.push("mthreads.com/vgpu");
    // Then Enflame DRS's (9.1).
    want.extend([
        "enflame.com/drs-gcu",
        "enflame.com/gcu-memory",
        "enflame.com/gcu-core",
    ]);
    // Then Metax sGPU's (5.1).
    want.extend([
        "metax-tech.com/sgpu",
        "metax-tech.com/vmemory",
        "metax-tech.com/vcore",
    ]);
    assert_eq!(managed, want);

    // device-config.content's names win over the top-level values, as in
    // HAMi's chart, and reach the webhooks too.
    let o = render(
        tools,
        &[
            "--set-string",
            "device-config.content=nvidia:\n  resourceCountName: example.com/vgpu\n",
        ],
    );
    assert_eq!(
        gpugate_config(&o).nvidia.resource_count_name,
        "example.com/vgpu"
    );
    let cel = webhook(&o, "MutatingWebhookConfiguration")["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        cel.contains("r.startsWith('example.com/') || r.startsWith('nvidia.com/')"),
        "{cel}"
    );
}

/// HAMi v2.10's Enflame DRS values (`enflameResourceName*`) and its
/// device config's `enflame` section reach gpugate's DRS kind and
/// kube-scheduler's managedResources.
#[test]
fn hamis_enflame_drs_values_reach_every_object() {
    let Some(tools) = tools() else { return };
    let o = render(
        tools,
        &[
            "--set",
            "enflameResourceNameDRSGCU=example.org/drs",
            "--set-string",
            "device-config.content=enflame:\n  resourceNameGCUCore: example.org/core\n",
        ],
    );
    let c = gpugate_config(&o);
    let drs = c.enflame.second();
    assert_eq!(drs.resource_count_name, "example.org/drs");
    assert_eq!(drs.resource_memory_name, "enflame.com/gcu-memory");
    assert_eq!(drs.resource_core_name, "example.org/core");
    assert_eq!(c.enflame.resource_count_name, "enflame.com/gcu");
    let managed = managed_resources(&o);
    assert!(
        managed.ends_with(&[
            "example.org/drs".to_string(),
            "enflame.com/gcu-memory".to_string(),
            "example.org/core".to_string(),
            "metax-tech.com/sgpu".to_string(),
            "metax-tech.com/vmemory".to_string(),
            "metax-tech.com/vcore".to_string()
        ]),
        "{managed:?}"
    );
}

/// HAMi v2.10's Metax sGPU values (`metaxResource*`) and its device
/// config's `metax` section reach gpugate's sGPU kind and kube-scheduler's
/// managedResources; the whole GPU keeps its name.
#[test]
fn hamis_metax_sgpu_values_reach_every_object() {
    let Some(tools) = tools() else { return };
    let o = render(
        tools,
        &[
            "--set",
            "metaxResourceName=example.org/sgpu",
            // A HAMi user's values carry it: accepted (the render and the
            // config load below succeed), not read.
            "--set-string",
            "metaxsGPUTopologyAware=true",
            "--set-string",
            "device-config.content=metax:\n  resourceVCoreName: example.org/vcore\n",
        ],
    );
    let c = gpugate_config(&o);
    let sgpu = c.metax.second();
    assert_eq!(sgpu.resource_count_name, "example.org/sgpu");
    assert_eq!(sgpu.resource_memory_name, "metax-tech.com/vmemory");
    assert_eq!(sgpu.resource_core_name, "example.org/vcore");
    assert_eq!(c.metax.resource_count_name, "metax-tech.com/gpu");
    let managed = managed_resources(&o);
    assert!(
        managed.ends_with(&[
            "example.org/sgpu".to_string(),
            "metax-tech.com/vmemory".to_string(),
            "example.org/vcore".to_string()
        ]),
        "{managed:?}"
    );
    let cel = webhook(&o, "MutatingWebhookConfiguration")["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cel.contains("r.startsWith('example.org/')"), "{cel}");
}

/// The names in kube-scheduler's managedResources, in order.
fn managed_resources(o: &[Value]) -> Vec<String> {
    let sched = config_map_yaml(o, "gpugate-scheduler-config", "config.yaml");
    sched["extenders"][0]["managedResources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

/// HAMi v2.10's Hygon DCU values (`dcuResource*`, the device config's
/// `hygon` section with its memoryFactor) reach gpugate's `hygon` section,
/// the webhooks and kube-scheduler's managedResources.
#[test]
fn hamis_dcu_values_reach_every_object() {
    let Some(tools) = tools() else { return };
    let o = render(
        tools,
        &[
            "--set",
            "dcuResourceName=example.org/dcunum",
            "--set-string",
            "device-config.content=hygon:\n  memoryFactor: 2\n  resourceCoreName: example.org/dcucores\n",
        ],
    );
    let c = gpugate_config(&o);
    assert_eq!(c.hygon.resource_count_name, "example.org/dcunum");
    assert_eq!(c.hygon.resource_memory_name, "hygon.com/dcumem");
    assert_eq!(c.hygon.resource_core_name, "example.org/dcucores");
    assert_eq!(c.hygon.memory_factor, 2);
    assert_eq!(c.nvidia.resource_count_name, "nvidia.com/gpu");
    let cel = webhook(&o, "MutatingWebhookConfiguration")["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        cel.contains("r.startsWith('example.org/')") && cel.contains("r.startsWith('hygon.com/')"),
        "{cel}"
    );
    let managed = managed_resources(&o);
    for name in [
        "example.org/dcunum",
        "hygon.com/dcumem",
        "example.org/dcucores",
    ] {
        assert!(managed.iter().any(|m| m == name), "{managed:?}");
    }
}

/// HAMi's Ascend values reach gpugate's `vnpus` section: the chart's
/// `devices.ascend.hamiVnpuCore` and `runtimeClassName` and
/// `scheduler.overwriteEnv` for every chip, and `device-config.content`'s
/// `vnpus` entries by commonWord, with HAMi's `resourceName` for the count
/// and its own templates; the renamed count reaches `managedResources`.
/// An entry for a chip gpugate does not place fails the render.
#[test]
fn hamis_ascend_values_reach_the_vnpus_section() {
    let Some(tools) = tools() else { return };
    let content = "vnpus:\n  configs:\n  - chipName: 910B3\n    commonWord: Ascend910B3\n    \
                   resourceName: example.org/npu\n    memoryAllocatable: 65536\n    \
                   memoryCapacity: 65536\n    templates:\n    - name: half\n      memory: 32768\n";
    let o = render(
        tools,
        &[
            "--set",
            "devices.ascend.hamiVnpuCore=true,devices.ascend.runtimeClassName=ascend,scheduler.overwriteEnv=true",
            "--set-string",
            &format!("device-config.content={content}"),
        ],
    );
    let c = gpugate_config(&o);
    assert!(c.vnpus.hami_vnpu_core);
    assert!(
        c.vnpus
            .chips
            .iter()
            .all(|chip| chip.runtime_class_name == "ascend" && chip.overwrite_env)
    );
    let b3 = &c.vnpus.chips[2];
    assert_eq!(b3.vnpu.common_word, "Ascend910B3");
    assert_eq!(b3.resource_count_name, "example.org/npu");
    assert_eq!(b3.resource_memory_name, "huawei.com/Ascend910B3-memory");
    assert_eq!(b3.vnpu.templates.len(), 1);
    assert_eq!(b3.vnpu.trim(20000), Some((32768, "half")));
    // Chips the content leaves out keep HAMi's chart values.
    assert_eq!(c.vnpus.chips[6].vnpu.templates.len(), 2);
    assert!(c.vnpus.chips[6].vnpu.super_pod);
    let managed = managed_resources(&o);
    assert!(
        managed.iter().any(|m| m == "example.org/npu"),
        "{managed:?}"
    );
    assert!(
        !managed.iter().any(|m| m == "huawei.com/Ascend910B3"),
        "{managed:?}"
    );

    let e = template(
        tools,
        &[
            "--set-string",
            "device-config.content=vnpus:\n  configs:\n  - commonWord: Ascend950\n",
        ],
    )
    .unwrap_err();
    assert!(
        e.contains("commonWord \"Ascend950\" is not a chip gpugate places"),
        "{e}"
    );
}

/// kubeScheduler.enabled=false: gpugate alone (one replica, replaced not
/// surged: its reservations live in the process), its extender on a
/// ClusterIP Service of its own that only gpugate.extenderClients reach,
/// and the configuration to paste into one's own scheduler.
#[test]
fn without_own_kube_scheduler_the_chart_renders_the_snippet() {
    let Some(tools) = tools() else { return };
    let o = render(tools, &["--set", "scheduler.kubeScheduler.enabled=false"]);
    let d = find(&o, "Deployment", "gpugate");
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["strategy"],
        serde_json::json!({"type": "Recreate"})
    );
    assert!(!ids(&o).iter().any(|(k, _)| k == "PodDisruptionBudget"));
    assert!(d["spec"]["template"]["spec"]["initContainers"].is_null());
    let g = container(d, "containers", "gpugate");
    let gargs = args(g, "args");
    assert!(gargs.contains(&"--extender-listen=0.0.0.0:9444".to_string()));
    assert!(gargs.contains(&"--dns=gpugate-extender.gpugate.svc".to_string()));
    assert!(!ids(&o).iter().any(|(k, n)| n.contains("kube-scheduler")
        || n == "gpugate-scheduler-config" && k == "ConfigMap"));
    // The webhooks' Service does not carry the extender; its own does.
    let ports = |name: &str| -> Vec<String> {
        find(&o, "Service", name)["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ports("gpugate"), ["https", "metrics"]);
    assert_eq!(ports("gpugate-extender"), ["extender"]);
    assert_eq!(
        find(&o, "Service", "gpugate-extender")["spec"]["type"],
        "ClusterIP"
    );
    let np = &find(&o, "NetworkPolicy", "gpugate-extender")["spec"]["ingress"];
    assert_eq!(
        np[0]["ports"],
        serde_json::json!([{"port": "https"}, {"port": "admin"}])
    );
    assert_eq!(np[1]["ports"], serde_json::json!([{"port": "extender"}]));
    assert_eq!(
        np[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "kube-system"
    );
    let snippet = find(&o, "ConfigMap", "gpugate-extender-snippet");
    let ext: Value =
        serde_yaml_ng::from_str(snippet["data"]["extenders.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(
        ext[0]["urlPrefix"],
        "https://gpugate-extender.gpugate.svc:9444"
    );
    assert_eq!(ext[0]["bindVerb"], "bind");
    let profiles: Value =
        serde_yaml_ng::from_str(snippet["data"]["profiles.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(profiles[0]["schedulerName"], "hami-scheduler");
    assert_eq!(snippet["data"]["ca-secret"], "gpugate-ca");
    // Asking for more replicas still gives one.
    let o = render(
        tools,
        &[
            "--set",
            "scheduler.kubeScheduler.enabled=false,scheduler.replicas=3",
        ],
    );
    assert_eq!(find(&o, "Deployment", "gpugate")["spec"]["replicas"], 1);
}

/// The migration's closed gate: 0 replicas, and no PodDisruptionBudget.
#[test]
fn zero_replicas_render() {
    let Some(tools) = tools() else { return };
    let o = render(tools, &["-f", HAMI_VALUES, "--set", "scheduler.replicas=0"]);
    assert_eq!(find(&o, "Deployment", "gpugate")["spec"]["replicas"], 0);
    assert!(!ids(&o).iter().any(|(k, _)| k == "PodDisruptionBudget"));
}

/// YAML 1.1 words stay strings; explicit nulls fall back to the defaults;
/// a device-config key that neither HAMi v2.10 nor gpugate reads is left
/// out instead of making gpugate refuse its config.
#[test]
fn awkward_values_render_valid_objects() {
    let Some(tools) = tools() else { return };
    let o = render(
        tools,
        &[
            "--set-string",
            "gpugate.logLevel=off,scheduler.nodeName=on",
            "--set",
            "scheduler.admissionWebhook.namespaceSelector=null,scheduler.admissionWebhook.objectSelector=null,scheduler.podDisruptionBudget=null",
            "--set-string",
            "device-config.content=nvidia:\n  defaultMemory: 1024\n  knownMigGeometries: []\n",
        ],
    );
    let d = find(&o, "Deployment", "gpugate");
    let env = &container(d, "initContainers", "gpugate")["env"];
    assert_eq!(env[1]["value"], "off");
    assert_eq!(d["spec"]["template"]["spec"]["nodeName"], "on");
    assert_eq!(
        find(&o, "PodDisruptionBudget", "gpugate")["spec"]["minAvailable"],
        1
    );
    assert_eq!(gpugate_config(&o).nvidia.default_memory, 1024);
    assert!(
        webhook(&o, "MutatingWebhookConfiguration")["namespaceSelector"]["matchExpressions"]
            .is_array()
    );
}

/// A new kube-scheduler configuration rolls the pods, as a new config does.
#[test]
fn scheduler_configuration_changes_roll_the_pods() {
    let Some(tools) = tools() else { return };
    let checksum = |args: &[&str]| {
        find(&render(tools, args), "Deployment", "gpugate")["spec"]["template"]["metadata"]
            ["annotations"]["checksum/config"]
            .clone()
    };
    let base = checksum(&[]);
    assert_ne!(
        base,
        checksum(&["--set", "scheduler.nodeLabelSelector.gpu=on"])
    );
    assert_ne!(
        base,
        checksum(&["--set", "scheduler.extenderHTTPTimeout=40"])
    );
    assert_ne!(base, checksum(&["--set", "schedulerName=other"]));
}

#[test]
fn custom_url_renders_url_mode_webhooks() {
    let Some(tools) = tools() else { return };
    let o = render(
        tools,
        &[
            "--set",
            "scheduler.admissionWebhook.customURL.enabled=true,scheduler.admissionWebhook.customURL.host=gpugate.example.com,scheduler.service.type=NodePort",
        ],
    );
    // HAMi's NodePort numbers.
    let svc = &find(&o, "Service", "gpugate")["spec"]["ports"];
    assert_eq!(
        (svc[0]["nodePort"].clone(), svc[1]["nodePort"].clone()),
        (31998.into(), 31993.into())
    );
    let url = |kind| webhook(&o, kind)["clientConfig"].clone();
    assert_eq!(
        url("MutatingWebhookConfiguration"),
        serde_json::json!({"url": "https://gpugate.example.com:31998/webhook"})
    );
    assert_eq!(
        url("ValidatingWebhookConfiguration"),
        serde_json::json!({"url": "https://gpugate.example.com:31998/validate"})
    );
    // The self-made certificate names the host.
    let g = container(
        find(&o, "Deployment", "gpugate"),
        "initContainers",
        "gpugate",
    );
    assert!(args(g, "args").contains(&"--dns=gpugate.example.com".to_string()));
}

/// Values that would install something broken are refused at render time,
/// each with a message that names the value.
#[test]
fn bad_values_are_refused_with_clear_messages() {
    let Some(tools) = tools() else { return };
    for (args, says) in [
        (
            vec![
                "--set",
                "scheduler.admissionWebhook.failurePolicy=Sometimes",
            ],
            "scheduler.admissionWebhook.failurePolicy \"Sometimes\": allowed Fail or Ignore",
        ),
        (
            vec!["--set", "scheduler.nodeLockExpire=5 minutes"],
            "scheduler.nodeLockExpire \"5 minutes\"",
        ),
        (
            vec!["--set", "scheduler.metricsBindAddress=everywhere"],
            "scheduler.metricsBindAddress \"everywhere\"",
        ),
        (
            vec!["--set-string", "device-config.content=nvidia: [unclosed"],
            "device-config.content is not YAML",
        ),
        (
            vec![
                "--set",
                "scheduler.admissionWebhook.customURL.enabled=true,scheduler.admissionWebhook.customURL.host=10.0.0.5,scheduler.service.type=NodePort",
            ],
            "customURL.host 10.0.0.5",
        ),
        (
            vec!["--set", "scheduler.admissionWebhook.customURL.enabled=true"],
            "customURL needs scheduler.service.type NodePort",
        ),
        (
            vec!["--set", "scheduler.replicas=-1"],
            "scheduler.replicas must be 0 or more",
        ),
        (vec!["--kube-version", "v1.29.4"], "kubeVersion: >=1.30.0-0"),
        (
            vec!["--set", "scheduler.kubeBurst=100"],
            "scheduler.kubeBurst is set but scheduler.kubeQPS is not",
        ),
    ] {
        let e = template(tools, &args).expect_err(&format!("{args:?} renders"));
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

/// The kube-scheduler image follows the cluster's version, suffixes of
/// managed distributions left out.
#[test]
fn kube_scheduler_tag_follows_the_cluster() {
    let Some(tools) = tools() else { return };
    for (cluster, tag) in [
        ("v1.31.4+k3s1", "v1.31.4"),
        ("v1.33.2-eks-4096722", "v1.33.2"),
    ] {
        let o = render(tools, &["--kube-version", cluster]);
        let ks = container(
            find(&o, "Deployment", "gpugate"),
            "containers",
            "kube-scheduler",
        );
        assert_eq!(ks["image"], format!("registry.k8s.io/kube-scheduler:{tag}"));
    }
}

/// Another release name and namespace: every cross-reference between the
/// objects follows (config webhook names, RBAC resourceNames, the Lease,
/// the CA Secret, the Service's DNS names, the namespace exclusion).
#[test]
fn names_hang_together_for_any_release() {
    let Some(tools) = tools() else { return };
    let out = Command::new(tools.join("helm"))
        .current_dir(ROOT)
        .args(["template", "hami"])
        .arg(chart())
        .args(["-n", "kube-gpu", "--kube-version", KUBE_VERSION])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let o = documents(&String::from_utf8(out.stdout).unwrap());
    let name = "hami-gpugate";
    let c = Config::from_yaml(
        find(&o, "ConfigMap", "hami-gpugate-config")["data"]["gpugate.yaml"]
            .as_str()
            .unwrap(),
        "chart",
    )
    .unwrap();
    assert_eq!(
        (c.webhooks.mutating.as_str(), c.webhooks.validating.as_str()),
        (name, name)
    );
    find(&o, "MutatingWebhookConfiguration", name);
    find(&o, "ValidatingWebhookConfiguration", name);
    for (kind, role, rule, want) in [
        ("ClusterRole", "hami-gpugate-webhook-ca", 0, "hami-gpugate"),
        (
            "Role",
            "hami-gpugate-leader-election",
            0,
            "hami-gpugate-scheduler",
        ),
        ("Role", "hami-gpugate-ca", 0, "hami-gpugate-ca"),
    ] {
        assert_eq!(
            find(&o, kind, role)["rules"][rule]["resourceNames"][0],
            want,
            "{role}"
        );
    }
    let sched = config_map_yaml(&o, "hami-gpugate-scheduler-config", "config.yaml");
    assert_eq!(
        sched["leaderElection"]["resourceName"],
        "hami-gpugate-scheduler"
    );
    assert_eq!(sched["leaderElection"]["resourceNamespace"], "kube-gpu");
    let d = find(&o, "Deployment", name);
    assert_eq!(d["metadata"]["namespace"], "kube-gpu");
    let gargs = args(container(d, "initContainers", "gpugate"), "args");
    for a in [
        "--self-signed-secret=kube-gpu/hami-gpugate-ca",
        "--dns=hami-gpugate.kube-gpu.svc",
    ] {
        assert!(gargs.contains(&a.to_string()), "{a}: {gargs:?}");
    }
    assert_eq!(d["spec"]["template"]["spec"]["serviceAccountName"], name);
    // Priority and fairness: the level and the schema named for the
    // release, the schema matching the release's ServiceAccount.
    let fs = &find(&o, "FlowSchema", name)["spec"];
    assert_eq!(fs["priorityLevelConfiguration"]["name"], name);
    find(&o, "PriorityLevelConfiguration", name);
    assert_eq!(
        fs["rules"][0]["subjects"][0]["serviceAccount"],
        serde_json::json!({"name": name, "namespace": "kube-gpu"})
    );
    let w = &find(&o, "MutatingWebhookConfiguration", name)["webhooks"][0];
    assert_eq!(w["clientConfig"]["service"]["name"], name);
    assert_eq!(w["clientConfig"]["service"]["namespace"], "kube-gpu");
    assert_eq!(
        w["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["kube-system", "kube-gpu"])
    );
}
