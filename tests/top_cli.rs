//! `gpugate top` from the command line, also as the kubectl plugin
//! `kubectl-gpugate` (a link to the same binary: `kubectl gpugate top`).

use std::process::Command;

mod support {
    pub mod kubectl_plugin;
    pub mod process;
}

const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo/cluster.yaml");

#[test]
fn top_as_gpugate_and_as_a_kubectl_plugin() {
    let plugin = support::kubectl_plugin::KubectlPlugin::new("top-cli");
    for bin in plugin.both() {
        let out = support::process::succeeds(Command::new(&bin).args([
            "top",
            "--cluster",
            DEMO,
            "--output",
            "json",
        ]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let node = json["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == "gpu-a100-1")
            .unwrap_or_else(|| panic!("{json}"));
        // The demo's one running pod holds 20,000 MiB and 50 cores there.
        assert_eq!(
            node["memMiB"],
            serde_json::json!([20000, 163840]),
            "{bin:?}"
        );
        assert_eq!(node["cores"], serde_json::json!([50, 400]), "{bin:?}");
    }
    // Neither source given: a clear refusal.
    let out = Command::new(env!("CARGO_BIN_EXE_gpugate"))
        .arg("top")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cluster"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `gpugate capacity` (and `kubectl gpugate capacity`): per kind and per
/// node, what the demo cluster can still take.
#[test]
fn capacity_as_gpugate_and_as_a_kubectl_plugin() {
    let plugin = support::kubectl_plugin::KubectlPlugin::new("capacity-cli");
    for bin in plugin.both() {
        let out = support::process::succeeds(Command::new(&bin).args([
            "capacity",
            "--cluster",
            DEMO,
            "--output",
            "json",
        ]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // 4 A100s (one holding training-0's 20,000 MiB and 50 cores) and
        // 2 T4s, the second cordoned.
        let kind = &json["kinds"][0];
        assert_eq!(kind["kind"], "nvidia", "{json}");
        assert_eq!(
            (
                &kind["devices"],
                &kind["usable"],
                &kind["wholeFree"],
                &kind["freeMemMiB"],
                &kind["freeCores"]
            ),
            (
                &serde_json::json!(6),
                &serde_json::json!(5),
                &serde_json::json!(4),
                &serde_json::json!(4 * 40960 - 20000 + 15360),
                &serde_json::json!(450)
            ),
            "{bin:?}"
        );
        assert_eq!(
            kind["largestSlice"],
            serde_json::json!({"memMiB": 40960, "cores": 100})
        );
        assert_eq!(json["nodes"].as_array().unwrap().len(), 2, "{json}");
        let table =
            support::process::succeeds(Command::new(&bin).args(["capacity", "--cluster", DEMO]));
        let table = String::from_utf8_lossy(&table.stdout);
        let t4 = table
            .lines()
            .find(|l| l.starts_with("gpu-t4-1"))
            .unwrap_or_else(|| panic!("{table}"));
        assert!(t4.contains("15360 MiB, 100 cores"), "{t4}");
    }
}
