//! `put --recursive DIR s3://BUCKET/PREFIX/` and `get --recursive s3://BUCKET/PREFIX/ DIR`:
//! the aws CLI's `cp --recursive`, one object per regular file, each through the single-object
//! `put` / `get` (same data paths, proofs and per-object lines). Every file or key is tried;
//! the command fails (exit 1) naming each one that failed.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use crate::commands::{CommandResult, Context, GetArgs, PutArgs, get, put};
use crate::s3uri::S3Uri;

/// The regular files under a directory (path, `/`-separated key below it), and the entries
/// skipped (neither file nor directory).
type Tree = (Vec<(PathBuf, String)>, Vec<String>);

/// The regular files under `root`, sorted, with their paths relative to it as `/`-separated
/// keys. Symbolic links are not followed (a link to a directory could loop, a link to a file
/// elsewhere would upload what the tree does not hold); they are reported as skipped.
fn files_under(root: &Path) -> Result<Tree, String> {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path
                    .strip_prefix(root)
                    .map_err(|_| format!("{}: outside {}", path.display(), root.display()))?;
                let key: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                files.push((path, key.join("/")));
            } else {
                skipped.push(path.display().to_string());
            }
        }
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    skipped.sort();
    Ok((files, skipped))
}

/// `prefix` as a key prefix: empty, or ending in `/`.
fn as_prefix(key: &str) -> String {
    if key.is_empty() || key.ends_with('/') {
        key.to_owned()
    } else {
        format!("{key}/")
    }
}

/// The local path of `key` under `dir`, for a key below `prefix`: `None` when the rest of the
/// key could leave `dir` (`..`, an absolute path, an empty segment) or names a "directory"
/// (ends in `/`). Keys are untrusted: a listing must not write outside the destination.
pub fn local_path(dir: &Path, prefix: &str, key: &str) -> Option<PathBuf> {
    let rest = key.strip_prefix(prefix)?;
    if rest.is_empty() || rest.ends_with('/') || rest.starts_with('/') {
        return None;
    }
    let rel = Path::new(rest);
    let safe = rest
        .split('/')
        .all(|s| !s.is_empty() && s != "." && s != "..")
        && rel.components().all(|c| matches!(c, Component::Normal(_)));
    safe.then(|| dir.join(rel))
}

/// What a recursive command did: per object its result, and the failures.
fn outcome(
    what: &str,
    results: Vec<Value>,
    failed: Vec<String>,
    skipped: Vec<String>,
) -> CommandResult {
    if !skipped.is_empty() {
        eprintln!(
            "hipobj: warning: {what}: skipped {} entr{} that are not regular files: {}",
            skipped.len(),
            if skipped.len() == 1 { "y" } else { "ies" },
            skipped.join(", ")
        );
    }
    if failed.is_empty() {
        Ok(json!({ "objects": results.len(), "results": results, "skipped": skipped }))
    } else {
        Err(format!(
            "{what}: {} of {} failed: {}",
            failed.len(),
            results.len() + failed.len(),
            failed.join("; ")
        ))
    }
}

/// `put --recursive`: every regular file under `args.file` to `args.dest` + its relative path.
pub fn put_tree(ctx: &mut Context, args: &PutArgs) -> CommandResult {
    if !args.file.is_dir() {
        return Err(format!(
            "--recursive: {} is not a directory (without --recursive, put uploads one file)",
            args.file.display()
        ));
    }
    let dest = S3Uri::parse(&args.dest).map_err(|e| e.to_string())?;
    let prefix = as_prefix(&dest.key);
    let (files, skipped) = files_under(&args.file)?;
    let (mut results, mut failed) = (Vec::new(), Vec::new());
    for (path, rel) in files {
        let one = PutArgs {
            file: path.clone(),
            dest: format!("s3://{}/{prefix}{rel}", dest.bucket),
            recursive: false,
            ..args.clone()
        };
        match put(ctx, &one) {
            Ok(v) => results.push(v),
            Err(e) => failed.push(format!("{}: {e}", path.display())),
        }
    }
    outcome("put --recursive", results, failed, skipped)
}

/// `get --recursive`: every object under the source prefix into the destination directory
/// (default `.`), at its key's path below the prefix.
pub fn get_tree(ctx: &mut Context, args: &GetArgs) -> CommandResult {
    if args.range.is_some() {
        return Err("--range does not go with --recursive (it names bytes of one object)".into());
    }
    let src = S3Uri::parse(&args.src).map_err(|e| e.to_string())?;
    let prefix = as_prefix(&src.key);
    let dir = PathBuf::from(args.dest.as_deref().unwrap_or("."));
    if args.dest.as_deref() == Some("-") {
        return Err("--recursive writes files: name a directory, not - (stdout)".into());
    }
    let listing = ctx
        .client
        .list(
            &src.bucket,
            Some(&prefix).filter(|p| !p.is_empty()).map(String::as_str),
            None,
        )
        .map_err(|e| format!("listing s3://{}/{prefix}: {e}", src.bucket))?;
    let (mut results, mut failed, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for o in listing.objects {
        let Some(path) = local_path(&dir, &prefix, &o.key) else {
            if !o.key.ends_with('/') {
                failed.push(format!(
                    "s3://{}/{}: the key would leave {} (.., an empty or absolute segment): not written",
                    src.bucket,
                    o.key,
                    dir.display()
                ));
            } else {
                skipped.push(format!("s3://{}/{}", src.bucket, o.key));
            }
            continue;
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let one = GetArgs {
            src: format!("s3://{}/{}", src.bucket, o.key),
            dest: Some(path.to_string_lossy().into_owned()),
            recursive: false,
            ..args.clone()
        };
        match get(ctx, &one) {
            Ok(v) => results.push(v),
            Err(e) => failed.push(format!("s3://{}/{}: {e}", src.bucket, o.key)),
        }
    }
    outcome("get --recursive", results, failed, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_below_the_directory_and_never_outside_it() {
        let d = Path::new("/tmp/out");
        assert_eq!(local_path(d, "m/", "m/a/b.bin"), Some(d.join("a/b.bin")));
        assert_eq!(local_path(d, "", "top"), Some(d.join("top")));
        for bad in [
            "m/../x",
            "m/a/../../x",
            "m//x",
            "m/./x",
            "m/",
            "m/dir/",
            "other/x",
            "m/..",
        ] {
            assert_eq!(local_path(d, "m/", bad), None, "{bad}");
        }
        assert_eq!(local_path(d, "", "/etc/passwd"), None);
        assert_eq!(as_prefix("m"), "m/");
        assert_eq!(as_prefix(""), "");
        assert_eq!(as_prefix("m/"), "m/");
    }

    #[test]
    fn a_tree_lists_its_regular_files_with_slash_keys() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/c.txt"), b"c").unwrap();
        std::fs::write(t.path().join("top"), b"t").unwrap();
        std::os::unix::fs::symlink(t.path().join("top"), t.path().join("link")).unwrap();
        let (files, skipped) = files_under(t.path()).unwrap();
        let keys: Vec<&str> = files.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(keys, vec!["a/b/c.txt", "top"]);
        assert_eq!(skipped.len(), 1, "the symlink is skipped: {skipped:?}");
    }
}
