//! The listener side of one pairing handshake, as resumable steps on the device's first I/O
//! thread: read `CONNECT` (header and RC token), answer `CONNECT_ACK` or `NAK(ConnectRefused)`,
//! then hand the connection to the QP. A dialer that stalls holds only its own handshake, which
//! the loop drops after [`HANDSHAKE_TIMEOUT`].

use std::io::{self, Read};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use s3_lite::rdma::token::TOKEN_BYTES;
use s3_lite::rdma::{RcToken, Transport};

use super::device::{DeviceInner, pairing_frame};
use super::frame::{HEADER_LEN, Header, NakCode, Opcode, decode_header};
use super::qp::QpState;
use super::shared::QpShared;

/// How long a dialer may take to send its `CONNECT` and read the answer.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What follows the answer.
enum Then {
    /// Still reading the `CONNECT`.
    Read,
    /// Refused: close once the NAK is out.
    Close,
    /// Accepted: the connection becomes this QP's, dialled by this QPN.
    Attach(Arc<QpShared>, u32),
}

/// One handshake in progress.
pub(crate) struct Pairing {
    pub(crate) sock: mio::net::TcpStream,
    dev: Weak<DeviceInner>,
    buf: [u8; HEADER_LEN + TOKEN_BYTES],
    got: usize,
    out: Vec<u8>,
    sent: usize,
    then: Then,
    /// The handshake is dropped at this time.
    pub(crate) until: Instant,
}

impl Pairing {
    pub(crate) fn new(sock: mio::net::TcpStream, dev: Weak<DeviceInner>) -> Self {
        Self {
            sock,
            dev,
            buf: [0; HEADER_LEN + TOKEN_BYTES],
            got: 0,
            out: Vec::new(),
            sent: 0,
            then: Then::Read,
            until: Instant::now() + HANDSHAKE_TIMEOUT,
        }
    }

    /// Advances the handshake as far as the socket allows; `false`: it is over (call
    /// [`Pairing::finish`] after deregistering the socket).
    pub(crate) fn step(&mut self) -> bool {
        loop {
            if matches!(self.then, Then::Read) {
                let Some(rest) = self.buf.get_mut(self.got..) else {
                    return false;
                };
                match self.sock.read(rest) {
                    Ok(0) => return false,
                    Ok(n) => self.got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(_) => return false,
                }
                if self.got >= HEADER_LEN && !self.header_ok() {
                    return false;
                }
                if self.got == self.buf.len() && !self.decide() {
                    return false;
                }
                continue;
            }
            let Some(rest) = self.out.get(self.sent..) else {
                return false;
            };
            if rest.is_empty() {
                // Answered: `finish` closes or attaches.
                return false;
            }
            match io::Write::write(&mut self.sock, rest) {
                Ok(0) => {
                    self.then = Then::Close;
                    return false;
                }
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(_) => {
                    self.then = Then::Close;
                    return false;
                }
            }
        }
    }

    /// The header is a `CONNECT` (anything else is closed without an answer).
    fn header_ok(&self) -> bool {
        let Some(head) = self.buf.get(..HEADER_LEN) else {
            return false;
        };
        matches!(decode_header(head), Ok(h) if h.opcode == Opcode::Connect)
    }

    /// The whole `CONNECT` is in: accept or refuse. `false`: close without an answer.
    fn decide(&mut self) -> bool {
        let Some(Ok(hdr)) = self.buf.get(..HEADER_LEN).map(decode_header) else {
            return false;
        };
        let body: Option<&[u8; TOKEN_BYTES]> =
            self.buf.get(HEADER_LEN..).and_then(|s| s.try_into().ok());
        let Some(Ok(peer)) = body.map(RcToken::from_bytes) else {
            return false;
        };
        if peer.transport != Transport::Rc {
            return false;
        }
        let dest = u32::try_from(hdr.aux).unwrap_or(u32::MAX);
        let qp = self.dev.upgrade().and_then(|d| d.find(dest));
        let acceptable = qp.as_ref().is_some_and(|qp| {
            let c = qp.lock();
            matches!(c.state, QpState::Init | QpState::Rtr | QpState::Rts)
                && c.stream.is_none()
                && !c.dialing
                && c.dest_qpn.is_none_or(|d| d == peer.qpn)
        });
        match qp {
            Some(qp) if acceptable => {
                // Answer first, then attach: the QP is served only after the ACK is on the wire.
                self.out = pairing_frame(Opcode::ConnectAck, 0, &qp.token());
                self.then = Then::Attach(qp, peer.qpn);
            }
            _ => {
                let h = Header {
                    aux: NakCode::ConnectRefused.to_u64(),
                    ..Header::new(Opcode::Nak, 0)
                };
                self.out = h.encode().to_vec();
                self.then = Then::Close;
            }
        }
        true
    }

    /// After the last step (socket deregistered): an answered, accepted handshake hands its
    /// connection to the QP; everything else is closed.
    pub(crate) fn finish(self) {
        let answered = !self.out.is_empty() && self.sent == self.out.len();
        if let (true, Then::Attach(qp, src)) = (answered, self.then) {
            let sock = std::net::TcpStream::from(self.sock);
            let sock = Arc::new(sock);
            if !qp.attach(Arc::clone(&sock), src) {
                let _ = sock.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}
