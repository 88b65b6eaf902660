//! Device kinds besides NVIDIA on the real control plane (issue 40): a
//! mixed cluster of NVIDIA, Hygon DCU and HCU, Ascend 910B3 and 910C,
//! Kunlunxin vXPU, Cambricon MLU and AWS Neuron nodes. The nodes register
//! as each vendor's plugin does (HAMi's legacy text for DCUs, JSON for
//! NPUs and vXPUs, node capacity only for MLUs and Neuron devices); the
//! simulated plugin hands out each kind's entries by its protocol: through
//! HAMi's node lock (for NPUs, finding each one's template in
//! `huawei.com/<chip>`), Cambricon's own lock and profile, AWS's
//! `AWS_NEURON_IDS` (tests/e2e/device_plugin.rs).

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::device_plugin::DevicePlugin;
use crate::fixtures::*;
use crate::hazards::admitted_with_own_devices;
use crate::scenarios::Ctx;

const BIND: Duration = Duration::from_secs(60);

/// A pod whose second container asks for DCUs (`limits`); the first, a
/// log shipper, for none.
fn dcu_pod(name: &str, limits: &[(&str, &str)]) -> Value {
    let mut pod = gpu_pod(name, limits);
    let main = pod["spec"]["containers"][0].take();
    pod["spec"]["containers"] = json!([
        {"name": "logs", "image": "busybox", "command": ["sleep", "infinity"]},
        main,
    ]);
    pod
}

/// hami-vendors.md 3.3: `<uuid>,DCU,<MiB>,<cores>:;`, one entry for the one
/// container with DCUs (Hygon's types are `DCU-<model>`, 1.5).
fn is_hamis_dcu_list(list: &str, mib: u32, cores: u32) -> bool {
    list.strip_suffix(&format!(",DCU,{mib},{cores}:;"))
        .is_some_and(|uuid| uuid.starts_with("DCU-vd-") && !uuid.contains([';', ':', ',']))
}

/// A node with two Hygon HCUs registered under HAMi master's names
/// (hami-vendors.md 3.8).
fn hcu_node(name: &str) -> Value {
    plain_node(
        name,
        json!({"hami.io/node-hcu-register": format!(
            "HCU-{name}-0,4,65520,100,HCU-K100AI,0,true:\
             HCU-{name}-1,4,65520,100,HCU-K100AI,0,true:")}),
        json!({"hygon.com/hcunum": "8"}),
    )
}

/// A node with Ascend NPUs of `chip` registered as HAMi's
/// ascend-device-plugin does (hami-vendors.md 2.2): JSON, `type` the common
/// word, 4 vNPUs per NPU, `custominfo.NetworkID` 0 for NPUs 0-3 and 1
/// above (0 for every 910C).
fn npu_node(name: &str, chip: &str, npus: usize) -> Value {
    let register: Vec<Value> = (0..npus)
        .map(|i| {
            let network = if chip == "Ascend910C" || i <= 3 { 0 } else { 1 };
            json!({"index": i, "id": format!("NPU-{name}-{i}"), "count": 4, "devmem": 65536,
                   "devcore": 20, "type": chip, "health": true,
                   "custominfo": {"NetworkID": network}})
        })
        .collect();
    plain_node(
        name,
        json!({format!("hami.io/node-register-{chip}"): Value::Array(register).to_string(),
               format!("hami.io/node-handshake-{chip}"): "Reported_2026.11.28 10:00:00"}),
        json!({format!("huawei.com/{chip}"): (npus * 4).to_string()}),
    )
}

/// The NPU indexes a pod holds, from its device list's UUIDs.
fn npu_indexes(pod: &Pod) -> anyhow::Result<Vec<usize>> {
    let mut out: Vec<usize> = uuids(pod)?
        .iter()
        .filter_map(|u| u.rsplit('-').next()?.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Ascend on the real control plane (hami-vendors.md section 2): a 910B3
/// node and a 910C node. A template slice is rewritten by the webhook to
/// its template and bound with HAMi's lists, `huawei.com/Ascend910B3` and
/// `predicate-time`, and the simulated plugin finds its template by UUID;
/// four whole NPUs come from one network group; a 910C request of 1
/// becomes a whole card of two; deleting the pods frees every NPU (eight
/// whole NPUs then bind).
async fn ascend(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let b3 = |name: &str, limits: &[(&str, &str)]| dcu_pod(name, limits);
    create_pod(
        admin,
        ns,
        &b3(
            "npu-slice",
            &[
                ("huawei.com/Ascend910B3", "1"),
                ("huawei.com/Ascend910B3-memory", "10000"),
            ],
        ),
    )
    .await?;
    let slice = wait_bound(admin, ns, "npu-slice", BIND).await?;
    let list = annotation(&slice, "hami.io/Ascend910B3-devices-allocated").unwrap_or_default();
    let uuid = list
        .strip_prefix(';')
        .and_then(|l| l.strip_suffix(",Ascend910B3,16384,0:;"))
        .unwrap_or_default()
        .to_string();
    ensure!(
        node_of(&slice) == "vd-4" && uuid.starts_with("NPU-vd-4-"),
        "npu-slice on {} with {list:?}",
        node_of(&slice)
    );
    ensure!(
        annotation(&slice, "huawei.com/Ascend910B3")
            == Some(&format!(r#"[{{"UUID":"{uuid}","temp":"vir05_1c_16g","memory":16384}}]"#)[..])
            && annotation(&slice, "predicate-time").is_some(),
        "huawei.com/Ascend910B3 is {:?}",
        annotation(&slice, "huawei.com/Ascend910B3")
    );
    // The webhook wrote the template's memory into limits and requests.
    let main = &slice.spec.clone().unwrap_or_default().containers[1];
    let memory = |m: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >| {
        m.and_then(|m| m.get("huawei.com/Ascend910B3-memory"))
            .map(|q| q.0.clone())
    };
    let r = main.resources.clone().unwrap_or_default();
    ensure!(
        memory(r.limits.as_ref()).as_deref() == Some("16384")
            && memory(r.requests.as_ref()).as_deref() == Some("16384"),
        "the webhook left {r:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "npu-slice").await?;

    // Four whole NPUs: the network group without the slice's NPU.
    create_pod(
        admin,
        ns,
        &b3("npu-four", &[("huawei.com/Ascend910B3", "4")]),
    )
    .await?;
    let four = npu_indexes(&wait_bound(admin, ns, "npu-four", BIND).await?)?;
    let slice_group = npu_indexes(&slice)?.first().copied().unwrap_or_default() / 4;
    let want: Vec<usize> = (0..4).map(|i| (1 - slice_group) * 4 + i).collect();
    ensure!(four == want, "npu-four took NPUs {four:?}, wanted {want:?}");

    // 910C: a request of 1 becomes a card of two (2.4, 2.5).
    create_pod(
        admin,
        ns,
        &b3("npu-card", &[("huawei.com/Ascend910C", "1")]),
    )
    .await?;
    let card = wait_bound(admin, ns, "npu-card", BIND).await?;
    let held = npu_indexes(&card)?;
    ensure!(
        node_of(&card) == "vd-5" && held.len() == 2 && held[0] % 2 == 0 && held[1] == held[0] + 1,
        "npu-card on {} holds NPUs {held:?}",
        node_of(&card)
    );
    admitted_with_own_devices(plugin, admin, ns, "npu-card").await?;
    let all = bound_pods(admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await?;

    // Deleting the pods frees every NPU: eight whole 910B3 NPUs then bind.
    delete_pods(admin, ns, &["npu-slice", "npu-four", "npu-card"]).await?;
    create_pod(
        admin,
        ns,
        &b3("npu-eight", &[("huawei.com/Ascend910B3", "8")]),
    )
    .await?;
    let eight = wait_bound_after_delete(admin, ns, "npu-eight", BIND).await?;
    ensure!(
        npu_indexes(&eight)? == (0..8).collect::<Vec<_>>(),
        "npu-eight: {:?}",
        uuids(&eight)?
    );
    Ok(())
}

/// A node with eight Kunlunxin vXPU cards registered as Kunlunxin's plugin
/// does (hami-vendors.md 8.2): JSON under `hami.io/node-register-xpu`,
/// `type` XPU, split count 1 (which HAMi does not read).
fn xpu_node(name: &str) -> Value {
    let register: Vec<Value> = (0..8)
        .map(|i| {
            json!({"id": format!("XPU-{name}-{i}"), "index": i, "count": 1, "devmem": 98304,
                   "devcore": 100, "type": "XPU", "health": true})
        })
        .collect();
    plain_node(
        name,
        json!({"hami.io/node-register-xpu": Value::Array(register).to_string()}),
        json!({"kunlunxin.com/vxpu": "8"}),
    )
}

/// Kunlunxin vXPUs on the real control plane (hami-vendors.md section 8):
/// a 40,000 MiB request becomes a half (49,152 MiB, 50 cores) in the pod
/// and in HAMi's list; four whole cards then take the wing without it.
async fn kunlun(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    create_pod(
        admin,
        ns,
        &dcu_pod(
            "xpu-half",
            &[
                ("kunlunxin.com/vxpu", "1"),
                ("kunlunxin.com/vxpu-memory", "40000"),
            ],
        ),
    )
    .await?;
    let half = wait_bound(admin, ns, "xpu-half", BIND).await?;
    let list = annotation(&half, "hami.io/xpu-devices-allocated").unwrap_or_default();
    let card = list
        .strip_prefix(";XPU-vd-6-")
        .and_then(|l| l.strip_suffix(",XPU,49152,50:;"))
        .and_then(|i| i.parse::<usize>().ok());
    ensure!(card.is_some(), "hami.io/xpu-devices-allocated is {list:?}");
    let limit = half.spec.clone().unwrap_or_default().containers[1]
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("kunlunxin.com/vxpu-memory"))
        .map(|q| q.0.clone());
    ensure!(
        limit.as_deref() == Some("49152"),
        "the webhook left {limit:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "xpu-half").await?;
    create_pod(
        admin,
        ns,
        &dcu_pod("xpu-four", &[("kunlunxin.com/vxpu", "4")]),
    )
    .await?;
    let four = npu_indexes(&wait_bound(admin, ns, "xpu-four", BIND).await?)?;
    let other_wing = if card.unwrap_or_default() < 4 { 4 } else { 0 };
    ensure!(
        four == (other_wing..other_wing + 4).collect::<Vec<_>>(),
        "xpu-four took cards {four:?}, the half is on card {card:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "xpu-four").await
}

/// A node with two NVIDIA T4s and two Cambricon MLUs of 16,384 MiB, the
/// MLUs advertised as Cambricon's plugin does: node capacity only
/// (hami-vendors.md 4.2).
fn gpu_and_mlu_node(name: &str) -> Value {
    let mut node = gpu_node(name, 2, 10, 16384, "NVIDIA Tesla T4");
    node["status"]["capacity"]["cambricon.com/mlu.smlu.vcore"] = json!("200");
    node["status"]["capacity"]["cambricon.com/mlu.smlu.vmemory"] = json!("128");
    node
}

/// A trn1 node with eight Neuron devices of two cores, advertised as AWS's
/// plugin does: node capacity only (hami-vendors.md 10.2).
fn neuron_node(name: &str) -> Value {
    let mut node = plain_node(
        name,
        json!({}),
        json!({"aws.amazon.com/neuron": "8", "aws.amazon.com/neuroncore": "16"}),
    );
    node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = json!("trn1.32xlarge");
    node
}

/// The value of `key` on `pod`, for messages.
fn shown(pod: &Pod, key: &str) -> String {
    format!("{key}={:?}", annotation(pod, key))
}

/// Kinds read from node capacity, and a pod of two kinds, on the real
/// control plane (hami-vendors.md sections 4 and 10, 1.3):
///
/// - a Cambricon slice binds on vd-7 with HAMi's list and the DSMLU
///   profile, behind Cambricon's lock, which the simulated plugin finds
///   and releases;
/// - a NeuronCore binds as core 0 of a device, four whole devices take the
///   aligned window beside it, with the `AWS_NEURON_IDS` AWS's plugin
///   reads, no lock;
/// - a pod asking for an NVIDIA GPU and an MLU binds on the one node with
///   both, each container given its own kind's entry;
/// - the ledger equals the annotations; deleting the pods frees every MLU
///   and Neuron device (two whole MLUs, then eight devices, bind).
async fn capacity_kinds(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    create_pod(
        admin,
        ns,
        &dcu_pod(
            "mlu-slice",
            &[
                ("cambricon.com/vmlu", "1"),
                ("cambricon.com/mlu.smlu.vmemory", "16"),
                ("cambricon.com/mlu.smlu.vcore", "30"),
            ],
        ),
    )
    .await?;
    let mlu = wait_bound(admin, ns, "mlu-slice", BIND).await?;
    let list = annotation(&mlu, "hami.io/cambricon-mlu-devices-allocated").unwrap_or_default();
    let index = list
        .strip_prefix(";vd-7-cambricon-mlu-")
        .and_then(|l| l.strip_suffix(",MLU,4096,30:;"))
        .unwrap_or_default()
        .to_string();
    // `CAMBRICON_DSMLU_ASSIGNED` is "false" until the (simulated) plugin
    // has set the MLU up, which may be done by now.
    ensure!(
        (index == "0" || index == "1")
            && annotation(&mlu, "CAMBRICON_DSMLU_PROFILE") == Some(&format!("{index}_30_16")[..])
            && annotation(&mlu, "CAMBRICON_DSMLU_ASSIGNED").is_some(),
        "mlu-slice: {list:?}, {}",
        shown(&mlu, "CAMBRICON_DSMLU_PROFILE")
    );
    admitted_with_own_devices(plugin, admin, ns, "mlu-slice").await?;

    create_pod(
        admin,
        ns,
        &dcu_pod("neuron-core", &[("aws.amazon.com/neuroncore", "1")]),
    )
    .await?;
    let core = wait_bound(admin, ns, "neuron-core", BIND).await?;
    let list = annotation(&core, "hami.io/aws-neuron-devices-allocated").unwrap_or_default();
    ensure!(
        list == ";vd-8-AWSNeuron-0,AWSNeuron,0,1:;"
            && annotation(&core, "AWS_NEURON_IDS") == Some("0")
            && annotation(&core, "NEURON_RESOURCE_TYPE") == Some("aws.amazon.com/neuroncore")
            && annotation(&core, "NEURON_ALLOCATED").is_some()
            && annotation(&core, "aws.amazon.com/predicate-node") == Some("vd-8")
            && annotation(&core, "NEURON_ALLOC_TIME").is_some_and(|t| t.parse::<i128>().is_ok()),
        "neuron-core: {list:?}, {}",
        shown(&core, "AWS_NEURON_IDS")
    );
    admitted_with_own_devices(plugin, admin, ns, "neuron-core").await?;
    create_pod(
        admin,
        ns,
        &dcu_pod("neuron-four", &[("aws.amazon.com/neuron", "4")]),
    )
    .await?;
    let four = wait_bound(admin, ns, "neuron-four", BIND).await?;
    ensure!(
        npu_indexes(&four)? == [4, 5, 6, 7]
            && annotation(&four, "AWS_NEURON_IDS") == Some("4,5,6,7")
            && annotation(&four, "NEURON_RESOURCE_TYPE").is_none(),
        "neuron-four: {:?}, {}",
        uuids(&four)?,
        shown(&four, "AWS_NEURON_IDS")
    );
    admitted_with_own_devices(plugin, admin, ns, "neuron-four").await?;

    // Two kinds in one pod: vd-1 has GPUs but no MLUs, so vd-7.
    let mut two = gpu_pod(
        "gpu-and-mlu",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "3000")],
    );
    if let Some(containers) = two["spec"]["containers"].as_array_mut() {
        containers.push(json!({"name": "infer", "image": "busybox",
            "resources": {"limits": {"cambricon.com/vmlu": "1",
                "cambricon.com/mlu.smlu.vmemory": "8", "cambricon.com/mlu.smlu.vcore": "20"}}}));
    }
    create_pod(admin, ns, &two).await?;
    let two = wait_bound(admin, ns, "gpu-and-mlu", BIND).await?;
    let gpus = annotation(&two, "hami.io/vgpu-devices-allocated").unwrap_or_default();
    let mlus = annotation(&two, "hami.io/cambricon-mlu-devices-allocated").unwrap_or_default();
    ensure!(
        node_of(&two) == "vd-7"
            && gpus.starts_with("GPU-vd-7-")
            && gpus.ends_with(",NVIDIA,3000,0:;;")
            && mlus.starts_with(";vd-7-cambricon-mlu-")
            && mlus.ends_with(",MLU,2048,20:;"),
        "gpu-and-mlu on {}: {gpus:?} and {mlus:?}",
        node_of(&two)
    );
    admitted_with_own_devices(plugin, admin, ns, "gpu-and-mlu").await?;
    let all = bound_pods(admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await?;

    // Deleting frees them: two whole MLUs, and eight whole devices.
    delete_pods(
        admin,
        ns,
        &["mlu-slice", "gpu-and-mlu", "neuron-core", "neuron-four"],
    )
    .await?;
    create_pod(
        admin,
        ns,
        &dcu_pod("mlu-two", &[("cambricon.com/vmlu", "2")]),
    )
    .await?;
    let two = wait_bound_after_delete(admin, ns, "mlu-two", BIND).await?;
    ensure!(
        annotation(&two, "hami.io/cambricon-mlu-devices-allocated")
            == Some(";vd-7-cambricon-mlu-0,MLU,16384,100:vd-7-cambricon-mlu-1,MLU,16384,100:;"),
        "mlu-two: {}",
        shown(&two, "hami.io/cambricon-mlu-devices-allocated")
    );
    admitted_with_own_devices(plugin, admin, ns, "mlu-two").await?;
    create_pod(
        admin,
        ns,
        &dcu_pod("neuron-eight", &[("aws.amazon.com/neuron", "8")]),
    )
    .await?;
    let eight = wait_bound_after_delete(admin, ns, "neuron-eight", BIND).await?;
    ensure!(
        npu_indexes(&eight)? == (0..8).collect::<Vec<_>>(),
        "neuron-eight: {:?}",
        uuids(&eight)?
    );
    admitted_with_own_devices(plugin, admin, ns, "neuron-eight").await?;
    let all = bound_pods(admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await
}

/// A node with two Biren GPUs registered as biren-device-plugin does
/// (hami-vendors.md 12.2): JSON, `type` Biren, count 1.
fn biren_node(name: &str) -> Value {
    let register: Vec<Value> = (0..2)
        .map(|i| {
            json!({"id": format!("BR-{name}-{i}"), "index": i, "count": 1, "devmem": 65024,
                   "type": "Biren", "health": true})
        })
        .collect();
    plain_node(
        name,
        json!({"hami.io/node-biren-register": Value::Array(register).to_string()}),
        json!({"birentech.com/gpu": "2"}),
    )
}

/// Biren on the real control plane (hami-vendors.md section 12): a GPU by
/// count binds with HAMi's capitalised lists and no memory or cores, its
/// container given its entry through HAMi's lock; a second takes the
/// other GPU.
async fn biren(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    for name in ["br-a", "br-b"] {
        create_pod(admin, ns, &dcu_pod(name, &[("birentech.com/gpu", "1")])).await?;
        let bound = wait_bound(admin, ns, name, BIND).await?;
        let list = annotation(&bound, "hami.io/Biren-devices-allocated").unwrap_or_default();
        ensure!(
            list.starts_with(";BR-vd-9-") && list.ends_with(",Biren,0,0:;"),
            "{name}: {list:?}"
        );
        admitted_with_own_devices(plugin, admin, ns, name).await?;
    }
    let all = bound_pods(admin, ns).await?;
    let held: std::collections::BTreeSet<String> = all
        .iter()
        .filter(|p| node_of(p) == "vd-9")
        .flat_map(|p| uuids(p).unwrap_or_default())
        .collect();
    ensure!(held.len() == 2, "the Biren pods hold {held:?}");
    Ok(())
}

/// Whole devices read from node capacity (hami-vendors.md 5.2, 8.2, 9.2):
/// a node advertising `count` of `resource` and nothing else.
fn capacity_node(name: &str, resource: &str, count: u32) -> Value {
    plain_node(name, json!({}), json!({resource: count.to_string()}))
}

/// A node with two Vastai cards of count 2, registered as JSON (13.2).
fn vastai_node(name: &str) -> Value {
    let register: Vec<Value> = (0..2)
        .map(|i| {
            json!({"id": format!("VA-{name}-{i}"), "index": i, "count": 2, "devmem": 16384,
                   "devcore": 100, "type": "Vastai", "health": true})
        })
        .collect();
    plain_node(
        name,
        json!({"hami.io/node-va-register": Value::Array(register).to_string()}),
        json!({"vastaitech.com/va": "4"}),
    )
}

/// Whole devices and Vastai on the real control plane (hami-vendors.md
/// sections 5, 8, 9, 13): a Metax GPU, two Enflame GCUs, four Kunlunxin
/// XPUs (one wing, with `BAIDU_COM_DEVICE_IDX`) and a Vastai card bind
/// with HAMi's lists, byte for byte, and each container gets its own
/// entry from the simulated plugin (no lock; HAMi's lock for Vastai). The
/// ledger equals the annotations; deleting the GCU pod frees both GCUs
/// for the next.
async fn whole_devices(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let bind = |name: &'static str, limits: &'static [(&'static str, &'static str)]| async move {
        create_pod(admin, ns, &dcu_pod(name, limits)).await?;
        wait_bound(admin, ns, name, BIND).await
    };
    let mx = bind("metax-one", &[("metax-tech.com/gpu", "1")]).await?;
    let list = annotation(&mx, "hami.io/metax-gpu-devices-allocated").unwrap_or_default();
    ensure!(
        (list == ";vd-10-metax-0,Metax-GPU,65536,100:;"
            || list == ";vd-10-metax-1,Metax-GPU,65536,100:;")
            && annotation(&mx, "hami.io/metax-gpu-devices-to-allocate").is_some(),
        "metax-one: {list:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "metax-one").await?;

    let gcus = bind("gcu-two", &[("enflame.com/gcu", "2")]).await?;
    let list = annotation(&gcus, "hami.io/enflame-gcu-devices-allocated").unwrap_or_default();
    ensure!(
        list == ";vd-11-GCU-0,GCU,100,100:vd-11-GCU-1,GCU,100,100:;",
        "gcu-two: {list:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "gcu-two").await?;

    // Two empty boards (vd-12, vd-19): either one.
    let xpus = bind("whole-xpus", &[("kunlunxin.com/xpu", "4")]).await?;
    let board = node_of(&xpus).to_string();
    let wing = npu_indexes(&xpus)?;
    let idx: Vec<String> = wing.iter().map(ToString::to_string).collect();
    ensure!(
        (board == "vd-12" || board == "vd-19")
            && (wing == [0, 1, 2, 3] || wing == [4, 5, 6, 7])
            && annotation(&xpus, "BAIDU_COM_DEVICE_IDX") == Some(&idx.join(",")[..])
            && annotation(&xpus, "hami.io/kunlun-allocated").is_some_and(|l| {
                l.starts_with(&format!(";{board}-kunlun-")) && l.ends_with(",kunlun,98304,100:;")
            }),
        "whole-xpus on {board}: {wing:?}, {}",
        shown(&xpus, "BAIDU_COM_DEVICE_IDX")
    );
    admitted_with_own_devices(plugin, admin, ns, "whole-xpus").await?;
    // Node preferences (docs/policies.md): one XPU under spread. The node
    // policy alone would take the empty board; on it the XPU breaks a wing
    // (bubbles 1 to 3), beside whole-xpus it breaks the other wing only (1
    // to 2), so gpugate ranks that board first, and kube-scheduler binds
    // it there through /filter and /prioritize.
    let mut spread = dcu_pod("xpu-spread", &[("kunlunxin.com/xpu", "1")]);
    spread["metadata"]["annotations"] = json!({"hami.io/node-scheduler-policy": "spread"});
    create_pod(admin, ns, &spread).await?;
    let spread = wait_bound(admin, ns, "xpu-spread", BIND).await?;
    let other_wing = npu_indexes(&spread)?;
    ensure!(
        node_of(&spread) == board && other_wing.iter().all(|i| !wing.contains(i)),
        "xpu-spread on {} {other_wing:?}, whole-xpus on {board} {wing:?}",
        node_of(&spread)
    );
    admitted_with_own_devices(plugin, admin, ns, "xpu-spread").await?;

    let va = bind("va-one", &[("vastaitech.com/va", "1")]).await?;
    let list = annotation(&va, "hami.io/Vastai-devices-allocated").unwrap_or_default();
    ensure!(
        list.starts_with(";VA-vd-13-") && list.ends_with(",Vastai,0,0:;"),
        "va-one: {list:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "va-one").await?;
    let all = bound_pods(admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await?;

    // vd-11 has no GCU left; deleting gcu-two frees both.
    delete_pods(admin, ns, &["gcu-two"]).await?;
    create_pod(
        admin,
        ns,
        &dcu_pod("gcu-again", &[("enflame.com/gcu", "2")]),
    )
    .await?;
    let again = wait_bound_after_delete(admin, ns, "gcu-again", BIND).await?;
    ensure!(
        node_of(&again) == "vd-11",
        "gcu-again on {}",
        node_of(&again)
    );
    admitted_with_own_devices(plugin, admin, ns, "gcu-again").await?;
    let all = bound_pods(admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await
}

/// A node with two Iluvatar BI-V150 GPUs of 32,768 MiB, registered as the
/// chart's plugin does (hami-vendors.md 6.2): legacy text, `type` the
/// chip's word.
fn iluvatar_node(name: &str) -> Value {
    let register: String = (0..2)
        .map(|i| format!("BI-V150-{name}-{i},4,32768,100,BI-V150,0,true,{i},default:"))
        .collect();
    plain_node(
        name,
        json!({"hami.io/node-BI-V150-register": register}),
        json!({"iluvatar.ai/BI-V150-vgpu": "8"}),
    )
}

/// Iluvatar on the real control plane (hami-vendors.md section 6): the
/// webhook gives a two-GPU container 200 cores and `SOL_CONTINER_NAME`;
/// it binds with both GPUs whole in HAMi's lists, its container given
/// its entry through HAMi's lock; a slice then waits, and binds once the
/// pod is deleted.
async fn iluvatar(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    create_pod(
        admin,
        ns,
        &dcu_pod("il-two", &[("iluvatar.ai/BI-V150-vgpu", "2")]),
    )
    .await?;
    let two = wait_bound(admin, ns, "il-two", BIND).await?;
    let main = two
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "cuda"))
        .cloned()
        .unwrap_or_default();
    let cores = main
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("iluvatar.ai/BI-V150.vCore"))
        .map(|q| q.0.clone());
    let named = main
        .env
        .iter()
        .flatten()
        .any(|e| e.name == "SOL_CONTINER_NAME" && e.value.as_deref() == Some("cuda"));
    let list = annotation(&two, "hami.io/BI-V150-devices-allocated").unwrap_or_default();
    ensure!(
        cores.as_deref() == Some("200")
            && named
            && list == ";BI-V150-vd-14-0,BI-V150,32768,100:BI-V150-vd-14-1,BI-V150,32768,100:;",
        "il-two: cores {cores:?}, SOL_CONTINER_NAME {named}, {list:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "il-two").await?;
    delete_pods(admin, ns, &["il-two"]).await?;
    create_pod(
        admin,
        ns,
        &dcu_pod(
            "il-slice",
            &[
                ("iluvatar.ai/BI-V150-vgpu", "1"),
                ("iluvatar.ai/BI-V150.vMem", "16"),
                ("iluvatar.ai/BI-V150.vCore", "25"),
            ],
        ),
    )
    .await?;
    let slice = wait_bound_after_delete(admin, ns, "il-slice", BIND).await?;
    let list = annotation(&slice, "hami.io/BI-V150-devices-allocated").unwrap_or_default();
    ensure!(
        list.starts_with(";BI-V150-vd-14-") && list.ends_with(",BI-V150,4096,25:;"),
        "il-slice: {list:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "il-slice").await
}

/// A node with two AMD MI300X VFs registered as HAMi's amd-device-plugin
/// does (hami-vendors.md 11.2): JSON, 304 compute units, the product name
/// as the type.
fn amd_node(name: &str) -> Value {
    let register: Vec<Value> = (0..2)
        .map(|i| {
            json!({"id": format!("GPU-{name}-{i}"), "index": i, "count": 4, "devmem": 196608,
                   "devcore": 304, "type": "AMD Instinct MI300X VF", "health": true})
        })
        .collect();
    plain_node(
        name,
        json!({"hami.io/node-amd-register": Value::Array(register).to_string()}),
        json!({"amd.com/gpu": "2"}),
    )
}

/// AMD on the real control plane (hami-vendors.md section 11): 25% of a
/// GPU binds as 76 of its 304 compute units under the product name, one
/// entry for the one asking container, through HAMi's lock; 80% then
/// takes the other GPU (243 units are more than the 228 left).
async fn amd(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let quarter = [
        ("amd.com/gpu", "1"),
        ("amd.com/gpumem", "16384"),
        ("amd.com/gpucores", "25"),
    ];
    create_pod(admin, ns, &dcu_pod("amd-quarter", &quarter)).await?;
    let q = wait_bound(admin, ns, "amd-quarter", BIND).await?;
    let list = annotation(&q, "hami.io/amd-devices-allocated").unwrap_or_default();
    let first = list
        .strip_prefix("GPU-vd-15-")
        .and_then(|l| l.strip_suffix(",AMD Instinct MI300X VF,16384,76:;"))
        .unwrap_or_default()
        .to_string();
    ensure!(first == "0" || first == "1", "amd-quarter: {list:?}");
    admitted_with_own_devices(plugin, admin, ns, "amd-quarter").await?;
    let most = [
        ("amd.com/gpu", "1"),
        ("amd.com/gpumem", "1024"),
        ("amd.com/gpucores", "80"),
    ];
    create_pod(admin, ns, &dcu_pod("amd-most", &most)).await?;
    let m = wait_bound(admin, ns, "amd-most", BIND).await?;
    let list = annotation(&m, "hami.io/amd-devices-allocated").unwrap_or_default();
    let other = if first == "0" { "1" } else { "0" };
    ensure!(
        list == format!("GPU-vd-15-{other},AMD Instinct MI300X VF,1024,243:;"),
        "amd-most: {list:?} (the quarter is on GPU {first})"
    );
    admitted_with_own_devices(plugin, admin, ns, "amd-most").await
}

/// Moore Threads on the real control plane (hami-vendors.md section 7): a
/// node advertising two GPUs as capacity (32 cores, 192 units); the
/// webhook makes a two-GPU container whole (32 cores, 192 units,
/// `request-gpu-num`), which binds with the allocated list and
/// `mthreads.com/gpu-index` `0,1` and no lock; deleted, a slice binds.
async fn mthreads(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    create_pod(admin, ns, &dcu_pod("mt-two", &[("mthreads.com/vgpu", "2")])).await?;
    let two = wait_bound(admin, ns, "mt-two", BIND).await?;
    let list = annotation(&two, "hami.io/mthreads-vgpu-devices-allocated").unwrap_or_default();
    ensure!(
        list == ";vd-16-mthreads-0,Mthreads,49152,16:vd-16-mthreads-1,Mthreads,49152,16:;"
            && annotation(&two, "mthreads.com/gpu-index") == Some("0,1")
            && annotation(&two, "mthreads.com/predicate-node") == Some("vd-16")
            && annotation(&two, "mthreads.com/request-gpu-num") == Some("2"),
        "mt-two: {list:?}, {}",
        shown(&two, "mthreads.com/gpu-index")
    );
    admitted_with_own_devices(plugin, admin, ns, "mt-two").await?;
    delete_pods(admin, ns, &["mt-two"]).await?;
    let slice = [
        ("mthreads.com/vgpu", "1"),
        ("mthreads.com/sgpu-memory", "8"),
        ("mthreads.com/sgpu-core", "4"),
    ];
    create_pod(admin, ns, &dcu_pod("mt-slice", &slice)).await?;
    let s = wait_bound_after_delete(admin, ns, "mt-slice", BIND).await?;
    let list = annotation(&s, "hami.io/mthreads-vgpu-devices-allocated").unwrap_or_default();
    let index = list
        .strip_prefix(";vd-16-mthreads-")
        .and_then(|l| l.strip_suffix(",Mthreads,4096,4:;"))
        .unwrap_or_default()
        .to_string();
    ensure!(
        (index == "0" || index == "1")
            && annotation(&s, "mthreads.com/gpu-index") == Some(index.as_str()),
        "mt-slice: {list:?}, {}",
        shown(&s, "mthreads.com/gpu-index")
    );
    admitted_with_own_devices(plugin, admin, ns, "mt-slice").await
}

/// A node with two Enflame GCUs of six DRS slices, registered as
/// Enflame's plugin does (hami-vendors.md 9.2): its own JSON, with the
/// node's profiles.
fn drs_node(name: &str) -> Value {
    let capacity = json!({
        "devices": [{"index": "0", "minor": "0", "capacity": 6},
                    {"index": "1", "minor": "1", "capacity": "6"}],
        "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}});
    plain_node(
        name,
        json!({"enflame.com/gcu-drs-capacity": capacity.to_string()}),
        json!({"enflame.com/drs-gcu": "12"}),
    )
}

/// Enflame DRS on the real control plane (hami-vendors.md section 9): a
/// three-slice profile binds on one GCU with the allocated list (the
/// slices as its fifth field) and what Enflame's plugin reads; 40 GB takes
/// the whole other GCU (6g.40gb); six slices then wait (three are free on
/// the first GCU) and bind once the 40 GB pod is deleted.
async fn enflame_drs(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let key = "hami.io/enflame-vgpu-devices-allocated";
    create_pod(
        admin,
        ns,
        &dcu_pod("drs-three", &[("enflame.com/drs-gcu", "3")]),
    )
    .await?;
    let three = wait_bound(admin, ns, "drs-three", BIND).await?;
    let list = annotation(&three, key).unwrap_or_default();
    let first = list
        .strip_prefix(";vd-17-enflame-drs-")
        .and_then(|l| l.strip_suffix(",Enflame,20480,50,3:;"))
        .unwrap_or_default()
        .to_string();
    ensure!(
        (first == "0" || first == "1")
            && annotation(&three, "enflame.com/gcu-request-size") == Some("3")
            && annotation(&three, "assigned-containers")
                == Some(
                    r#"{"cuda":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}"#
                ),
        "drs-three: {list:?}, {}",
        shown(&three, "assigned-containers")
    );
    admitted_with_own_devices(plugin, admin, ns, "drs-three").await?;
    let other = if first == "0" { "1" } else { "0" };
    create_pod(
        admin,
        ns,
        &dcu_pod("drs-forty", &[("enflame.com/gcu-memory", "40")]),
    )
    .await?;
    let forty = wait_bound(admin, ns, "drs-forty", BIND).await?;
    let list = annotation(&forty, key).unwrap_or_default();
    ensure!(
        list == format!(";vd-17-enflame-drs-{other},Enflame,40960,100,6:;")
            && annotation(&forty, "enflame.com/gcu-assigned-index") == Some(other),
        "drs-forty: {list:?} (drs-three is on GCU {first})"
    );
    admitted_with_own_devices(plugin, admin, ns, "drs-forty").await?;
    let all = bound_pods(admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await?;
    delete_pods(admin, ns, &["drs-forty"]).await?;
    create_pod(
        admin,
        ns,
        &dcu_pod("drs-six", &[("enflame.com/drs-gcu", "6")]),
    )
    .await?;
    let six = wait_bound_after_delete(admin, ns, "drs-six", BIND).await?;
    let list = annotation(&six, key).unwrap_or_default();
    ensure!(
        list == format!(";vd-17-enflame-drs-{other},Enflame,40960,100,6:;"),
        "drs-six: {list:?}"
    );
    admitted_with_own_devices(plugin, admin, ns, "drs-six").await
}

/// A node with two Metax GPUs shared as sGPUs, registered as Metax's
/// sGPU plugin does (hami-vendors.md 5.2): its own JSON, both devices in
/// MetaLink zone 1 under the QoS policy best-effort.
fn sgpu_node(name: &str) -> Value {
    let devices: Vec<Value> = (0..2)
        .map(|i| {
            json!({"uuid": format!("SGPU-{name}-{i}"), "model": "MXC500", "totalDevCount": 16,
                   "totalCompute": 100, "totalVRam": 65536, "numa": 0, "healthy": true,
                   "qosPolicy": "best-effort", "linkZone": 1})
        })
        .collect();
    plain_node(
        name,
        json!({"metax-tech.com/node-gpu-devices": Value::from(devices).to_string()}),
        json!({"metax-tech.com/sgpu": "32"}),
    )
}

/// A pod with one sGPU container (`cuda`, beside `logs`) and these
/// annotations.
fn sgpu_pod(name: &str, annotations: Value, limits: &[(&str, &str)]) -> Value {
    let mut pod = dcu_pod(name, limits);
    pod["metadata"]["annotations"] = annotations;
    pod
}

/// Metax sGPUs on the real control plane (hami-vendors.md section 5): an
/// offline pod takes a whole device's cores, and the webhook gives it
/// QoS best-effort (5.4); an unclassed fixed-share pod goes to the other
/// device (5.5, app class); an online pod joins the offline one with no
/// cores; an unclassed best-effort pod then waits (CardQosPolicyMismatch)
/// and binds once the fixed-share pod is deleted. Each bind carries HAMi's
/// lists and what Metax's plugin reads (5.3), under HAMi's lock.
async fn metax_sgpu(ctx: &Ctx, plugin: &DevicePlugin, ns: &str) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    let key = "hami.io/metax-sgpu-devices-allocated";
    let device = |pod: &Pod| {
        annotation(pod, key)
            .unwrap_or_default()
            .trim_start_matches(';')
            .split(',')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    create_pod(
        admin,
        ns,
        &sgpu_pod(
            "sg-offline",
            json!({"metax-tech.com/sgpu-app-class": "offline"}),
            &[
                ("metax-tech.com/sgpu", "1"),
                ("metax-tech.com/vmemory", "8"),
            ],
        ),
    )
    .await?;
    let offline = wait_bound(admin, ns, "sg-offline", BIND).await?;
    let first = device(&offline);
    ensure!(
        (first == "SGPU-vd-18-0" || first == "SGPU-vd-18-1")
            && annotation(&offline, key) == Some(&format!(";{first},Metax-SGPU,8192,100:;"))
            && annotation(&offline, "hami.io/metax-sgpu-devices-to-allocate").is_some()
            && annotation(&offline, "metax-tech.com/sgpu-qos-policy") == Some("best-effort")
            && annotation(&offline, "metax-tech.com/gpu-devices-allocated")
                == Some(&format!(
                    r#"[[],[{{"uuid":"{first}","compute":100,"vRam":8192}}]]"#
                )),
        "sg-offline: {}, {}",
        shown(&offline, key),
        shown(&offline, "metax-tech.com/gpu-devices-allocated")
    );
    admitted_with_own_devices(plugin, admin, ns, "sg-offline").await?;
    let other = if first == "SGPU-vd-18-0" {
        "SGPU-vd-18-1"
    } else {
        "SGPU-vd-18-0"
    };
    let slice = [
        ("metax-tech.com/sgpu", "1"),
        ("metax-tech.com/vmemory", "4"),
        ("metax-tech.com/vcore", "20"),
    ];
    create_pod(
        admin,
        ns,
        &sgpu_pod(
            "sg-fixed",
            json!({"metax-tech.com/sgpu-qos-policy": "fixed-share"}),
            &slice,
        ),
    )
    .await?;
    let fixed = wait_bound(admin, ns, "sg-fixed", BIND).await?;
    ensure!(
        annotation(&fixed, key) == Some(&format!(";{other},Metax-SGPU,4096,20:;")),
        "sg-fixed: {} (sg-offline is on {first})",
        shown(&fixed, key)
    );
    admitted_with_own_devices(plugin, admin, ns, "sg-fixed").await?;
    create_pod(
        admin,
        ns,
        &sgpu_pod(
            "sg-online",
            json!({"metax-tech.com/sgpu-app-class": "online", "metax-tech.com/use-gpuuuid": first}),
            &slice,
        ),
    )
    .await?;
    let online = wait_bound(admin, ns, "sg-online", BIND).await?;
    ensure!(
        annotation(&online, key) == Some(&format!(";{first},Metax-SGPU,4096,0:;"))
            && annotation(&online, "metax-tech.com/sgpu-qos-policy").is_none(),
        "sg-online: {}",
        shown(&online, key)
    );
    admitted_with_own_devices(plugin, admin, ns, "sg-online").await?;
    create_pod(admin, ns, &sgpu_pod("sg-best-effort", json!({}), &slice)).await?;
    wait_event(
        admin,
        ns,
        "sg-best-effort",
        "FailedScheduling",
        "CardQosPolicyMismatch",
        Duration::from_secs(60),
    )
    .await?;
    let all = bound_pods(admin, ns).await?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await?;
    delete_pods(admin, ns, &["sg-fixed"]).await?;
    let best = wait_bound_after_delete(admin, ns, "sg-best-effort", BIND).await?;
    ensure!(
        annotation(&best, key) == Some(&format!(";{other},Metax-SGPU,4096,20:;")),
        "sg-best-effort: {}",
        shown(&best, key)
    );
    admitted_with_own_devices(plugin, admin, ns, "sg-best-effort").await
}

// 31 ------------------------------------------------------------------------

/// Mixed nodes: vd-1 holds two NVIDIA T4s and two DCUs, vd-2 two DCUs,
/// vd-3 two HCUs (HAMi master's names).
/// A DCU slice, an NVIDIA slice, three whole DCUs and a pending fourth;
/// a pod asking for a kind gpugate does not place is refused; deleting the slice frees its
/// DCU for the pending pod; the ledger equals the annotations throughout.
pub async fn mixed_cluster(
    ctx: &Ctx,
    plugin: &DevicePlugin,
    ns: &str,
    scenario: &str,
) -> anyhow::Result<()> {
    let admin = &ctx.cp.admin;
    ctx.nodes(
        scenario,
        &[
            dcu_node("vd-1", 2, 2),
            dcu_node("vd-2", 2, 0),
            hcu_node("vd-3"),
            npu_node("vd-4", "Ascend910B3", 8),
            npu_node("vd-5", "Ascend910C", 4),
            xpu_node("vd-6"),
            gpu_and_mlu_node("vd-7"),
            neuron_node("vd-8"),
            biren_node("vd-9"),
            capacity_node("vd-10", "metax-tech.com/gpu", 2),
            capacity_node("vd-11", "enflame.com/gcu", 2),
            capacity_node("vd-12", "kunlunxin.com/xpu", 8),
            capacity_node("vd-19", "kunlunxin.com/xpu", 8),
            vastai_node("vd-13"),
            iluvatar_node("vd-14"),
            amd_node("vd-15"),
            plain_node(
                "vd-16",
                json!({}),
                json!({"mthreads.com/vgpu": "200", "mthreads.com/sgpu-core": "32",
                       "mthreads.com/sgpu-memory": "192"}),
            ),
            drs_node("vd-17"),
            sgpu_node("vd-18"),
        ],
    )
    .await?;
    ascend(ctx, plugin, ns).await?;
    kunlun(ctx, plugin, ns).await?;
    capacity_kinds(ctx, plugin, ns).await?;
    biren(ctx, plugin, ns).await?;
    whole_devices(ctx, plugin, ns).await?;
    iluvatar(ctx, plugin, ns).await?;
    amd(ctx, plugin, ns).await?;
    mthreads(ctx, plugin, ns).await?;
    enflame_drs(ctx, plugin, ns).await?;
    metax_sgpu(ctx, plugin, ns).await?;

    // The webhook routes the DCU pod (no schedulerName) to gpugate's
    // scheduler and leaves its containers as written (3.4).
    let slice = [
        ("hygon.com/dcunum", "1"),
        ("hygon.com/dcumem", "2000"),
        ("hygon.com/dcucores", "60"),
    ];
    create_pod(admin, ns, &dcu_pod("dcu-slice", &slice)).await?;
    let bound = wait_bound(admin, ns, "dcu-slice", BIND).await?;
    let list = annotation(&bound, "hami.io/dcu-devices-allocated").unwrap_or_default();
    ensure!(
        is_hamis_dcu_list(list, 2000, 60),
        "hami.io/dcu-devices-allocated is {list:?}"
    );
    ensure!(
        annotation(&bound, "hami.io/vgpu-devices-allocated").is_none(),
        "a DCU pod got an NVIDIA list"
    );
    let spec = bound.spec.clone().unwrap_or_default();
    let limits: Vec<_> = spec
        .containers
        .iter()
        .map(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .map(|l| l.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect();
    ensure!(
        spec.scheduler_name.as_deref() == Some("hami-scheduler")
            && limits
                == [
                    vec![],
                    vec![
                        "hygon.com/dcucores".to_string(),
                        "hygon.com/dcumem".to_string(),
                        "hygon.com/dcunum".to_string()
                    ]
                ],
        "the webhook changed the DCU pod: {limits:?}"
    );
    // Hygon's plugin (simulated) finds the pod by the lock and hands the
    // entry to the one container that asks (`cuda`, gpu_pod's name).
    admitted_with_own_devices(plugin, admin, ns, "dcu-slice").await?;
    let served = plugin.served(ns, "dcu-slice");
    ensure!(
        served.len() == 1
            && served[0].container == "cuda"
            && served[0].entry == list.trim_end_matches(';'),
        "Allocate gave {served:?}"
    );

    // An NVIDIA pod goes to a node with GPUs, with NVIDIA's list.
    create_pod(
        admin,
        ns,
        &gpu_pod(
            "gpu-slice",
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "3000")],
        ),
    )
    .await?;
    let gpu = wait_bound(admin, ns, "gpu-slice", BIND).await?;
    let on = node_of(&gpu);
    ensure!(on == "vd-1" || on == "vd-7", "the GPU pod went to {on}");
    let gpus = annotation(&gpu, "hami.io/vgpu-devices-allocated").unwrap_or_default();
    ensure!(
        gpus.starts_with(&format!("GPU-{on}-")) && gpus.ends_with(",NVIDIA,3000,0:;"),
        "hami.io/vgpu-devices-allocated is {gpus:?}"
    );
    ensure!(
        annotation(&gpu, "hami.io/dcu-devices-allocated").is_none(),
        "an NVIDIA pod got a DCU list"
    );

    // HAMi master's HCU names: a kind of their own, on the HCU node only.
    create_pod(
        admin,
        ns,
        &dcu_pod(
            "hcu-slice",
            &[("hygon.com/hcunum", "1"), ("hygon.com/hcumem", "3000")],
        ),
    )
    .await?;
    let hcu = wait_bound(admin, ns, "hcu-slice", BIND).await?;
    let hcus = annotation(&hcu, "hami.io/hcu-devices-allocated").unwrap_or_default();
    ensure!(
        node_of(&hcu) == "vd-3"
            && hcus.starts_with("HCU-vd-3-")
            && hcus.ends_with(",HCU,3000,100:;")
            && hcus.matches(';').count() == 1,
        "hcu-slice on {} with {hcus:?}",
        node_of(&hcu)
    );
    admitted_with_own_devices(plugin, admin, ns, "hcu-slice").await?;

    // A kind gpugate does not place beside one it does: refused, named,
    // never placed with the GPU alone.
    let mut both = gpu_pod("both", &[("nvidia.com/gpu", "1")]);
    if let Some(containers) = both["spec"]["containers"].as_array_mut() {
        containers.push(json!({"name": "vgcu", "image": "busybox",
                               "resources": {"limits": {"enflame.com/vgcu": "1"}}}));
    }
    let refused = create_refused(admin, ns, &both).await?;
    ensure!(
        refused.contains("asks for Enflame shared GCUs, which gpugate does not place yet"),
        "refused with {refused:?}"
    );

    // Three whole DCUs (a count alone: all memory, 100 cores; 3.7) take
    // the three idle ones; a fourth waits: the slice's DCU lacks the
    // memory (1.11 step 9).
    for i in 0..4 {
        create_pod(
            admin,
            ns,
            &dcu_pod(&format!("whole-{i}"), &[("hygon.com/dcunum", "1")]),
        )
        .await?;
    }
    let mut pending = Vec::new();
    for i in 0..4 {
        let name = format!("whole-{i}");
        if wait_bound(admin, ns, &name, Duration::from_secs(20))
            .await
            .is_err()
        {
            pending.push(name);
        }
    }
    ensure!(pending.len() == 1, "pending: {pending:?}");
    let waiting = &pending[0];
    wait_event(
        admin,
        ns,
        waiting,
        "FailedScheduling",
        "CardInsufficientMemory",
        Duration::from_secs(60),
    )
    .await?;
    let all = bound_pods(admin, ns).await?;
    dcus_not_over_committed(&all)?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await?;

    // Deleting the slice frees its DCU: the waiting pod takes it.
    let freed = list.split(',').next().unwrap_or_default().to_string();
    delete_pods(admin, ns, &["dcu-slice"]).await?;
    let taken = wait_bound_after_delete(admin, ns, waiting, BIND).await?;
    ensure!(
        uuids(&taken)? == [freed.clone()],
        "{waiting} got {:?}, the freed DCU is {freed}",
        uuids(&taken)?
    );
    let all = bound_pods(admin, ns).await?;
    dcus_not_over_committed(&all)?;
    ledger_matches(ctx.cp.gpugate_admin_port, ns, &all, Duration::from_secs(30)).await
}

/// No DCU holds more than its 65,520 MiB or 100 cores, by the annotations.
fn dcus_not_over_committed(bound: &[Pod]) -> anyhow::Result<()> {
    for (dcu, (_, mib, cores)) in usage_by_gpu(bound)? {
        if dcu.starts_with("DCU-") {
            ensure!(
                mib <= 65520 && cores <= 100,
                "{dcu} over-committed: {mib} MiB, {cores} cores"
            );
        }
    }
    Ok(())
}
