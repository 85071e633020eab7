//! S3's error responses and the errors of parsing S3 responses.

use thiserror::Error;

use super::xml;

/// An S3 response body or header that could not be understood.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The XML body is larger than we accept.
    #[error("XML body of {actual} bytes exceeds the {limit}-byte limit")]
    TooLarge {
        /// The limit in force.
        limit: usize,
        /// The body's size.
        actual: usize,
    },
    /// The XML nests deeper than we accept.
    #[error("XML nests deeper than {limit} levels")]
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// Not well-formed XML (message truncated to 200 bytes).
    #[error("malformed XML: {0}")]
    Malformed(String),
    /// The document's root element is not the one this response should carry.
    #[error("unexpected root element {found:?} (expected {expected})")]
    UnexpectedRoot {
        /// The root this parser wants.
        expected: &'static str,
        /// The root found (truncated to 64 bytes).
        found: String,
    },
    /// A required element is missing or empty.
    #[error("missing element {0}")]
    MissingElement(&'static str),
    /// An element or header with a value that does not parse.
    #[error("invalid value in {0}")]
    InvalidValue(&'static str),
}

/// An error answer from S3: the fields of its `<Error>` document, or values derived from the
/// status when there is no body (HEAD responses never have one).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Error {
    /// HTTP status (200 for an error inside a 200 Complete response).
    pub status: u16,
    /// S3 error code, e.g. `SignatureDoesNotMatch`, `NoSuchKey`.
    pub code: String,
    /// Human-readable message (may be empty).
    pub message: String,
    /// `<RequestId>`, else the `x-amz-request-id` header.
    pub request_id: Option<String>,
    /// `<HostId>`, else the `x-amz-id-2` header.
    pub host_id: Option<String>,
    /// `<Resource>`, when the server names it.
    pub resource: Option<String>,
}

impl S3Error {
    /// An error with just a status, code and message.
    pub fn new(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            request_id: None,
            host_id: None,
            resource: None,
        }
    }

    /// Whether retrying the same request later may succeed (5xx, throttling).
    pub fn is_retryable(&self) -> bool {
        self.status >= 500
            || self.status == 429
            || matches!(
                self.code.as_str(),
                "SlowDown" | "RequestTimeout" | "InternalError" | "ServiceUnavailable"
            )
    }
}

impl std::fmt::Display for S3Error {
    /// One line, as the CLI prints it:
    /// `SignatureDoesNotMatch: The request signature ... (status 403, request id X)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        write!(f, " (status {}", self.status)?;
        if let Some(id) = &self.request_id {
            write!(f, ", request id {id}")?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for S3Error {}

/// Either S3 said no, or its answer could not be parsed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ResponseError {
    /// S3 returned an error document (or an error status). Boxed: it is much larger than the
    /// success values it travels next to.
    #[error(transparent)]
    S3(Box<S3Error>),
    /// The response did not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
}

/// The fields of an `<Error>` document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorDocument {
    /// `<Code>` (never empty in an accepted document).
    pub code: String,
    /// `<Message>`.
    pub message: Option<String>,
    /// `<RequestId>`.
    pub request_id: Option<String>,
    /// `<HostId>`.
    pub host_id: Option<String>,
    /// `<Resource>`.
    pub resource: Option<String>,
}

/// Parses an S3 `<Error>` document (also the `<ErrorResponse><Error>` wrapping some
/// S3-compatible servers use). Unknown elements are ignored.
pub fn parse_error_xml(body: &[u8]) -> Result<ErrorDocument, ParseError> {
    let root = xml::parse(body)?;
    error_document(&root)
}

/// Extracts an error document from an already-parsed root (shared with Complete's 200-error
/// detection).
pub(crate) fn error_document(root: &xml::Element) -> Result<ErrorDocument, ParseError> {
    let (error, outer) = match root.name.as_str() {
        "Error" => (root, None),
        "ErrorResponse" => (
            root.child("Error")
                .ok_or(ParseError::MissingElement("Error"))?,
            Some(root),
        ),
        other => {
            return Err(ParseError::UnexpectedRoot {
                expected: "Error",
                found: other.chars().take(64).collect(),
            });
        }
    };
    let field = |name: &str| {
        error
            .child_text(name)
            .or_else(|| outer.and_then(|o| o.child_text(name)))
            .map(str::to_owned)
    };
    let code = field("Code")
        .filter(|c| !c.is_empty())
        .ok_or(ParseError::MissingElement("Code"))?;
    Ok(ErrorDocument {
        code,
        message: field("Message"),
        request_id: field("RequestId"),
        host_id: field("HostId"),
        resource: field("Resource"),
    })
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The code and message S3 implies by a bare status (no body, e.g. HEAD).
fn status_code(status: u16) -> (&'static str, &'static str) {
    match status {
        301 => ("PermanentRedirect", "Moved Permanently"),
        304 => ("NotModified", "Not Modified"),
        307 => ("TemporaryRedirect", "Temporary Redirect"),
        400 => ("BadRequest", "Bad Request"),
        403 => ("AccessDenied", "Forbidden"),
        404 => ("NoSuchKey", "Not Found"),
        405 => ("MethodNotAllowed", "Method Not Allowed"),
        409 => ("Conflict", "Conflict"),
        411 => ("MissingContentLength", "Length Required"),
        412 => ("PreconditionFailed", "Precondition Failed"),
        416 => ("InvalidRange", "Range Not Satisfiable"),
        429 => ("SlowDown", "Too Many Requests"),
        500 => ("InternalError", "Internal Server Error"),
        501 => ("NotImplemented", "Not Implemented"),
        503 => ("ServiceUnavailable", "Service Unavailable"),
        _ => ("UnknownError", ""),
    }
}

/// Builds the error for a non-success response: from the `<Error>` body when it parses, from
/// the status otherwise. Request and host ids fall back to the `x-amz-request-id` and
/// `x-amz-id-2` headers. Never fails: an unparseable body still yields a status-derived error.
pub fn parse_error(status: u16, headers: &[(String, String)], body: &[u8]) -> S3Error {
    let from_headers = |mut e: S3Error| {
        e.request_id = e
            .request_id
            .or_else(|| header(headers, "x-amz-request-id").map(str::to_owned));
        e.host_id = e
            .host_id
            .or_else(|| header(headers, "x-amz-id-2").map(str::to_owned));
        e
    };
    let has_body = body.iter().any(|b| !b.is_ascii_whitespace());
    match parse_error_xml(body) {
        Ok(doc) => from_headers(S3Error {
            status,
            code: doc.code,
            message: doc.message.unwrap_or_default(),
            request_id: doc.request_id.filter(|s| !s.is_empty()),
            host_id: doc.host_id.filter(|s| !s.is_empty()),
            resource: doc.resource,
        }),
        Err(e) => {
            let (code, reason) = status_code(status);
            let code = if code == "UnknownError" {
                format!("Http{status}")
            } else {
                code.to_owned()
            };
            let message = if has_body {
                format!("{reason} (unparseable error body: {e})")
            } else {
                reason.to_owned()
            };
            from_headers(S3Error::new(status, code, message.trim_start().to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: &[u8] = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided. Check your key and signing method.</Message><AWSAccessKeyId>AKIAIOSFODNN7EXAMPLE</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256&#10;20130524T000000Z</StringToSign><RequestId>4442587FB7D0A2F9</RequestId><HostId>h/Id==</HostId></Error>"#;

    #[test]
    fn signature_mismatch_display() {
        let e = parse_error(403, &[], SIG);
        assert_eq!(e.code, "SignatureDoesNotMatch");
        assert_eq!(e.request_id.as_deref(), Some("4442587FB7D0A2F9"));
        assert_eq!(e.host_id.as_deref(), Some("h/Id=="));
        assert_eq!(
            e.to_string(),
            "SignatureDoesNotMatch: The request signature we calculated does not match the signature you \
             provided. Check your key and signing method. (status 403, request id 4442587FB7D0A2F9)"
        );
    }

    #[test]
    fn status_fallbacks_and_header_ids() {
        let hdrs = vec![
            ("x-amz-request-id".to_owned(), "RID".to_owned()),
            ("x-amz-id-2".to_owned(), "HID".to_owned()),
        ];
        let e = parse_error(404, &hdrs, b"");
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("NoSuchKey", "Not Found")
        );
        assert_eq!(
            (e.request_id.as_deref(), e.host_id.as_deref()),
            (Some("RID"), Some("HID"))
        );
        assert_eq!(
            e.to_string(),
            "NoSuchKey: Not Found (status 404, request id RID)"
        );
        assert_eq!(parse_error(403, &[], b"").code, "AccessDenied");
        assert_eq!(parse_error(301, &[], b"").code, "PermanentRedirect");
        assert_eq!(
            parse_error(418, &[], b"").to_string(),
            "Http418 (status 418)"
        );
        let junk = parse_error(500, &[], b"<html>oops");
        assert_eq!(junk.code, "InternalError");
        assert!(
            junk.message
                .starts_with("Internal Server Error (unparseable error body: malformed XML"),
            "{}",
            junk.message
        );
        assert!(parse_error(503, &[], b"").is_retryable());
    }

    #[test]
    fn error_response_wrapper_and_missing_code() {
        let doc = parse_error_xml(
            b"<ErrorResponse><Error><Code>X</Code></Error><RequestId>R</RequestId></ErrorResponse>",
        )
        .unwrap();
        assert_eq!(
            (doc.code.as_str(), doc.request_id.as_deref()),
            ("X", Some("R"))
        );
        assert_eq!(
            parse_error_xml(b"<Error><Message>m</Message></Error>"),
            Err(ParseError::MissingElement("Code"))
        );
        assert!(matches!(
            parse_error_xml(b"<Other/>"),
            Err(ParseError::UnexpectedRoot { .. })
        ));
    }
}
