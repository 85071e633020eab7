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

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3_lite::http::{BodyFraming, Event, Limits, ResponseDecoder, encode_request_head};
use s3_lite::s3::{ByteRange, Endpoint, GetOptions, get_object, parse_error_xml};
use s3_lite::sigv4::{AmzDate, EMPTY_SHA256, PayloadHash, Signer};

/// Connect timeout of the probe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Read/write timeout of the probe.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
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

/// Sends the probe for `bucket/key`; `Err` says why it could not be made.
pub fn probe(ep: &Endpoint, signer: &Signer, bucket: &str, key: &str) -> Result<Probe, String> {
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
    let mut wire = Vec::with_capacity(1024);
    encode_request_head(&req, BodyFraming::None, &mut wire).map_err(|e| e.to_string())?;

    let addr = address(ep)?;
    let mut sock = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| sock.set_write_timeout(Some(IO_TIMEOUT)))
        .and_then(|()| sock.write_all(&wire))
        .map_err(|e| e.to_string())?;
    read_response(&mut sock)
}

fn address(ep: &Endpoint) -> Result<SocketAddr, String> {
    let host = ep.host.trim_start_matches('[').trim_end_matches(']');
    (host, ep.port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("{host} resolves to no address"))
}

/// Reads one response from `r` and classifies it.
pub fn read_response(r: &mut impl Read) -> Result<Probe, String> {
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    let mut buf = vec![0u8; 16 * 1024];
    let (mut have, mut status, mut body) = (0usize, None, Vec::new());
    let mut eof = false;
    loop {
        let d = dec
            .decode(buf.get(..have).unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let consumed = d.consumed;
        let mut progressed = consumed > 0;
        match d.event {
            Event::Head(h) => status = Some(h.status),
            Event::Body(b) => {
                let room = MAX_BODY.saturating_sub(body.len());
                body.extend_from_slice(b.get(..room.min(b.len())).unwrap_or_default());
            }
            Event::End => break,
            Event::NeedMore => {
                if eof {
                    dec.finish_on_eof().map_err(|e| e.to_string())?;
                    break;
                }
                progressed = false;
            }
        }
        buf.copy_within(consumed..have, 0);
        have -= consumed;
        if !progressed {
            if have == buf.len() {
                return Err("response head too large".into());
            }
            let n = r
                .read(buf.get_mut(have..).unwrap_or_default())
                .map_err(|e| e.to_string())?;
            if n == 0 {
                eof = true;
            }
            have += n;
        }
    }
    let status = status.ok_or("connection closed before a response")?;
    if (200..300).contains(&status) {
        return Ok(Probe::Succeeded(status));
    }
    let doc = parse_error_xml(&body).unwrap_or_default();
    Ok(Probe::Error {
        status,
        code: doc.code,
        message: doc.message.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_document_is_named() {
        let body = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>\
                    <Message>The request signature we calculated does not match.</Message></Error>";
        let wire = format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        // Feed it in small pieces to exercise the incremental loop.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(out.len()).min(7);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let p = read_response(&mut Trickle(wire.as_bytes())).unwrap();
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
        let ok = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1\r\n\r\nx";
        assert_eq!(read_response(&mut &ok[..]).unwrap(), Probe::Succeeded(206));
        let close = b"HTTP/1.1 404 Not Found\r\n\r\n";
        let p = read_response(&mut &close[..]).unwrap();
        assert_eq!(
            p,
            Probe::Error {
                status: 404,
                code: String::new(),
                message: String::new()
            }
        );
        assert!(read_response(&mut &b"HTTP/1.1 2"[..]).is_err());
        assert!(read_response(&mut &b""[..]).is_err());
    }
}
