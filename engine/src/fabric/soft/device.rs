//! The soft device: QP numbers, the pairing listener, and the dial side of pairing.
//!
//! Pairing over TCP (one connection per QP pair): the side whose RTR names
//! [`SoftPath::Connect`] dials the peer device's listener and sends `CONNECT` — its own RC
//! token (QPN, GID) as payload and the QPN it wants in `aux`. The listener hands the
//! connection to that QP if it exists, is in `Init`, `Rtr` or `Rts`, is not yet paired, and (once its
//! RTR named a peer) the token's QPN is that peer; it answers `CONNECT_ACK` with its own token,
//! else `NAK(ConnectRefused)` and closes. Each handshake runs on its own short-lived thread
//! with a 5 s read timeout; at most [`MAX_HANDSHAKES`] at once.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

use s3_lite::rdma::token::TOKEN_BYTES;
use s3_lite::rdma::{RcToken, Transport, gid_from_ipv4};

use super::cq::CompletionQueue;
use super::frame::{CONNECT_PAYLOAD, HEADER_LEN, Header, NakCode, Opcode, PSN_MASK, decode_header};
use super::mr::ProtectionDomain;
use super::qp::{QpCaps, QpError, QpState, QueuePair, RtrAttr};
use super::shared::{Core, QpShared};
use super::wr::Access;

/// Pairing handshakes served at once; more are closed at once.
pub const MAX_HANDSHAKES: usize = 64;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct DeviceInner {
    gid: [u8; 16],
    qps: Mutex<HashMap<u32, Weak<QpShared>>>,
    listen: Mutex<Option<SocketAddr>>,
    stop: Arc<AtomicBool>,
    handshakes: Arc<AtomicUsize>,
}

impl DeviceInner {
    pub(crate) fn forget(&self, qpn: u32) {
        self.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&qpn);
    }

    fn find(&self, qpn: u32) -> Option<Arc<QpShared>> {
        self.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&qpn)?
            .upgrade()
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(addr) = *self.listen.lock().unwrap_or_else(PoisonError::into_inner) {
            // Wake the blocking accept so the listener thread sees `stop` and exits.
            let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        }
    }
}

/// A soft RDMA device (one per process side; cheap to clone).
#[derive(Debug, Clone)]
pub struct SoftDevice {
    inner: Arc<DeviceInner>,
}

impl SoftDevice {
    /// A device whose GID is the IPv4-mapped `ip` (what RoCEv2 GIDs look like).
    #[must_use]
    pub fn new(ip: Ipv4Addr) -> Self {
        Self {
            inner: Arc::new(DeviceInner {
                gid: gid_from_ipv4(ip),
                qps: Mutex::new(HashMap::new()),
                listen: Mutex::new(None),
                stop: Arc::new(AtomicBool::new(false)),
                handshakes: Arc::new(AtomicUsize::new(0)),
            }),
        }
    }

    /// The device GID.
    #[must_use]
    pub fn gid(&self) -> [u8; 16] {
        self.inner.gid
    }

    /// The listener address, once [`SoftDevice::listen`] succeeded.
    #[must_use]
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self
            .inner
            .listen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Accepts pairing connections on `addr` (port 0 picks one); returns the bound address.
    /// The listener thread ends when the last clone of the device is dropped.
    pub fn listen(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let l = TcpListener::bind(addr)?;
        let bound = l.local_addr()?;
        *self
            .inner
            .listen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(bound);
        let dev = Arc::downgrade(&self.inner);
        let stop = Arc::clone(&self.inner.stop);
        let busy = Arc::clone(&self.inner.handshakes);
        std::thread::Builder::new()
            .name("soft-listen".into())
            .spawn(move || accept_loop(&l, &dev, &stop, &busy))?;
        Ok(bound)
    }

    /// A new protection domain.
    #[must_use]
    pub fn alloc_pd(&self) -> ProtectionDomain {
        ProtectionDomain::new()
    }

    /// A new completion queue.
    #[must_use]
    pub fn create_cq(&self) -> Arc<CompletionQueue> {
        CompletionQueue::new()
    }

    /// A queue pair in `Reset` with a fresh 24-bit QPN.
    #[must_use]
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> QueuePair {
        let mut qps = self
            .inner
            .qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        qps.retain(|_, w| w.strong_count() > 0);
        let qpn = loop {
            let n = rand::random::<u32>() & PSN_MASK;
            if n > 1 && !qps.contains_key(&n) {
                break n;
            }
        };
        let shared = Arc::new(QpShared {
            qpn,
            gid: self.inner.gid,
            pd: pd.clone(),
            send_cq: Arc::clone(send_cq),
            recv_cq: Arc::clone(recv_cq),
            caps,
            core: Mutex::new(Core {
                state: QpState::Reset,
                access: Access::NONE,
                dest_qpn: None,
                rq_psn: 0,
                sq_psn: 0,
                timeout: Duration::from_secs(5),
                rnr_wait: Duration::from_secs(2),
                stream: None,
                started: false,
                sq: Default::default(),
                outstanding: Default::default(),
                next_seq: 0,
                first_unacked: 0,
                reads_out: 0,
                rq: Default::default(),
                cur_recv: None,
                responses: Default::default(),
                answering: false,
                requesting: false,
                reads_pending: 0,
            }),
            cv: Condvar::new(),
            threads: Mutex::new(Vec::new()),
            wire: Mutex::new(Default::default()),
            ack_rest_pending: AtomicBool::new(false),
        });
        qps.insert(qpn, Arc::downgrade(&shared));
        QueuePair {
            shared,
            device: Arc::downgrade(&self.inner),
        }
    }
}

fn accept_loop(
    l: &TcpListener,
    dev: &Weak<DeviceInner>,
    stop: &AtomicBool,
    busy: &Arc<AtomicUsize>,
) {
    for conn in l.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(sock) = conn else { continue };
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_HANDSHAKES {
            busy.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let (dev, busy2) = (dev.clone(), Arc::clone(busy));
        let spawned = std::thread::Builder::new()
            .name("soft-pair".into())
            .spawn(move || {
                handshake(sock, &dev);
                busy2.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Reads one frame of exactly `HEADER_LEN + CONNECT_PAYLOAD` bytes and its token.
fn read_pairing(sock: &mut TcpStream, want: Opcode) -> Result<(Header, RcToken), ()> {
    let mut buf = [0u8; HEADER_LEN + TOKEN_BYTES];
    let hdr = {
        let head = buf.get_mut(..HEADER_LEN).ok_or(())?;
        sock.read_exact(head).map_err(|_| ())?;
        decode_header(head).map_err(|_| ())?
    };
    if hdr.opcode == Opcode::Nak || hdr.opcode != want {
        return Err(());
    }
    let body: &mut [u8; TOKEN_BYTES] = buf
        .get_mut(HEADER_LEN..)
        .and_then(|s| s.try_into().ok())
        .ok_or(())?;
    sock.read_exact(body).map_err(|_| ())?;
    let token = RcToken::from_bytes(body).map_err(|_| ())?;
    if token.transport != Transport::Rc {
        return Err(());
    }
    Ok((hdr, token))
}

fn pairing_frame(opcode: Opcode, aux: u64, token: &RcToken) -> Vec<u8> {
    let h = Header {
        len: CONNECT_PAYLOAD,
        aux,
        ..Header::new(opcode, 0)
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(&token.to_bytes());
    v
}

/// The listener side of one pairing.
fn handshake(mut sock: TcpStream, dev: &Weak<DeviceInner>) {
    if sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).is_err()
        || sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT)).is_err()
    {
        return;
    }
    let Ok((hdr, peer)) = read_pairing(&mut sock, Opcode::Connect) else {
        return;
    };
    let dest = u32::try_from(hdr.aux).unwrap_or(u32::MAX);
    let qp = dev.upgrade().and_then(|d| d.find(dest));
    let refuse = |mut s: TcpStream| {
        let h = Header {
            aux: NakCode::ConnectRefused.to_u64(),
            ..Header::new(Opcode::Nak, 0)
        };
        let _ = s.write_all(&h.encode());
    };
    let Some(qp) = qp else { return refuse(sock) };
    let Ok(clone) = sock.try_clone() else { return };
    // Answer first, then attach: the QP's threads start only after the ACK is on the wire.
    {
        let c = qp.lock();
        let acceptable = matches!(c.state, QpState::Init | QpState::Rtr | QpState::Rts)
            && c.stream.is_none()
            && c.dest_qpn.is_none_or(|d| d == peer.qpn);
        drop(c);
        if !acceptable {
            return refuse(sock);
        }
    }
    if sock
        .write_all(&pairing_frame(Opcode::ConnectAck, 0, &qp.token()))
        .is_err()
    {
        return;
    }
    if !qp.attach(Arc::new(clone), peer.qpn) {
        let _ = sock.shutdown(std::net::Shutdown::Both);
    }
}

/// The dialing side of pairing, run inside `modify_to_rtr`.
pub(crate) fn dial(qp: &QpShared, addr: SocketAddr, attr: &RtrAttr) -> Result<TcpStream, QpError> {
    let err = |e: std::io::Error| QpError::Connect(e.to_string());
    let mut sock = TcpStream::connect_timeout(&addr, attr.connect_timeout).map_err(err)?;
    sock.set_nodelay(true).map_err(err)?;
    sock.set_read_timeout(Some(attr.connect_timeout))
        .map_err(err)?;
    sock.set_write_timeout(Some(attr.connect_timeout))
        .map_err(err)?;
    sock.write_all(&pairing_frame(
        Opcode::Connect,
        u64::from(attr.dest_qpn),
        &qp.token(),
    ))
    .map_err(err)?;
    let (_, peer) = read_pairing(&mut sock, Opcode::ConnectAck).map_err(|()| QpError::Refused)?;
    if peer.qpn != attr.dest_qpn {
        return Err(QpError::PeerMismatch("qpn"));
    }
    if attr.dgid != [0; 16] && peer.gid != attr.dgid {
        return Err(QpError::PeerMismatch("gid"));
    }
    Ok(sock)
}
