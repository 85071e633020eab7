//! Parsing and formatting the `Authorization: AWS4-HMAC-SHA256 ...` header.
//!
//! The parser is the gateway's first contact with a peer's credentials, so it is strict and
//! bounded: a fixed grammar, each component exactly once, hard limits on every length and count.

use super::error::VerifyError;
use super::hex;
use super::sign::ALGORITHM;

/// Longest `Authorization` value accepted.
pub const MAX_AUTHORIZATION_LEN: usize = 8192;
/// Most signed headers accepted.
pub const MAX_SIGNED_HEADERS: usize = 128;
/// Longest signed header name accepted.
pub const MAX_HEADER_NAME_LEN: usize = 256;
/// Longest access key id accepted.
pub const MAX_ACCESS_KEY_LEN: usize = 256;
/// Longest region or service name accepted.
pub const MAX_SCOPE_PART_LEN: usize = 64;

/// The components of a SigV4 `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParsedAuthorization {
    /// Access key id from the credential.
    pub access_key: String,
    /// `YYYYMMDD` from the credential scope.
    pub date: String,
    /// Region from the credential scope.
    pub region: String,
    /// Service from the credential scope.
    pub service: String,
    /// Signed header names: lower-case, strictly ascending.
    pub signed_headers: Vec<String>,
    /// 64 lower-case hex digits.
    pub signature: String,
}

impl ParsedAuthorization {
    /// `YYYYMMDD/region/service/aws4_request`.
    pub fn scope(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.date, self.region, self.service
        )
    }

    /// The header value in the form our signer emits (`, ` between components).
    pub fn to_header_value(&self) -> String {
        format!(
            "{ALGORITHM} Credential={}/{}, SignedHeaders={}, Signature={}",
            self.access_key,
            self.scope(),
            self.signed_headers.join(";"),
            self.signature
        )
    }
}

/// The parts of `AK/YYYYMMDD/region/service/aws4_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credential {
    pub access_key: String,
    pub date: String,
    pub region: String,
    pub service: String,
}

fn malformed(why: &'static str) -> VerifyError {
    VerifyError::MalformedAuthorization(why)
}

fn scope_part_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SCOPE_PART_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Parses a credential `AK/YYYYMMDD/region/service/aws4_request`.
pub(crate) fn parse_credential(s: &str) -> Result<Credential, VerifyError> {
    let mut it = s.split('/');
    let (Some(ak), Some(date), Some(region), Some(service), Some(term), None) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) else {
        return Err(malformed(
            "credential is not AK/date/region/service/aws4_request",
        ));
    };
    if ak.is_empty()
        || ak.len() > MAX_ACCESS_KEY_LEN
        || ak
            .bytes()
            .any(|b| !b.is_ascii_graphic() || matches!(b, b',' | b'=' | b';'))
    {
        return Err(malformed(
            "credential access key is empty, too long or has invalid bytes",
        ));
    }
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("credential date is not YYYYMMDD"));
    }
    if !scope_part_ok(region) || !scope_part_ok(service) {
        return Err(malformed("credential region or service is invalid"));
    }
    if term != "aws4_request" {
        return Err(malformed("credential does not end in aws4_request"));
    }
    Ok(Credential {
        access_key: ak.to_owned(),
        date: date.to_owned(),
        region: region.to_owned(),
        service: service.to_owned(),
    })
}

/// Parses `a;b;c`: lower-case token names, strictly ascending, bounded.
pub(crate) fn parse_signed_headers(s: &str) -> Result<Vec<String>, VerifyError> {
    let mut out: Vec<String> = Vec::new();
    for name in s.split(';') {
        if out.len() >= MAX_SIGNED_HEADERS {
            return Err(malformed("too many signed headers"));
        }
        let ok = !name.is_empty()
            && name.len() <= MAX_HEADER_NAME_LEN
            && name.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b)
            });
        if !ok {
            return Err(malformed(
                "signed header name is empty, too long or not a lower-case token",
            ));
        }
        if out.last().is_some_and(|prev| prev.as_str() >= name) {
            return Err(malformed("signed headers are not strictly ascending"));
        }
        out.push(name.to_owned());
    }
    Ok(out)
}

/// Parses a signature: exactly 64 lower-case hex digits.
pub(crate) fn parse_signature(s: &str) -> Result<String, VerifyError> {
    if hex::decode_signature(s).is_none() {
        return Err(malformed("signature is not 64 lower-case hex digits"));
    }
    Ok(s.to_owned())
}

/// Parses an `Authorization` header value.
///
/// Grammar: `AWS4-HMAC-SHA256 SP Credential=<cred>, SignedHeaders=<list>, Signature=<hex>`,
/// components in any order, each exactly once, separated by `,` with optional spaces.
pub fn parse_authorization(header: &str) -> Result<ParsedAuthorization, VerifyError> {
    if header.len() > MAX_AUTHORIZATION_LEN {
        return Err(malformed("authorization header too long"));
    }
    let header = header.trim_matches(' ');
    let (algorithm, rest) = header
        .split_once(' ')
        .ok_or_else(|| malformed("no space after the algorithm"))?;
    if algorithm != ALGORITHM {
        if algorithm.is_empty()
            || !algorithm.bytes().all(|b| b.is_ascii_graphic())
            || algorithm.len() > 64
        {
            return Err(malformed("algorithm is not a token"));
        }
        return Err(VerifyError::UnsupportedAlgorithm(algorithm.to_owned()));
    }
    let (mut cred, mut signed, mut sig) = (None, None, None);
    for part in rest.split(',') {
        let part = part.trim_matches(' ');
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| malformed("component is not name=value"))?;
        let slot = match name {
            "Credential" => &mut cred,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut sig,
            _ => return Err(malformed("unknown component")),
        };
        if slot.replace(value).is_some() {
            return Err(malformed("component given twice"));
        }
    }
    let cred = parse_credential(cred.ok_or_else(|| malformed("missing Credential"))?)?;
    let signed_headers =
        parse_signed_headers(signed.ok_or_else(|| malformed("missing SignedHeaders"))?)?;
    let signature = parse_signature(sig.ok_or_else(|| malformed("missing Signature"))?)?;
    Ok(ParsedAuthorization {
        access_key: cred.access_key,
        date: cred.date,
        region: cred.region,
        service: cred.service,
        signed_headers,
        signature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const AWS: &str = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";

    #[test]
    fn parses_the_aws_example_and_round_trips() {
        let p = parse_authorization(AWS).unwrap();
        assert_eq!(p.access_key, "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(p.date, "20130524");
        assert_eq!((p.region.as_str(), p.service.as_str()), ("us-east-1", "s3"));
        assert_eq!(
            p.signed_headers,
            ["host", "range", "x-amz-content-sha256", "x-amz-date"]
        );
        assert_eq!(parse_authorization(&p.to_header_value()).unwrap(), p);
    }

    #[test]
    fn rejects_malformed() {
        let sig = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let cases = [
            String::new(),
            "AWS4-HMAC-SHA256".into(),
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host"
                .into(),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature={sig}, Signature={sig}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=x;host, Signature={sig}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;host, Signature={sig}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=Host, Signature={sig}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/2013052/us-east-1/s3/aws4_request, SignedHeaders=host, Signature={sig}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws5_request, SignedHeaders=host, Signature={sig}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request/x, SignedHeaders=host, Signature={sig}"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature={}",
                sig.to_uppercase()
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature={sig}, Foo=bar"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature={sig},"
            ),
            format!(
                "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders={}, Signature={sig}",
                vec!["a"; 200].join(";")
            ),
            "x".repeat(MAX_AUTHORIZATION_LEN + 1),
        ];
        for c in &cases {
            assert!(parse_authorization(c).is_err(), "{c:?}");
        }
        assert!(matches!(
            parse_authorization("AWS4-ECDSA-P256-SHA256 Credential=x"),
            Err(VerifyError::UnsupportedAlgorithm(_))
        ));
    }
}
