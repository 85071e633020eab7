//! `s3_lite::rdma` is the only place that spells an `x-amz-rdma-*` header or an RDMA route
//! (`/.hipobj/rc/...`, `/.hipobj-rc/...`, `/.s3rdma-rc/...`): every other crate names them
//! through its constants, so a header is renamed (or a typo fixed) in one place.
//!
//! Walks the non-test sources of the crates that speak the dialects and fails on any string
//! literal containing such a name. Skipped: comments (line and doc comments), `#[cfg(test)]`
//! items (unit-test modules and helpers), and the crates' `tests/` directories and docs.

use std::path::{Path, PathBuf};

/// The crates checked, relative to the workspace root.
const CRATES: &[&str] = &[
    "engine/src",
    "gateway/src",
    "cli/src",
    "capi/src",
    "python/src",
];

/// What no other crate may spell (compared case-insensitively).
const FORBIDDEN: &[&str] = &["x-amz-rdma-", "/.hipobj/rc", "/.hipobj-rc", "/.s3rdma-rc"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The string literals of `src` outside comments and `#[cfg(test)]` items, with their line
/// numbers. A small lexer: line and block comments, `"..."` with escapes, raw strings
/// `r#"..."#`, char literals and lifetimes; `#[cfg(test)]` skips the next item (up to its
/// closing brace, or its `;`).
fn literals(src: &str) -> Vec<(usize, String)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Brace depth at which a skipped `#[cfg(test)]` item ends (`None`: not skipping).
    let mut depth: i64 = 0;
    let mut skip_until: Option<i64> = None;
    let mut pending_skip = false;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            continue;
        }
        if src[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if src[i..].starts_with("/*") {
            let mut nest = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    nest += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    nest -= 1;
                    i += 2;
                    if nest == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            continue;
        }
        if src[i..].starts_with("#[cfg(test)]") {
            pending_skip = skip_until.is_none();
            i += "#[cfg(test)]".len();
            continue;
        }
        // Raw strings: r"..", r#".."#, br#".."#.
        let raw = if src[i..].starts_with("br") {
            2
        } else if c == b'r' {
            1
        } else {
            0
        };
        if raw > 0 && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) {
            let mut j = i + raw;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let close = format!("\"{}", "#".repeat(hashes));
                let start = j + 1;
                let end = src[start..].find(&close).map_or(b.len(), |k| start + k);
                let text = &src[start..end];
                if skip_until.is_none() && !pending_skip {
                    out.push((line, text.to_owned()));
                }
                line += text.matches('\n').count();
                i = (end + close.len()).min(b.len());
                continue;
            }
        }
        if c == b'"' {
            let start_line = line;
            let mut text = String::new();
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    // Keep the escaped char; a `\` line continuation skips the newline.
                    i += 1;
                    if i < b.len() && b[i] == b'\n' {
                        line += 1;
                        i += 1;
                        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                            i += 1;
                        }
                        continue;
                    }
                }
                if i < b.len() {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    let ch = src[i..].chars().next().unwrap_or('\u{fffd}');
                    text.push(ch);
                    i += ch.len_utf8();
                }
            }
            i += 1;
            if skip_until.is_none() && !pending_skip {
                out.push((start_line, text));
            }
            continue;
        }
        if c == b'\'' {
            // A char literal ('x', '\n', '"') or a lifetime ('a): skip a char literal whole.
            if src[i..].starts_with("'\\") {
                if let Some(k) = src[i + 2..].find('\'') {
                    i += 2 + k + 1;
                    continue;
                }
            } else if let Some(ch) = src[i + 1..].chars().next()
                && src[i + 1 + ch.len_utf8()..].starts_with('\'')
            {
                i += 1 + ch.len_utf8() + 1;
                continue;
            }
            i += 1;
            continue;
        }
        match c {
            b'{' => {
                if pending_skip {
                    skip_until = Some(depth);
                    pending_skip = false;
                }
                depth += 1;
            }
            b'}' => {
                depth -= 1;
                if skip_until == Some(depth) {
                    skip_until = None;
                }
            }
            b';' if pending_skip && depth >= 0 => {
                // `#[cfg(test)] use ...;` or `mod tests;` (its own file is tests-only too).
                pending_skip = false;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every `(file:line, literal)` of `root`'s checked crates that spells a forbidden name.
fn offenders(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for c in CRATES {
        rust_files(&root.join(c), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 50,
        "only {} source files under {root:?}",
        files.len()
    );
    let mut bad = Vec::new();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        for (line, lit) in literals(&src) {
            let low = lit.to_ascii_lowercase();
            if FORBIDDEN.iter().any(|w| low.contains(w)) {
                let rel = f.strip_prefix(root).unwrap_or(&f);
                bad.push(format!("{}:{line}: {lit:?}", rel.display()));
            }
        }
    }
    bad
}

#[test]
fn only_s3_lite_spells_rdma_headers_and_routes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bad = offenders(&root);
    assert!(
        bad.is_empty(),
        "spell these through s3_lite::rdma's constants:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_lexer_finds_literals_and_skips_comments_and_tests() {
    let src = r##"
// "x-amz-rdma-in-a-comment"
/* "x-amz-rdma-in-a-block" */
fn f() { let a = "x-amz-rdma-token"; let c = '"'; let b = r#"/.hipobj-rc/prepare"#; }
fn g<'a>(x: &'a str) -> &'a str { "X-Amz-Rdma-Reply: \
    501" }
#[cfg(test)]
mod tests { fn t() { let _ = "x-amz-rdma-psn"; } }
#[cfg(test)]
const T: &str = "x-amz-rdma-qpn";
fn after() { "/.s3rdma-rc/connect" }
"##;
    let got: Vec<String> = literals(src).into_iter().map(|(_, l)| l).collect();
    assert_eq!(
        got,
        [
            "x-amz-rdma-token",
            "/.hipobj-rc/prepare",
            "X-Amz-Rdma-Reply: 501",
            "/.s3rdma-rc/connect"
        ]
    );
}
