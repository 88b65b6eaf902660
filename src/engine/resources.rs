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
    /// Every other key: accepted only when it is one of HAMi's device
    /// config that only its device plugin reads ([`DEVICE_PLUGIN_KEYS`],
    /// so that HAMi's `nvidia` section can be copied as is), and then
    /// ignored; refused otherwise (a typo must not fall back to a default).
    #[serde(flatten, skip_serializing)]
    pub device_plugin_only: BTreeMap<String, IgnoredAny>,
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
            memory_factor: 1,
            overwrite_env: false,
            gpu_core_policy: "default".to_string(),
            runtime_class_name: String::new(),
            mig_profile_allowlist: Vec::new(),
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
}
