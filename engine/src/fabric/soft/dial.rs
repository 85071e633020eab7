//! The dialing side of pairing, as resumable steps on the QP's I/O thread: a non-blocking
//! connect to the peer device's listener, `CONNECT` (our RC token, the QPN we want in `aux`),
//! then the `CONNECT_ACK` read and checked against the RTR attributes. `modify_to_rtr` only
//! hands the dial to the loop ([`DialReq`]); sends posted meanwhile wait in the send queue.
//! The loop bounds the dial by its `connect_timeout` (a timer); a dial that fails or runs
//! out of time moves the QP to `Err`, flushing everything posted.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use s3_lite::rdma::token::TOKEN_BYTES;
use s3_lite::rdma::{RcToken, Transport};

use super::device::pairing_frame;
use super::frame::{HEADER_LEN, Opcode, decode_header};
use super::qp::{QpError, QpState};
use super::shared::{QpShared, Shut};

/// What `modify_to_rtr` asks of the loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DialReq {
    pub(crate) addr: SocketAddr,
    pub(crate) dest_qpn: u32,
    /// All zero: the peer's GID is not checked.
    pub(crate) dgid: [u8; 16],
    pub(crate) timeout: Duration,
}

/// One dial in progress.
pub(crate) struct Dial {
    pub(crate) qp: Arc<QpShared>,
    pub(crate) sock: mio::net::TcpStream,
    req: DialReq,
    connected: bool,
    out: Vec<u8>,
    sent: usize,
    buf: [u8; HEADER_LEN + TOKEN_BYTES],
    got: usize,
    /// The dial fails at this time.
    pub(crate) until: Instant,
}

fn connect_err(e: &io::Error) -> QpError {
    QpError::Connect(e.to_string())
}

impl Dial {
    /// Starts the non-blocking connect (an address that cannot be dialled at all fails here).
    pub(crate) fn start(qp: Arc<QpShared>, req: DialReq) -> Result<Self, (Arc<QpShared>, QpError)> {
        let sock = match mio::net::TcpStream::connect(req.addr) {
            Ok(s) => s,
            Err(e) => return Err((qp, connect_err(&e))),
        };
        // Best effort: the I/O thread sets it again when it attaches the connection.
        let _ = sock.set_nodelay(true);
        let out = pairing_frame(Opcode::Connect, u64::from(req.dest_qpn), &qp.token());
        Ok(Self {
            qp,
            sock,
            req,
            connected: false,
            out,
            sent: 0,
            buf: [0; HEADER_LEN + TOKEN_BYTES],
            got: 0,
            until: Instant::now() + req.timeout,
        })
    }

    /// Advances the dial as far as the socket allows: `None` while it waits for readiness,
    /// else how it ended (call [`Dial::finish`] after deregistering the socket).
    pub(crate) fn step(&mut self) -> Option<Result<(), QpError>> {
        if !self.connected {
            match self.sock.take_error() {
                Ok(None) => {}
                Ok(Some(e)) | Err(e) => return Some(Err(connect_err(&e))),
            }
            match self.sock.peer_addr() {
                Ok(_) => self.connected = true,
                // Still connecting (mio's documented check after a writable event).
                Err(e)
                    if e.kind() == io::ErrorKind::NotConnected
                        || e.kind() == io::ErrorKind::WouldBlock =>
                {
                    return None;
                }
                Err(e) => return Some(Err(connect_err(&e))),
            }
        }
        while let Some(rest) = self.out.get(self.sent..).filter(|r| !r.is_empty()) {
            match self.sock.write(rest) {
                Ok(0) => return Some(Err(QpError::Connect("connection closed".into()))),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) => return Some(Err(connect_err(&e))),
            }
        }
        loop {
            let Some(rest) = self.buf.get_mut(self.got..) else {
                return Some(Err(QpError::Refused));
            };
            if rest.is_empty() {
                return Some(self.judge());
            }
            match self.sock.read(rest) {
                // Closed before a whole answer: refused (as a NAK would say).
                Ok(0) => return Some(Err(QpError::Refused)),
                Ok(n) => self.got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(_) => return Some(Err(QpError::Refused)),
            }
            // A NAK is header-only: judge the header as soon as it is in.
            if self.got >= HEADER_LEN && !self.header_ok() {
                return Some(Err(QpError::Refused));
            }
        }
    }

    /// The answer's header is a `CONNECT_ACK`.
    fn header_ok(&self) -> bool {
        let Some(head) = self.buf.get(..HEADER_LEN) else {
            return false;
        };
        matches!(decode_header(head), Ok(h) if h.opcode == Opcode::ConnectAck)
    }

    /// The whole `CONNECT_ACK` is in: the peer must be the one the RTR attributes name.
    fn judge(&self) -> Result<(), QpError> {
        let body: &[u8; TOKEN_BYTES] = self
            .buf
            .get(HEADER_LEN..)
            .and_then(|s| s.try_into().ok())
            .ok_or(QpError::Refused)?;
        let peer = RcToken::from_bytes(body).map_err(|_| QpError::Refused)?;
        if peer.transport != Transport::Rc {
            return Err(QpError::Refused);
        }
        if peer.qpn != self.req.dest_qpn {
            return Err(QpError::PeerMismatch("qpn"));
        }
        if self.req.dgid != [0; 16] && peer.gid != self.req.dgid {
            return Err(QpError::PeerMismatch("gid"));
        }
        Ok(())
    }

    /// After the last step (socket deregistered): a paired connection becomes the QP's (the
    /// QP's sends queued meanwhile go out once it is attached); a failure moves the QP to
    /// `Err`, flushing everything posted. Either way the QP's CQs' wakers are rung.
    pub(crate) fn finish(self, outcome: Result<(), QpError>) {
        let qp = self.qp;
        let mut c = qp.lock();
        c.dialing = false;
        let outcome = match outcome {
            Ok(()) if c.state == QpState::Err => Err(QpError::Connect("queue pair failed".into())),
            // The peer dialled us meanwhile: two connections for one QP pair.
            Ok(()) if c.stream.is_some() => Err(QpError::Refused),
            other => other,
        };
        match outcome {
            Ok(()) => {
                let sock = Arc::new(std::net::TcpStream::from(self.sock));
                c.stream = Some((Arc::clone(&sock), self.req.dest_qpn));
                if let Err(e) = qp.maybe_start(&mut c) {
                    c.dial_error = Some(QpError::Connect(e.to_string()));
                    qp.fail(&mut c, None, Shut::Both);
                }
            }
            Err(e) => {
                let _ = self.sock.shutdown(std::net::Shutdown::Both);
                c.dial_error = Some(e);
                qp.fail(&mut c, None, Shut::Both);
            }
        }
        drop(c);
        ring(&qp);
    }
}

/// A dial that could not even start: the QP fails with `e` (posts flushed, CQs rung).
pub(crate) fn failed(qp: &QpShared, e: QpError) {
    let mut c = qp.lock();
    c.dialing = false;
    c.dial_error = Some(e);
    qp.fail(&mut c, None, Shut::Both);
    drop(c);
    ring(qp);
}

/// Rings the wakers of the QP's CQs: its owner checks the QP when it wakes.
fn ring(qp: &QpShared) {
    qp.send_cq.ring();
    if !Arc::ptr_eq(&qp.send_cq, &qp.recv_cq) {
        qp.recv_cq.ring();
    }
}
