//! Replays the fuzz corpora (`fuzz/corpus/<target>/*`) through the same
//! checks as the fuzz targets, so that every input a fuzzer ever kept (and
//! every crash it found, once added) stays tested by `cargo test`.

use std::fs;
use std::path::{Path, PathBuf};

use gpugate::fuzzing;

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let entries = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("corpus directory {} is missing: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    files.retain(|p| p.is_file());
    files.sort();
    files
}

#[test]
fn every_target_has_a_corpus() {
    for (target, _) in fuzzing::TARGETS {
        let dir = corpus_root().join(target);
        assert!(
            !files(&dir).is_empty(),
            "corpus directory {} is empty",
            dir.display()
        );
    }
}

#[test]
fn every_corpus_belongs_to_a_target() {
    let root = corpus_root();
    let dirs = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("corpus root {} is missing: {e}", root.display()));
    for dir in dirs {
        let dir = dir.expect("reading the corpus root").path();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert!(
            fuzzing::check_for(name).is_some(),
            "{} is not a fuzz target's corpus",
            dir.display()
        );
    }
}

#[test]
fn replay_corpora() {
    let mut replayed = 0;
    for (target, check) in fuzzing::TARGETS {
        for file in files(&corpus_root().join(target)) {
            let data = fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(
                outcome.is_ok(),
                "{target}: {} fails its check",
                file.display()
            );
            replayed += 1;
        }
    }
    assert!(replayed > 0);
}
