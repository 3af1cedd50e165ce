//! The docs stay navigable: every relative link in every Markdown file of the repository
//! resolves to a file or directory, and the README stays a page a newcomer reads (under
//! 40 KB; the rest lives in `docs/`).

use std::path::{Path, PathBuf};

/// The README's size limit, in bytes.
const README_LIMIT: usize = 40_000;

/// Directories that hold no documentation of ours (besides every hidden one: `.git`, the
/// virtualenvs `.venv` and the benches' `bench/.venv-*`, whose packages ship their own docs).
const SKIPPED: [&str; 2] = ["target", "node_modules"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let ours = !(SKIPPED.contains(&name.as_str())
                || name.starts_with("target")
                || name.starts_with('.'));
            if ours {
                markdown_files(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The targets of `[text](target)` links on one line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        targets.push(&after[..end]);
        rest = &after[end..];
    }
    targets
}

/// Whether `target` is a link to a place in this repository (not a URL or an anchor).
fn is_relative(target: &str) -> bool {
    !(target.is_empty()
        || target.starts_with('#')
        || target.contains("://")
        || target.starts_with("mailto:")
        || target.contains(char::is_whitespace))
}

#[test]
fn every_relative_link_resolves() {
    let root = repository();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(files.len() > 10, "found only {files:?}");
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable markdown");
        let dir = file.parent().expect("a file has a directory");
        for (number, line) in text.lines().enumerate() {
            for target in link_targets(line).into_iter().filter(|t| is_relative(t)) {
                let path = target.split('#').next().unwrap_or_default();
                if !dir.join(path).exists() {
                    let shown = file.strip_prefix(&root).unwrap_or(file);
                    broken.push(format!("{}:{}: {target}", shown.display(), number + 1));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short() {
    let size = std::fs::metadata(repository().join("README.md"))
        .expect("README.md")
        .len() as usize;
    assert!(
        size < README_LIMIT,
        "README.md is {size} bytes, over {README_LIMIT}: move detail into a page under docs/"
    );
}

#[test]
fn link_targets_are_read_off_a_line() {
    let line = "see [a](docs/a.md#x), [b](https://x.org) and [c](../c.md)";
    assert_eq!(
        link_targets(line),
        ["docs/a.md#x", "https://x.org", "../c.md"]
    );
    assert!(!is_relative("https://x.org") && !is_relative("#anchor"));
    assert!(is_relative("docs/a.md#x"));
}
