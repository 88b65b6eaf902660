//! The device-kind seam holds: what is NVIDIA's on the wire (its register
//! and score annotations, its selection annotations, its vendor word, the
//! environment the webhook writes) is named only by `src/devices/`, and
//! every layer reads it from the kind (docs/architecture.md, "Device
//! kinds"). A new layer that names an NVIDIA key directly fails here.
//!
//! Left out, on purpose, and listed below: words for people
//! (`placement/words.rs`, `explain.rs` name the annotations a user sets)
//! and HAMi-core's runtime variables that escape its limits
//! (`admission/limit_escapes.rs`), which belong to the runtime rather than
//! to the device plugin's wire format. Tests inside source files are
//! fixtures and are skipped.

mod support {
    pub mod source_files;
}

use std::path::Path;

use support::source_files::{code_without_tests, rust_files};

use gpugate::devices::{self, nvidia};

const WORDS_FOR_PEOPLE: [&str; 3] = [
    "src/placement/words.rs",
    "src/explain.rs",
    "src/admission/limit_escapes.rs",
];

#[test]
fn nvidia_wire_names_live_only_in_the_device_kind() {
    let kind = devices::KindId::NVIDIA.kind();
    let quoted = |s: &str| format!("\"{s}\"");
    let mut names = vec![
        quoted(nvidia::NODE_REGISTER),
        quoted(nvidia::NODE_SCORE),
        quoted(nvidia::VENDOR),
        quoted(kind.env.hide_devices.0),
        quoted(kind.env.core_policy),
        quoted(kind.env.task_priority),
    ];
    let s = &kind.selection;
    for key in [
        s.use_type,
        s.nouse_type,
        s.use_uuid,
        s.nouse_uuid,
        s.mode,
        s.numa_bind,
    ] {
        names.push(quoted(key));
    }
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    assert!(files.len() > 50, "read the source tree");
    let mut leaks = Vec::new();
    for file in &files {
        let shown = file.to_string_lossy().replace('\\', "/");
        if shown.starts_with("src/devices/") || WORDS_FOR_PEOPLE.contains(&shown.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read");
        for name in &names {
            if code_without_tests(&text).contains(name.as_str()) {
                leaks.push(format!("{shown}: {name}"));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "NVIDIA's wire names outside src/devices/ (read them from the DeviceKind):\n{}",
        leaks.join("\n")
    );
}

#[test]
fn every_kind_has_a_config_section_and_a_mode_that_shares() {
    let config = gpugate::config::Config::default();
    let sections = config.device_configs();
    assert_eq!(sections.len(), devices::KINDS.len());
    for ((id, kind), section) in devices::kinds().zip(sections) {
        assert_eq!(
            section.kind, id,
            "{}'s section says another kind",
            kind.name
        );
        assert!(
            kind.sharing("").is_some(),
            "{}: a device registered without a mode must be shareable",
            kind.name
        );
        assert!(!section.resource_count_name.is_empty());
    }
}
