//! No background task is spawned outside the supervisor (issue 27): a
//! detached task that dies leaves a replica serving from a frozen view
//! with nobody the wiser. `src/supervisor.rs` spawns every long-running
//! task; the only other spawns allowed are request-scoped, listed below
//! with why. Tests inside source files are skipped.

mod support {
    pub mod source_files;
}

use std::path::PathBuf;

use support::source_files::{code_without_tests, rust_files};

/// Spawns that end with their request, and why they are not supervised.
const REQUEST_SCOPED: [(&str, usize, &str); 2] = [
    (
        "src/server/listener.rs",
        1,
        "one task per accepted connection, ended with it",
    ),
    (
        "src/bind/mod.rs",
        1,
        "one task per bind transaction, so that a caller that gives up does not cut it",
    ),
];

const SPAWNS: [&str; 5] = [
    "tokio::spawn",
    "task::spawn",
    "thread::spawn",
    "spawn_blocking",
    "spawn_local",
];

/// The file's code before its first `#[cfg(test)]` item, comments out.
fn code_only(text: &str) -> String {
    code_without_tests(text)
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn spawns(code: &str) -> usize {
    SPAWNS.iter().map(|s| code.matches(s).count()).sum()
}

#[test]
fn every_background_task_is_spawned_by_the_supervisor() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "src/supervisor.rs" {
            continue;
        }
        let n = spawns(&code_only(&std::fs::read_to_string(&file).unwrap()));
        let allowed = REQUEST_SCOPED
            .iter()
            .find(|(f, _, _)| *f == rel)
            .map_or(0, |(_, n, _)| *n);
        if n > allowed {
            found.push(format!(
                "{rel}: {n} spawn(s), {allowed} allowed: run it under crate::supervisor::Supervisor"
            ));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_supervisor_itself_spawns() {
    // The check above would pass vacuously if the spawns moved out of
    // sight; the supervisor's own two (its loop, each run) must be there.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let code = code_only(&std::fs::read_to_string(root.join("src/supervisor.rs")).unwrap());
    assert_eq!(spawns(&code), 2);
    for (file, n, _) in REQUEST_SCOPED {
        let code = code_only(&std::fs::read_to_string(root.join(file)).unwrap());
        assert_eq!(spawns(&code), n, "{file}");
    }
}
