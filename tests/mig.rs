//! MIG GPUs as HAMi v2.10 places pods on them (shared/hami-compat.md,
//! "MIG in v2.10"): the profile choice against a brute-force oracle, HAMi's
//! documented rules one by one, and the annotations a bind writes read
//! back as HAMi's device plugin completes them.

use gpugate::cluster::pod_allocation;
use gpugate::cluster::pod_annotations::BindingAnnotations;
use gpugate::engine::request::ContainerRequest;
use gpugate::engine::{
    ClusterState, ContainerKind, Gpu, GpuPolicy, GpuRequest, Memory, Node, NodePolicy, PodPlan,
    PodRequest, Usage,
};
use gpugate::hami::mig::{MigPlacement, MigProfile};
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;

mod support {
    pub mod mig_snapshot;
}
use serde_json::{Value, json};
use support::mig_snapshot::{holder, mig_node};

/// A profile with its placements (`start`s of `size` slices).
fn profile(name: &str, memory_mib: u32, cores: u32, size: u32, starts: &[u32]) -> MigProfile {
    MigProfile {
        name: name.into(),
        memory_mib,
        cores,
        slice_count: size,
        placements: starts
            .iter()
            .map(|&start| MigPlacement { start, size })
            .collect(),
    }
}

/// An A100-40GB's profiles as the driver reports them (NVIDIA's MIG user
/// guide: memory in MiB, placements in memory slices of 8), in the order
/// HAMi's device plugin lists them.
fn a100_40gb() -> Vec<MigProfile> {
    vec![
        profile("1g.5gb", 4864, 15, 1, &[0, 1, 2, 3, 4, 5, 6]),
        profile("1g.10gb", 9856, 15, 2, &[0, 2, 4, 6]),
        profile("2g.10gb", 9984, 29, 2, &[0, 2, 4]),
        profile("3g.20gb", 19968, 43, 4, &[0, 4]),
        profile("4g.20gb", 19968, 58, 4, &[0]),
        profile("7g.40gb", 40192, 100, 8, &[0]),
    ]
}

/// An H100-80GB's profiles.
fn h100_80gb() -> Vec<MigProfile> {
    vec![
        profile("1g.10gb", 9856, 15, 1, &[0, 1, 2, 3, 4, 5, 6]),
        profile("1g.20gb", 19968, 15, 2, &[0, 2, 4, 6]),
        profile("2g.20gb", 20096, 29, 2, &[0, 2, 4]),
        profile("3g.40gb", 40192, 43, 4, &[0, 4]),
        profile("4g.40gb", 40192, 58, 4, &[0]),
        profile("7g.80gb", 80384, 100, 8, &[0]),
    ]
}

fn mig_gpu(uuid: &str, devmem: u64, profiles: Vec<MigProfile>) -> Gpu {
    let count = u32::try_from(
        profiles
            .iter()
            .map(|p| p.placements.len())
            .max()
            .unwrap_or(0),
    )
    .unwrap();
    let mut g = Gpu::new(
        uuid,
        0,
        "NVIDIA A100-SXM4-40GB",
        Usage {
            slots: count,
            mem_mib: u32::try_from(devmem).unwrap(),
            cores: 100,
            ..Usage::default()
        },
    );
    g.set_mode("mig", profiles);
    g
}

fn plan(mem: u64, count: u32) -> PodPlan {
    PodPlan::new(
        PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers: vec![ContainerRequest {
                name: "main".into(),
                kind: ContainerKind::App,
                gpu: Some(GpuRequest {
                    count,
                    memory: Memory::Mib(mem),
                    cores: 0,
                }),
            }],
        },
        NodePolicy::Binpack,
        GpuPolicy::Binpack,
    )
}

/// One node `n` with one MIG GPU `GPU-a`, and pods already holding the
/// given instances (profile index, start).
fn state(profiles: &[MigProfile], devmem: u64, held: &[(usize, u32)]) -> ClusterState {
    let mut s = ClusterState::new();
    s.upsert_node(Node::new(
        "n",
        vec![mig_gpu("GPU-a", devmem, profiles.to_vec())],
    ));
    for (i, &(p, start)) in held.iter().enumerate() {
        let pr = &profiles[p];
        let allocation = gpugate::engine::Allocation {
            node: "n".into(),
            containers: vec![vec![gpugate::engine::DeviceGrant {
                uuid: "GPU-a".into(),
                kind: gpugate::devices::KindId::NVIDIA,
                mem_mib: u64::from(pr.memory_mib),
                cores: pr.cores,
                slots: 1,
                unreadable: false,
                device_type: None,
                mig: Some(gpugate::engine::MigInstance {
                    profile: pr.name.clone(),
                    placement: MigPlacement {
                        start,
                        size: pr.slice_count,
                    },
                }),
            }]],
            kinds: vec![],
            numa: None,
            tenancy: Default::default(),
        };
        s.apply(&format!("held-{i}"), allocation).unwrap();
    }
    s
}

/// The oracle: every (profile, placement) that holds `mem` and overlaps
/// none of `held`, the smallest by (memory, slices, list order), any
/// placement of it.
fn oracle(profiles: &[MigProfile], held: &[MigPlacement], mem: u64) -> Option<(usize, Vec<u32>)> {
    let mut fits: Vec<(u32, u32, usize, u32)> = Vec::new();
    for (i, p) in profiles.iter().enumerate() {
        if u64::from(p.memory_mib) < mem {
            continue;
        }
        for pl in &p.placements {
            if held.iter().all(|h| !h.overlaps(pl)) {
                fits.push((p.memory_mib, p.slice_count, i, pl.start));
            }
        }
    }
    let best = fits.iter().map(|f| (f.0, f.1, f.2)).min()?;
    let starts = fits
        .iter()
        .filter(|f| (f.0, f.1, f.2) == best)
        .map(|f| f.3)
        .collect();
    Some((best.2, starts))
}

/// Instances that do not overlap, drawn from a profile table.
fn held_instances(profiles: Vec<MigProfile>) -> impl Strategy<Value = Vec<(usize, u32)>> {
    let options: Vec<(usize, u32)> = profiles
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.placements.iter().map(move |pl| (i, pl.start)))
        .collect();
    proptest::sample::subsequence(options.clone(), 0..=options.len()).prop_map(move |picked| {
        let mut taken: Vec<MigPlacement> = Vec::new();
        let mut out = Vec::new();
        for (i, start) in picked {
            let pl = MigPlacement {
                start,
                size: profiles[i].slice_count,
            };
            if taken.iter().all(|t| !t.overlaps(&pl)) {
                taken.push(pl);
                out.push((i, start));
            }
        }
        out
    })
}

fn check_against_oracle(
    profiles: &[MigProfile],
    devmem: u64,
    held: &[(usize, u32)],
    mem: u64,
) -> Result<(), TestCaseError> {
    let s = state(profiles, devmem, held);
    let placements: Vec<MigPlacement> = held
        .iter()
        .map(|&(p, start)| MigPlacement {
            start,
            size: profiles[p].slice_count,
        })
        .collect();
    let want = oracle(profiles, &placements, mem);
    let got = s.assign(&plan(mem, 1), "n");
    match (want, got) {
        (None, Err(_)) => {}
        (None, Ok(a)) => prop_assert!(false, "placed where nothing holds it: {a:?}"),
        (Some(w), Err(e)) => prop_assert!(false, "refused ({e}) though {w:?} fits"),
        (Some((p, starts)), Ok(a)) => {
            let grant = &a.containers[0][0];
            let mig = grant.mig.as_ref().expect("a MIG grant");
            prop_assert_eq!(&mig.profile, &profiles[p].name, "the smallest that holds");
            prop_assert!(starts.contains(&mig.placement.start), "a free placement");
            prop_assert!(placements.iter().all(|h| !h.overlaps(&mig.placement)));
            prop_assert_eq!(grant.mem_mib, u64::from(profiles[p].memory_mib));
            prop_assert_eq!(grant.cores, profiles[p].cores);
            // Applied, the GPU's slices are the old ones and the new one.
            let mut s = s.clone();
            s.apply("new", a.clone()).unwrap();
            let used = s.node("n").unwrap().usage[0];
            let mask = |pl: &MigPlacement| ((1u16 << pl.size) - 1) << pl.start;
            let want_mask = placements
                .iter()
                .fold(mask(&mig.placement), |m, h| m | mask(h));
            prop_assert_eq!(used.slices, want_mask);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a100_choice_is_the_oracles(held in held_instances(a100_40gb()), mem in 0u64..45_000) {
        check_against_oracle(&a100_40gb(), 40960, &held, mem)?;
    }

    #[test]
    fn h100_choice_is_the_oracles(held in held_instances(h100_80gb()), mem in 0u64..85_000) {
        check_against_oracle(&h100_80gb(), 81920, &held, mem)?;
    }
}

/// HAMi's rules, one by one, on an idle A100-40GB.
#[test]
fn hamis_documented_choices() {
    let s = state(&a100_40gb(), 40960, &[]);
    let chosen = |s: &ClusterState, mem| {
        s.assign(&plan(mem, 1), "n")
            .ok()
            .and_then(|a| a.containers[0][0].mig.clone())
            .map(|m| (m.profile, m.placement.start))
    };
    // 8,000 MiB: 1g.5gb is too small; 1g.10gb (9,856 MiB) is the smallest
    // that holds it; 1g.* placements are tried from the highest start.
    assert_eq!(chosen(&s, 8000), Some(("1g.10gb".to_string(), 6)));
    // Ties in memory go to fewer slices: 3g.20gb and 4g.20gb both have
    // 19,968 MiB; 3g.20gb, highest start first.
    assert_eq!(chosen(&s, 15000), Some(("3g.20gb".to_string(), 4)));
    // Other profiles are tried from the lowest start.
    let two_g = vec![profile("2g.10gb", 9984, 29, 2, &[0, 2, 4])];
    let s2 = state(&two_g, 40960, &[]);
    assert_eq!(chosen(&s2, 9000), Some(("2g.10gb".to_string(), 0)));
    // Every placement of the profiles that hold 9,900 MiB overlaps an
    // instance (3g.20gb on slices 0-3, 1g.5gb on slice 5), though memory
    // is free: CardMigTopologyInfeasible. With the split count used up,
    // HAMi's earlier check answers first.
    let busy = state(&a100_40gb(), 40960, &[(3, 0), (0, 5)]);
    let e = busy.assign(&plan(9900, 1), "n").unwrap_err().to_string();
    assert!(e.contains("CardMigTopologyInfeasible"), "{e}");
    let full = state(&two_g, 40960, &[(0, 0), (0, 2), (0, 4)]);
    let e = full.assign(&plan(9000, 1), "n").unwrap_err().to_string();
    assert!(e.contains("CardTimeSlicingExhausted"), "{e}");
    // A request of the whole GPU's memory (no gpumem: the default is all
    // of it) fits no profile: 7g.40gb has 40,192 of 40,960 MiB.
    assert_eq!(chosen(&s, 40960), None);
    // A percentage is of devmem: 50% of 40,960 MiB is 20,480 MiB, more
    // than 3g.20gb's 19,968, so 7g.40gb.
    let half = PodPlan::new(
        PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers: vec![ContainerRequest {
                name: "main".into(),
                kind: ContainerKind::App,
                gpu: Some(GpuRequest {
                    count: 1,
                    memory: Memory::Percent(50),
                    cores: 0,
                }),
            }],
        },
        NodePolicy::Binpack,
        GpuPolicy::Binpack,
    );
    let a = s.assign(&half, "n").unwrap();
    assert_eq!(a.containers[0][0].mig.as_ref().unwrap().profile, "7g.40gb");
}

/// A GPU in MIG mode without a usable profile is not shared; a GPU whose
/// pod holds a MIG share without its instance (a HAMi pod without its
/// `hami.io/vgpu-mig-allocations`) takes no new instance until that pod
/// is gone, as HAMi marks such a GPU unhealthy.
#[test]
fn unusable_and_inconsistent_mig_gpus_take_nothing() {
    let mut s = ClusterState::new();
    s.upsert_node(Node::new("n", vec![mig_gpu("GPU-a", 40960, Vec::new())]));
    let e = s.assign(&plan(1000, 1), "n").unwrap_err().to_string();
    assert!(e.contains("CardTypeMismatch"), "{e}");
    let mut s = state(&a100_40gb(), 40960, &[]);
    let unknown = gpugate::engine::Allocation {
        node: "n".into(),
        containers: vec![vec![gpugate::engine::DeviceGrant {
            uuid: "GPU-a".into(),
            kind: gpugate::devices::KindId::NVIDIA,
            mem_mib: 4864,
            cores: 15,
            slots: 1,
            unreadable: false,
            device_type: None,
            mig: None,
        }]],
        kinds: vec![],
        numa: None,
        tenancy: Default::default(),
    };
    s.apply("hami-pod", unknown).unwrap();
    let e = s.assign(&plan(1000, 1), "n").unwrap_err().to_string();
    assert!(e.contains("CardNotHealth"), "{e}");
    s.remove("hami-pod");
    assert!(s.assign(&plan(1000, 1), "n").is_ok());
}

/// The other inconsistency HAMi v2.10 marks a device unhealthy for: MIG
/// usage on a `hami-core` GPU (a pod whose MIG entry names a GPU that is
/// not in MIG mode, say after the node was switched back). The GPU takes
/// no new pod until that pod is gone; its memory and cores count.
#[test]
fn mig_usage_on_a_hami_core_gpu_makes_it_take_nothing() {
    let mut s = ClusterState::new();
    s.upsert_node(Node::new(
        "n",
        vec![Gpu::new(
            "GPU-a",
            0,
            "NVIDIA A100-SXM4-40GB",
            Usage {
                slots: 10,
                mem_mib: 40960,
                cores: 100,
                ..Usage::default()
            },
        )],
    ));
    let stale = gpugate::engine::Allocation {
        node: "n".into(),
        containers: vec![vec![gpugate::engine::DeviceGrant {
            uuid: "GPU-a".into(),
            kind: gpugate::devices::KindId::NVIDIA,
            mem_mib: 9984,
            cores: 29,
            slots: 1,
            unreadable: false,
            device_type: None,
            mig: Some(gpugate::engine::MigInstance {
                profile: "2g.10gb".into(),
                placement: MigPlacement { start: 0, size: 2 },
            }),
        }]],
        kinds: vec![],
        numa: None,
        tenancy: Default::default(),
    };
    s.apply("stale-mig-pod", stale).unwrap();
    let e = s.assign(&plan(1000, 1), "n").unwrap_err().to_string();
    assert!(e.contains("CardNotHealth"), "{e}");
    assert!(s.node("n").unwrap().is_inconsistent(0));
    s.remove("stale-mig-pod");
    assert!(!s.node("n").unwrap().is_inconsistent(0));
    assert!(s.assign(&plan(1000, 1), "n").is_ok());
}

/// Two containers of one pod each get an instance of the same GPU, side
/// by side.
#[test]
fn containers_of_one_pod_get_separate_instances() {
    let s = state(&a100_40gb(), 40960, &[]);
    let mut p = plan(4000, 1);
    let second = p.request.containers[0].clone();
    p.request.containers.push(ContainerRequest {
        name: "second".into(),
        ..second
    });
    let a = s.assign(&p, "n").unwrap();
    let first = a.containers[0][0].mig.clone().unwrap();
    let other = a.containers[1][0].mig.clone().unwrap();
    assert_eq!(
        (first.profile.as_str(), other.profile.as_str()),
        ("1g.5gb", "1g.5gb")
    );
    assert!(!first.placement.overlaps(&other.placement));
}

/// What a bind writes for a MIG pod is what HAMi's device plugin reads
/// (`GPU-a,NVIDIA,<profile memory>,<profile cores>:;` and the instance
/// entry), and the pod read back after the plugin filled in the runtime
/// ids holds the same instance: a restart counts it right.
#[test]
fn bind_annotations_round_trip_through_the_device_plugins_completion() {
    let s = state(&a100_40gb(), 40960, &[(0, 6)]);
    let a = s.assign(&plan(8000, 1), "n").unwrap();
    let metadata = BindingAnnotations::of(&a).metadata(1_700_000_000);
    let ann = &metadata["annotations"];
    assert_eq!(
        ann["hami.io/vgpu-devices-allocated"],
        "GPU-a,NVIDIA,9856,15:;"
    );
    let mig: Value =
        serde_json::from_str(ann["hami.io/vgpu-mig-allocations"].as_str().unwrap()).unwrap();
    assert_eq!(
        mig,
        json!([{"containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-a",
                "profile": "1g.10gb", "placement": {"start": 4, "size": 2}}])
    );
    // The device plugin completes the entry (all three ids).
    let mut completed = mig.clone();
    completed[0]["migUUID"] = json!("MIG-1234");
    completed[0]["gpuInstanceID"] = json!(3);
    completed[0]["computeInstanceID"] = json!(0);
    for entry in [mig, completed] {
        let mut annotations = ann.as_object().unwrap().clone();
        annotations.insert(
            "hami.io/vgpu-mig-allocations".into(),
            json!(entry.to_string()),
        );
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "u", "annotations": annotations},
            "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let read = pod_allocation(&pod).unwrap().unwrap();
        assert_eq!(read.containers, a.containers);
        let mut restarted = state(&a100_40gb(), 40960, &[(0, 6)]);
        restarted.apply("u", read).unwrap();
        let mut live = s.clone();
        live.apply("u", a.clone()).unwrap();
        assert_eq!(
            restarted.node("n").unwrap().usage,
            live.node("n").unwrap().usage
        );
    }
    // An entry naming a grant the device list does not have is refused.
    let mut annotations = ann.as_object().unwrap().clone();
    annotations.insert(
        "hami.io/vgpu-mig-allocations".into(),
        json!(r#"[{"containerIndex":0,"deviceIndex":1,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1}}]"#),
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main"}]},
    }))
    .unwrap();
    let e = pod_allocation(&pod).unwrap_err().to_string();
    assert!(e.contains("no grant of GPU-a"), "{e}");
}

/// `migProfileAllowlist` (HAMi v2.10's config, read from gpugate's config
/// and from HAMi's Helm values): only the profiles listed for the GPU's
/// model are handed out, whatever the device plugin registered; a model
/// no entry names gets none. Malformed entries are refused at load with
/// what is wrong (HAMi validates them at start too).
#[test]
fn mig_profile_allowlist_narrows_the_profiles() {
    use gpugate::config::Config;
    let config = Config::from_yaml(
        "nvidia:\n  migProfileAllowlist:\n  - models: [nvidia a100-sxm4-40gb]\n    profiles: [2g.10gb, 3g.20gb]\n",
        "test",
    )
    .unwrap();
    let s = state(&a100_40gb(), 40960, &[]);
    let mut p = plan(4000, 1);
    // Without the list: the smallest profile, 1g.5gb.
    assert_eq!(
        s.assign(&p, "n").unwrap().containers[0][0]
            .mig
            .as_ref()
            .unwrap()
            .profile,
        "1g.5gb"
    );
    p.selection.mig_allowlist = config.nvidia.mig_allowlist();
    let a = s.assign(&p, "n").unwrap();
    assert_eq!(
        a.containers[0][0].mig.as_ref().unwrap().profile,
        "2g.10gb",
        "model matched without regard to case"
    );
    assert_eq!(a.containers[0][0].mem_mib, 9984);

    let other = Config::from_yaml(
        "nvidia:\n  migProfileAllowlist:\n  - models: [\"NVIDIA H100 80GB HBM3\"]\n    profiles: [1g.10gb]\n",
        "test",
    )
    .unwrap();
    p.selection.mig_allowlist = other.nvidia.mig_allowlist();
    let e = s.assign(&p, "n").unwrap_err().to_string();
    assert!(e.contains("CardMigTopologyInfeasible"), "{e}");

    // 3g.20gb and 4g.20gb share memory and a placement (start 0), not
    // cores: with only 4g.20gb allowed, the grant and the instance written
    // are 4g.20gb's, 58 cores.
    let only_4g = Config::from_yaml(
        "nvidia:\n  migProfileAllowlist:\n  - models: [\"NVIDIA A100-SXM4-40GB\"]\n    profiles: [4g.20gb]\n",
        "test",
    )
    .unwrap();
    let mut p = plan(19000, 1);
    p.selection.mig_allowlist = only_4g.nvidia.mig_allowlist();
    let a = s.assign(&p, "n").unwrap();
    let g = &a.containers[0][0];
    assert_eq!(
        (g.mig.as_ref().unwrap().profile.as_str(), g.cores),
        ("4g.20gb", 58)
    );

    for (text, want) in [
        (
            "nvidia:\n  migProfileAllowlist:\n  - models: [x]\n    profiles: [5gb]\n",
            "\"5gb\" is not a MIG profile name",
        ),
        (
            "nvidia:\n  migProfileAllowlist:\n  - models: []\n    profiles: [1g.5gb]\n",
            "migProfileAllowlist[0] names no GPU model",
        ),
        (
            "nvidia:\n  migProfileAllowlist:\n  - model: [x]\n    profiles: [1g.5gb]\n",
            "model",
        ),
    ] {
        let e = Config::from_yaml(text, "test").unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

/// HAMi v2.10 lets one container take several MIG instances of one GPU
/// (PR #2724: `nvidia.com/gpu: 2` on a single A100). gpugate takes
/// separate GPUs when there are enough, and instances of one GPU only when
/// there are not; each instance is chosen as for one GPU on the usage with
/// the ones before it, so none overlap, and the pair writes and reads back
/// as HAMi's device plugin expects (two entries, device indexes 0 and 1).
#[test]
fn one_container_may_take_several_instances_of_one_gpu() {
    let s = state(&a100_40gb(), 40960, &[]);
    let a = s.assign(&plan(4000, 2), "n").unwrap();
    let grants = &a.containers[0];
    assert_eq!(grants.len(), 2, "{a:?}");
    let instances: Vec<(String, u32)> = grants
        .iter()
        .map(|g| {
            assert_eq!(g.uuid, "GPU-a");
            let m = g.mig.as_ref().unwrap();
            (m.profile.clone(), m.placement.start)
        })
        .collect();
    // 1g.5gb from the highest start: 6, then 5.
    assert_eq!(
        instances,
        [("1g.5gb".to_string(), 6), ("1g.5gb".to_string(), 5)]
    );
    let mut held = s.clone();
    held.apply("pair", a.clone()).unwrap();
    let used = held.node("n").unwrap().usage[0];
    assert_eq!(
        (used.slots, used.mem_mib, used.slices),
        (2, 2 * 4864, 0b0110_0000)
    );

    // Written and read back as one container with two entries.
    let metadata = BindingAnnotations::of(&a).metadata(1_700_000_000);
    let ann = &metadata["annotations"];
    assert_eq!(
        ann["hami.io/vgpu-devices-allocated"],
        "GPU-a,NVIDIA,4864,15:GPU-a,NVIDIA,4864,15:;"
    );
    let mig: Value =
        serde_json::from_str(ann["hami.io/vgpu-mig-allocations"].as_str().unwrap()).unwrap();
    assert_eq!(mig[0]["deviceIndex"], 0);
    assert_eq!(mig[1]["deviceIndex"], 1);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ml", "uid": "u", "annotations": ann},
        "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }))
    .unwrap();
    assert_eq!(
        pod_allocation(&pod).unwrap().unwrap().containers,
        a.containers
    );

    // Two MIG GPUs: one instance on each.
    let mut two = ClusterState::new();
    two.upsert_node(Node::new(
        "n",
        vec![
            mig_gpu("GPU-a", 40960, a100_40gb()),
            mig_gpu("GPU-b", 40960, a100_40gb()),
        ],
    ));
    let a = two.assign(&plan(4000, 2), "n").unwrap();
    let uuids: Vec<&str> = a.containers[0].iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(uuids.len(), 2);
    assert_ne!(uuids[0], uuids[1], "separate GPUs first: {uuids:?}");

    // More instances than the GPU has room for: refused.
    let e = s.assign(&plan(19000, 3), "n").unwrap_err().to_string();
    assert!(e.contains("AllocatedCardsInsufficientRequest"), "{e}");
}

/// `/preempt` (and explain, and gpugate's own preemption) on a MIG GPU: a
/// victim frees its instance, and only victims whose instances stand in
/// the way are chosen. A 15,000 MiB pod needs 3g.20gb at slices 0-3 or
/// 4-7; a priority-1000 pod holds slice 4, so 0-3 it is: of the two
/// priority-10 pods (slices 0 and 5), only the one on slice 0 goes.
#[test]
fn preemption_frees_the_instances_in_the_way() {
    let yaml = format!(
        "{}{}{}{}",
        mig_node(&[0, 4, 5]),
        holder("low-0", 0, 10),
        holder("high-4", 4, 1000),
        holder("low-5", 5, 10),
    );
    let (view, report) = gpugate::cluster::Snapshot::from_yaml(&yaml, "inline")
        .unwrap()
        .to_view();
    assert!(report.unaccounted_pods.is_empty(), "{report:?}");
    let pending: Pod = serde_json::from_value(json!({
        "metadata": {"name": "big", "namespace": "ml"},
        "spec": {"priority": 500, "containers": [{"name": "main", "resources": {"limits":
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "15000"}}}]},
    }))
    .unwrap();
    let plan =
        gpugate::cluster::convert::pod_plan(&pending, &gpugate::config::Config::default()).unwrap();
    assert!(
        view.state().assign(&plan, "mig").is_err(),
        "no free 3g.20gb now"
    );
    let victims = gpugate::placement::victims::gpu_victims(&view, &plan, "mig", &[], 500)
        .expect("victims below 500 make room");
    assert_eq!(victims.pods, ["u-low-0"]);
    // Below priority 10 nobody may go.
    assert_eq!(
        gpugate::placement::victims::gpu_victims(&view, &plan, "mig", &[], 10),
        None
    );
}

/// Node `n` with two empty A100-40GB in MIG mode, `GPU-a` and `GPU-b`.
fn two_a100s() -> ClusterState {
    let mut s = ClusterState::new();
    s.upsert_node(Node::new(
        "n",
        vec![
            mig_gpu("GPU-a", 40960, a100_40gb()),
            mig_gpu("GPU-b", 40960, a100_40gb()),
        ],
    ));
    s
}

/// An app container asking `count` GPUs of `mem` MiB each.
fn app(name: &str, count: u32, mem: u64) -> ContainerRequest {
    ContainerRequest {
        name: name.into(),
        kind: ContainerKind::App,
        gpu: Some(GpuRequest {
            count,
            memory: Memory::Mib(mem),
            cores: 0,
        }),
    }
}

/// Two empty A100-40GB in MIG mode; container `a` asks 2 × 4,000 MiB and
/// `b` 1 × 30,000 MiB. HAMi v2.10's `Fit` takes instances of a MIG GPU
/// until the container has enough (`pkg/device/nvidia/device.go:846`, `if
/// dev.Mode == "mig" { i++ }` visits the GPU again), so `a` gets two
/// 1g.5gb of one GPU and `b` the other's 7g.40gb. gpugate's first pass
/// gives `a` one instance of each GPU; the joint search then stacks them,
/// in either container order (before, it answered `2/2
/// CardMigTopologyInfeasible` in this one).
#[test]
fn the_joint_search_stacks_instances_on_one_gpu_as_hami_does() {
    let s = two_a100s();
    for order in [["a", "b"], ["b", "a"]] {
        let containers = order
            .iter()
            .map(|&c| match c {
                "a" => app("a", 2, 4000),
                _ => app("b", 1, 30000),
            })
            .collect();
        let plan = PodPlan::new(
            PodRequest {
                device_kind: Default::default(),
                also: Vec::new(),
                containers,
            },
            NodePolicy::Binpack,
            GpuPolicy::Spread,
        );
        let a = s
            .assign(&plan, "n")
            .unwrap_or_else(|e| panic!("{order:?}: {e}"));
        let by_name = |name: &str| {
            let i = order.iter().position(|&c| c == name).unwrap();
            a.containers[i]
                .iter()
                .map(|g| (g.uuid.clone(), g.mig.as_ref().unwrap().profile.clone()))
                .collect::<Vec<_>>()
        };
        let (pair, big) = (by_name("a"), by_name("b"));
        assert_eq!(pair.len(), 2, "{order:?}: {pair:?}");
        assert_eq!(pair[0].0, pair[1].0, "{order:?}: a's instances on one GPU");
        assert!(pair.iter().all(|(_, p)| p == "1g.5gb"), "{pair:?}");
        assert_eq!(big.len(), 1);
        assert_ne!(big[0].0, pair[0].0, "{order:?}");
        assert_eq!(big[0].1, "7g.40gb");
        let mut held = s.clone();
        held.apply("pod", a).unwrap();
    }
}

/// HAMi's device plugin matches `migProfileAllowlist` models by substring
/// (`pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go:282`,
/// `containsModel`: `strings.Contains(target, model)`), and HAMi's chart
/// names `A100-SXM4-40GB`, not the driver's `NVIDIA A100-SXM4-40GB`. A
/// device config copied from HAMi's chart allows the profiles it names
/// (before, a whole-name match refused every GPU: `CardMigTopologyInfeasible`).
#[test]
fn allowlist_models_match_by_substring_as_hamis_plugin_does() {
    use gpugate::config::Config;
    let s = state(&a100_40gb(), 40960, &[]);
    for models in ["[A100-SXM4-40GB]", "[a100]", "[\"NVIDIA A100-SXM4-40GB\"]"] {
        let config = Config::from_yaml(
            &format!(
                "nvidia:\n  migProfileAllowlist:\n  - models: {models}\n    profiles: [3g.20gb]\n"
            ),
            "test",
        )
        .unwrap();
        let mut p = plan(4000, 1);
        p.selection.mig_allowlist = config.nvidia.mig_allowlist();
        let a = s
            .assign(&p, "n")
            .unwrap_or_else(|e| panic!("{models}: {e}"));
        assert_eq!(a.containers[0][0].mig.as_ref().unwrap().profile, "3g.20gb");
    }
    let other = Config::from_yaml(
        "nvidia:\n  migProfileAllowlist:\n  - models: [H100]\n    profiles: [3g.20gb]\n",
        "test",
    )
    .unwrap();
    let mut p = plan(4000, 1);
    p.selection.mig_allowlist = other.nvidia.mig_allowlist();
    let e = s.assign(&p, "n").unwrap_err().to_string();
    assert!(e.contains("CardMigTopologyInfeasible"), "{e}");
}

/// HAMi v2.10 takes a GPU when its mode is a part of the pod's
/// `nvidia.com/vgpu-mode` (`pkg/device/nvidia/device.go:496`,
/// `strings.Contains(mode, d.Mode)`): `hami-core,mig` admits a MIG GPU and
/// a hami-core one; `core` admits none (gpugate refuses it with a message;
/// before, it refused `hami-core,mig` and placed `core`).
#[test]
fn vgpu_mode_lists_admit_every_mode_they_name() {
    use gpugate::engine::selection::Selection;
    let mut s = ClusterState::new();
    let mut core = Gpu::new(
        "GPU-core",
        1,
        "NVIDIA Tesla T4",
        Usage {
            slots: 10,
            mem_mib: 16384,
            cores: 100,
            ..Usage::default()
        },
    );
    core.set_mode("hami-core", Vec::new());
    s.upsert_node(Node::new(
        "mig-node",
        vec![mig_gpu("GPU-a", 40960, a100_40gb())],
    ));
    s.upsert_node(Node::new("core-node", vec![core]));
    let with_mode = |mode: &str| {
        let annotations: std::collections::BTreeMap<String, String> =
            [("nvidia.com/vgpu-mode".to_string(), mode.to_string())].into();
        let mut p = plan(4000, 1);
        p.selection = Selection::from_annotations(Default::default(), &annotations).unwrap();
        p
    };
    let both = with_mode("hami-core,mig");
    assert!(s.assign(&both, "mig-node").is_ok());
    assert!(s.assign(&both, "core-node").is_ok());
    let mig = with_mode("mig");
    assert!(s.assign(&mig, "mig-node").is_ok());
    assert!(s.assign(&mig, "core-node").is_err());
    let annotations: std::collections::BTreeMap<String, String> =
        [("nvidia.com/vgpu-mode".to_string(), "core".to_string())].into();
    assert!(Selection::from_annotations(Default::default(), &annotations).is_err());
}

/// The joint search backtracks over stacked instances: two empty-ish
/// A100s, GPU-b holding a 1g.5gb at slice 0 (no room for 7g.40gb). `a` (2 ×
/// 4,000 MiB) stacked on GPU-a first leaves `d` (30,000 MiB) nowhere; the
/// search must take those instances back whole (GPU-a empty again) and
/// stack `a` on GPU-b, so `d` gets GPU-a's 7g.40gb.
#[test]
fn the_joint_search_takes_stacked_instances_back_whole() {
    let mut s = two_a100s();
    let one_g = &a100_40gb()[0];
    let held = gpugate::engine::Allocation {
        node: "n".into(),
        containers: vec![vec![gpugate::engine::DeviceGrant {
            uuid: "GPU-b".into(),
            kind: gpugate::devices::KindId::NVIDIA,
            mem_mib: u64::from(one_g.memory_mib),
            cores: one_g.cores,
            slots: 1,
            unreadable: false,
            device_type: None,
            mig: Some(gpugate::engine::MigInstance {
                profile: one_g.name.clone(),
                placement: MigPlacement { start: 0, size: 1 },
            }),
        }]],
        kinds: vec![],
        numa: None,
        tenancy: Default::default(),
    };
    s.apply("held", held).unwrap();
    let plan = PodPlan::new(
        PodRequest {
            device_kind: Default::default(),
            also: Vec::new(),
            containers: vec![app("a", 2, 4000), app("d", 1, 30000)],
        },
        NodePolicy::Binpack,
        GpuPolicy::Spread,
    );
    let a = s.assign(&plan, "n").unwrap();
    let on = |i: usize| -> Vec<(&str, &str)> {
        a.containers[i]
            .iter()
            .map(|g| (g.uuid.as_str(), g.mig.as_ref().unwrap().profile.as_str()))
            .collect()
    };
    assert_eq!(on(0), [("GPU-b", "1g.5gb"), ("GPU-b", "1g.5gb")]);
    assert_eq!(on(1), [("GPU-a", "7g.40gb")]);
    s.apply("pod", a).unwrap();
}
