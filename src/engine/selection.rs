//! Which GPUs a pod accepts: model and UUID selection, NUMA binding.
//!
//! Models match by whole words: a value matches a model when its words
//! (split on space, `-` and `_`, case-insensitive) appear among the model's
//! words contiguously and in order. `A100` and `A100-SXM4` match
//! `NVIDIA A100-SXM4-40GB`; `A10` does not (HAMi's substring match lets it,
//! HAMi #707). A value containing `*` is a case-insensitive glob over the
//! whole model name.

use crate::devices::KindId;
use crate::hami::mig::MigProfile;

use super::glob::glob_match;
use super::resources::MigAllowlist;

use super::annotations::Annotations;
use super::device::{Gpu, model_words};

/// One value of `nvidia.com/use-gputype` / `nouse-gputype`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelPattern {
    Words(Vec<String>),
    Glob(String),
}

impl ModelPattern {
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        if value.is_empty() {
            return None;
        }
        if value.contains('*') {
            return Some(ModelPattern::Glob(value.to_lowercase()));
        }
        let words = model_words(value);
        (!words.is_empty()).then_some(ModelPattern::Words(words))
    }

    pub fn matches(&self, gpu: &Gpu) -> bool {
        match self {
            ModelPattern::Words(words) => gpu
                .model_words
                .windows(words.len())
                .any(|w| w == words.as_slice()),
            ModelPattern::Glob(glob) => glob_match(glob, &gpu.model.to_lowercase()),
        }
    }
}

/// A pod's constraints on which GPUs it may use, from its annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub use_models: Vec<ModelPattern>,
    pub avoid_models: Vec<ModelPattern>,
    pub use_uuids: Vec<String>,
    pub avoid_uuids: Vec<String>,
    /// All GPUs of a container on one NUMA node.
    pub numa_bind: bool,
    /// `nvidia.com/vgpu-mode`: only GPUs whose device mode is a part of
    /// it (HAMi v2.10's rule, `strings.Contains(annotation, mode)`, so
    /// `hami-core,mig` takes both; a GPU registered without a mode is
    /// `hami-core`).
    pub mode: Option<String>,
    /// The kind of device the pod asks for: no other kind is accepted.
    pub kind: KindId,
    /// The kind's placement rules, copied from it once per plan: the fit
    /// reads them for every node, and reading the kind there cost more.
    pub rules: KindRules,
    /// The mode of a device registered without one, when not the kind's
    /// default (config `vnpus.hamiVnpuCore`: unmarked Ascend nodes split
    /// softly); set at the edge from the config.
    pub unmarked_mode: Option<&'static str>,
    /// The config's `migProfileAllowlist` (`None`: every registered
    /// profile); set at the edge from the config.
    pub mig_allowlist: Option<MigAllowlist>,
    /// The pod's app class and sharing policy, for a kind with tenancy
    /// rules (`super::tenancy`).
    pub tenancy: super::tenancy::Tenancy,
}

/// What a kind adds to the fit of a container (hami-vendors.md 2.5, 8.5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindRules {
    /// How its devices must sit together.
    pub grouping: crate::devices::Grouping,
    /// A device holds one template size at a time.
    pub one_size: bool,
    /// Cores are bits of a mask (`engine::core_masks`).
    pub core_masks: bool,
    /// Cores are compute units, asked as a percent (AMD, 11.5).
    pub compute_units: bool,
    /// Every container takes the devices the first one took (Mthreads,
    /// 7.5).
    pub same_devices: bool,
    /// A container takes a profile of the node's (Enflame DRS, 9.5;
    /// `super::profiles`).
    pub profiles: bool,
    /// Pods of one class per device (Metax sGPU, 5.5; `super::tenancy`).
    pub tenancy: bool,
    /// Any of the rules above but the grouping: the fit's one test of
    /// whether its out-of-line steps run (`fit::after_loop`).
    pub after_loop: bool,
}

impl KindRules {
    pub fn of(kind: KindId) -> Self {
        let kind = kind.kind();
        KindRules {
            grouping: kind.grouping,
            one_size: kind.templates.is_some_and(|t| t.one_template_per_device),
            core_masks: kind.core_masks,
            compute_units: kind.compute_units,
            same_devices: kind.same_devices,
            profiles: kind.slice_profiles,
            tenancy: kind.tenancy.is_some(),
            after_loop: kind.templates.is_some_and(|t| t.one_template_per_device)
                || kind.core_masks
                || kind.compute_units
                || kind.same_devices
                || kind.slice_profiles
                || kind.tenancy.is_some(),
        }
    }
}

/// An annotation value that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: {problem}")]
pub struct SelectionError {
    pub annotation: &'static str,
    pub problem: String,
}

fn comma_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

impl Selection {
    /// Reads a pod's annotations that select devices of `kind`.
    pub fn from_annotations(
        kind: KindId,
        annotations: &impl Annotations,
    ) -> Result<Self, SelectionError> {
        let id = kind;
        let kind = kind.kind();
        let keys = &kind.selection;
        let get = |k: &str| annotations.annotation(k).unwrap_or("");
        let models = |k: &str| -> Vec<ModelPattern> {
            comma_list(get(k)).filter_map(ModelPattern::parse).collect()
        };
        let uuids = |k: &str| -> Vec<String> { comma_list(get(k)).map(str::to_string).collect() };
        // Go's strconv.ParseBool, as HAMi reads it, plus any letter case.
        let numa_bind = match annotations.annotation(keys.numa_bind).map(str::trim) {
            None | Some("") => false,
            Some("1" | "t" | "T") => true,
            Some("0" | "f" | "F") => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                return Err(SelectionError {
                    annotation: keys.numa_bind,
                    problem: format!("{v:?} is not a boolean: allowed \"true\" or \"false\""),
                });
            }
        };
        let mode = match annotations.annotation(keys.mode).map(str::trim) {
            None | Some("") => None,
            Some(v) if kind.mode_names().any(|m| v.contains(m)) => Some(v.to_string()),
            Some(v) => {
                // HAMi admits such a pod and places it on no GPU.
                return Err(SelectionError {
                    annotation: keys.mode,
                    problem: format!(
                        "{v:?} names no device mode, so no GPU would take the pod (a GPU is taken \
                         when its mode is a part of the value): allowed {}, or several \
                         separated by commas",
                        kind.mode_names().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        };
        let tenancy = match kind.tenancy {
            None => super::tenancy::Tenancy::default(),
            Some(keys) => {
                super::tenancy::Tenancy::parse(keys, annotations).map_err(|e| SelectionError {
                    annotation: e.annotation,
                    problem: e.problem,
                })?
            }
        };
        Ok(Selection {
            kind: id,
            rules: KindRules::of(id),
            tenancy,
            unmarked_mode: None,
            mig_allowlist: None,
            mode,
            use_models: models(keys.use_type),
            avoid_models: models(keys.nouse_type),
            use_uuids: uuids(keys.use_uuid),
            avoid_uuids: uuids(keys.nouse_uuid),
            numa_bind,
        })
    }

    /// Whether a pod of `kind` taking whole devices asks to prefer nodes by
    /// their links (`devices::NodePreference::Tenants`): its annotation, a
    /// boolean in Go's forms; `None` when it does not say.
    pub fn links_of(
        kind: KindId,
        annotations: &impl Annotations,
    ) -> Result<Option<bool>, SelectionError> {
        let crate::devices::NodePreference::Tenants { links: key } = kind.kind().node_preference
        else {
            return Ok(None);
        };
        match annotations.annotation(key).map(str::trim) {
            None | Some("") => Ok(None),
            Some(v) => super::resources::parse_bool(v)
                .map(Some)
                .ok_or_else(|| SelectionError {
                    annotation: key,
                    problem: format!("{v:?} is not a boolean: allowed \"true\" or \"false\""),
                }),
        }
    }

    /// The model (and mode) check: `CardTypeMismatch` when false. Runs for
    /// every GPU of every candidate node: a pod that names no model and no
    /// mode (most) costs two compares of the GPU's precomputed fields.
    #[inline(always)]
    pub fn accepts_model(&self, gpu: &Gpu) -> bool {
        gpu.is_shareable_mode()
            && gpu.kind == self.kind
            && ((self.mode.is_none() && self.use_models.is_empty() && self.avoid_models.is_empty())
                || self.accepts_model_named(gpu))
    }

    /// The model and mode check for a pod that names one.
    #[inline(never)]
    fn accepts_model_named(&self, gpu: &Gpu) -> bool {
        self.mode.as_deref().is_none_or(|m| {
            m.contains(match self.unmarked_mode {
                Some(unmarked) if gpu.mode().is_empty() => unmarked,
                _ => gpu.mode_or_default(),
            })
        }) && (self.use_models.is_empty() || self.use_models.iter().any(|p| p.matches(gpu)))
            && !self.avoid_models.iter().any(|p| p.matches(gpu))
    }

    /// Whether the pod may get an instance of `profile` on `gpu`
    /// (`migProfileAllowlist`).
    pub fn allows_profile(&self, gpu: &Gpu, profile: &str) -> bool {
        self.mig_allowlist
            .as_ref()
            .is_none_or(|a| a.allows(&gpu.model, profile))
    }

    /// The MIG profiles of `gpu` (with their placements' masks) that hold
    /// `mem` MiB and that the pod may get, in HAMi's order (least memory,
    /// then fewest slices).
    pub fn mig_profiles_holding<'a>(
        &'a self,
        gpu: &'a Gpu,
        mem: u64,
    ) -> impl Iterator<Item = &'a (MigProfile, Vec<u16>)> + 'a {
        gpu.mig_profiles().iter().filter(move |(p, _)| {
            u64::from(p.memory_mib) >= mem && self.allows_profile(gpu, &p.name)
        })
    }

    /// The UUID check: `CardUuidMismatch` when false.
    #[inline(always)]
    pub fn accepts_uuid(&self, gpu: &Gpu) -> bool {
        (self.use_uuids.is_empty() && self.avoid_uuids.is_empty()) || self.accepts_uuid_named(gpu)
    }

    /// The UUID check for a pod that names UUIDs.
    #[inline(never)]
    fn accepts_uuid_named(&self, gpu: &Gpu) -> bool {
        (self.use_uuids.is_empty() || self.use_uuids.contains(&gpu.uuid))
            && !self.avoid_uuids.contains(&gpu.uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::nvidia as keys;
    use crate::engine::device::Usage;

    /// HAMi v2.10's mode filter (`pkg/device/nvidia/device.go:496`,
    /// `strings.Contains(annotation, d.Mode)`): the device's mode must be
    /// a part of `nvidia.com/vgpu-mode`, so `hami-core,mig` takes both and
    /// `core` takes none; without the annotation any mode gpugate shares
    /// fits (`mps` behaves as `hami-core`; a GPU registered without a mode
    /// is `hami-core`).
    #[test]
    fn vgpu_mode_is_hamis_substring_rule() {
        let gpu = |mode: &str| {
            let mut g = Gpu::new("GPU-0", 0, "NVIDIA A100", Usage::default());
            g.set_mode(mode, Vec::new());
            g
        };
        let selection = |mode: Option<&str>| {
            let annotations: std::collections::BTreeMap<String, String> = mode
                .map(|m| (keys::VGPU_MODE.to_string(), m.to_string()))
                .into_iter()
                .collect();
            Selection::from_annotations(KindId::NVIDIA, &annotations).unwrap()
        };
        let fits = |mode: Option<&str>, device: &str| selection(mode).accepts_model(&gpu(device));
        for device in ["hami-core", "", "mps"] {
            assert!(fits(None, device), "no annotation, {device:?}");
        }
        assert!(fits(Some("hami-core"), "hami-core") && fits(Some("hami-core"), ""));
        assert!(fits(Some("mps"), "mps") && !fits(Some("mps"), "hami-core"));
        assert!(fits(Some("hami-core,mps"), "mps") && fits(Some("hami-core,mps"), "hami-core"));
        // A MIG GPU without a usable profile is not shared: nothing fits.
        assert!(!fits(Some("mig"), "hami-core") && !fits(Some("mig"), "mig"));
        assert!(!fits(None, "mig"));
        // Values that name no mode: HAMi places the pod nowhere; gpugate
        // refuses them, with the modes there are.
        for bad in ["cuda", "core", "hami", "mi"] {
            let a: std::collections::BTreeMap<String, String> =
                [(keys::VGPU_MODE.to_string(), bad.to_string())].into();
            let e = Selection::from_annotations(KindId::NVIDIA, &a).unwrap_err();
            assert!(e.problem.contains("names no device mode"), "{bad}: {e:?}");
        }
    }
    use std::collections::BTreeMap;

    fn gpu(model: &str) -> Gpu {
        Gpu::new("GPU-0", 0, model, Usage::default())
    }

    fn matches(value: &str, model: &str) -> bool {
        ModelPattern::parse(value).unwrap().matches(&gpu(model))
    }

    /// (value, model, whether the value selects the model).
    fn selects(cases: &[(&str, &str, bool)]) {
        for (value, model, want) in cases {
            assert_eq!(matches(value, model), *want, "{value:?} on {model:?}");
        }
    }

    /// Whole words, in order and contiguous; `*` makes a glob over the
    /// whole name instead.
    #[test]
    fn model_matching_by_whole_words_or_glob() {
        let a100 = "NVIDIA A100-SXM4-40GB";
        let v100 = "NVIDIA-Tesla V100-PCIE-32GB";
        selects(&[
            ("A100", a100, true),
            ("a100", a100, true),
            ("A100-SXM4", a100, true),
            ("A100 SXM4", a100, true),
            ("sxm4_40gb", a100, true),
            ("A10", a100, false),
            ("SXM4-A100", a100, false),
            ("A100-40GB", a100, false),
            ("A10", "NVIDIA A10", true),
            ("A100", "NVIDIA A10", false),
            ("V100", v100, true),
            ("Tesla", v100, true),
            // Globs.
            ("*A100*", a100, true),
            ("nvidia a100*", a100, true),
            ("*40GB", a100, true),
            ("*", a100, true),
            ("A100*", a100, false),
            ("*80GB", a100, false),
            // A glob is a substring match by choice.
            ("*A10*", a100, true),
            ("NVIDIA*SXM4*GB", a100, true),
            ("NVIDIA*PCIE*", a100, false),
        ]);
    }

    #[test]
    fn annotations_to_selection() {
        let mut a = BTreeMap::new();
        a.insert(keys::USE_GPU_TYPE.to_string(), "A100, ,H100".to_string());
        a.insert(
            keys::NOUSE_GPU_UUID.to_string(),
            " GPU-1 ,GPU-2".to_string(),
        );
        a.insert(keys::NUMA_BIND.to_string(), "True".to_string());
        let s = Selection::from_annotations(KindId::NVIDIA, &a).unwrap();
        assert_eq!(s.use_models.len(), 2);
        assert_eq!(s.avoid_uuids, vec!["GPU-1", "GPU-2"]);
        assert!(s.numa_bind);
        assert!(s.accepts_model(&gpu("NVIDIA H100 80GB HBM3")));
        assert!(!s.accepts_model(&gpu("NVIDIA A10")));
        let mut g = gpu("NVIDIA A100");
        g.uuid = "GPU-2".into();
        assert!(!s.accepts_uuid(&g));
        g.set_mode("mig", Vec::new());
        assert!(!s.accepts_model(&g));

        for (v, want) in [
            ("1", true),
            ("t", true),
            ("FALSE", false),
            ("0", false),
            ("", false),
        ] {
            a.insert(keys::NUMA_BIND.to_string(), v.to_string());
            assert_eq!(
                Selection::from_annotations(KindId::NVIDIA, &a)
                    .unwrap()
                    .numa_bind,
                want,
                "{v}"
            );
        }
        a.insert(keys::NUMA_BIND.to_string(), "yes".to_string());
        let e = Selection::from_annotations(KindId::NVIDIA, &a).unwrap_err();
        assert_eq!(e.annotation, keys::NUMA_BIND);
    }

    proptest::proptest! {
        #[test]
        fn glob_never_panics(p in "[a-c*]{0,8}", t in "[a-c]{0,8}") {
            let _ = glob_match(&p, &t);
        }

        #[test]
        fn glob_without_star_is_equality(t in "[a-c]{0,6}") {
            proptest::prop_assert!(glob_match(&t, &t));
            let longer = format!("{}x", t);
            proptest::prop_assert!(!glob_match(&longer, &t));
        }
    }
}
