//! Conditional requests with S3's precedence (RFC 9110 §13.2.2): `If-Match`, then (only
//! without it) `If-Unmodified-Since`, then `If-None-Match`, then (only without it)
//! `If-Modified-Since`. On GET and HEAD a failed `If-None-Match`/`If-Modified-Since` is
//! 304 Not Modified and the others 412; on a copy source (`x-amz-copy-source-if-*`) every
//! failure is 412; on PUT `If-None-Match` (`*` or ETags) and `If-Match`.

use crate::backend::{ObjectInfo, etag_eq};
use crate::error::ApiError;
use crate::time::parse_http_date;

/// The conditions of one request (or of its copy source).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    /// `If-Match`: ETags (or `*`).
    pub if_match: Option<String>,
    /// `If-None-Match`: ETags (or `*`).
    pub if_none_match: Option<String>,
    /// `If-Modified-Since`, Unix seconds (an unparsable date is ignored).
    pub if_modified_since: Option<u64>,
    /// `If-Unmodified-Since`, Unix seconds.
    pub if_unmodified_since: Option<u64>,
}

/// Why a condition did not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// 304 Not Modified (GET/HEAD, `If-None-Match` or `If-Modified-Since`).
    NotModified,
    /// 412 Precondition Failed, naming the header.
    Precondition(&'static str),
}

fn list_matches(list: &str, etag: &str) -> bool {
    list.split(',')
        .any(|t| t.trim() == "*" || etag_eq(t.trim().trim_start_matches("W/"), etag))
}

impl Conditions {
    /// Reads `<prefix>if-match` and the others from `header` (prefix `""` for the request's
    /// own, `"x-amz-copy-source-"` for a copy source).
    pub fn from_headers<'h>(header: impl Fn(&str) -> Option<&'h str>, prefix: &str) -> Self {
        let get = |n: &str| header(&format!("{prefix}{n}")).map(|v| v.trim().to_owned());
        Self {
            if_match: get("if-match"),
            if_none_match: get("if-none-match"),
            if_modified_since: get("if-modified-since").and_then(|d| parse_http_date(&d)),
            if_unmodified_since: get("if-unmodified-since").and_then(|d| parse_http_date(&d)),
        }
    }

    /// Whether any condition was given.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Evaluates against an existing object.
    pub fn evaluate(&self, etag: &str, last_modified: u64) -> Result<(), Failed> {
        match &self.if_match {
            Some(m) if !list_matches(m, etag) => return Err(Failed::Precondition("If-Match")),
            Some(_) => {}
            None => {
                if self.if_unmodified_since.is_some_and(|t| last_modified > t) {
                    return Err(Failed::Precondition("If-Unmodified-Since"));
                }
            }
        }
        match &self.if_none_match {
            Some(m) if list_matches(m, etag) => return Err(Failed::NotModified),
            Some(_) => {}
            None => {
                if self.if_modified_since.is_some_and(|t| last_modified <= t) {
                    return Err(Failed::NotModified);
                }
            }
        }
        Ok(())
    }

    /// For GET and HEAD: 304 (with the object's ETag and Last-Modified) or 412.
    pub fn check_read(&self, info: &ObjectInfo) -> Result<(), ApiError> {
        self.evaluate(&info.etag, info.last_modified)
            .map_err(|f| match f {
                Failed::NotModified => not_modified(info),
                Failed::Precondition(h) => precondition_failed(h),
            })
    }

    /// For a copy source: every failure is 412.
    pub fn check_copy_source(&self, info: &ObjectInfo) -> Result<(), ApiError> {
        self.evaluate(&info.etag, info.last_modified)
            .map_err(|f| match f {
                Failed::NotModified if self.if_none_match.is_some() => {
                    precondition_failed("x-amz-copy-source-If-None-Match")
                }
                Failed::NotModified => precondition_failed("x-amz-copy-source-If-Modified-Since"),
                Failed::Precondition(h) => precondition_failed(h),
            })
    }

    /// For PUT (PutObject, CompleteMultipartUpload, CopyObject's destination): `existing` is
    /// the object now under the key. `If-None-Match` fails (412) when one exists and the
    /// value is `*` or lists its ETag (quoted or not); `If-Match` fails when none exists
    /// (404) or its ETag differs (412).
    pub fn check_write(&self, existing: Option<&ObjectInfo>, key: &str) -> Result<(), ApiError> {
        if let (Some(m), Some(info)) = (&self.if_none_match, existing)
            && list_matches(m, &info.etag)
        {
            return Err(precondition_failed("If-None-Match"));
        }
        if let Some(m) = &self.if_match {
            match existing {
                None => return Err(ApiError::no_such_key(key)),
                Some(info) if !list_matches(m, &info.etag) => {
                    return Err(precondition_failed("If-Match"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// 412 PreconditionFailed naming the condition.
pub fn precondition_failed(condition: &str) -> ApiError {
    ApiError::new(
        412,
        "PreconditionFailed",
        "At least one of the pre-conditions you specified did not hold",
    )
    .with_detail("Condition", condition.to_owned())
}

/// The 304 answer (no body), carried as an error until the handler writes it.
pub fn not_modified(info: &ObjectInfo) -> ApiError {
    ApiError::new(304, "NotModified", "Not Modified")
        .with_header("ETag", info.etag.clone())
        .with_header("Last-Modified", crate::time::http_date(info.last_modified))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(im: Option<&str>, inm: Option<&str>, ims: Option<u64>, ius: Option<u64>) -> Conditions {
        Conditions {
            if_match: im.map(str::to_owned),
            if_none_match: inm.map(str::to_owned),
            if_modified_since: ims,
            if_unmodified_since: ius,
        }
    }

    #[test]
    fn s3_precedence() {
        let (etag, t) = ("\"abc\"", 1000);
        assert_eq!(c(None, None, None, None).evaluate(etag, t), Ok(()));
        assert_eq!(
            c(Some("\"x\""), None, None, None).evaluate(etag, t),
            Err(Failed::Precondition("If-Match"))
        );
        // If-Match true wins over a failing If-Unmodified-Since.
        assert_eq!(
            c(Some("abc"), None, None, Some(10)).evaluate(etag, t),
            Ok(())
        );
        assert_eq!(
            c(None, None, None, Some(10)).evaluate(etag, t),
            Err(Failed::Precondition("If-Unmodified-Since"))
        );
        assert_eq!(
            c(None, Some("\"abc\""), None, None).evaluate(etag, t),
            Err(Failed::NotModified)
        );
        // If-None-Match not matching wins over If-Modified-Since.
        assert_eq!(
            c(None, Some("\"zz\""), Some(5000), None).evaluate(etag, t),
            Ok(())
        );
        assert_eq!(
            c(None, None, Some(5000), None).evaluate(etag, t),
            Err(Failed::NotModified)
        );
        assert_eq!(c(None, None, Some(10), None).evaluate(etag, t), Ok(()));
        assert_eq!(c(Some("*"), None, None, None).evaluate(etag, t), Ok(()));
    }

    #[test]
    fn writes() {
        let info = ObjectInfo {
            etag: "\"e\"".into(),
            ..Default::default()
        };
        let star = c(None, Some("*"), None, None);
        assert_eq!(star.check_write(None, "k"), Ok(()));
        assert_eq!(star.check_write(Some(&info), "k").unwrap_err().status, 412);
        let m = c(Some("\"e\""), None, None, None);
        assert_eq!(m.check_write(Some(&info), "k"), Ok(()));
        assert_eq!(m.check_write(None, "k").unwrap_err().status, 404);
        let wrong = c(Some("\"f\""), None, None, None);
        assert_eq!(wrong.check_write(Some(&info), "k").unwrap_err().status, 412);
    }
}
