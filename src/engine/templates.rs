//! Chips split into fixed templates (Ascend vNPUs, hami-vendors.md 2.1 and
//! 2.4; Kunlunxin vXPUs, 8.1): a container's request, as written, becomes
//! what the chip can
//! give it. HAMi's webhook rewrites the pod this way and its fit reads the
//! rewritten pod; gpugate reads every pod this way, so that a pod that
//! missed the webhook is placed and counted as its device plugin will
//! split it (the template's memory, not the request's).
//!
//! - Templates (the default): memory is rounded up to the smallest template
//!   that holds it; a container without memory, or one above every
//!   template but within the device, takes the whole device
//!   (`memoryAllocatable`); above the device it is refused. Cores are the
//!   template's, so a core request is refused; several devices are whole
//!   devices only.
//! - Soft split (`huawei.com/vnpu-mode: hami-core`): memory and cores as
//!   asked (a container without memory takes the whole device).
//! - Super pods (910C): devices come by cards of two; a count of 1 becomes
//!   2, another odd count is refused.
//! - Kunlunxin: a size's cores are its share of the card (25, 50, 100), and
//!   several cards of one size are allowed (`devices::TemplateChip`'s
//!   flags say which rules a chip follows).

use super::annotations::Annotations;
use super::request::{GpuRequest, Memory, PodRequest, RequestError};
use super::resources::DeviceConfig;

/// Whether the pod asks for a soft split: HAMi's test is equality with
/// `hami-core` (2.3).
pub fn soft_split(kind: crate::devices::KindId, annotations: &impl Annotations) -> bool {
    kind.kind().templates.is_some_and(|c| {
        !c.mode_annotation.is_empty()
            && annotations.annotation(c.mode_annotation).map(str::trim)
                == Some(crate::devices::ascend::HAMI_CORE)
    })
}

impl PodRequest {
    /// The request as the kind's chip splits it, for a kind split into
    /// templates ([`module docs`](self)); unchanged for any other kind.
    pub fn split_into_templates(
        mut self,
        cfg: &DeviceConfig,
        annotations: &impl Annotations,
    ) -> Result<Self, RequestError> {
        if self.device_kind.kind().templates.is_none() {
            return Ok(self);
        }
        let soft = soft_split(self.device_kind, annotations);
        for c in &mut self.containers {
            if let Some(req) = c.gpu {
                c.gpu = Some(split(&req, cfg, soft, &c.name)?);
            }
        }
        Ok(self)
    }
}

/// One container's request as the chip splits it.
pub fn split(
    req: &GpuRequest,
    cfg: &DeviceConfig,
    soft: bool,
    container: &str,
) -> Result<GpuRequest, RequestError> {
    let chip = &cfg.vnpu;
    let rules = cfg.kind.kind().templates;
    let error = |resource: &str, problem: String| RequestError {
        container: container.to_string(),
        resource: resource.to_string(),
        problem,
    };
    let mut count = req.count;
    if chip.super_pod {
        if count == 1 {
            count = 2;
        } else if !count.is_multiple_of(2) {
            return Err(error(
                &cfg.resource_count_name,
                format!(
                    "{count}: {} NPUs come by cards of two, so a request must be 1 (a card) or \
                     an even number",
                    chip.common_word
                ),
            ));
        }
    }
    if !soft && req.cores > 0 {
        return Err(error(
            &cfg.resource_core_name,
            format!(
                "{} cores asked, but cores are set only in the soft split (pod annotation \
                 {}: hami-core); a template brings its own cores",
                req.cores,
                crate::devices::ascend::VNPU_MODE
            ),
        ));
    }
    let whole = u64::from(chip.memory_allocatable);
    let memory = match req.memory {
        // Never for a template kind (only a kind split into profiles).
        Memory::Slices(_) => 0,
        Memory::Mib(m) if soft => m,
        Memory::Mib(m) => match chip.trim(m) {
            Some((mib, _)) => u64::from(mib),
            None => {
                return Err(error(
                    &cfg.resource_memory_name,
                    format!(
                        "{m} MiB is more than one {} ({} MiB): allowed a template ({}) or \
                         at most {} MiB",
                        cfg.kind.kind().noun,
                        chip.memory_capacity,
                        template_list(cfg),
                        chip.memory_capacity
                    ),
                ));
            }
        },
        // No memory asked: the whole device (HAMi's webhook writes
        // memoryAllocatable into the pod).
        Memory::Percent(_) => whole,
    };
    let several_whole_only = rules.is_some_and(|r| r.several_whole_only);
    if !soft && several_whole_only && count > 1 && memory != whole {
        return Err(error(
            &cfg.resource_memory_name,
            format!(
                "{memory} MiB on each of {count} NPUs: a template (vNPU) is one NPU's; several \
                 NPUs are whole NPUs only: leave the memory out or ask for {whole} MiB"
            ),
        ));
    }
    // Kunlun: a template's cores are its share of the card (8.1).
    let cores = match rules {
        Some(r) if r.cores_from_memory && whole > 0 => {
            u32::try_from(memory * 100 / whole).unwrap_or(100).min(100)
        }
        _ => req.cores,
    };
    Ok(GpuRequest {
        count,
        memory: Memory::Mib(memory),
        cores,
    })
}

/// The chip's templates in words: `vir05_1c_16g (16384 MiB), …`.
pub fn template_list(cfg: &DeviceConfig) -> String {
    let mut templates: Vec<_> = cfg.vnpu.templates.iter().collect();
    templates.sort_by_key(|t| t.memory);
    templates
        .iter()
        .map(|t| format!("{} ({} MiB)", t.name, t.memory))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The template the device plugin makes for `mib` MiB (HAMi's
/// `trimMemory` name, 2.3): the smallest that holds it; `None` for a
/// whole device.
pub fn template_of(cfg: &DeviceConfig, mib: u64) -> Option<&str> {
    cfg.vnpu
        .trim(mib)
        .map(|(_, name)| name)
        .filter(|name| !name.is_empty())
}
