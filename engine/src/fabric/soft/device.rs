//! The soft device: QP numbers, the pairing listener, and the dial side of pairing.
//!
//! Pairing over TCP (one connection per QP pair): for the side whose RTR names
//! [`SoftPath::Connect`], the QP's I/O thread dials the peer device's listener (`dial.rs`,
//! non-blocking steps; `modify_to_rtr` does not wait) and sends `CONNECT` — its own RC
//! token (QPN, GID) as payload and the QPN it wants in `aux`. The listener hands the
//! connection to that QP if it exists, is in `Init`, `Rtr` or `Rts`, is not yet paired, and (once its
//! RTR named a peer) the token's QPN is that peer; it answers `CONNECT_ACK` with its own token,
//! else `NAK(ConnectRefused)` and closes. The listener and its handshakes run on the device's
//! first I/O thread as non-blocking steps (`pairing.rs`), each dropped 5 s after its accept;
//! at most [`MAX_HANDSHAKES`] at once.
//!
//! I/O threads: a device owns a fixed set of them (`io.rs`), named `soft-io-<device>-<i>`,
//! started when its first QP is made or it listens: [`default_io_threads`] unless
//! [`SoftDevice::with_io_threads`] says otherwise. Every QP of the device is served by one of
//! them; none is started per QP, per operation or per connection.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use s3_lite::rdma::{RcToken, gid_from_ipv4};

use super::cq::CompletionQueue;
use super::frame::{CONNECT_PAYLOAD, Header, Opcode, PSN_MASK};
use super::io::{Cmd, IoPlacement, IoPool, default_io_threads};
use super::mr::ProtectionDomain;
use super::qp::{QpCaps, QpState, QueuePair};
use super::shared::{Core, QpShared};
use super::wr::Access;

/// Pairing handshakes served at once; more are closed at once.
pub const MAX_HANDSHAKES: usize = 64;

#[derive(Debug)]
pub(crate) struct DeviceInner {
    gid: [u8; 16],
    qps: Mutex<HashMap<u32, Weak<QpShared>>>,
    listen: Mutex<Option<SocketAddr>>,
    /// How many I/O threads to start.
    io_threads: usize,
    /// Where they run.
    io_placement: IoPlacement,
    /// The I/O threads, started on first need (`None` inside: they could not be started).
    io: OnceLock<Option<Arc<IoPool>>>,
}

impl DeviceInner {
    pub(crate) fn forget(&self, qpn: u32) {
        self.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&qpn);
    }

    pub(crate) fn find(&self, qpn: u32) -> Option<Arc<QpShared>> {
        self.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&qpn)?
            .upgrade()
    }

    /// The device's I/O threads, started now if they are not yet.
    fn pool(&self) -> Option<Arc<IoPool>> {
        self.io
            .get_or_init(|| IoPool::start(self.io_threads, self.io_placement).ok())
            .clone()
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // The listener closes; the threads end once the last QP made here is gone too.
        if let Some(Some(io)) = self.io.get()
            && self
                .listen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
        {
            io.send(0, Cmd::Unlisten);
        }
    }
}

/// A soft RDMA device (one per process side; cheap to clone).
#[derive(Debug, Clone)]
pub struct SoftDevice {
    inner: Arc<DeviceInner>,
}

impl SoftDevice {
    /// A device whose GID is the IPv4-mapped `ip` (what RoCEv2 GIDs look like), with
    /// [`default_io_threads`] I/O threads.
    #[must_use]
    pub fn new(ip: Ipv4Addr) -> Self {
        Self::with_io_threads(ip, default_io_threads())
    }

    /// A device with `threads` I/O threads (1 ..= [`super::io::MAX_IO_THREADS`]; clamped).
    /// They start with the first QP or [`SoftDevice::listen`] and serve every QP of the device.
    #[must_use]
    pub fn with_io_threads(ip: Ipv4Addr, threads: usize) -> Self {
        Self::with_io(ip, threads, IoPlacement::Float)
    }

    /// A device with `threads` I/O threads placed as `placement` says (see [`IoPlacement`]).
    #[must_use]
    pub fn with_io(ip: Ipv4Addr, threads: usize, placement: IoPlacement) -> Self {
        Self {
            inner: Arc::new(DeviceInner {
                gid: gid_from_ipv4(ip),
                qps: Mutex::new(HashMap::new()),
                listen: Mutex::new(None),
                io_threads: threads.clamp(1, super::io::MAX_IO_THREADS),
                io_placement: placement,
                io: OnceLock::new(),
            }),
        }
    }

    /// The process's shared device for `ip`, made on first use and kept for the life of the
    /// process: every engine (and every worker) that dials peers from `ip` makes its QPs here,
    /// so the process runs one fixed set of soft I/O threads per address, not a set per
    /// engine, worker or operation. Its threads are [`IoPlacement::PerCpu`]: a worker's QPs
    /// are served on the worker's core.
    #[must_use]
    pub fn shared(ip: Ipv4Addr) -> Self {
        static SHARED: OnceLock<Mutex<HashMap<Ipv4Addr, SoftDevice>>> = OnceLock::new();
        SHARED
            .get_or_init(|| Mutex::new(HashMap::new()))
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(ip)
            .or_insert_with(|| Self::with_io(ip, default_io_threads(), IoPlacement::PerCpu))
            .clone()
    }

    /// How many I/O threads this device runs (once started).
    #[must_use]
    pub fn io_threads(&self) -> usize {
        self.inner.io_threads
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
    /// The device's first I/O thread serves the listener and the handshakes; the listener
    /// closes when the last clone of the device is dropped.
    pub fn listen(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let io = self
            .inner
            .pool()
            .ok_or_else(|| std::io::Error::other("the soft device's I/O threads did not start"))?;
        let l = TcpListener::bind(addr)?;
        let bound = l.local_addr()?;
        l.set_nonblocking(true)?;
        if !io.send(0, Cmd::Listen(l, Arc::downgrade(&self.inner))) {
            return Err(std::io::Error::other("the soft device's I/O threads ended"));
        }
        *self
            .inner
            .listen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(bound);
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
                dialing: false,
                dial_error: None,
                sq: Default::default(),
                outstanding: Default::default(),
                next_seq: 0,
                first_unacked: 0,
                reads_out: 0,
                rq: Default::default(),
                cur_recv: None,
                responses: Default::default(),
                deferred_ack: None,
                counters: super::qp::QpCounters::default(),
                answering: false,
                requesting: false,
                reads_pending: 0,
                rnr_waiting: false,
                drain_waiters: 0,
            }),
            cv: Condvar::new(),
            wire: Mutex::new(Default::default()),
            io: self.inner.pool(),
            thread: OnceLock::new(),
            kicked: AtomicBool::new(false),
        });
        qps.insert(qpn, Arc::downgrade(&shared));
        QueuePair {
            shared,
            device: Arc::downgrade(&self.inner),
        }
    }
}

pub(crate) fn pairing_frame(opcode: Opcode, aux: u64, token: &RcToken) -> Vec<u8> {
    let h = Header {
        len: CONNECT_PAYLOAD,
        aux,
        ..Header::new(opcode, 0)
    };
    let mut v = h.encode().to_vec();
    v.extend_from_slice(&token.to_bytes());
    v
}
