//! The dependency audit, offline, against the checked-in policy
//! (`deny.toml`, cargo-deny's format): every package's licence is allowed,
//! every package comes from crates.io, a crate in two versions is one the
//! policy names (and a name the policy keeps is still needed), and
//! `rust-version` in Cargo.toml is the true minimum: the highest any
//! dependency declares, and no lower than the let-chains gpugate's own
//! code uses (Rust 1.88). Advisories need the RustSec database, which
//! these machines cannot fetch: see `deny.toml`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

fn metadata() -> Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

fn policy() -> toml::Table {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deny.toml");
    std::fs::read_to_string(path)
        .expect("read deny.toml")
        .parse()
        .expect("deny.toml is TOML")
}

fn strings(v: &toml::Value) -> Vec<String> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// Whether an SPDX expression (`A OR (B AND C)`, `A WITH E`, the old
/// `A/B`) is satisfied by the allowed licences.
fn satisfied(expression: &str, allowed: &BTreeSet<String>) -> bool {
    let spaced = expression
        .replace('/', " OR ")
        .replace('(', " ( ")
        .replace(')', " ) ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut at = 0;
    let ok = or(&tokens, &mut at, allowed);
    ok && at == tokens.len()
}

fn or(t: &[&str], at: &mut usize, allowed: &BTreeSet<String>) -> bool {
    let mut ok = and(t, at, allowed);
    while t.get(*at) == Some(&"OR") {
        *at += 1;
        ok |= and(t, at, allowed);
    }
    ok
}

fn and(t: &[&str], at: &mut usize, allowed: &BTreeSet<String>) -> bool {
    let mut ok = term(t, at, allowed);
    while t.get(*at) == Some(&"AND") {
        *at += 1;
        ok &= term(t, at, allowed);
    }
    ok
}

fn term(t: &[&str], at: &mut usize, allowed: &BTreeSet<String>) -> bool {
    match t.get(*at) {
        Some(&"(") => {
            *at += 1;
            let ok = or(t, at, allowed);
            if t.get(*at) == Some(&")") {
                *at += 1;
                ok
            } else {
                false
            }
        }
        Some(id) => {
            *at += 1;
            let mut id = id.to_string();
            if t.get(*at) == Some(&"WITH") {
                id = format!("{id} WITH {}", t.get(*at + 1).unwrap_or(&""));
                *at += 2;
            }
            allowed.contains(&id)
        }
        None => false,
    }
}

#[test]
fn the_licence_reader_reads_spdx() {
    let allowed: BTreeSet<String> = ["MIT", "Apache-2.0", "Apache-2.0 WITH LLVM-exception"]
        .map(String::from)
        .into();
    for yes in [
        "MIT",
        "MIT OR GPL-3.0",
        "MIT/Apache-2.0",
        "(Apache-2.0 OR MIT) AND MIT",
        "Apache-2.0 WITH LLVM-exception OR GPL-2.0",
    ] {
        assert!(satisfied(yes, &allowed), "{yes}");
    }
    for no in [
        "GPL-3.0",
        "MIT AND GPL-3.0",
        "(MIT",
        "",
        "BSD-3-Clause WITH LLVM-exception",
    ] {
        assert!(!satisfied(no, &allowed), "{no}");
    }
}

#[test]
fn dependencies_follow_the_policy() {
    let meta = metadata();
    let policy = policy();
    let allowed: BTreeSet<String> = strings(&policy["licenses"]["allow"]).into_iter().collect();
    let registries = strings(&policy["sources"]["allow-registry"]);
    let mut problems = Vec::new();
    let mut versions: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().unwrap_or_default();
        let version = p["version"].as_str().unwrap_or_default();
        versions
            .entry(name.to_string())
            .or_default()
            .insert(version.to_string());
        match p["source"].as_str() {
            // gpugate itself.
            None if name == "gpugate" => {}
            Some(s) if registries.iter().any(|r| s == format!("registry+{r}")) => {}
            other => problems.push(format!("{name} {version}: source {other:?} is not allowed")),
        }
        match p["license"].as_str() {
            Some(l) if satisfied(l, &allowed) => {}
            other => problems.push(format!(
                "{name} {version}: licence {other:?} is not allowed"
            )),
        }
    }
    let skipped: BTreeSet<(String, String)> = policy["bans"]["skip"]
        .as_array()
        .expect("bans.skip")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().expect("name").to_string(),
                s["version"].as_str().expect("version").to_string(),
            )
        })
        .collect();
    // Every version of a crate but its newest must be named.
    let mut older: BTreeSet<(String, String)> = BTreeSet::new();
    for (name, vs) in &versions {
        let mut vs: Vec<&String> = vs.iter().collect();
        vs.sort_by_key(|v| {
            v.split(['.', '+', '-'])
                .map(|n| n.parse::<u64>().unwrap_or(0))
                .collect::<Vec<_>>()
        });
        vs.pop();
        older.extend(vs.into_iter().map(|v| (name.clone(), v.clone())));
    }
    for dup in older.difference(&skipped) {
        problems.push(format!(
            "{} {} is a second version: remove it, or name it in deny.toml's bans.skip with why",
            dup.0, dup.1
        ));
    }
    for stale in skipped.difference(&older) {
        problems.push(format!(
            "deny.toml skips {} {}, which is no longer a second version",
            stale.0, stale.1
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn rust_version_is_the_true_minimum() {
    let meta = metadata();
    let version = |v: &str| -> Vec<u64> {
        let mut parts: Vec<u64> = v.split('.').map(|n| n.parse().unwrap_or(0)).collect();
        parts.resize(3, 0);
        parts
    };
    let mut ours = None;
    // Let chains (`if let … && …`), used throughout, are stable from 1.88.
    let mut need = (version("1.88"), "let chains".to_string());
    for p in meta["packages"].as_array().expect("packages") {
        let Some(rv) = p["rust_version"].as_str() else {
            continue;
        };
        if p["name"] == "gpugate" {
            ours = Some(version(rv));
        } else if version(rv) > need.0 {
            need = (version(rv), format!("{} {}", p["name"], p["version"]));
        }
    }
    assert_eq!(
        ours.as_ref(),
        Some(&need.0),
        "Cargo.toml's rust-version must be {:?}, what {} needs",
        need.0,
        need.1
    );
}
