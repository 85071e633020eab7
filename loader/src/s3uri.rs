//! `s3://bucket/key` arguments, and how `put` names an object the way `aws s3 cp` does.

use std::path::Path;

/// A parsed `s3://BUCKET[/KEY]` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Uri {
    /// Bucket name (validated by the server-side rules in `s3_lite::s3` when used).
    pub bucket: String,
    /// Object key or prefix; empty when the URI names only a bucket.
    pub key: String,
}

/// Why an `s3://` argument was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid S3 URI {input:?}: {reason} (expected s3://BUCKET/KEY)")]
pub struct S3UriError {
    /// The argument as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl S3Uri {
    /// Parses `s3://bucket[/key]`.
    pub fn parse(input: &str) -> Result<Self, S3UriError> {
        let err = |reason| S3UriError {
            input: input.to_owned(),
            reason,
        };
        let rest = input
            .strip_prefix("s3://")
            .ok_or_else(|| err("missing s3:// scheme"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(err("empty bucket name"));
        }
        Ok(S3Uri {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }

    /// Parses and requires a non-empty key.
    pub fn parse_object(input: &str) -> Result<Self, S3UriError> {
        let uri = Self::parse(input)?;
        if uri.key.is_empty() {
            return Err(S3UriError {
                input: input.to_owned(),
                reason: "missing object key",
            });
        }
        Ok(uri)
    }

    /// The object that uploading `file` to `input` writes, named as `aws s3 cp` and s5cmd name
    /// it: `s3://BUCKET/KEY` is that key; a destination ending in `/` (`s3://BUCKET/dir/`) or
    /// naming only the bucket (`s3://BUCKET`, `s3://BUCKET/`) gets the file's name appended.
    pub fn parse_upload_dest(input: &str, file: &Path) -> Result<Self, S3UriError> {
        let mut uri = Self::parse(input)?;
        if uri.key.is_empty() || uri.key.ends_with('/') {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| S3UriError {
                    input: input.to_owned(),
                    reason: "the source has no file name to append: name the key (s3://BUCKET/KEY)",
                })?;
            uri.key.push_str(name);
        }
        Ok(uri)
    }
}

impl std::fmt::Display for S3Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_buckets_and_keys() {
        assert_eq!(
            S3Uri::parse("s3://b").unwrap(),
            S3Uri {
                bucket: "b".into(),
                key: "".into()
            }
        );
        assert_eq!(S3Uri::parse("s3://b/a/b c").unwrap().key, "a/b c");
        assert!(S3Uri::parse("b/k").is_err());
        assert!(S3Uri::parse("s3:///k").is_err());
        assert!(S3Uri::parse_object("s3://b/").is_err());
        assert!(S3Uri::parse_object("s3://b").is_err());
    }

    #[test]
    fn upload_destinations_follow_aws_cp() {
        let f = Path::new("/tmp/x/model.bin");
        let key = |d: &str| S3Uri::parse_upload_dest(d, f).unwrap().key;
        assert_eq!(key("s3://b/dir/"), "dir/model.bin");
        assert_eq!(key("s3://b/a/b/"), "a/b/model.bin");
        assert_eq!(key("s3://b/"), "model.bin");
        assert_eq!(key("s3://b"), "model.bin");
        assert_eq!(key("s3://b/dir/other.bin"), "dir/other.bin");
        assert_eq!(key("s3://b/dir"), "dir");
        assert!(S3Uri::parse_upload_dest("s3://b/", Path::new("/")).is_err());
        assert!(S3Uri::parse_upload_dest("b/", f).is_err());
    }
}
