//! Devices whose cores are bits of a mask (`devices::DeviceKind::core_masks`;
//! AWS Neuron, hami-vendors.md 10): a device of two cores holds the mask 3;
//! a container takes one core (the mask 1 or 2, whichever bit is free) or
//! the whole device (3). Usage adds masks, as HAMi's accounting does, so a
//! device holding 1 and 2 is full.
//!
//! A request gives devices (the count: whole devices) or cores (the cores
//! resource: one core of one device, or a multiple of two, whole devices).

use super::request::{ContainerResources, GpuRequest, Memory, RequestError};
use super::resources::DeviceConfig;

use crate::devices::{MASK_CORES as CORES_PER_DEVICE, WHOLE_MASK as WHOLE};

impl ContainerResources {
    /// The request of a container of a core-mask kind (10.1): the count
    /// first (whole devices), else the cores (1: one core; a multiple of
    /// two: whole devices); neither, no request.
    pub(super) fn resolve_core_masks(
        &self,
        cfg: &DeviceConfig,
    ) -> Result<Option<GpuRequest>, RequestError> {
        let whole = |count: u64, resource: &str| -> Result<Option<GpuRequest>, RequestError> {
            let count = u32::try_from(count)
                .map_err(|_| self.error(resource, format!("{count} devices is too many")))?;
            Ok(Some(GpuRequest {
                count,
                memory: Memory::Mib(0),
                cores: WHOLE,
            }))
        };
        match (self.count, self.cores.filter(|c| *c > 0)) {
            (Some(n), _) if n > 0 => whole(n, &cfg.resource_count_name),
            (Some(_), Some(_)) => Err(self.error(
                &cfg.resource_count_name,
                "is 0 but cores are requested: allowed at least 1, or no count".to_string(),
            )),
            (_, None) => Ok(None),
            (None, Some(1)) => Ok(Some(GpuRequest {
                count: 1,
                memory: Memory::Mib(0),
                cores: 1,
            })),
            (None, Some(c)) if c % CORES_PER_DEVICE == 0 => {
                whole(c / CORES_PER_DEVICE, &cfg.resource_core_name)
            }
            (None, Some(c)) => Err(self.error(
                &cfg.resource_core_name,
                format!(
                    "{c} cores: allowed 1 or a multiple of {CORES_PER_DEVICE} (a device has \
                     {CORES_PER_DEVICE}; a container takes one core or whole devices)"
                ),
            )),
        }
    }
}

/// The mask a grant of `cores` takes on a device holding `used` (10.5):
/// the asked mask on a free device, else the free bit.
pub fn mask_taken(used: u32, cores: u32) -> u32 {
    if used == 0 { cores } else { WHOLE & !used }
}

/// The compute units a container asking for `percent` takes of a device
/// with `units` of which `used` are taken (AMD, hami-vendors.md 11.5):
/// `floor(units × percent / 100)`, at least one and at most all; `None`
/// when fewer are free (or the device has none).
pub fn compute_units(units: u32, used: u32, percent: u32) -> Option<u32> {
    if units == 0 {
        return None;
    }
    let want = (u64::from(units) * u64::from(percent) / 100).clamp(1, u64::from(units));
    let want = u32::try_from(want).ok()?;
    (units.saturating_sub(used) >= want).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_units_are_a_share_of_the_device_at_least_one() {
        // 11.5: floor(devcore × pct / 100) clamped to [1, devcore].
        assert_eq!(compute_units(304, 0, 25), Some(76));
        assert_eq!(compute_units(304, 0, 100), Some(304));
        assert_eq!(compute_units(304, 0, 0), Some(1));
        assert_eq!(compute_units(304, 301, 1), Some(3));
        assert_eq!(compute_units(304, 302, 1), None);
        assert_eq!(compute_units(304, 229, 25), None);
        assert_eq!(compute_units(304, 228, 25), Some(76));
        assert_eq!(compute_units(0, 0, 50), None);
        assert_eq!(compute_units(u32::MAX, 0, 100), Some(u32::MAX));
    }

    #[test]
    fn the_free_bit_is_taken() {
        assert_eq!(mask_taken(0, 1), 1);
        assert_eq!(mask_taken(0, WHOLE), WHOLE);
        assert_eq!(mask_taken(1, 1), 2);
        assert_eq!(mask_taken(2, 1), 1);
    }
}
