//! The blocking pairing exchange of `rc-persistent`: one signed `POST /.hipobj/rc/connect`.
//!
//! Runs once per worker and endpoint (and again after the connection failed), off the
//! per-operation path, so a plain blocking socket with timeouts is the simple choice.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use s3_lite::Request;
use s3_lite::http::{
    BodyFraming, Event, Limits, ResponseDecoder, ResponseHead, encode_request_head,
};
use s3_lite::rdma::{RcToken, Reply, v2};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{PayloadHash, Signer};

/// The route (the gateway's `soft::CONNECT_PATH`).
pub(crate) const CONNECT_PATH: &str = "/.hipobj/rc/connect";

/// What the gateway answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paired {
    pub(crate) token: RcToken,
    pub(crate) psn: u32,
    pub(crate) session: String,
    pub(crate) soft_addr: SocketAddr,
}

/// Why pairing did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnectError {
    /// The endpoint answered but does not pair (any status other than a well-formed 200):
    /// a plain S3 server, or a gateway without a fabric.
    Declined(u16),
    /// The endpoint could not be reached or the exchange broke (try again later).
    Transport,
}

/// The longest a pairing may block its worker.
pub(crate) const LIMIT: Duration = Duration::from_secs(5);
/// Below this much time left, an op does not try to pair (it goes over HTTP).
pub(crate) const MIN_LIMIT: Duration = Duration::from_millis(20);

/// Sends the connect request and parses the answer, all within `limit` (the caller bounds it
/// by [`LIMIT`] and the op's remaining deadline).
pub(crate) fn pair(
    addr: SocketAddr,
    endpoint: &Endpoint,
    signer: &Signer,
    now: s3_lite::sigv4::AmzDate,
    client: &RcToken,
    psn: u32,
    limit: Duration,
) -> Result<Paired, ConnectError> {
    let end = Instant::now() + limit;
    let mut req = Request::new("POST", CONNECT_PATH);
    req.add_header("Host", endpoint.host_header(None));
    req.add_header(s3_lite::rdma::RDMA_TOKEN, client.encode());
    let psn_hex = v2::Psn::new(psn)
        .map_err(|_| ConnectError::Transport)?
        .encode();
    req.add_header(s3_lite::rdma::RDMA_PSN, psn_hex);
    req.add_header("Content-Length", "0");
    signer
        .sign_headers(&mut req, &PayloadHash::Unsigned, now)
        .map_err(|_| ConnectError::Transport)?;
    let mut wire = Vec::new();
    encode_request_head(&req, BodyFraming::None, &mut wire).map_err(|_| ConnectError::Transport)?;
    let mut s =
        TcpStream::connect_timeout(&addr, left(end)?).map_err(|_| ConnectError::Transport)?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(left(end)?))
        .map_err(|_| ConnectError::Transport)?;
    s.write_all(&wire).map_err(|_| ConnectError::Transport)?;
    let head = read_head(&mut s, end)?;
    parse(&head)
}

/// Time left until `end` (an error once spent: a zero timeout would mean "block forever").
fn left(end: Instant) -> Result<Duration, ConnectError> {
    let d = end.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(ConnectError::Transport)
    } else {
        Ok(d)
    }
}

/// Reads one response head (a bounded body is read and dropped) before `end`.
fn read_head(s: &mut TcpStream, end: Instant) -> Result<ResponseHead, ConnectError> {
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    let mut buf = vec![0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut head = None;
    let mut body = 0usize;
    loop {
        let d = dec.decode(&pending).map_err(|_| ConnectError::Transport)?;
        let consumed = d.consumed;
        match d.event {
            Event::Head(h) => head = Some(h),
            Event::Body(b) => {
                body += b.len();
                if body > 64 * 1024 {
                    break;
                }
            }
            Event::End => break,
            Event::NeedMore => {
                s.set_read_timeout(Some(left(end)?))
                    .map_err(|_| ConnectError::Transport)?;
                let n = s.read(&mut buf).map_err(|_| ConnectError::Transport)?;
                if n == 0 {
                    if dec.finish_on_eof().is_err() {
                        return Err(ConnectError::Transport);
                    }
                    continue;
                }
                pending.drain(..consumed.min(pending.len()));
                pending.extend_from_slice(buf.get(..n).unwrap_or_default());
                continue;
            }
        }
        pending.drain(..consumed.min(pending.len()));
    }
    head.ok_or(ConnectError::Transport)
}

/// The pure part: a 200 with `x-amz-rdma-reply: 200:<token>`, a PSN, a session id and the
/// soft listener address; anything else declines.
pub(crate) fn parse(head: &ResponseHead) -> Result<Paired, ConnectError> {
    let declined = ConnectError::Declined(head.status);
    if head.status != 200 {
        return Err(declined);
    }
    let token = match head.header(s3_lite::rdma::RDMA_REPLY).map(Reply::parse) {
        Some(Ok(Reply::Code {
            code: 200,
            peer_token: Some(t),
        })) => t,
        _ => return Err(declined),
    };
    let psn = head
        .header(s3_lite::rdma::RDMA_PSN)
        .and_then(|v| v2::Psn::parse(v.trim()).ok())
        .ok_or(declined.clone())?;
    let session = head
        .header(s3_lite::rdma::RDMA_SESSION)
        .map(str::trim)
        .filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or(declined.clone())?;
    let soft_addr = head
        .header("x-amz-rdma-soft-addr")
        .and_then(|v| v.trim().parse::<SocketAddr>().ok())
        .ok_or(declined)?;
    Ok(Paired {
        token,
        psn: psn.get(),
        session: session.to_owned(),
        soft_addr,
    })
}

/// [`read_head`] for the other blocking exchanges of this module's parent (hipobj-rc-v2).
pub(crate) fn read_head_until(s: &mut TcpStream, end: Instant) -> Result<ResponseHead, ()> {
    read_head(s, end).map_err(|_| ())
}
