//! A v2-only peer for conformance tests (issue 12; docs/interop.md): a proxy in front of our
//! gateway (soft fabric, in-process) that behaves like the third-party hipobj-rc-v2 server seen
//! over Soft-RoCE (elbencho's s3rdma server): the `rc-persistent` routes (`/.hipobj/rc/*`)
//! answer `404`, and
//! - [`Peer::NoMp`]: `x-amz-rdma-capabilities` is removed from every answer and a PREPARE's
//!   `x-amz-rdma-target` loses its query (re-signed with the test key, so the gateway stores a
//!   part sent over v2 as the whole object, as that server did);
//! - [`Peer::Mp`]: answers pass through (our gateway advertises `mp`).
//!
//! Included with `#[path]` next to `raw.rs` (as `mod raw`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use s3_lite::Request;
use s3_lite::sigv4::PayloadHash;

use super::raw::{ACCESS, SECRET, now, signer};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peer {
    /// Never advertises `mp`, drops the target's query.
    NoMp,
    /// Passes our gateway's `mp` through.
    Mp,
    /// Refuses v2 requests whose credential scope names service `s3` (as the ROCm reference
    /// verifier, which wants `hipobj`); otherwise as [`Peer::Mp`].
    HipobjOnly,
}

/// What the peer saw.
#[derive(Default, Debug)]
pub struct Seen {
    /// `x-amz-rdma-target` of every PREPARE, as the client sent it.
    pub targets: Vec<String>,
    /// Requests to the rc-persistent routes.
    pub rc_persistent: usize,
    /// v2 requests refused for their credential scope's service.
    pub refused_service: usize,
    /// Credential-scope services of the v2 requests, in order.
    pub services: Vec<String>,
}

pub fn gateway(root: &std::path::Path) -> RunningGateway {
    let t = RcTarget::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        RcLimits::default(),
    )
    .unwrap();
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .rdma_target(t)
        .start()
        .unwrap()
}

/// One request or response head: the first line and the headers, wire order.
struct Head {
    line: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    }
    fn len(&self) -> usize {
        self.get("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
    fn write(&self, s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
        let mut out = format!("{}\r\n", self.line);
        for (n, v) in &self.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str("\r\n");
        s.write_all(out.as_bytes())?;
        s.write_all(body)
    }
}

fn read_head(s: &mut TcpStream) -> Option<Head> {
    let mut raw = Vec::new();
    let mut b = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).ok()? == 0 {
            return None;
        }
        raw.push(b[0]);
    }
    let text = String::from_utf8(raw).ok()?;
    let mut lines = text.split("\r\n");
    let line = lines.next()?.to_owned();
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Some(Head { line, headers })
}

fn read_body(s: &mut TcpStream, n: usize) -> Option<Vec<u8>> {
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

/// The PREPARE with its target's query dropped, signed again with the test key (what a server
/// that ignores the query effectively serves).
fn drop_query(h: &Head, gw: SocketAddr) -> Head {
    let target = h.get("x-amz-rdma-target").unwrap_or_default();
    let bare = target.split('?').next().unwrap_or_default().to_owned();
    let mut r = Request::new("POST", "/.hipobj-rc/prepare");
    r.add_header("Host", gw.to_string());
    for (n, v) in &h.headers {
        let l = n.to_ascii_lowercase();
        if matches!(
            l.as_str(),
            "host" | "authorization" | "x-amz-date" | "x-amz-content-sha256"
        ) {
            continue;
        }
        let v = if l == "x-amz-rdma-target" {
            bare.clone()
        } else {
            v.clone()
        };
        r.add_header(n.as_str(), v);
    }
    signer(ACCESS, SECRET)
        .sign_headers(&mut r, &PayloadHash::Unsigned, now())
        .unwrap();
    Head {
        line: h.line.clone(),
        headers: r.headers.clone(),
    }
}

/// Serves one client connection: forwards to the gateway as the peer behaves.
fn serve(mut c: TcpStream, gw: SocketAddr, peer: Peer, seen: Arc<Mutex<Seen>>) {
    let Ok(mut up) = TcpStream::connect(gw) else {
        return;
    };
    while let Some(mut h) = read_head(&mut c) {
        let Some(body) = read_body(&mut c, h.len()) else {
            return;
        };
        let path = h.line.split(' ').nth(1).unwrap_or_default().to_owned();
        if path.starts_with("/.hipobj/rc/") {
            seen.lock().unwrap().rc_persistent += 1;
            let nf = Head {
                line: "HTTP/1.1 404 Not Found".into(),
                headers: vec![("Content-Length".into(), "0".into())],
            };
            if nf.write(&mut c, b"").is_err() {
                return;
            }
            continue;
        }
        if path.starts_with("/.hipobj-rc/") {
            let service = h
                .get("authorization")
                .and_then(|a| a.split("Credential=").nth(1))
                .and_then(|c| c.split('/').nth(3))
                .unwrap_or_default()
                .to_owned();
            seen.lock().unwrap().services.push(service.clone());
            if peer == Peer::HipobjOnly && service != "hipobj" {
                seen.lock().unwrap().refused_service += 1;
                let msg = format!(
                    "<Error><Code>AuthorizationHeaderMalformed</Code><Message>the service '{service}' is wrong; expecting 'hipobj'</Message></Error>"
                );
                let refuse = Head {
                    line: "HTTP/1.1 400 Bad Request".into(),
                    headers: vec![("Content-Length".into(), msg.len().to_string())],
                };
                if refuse.write(&mut c, msg.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
        }
        if path.starts_with("/.hipobj-rc/prepare") {
            let target = h.get("x-amz-rdma-target").unwrap_or_default().to_owned();
            seen.lock().unwrap().targets.push(target.clone());
            if peer == Peer::NoMp && target.contains('?') {
                h = drop_query(&h, gw);
            }
        }
        let head_req = h.line.starts_with("HEAD ");
        if h.write(&mut up, &body).is_err() {
            return;
        }
        let Some(mut a) = read_head(&mut up) else {
            return;
        };
        let status: u16 = a
            .line
            .split(' ')
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let n = if head_req || status == 204 || status == 304 {
            0
        } else {
            a.len()
        };
        let Some(ab) = read_body(&mut up, n) else {
            return;
        };
        if peer == Peer::NoMp {
            a.headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case("x-amz-rdma-capabilities"));
        }
        if a.write(&mut c, &ab).is_err() {
            return;
        }
    }
}

pub fn start_peer(gw: SocketAddr, peer: Peer) -> (SocketAddr, Arc<Mutex<Seen>>) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let a = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = Arc::clone(&seen);
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let s3 = Arc::clone(&s2);
            std::thread::spawn(move || serve(c, gw, peer, s3));
        }
    });
    (a, seen)
}
