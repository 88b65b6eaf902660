//! Kinds of devices: everything that tells one device plugin's devices
//! apart from another's, in one place.
//!
//! The engine places "devices of a kind" without naming a vendor: a GPU
//! carries the [`KindId`] of the kind that registered it, and each layer
//! asks the kind for what differs: the node annotations to read
//! (`cluster::convert`), the device modes and how each is shared
//! (`engine::device`), the pod annotations that select devices
//! (`engine::selection`), the vendor word of pod device lists
//! (`engine::allocation`) and the environment the webhook writes
//! (`admission::mutate`). Resource names and request defaults are the
//! kind's config section (`engine::resources::DeviceConfig`).
//!
//! NVIDIA is the first kind ([`nvidia::NVIDIA`]); what a second one adds is
//! in docs/architecture.md, "Device kinds".

use std::time::Duration;

pub mod amd;
pub mod ascend;
pub mod aws_neuron;
pub mod biren;
pub mod cambricon;
pub mod enflame;
pub mod hcu;
pub mod hygon;
pub mod iluvatar;
pub mod kunlun;
pub mod metax;
pub mod mthreads;
pub mod nvidia;
pub mod vastai;

/// A kind of device, as [`KINDS`] lists it. Small (a GPU carries one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindId(u8);

impl KindId {
    /// NVIDIA GPUs shared by HAMi-core or split by MIG.
    pub const NVIDIA: KindId = KindId(0);
    /// Hygon DCUs shared by slices (HAMi v2.10's `DCU` backend).
    pub const HYGON: KindId = KindId(1);
    /// Hygon HCUs: HAMi master's names for the DCU backend.
    pub const HCU: KindId = KindId(2);
    /// Ascend NPUs, one kind per chip of HAMi v2.10's chart
    /// ([`ascend::CHIPS`] lists them in this order).
    pub const ASCEND_FIRST: KindId = KindId(3);
    /// Kunlunxin vXPUs (HAMi v2.10's `XPU` backend).
    pub const KUNLUN_VXPU: KindId = KindId(10);
    /// Cambricon MLUs (HAMi v2.10's `MLU` backend).
    pub const CAMBRICON: KindId = KindId(11);
    /// AWS Neuron devices (HAMi v2.10's `AWSNeuron` backend).
    pub const AWS_NEURON: KindId = KindId(12);
    /// Biren GPUs (HAMi v2.10's `Biren` backend).
    pub const BIREN: KindId = KindId(13);
    /// Whole Kunlunxin XPUs (HAMi v2.10's `kunlun` backend).
    pub const KUNLUN_XPU: KindId = KindId(14);
    /// Whole Metax GPUs (HAMi v2.10's `Metax-GPU` backend).
    pub const METAX_GPU: KindId = KindId(15);
    /// Whole Enflame GCUs (HAMi v2.10's `GCU` backend).
    pub const ENFLAME_GCU: KindId = KindId(16);
    /// Vastai devices (HAMi v2.10's `Vastai` backend).
    pub const VASTAI: KindId = KindId(17);
    /// Iluvatar GPUs, one kind per chip of HAMi v2.10's chart
    /// ([`iluvatar::CHIPS`] lists them in this order).
    pub const ILUVATAR_FIRST: KindId = KindId(18);
    /// AMD GPUs (HAMi v2.10's `AMD` backend).
    pub const AMD: KindId = KindId(22);
    /// Moore Threads GPUs (HAMi v2.10's `Mthreads` backend).
    pub const MTHREADS: KindId = KindId(23);
    /// Enflame GCUs split into DRS slices (HAMi v2.10's `Enflame`
    /// backend).
    pub const ENFLAME_DRS: KindId = KindId(24);
    /// Metax GPUs shared as sGPUs (HAMi v2.10's `Metax-SGPU` backend).
    pub const METAX_SGPU: KindId = KindId(25);

    /// The kind's description.
    pub fn kind(self) -> &'static DeviceKind {
        KINDS[usize::from(self.0)]
    }

    /// Its place in [`KINDS`] (a config section's type parameter).
    pub const fn index(self) -> u8 {
        self.0
    }

    /// The kind at `index` of [`KINDS`]; `None` past the end.
    pub fn at(index: u8) -> Option<KindId> {
        (usize::from(index) < KINDS.len()).then_some(KindId(index))
    }
}

/// Every kind gpugate knows, indexed by [`KindId`].
pub static KINDS: [&DeviceKind; 26] = [
    &nvidia::NVIDIA,
    &hygon::HYGON,
    &hcu::HCU,
    &ascend::ASCEND_910A,
    &ascend::ASCEND_910B2,
    &ascend::ASCEND_910B3,
    &ascend::ASCEND_910B4_1,
    &ascend::ASCEND_910B4,
    &ascend::ASCEND_310P,
    &ascend::ASCEND_910C,
    &kunlun::KUNLUN_VXPU,
    &cambricon::CAMBRICON,
    &aws_neuron::AWS_NEURON,
    &biren::BIREN,
    &kunlun::KUNLUN_XPU,
    &metax::METAX_GPU,
    &enflame::ENFLAME_GCU,
    &vastai::VASTAI,
    &iluvatar::MR_V100,
    &iluvatar::MR_V50,
    &iluvatar::BI_V150,
    &iluvatar::BI_V100,
    &amd::AMD,
    &mthreads::MTHREADS,
    &enflame::ENFLAME_DRS,
    &metax::METAX_SGPU,
];

/// Every kind with its id.
pub fn kinds() -> impl Iterator<Item = (KindId, &'static DeviceKind)> {
    KINDS.iter().enumerate().map(|(i, k)| (KindId(i as u8), *k))
}

/// The kind whose pod device lists carry `vendor` (HAMi's vendor word);
/// `None` for devices gpugate does not place.
pub fn by_vendor(vendor: &str) -> Option<KindId> {
    kinds()
        .find(|(_, k)| k.vendor == vendor)
        .or_else(|| {
            // A device type as the word (AMD's product names, 11.2):
            // HAMi's rule, the type contains the kind's word (1.3).
            let lower = vendor.to_lowercase();
            kinds().find(|(_, k)| k.vendor_from_type && lower.contains(&k.vendor.to_lowercase()))
        })
        .map(|(id, _)| id)
}

/// The device kinds a HAMi v2.10 fleet registers that gpugate does not
/// place yet (../shared/hami-vendors.md, section 0; HAMi master's HCU
/// names too): the prefixes of their resource names as HAMi's chart names
/// them, and the kind in words. A pod gpugate places that asks for one of
/// them is refused with its name, never placed with that part of its
/// request dropped (its device plugin would then fail it at `Allocate`, or
/// run it without the device).
pub static NOT_PLACED: &[(&str, &str)] = &[
    // Ascend chips beyond HAMi's chart (gpugate has a kind for each of
    // the chart's chips).
    ("huawei.com/Ascend", "Ascend NPU"),
    // Whole MLUs (the plugin's non-shared mode; vMLUs are placed).
    ("cambricon.com/mlu", "Cambricon MLU"),
    // Iluvatar chips beyond HAMi's chart (gpugate has a kind for each of
    // the chart's chips).
    ("iluvatar.ai/", "Iluvatar GPU"),
    // Enflame's legacy shared GCUs (`enflame.com/vgcu`; whole GCUs and
    // DRS slices are placed).
    ("enflame.com/", "Enflame shared GCU"),
    // Neuron devices under the plugin's other name (HAMi's names are
    // placed).
    ("aws.amazon.com/neurondevice", "AWS Neuron device"),
];

/// The kind, in words, of a resource gpugate does not place
/// ([`NOT_PLACED`]); `None` for any other resource.
pub fn not_placed(resource: &str) -> Option<&'static str> {
    NOT_PLACED
        .iter()
        .find(|(prefix, _)| resource.starts_with(prefix))
        .map(|(_, kind)| *kind)
}

/// What a vendor's kind has unless it says otherwise: shared by slices in
/// any mode its plugin names, no HAMi-core environment, one list entry per
/// container, HAMi's node lock, no templates, grouping, masks or extras.
/// A kind file gives its names and rules and takes the rest from here
/// (`..VENDOR_DEFAULTS`; docs/architecture.md, "Device kinds").
pub const VENDOR_DEFAULTS: DeviceKind = DeviceKind {
    name: "",
    vendor: "",
    register_key: "",
    own_register: None,
    capacity: None,
    score_key: None,
    selection: NO_SELECTION,
    modes: &[],
    default_mode: "",
    other_modes: Some(Sharing::Slices),
    env: WebhookEnv {
        hide_devices: ("", ""),
        core_policy: "",
        task_priority: "",
    },
    hami_core: false,
    noun: "",
    pod_lists: PodLists {
        to_allocate: "",
        allocated: "",
    },
    entries: Entries::EveryContainer,
    config: NO_RESOURCES,
    section_keys: &[],
    templates: None,
    grouping: Grouping::Any,
    core_masks: false,
    counts_only: false,
    vendor_from_type: false,
    compute_units: false,
    split_over_count: false,
    same_devices: false,
    slice_profiles: false,
    tenancy: None,
    memory_bytes_with_unit: false,
    cores_clamped: false,
    webhook_rule: None,
    node_lock: NodeLockStyle::Hami,
    bind_extras: None,
    node_preference: NodePreference::None,
};

/// No selection annotations (`..NO_SELECTION` for the ones a kind has).
pub const NO_SELECTION: SelectionKeys = SelectionKeys {
    use_type: "",
    nouse_type: "",
    use_uuid: "",
    nouse_uuid: "",
    mode: "",
    numa_bind: "",
};

/// No resources and no request defaults (`..NO_RESOURCES` for the ones a
/// kind has).
pub const NO_RESOURCES: ConfigDefaults = ConfigDefaults {
    resource_count_name: "",
    resource_memory_name: "",
    resource_memory_percentage_name: "",
    resource_core_name: "",
    resource_priority_name: "",
    default_cores: 0,
    default_gpu_num: 0,
    memory_factor: 1,
};

/// What differs between kinds of devices on the wire and in the webhook.
#[derive(Debug)]
pub struct DeviceKind {
    /// Short name: the config section of its resource names and defaults,
    /// and the `kind` label of metrics.
    pub name: &'static str,
    /// The vendor word of HAMi's pod device lists (`GPU-a,NVIDIA,1024,30`).
    pub vendor: &'static str,
    /// Node annotation with the device inventory the device plugin
    /// registers (JSON array, or HAMi's legacy text form); `""` for a kind
    /// read from node capacity.
    pub register_key: &'static str,
    /// How `register_key` is read when the vendor's plugin writes its own
    /// format rather than HAMi's (Enflame's DRS capacity, 9.2); `None`:
    /// HAMi's JSON or legacy text.
    pub own_register: Option<OwnRegister>,
    /// For a kind whose plugin registers no annotation: how its devices
    /// are read from the node's capacity (hami-vendors.md 1.2, source 3).
    pub capacity: Option<&'static CapacityInventory>,
    /// Node annotation with pairwise topology scores, when the kind has one.
    pub score_key: Option<&'static str>,
    /// Pod annotations that choose among the kind's devices.
    pub selection: SelectionKeys,
    /// The device modes its device plugin registers, and how gpugate
    /// shares a device in each. A device in a mode not listed is not shared.
    pub modes: &'static [DeviceMode],
    /// The mode of a device registered without one.
    pub default_mode: &'static str,
    /// How a device registered in a mode `modes` does not list is shared
    /// (`None`: not at all). For a kind whose device plugin writes no
    /// meaningful mode.
    pub other_modes: Option<Sharing>,
    /// Environment the mutating webhook writes.
    pub env: WebhookEnv,
    /// Whether HAMi-core limits the kind's devices inside the container:
    /// then the webhook injects HAMi's defaults (a count for a slice, 100
    /// cores for a whole device; hami-compat.md 2.3) and refuses the
    /// environment variables that lift HAMi-core's limits. Other kinds'
    /// containers are left as written, as HAMi's webhook leaves them.
    pub hami_core: bool,
    /// What one device is called in messages (`NVIDIA GPU`, `Hygon DCU`).
    pub noun: &'static str,
    /// The pod annotations that carry the kind's device lists.
    pub pod_lists: PodLists,
    /// Which containers have an entry in the kind's device lists.
    pub entries: Entries,
    /// The defaults of the kind's config section (named [`DeviceKind::name`]).
    pub config: ConfigDefaults,
    /// Keys of HAMi's config section that gpugate reads under another
    /// name (`Some`: Enflame's `resourceNameGCU` is the count), or accepts
    /// and does not read (`None`: a name of another backend sharing the
    /// section, like Metax's sGPU names). Other keys are read as named.
    pub section_keys: &'static [(&'static str, Option<&'static str>)],
    /// For a kind split into fixed templates (Ascend vNPUs): the chip's
    /// templates and memory, as HAMi's chart gives them. `None`: slices of
    /// any size.
    pub templates: Option<&'static TemplateChip>,
    /// How a container's devices must sit together on a node.
    pub grouping: Grouping,
    /// A device's cores are bits of a mask (two cores: 1, 2, 3), and a
    /// container takes one core or the whole device; its cores resource
    /// counts cores, split over devices (AWS Neuron, hami-vendors.md 10).
    pub core_masks: bool,
    /// Devices are taken by count alone: a container's grant accounts no
    /// memory and no cores, and a device holds as many as its registered
    /// split count (Biren, 12.5).
    pub counts_only: bool,
    /// The vendor word of its lists is each device's registered type
    /// (AMD's product names, hami-vendors.md 11.2), which contains
    /// [`DeviceKind::vendor`] in any case; [`by_vendor`] reads it back.
    pub vendor_from_type: bool,
    /// A device's cores are compute units (its registered `devcore`, 304
    /// for an MI300X) and a container's cores resource a percent of them:
    /// it takes `floor(units × percent / 100)`, at least one (AMD, 11.5).
    pub compute_units: bool,
    /// A container's memory and cores are its total over its devices,
    /// each device taking an even share (Mthreads, 7.1).
    pub split_over_count: bool,
    /// Every container of a pod takes the devices the first one took
    /// (Mthreads' `customFilterRule`, 7.5: its plugin hands each
    /// container the last one's indexes).
    pub same_devices: bool,
    /// Devices are split into profiles the node registers (sizes of
    /// slices; Enflame DRS, 9.5): a container names a size, or memory and
    /// cores that the smallest profile holding them gives, and takes the
    /// profile's slices of one device ([`OwnInventory::profiles`]).
    pub slice_profiles: bool,
    /// The pod annotations that class a pod on a shared device, for a
    /// kind whose plugin runs pods of one class per device (Metax sGPU's
    /// app class and QoS, 5.5; `engine::tenancy`); `None` for none.
    pub tenancy: Option<&'static TenancyKeys>,
    /// A memory quantity written with a letter (`4Gi`, `4G`) is bytes,
    /// and a bare number units of `memoryFactor` (Metax sGPU, 5.1);
    /// otherwise a quantity is a number of units whatever its suffix.
    pub memory_bytes_with_unit: bool,
    /// A core request above 100 is read as 100, as HAMi's shared loop
    /// clamps it (1.11 step 7): Iluvatar's webhook writes 100 per device
    /// for several devices (6.4). Otherwise it is refused.
    pub cores_clamped: bool,
    /// What HAMi's webhook writes into a container asking for the kind,
    /// beyond routing the pod (Iluvatar's cores and container name, 6.4);
    /// `None` for nothing.
    pub webhook_rule: Option<WebhookRule>,
    /// The node lock a bind of the kind's devices takes (hami-vendors.md
    /// 1.8).
    pub node_lock: NodeLockStyle,
    /// What the kind's device plugin reads beside its lists, written at
    /// bind (Cambricon's profile, 4.3); `None` for nothing.
    pub bind_extras: Option<BindExtras>,
    /// How the devices a pod would take on a node rank the node among
    /// the others (the vendor's `ScoreNode`, hami-vendors.md 1.7).
    pub node_preference: NodePreference,
}

/// The pod annotations of a kind's tenancy rules (`engine::tenancy`):
/// the app class and its two values, and the sharing policy with the
/// values the kind knows.
#[derive(Debug)]
pub struct TenancyKeys {
    pub class: &'static str,
    pub online: &'static str,
    pub offline: &'static str,
    pub policy: &'static str,
    /// At most `engine::tenancy::MAX_POLICIES`.
    pub policies: &'static [&'static str],
}

/// A kind's reader of the register annotation its plugin writes in its
/// own format: the node's name and the annotation's text.
pub type OwnRegister = fn(&str, &str) -> Result<OwnInventory, String>;

/// What a register in a vendor's own format says (see [`OwnRegister`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnInventory {
    pub devices: Vec<OwnDevice>,
    /// The profiles every device of the node is split into
    /// ([`DeviceKind::slice_profiles`]); empty for another kind.
    pub profiles: Vec<ProfileSpec>,
}

/// One device of an [`OwnInventory`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnDevice {
    pub id: String,
    pub index: u32,
    /// Pods (or, for a kind split into profiles, slices) it holds at once.
    pub slots: u32,
    pub mem_mib: u32,
    pub cores: u32,
    pub device_type: &'static str,
    /// The number the vendor's plugin knows it by (Enflame's `minor`).
    pub minor: String,
    pub numa: i32,
    pub healthy: bool,
    /// Its mode ([`DeviceKind::modes`]; Metax's registered QoS policy).
    pub mode: String,
    /// Its network group ([`OwnDevice`]'s devices in one group share a
    /// link: Metax's MetaLink zone), `None` for none.
    pub network: Option<i64>,
}

/// One profile a node's devices are split into: its name and id as the
/// plugin registers them, the slices it takes of a device, and the memory
/// (MiB) and cores (percent of the device) HAMi accounts for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileSpec {
    pub name: String,
    pub id: String,
    pub slices: u32,
    pub mem_mib: u32,
    pub cores: u32,
}

/// Cores per device of a [`DeviceKind::core_masks`] kind (HAMi's masks
/// hold two; hami-vendors.md 10.1), and the mask of a whole device.
pub const MASK_CORES: u64 = 2;
pub const WHOLE_MASK: u32 = 3;

/// A kind's rule for what its plugin reads beside its lists: annotation
/// keys and values.
pub type BindExtras = fn(&ExtrasInput<'_>) -> Vec<(&'static str, String)>;

/// A kind's webhook rule: for a container asking for the kind, what to
/// write; `Err` refuses the pod with the message.
pub type WebhookRule = fn(&RuleInput<'_>) -> Result<Vec<RuleEdit>, String>;

/// What a [`WebhookRule`] reads of a container: its name and the kind's
/// quantities as written (the count from its limits only, as HAMi's
/// webhooks find a kind's containers by their limits).
pub struct RuleInput<'a> {
    pub container: &'a str,
    /// The pod's annotation of a key, when set (Metax's app class, 5.4).
    pub pod_annotation: &'a dyn Fn(&str) -> Option<String>,
    /// The count, from limits else requests.
    pub count: Option<u64>,
    pub count_in_limits: Option<u64>,
    pub memory: Option<u64>,
    pub cores: Option<u64>,
}

/// One thing a [`WebhookRule`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleEdit {
    /// `limits[<the kind's resource>] = value`, replacing what is there
    /// (and the request, when the container gives one: Kubernetes wants
    /// an extended resource's request equal to its limit).
    Limit(RuleResource, u64),
    /// An environment variable, unless the container sets it.
    Env(&'static str, String),
    /// A pod annotation (Mthreads' `request-gpu-num`, 7.4).
    PodAnnotation(&'static str, String),
}

/// A resource of a kind's config section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleResource {
    Count,
    Memory,
    Cores,
}

/// A kind's rule for the devices a node's capacities make.
pub type CapacityDevices = fn(&[Option<u64>]) -> Result<Vec<CapacityDevice>, String>;

/// Devices read from a node's capacity (hami-vendors.md 1.2, source 3):
/// no annotation; device `i` is named `<node>-<id_word>-<i>`.
#[derive(Debug)]
pub struct CapacityInventory {
    /// The capacity resources read, in the order `devices` takes them.
    pub resources: &'static [&'static str],
    /// The word of the devices' names.
    pub id_word: &'static str,
    /// A node label, and the words in its value that make the node's
    /// devices a ring ([`Grouping::Windows`]; AWS's instance type, 10.5).
    pub ring_label: Option<(&'static str, &'static [&'static str])>,
    /// The devices the capacities (`None`: absent) make, in index order;
    /// `Err` says why they make none.
    pub devices: CapacityDevices,
}

/// One device a node's capacity makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityDevice {
    /// Pods that may share it at once.
    pub slots: u32,
    pub mem_mib: u32,
    pub cores: u32,
    pub device_type: &'static str,
}

/// `n` whole devices for a capacity of `n` of `resource` (the first of
/// `capacity`): one pod each (`slots` 1), each with `mem_mib` and 100
/// cores (Metax GPUs, Enflame GCUs, Kunlunxin XPUs; hami-vendors.md 1.2).
/// No capacity, or 0, makes none, as HAMi reads it.
pub fn whole_devices(
    capacity: &[Option<u64>],
    resource: &str,
    mem_mib: u32,
    device_type: &'static str,
) -> Result<Vec<CapacityDevice>, String> {
    let n = capacity.first().copied().flatten().unwrap_or(0);
    if n == 0 {
        return Err(format!("no {resource} capacity"));
    }
    if n > MAX_CAPACITY_DEVICES {
        return Err(format!(
            "{resource} capacity {n} is more devices than a node holds (at most \
             {MAX_CAPACITY_DEVICES})"
        ));
    }
    Ok((0..n)
        .map(|_| CapacityDevice {
            slots: 1,
            mem_mib,
            cores: 100,
            device_type,
        })
        .collect())
}

/// The most devices a node's capacity may make: beyond it the capacity is
/// garbage, not a node.
pub const MAX_CAPACITY_DEVICES: u64 = 1024;

/// The node lock a bind takes for a kind's devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeLockStyle {
    /// HAMi's `hami.io/mutex.lock` (`cluster::lock`), which the device
    /// plugin releases.
    Hami,
    /// A vendor's own lock: `key` holds the time it was taken; one younger
    /// than `hold` is waited for, an older one replaced (Cambricon, 4.2).
    /// The device plugin releases it.
    Own { key: &'static str, hold: Duration },
    /// None: the device plugin finds its pods otherwise (AWS Neuron, 1.8).
    None,
}

/// What a bind gives a kind's [`DeviceKind::bind_extras`]: the node, and
/// the kind's devices of each container (init containers first).
#[derive(Debug)]
pub struct ExtrasInput<'a> {
    pub node: &'a str,
    /// The kind's cores resource, as the config names it.
    pub core_resource: &'a str,
    /// When the bind writes, in nanoseconds since the Unix epoch.
    pub now_unix_nanos: i128,
    pub containers: Vec<ExtrasContainer>,
}

/// One container's devices of the kind.
#[derive(Debug, Default)]
pub struct ExtrasContainer {
    /// Its name.
    pub name: String,
    /// Its limits give the kind's count resource above 0.
    pub count_in_limits: bool,
    pub devices: Vec<ExtraDevice>,
}

impl ExtrasInput<'_> {
    /// The indexes of the last container with the kind's devices,
    /// comma-separated (what Kunlunxin's and Moore Threads' plugins read:
    /// HAMi overwrites the key per container, 8.3, 7.3); `None` when no
    /// container has any.
    pub fn last_indexes(&self) -> Option<String> {
        let c = self
            .containers
            .iter()
            .rev()
            .find(|c| !c.devices.is_empty())?;
        let idx: Vec<String> = c.devices.iter().map(|d| d.index.to_string()).collect();
        Some(idx.join(","))
    }
}

/// One device granted, with its index on the node.
#[derive(Debug)]
pub struct ExtraDevice {
    pub index: u32,
    pub uuid: String,
    pub mem_mib: u64,
    pub cores: u32,
    /// Slices taken, for a kind split into profiles (1 otherwise).
    pub slots: u32,
    /// The profile taken (name and id), for a kind split into profiles.
    pub profile: Option<(String, String)>,
    /// The device's number for its plugin ([`OwnDevice::minor`]); empty
    /// when it registered none.
    pub minor: String,
}

/// A chip split into fixed templates (hami-vendors.md 2.1): the defaults
/// of its config entry. A container's memory is rounded up to the
/// smallest template that holds it; one above every template takes the
/// whole device.
#[derive(Debug)]
pub struct TemplateChip {
    /// HAMi's `chipName`.
    pub chip_name: &'static str,
    /// MiB a whole device gives a container.
    pub memory_allocatable: u32,
    /// MiB of the device: a request above it fits no template.
    pub memory_capacity: u32,
    pub ai_core: u32,
    pub ai_cpu: u32,
    /// By memory, ascending.
    pub templates: &'static [Template],
    /// Devices are taken two by two, both NPUs of a card (Ascend 910C
    /// super pods, 2.4 and 2.5).
    pub super_pod: bool,
    /// The pod annotation that asks for a soft split (`hami-core`) instead
    /// of templates, and the node annotation that says a node has one.
    pub mode_annotation: &'static str,
    pub node_mode_annotation: &'static str,
    /// Pod annotation: JSON with each device's template for the device
    /// plugin (`huawei.com/<chip>`); `""` for none.
    pub runtime_info: &'static str,
    /// A template's cores are its share of the device's memory
    /// (`memory × 100 / memoryAllocatable`; Kunlun vXPU, 8.1); otherwise a
    /// template takes no cores and a core request is refused (Ascend).
    pub cores_from_memory: bool,
    /// Several devices in one container are whole devices only (Ascend:
    /// a vNPU is one NPU's, 2.4).
    pub several_whole_only: bool,
    /// A device that holds templates takes only more of the same one
    /// (Kunlun vXPU, 8.5).
    pub one_template_per_device: bool,
    /// The device plugin's split count is not a limit: a device holds as
    /// many templates as its memory does (Kunlun vXPU, 8.8).
    pub slots_from_memory: bool,
    /// The webhook writes the whole device's memory into a container that
    /// gives none (Ascend, 2.4); otherwise only a given memory is rounded
    /// in place (Kunlun, 8.4: its plugin may not advertise the memory
    /// resource a pod did not ask for).
    pub writes_default_memory: bool,
}

/// One template of a chip, as HAMi's chart names it.
#[derive(Debug)]
pub struct Template {
    pub name: &'static str,
    /// MiB.
    pub memory: u32,
    pub ai_core: u32,
    pub ai_cpu: u32,
}

/// How the devices a pod would take on a node make that node better or
/// worse than others for it, whatever the node policy: the kind's rule
/// ranks nodes first, the node policy among equals
/// (`engine::node_preference`; docs/policies.md "Node preferences").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NodePreference {
    /// The node policy alone.
    #[default]
    None,
    /// Boards of eight cards in two wings of four (Kunlunxin XPU, 8.6):
    /// the fewer wings left partly used once the pod is placed, the
    /// better.
    Wings,
    /// The device plugin's tables on the node (Metax GPU, 5.2, 5.5): JSON
    /// objects from a number of devices to the topology's loss (the lower
    /// the better, read under binpack) and score (the higher the better,
    /// read under spread) for a pod taking that many.
    SizeTables {
        losses: &'static str,
        scores: &'static str,
    },
    /// By the pods already on the devices, for a kind with tenancy rules
    /// (Metax sGPU, 5.5): a latency-sensitive pod prefers devices with
    /// few pods, batch-only devices least; a pod taking whole devices,
    /// when the pod annotation `links` or the section's `topologyAware`
    /// says so, prefers devices linked in one network group (MetaLink
    /// zone) that break few links among the idle ones.
    Tenants { links: &'static str },
    /// The share of each container's devices in one network group (Ascend
    /// 910's HCCS rings, `NetworkID`, 2.5): all of them is best; a node
    /// where a device of the pod has no group, last.
    NetworkShare,
}

/// How a container's devices must sit together on a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grouping {
    /// Any devices.
    #[default]
    Any,
    /// Devices that register a network group (Ascend's `NetworkID`) are
    /// taken from the largest group of fitting devices first, so that
    /// they talk over one HCCS ring (2.5).
    NetworkGroups,
    /// Devices are taken by cards of two (index / 2), both NPUs of a card
    /// at once (Ascend 910C, 2.5).
    CardPairs,
    /// Windows of consecutive idle devices (AWS Neuron, 10.5): on a node
    /// whose devices form a ring (registered in one network group,
    /// `Gpu::network`), starting anywhere;
    /// otherwise 4, 8 or 16 devices starting at a multiple of their number.
    Windows,
    /// An eight-card board of two wings (indexes 0-3 and 4-7) linked
    /// card by card: 1, 2 or 4 devices from one wing (the wing with the
    /// fewest fitting devices that hold them), else linked across the
    /// wings, or all 8 (Kunlun, 8.5).
    Board8,
}

/// The pod annotations with a kind's device lists (HAMi's codec,
/// hami-compat.md 4.2): what the device plugin hands out, and what the
/// pod holds (the ledger reads this one back).
#[derive(Debug, PartialEq, Eq)]
pub struct PodLists {
    pub to_allocate: &'static str,
    pub allocated: &'static str,
}

/// Which containers have an entry in a kind's device lists
/// (hami-vendors.md 1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entries {
    /// One entry per container, init containers first, empty for a
    /// container without the kind's devices: entry `i` is container `i`,
    /// which is how a device plugin that maps entries by index finds its
    /// container.
    EveryContainer,
    /// Entries only for the containers with the kind's devices, in order:
    /// what HAMi writes when the registered device type is not the vendor
    /// word (Hygon's `DCU-…`), and what such a kind's device plugin reads
    /// (it skips empty entries).
    AskingContainers,
}

/// The defaults of a kind's config section (`engine::resources::DeviceConfig`):
/// the resource names of HAMi v2.10's chart and the request defaults of
/// the kind's HAMi backend. `""` for a resource the kind does not have.
#[derive(Debug)]
pub struct ConfigDefaults {
    pub resource_count_name: &'static str,
    pub resource_memory_name: &'static str,
    pub resource_memory_percentage_name: &'static str,
    pub resource_core_name: &'static str,
    pub resource_priority_name: &'static str,
    /// Cores (percent of one device) when a container gives none.
    pub default_cores: u32,
    /// Count given to a container that asks for memory or cores only.
    pub default_gpu_num: u32,
    /// MiB per unit of the memory resource (Cambricon: 256; 4.1).
    pub memory_factor: u32,
}

/// Pod annotations that choose among a kind's devices.
#[derive(Debug)]
pub struct SelectionKeys {
    /// Models to use / to avoid (comma lists).
    pub use_type: &'static str,
    pub nouse_type: &'static str,
    /// Device UUIDs to use / to avoid (comma lists).
    pub use_uuid: &'static str,
    pub nouse_uuid: &'static str,
    /// Only devices whose mode contains the value (HAMi's substring rule).
    pub mode: &'static str,
    /// `"true"`: all devices of a container on one NUMA node.
    pub numa_bind: &'static str,
}

/// One device mode of a kind.
#[derive(Debug)]
pub struct DeviceMode {
    pub name: &'static str,
    pub sharing: Sharing,
}

/// How pods share a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Slices of memory and cores, up to the split count (HAMi-core).
    Slices,
    /// Instances of the device's registered profiles, none overlapping
    /// (MIG).
    Instances,
}

/// Environment variables the mutating webhook writes for a kind.
#[derive(Debug)]
pub struct WebhookEnv {
    /// Written into containers that ask for no device, when the config's
    /// `overwriteEnv` is on: hides every device from them.
    pub hide_devices: (&'static str, &'static str),
    /// Carries the config's `gpuCorePolicy` into every container.
    pub core_policy: &'static str,
    /// Carries the container's priority resource.
    pub task_priority: &'static str,
}

impl DeviceKind {
    /// How a device registered in `mode` is shared (`""` is the default
    /// mode); `None`: not at all.
    pub fn sharing(&self, mode: &str) -> Option<Sharing> {
        let mode = if mode.is_empty() {
            self.default_mode
        } else {
            mode
        };
        self.modes
            .iter()
            .find(|m| m.name == mode)
            .map(|m| m.sharing)
            .or(self.other_modes)
    }

    /// What one device is called in counts (`GPU`, `DCU`): the last word
    /// of [`DeviceKind::noun`].
    pub fn unit(&self) -> &'static str {
        self.noun.rsplit(' ').next().unwrap_or(self.noun)
    }

    /// The names of its modes.
    pub fn mode_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.modes.iter().map(|m| m.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_indexed_by_their_id_and_found_by_vendor() {
        for (id, kind) in kinds() {
            assert!(std::ptr::eq(id.kind(), kind));
            assert_eq!(by_vendor(kind.vendor), Some(id));
        }
        assert_eq!(by_vendor("MLU"), Some(KindId::CAMBRICON));
        assert_eq!(by_vendor("Metax-GPU"), Some(KindId::METAX_GPU));
        assert_eq!(by_vendor("Metax-SGPU"), Some(KindId::METAX_SGPU));
        assert_eq!(by_vendor(""), None);
    }

    #[test]
    fn nvidia_modes_follow_hami_v2_10() {
        // hami-compat.md "MIG in v2.10": `mps` is a label only and behaves
        // like `hami-core`; a device without a mode is `hami-core`.
        let nv = KindId::NVIDIA.kind();
        assert_eq!(nv.sharing(""), Some(Sharing::Slices));
        assert_eq!(nv.sharing("hami-core"), Some(Sharing::Slices));
        assert_eq!(nv.sharing("mps"), Some(Sharing::Slices));
        assert_eq!(nv.sharing("mig"), Some(Sharing::Instances));
        assert_eq!(nv.sharing("cuda"), None);
    }
}
