//! Every relative link in the project's Markdown (README, CHANGELOG,
//! docs/, deploy/) points at a file that exists, and every `#anchor` at a
//! heading of that file, with the anchors GitHub gives headings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files checked, relative to the repository's root.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![
        PathBuf::from("README.md"),
        PathBuf::from("CHANGELOG.md"),
        PathBuf::from("deploy/README.md"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry of docs/").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            p.strip_prefix(root())
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter(move |(_, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// GitHub's anchor for a heading's text: lower case, inline code marks
/// and punctuation dropped (letters, digits, `-` and `_` kept), spaces as
/// `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a document's headings; a repeated one gets `-1`, `-2`…
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` on one line, with
/// inline code spans left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            '`' => in_code = !in_code,
            ']' if !in_code && bytes.get(i + 1) == Some(&'(') => {
                let rest: String = bytes[i + 2..].iter().collect();
                if let Some(end) = rest.find(')') {
                    out.push(rest[..end].to_string());
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every broken link of the document at `path` (relative to the root),
/// as `file:line: target (why)`.
fn broken_links(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(path)).expect("a document");
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (n, line) in prose(&text) {
        for target in link_targets(line) {
            let target = target.split_whitespace().next().unwrap_or("").to_string();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let file_path = if file.is_empty() {
                path.to_path_buf()
            } else {
                dir.join(file)
            };
            let full = root().join(&file_path);
            let at = format!("{}:{}: {target}", path.display(), n + 1);
            if !full.exists() {
                broken.push(format!("{at} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor
                && full.extension().is_some_and(|e| e == "md")
            {
                let doc = std::fs::read_to_string(&full).expect("a linked document");
                if !anchors(&doc).contains(anchor) {
                    broken.push(format!("{at} (no heading with that anchor)"));
                }
            }
        }
    }
    broken
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        slug(" gpugate's client limit and priority and fairness (issue 43)"),
        "gpugates-client-limit-and-priority-and-fairness-issue-43"
    );
    assert_eq!(
        slug(" The defaults: filterMode top, queueDepth auto (issue 26, fifth step)"),
        "the-defaults-filtermode-top-queuedepth-auto-issue-26-fifth-step"
    );
    assert_eq!(slug(" `gpugate serve`"), "gpugate-serve");
    let doc = "# A\n## Metrics\n```\n# not a heading\n```\n### Metrics\n#nope\n";
    let got = anchors(doc);
    let want: BTreeSet<String> = ["a", "metrics", "metrics-1"]
        .into_iter()
        .map(str::to_string)
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        link_targets("see [x](a.md#b) and `[y](not-a-link)` and [z](#c)"),
        ["a.md#b", "#c"]
    );
}

#[test]
fn a_broken_anchor_is_found() {
    // A document of the test's own, in a scratch directory under the
    // target dir, linking to a real heading and to one that is not there.
    let dir = root().join("target").join("doc-links-test");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(
        dir.join("probe.md"),
        "# Probe\n\n## Real one\n\n[ok](#real-one) [bad](#not-there) [gone](nowhere.md)\n",
    )
    .expect("write probe");
    let broken = broken_links(&PathBuf::from("target/doc-links-test/probe.md"));
    assert_eq!(
        broken,
        [
            "target/doc-links-test/probe.md:5: #not-there (no heading with that anchor)",
            "target/doc-links-test/probe.md:5: nowhere.md (no such file)",
        ]
    );
}

/// A document over [`LONG`] lines opens with `## Contents`, which links
/// every other `##` heading, in order.
const LONG: usize = 300;

/// What is wrong with the document's table of contents, if anything.
fn contents_problem(text: &str) -> Option<String> {
    let headings: Vec<&str> = prose(text)
        .filter_map(|(_, l)| l.strip_prefix("## "))
        .collect();
    if headings.first() != Some(&"Contents") {
        return Some(format!(
            "its first `##` heading is {:?}, not Contents",
            headings.first()
        ));
    }
    let Some(start) = text.find("\n## Contents\n") else {
        return Some("no line `## Contents` after the title".to_string());
    };
    let listed: Vec<String> = text[start + 13..]
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with("- "))
        .flat_map(link_targets)
        .collect();
    let want: Vec<String> = headings[1..]
        .iter()
        .map(|h| format!("#{}", slug(h)))
        .collect();
    (listed != want).then(|| format!("Contents lists {listed:?}, the headings are {want:?}"))
}

#[test]
fn every_long_document_opens_with_its_contents() {
    let mut problems = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(root().join(&doc)).expect("a document");
        if text.lines().count() > LONG
            && let Some(p) = contents_problem(&text)
        {
            problems.push(format!("{}: {p}", doc.display()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // A heading missing from the list is caught.
    let doc = "# D\n\n## Contents\n\n- [A](#a)\n\n## A\n\n## B\n";
    assert!(contents_problem(doc).is_some_and(|p| p.contains("#b")));
    let fixed = doc.replace("- [A](#a)\n", "- [A](#a)\n- [B](#b)\n");
    assert_eq!(contents_problem(&fixed), None);
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let broken: Vec<String> = documents().iter().flat_map(|d| broken_links(d)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
