//! docs/architecture.md's module table names every file of `src/`, and
//! only files that exist: the table is the map a newcomer reads first.

use std::collections::BTreeSet;
use std::path::Path;

fn source_files(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            source_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src");
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The backticked `*.rs` names in the first cell of each row of the
/// "## Modules" table.
fn documented(doc: &str) -> BTreeSet<String> {
    let section = doc
        .split("## Modules")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/architecture.md has a ## Modules section");
    let mut out = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split('|').nth(1).unwrap_or_default();
        for name in first.split('`').skip(1).step_by(2) {
            if name.ends_with(".rs") {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn the_module_table_matches_the_tree_file_for_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeSet::new();
    source_files(&root.join("src"), &root.join("src"), &mut files);
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("read the doc");
    let table = documented(&doc);
    let missing: Vec<&String> = files.difference(&table).collect();
    let gone: Vec<&String> = table.difference(&files).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "docs/architecture.md's table lacks {missing:?} and names files that do not exist: {gone:?}"
    );
}

#[test]
fn the_reader_takes_every_name_of_a_row() {
    let doc = "# x\n## Modules\n| file | holds |\n|---|---|\n| `a.rs`, `b/c.rs` | two |\n| `d.rs` | `e.rs` is not a row name |\n## Next\n| `f.rs` | elsewhere |\n";
    let names: Vec<String> = documented(doc).into_iter().collect();
    assert_eq!(names, ["a.rs", "b/c.rs", "d.rs"]);
}
