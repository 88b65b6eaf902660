//! The resource names and request defaults the engine reads a device
//! kind's requests with: a kind's config section, with HAMi's key names so
//! that HAMi's `nvidia` section can be copied over when migrating.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::devices::KindId;

/// Keys of HAMi's `nvidia` device config that only its device plugin reads.
pub const DEVICE_PLUGIN_KEYS: [&str; 7] = [
    "deviceSplitCount",
    "deviceMemoryScaling",
    "deviceCoreScaling",
    "preConfiguredDeviceMemory",
    "libCudaLogLevel",
    "enableNumaTopology",
    "disableCoreLimit",
];

/// One device kind's resource names and request defaults (for NVIDIA,
/// HAMi's `nvidia` device config).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeviceConfig {
    /// The kind these names and defaults are for (not a key: the section
    /// a config file gives them in decides it).
    #[serde(skip)]
    pub kind: KindId,
    pub resource_count_name: String,
    pub resource_memory_name: String,
    pub resource_memory_percentage_name: String,
    pub resource_core_name: String,
    pub resource_priority_name: String,
    /// MiB per GPU when a container gives neither gpumem nor a percentage
    /// (0: the whole GPU's memory).
    pub default_memory: u64,
    /// Cores (percent of SMs) per GPU when a container gives no gpucores.
    pub default_cores: u32,
    /// GPU count injected when a container gives memory or cores but no count.
    #[serde(rename = "defaultGPUNum")]
    pub default_gpu_num: u32,
    /// Requested gpumem is multiplied by this factor.
    pub memory_factor: u32,
    /// `NVIDIA_VISIBLE_DEVICES=none` for containers without GPUs (webhook).
    pub overwrite_env: bool,
    /// `GPU_CORE_UTILIZATION_POLICY` for every container unless `default` (webhook).
    pub gpu_core_policy: String,
    /// `spec.runtimeClassName` for vGPU pods that set none (webhook).
    pub runtime_class_name: String,
    /// HAMi v2.10's `migProfileAllowlist`: the MIG profiles each GPU model
    /// may be split into. Its device plugin registers only these; gpugate
    /// also hands out only these, so that a narrowed list holds at once,
    /// before every device plugin has re-registered. Empty: every
    /// registered profile.
    pub mig_profile_allowlist: Vec<MigAllowlistEntry>,
    /// A pod taking whole devices prefers nodes by the links among them
    /// (`devices::NodePreference::Tenants`: Metax sGPU, HAMi's
    /// `sgpuTopologyAware`, which its chart writes as the text `"false"`);
    /// the pod's annotation overrides it. Only such a kind reads it.
    #[serde(
        deserialize_with = "bool_or_text",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub topology_aware: bool,
    /// A chip split into templates (Ascend, HAMi's `vnpus.configs[]`
    /// keys): its templates and memory; empty for other kinds.
    #[serde(flatten)]
    pub vnpu: VnpuChip,
    /// Every other key: accepted only when it is one of HAMi's device
    /// config that only its device plugin reads ([`DEVICE_PLUGIN_KEYS`],
    /// so that HAMi's `nvidia` section can be copied as is), and then
    /// ignored; refused otherwise (a typo must not fall back to a default).
    #[serde(flatten, skip_serializing)]
    pub device_plugin_only: BTreeMap<String, IgnoredAny>,
}

/// A boolean as YAML gives it, or as text in Go's `strconv.ParseBool`
/// forms (HAMi's chart quotes `sgpuTopologyAware: "false"`).
fn bool_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Bool(bool),
        Text(String),
    }
    match Given::deserialize(d)? {
        Given::Bool(b) => Ok(b),
        Given::Text(t) => parse_bool(&t).ok_or_else(|| {
            serde::de::Error::custom(format!("{t:?} is not a boolean: allowed true or false"))
        }),
    }
}

/// Go's `strconv.ParseBool`: `1`, `t`, `T`, `TRUE`, `true`, `True` and
/// the same for false.
pub fn parse_bool(text: &str) -> Option<bool> {
    match text.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The keys of one entry of HAMi's `vnpus.configs` beyond resource names:
/// what splits a chip into templates (hami-vendors.md 2.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VnpuChip {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chip_name: String,
    /// The chip's vendor word; must be the kind's own.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub common_word: String,
    /// MiB a whole device gives a container.
    #[serde(skip_serializing_if = "is_zero")]
    pub memory_allocatable: u32,
    /// MiB of the device: a request above it fits no template.
    #[serde(skip_serializing_if = "is_zero")]
    pub memory_capacity: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub ai_core: u32,
    #[serde(rename = "aiCPU", skip_serializing_if = "is_zero")]
    pub ai_cpu: u32,
    /// In any order: the smallest that holds a request is chosen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<TemplateConfig>,
    /// Devices taken by cards of two (Ascend 910C).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub super_pod: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One template of a chip.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateConfig {
    pub name: String,
    /// MiB.
    pub memory: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ai_core: u32,
    #[serde(default, rename = "aiCPU", skip_serializing_if = "is_zero")]
    pub ai_cpu: u32,
}

impl VnpuChip {
    /// The chip's defaults, as HAMi's chart gives them.
    fn of(kind: &crate::devices::DeviceKind) -> Self {
        let Some(c) = kind.templates else {
            return Self::default();
        };
        VnpuChip {
            chip_name: c.chip_name.to_string(),
            common_word: kind.vendor.to_string(),
            memory_allocatable: c.memory_allocatable,
            memory_capacity: c.memory_capacity,
            ai_core: c.ai_core,
            ai_cpu: c.ai_cpu,
            templates: c
                .templates
                .iter()
                .map(|t| TemplateConfig {
                    name: t.name.to_string(),
                    memory: t.memory,
                    ai_core: t.ai_core,
                    ai_cpu: t.ai_cpu,
                })
                .collect(),
            super_pod: c.super_pod,
        }
    }

    /// HAMi's `trimMemory` (2.4): the smallest template that holds `mib`,
    /// with its name; else the whole device (`memoryAllocatable`, no
    /// name) when `mib` is at most `memoryCapacity`; else `None`.
    pub fn trim(&self, mib: u64) -> Option<(u32, &str)> {
        if let Some(t) = self
            .templates
            .iter()
            .filter(|t| mib <= u64::from(t.memory))
            .min_by_key(|t| t.memory)
        {
            return Some((t.memory, t.name.as_str()));
        }
        (mib <= u64::from(self.memory_capacity)).then_some((self.memory_allocatable, ""))
    }
}

/// One entry of `migProfileAllowlist`: GPU models and the profiles they
/// may be split into.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MigAllowlistEntry {
    /// Model names as the device plugin registers them (`NVIDIA
    /// A100-SXM4-40GB`), compared without regard to case; `*` globs.
    pub models: Vec<String>,
    /// Profile names (`1g.5gb`, `3g.20gb`).
    pub profiles: Vec<String>,
}

/// `migProfileAllowlist` ready for the per-GPU check: shared by the plans
/// that read it (a plan clones a pointer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigAllowlist(std::sync::Arc<Vec<MigAllowlistEntry>>);

impl MigAllowlist {
    /// Whether a GPU of `model` may hold instances of `profile`: some
    /// entry names the profile and a part of the model. HAMi's device
    /// plugin matches models by substring (`util.go:282`,
    /// `strings.Contains(target, model)`), so its chart's default
    /// `A100-SXM4-40GB` matches the driver's `NVIDIA A100-SXM4-40GB`; here
    /// in any letter case, and a `*` makes a glob over the whole name.
    /// (Models were lower-cased when the list was made; a glob needs the
    /// model lower-cased too, which only a list with globs pays for.)
    pub fn allows(&self, model: &str, profile: &str) -> bool {
        self.0.iter().any(|e| {
            e.profiles.iter().any(|p| p == profile)
                && e.models.iter().any(|m| {
                    if m.contains('*') {
                        super::glob::glob_match(m, &model.to_lowercase())
                    } else {
                        contains_ignore_ascii_case(model, m)
                    }
                })
        })
    }
}

/// Whether `haystack` contains `needle` (lower case), ignoring ASCII case.
fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    n.is_empty() || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

/// Whether `name` looks like a MIG profile as HAMi requires it: `<n>g.<x>`
/// (`1g.5gb`, `1g.10gb+me`).
fn is_mig_profile_name(name: &str) -> bool {
    name.split_once("g.").is_some_and(|(slices, rest)| {
        !slices.is_empty() && slices.bytes().all(|b| b.is_ascii_digit()) && !rest.is_empty()
    })
}

impl DeviceConfig {
    /// `migProfileAllowlist` for the plans, `None` when empty (every
    /// registered profile).
    pub fn mig_allowlist(&self) -> Option<MigAllowlist> {
        (!self.mig_profile_allowlist.is_empty()).then(|| {
            let entries = self
                .mig_profile_allowlist
                .iter()
                .map(|e| MigAllowlistEntry {
                    models: e.models.iter().map(|m| m.trim().to_lowercase()).collect(),
                    profiles: e.profiles.iter().map(|p| p.trim().to_string()).collect(),
                })
                .collect();
            MigAllowlist(std::sync::Arc::new(entries))
        })
    }

    /// The names that make a container ask for GPUs: count, memory,
    /// memory percentage and cores (the priority alone does not).
    pub fn gpu_resource_names(&self) -> [&str; 4] {
        [
            self.resource_count_name.as_str(),
            self.resource_memory_name.as_str(),
            self.resource_memory_percentage_name.as_str(),
            self.resource_core_name.as_str(),
        ]
    }
}

impl Default for DeviceConfig {
    /// NVIDIA's section.
    fn default() -> Self {
        Self::for_kind(KindId::NVIDIA)
    }
}

impl DeviceConfig {
    /// A kind's section with its defaults (`devices::ConfigDefaults`).
    pub fn for_kind(kind: KindId) -> Self {
        let d = &kind.kind().config;
        Self {
            kind,
            resource_count_name: d.resource_count_name.to_string(),
            resource_memory_name: d.resource_memory_name.to_string(),
            resource_memory_percentage_name: d.resource_memory_percentage_name.to_string(),
            resource_core_name: d.resource_core_name.to_string(),
            resource_priority_name: d.resource_priority_name.to_string(),
            default_memory: 0,
            default_cores: d.default_cores,
            default_gpu_num: d.default_gpu_num,
            memory_factor: d.memory_factor,
            overwrite_env: false,
            gpu_core_policy: "default".to_string(),
            runtime_class_name: String::new(),
            mig_profile_allowlist: Vec::new(),
            topology_aware: false,
            vnpu: VnpuChip::of(kind.kind()),
            device_plugin_only: BTreeMap::new(),
        }
    }
}

impl DeviceConfig {
    /// The values no request could be read under.
    pub fn validate(&self) -> Result<(), String> {
        let n = self;
        let section = self.kind.kind().name;
        if let Some(key) = n
            .device_plugin_only
            .keys()
            .find(|k| !DEVICE_PLUGIN_KEYS.contains(&k.as_str()))
        {
            return Err(format!(
                "{section}.{key} is not a key gpugate knows (nor one of HAMi's device plugin, \
                 which are accepted and ignored: {})",
                DEVICE_PLUGIN_KEYS.join(", ")
            ));
        }
        if n.topology_aware
            && !matches!(
                n.kind.kind().node_preference,
                crate::devices::NodePreference::Tenants { .. }
            )
        {
            return Err(format!(
                "{section}.topologyAware is read for no kind but Metax sGPUs (metax.sgpuTopologyAware)"
            ));
        }
        if n.resource_count_name.trim().is_empty() {
            return Err(format!("{section}.resourceCountName must not be empty"));
        }
        if n.default_cores > 100 {
            return Err(format!(
                "{section}.defaultCores is {}, allowed 0..=100",
                n.default_cores
            ));
        }
        for (i, e) in n.mig_profile_allowlist.iter().enumerate() {
            if e.models.iter().all(|m| m.trim().is_empty()) {
                return Err(format!(
                    "{section}.migProfileAllowlist[{i}] names no GPU model (models: [...])"
                ));
            }
            if let Some(p) = e.profiles.iter().find(|p| !is_mig_profile_name(p)) {
                return Err(format!(
                    "{section}.migProfileAllowlist[{i}]: profile {p:?} is not a MIG profile name like 1g.5gb or 3g.20gb"
                ));
            }
        }
        self.validate_vnpu()?;
        if n.memory_factor == 0 {
            return Err(format!("{section}.memoryFactor must be at least 1"));
        }
        if n.default_memory > i32::MAX as u64 {
            return Err(format!(
                "{section}.defaultMemory is {} MiB, more than HAMi's device plugin can represent ({})",
                n.default_memory,
                i32::MAX
            ));
        }
        Ok(())
    }

    /// The template keys: only for a chip split into templates, and then
    /// consistent (a template above the device could never be placed).
    fn validate_vnpu(&self) -> Result<(), String> {
        let kind = self.kind.kind();
        let section = kind.name;
        let v = &self.vnpu;
        if kind.templates.is_none() {
            // A chip's names (HAMi's `iluvatars` entries) name its kind.
            let names_only = VnpuChip {
                chip_name: String::new(),
                common_word: String::new(),
                ..v.clone()
            } == VnpuChip::default();
            let word_ok = v.common_word.is_empty() || v.common_word == kind.vendor;
            return if names_only && word_ok {
                Ok(())
            } else {
                Err(format!(
                    "{section}: templates, memoryAllocatable and the other vnpus keys are for \
                     Ascend chips (the vnpus section), not for {}s",
                    kind.noun
                ))
            };
        }
        if v.common_word != kind.vendor {
            return Err(format!(
                "vnpus {section}: commonWord is {:?}; it must be {:?}",
                v.common_word, kind.vendor
            ));
        }
        if v.memory_allocatable == 0 || v.memory_allocatable > v.memory_capacity {
            return Err(format!(
                "vnpus {section}: memoryAllocatable is {} MiB and memoryCapacity {} MiB: allowed \
                 1 <= memoryAllocatable <= memoryCapacity",
                v.memory_allocatable, v.memory_capacity
            ));
        }
        if let Some(t) = v
            .templates
            .iter()
            .find(|t| t.memory == 0 || t.memory > v.memory_capacity || t.name.trim().is_empty())
        {
            return Err(format!(
                "vnpus {section}: template {:?} of {} MiB: a template needs a name and at most \
                 memoryCapacity ({} MiB)",
                t.name, t.memory, v.memory_capacity
            ));
        }
        Ok(())
    }
}
