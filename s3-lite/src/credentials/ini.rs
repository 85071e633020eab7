//! The AWS shared-file format (`~/.aws/credentials`, `~/.aws/config`).
//!
//! A small INI dialect: `[section]` headers, `key = value` lines split at the first `=`, full
//! line comments starting with `#` or `;`, blank lines ignored, no inline comments (secrets may
//! contain `#`). An indented line after `key =` with an empty value is a sub-property
//! (`s3 =` / `  endpoint_url = ...`, used by `[services x]` sections), stored as `key.sub`.
//! Later duplicate keys and sections override earlier ones, as the AWS CLI does.

use std::path::Path;

use super::error::CredentialsError;

/// Largest shared file read (hostile or mistaken multi-GB files are refused, not loaded).
pub const MAX_FILE_LEN: u64 = 1024 * 1024;

/// One `key = value` with the line it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// The value, trimmed.
    pub value: String,
    /// 1-based line number.
    pub line: usize,
}

/// One section: its name as written between the brackets (trimmed) and its keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Section {
    /// Keys in file order; lookups take the last occurrence.
    pub entries: Vec<(String, Value)>,
}

impl Section {
    /// The last value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// A parsed shared file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IniFile {
    /// Sections in file order; names are as written (e.g. `profile dev`).
    pub sections: Vec<(String, Section)>,
}

impl IniFile {
    /// The merged section called `name` (all occurrences, later keys winning).
    pub fn section(&self, name: &str) -> Option<Section> {
        let mut found: Option<Section> = None;
        for (n, s) in &self.sections {
            if n == name {
                found
                    .get_or_insert_with(Section::default)
                    .entries
                    .extend(s.entries.iter().cloned());
            }
        }
        found
    }
}

/// Parses `text`, naming `path` in errors.
pub fn parse(text: &str, path: &Path) -> Result<IniFile, CredentialsError> {
    let err = |line: usize, reason: &'static str| CredentialsError::Parse {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let mut file = IniFile::default();
    // The key whose value was empty, for sub-properties and continuation lines.
    let mut parent: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        let indented = raw.starts_with([' ', '\t']);
        if trimmed.starts_with('[') && !indented {
            let Some(inner) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
                return Err(err(line_no, "unterminated section header"));
            };
            let name = inner.trim();
            if name.is_empty() {
                return Err(err(line_no, "empty section name"));
            }
            file.sections.push((name.to_owned(), Section::default()));
            parent = None;
            continue;
        }
        let Some((_, section)) = file.sections.last_mut() else {
            return Err(err(line_no, "key outside of any [section]"));
        };
        if indented && let Some(p) = &parent {
            let (k, v) = trimmed
                .split_once('=')
                .ok_or_else(|| err(line_no, "indented line is not `key = value`"))?;
            let key = format!("{p}.{}", k.trim());
            section.entries.push((
                key,
                Value {
                    value: v.trim().to_owned(),
                    line: line_no,
                },
            ));
            continue;
        }
        let (k, v) = trimmed
            .split_once('=')
            .ok_or_else(|| err(line_no, "line is not `key = value`"))?;
        let key = k.trim();
        if key.is_empty() {
            return Err(err(line_no, "empty key"));
        }
        let value = v.trim();
        parent = value.is_empty().then(|| key.to_owned());
        section.entries.push((
            key.to_owned(),
            Value {
                value: value.to_owned(),
                line: line_no,
            },
        ));
    }
    Ok(file)
}

/// Reads and parses `path`; `Ok(None)` when it does not exist.
pub fn load(path: &Path) -> Result<Option<IniFile>, CredentialsError> {
    use std::io::Read;
    let io_err = |e: std::io::Error| CredentialsError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(e)),
    };
    let mut bytes = Vec::new();
    f.take(MAX_FILE_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_FILE_LEN {
        return Err(CredentialsError::FileTooLarge {
            path: path.to_path_buf(),
            limit: MAX_FILE_LEN,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| CredentialsError::Parse {
        path: path.to_path_buf(),
        line: 0,
        reason: "file is not UTF-8",
    })?;
    parse(&text, path).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sections_comments_and_sub_properties() {
        let text = "# top\n[default]\naws_access_key_id = AK \n; c\n  \n[services s]\ns3 =\n  endpoint_url = http://x:9000\n[default]\nregion=eu-west-1\n";
        let f = parse(text, Path::new("f")).unwrap();
        let d = f.section("default").unwrap();
        assert_eq!(d.get("aws_access_key_id").unwrap().value, "AK");
        assert_eq!(d.get("aws_access_key_id").unwrap().line, 3);
        assert_eq!(d.get("region").unwrap().value, "eu-west-1");
        assert_eq!(
            f.section("services s")
                .unwrap()
                .get("s3.endpoint_url")
                .unwrap()
                .value,
            "http://x:9000"
        );
    }

    #[test]
    fn errors_name_the_line() {
        let p = Path::new("/tmp/creds");
        assert_eq!(
            parse("key = v\n", p),
            Err(CredentialsError::Parse {
                path: p.into(),
                line: 1,
                reason: "key outside of any [section]"
            })
        );
        assert!(matches!(
            parse("[a]\n[b\n", p),
            Err(CredentialsError::Parse { line: 2, .. })
        ));
        assert!(matches!(
            parse("[a]\nnovalue\n", p),
            Err(CredentialsError::Parse { line: 2, .. })
        ));
        assert!(matches!(
            parse("[ ]\n", p),
            Err(CredentialsError::Parse { line: 1, .. })
        ));
    }
}
