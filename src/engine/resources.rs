//! The resource names and request defaults the engine reads requests with:
//! HAMi's `nvidia` device config section (config key `nvidia`), with its key
//! names, so that it can be copied over when migrating.

use serde::Deserialize;
use serde::de::IgnoredAny;

/// NVIDIA resource names and request defaults (HAMi's `nvidia` device config).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NvidiaConfig {
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
    // Keys of HAMi's device config that only its device plugin reads: accepted
    // (so HAMi's `nvidia` section can be copied as is) and otherwise ignored.
    #[doc(hidden)]
    pub device_split_count: Option<IgnoredAny>,
    #[doc(hidden)]
    pub device_memory_scaling: Option<IgnoredAny>,
    #[doc(hidden)]
    pub device_core_scaling: Option<IgnoredAny>,
    #[doc(hidden)]
    pub pre_configured_device_memory: Option<IgnoredAny>,
    #[doc(hidden)]
    pub lib_cuda_log_level: Option<IgnoredAny>,
    #[doc(hidden)]
    pub enable_numa_topology: Option<IgnoredAny>,
    #[doc(hidden)]
    pub disable_core_limit: Option<IgnoredAny>,
    #[doc(hidden)]
    pub mig_profile_allowlist: Option<IgnoredAny>,
}

impl Default for NvidiaConfig {
    fn default() -> Self {
        Self {
            resource_count_name: "nvidia.com/gpu".to_string(),
            resource_memory_name: "nvidia.com/gpumem".to_string(),
            resource_memory_percentage_name: "nvidia.com/gpumem-percentage".to_string(),
            resource_core_name: "nvidia.com/gpucores".to_string(),
            resource_priority_name: "nvidia.com/priority".to_string(),
            default_memory: 0,
            default_cores: 0,
            default_gpu_num: 1,
            memory_factor: 1,
            overwrite_env: false,
            gpu_core_policy: "default".to_string(),
            runtime_class_name: String::new(),
            device_split_count: None,
            device_memory_scaling: None,
            device_core_scaling: None,
            pre_configured_device_memory: None,
            lib_cuda_log_level: None,
            enable_numa_topology: None,
            disable_core_limit: None,
            mig_profile_allowlist: None,
        }
    }
}

impl NvidiaConfig {
    /// The values no request could be read under.
    pub fn validate(&self) -> Result<(), String> {
        let n = self;
        if n.resource_count_name.trim().is_empty() {
            return Err("nvidia.resourceCountName must not be empty".to_string());
        }
        if n.default_cores > 100 {
            return Err(format!(
                "nvidia.defaultCores is {}, allowed 0..=100",
                n.default_cores
            ));
        }
        if n.memory_factor == 0 {
            return Err("nvidia.memoryFactor must be at least 1".to_string());
        }
        if n.default_memory > i32::MAX as u64 {
            return Err(format!(
                "nvidia.defaultMemory is {} MiB, more than HAMi's device plugin can represent ({})",
                n.default_memory,
                i32::MAX
            ));
        }
        Ok(())
    }
}
