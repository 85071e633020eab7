//! Addressing: which bucket and key a request names (path-style and virtual-host style), and
//! its query parameters.

use s3_lite::uri;

use crate::error::ApiError;

/// The resource a request names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// Bucket, when named.
    pub bucket: Option<String>,
    /// Key (decoded), when named.
    pub key: Option<String>,
}

fn invalid_uri() -> ApiError {
    ApiError::new(400, "InvalidURI", "Couldn't parse the specified URI.")
}

/// Resolves the target: virtual-host style when the `Host` (without port) is
/// `<bucket>.<vhost_suffix>`, path-style otherwise.
pub fn route(
    path: &str,
    host: Option<&str>,
    vhost_suffix: Option<&str>,
) -> Result<Target, ApiError> {
    let decoded = uri::decode_utf8(path).map_err(|_| invalid_uri())?;
    let rest = decoded.strip_prefix('/').ok_or_else(invalid_uri)?;
    let host_name = host.map(|h| strip_port(h.trim()).to_ascii_lowercase());
    if let (Some(h), Some(suffix)) = (host_name.as_deref(), vhost_suffix) {
        let suffix = suffix.trim_start_matches('.').to_ascii_lowercase();
        if let Some(bucket) = h
            .strip_suffix(&suffix)
            .and_then(|b| b.strip_suffix('.'))
            .filter(|b| !b.is_empty())
        {
            return Ok(Target {
                bucket: Some(bucket.to_owned()),
                key: Some(rest.to_owned()).filter(|k| !k.is_empty()),
            });
        }
    }
    if rest.is_empty() {
        return Ok(Target::default());
    }
    let (bucket, key) = match rest.split_once('/') {
        Some((b, k)) => (b, Some(k.to_owned()).filter(|k| !k.is_empty())),
        None => (rest, None),
    };
    Ok(Target {
        bucket: Some(bucket.to_owned()),
        key,
    })
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(h, _)| h.get(1..).unwrap_or(h));
    }
    host.rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(h, _)| h)
}

/// Decoded query parameters, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parses an encoded query string (`+` is a literal plus, as S3 signs it).
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        for piece in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = piece.split_once('=').unwrap_or((piece, ""));
            out.push((
                uri::decode_utf8(k).map_err(|_| invalid_uri())?,
                uri::decode_utf8(v).map_err(|_| invalid_uri())?,
            ));
            if out.len() > 64 {
                return Err(ApiError::invalid_argument("too many query parameters"));
            }
        }
        Ok(Self(out))
    }

    /// First value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `key` is present (with or without a value).
    pub fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_virtual_host() {
        let t = route("/b/a%20b/c", Some("127.0.0.1:9000"), Some("s3.local")).unwrap();
        assert_eq!(
            (t.bucket.as_deref(), t.key.as_deref()),
            (Some("b"), Some("a b/c"))
        );
        let t = route("/a/b", Some("bucket.s3.local:9000"), Some("s3.local")).unwrap();
        assert_eq!(
            (t.bucket.as_deref(), t.key.as_deref()),
            (Some("bucket"), Some("a/b"))
        );
        let t = route("/", Some("bucket.S3.local"), Some(".s3.local")).unwrap();
        assert_eq!((t.bucket.as_deref(), t.key), (Some("bucket"), None));
        assert_eq!(
            route("/", Some("s3.local"), Some("s3.local")).unwrap(),
            Target::default()
        );
        assert_eq!(
            route("/b/", None, None).unwrap(),
            Target {
                bucket: Some("b".into()),
                key: None
            }
        );
        assert!(route("/%ff", None, None).is_err());
        let q = Query::parse("list-type=2&prefix=a%2Fb&uploads").unwrap();
        assert_eq!(
            (q.get("prefix"), q.has("uploads"), q.get("x")),
            (Some("a/b"), true, None)
        );
    }
}
