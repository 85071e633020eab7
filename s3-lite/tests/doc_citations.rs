//! The repository cites only files it holds: no `.rs`, `.md` or `.h` file may cite the internal
//! wire reference that is not in the repository (its content lives in docs/protocol.md,
//! docs/rdma-headers.md and docs/verbs.md) or the team's internal design and style notes, and
//! every `docs/<name>.md` a file names must exist.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (this crate lives one level below it).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `.rs`, `.md` and `.h` file under `dir`, skipping build output, VCS data and fuzz
/// corpora; symlinks are never followed (test fixtures hold deliberate loops).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if meta.is_dir() {
            if !matches!(name.as_ref(), "target" | ".git" | "corpus" | "artifacts") {
                sources(&path, out);
            }
        } else if meta.is_file() && [".rs", ".md", ".h"].iter().any(|ext| name.ends_with(ext)) {
            out.push(path);
        }
    }
}

fn all_sources() -> Vec<(PathBuf, String)> {
    let root = workspace_root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.len() > 100,
        "walked only {} files under {}",
        files.len(),
        root.display()
    );
    files
        .into_iter()
        .filter_map(|p| {
            let text = fs::read_to_string(&p).ok()?;
            Some((p.strip_prefix(&root).unwrap().to_path_buf(), text))
        })
        .collect()
}

/// Lines of the repository's sources that contain `needle`, as `path:line: text`.
fn lines_containing(needle: &str) -> Vec<String> {
    all_sources()
        .iter()
        .flat_map(|(path, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, line)| line.contains(needle))
                .map(move |(n, line)| format!("{}:{}: {}", path.display(), n + 1, line.trim()))
        })
        .collect()
}

#[test]
fn no_file_cites_the_reference_that_is_not_in_the_repository() {
    // Built at run time so this file does not match itself.
    let banned = ["protocols", ".md"].concat();
    let hits = lines_containing(&banned);
    assert!(
        hits.is_empty(),
        "{banned} is not in the repository; cite docs/protocol.md, docs/rdma-headers.md or \
         docs/verbs.md instead:\n{}",
        hits.join("\n")
    );
}

/// The team's internal design and style notes are not in the repository either.
#[test]
fn no_file_cites_the_internal_design_or_style_notes() {
    let mut hits = Vec::new();
    for name in [["design", ".md"].concat(), ["style", ".md"].concat()] {
        hits.extend(lines_containing(&name));
    }
    assert!(
        hits.is_empty(),
        "the internal design and style notes are not in the repository; say what they say \
         instead of citing them:\n{}",
        hits.join("\n")
    );
}

#[test]
fn every_cited_docs_file_exists() {
    let root = workspace_root();
    let mut missing = Vec::new();
    for (path, text) in all_sources() {
        for (at, _) in text.match_indices("docs/") {
            let rest = &text[at + 5..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
                .collect();
            let Some(stem) = name
                .strip_suffix(".md")
                .or_else(|| name.find(".md").map(|i| &name[..i]))
            else {
                continue;
            };
            let cited = format!("docs/{stem}.md");
            if !root.join(&cited).is_file() {
                missing.push(format!("{}: {cited}", path.display()));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "cited docs files that do not exist:\n{}",
        missing.join("\n")
    );
}
