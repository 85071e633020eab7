//! Object keys to file paths, safely and reversibly (the local directory backend's layout).
//!
//! A key is split on `/`; every component is percent-escaped so only `A-Z a-z 0-9 - _ .`
//! remain (a leading `.` is escaped too, so no component is ever `.`, `..` or hidden), then
//! tagged: directories end in `~d`, object data in `~o`, metadata sidecars in `~m` (`~` is
//! always escaped, so a tag cannot be forged). Keys `a` and `a/b` can therefore coexist
//! (`a~o` next to `a~d/b~o`), `../x` stays inside the bucket (`%2E.~d/x~o`), a leading `/`
//! becomes an empty component (`~d/...`), and NUL is refused.

use std::path::PathBuf;

use crate::error::ApiError;

/// Longest escaped component kept as one file name (file systems allow 255 bytes).
pub const MAX_COMPONENT_BYTES: usize = 240;
/// Longest key, in bytes (S3's limit).
pub const MAX_KEY_BYTES: usize = 1024;

/// Suffix of a directory standing for a key prefix.
pub const DIR_TAG: &str = "~d";
/// Suffix of an object's data file.
pub const DATA_TAG: &str = "~o";
/// Suffix of an object's metadata sidecar.
pub const META_TAG: &str = "~m";

fn keep(b: u8, first: bool) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && !first)
}

/// Escapes one key component.
pub fn escape_component(c: &str) -> String {
    let mut out = String::with_capacity(c.len());
    for (i, b) in c.bytes().enumerate() {
        if keep(b, i == 0) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reverses [`escape_component`]; `None` for names this module did not write.
pub fn unescape_component(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = name.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            if !keep(b, out.is_empty() && i == 0) {
                return None;
            }
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Checks a key and returns its escaped components.
pub fn components(key: &str) -> Result<Vec<String>, ApiError> {
    if key.is_empty() {
        return Err(ApiError::invalid_argument("object key must not be empty"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(ApiError::new(
            400,
            "KeyTooLongError",
            "Your key is too long",
        ));
    }
    if key.contains('\0') {
        return Err(ApiError::invalid_argument(
            "object key must not contain NUL",
        ));
    }
    let parts: Vec<String> = key.split('/').map(escape_component).collect();
    if parts.iter().any(|p| p.len() + 2 > MAX_COMPONENT_BYTES) {
        return Err(ApiError::new(
            400,
            "KeyTooLongError",
            format!(
                "each '/'-separated part of a key may take at most {MAX_COMPONENT_BYTES} bytes once escaped"
            ),
        ));
    }
    Ok(parts)
}

/// Paths of an object relative to its bucket directory: `(data, sidecar)`.
pub fn object_paths(key: &str) -> Result<(PathBuf, PathBuf), ApiError> {
    let parts = components(key)?;
    let mut dir = PathBuf::new();
    let (last, dirs) = parts
        .split_last()
        .ok_or_else(|| ApiError::invalid_argument("empty key"))?;
    for d in dirs {
        dir.push(format!("{d}{DIR_TAG}"));
    }
    Ok((
        dir.join(format!("{last}{DATA_TAG}")),
        dir.join(format!("{last}{META_TAG}")),
    ))
}

/// The key prefix a directory name stands for (`name` with its tag), if it is one of ours.
pub fn dir_component(name: &str) -> Option<String> {
    unescape_component(name.strip_suffix(DIR_TAG)?)
}

/// The key component of a data file name, if it is one of ours.
pub fn data_component(name: &str) -> Option<String> {
    unescape_component(name.strip_suffix(DATA_TAG)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_keys_stay_inside() {
        let (d, m) = object_paths("../../etc/passwd").unwrap();
        assert_eq!(d, PathBuf::from("%2E.~d/%2E.~d/etc~d/passwd~o"));
        assert_eq!(m, PathBuf::from("%2E.~d/%2E.~d/etc~d/passwd~m"));
        assert_eq!(object_paths("/abs").unwrap().0, PathBuf::from("~d/abs~o"));
        assert_eq!(object_paths("a~o").unwrap().0, PathBuf::from("a%7Eo~o"));
        assert_eq!(object_paths("dir/").unwrap().0, PathBuf::from("dir~d/~o"));
        assert!(object_paths("a\0b").is_err());
        assert!(object_paths(&"x".repeat(300)).is_err());
        for p in [d, m] {
            assert!(
                p.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
            );
        }
    }

    #[test]
    fn escape_round_trips() {
        for c in ["", ".", "..", ".hidden", "a b", "ü", "%", "~", "x.y"] {
            let e = escape_component(c);
            assert!(!e.starts_with('.') && !e.contains('~') && !e.contains('/'));
            assert_eq!(unescape_component(&e).as_deref(), Some(c), "{c:?}");
        }
        assert_eq!(dir_component("a%20b~d").as_deref(), Some("a b"));
        assert_eq!(data_component("x~m"), None);
        assert_eq!(unescape_component(".x"), None);
    }
}
