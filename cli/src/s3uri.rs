//! `s3://bucket/key` arguments.

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
}
