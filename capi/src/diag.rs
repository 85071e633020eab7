//! Naming the S3 error behind a failed synchronous call.
//!
//! Engine completions carry an errno and a class (`EACCES`, Client), not S3's error code: the
//! worker never keeps response bodies. When a synchronous `hipObjGet`/`hipObjPut` fails with a
//! client-class error (HTTP 4xx), this module sends one diagnostic request with the same
//! credentials — `GET` of the same object with `Range: bytes=0-0`, on a fresh blocking
//! connection with short timeouts — and reports the `<Code>` and `<Message>` the server
//! answers (`SignatureDoesNotMatch`, `InvalidAccessKeyId`, `NoSuchBucket`, ...). The probe is
//! read-only and tiny; its answer is described as the probe's, since the server could in
//! principle answer the probe differently from the original request.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3_lite::http::ResponseHead;
use s3_lite::net::blocking::{BodySink, HttpClient, RequestBody};
use s3_lite::net::stream::Timeouts;
use s3_lite::net::tls::{TlsOptions, client_config};
use s3_lite::s3::{ByteRange, Endpoint, GetOptions, Scheme, get_object, parse_error_xml};
use s3_lite::sigv4::{AmzDate, EMPTY_SHA256, PayloadHash, Signer};

/// Connect, read/write and `100-continue` limits of the probe.
const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    io: Duration::from_secs(5),
    expect_continue: Duration::from_secs(1),
};
/// Error bodies larger than this are cut (S3 error documents are well under 4 KiB).
const MAX_BODY: usize = 64 * 1024;

/// What the probe learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The server answered with an error status and (maybe) an S3 error document.
    Error {
        /// HTTP status.
        status: u16,
        /// `<Code>`, empty if the body had none.
        code: String,
        /// `<Message>`, empty if none.
        message: String,
    },
    /// The probe succeeded (2xx): the failure was specific to the original request.
    Succeeded(u16),
}

impl Probe {
    /// One line for the detail message.
    pub fn describe(&self) -> String {
        match self {
            Probe::Error {
                status,
                code,
                message,
            } if !code.is_empty() => {
                format!("server error {code}: {message} (HTTP {status})")
            }
            Probe::Error { status, .. } => {
                format!("server answered HTTP {status} without an S3 error code")
            }
            Probe::Succeeded(s) => {
                format!("a read-only probe of the same object succeeded (HTTP {s})")
            }
        }
    }
}

/// Sends the probe for `bucket/key` with the blocking driver of `s3_lite::net` (TLS for an
/// `https://` endpoint, trusting `ca_bundle` or the built-in roots, as the engine does);
/// `Err` says why it could not be made.
pub fn probe(
    ep: &Endpoint,
    signer: &Signer,
    ca_bundle: Option<&Path>,
    bucket: &str,
    key: &str,
) -> Result<Probe, String> {
    let opts = GetOptions {
        range: Some(ByteRange::Inclusive(0, 0)),
        ..GetOptions::default()
    };
    let mut req = get_object(ep, bucket, key, &opts).map_err(|e| e.to_string())?;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let now = AmzDate::from_unix_secs(secs).map_err(|e| e.to_string())?;
    signer
        .sign_headers(&mut req, &PayloadHash::Hex(EMPTY_SHA256.to_owned()), now)
        .map_err(|e| e.to_string())?;
    let tls = match ep.scheme {
        Scheme::Https => Some(
            client_config(&TlsOptions::default().with_aws_ca_bundle(ca_bundle))
                .map_err(|e| e.to_string())?,
        ),
        Scheme::Http => None,
    };
    let mut client = HttpClient::new(ep.clone(), tls, TIMEOUTS);
    let mut sink = CappedBody::default();
    let head = client
        .execute(&req, Some(bucket), RequestBody::None, &mut sink)
        .map_err(|e| e.to_string())?;
    Ok(classify(&head, &sink.0))
}

/// The response body, cut at [`MAX_BODY`].
#[derive(Default)]
struct CappedBody(Vec<u8>);

impl BodySink for CappedBody {
    fn accept(&mut self, data: &[u8]) -> std::io::Result<()> {
        let room = MAX_BODY.saturating_sub(self.0.len());
        self.0
            .extend_from_slice(data.get(..room.min(data.len())).unwrap_or_default());
        Ok(())
    }
}

/// What a response to the probe means.
fn classify(head: &ResponseHead, body: &[u8]) -> Probe {
    if (200..300).contains(&head.status) {
        return Probe::Succeeded(head.status);
    }
    let doc = parse_error_xml(body).unwrap_or_default();
    Probe::Error {
        status: head.status,
        code: doc.code,
        message: doc.message.unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3_lite::Request;
    use s3_lite::http::{BodyFraming, Exchange, Limits, collect_response};

    /// A response as the probe's driver would decode it.
    fn decoded(wire: &[u8]) -> Option<(ResponseHead, Vec<u8>)> {
        let mut ex = Exchange::new(Limits::default());
        let mut req = Request::new("GET", "/b/k");
        req.add_header("Host", "h");
        ex.request(&req, BodyFraming::None).unwrap();
        let c = collect_response(&mut ex, wire).ok()??;
        Some((c.head, c.body))
    }

    #[test]
    fn error_document_is_named() {
        let body = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>\
                    <Message>The request signature we calculated does not match.</Message></Error>";
        let wire = format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let (head, body) = decoded(wire.as_bytes()).unwrap();
        let p = classify(&head, &body);
        assert_eq!(
            p,
            Probe::Error {
                status: 403,
                code: "SignatureDoesNotMatch".into(),
                message: "The request signature we calculated does not match.".into()
            }
        );
        assert!(p.describe().contains("SignatureDoesNotMatch"));
    }

    #[test]
    fn success_and_bodyless_errors() {
        let (head, body) =
            decoded(b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1\r\n\r\nx").unwrap();
        assert_eq!(classify(&head, &body), Probe::Succeeded(206));
        let (head, body) = decoded(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(
            classify(&head, &body),
            Probe::Error {
                status: 404,
                code: String::new(),
                message: String::new()
            }
        );
    }

    #[test]
    fn body_is_capped() {
        let mut sink = CappedBody::default();
        sink.accept(&vec![b'x'; MAX_BODY - 1]).unwrap();
        sink.accept(b"abc").unwrap();
        assert_eq!(sink.0.len(), MAX_BODY);
    }

    #[test]
    fn unreachable_endpoint_is_an_error_not_a_hang() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ep = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let signer = Signer::new(
            s3_lite::credentials::Credentials::new("a", "b"),
            "us-east-1",
            "s3",
        )
        .unwrap();
        assert!(probe(&ep, &signer, None, "b", "k").is_err());
    }
}
