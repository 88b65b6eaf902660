//! Devices split into profiles the node registers (Enflame DRS,
//! hami-vendors.md 9.5; `DeviceKind::slice_profiles`): a profile is a
//! number of a device's slices with its memory and cores. A container
//! takes one profile of one device:
//!
//! - by size (`enflame.com/drs-gcu: n`): the profile of `n` slices;
//! - by spec (`enflame.com/gcu-memory`, `enflame.com/gcu-core`): the
//!   first profile, by slices then memory, holding both; memory is GB, or
//!   MiB when above twice the GB of the profile with the most slices (HAMi's reading).
//!
//! The node's profiles decide, so the request is read as written
//! ([`ContainerResources::resolve_profiles`]) and resolved per node
//! ([`NodeProfiles::resolve`]) before the per-GPU checks; a device must
//! then have the profile's slices free (HAMi v2.10 asks for one, 9.7;
//! HAMi master for all of them).

use super::request::{ContainerResources, GpuRequest, Memory, RequestError};
use super::resources::DeviceConfig;
use crate::devices::ProfileSpec;

/// The profiles of a node's devices, and each device's number for its
/// plugin (Enflame's minor), by UUID. Shared between copies of the state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeProfiles {
    /// By slices, then memory.
    pub profiles: Vec<ProfileSpec>,
    pub minors: Vec<(String, String)>,
}

/// No profiles: the node of every other kind.
pub fn none() -> &'static NodeProfiles {
    static NONE: NodeProfiles = NodeProfiles {
        profiles: Vec::new(),
        minors: Vec::new(),
    };
    &NONE
}

impl NodeProfiles {
    /// The profile a container asking `req` takes here, and the request
    /// the per-GPU checks see (one device, the profile's memory and
    /// cores); `None` when no profile gives it.
    pub fn resolve(&self, req: &GpuRequest) -> Option<(GpuRequest, &ProfileSpec)> {
        let chosen = match req.memory {
            Memory::Slices(n) => self.profiles.iter().find(|p| p.slices == n),
            Memory::Mib(raw) => {
                let largest_gb = self.profiles.last().map_or(0, |p| p.mem_mib / 1024);
                let gb = if largest_gb > 0 && raw > 2 * u64::from(largest_gb) {
                    raw.div_ceil(1024)
                } else {
                    raw
                };
                self.profiles.iter().find(|p| {
                    (gb == 0 || u64::from(p.mem_mib / 1024) >= gb)
                        && (req.cores == 0 || p.cores >= req.cores)
                })
            }
            Memory::Percent(_) => None,
        }?;
        Some((
            GpuRequest {
                count: 1,
                memory: Memory::Mib(u64::from(chosen.mem_mib)),
                cores: chosen.cores,
            },
            chosen,
        ))
    }

    /// The profile a grant of `mem_mib` and `cores` took: what a device
    /// list of HAMi v2.10 (four fields, no slices) says of it.
    pub fn taken(&self, mem_mib: u32, cores: u32) -> Option<&ProfileSpec> {
        self.profiles
            .iter()
            .find(|p| p.mem_mib == mem_mib && p.cores == cores)
    }

    /// The plugin's number for the device `uuid` (empty when unknown).
    pub fn minor(&self, uuid: &str) -> &str {
        self.minors
            .iter()
            .find(|(u, _)| u == uuid)
            .map_or("", |(_, m)| m.as_str())
    }
}

impl ContainerResources {
    /// A container's request of a kind split into profiles, as written
    /// (9.1): a slice count (limits else requests) is one device of that
    /// many slices; otherwise memory and cores, either or both, are one
    /// device of the profile that holds them. HAMi's webhook refuses a
    /// count or memory of 0 and cores outside 1..=100 (9.4), and so does
    /// this.
    pub(super) fn resolve_profiles(
        &self,
        cfg: &DeviceConfig,
    ) -> Result<Option<GpuRequest>, RequestError> {
        if let Some(n) = self.count {
            let slices = u32::try_from(n)
                .ok()
                .filter(|n| *n > 0 && *n <= crate::devices::enflame::MAX_SLICES)
                .ok_or_else(|| {
                    self.error(
                        &cfg.resource_count_name,
                        format!(
                            "{n}: allowed 1..={} (slices of one device)",
                            crate::devices::enflame::MAX_SLICES
                        ),
                    )
                })?;
            return Ok(Some(GpuRequest {
                count: 1,
                memory: Memory::Slices(slices),
                cores: 0,
            }));
        }
        if self.memory.is_none() && self.cores.is_none() {
            return Ok(None);
        }
        let memory = match self.memory {
            Some(0) => {
                return Err(self.error(
                    &cfg.resource_memory_name,
                    "0: allowed at least 1 (GB, or MiB)".to_string(),
                ));
            }
            Some(m) if m > super::request::MAX_MEM_MIB => {
                return Err(self.error(
                    &cfg.resource_memory_name,
                    format!(
                        "{m}: allowed at most {} (GB, or MiB; a quantity such as 20Gi is \
                         bytes)",
                        super::request::MAX_MEM_MIB
                    ),
                ));
            }
            m => m.unwrap_or(0),
        };
        let cores = match self.cores {
            Some(c @ 1..=100) => c as u32,
            None => 0,
            Some(c) => {
                return Err(self.error(
                    &cfg.resource_core_name,
                    format!("{c}: allowed 1..=100 (percent of one device)"),
                ));
            }
        };
        Ok(Some(GpuRequest {
            count: 1,
            memory: Memory::Mib(memory),
            cores,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, slices: u32, gb: u32, cores: u32) -> ProfileSpec {
        ProfileSpec {
            name: name.to_string(),
            id: String::new(),
            slices,
            mem_mib: gb * 1024,
            cores,
        }
    }

    fn node() -> NodeProfiles {
        NodeProfiles {
            profiles: vec![
                spec("1g.6gb", 1, 6, 17),
                spec("3g.20gb", 3, 20, 50),
                spec("6g.40gb", 6, 40, 100),
            ],
            minors: Vec::new(),
        }
    }

    fn chosen(memory: Memory, cores: u32) -> Option<String> {
        let req = GpuRequest {
            count: 1,
            memory,
            cores,
        };
        node().resolve(&req).map(|(_, p)| p.name.clone())
    }

    // hami-vendors.md 9.5: direct by size; by spec the smallest profile
    // holding memory (GB, or MiB above twice the largest GB) and cores.
    #[test]
    fn a_request_takes_the_profile_hami_chooses() {
        assert_eq!(chosen(Memory::Slices(3), 0).as_deref(), Some("3g.20gb"));
        assert_eq!(chosen(Memory::Slices(2), 0), None);
        assert_eq!(chosen(Memory::Mib(6), 0).as_deref(), Some("1g.6gb"));
        assert_eq!(chosen(Memory::Mib(7), 0).as_deref(), Some("3g.20gb"));
        assert_eq!(chosen(Memory::Mib(80), 0), None, "80 GB: none, not MiB");
        assert_eq!(chosen(Memory::Mib(81), 0).as_deref(), Some("1g.6gb"));
        assert_eq!(chosen(Memory::Mib(20480), 0).as_deref(), Some("3g.20gb"));
        assert_eq!(chosen(Memory::Mib(20481), 0).as_deref(), Some("6g.40gb"));
        assert_eq!(chosen(Memory::Mib(0), 18).as_deref(), Some("3g.20gb"));
        assert_eq!(chosen(Memory::Mib(6), 51).as_deref(), Some("6g.40gb"));
        let (req, _) = node()
            .resolve(&GpuRequest {
                count: 1,
                memory: Memory::Slices(1),
                cores: 0,
            })
            .expect("1 slice");
        assert_eq!(req.memory, Memory::Mib(6144));
        assert_eq!(req.cores, 17);
    }

    #[test]
    fn a_four_field_grant_reads_back_as_its_profile() {
        assert_eq!(node().taken(20480, 50).map(|p| p.slices), Some(3));
        assert_eq!(node().taken(20480, 49), None);
    }
}
