//! A raw HTTP/1.1 client for gateway tests: builds, signs (or not) and sends exactly the
//! request a test wants, so hostile and unusual requests can be checked byte for byte.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hipobj_gateway::{Gateway, RunningGateway};
use s3_lite::Request;
use s3_lite::credentials::Credentials;
use s3_lite::http::{
    BodyFraming, Event, Limits, ResponseDecoder, ResponseHead, encode_request_head,
};
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer};

pub const ACCESS: &str = "gwtestkey";
pub const SECRET: &str = "gwtestsecret/abcdef0123456789";

pub fn start(root: &std::path::Path) -> RunningGateway {
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .credentials("second-key", "second-secret")
        .min_part_size(1024)
        .virtual_host_suffix("s3.test")
        .start()
        .expect("gateway starts")
}

pub fn now() -> AmzDate {
    AmzDate::from_unix_secs(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

pub fn signer(access: &str, secret: &str) -> Signer {
    Signer::new(Credentials::new(access, secret), "us-east-1", "s3").unwrap()
}

/// A request with `Host` set for `addr`.
pub fn req(addr: SocketAddr, method: &str, path: &str, query: &str) -> Request {
    let mut r = Request::new(method, path);
    r.query = query.to_owned();
    r.add_header("Host", addr.to_string());
    r
}

/// Signs `r` with the test key (payload hash of `body` unless `payload` is given).
pub fn sign(mut r: Request, body: &[u8], payload: Option<PayloadHash>) -> Request {
    let payload = payload.unwrap_or_else(|| PayloadHash::of_body(body));
    signer(ACCESS, SECRET)
        .sign_headers(&mut r, &payload, now())
        .unwrap();
    r
}

pub struct Response {
    pub head: ResponseHead,
    pub body: Vec<u8>,
}

impl Response {
    pub fn status(&self) -> u16 {
        self.head.status
    }
    pub fn header(&self, n: &str) -> Option<&str> {
        self.head.header(n)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The `<Code>` of an error document.
    pub fn code(&self) -> String {
        let t = self.text();
        t.split("<Code>")
            .nth(1)
            .and_then(|s| s.split("</Code>").next())
            .unwrap_or("")
            .to_owned()
    }
}

/// Sends `r` with `body` on a fresh connection and reads one response.
pub fn send(addr: SocketAddr, r: &Request, body: &[u8]) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    send_on(&mut s, r, body)
}

/// Sends on an existing connection (keep-alive tests).
pub fn send_on(s: &mut TcpStream, r: &Request, body: &[u8]) -> Response {
    let mut wire = Vec::new();
    let framing = if body.is_empty() && r.header("content-length").is_none() {
        BodyFraming::None
    } else {
        BodyFraming::Length(body.len() as u64)
    };
    encode_request_head(r, framing, &mut wire).unwrap();
    wire.extend_from_slice(body);
    s.write_all(&wire).unwrap();
    read_response(s, r.method == "HEAD")
}

pub fn read_response(s: &mut TcpStream, head_req: bool) -> Response {
    let mut dec = ResponseDecoder::new(Limits::default(), head_req);
    let mut buf = vec![0u8; 65536];
    let mut pending: Vec<u8> = Vec::new();
    let mut head = None;
    let mut body = Vec::new();
    loop {
        let d = dec.decode(&pending).unwrap();
        let consumed = d.consumed;
        match d.event {
            Event::Head(h) => head = Some(h),
            Event::Body(b) => body.extend_from_slice(b),
            Event::End => {
                return Response {
                    head: head.unwrap(),
                    body,
                };
            }
            Event::NeedMore => {
                pending.clear();
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    dec.finish_on_eof().unwrap();
                    continue;
                }
                pending.extend_from_slice(&buf[..n]);
                continue;
            }
        }
        pending.drain(..consumed);
    }
}

/// Signed request helper: `(method, path, query)` with extra headers and a body.
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    query: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut r = req(addr, method, path, query);
    for (n, v) in headers {
        r.add_header(*n, *v);
    }
    let r = sign(r, body, None);
    send(addr, &r, body)
}

/// A PUT with a signed aws-chunked body (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`, or the
/// `-TRAILER` variant when `trailer` names a checksum header and value), `data` cut into
/// `chunk` bytes per chunk; `tamper` flips one payload byte after signing.
pub fn signed_chunked_put(
    addr: SocketAddr,
    path: &str,
    data: &[u8],
    chunk: usize,
    trailer: Option<(&str, &str)>,
    tamper: bool,
) -> Response {
    let signer = signer(ACCESS, SECRET);
    let date = now();
    let mut r = req(addr, "PUT", path, "");
    r.add_header("Content-Encoding", "aws-chunked");
    r.add_header("x-amz-decoded-content-length", data.len().to_string());
    if let Some((name, _)) = trailer {
        r.add_header("x-amz-trailer", name);
    }
    let payload = if trailer.is_some() {
        PayloadHash::StreamingSignedTrailer
    } else {
        PayloadHash::StreamingSigned
    };
    let seed = signer
        .sign_headers(&mut r, &payload, date)
        .unwrap()
        .signature;
    let mut wire = Vec::new();
    let mut prev = seed;
    for piece in data.chunks(chunk.max(1)).chain(std::iter::once(&b""[..])) {
        let sig = signer.sign_chunk(&prev, date, piece).unwrap().signature;
        wire.extend_from_slice(format!("{:x};chunk-signature={sig}\r\n", piece.len()).as_bytes());
        wire.extend_from_slice(piece);
        if !piece.is_empty() {
            wire.extend_from_slice(b"\r\n");
        }
        prev = sig;
    }
    match trailer {
        None => wire.extend_from_slice(b"\r\n"),
        Some((name, value)) => {
            let line = format!("{name}:{value}");
            let canon = s3_lite::sigv4::canonical_trailer(&line).unwrap();
            let sig = signer.sign_trailer(&prev, date, &canon).unwrap().signature;
            wire.extend_from_slice(
                format!("{line}\r\nx-amz-trailer-signature:{sig}\r\n\r\n").as_bytes(),
            );
        }
    }
    if tamper {
        let at = wire.len() / 2;
        if let Some(b) = wire.get_mut(at) {
            *b ^= 0x01;
        }
    }
    send(addr, &r, &wire)
}
