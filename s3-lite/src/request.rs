//! The request head shared by the HTTP encoder, the SigV4 signer and the S3 request builders.
//!
//! The body never lives here: it may be a file, a registered GPU buffer or nothing at all (RDMA),
//! so drivers hand it to the encoder separately.

/// An HTTP/1.1 request head in wire form.
///
/// INVARIANT (kept by the builders in [`crate::s3`], checked by the encoder): `path` starts with
/// `/` and is already percent-encoded the way S3 expects; `query` is the encoded query string
/// without the leading `?` (empty when there is none); header names and values contain no CR/LF.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// `GET`, `PUT`, `HEAD`, `POST`, `DELETE`, ...
    pub method: String,
    /// Percent-encoded absolute path, e.g. `/bucket/my%20key`.
    pub path: String,
    /// Encoded query string without `?`, e.g. `partNumber=1&uploadId=abc`.
    pub query: String,
    /// Header lines in the order they will be sent. Names keep the caller's case.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// A request with no headers and no query.
    pub fn new(method: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
        }
    }

    /// The request target as it appears on the request line: `path[?query]`.
    pub fn target(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }

    /// First value of a header, matched case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Replaces every header called `name` (case-insensitively) with one `name: value` line.
    pub fn set_header(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
        self.headers.push((name, value.into()));
    }

    /// Appends a header line, keeping any existing ones of the same name.
    pub fn add_header(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.headers.push((name.into(), value.into()));
    }

    /// Removes every header called `name` (case-insensitively).
    pub fn remove_header(&mut self, name: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_helpers_are_case_insensitive() {
        let mut r = Request::new("GET", "/b/k");
        r.add_header("Host", "h");
        r.set_header("host", "h2");
        assert_eq!(r.header("HOST"), Some("h2"));
        assert_eq!(r.headers.len(), 1);
        r.query = "a=1".into();
        assert_eq!(r.target(), "/b/k?a=1");
        r.remove_header("Host");
        assert!(r.header("host").is_none());
    }
}
