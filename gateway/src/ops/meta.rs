//! Object metadata S3 stores with an object and returns on GET and HEAD: user metadata
//! (`x-amz-meta-*`, at most 2 KB as S3 counts it) and the standard representation headers
//! `Cache-Control`, `Expires`, `Content-Disposition`, `Content-Encoding` (less the
//! `aws-chunked` transfer coding) and `Content-Language`.

use crate::error::ApiError;

/// Standard headers stored verbatim.
pub const STORED_STANDARD: &[&str] = &[
    "cache-control",
    "expires",
    "content-disposition",
    "content-encoding",
    "content-language",
];

/// S3's limit on user metadata: names and values of every `x-amz-meta-*` together.
pub const MAX_USER_METADATA: usize = 2048;

/// The headers of a request that become stored metadata, names lower-cased, in request
/// order. `MetadataTooLarge` past 2 KB of user metadata.
pub fn stored_headers(headers: &[(String, String)]) -> Result<Vec<(String, String)>, ApiError> {
    let mut out = Vec::new();
    let mut user = 0usize;
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let value = value.trim();
        if let Some(rest) = lower.strip_prefix("x-amz-meta-") {
            user += rest.len() + value.len();
            if user > MAX_USER_METADATA {
                return Err(ApiError::new(
                    400,
                    "MetadataTooLarge",
                    "Your metadata headers exceed the maximum allowed metadata size.",
                )
                .with_detail("MaxSizeAllowed", MAX_USER_METADATA.to_string()));
            }
            out.push((lower, value.to_owned()));
        } else if lower == "content-encoding" {
            let rest: Vec<&str> = value
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked"))
                .collect();
            if !rest.is_empty() {
                out.push((lower, rest.join(", ")));
            }
        } else if STORED_STANDARD.contains(&lower.as_str()) {
            out.push((lower, value.to_owned()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn keeps_user_and_standard_headers_only() {
        let got = stored_headers(&h(&[
            ("X-Amz-Meta-Color", " blue "),
            ("Content-Encoding", "aws-chunked,gzip"),
            ("Cache-Control", "no-cache"),
            ("Authorization", "x"),
            ("Content-Type", "text/plain"),
        ]))
        .unwrap();
        assert_eq!(
            got,
            h(&[
                ("x-amz-meta-color", "blue"),
                ("content-encoding", "gzip"),
                ("cache-control", "no-cache")
            ])
        );
        assert!(
            stored_headers(&h(&[("Content-Encoding", "aws-chunked")]))
                .unwrap()
                .is_empty()
        );
        let big = "v".repeat(MAX_USER_METADATA);
        assert_eq!(
            stored_headers(&h(&[("x-amz-meta-a", &big)]))
                .unwrap_err()
                .code,
            "MetadataTooLarge"
        );
    }
}
