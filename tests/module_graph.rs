//! The crate's module dependencies, read from the source: no circles between
//! modules (file by file, and between the top-level modules), and an engine
//! that knows nothing of Kubernetes' types or client.
//!
//! `cargo test --test module_graph -- --nocapture` prints the listing.
//!
//! A module depends on another when its code (tests left out) names a path
//! into it: `use crate::a::b::{C, d::E}`, `crate::a::f()`, `super::g`.
//! A re-export (`pub use child::X` in a `mod.rs`) is followed to the module
//! that defines `X`, and is not itself a dependency of the parent on its
//! child: a facade is not a use.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// One source file: its module path (`engine::fit`), whether it is a
/// `mod.rs`/`lib.rs` (whose `super` is one level higher up) and its code
/// without comments, strings and `#[cfg(test)]` items.
struct Module {
    path: String,
    is_dir_module: bool,
    code: String,
}

fn modules() -> Vec<Module> {
    let mut out = Vec::new();
    collect(Path::new("src"), &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn collect(dir: &Path, out: &mut Vec<Module>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") || p == Path::new("src/main.rs") {
            continue;
        }
        let rel = p.strip_prefix("src").expect("under src").with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let is_dir_module = matches!(parts.last().map(String::as_str), Some("mod" | "lib"));
        if is_dir_module {
            parts.pop();
        }
        let path = if parts.is_empty() {
            "crate".to_string()
        } else {
            parts.join("::")
        };
        let text = std::fs::read_to_string(&p).expect("read a source file");
        out.push(Module {
            path,
            is_dir_module,
            code: strip_tests(&strip_comments_and_strings(&text)),
        });
    }
}

/// Comments and the insides of string and char literals become spaces, so
/// that neither `// crate::x` nor `"crate::x"` counts as a dependency.
fn strip_comments_and_strings(s: &str) -> String {
    let b: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char_before(&b, i)
        {
            // Raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let close = if next == Some('\\') {
                (i + 2..b.len().min(i + 12)).find(|&k| b[k] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(k) => {
                    out.push_str("' '");
                    i = k + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// Drops every item marked `#[cfg(test)]` (a `mod tests { .. }`, a test
/// helper function or impl): tests may use whatever they like.
fn strip_tests(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its first `;` before any `{`, or at the brace
        // that closes its first `{`.
        let (mut depth, mut end) = (0usize, item.len());
        for (k, ch) in item.char_indices() {
            match ch {
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Every path the code names that starts with `crate`, `super` or `self`,
/// as segments; `use` trees are expanded (`use a::{b, c::d}` gives `a::b`
/// and `a::c::d`). The flag says whether it came from a `pub use`.
fn paths(code: &str) -> Vec<(Vec<String>, bool)> {
    let mut out = Vec::new();
    let tokens = tokenize(code);
    let mut i = 0;
    while i < tokens.len() {
        let is_use = tokens[i] == "use"
            && (i == 0 || matches!(tokens[i - 1].as_str(), ";" | "}" | "{" | ")" | "]" | "pub"));
        if is_use {
            let public = i > 0 && tokens[i - 1] == "pub"
                || i > 3 && tokens[i - 1] == ")" && tokens[i - 4] == "pub";
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            expand_use(&tokens[i + 1..end], &[], &mut |p| out.push((p, public)));
            i = end;
            continue;
        }
        if matches!(tokens[i].as_str(), "crate" | "super" | "self")
            && tokens.get(i + 1).map(String::as_str) == Some("::")
            && (i == 0 || tokens[i - 1] != "::")
        {
            let mut p = vec![tokens[i].clone()];
            let mut j = i + 1;
            while tokens.get(j).map(String::as_str) == Some("::") {
                match tokens.get(j + 1) {
                    Some(t) if is_ident(t) => {
                        p.push(t.clone());
                        j += 2;
                    }
                    _ => break,
                }
            }
            out.push((p, false));
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

fn tokenize(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(b[start..i].iter().collect());
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// Expands one use tree (the tokens between `use` and `;`).
fn expand_use(tokens: &[String], prefix: &[String], emit: &mut impl FnMut(Vec<String>)) {
    let mut path = prefix.to_vec();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        match t {
            "::" => i += 1,
            "{" => {
                // Split the group on top-level commas.
                let mut depth = 0;
                let mut start = i + 1;
                for k in i..tokens.len() {
                    match tokens[k].as_str() {
                        "{" => depth += 1,
                        "}" => {
                            depth -= 1;
                            if depth == 0 {
                                expand_use(&tokens[start..k], &path, emit);
                                return;
                            }
                        }
                        "," if depth == 1 => {
                            expand_use(&tokens[start..k], &path, emit);
                            start = k + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            "as" | "*" => break,
            _ if is_ident(t) => {
                path.push(t.to_string());
                i += 1;
            }
            _ => i += 1,
        }
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        emit(path);
    }
}

struct Crate {
    modules: BTreeMap<String, Module>,
    /// Per module, the items it re-exports: name -> the path it points at.
    reexports: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    fn read() -> Self {
        let modules: BTreeMap<String, Module> =
            modules().into_iter().map(|m| (m.path.clone(), m)).collect();
        let mut reexports = BTreeMap::new();
        for m in modules.values() {
            let mut items = BTreeMap::new();
            for (p, public) in paths(&m.code) {
                if public && let Some(last) = p.last() {
                    items.insert(last.clone(), absolute(m, &p));
                }
            }
            // `pub use child::X` (a path relative to the module itself).
            for line in m.code.split(';') {
                let toks = tokenize(line);
                if let Some(u) = toks.iter().position(|t| t == "use")
                    && toks[..u].iter().any(|t| t == "pub")
                    && toks
                        .get(u + 1)
                        .is_some_and(|t| !matches!(t.as_str(), "crate" | "super" | "self"))
                {
                    expand_use(&toks[u + 1..], &[], &mut |p| {
                        let mut abs = segments(&m.path);
                        abs.extend(p.iter().cloned());
                        if let Some(last) = p.last() {
                            items.insert(last.clone(), abs);
                        }
                    });
                }
            }
            reexports.insert(m.path.clone(), items);
        }
        Crate { modules, reexports }
    }

    /// The module a path (absolute segments, without `crate`) lands in,
    /// following re-exports.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<String> {
        let mut best = None;
        for n in (0..=abs.len()).rev() {
            let name = if n == 0 {
                "crate".to_string()
            } else {
                abs[..n].join("::")
            };
            if self.modules.contains_key(&name) {
                best = Some((name, n));
                break;
            }
        }
        let (module, n) = best?;
        if depth < 8
            && let Some(item) = abs.get(n)
            && let Some(target) = self.reexports.get(&module).and_then(|r| r.get(item))
            && target.as_slice() != abs
        {
            let mut next = target.clone();
            next.extend(abs[n + 1..].iter().cloned());
            return self.resolve(&next, depth + 1).or(Some(module));
        }
        Some(module)
    }

    /// File-level dependencies, re-exports of a module's own descendants
    /// left out.
    fn graph(&self) -> Graph {
        let mut g = Graph::new();
        for m in self.modules.values() {
            let deps = g.entry(m.path.clone()).or_default();
            for (p, public) in paths(&m.code) {
                let abs = absolute(m, &p);
                let Some(target) = self.resolve(&abs, 0) else {
                    continue;
                };
                let own_descendant = target.starts_with(&format!("{}::", m.path))
                    || (m.path == "crate" && target != "crate");
                if target == m.path || (public && own_descendant) {
                    continue;
                }
                deps.insert(target);
            }
        }
        g
    }
}

fn segments(module: &str) -> Vec<String> {
    if module == "crate" {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    }
}

/// A path as written in `m`, made absolute (segments after `crate`).
fn absolute(m: &Module, p: &[String]) -> Vec<String> {
    let mut base = segments(&m.path);
    // A file module's `self` is itself; `super` of `a::b` (a.rs/b.rs) is `a`.
    let mut rest = p;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => {}
    }
    let _ = m.is_dir_module;
    base.extend(rest.iter().cloned());
    base
}

fn top(module: &str) -> String {
    module.split("::").next().unwrap_or(module).to_string()
}

/// Every cycle's members (strongly connected components of two or more,
/// or one that depends on itself).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    // Tarjan, iteratively small enough to recurse: the crate has ~100 files.
    struct T<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            let self_loop = t.g.get(v).is_some_and(|d| d.contains(v));
            if scc.len() > 1 || self_loop {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn top_level(g: &Graph) -> Graph {
    let mut out = Graph::new();
    for (m, deps) in g {
        let entry = out.entry(top(m)).or_default();
        for d in deps {
            if top(d) != top(m) {
                entry.insert(top(d));
            }
        }
    }
    out
}

fn listing(g: &Graph) -> String {
    g.iter()
        .map(|(m, d)| {
            let d: Vec<&str> = d.iter().map(String::as_str).collect();
            format!("{m} -> {}\n", d.join(", "))
        })
        .collect()
}

#[test]
fn no_circles_between_modules() {
    let krate = Crate::read();
    let files = krate.graph();
    let tops = top_level(&files);
    println!("top-level modules:\n{}", listing(&tops));
    println!("files:\n{}", listing(&files));
    let file_cycles = cycles(&files);
    let top_cycles = cycles(&tops);
    assert!(
        file_cycles.is_empty() && top_cycles.is_empty(),
        "module circles:\n  files: {file_cycles:?}\n  top level: {top_cycles:?}"
    );
}

#[test]
fn the_engine_needs_only_itself_hami_and_the_device_kinds() {
    let krate = Crate::read();
    let tops = top_level(&krate.graph());
    let engine: Vec<&String> = tops["engine"]
        .iter()
        .filter(|d| *d != "hami" && *d != "devices")
        .collect();
    assert!(engine.is_empty(), "the engine reaches into {engine:?}");
    assert!(
        !tops["hami"].contains("engine"),
        "hami/ must not depend on the engine"
    );
    // The device kinds are a leaf: data every layer reads.
    let devices: Vec<&String> = tops.get("devices").into_iter().flatten().collect();
    assert!(devices.is_empty(), "devices/ reaches into {devices:?}");
    // No Kubernetes types or client anywhere in the engine, tests included.
    for file in walk(Path::new("src/engine")) {
        let text = strip_comments_and_strings(&std::fs::read_to_string(&file).expect("read"));
        let tokens = tokenize(&text);
        for (k, t) in tokens.iter().enumerate() {
            let path_start = tokens.get(k + 1).map(String::as_str) == Some("::")
                && (k == 0 || tokens[k - 1] != "::");
            assert!(
                !(path_start && (t == "k8s_openapi" || t == "kube")),
                "{} names {t}::",
                file.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The reader itself, on code written for it: a test that cannot fail
/// would prove nothing.
#[test]
fn the_reader_finds_uses_and_circles() {
    let code = strip_tests(&strip_comments_and_strings(
        r#"
        use crate::a::{b::C, d::{E, F as G}};
        pub use self::x::Y;
        // crate::commented::Out
        fn f() { let s = "crate::quoted::Out"; super::z::h(); }
        #[cfg(test)]
        mod tests { use crate::test_only::T; }
        "#,
    ));
    let got: Vec<String> = paths(&code)
        .into_iter()
        .map(|(p, _)| p.join("::"))
        .collect();
    assert_eq!(
        got,
        [
            "crate::a::b::C",
            "crate::a::d::E",
            "crate::a::d::F",
            "self::x::Y",
            "super::z::h"
        ]
    );
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("d".into()).or_default().insert("a".into());
    assert_eq!(
        cycles(&g),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}

/// Who may do what: a pod is planned only by `placement::pod` (so a call
/// that reads its pod once plans it once), and a bind's reservation
/// changes only through its handle: the view's transitions are private
/// to `cluster::view::reservations`, so no other module can even name
/// them.
#[test]
fn owners_alone_plan_pods_and_change_reservations() {
    let planners: Vec<String> = modules()
        .into_iter()
        .filter(|m| m.path != "placement::pod" && m.path != "cluster::convert")
        // Test modules in files of their own (`mod tests;`).
        .filter(|m| !m.path.ends_with("::tests"))
        .filter(|m| tokenize(&m.code).iter().any(|t| t == "pod_plan"))
        .map(|m| m.path)
        .collect();
    assert!(
        planners.is_empty(),
        "plan pods without placement::pod::plan_of: {planners:?}"
    );
    let owner = strip_comments_and_strings(
        &std::fs::read_to_string("src/cluster/view/reservations.rs").expect("read"),
    );
    let tokens = tokenize(&owner);
    // Private to the reservations module, or `pub(super)`: seen by the
    // view's own files (the ledger, its tests) and nothing outside it.
    let within_view: Vec<String> = ["pub", "(", "super", ")"].map(String::from).into();
    for mutator in [
        "mark_bound",
        "settle_reservation",
        "release_reservation",
        "place",
        "hold_for_gang",
        "release_gang_hold",
        "expire_gang_holds",
        "expire_assumed",
    ] {
        let declared: Vec<usize> = tokens
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[0] == "fn" && w[1] == mutator)
            .map(|(i, _)| i)
            .collect();
        assert!(!declared.is_empty(), "{mutator} is not declared there");
        for i in declared {
            let before = &tokens[i.saturating_sub(4)..i];
            let visible_beyond = before.last().is_some_and(|t| t == "pub")
                || (before.iter().any(|t| t == "pub") && before != within_view.as_slice());
            assert!(
                !visible_beyond,
                "ClusterView::{mutator} must stay private to the view"
            );
        }
    }
}
