//! Where requests go: the endpoint URL, addressing style, and bucket/key validation.

use thiserror::Error;

use crate::uri;

/// URL scheme of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain TCP, default port 80.
    Http,
    /// TLS, default port 443.
    Https,
}

impl Scheme {
    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }
}

/// How the bucket is named in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressingStyle {
    /// `host/bucket/key`: works with every server, required for IP hosts.
    Path,
    /// `bucket.host/key`: what AWS prefers.
    VirtualHost,
    /// The AWS SDK rule: path style for IP-address hosts, `localhost`, bucket names that are not
    /// DNS labels and (over https) dotted bucket names, which a wildcard certificate cannot
    /// cover; virtual-host otherwise.
    #[default]
    Auto,
}

/// A URL that cannot be an S3 endpoint.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EndpointError {
    /// Not `http://` or `https://`.
    #[error("endpoint URL must start with http:// or https://")]
    Scheme,
    /// Empty or invalid host name.
    #[error("invalid endpoint host")]
    Host,
    /// Port not in 1..=65535.
    #[error("invalid endpoint port")]
    Port,
    /// A path other than `/`, a query, a fragment or user info.
    #[error("endpoint URL may not have a path, query, fragment or user info")]
    Path,
}

/// Why a request could not be built.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BuildError {
    /// Bucket names: 3–63 bytes of `a-z 0-9 . -`, starting and ending with a letter or digit,
    /// no `..`, not an IPv4 address.
    #[error("invalid bucket name {0:?}")]
    InvalidBucket(String),
    /// Keys: 1..=1024 bytes of UTF-8.
    #[error("invalid object key (must be 1..=1024 bytes)")]
    InvalidKey,
    /// Part numbers run from 1 to 10000.
    #[error("invalid part number {0} (must be 1..=10000)")]
    InvalidPartNumber(u32),
    /// Complete needs 1..=10000 parts in strictly ascending order.
    #[error("invalid part list: {0}")]
    InvalidPartList(&'static str),
    /// An empty upload id.
    #[error("empty upload id")]
    InvalidUploadId,
    /// A region that is not `[a-z0-9-]+`.
    #[error("invalid region {0:?}")]
    InvalidRegion(String),
    /// An option S3 would reject or that could never be useful (e.g. `max_keys` outside 1..=1000).
    #[error("invalid option: {0}")]
    InvalidOption(&'static str),
}

/// A parsed S3 endpoint URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Lower-cased host name, or an IP literal (IPv6 in brackets, as in the URL).
    pub host: String,
    /// Port, the scheme's default when the URL names none.
    pub port: u16,
    /// Addressing style used by [`Endpoint::object_location`].
    pub style: AddressingStyle,
}

impl Endpoint {
    /// Parses `scheme://host[:port][/]` (e.g. `http://127.0.0.1:9000`,
    /// `https://s3.us-east-1.amazonaws.com`) with [`AddressingStyle::Auto`].
    pub fn parse(url: &str) -> Result<Self, EndpointError> {
        let (scheme, rest) = if let Some(r) = strip_prefix_ci(url, "http://") {
            (Scheme::Http, r)
        } else if let Some(r) = strip_prefix_ci(url, "https://") {
            (Scheme::Https, r)
        } else {
            return Err(EndpointError::Scheme);
        };
        let authority = match rest.find('/') {
            Some(i) => {
                if rest.get(i..) != Some("/") {
                    return Err(EndpointError::Path);
                }
                rest.get(..i).unwrap_or_default()
            }
            None => rest,
        };
        if authority.contains(['?', '#', '@']) {
            return Err(EndpointError::Path);
        }
        let (host, port) = split_host_port(authority)?;
        let port = match port {
            Some(p) => parse_port(p)?,
            None => scheme.default_port(),
        };
        let host = host.to_ascii_lowercase();
        if !valid_host(&host) {
            return Err(EndpointError::Host);
        }
        Ok(Self {
            scheme,
            host,
            port,
            style: AddressingStyle::Auto,
        })
    }

    /// The same endpoint with another addressing style.
    pub fn with_style(mut self, style: AddressingStyle) -> Self {
        self.style = style;
        self
    }

    /// Whether the host is an IP literal or `localhost` (never virtual-hosted).
    pub fn host_is_ip_or_localhost(&self) -> bool {
        self.host.starts_with('[')
            || self.host.parse::<std::net::Ipv4Addr>().is_ok()
            || self.host == "localhost"
            || self.host.ends_with(".localhost")
    }

    /// Whether requests for `bucket` use virtual-host addressing under this endpoint's style.
    pub fn uses_virtual_host(&self, bucket: &str) -> bool {
        match self.style {
            AddressingStyle::Path => false,
            AddressingStyle::VirtualHost => true,
            AddressingStyle::Auto => {
                !self.host_is_ip_or_localhost()
                    && is_dns_compatible(bucket)
                    && !(self.scheme == Scheme::Https && bucket.contains('.'))
            }
        }
    }

    /// The host to connect to (DNS name or IP literal, no port) and to name in TLS SNI.
    pub fn connect_host(&self, bucket: Option<&str>) -> String {
        match bucket {
            Some(b) if self.uses_virtual_host(b) => format!("{b}.{}", self.host),
            _ => self.host.clone(),
        }
    }

    /// The `Host` header for a request to `bucket` (or the service when `None`): `:port` only
    /// when it is not the scheme's default.
    pub fn host_header(&self, bucket: Option<&str>) -> String {
        let host = self.connect_host(bucket);
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// `(host_header, encoded_path)` for an object.
    pub fn object_location(&self, bucket: &str, key: &str) -> Result<(String, String), BuildError> {
        validate_bucket(bucket)?;
        validate_key(key)?;
        let encoded = uri::encode_path(key);
        let path = if self.uses_virtual_host(bucket) {
            format!("/{encoded}")
        } else {
            format!("/{bucket}/{encoded}")
        };
        Ok((self.host_header(Some(bucket)), path))
    }

    /// `(host_header, encoded_path)` for a bucket-level request (list, create bucket).
    pub fn bucket_location(&self, bucket: &str) -> Result<(String, String), BuildError> {
        validate_bucket(bucket)?;
        let path = if self.uses_virtual_host(bucket) {
            "/".to_owned()
        } else {
            format!("/{bucket}")
        };
        Ok((self.host_header(Some(bucket)), path))
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s.get(prefix.len()..))
        .flatten()
}

fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), EndpointError> {
    if authority.starts_with('[') {
        let close = authority.find(']').ok_or(EndpointError::Host)?;
        let host = authority.get(..=close).ok_or(EndpointError::Host)?;
        let rest = authority.get(close + 1..).unwrap_or_default();
        return match rest.strip_prefix(':') {
            Some(p) => Ok((host, Some(p))),
            None if rest.is_empty() => Ok((host, None)),
            None => Err(EndpointError::Host),
        };
    }
    Ok(match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    })
}

fn parse_port(p: &str) -> Result<u16, EndpointError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(EndpointError::Port);
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(EndpointError::Port),
        Ok(n) => Ok(n),
    }
}

fn valid_host(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Checks an S3 bucket name (the current AWS rules, without the legacy us-east-1 exceptions).
pub fn validate_bucket(bucket: &str) -> Result<(), BuildError> {
    let bytes = bucket.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let ok = (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && !bucket.contains("..")
        && bucket.parse::<std::net::Ipv4Addr>().is_err();
    if ok {
        Ok(())
    } else {
        Err(BuildError::InvalidBucket(bucket.to_owned()))
    }
}

/// Whether `bucket` is a valid name whose labels are all DNS labels (no `.-`, `-.`), so it
/// can prefix a host name.
pub fn is_dns_compatible(bucket: &str) -> bool {
    validate_bucket(bucket).is_ok() && !bucket.contains(".-") && !bucket.contains("-.")
}

/// Checks an object key: 1..=1024 bytes (a `&str` is UTF-8 already).
pub fn validate_key(key: &str) -> Result<(), BuildError> {
    if (1..=1024).contains(&key.len()) {
        Ok(())
    } else {
        Err(BuildError::InvalidKey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let e = Endpoint::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(
            (e.scheme, e.host.as_str(), e.port),
            (Scheme::Http, "127.0.0.1", 9000)
        );
        let e = Endpoint::parse("HTTPS://S3.us-east-1.AmazonAWS.com/").unwrap();
        assert_eq!(
            (e.scheme, e.host.as_str(), e.port),
            (Scheme::Https, "s3.us-east-1.amazonaws.com", 443)
        );
        let e = Endpoint::parse("http://[::1]:8080").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("[::1]", 8080));
        assert_eq!(Endpoint::parse("ftp://x"), Err(EndpointError::Scheme));
        assert_eq!(Endpoint::parse("http://"), Err(EndpointError::Host));
        assert_eq!(Endpoint::parse("http://a..b"), Err(EndpointError::Host));
        assert_eq!(Endpoint::parse("http://h:0"), Err(EndpointError::Port));
        assert_eq!(Endpoint::parse("http://h:65536"), Err(EndpointError::Port));
        assert_eq!(Endpoint::parse("http://h:"), Err(EndpointError::Port));
        assert_eq!(Endpoint::parse("http://h/prefix"), Err(EndpointError::Path));
        assert_eq!(Endpoint::parse("http://u@h"), Err(EndpointError::Path));
        assert_eq!(Endpoint::parse("http://h?x"), Err(EndpointError::Path));
        assert_eq!(Endpoint::parse("http://[::1"), Err(EndpointError::Host));
        assert_eq!(Endpoint::parse("http://[zz]"), Err(EndpointError::Host));
    }

    #[test]
    fn addressing() {
        let local = Endpoint::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(
            local.object_location("bkt", "a b/c+d").unwrap(),
            ("127.0.0.1:9000".to_owned(), "/bkt/a%20b/c%2Bd".to_owned())
        );
        assert_eq!(
            local.bucket_location("bkt").unwrap(),
            ("127.0.0.1:9000".to_owned(), "/bkt".to_owned())
        );
        let aws = Endpoint::parse("https://s3.us-east-1.amazonaws.com").unwrap();
        assert_eq!(
            aws.object_location("bkt", "k").unwrap(),
            ("bkt.s3.us-east-1.amazonaws.com".to_owned(), "/k".to_owned())
        );
        assert_eq!(aws.bucket_location("bkt").unwrap().1, "/");
        assert_eq!(
            aws.object_location("my.bkt", "k").unwrap().0,
            "s3.us-east-1.amazonaws.com"
        );
        let plain = Endpoint::parse("http://s3.example.com:8000").unwrap();
        assert_eq!(
            plain.object_location("my.bkt", "k").unwrap().0,
            "my.bkt.s3.example.com:8000"
        );
        assert_eq!(plain.connect_host(Some("my.bkt")), "my.bkt.s3.example.com");
        let forced = plain.clone().with_style(AddressingStyle::Path);
        assert_eq!(
            forced.object_location("b-k", "k").unwrap(),
            ("s3.example.com:8000".into(), "/b-k/k".into())
        );
        assert!(
            !Endpoint::parse("http://localhost:9000")
                .unwrap()
                .uses_virtual_host("bkt")
        );
    }

    #[test]
    fn validation() {
        for ok in ["abc", "a.b-c", "0123456789", &"a".repeat(63)] {
            assert!(validate_bucket(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            "Abc",
            "a_b",
            "-ab",
            "ab-",
            "a..b",
            "192.168.1.1",
            &"a".repeat(64),
            "ab/",
        ] {
            assert!(validate_bucket(bad).is_err(), "{bad}");
        }
        assert!(!is_dns_compatible("a.-b"));
        assert!(validate_key("").is_err());
        assert!(validate_key(&"k".repeat(1025)).is_err());
        assert!(validate_key(&"é".repeat(512)).is_ok());
    }
}
