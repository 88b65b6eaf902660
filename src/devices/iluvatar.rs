//! Iluvatar GPUs as HAMi v2.10 schedules them (hami-vendors.md section 6):
//! one kind per chip of HAMi's chart (MR-V100, MR-V50, BI-V150, BI-V100,
//! the `iluvatars` section), each registered in HAMi's legacy text form
//! under `hami.io/node-<commonWord>-register`, shared by slices (the shared
//! slice-fit loop, 1.11) with memory in 256 MiB units, written to the pod
//! as `hami.io/<commonWord>-devices-to-allocate` and `-allocated` under the
//! chip's common word, behind HAMi's node lock. HAMi's webhook gives a
//! container of several GPUs 100 cores per GPU (exclusive GPUs, read back
//! clamped to 100) and the container's name in `SOL_CONTINER_NAME` (6.4).

use super::{
    ConfigDefaults, DeviceKind, NO_RESOURCES, NO_SELECTION, PodLists, RuleEdit, RuleInput,
    RuleResource, SelectionKeys, VENDOR_DEFAULTS,
};

/// The environment variable with the container's name, as HAMi spells it
/// (6.4: the misspelling is the plugin's).
pub const CONTAINER_NAME_ENV: &str = "SOL_CONTINER_NAME";
/// MiB per unit of a chip's memory resource (6.1).
pub const MEMORY_UNIT_MIB: u32 = 256;

macro_rules! iluvatar_chip {
    ($static:ident, $cw:literal) => {
        #[doc = concat!("Iluvatar ", $cw, " GPUs.")]
        pub static $static: DeviceKind = DeviceKind {
            name: $cw,
            vendor: $cw,
            register_key: concat!("hami.io/node-", $cw, "-register"),
            selection: SelectionKeys {
                use_uuid: concat!("hami.io/use-", $cw, "-uuid"),
                nouse_uuid: concat!("hami.io/no-use-", $cw, "-uuid"),
                ..NO_SELECTION
            },
            noun: concat!("Iluvatar ", $cw, " GPU"),
            pod_lists: PodLists {
                to_allocate: concat!("hami.io/", $cw, "-devices-to-allocate"),
                allocated: concat!("hami.io/", $cw, "-devices-allocated"),
            },
            // The chart's plugin registers `type` = the common word, so
            // HAMi pads the list with one entry per container (1.5, the
            // default).
            config: ConfigDefaults {
                resource_count_name: concat!("iluvatar.ai/", $cw, "-vgpu"),
                resource_memory_name: concat!("iluvatar.ai/", $cw, ".vMem"),
                resource_core_name: concat!("iluvatar.ai/", $cw, ".vCore"),
                // HAMi's request: cores 0 unless given (6.1).
                memory_factor: MEMORY_UNIT_MIB,
                ..NO_RESOURCES
            },
            cores_clamped: true,
            webhook_rule: Some(cores_and_name),
            ..VENDOR_DEFAULTS
        };
    };
}

iluvatar_chip!(MR_V100, "MR-V100");
iluvatar_chip!(MR_V50, "MR-V50");
iluvatar_chip!(BI_V150, "BI-V150");
iluvatar_chip!(BI_V100, "BI-V100");

/// The chips of HAMi's chart, in its order (the `iluvatars` section).
pub static CHIPS: [&DeviceKind; 4] = [&MR_V100, &MR_V50, &BI_V150, &BI_V100];

/// HAMi's webhook for a container whose limits give the count (6.4): more
/// than one GPU takes 100 cores of each (`count × 100`, which the fit
/// clamps to 100 per GPU: whole GPUs); the container's name goes into
/// `SOL_CONTINER_NAME` unless the container sets it.
fn cores_and_name(input: &RuleInput<'_>) -> Result<Vec<RuleEdit>, String> {
    let Some(count) = input.count_in_limits else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    if count > 1 {
        out.push(RuleEdit::Limit(
            RuleResource::Cores,
            count.saturating_mul(100),
        ));
    }
    if !input.container.is_empty() {
        out.push(RuleEdit::Env(
            CONTAINER_NAME_ENV,
            input.container.to_string(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_gpus_take_100_cores_each_and_the_name_is_written() {
        let input = |count| RuleInput {
            container: "main",
            pod_annotation: &|_| None,
            count,
            count_in_limits: count,
            memory: None,
            cores: None,
        };
        assert_eq!(
            cores_and_name(&input(Some(3))).unwrap(),
            [
                RuleEdit::Limit(RuleResource::Cores, 300),
                RuleEdit::Env(CONTAINER_NAME_ENV, "main".into())
            ]
        );
        assert_eq!(
            cores_and_name(&input(Some(1))).unwrap(),
            [RuleEdit::Env(CONTAINER_NAME_ENV, "main".into())]
        );
        // A count in requests only: HAMi's webhook does not find it (6.4).
        assert!(cores_and_name(&input(None)).unwrap().is_empty());
    }
}
