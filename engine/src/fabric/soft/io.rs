//! The soft device's I/O threads: a fixed set per device, each a `mio` poll loop over the
//! non-blocking sockets of the queue pairs attached to it (and, on the first, the device's
//! pairing listener and its handshakes), and the dials of its QPs whose RTR named
//! `SoftPath::Connect` (`dial.rs`).
//!
//! A QP is attached to one thread when it becomes ready (RTR/RTS with a connection), the least
//! loaded one, and stays there until it is detached. Its receive side ([`Rx`]) and write side
//! ([`super::tx`]) are resumable steps, so the loop never waits on one peer: a stalled peer
//! holds only its own QP's state. RNR waits, stall timeouts, the drain after a NAK, the
//! pairing timeout and the dial bound are the loop's timers. Posting threads talk to the loop through its inbox
//! and its `mio::Waker` ([`IoPool::send`]): the waker is rung only when the inbox was empty, and
//! a QP is kicked only when it is not already (`QpShared::kick`).
//!
//! No thread is created per QP, per operation or per accepted connection. A QP's teardown
//! detaches it ([`IoPool::detach`]) and waits only for the loop's acknowledgement, after which
//! the loop holds nothing of the QP. The threads end when the device and every QP made on it
//! are gone.

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};

use super::device::DeviceInner;
use super::dial::{Dial, DialReq};
use super::pairing::Pairing;
use super::qp::QpState;
use super::rx::{Pass, Rx, Stop};
use super::shared::{QpShared, Resp, Shut};
use super::tx;
use super::wr::WcStatus;

/// The I/O threads a device starts unless told otherwise: one per CPU the process may run on
/// (its main thread's affinity, [`crate::sys::process_cpus`]), at most
/// [`DEFAULT_IO_THREADS_MAX`], at least 1. A thread does the kernel's TCP work of the QPs it
/// serves (copies, checksums, loopback delivery), so a device with many busy QPs wants about
/// as many threads as it has cores for them.
///
/// The process's set, not the calling thread's: the engine's shared device is first used on a
/// worker, which is pinned to one core, and asking there (`available_parallelism`) answered 1.
/// Measured on a 16-core host (clients on 8 cores, concurrency 16, 16 MiB soft range-gets),
/// that one thread, at 95% of a core, carried every QP's bytes: 2.4 GB/s against 11 GB/s.
#[must_use]
pub fn default_io_threads() -> usize {
    crate::sys::process_cpus()
        .map_or_else(
            || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            |c| c.len(),
        )
        .clamp(1, DEFAULT_IO_THREADS_MAX)
}

/// The most I/O threads [`default_io_threads`] starts.
pub const DEFAULT_IO_THREADS_MAX: usize = 16;

/// Largest I/O thread count a device accepts.
pub const MAX_IO_THREADS: usize = 64;

/// Bytes one QP may read per turn before the loop serves the others (fairness).
const READ_BUDGET: usize = 4 << 20;
/// The loop's timer tick bound (stall checks run at `min(timeout, TICK)`).
const TICK: Duration = Duration::from_millis(100);
/// How long a teardown waits for the loop's acknowledgement of a detach.
pub(crate) const DETACH_LIMIT: Duration = Duration::from_secs(2);

const WAKE: Token = Token(usize::MAX);
const LISTEN: Token = Token(usize::MAX - 1);
/// Tokens at and above this name pairings; from [`DIAL_BASE`] up to it, dials (by QPN);
/// below that, attached QPs by QPN (24 bits).
const PAIR_BASE: usize = 1 << 30;
const DIAL_BASE: usize = 1 << 28;

static NEXT_DEVICE: AtomicU32 = AtomicU32::new(0);

/// A detach's acknowledgement.
#[derive(Debug, Default)]
pub(crate) struct Ack {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Ack {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cv.notify_all();
    }

    fn wait(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let mut d = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        while !*d {
            let now = Instant::now();
            if now >= end {
                return false;
            }
            d = self
                .cv
                .wait_timeout(d, end - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// What other threads ask of a loop.
pub(crate) enum Cmd {
    /// Serve this QP's connection.
    Attach(Arc<QpShared>, Arc<TcpStream>),
    /// Dial the QP's peer and pair (`modify_to_rtr` with `SoftPath::Connect`).
    Dial(Arc<QpShared>, DialReq),
    /// The QP has something to send, or a RECV for a waiting frame.
    Kick(u32),
    /// Stop serving the QP and forget it; acknowledge.
    Detach(u32, Arc<Ack>),
    /// Accept pairing connections for the device.
    Listen(TcpListener, Weak<DeviceInner>),
    /// Close the listener (the device is gone).
    Unlisten,
    /// End the thread.
    Stop,
}

/// One loop's mailbox.
struct Handle {
    inbox: Mutex<Vec<Cmd>>,
    waker: Waker,
    stopped: AtomicBool,
    /// QPs attached (for least-loaded placement).
    load: AtomicUsize,
    /// The one CPU the thread runs on ([`IoPlacement::PerCpu`]); `None`: the process's CPUs.
    cpu: Option<usize>,
}

/// Where a device's I/O threads run and which one serves a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoPlacement {
    /// Every I/O thread may run on all of the process's CPUs; a QP goes to the least loaded
    /// thread. The default (the gateway's device).
    #[default]
    Float,
    /// Each I/O thread runs on one CPU of the process (spread evenly over them), and a QP that
    /// dials its peer from a thread goes to the I/O thread on the CPU that thread runs on, when
    /// there is one (else the least loaded). The engine's shared device: its workers are
    /// pinned, so a worker's QP is served on the worker's own core and its bytes land in the
    /// cache the worker then checksums them from. Measured on a 16-core host (client on 8
    /// cores, concurrency 16, three interleaved passes): 1 MiB 12.23 against 11.10 GB/s
    /// floating, 16 MiB 14.99 against 12.71 (docs/benchmarks.md).
    PerCpu,
}

/// A device's I/O threads.
pub(crate) struct IoPool {
    dev: u32,
    handles: Vec<Arc<Handle>>,
    joins: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for IoPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoPool")
            .field("dev", &self.dev)
            .field("threads", &self.handles.len())
            .finish()
    }
}

impl IoPool {
    /// Starts `n` threads named `soft-io-<dev>-<i>`, placed as `placement` says.
    pub(crate) fn start(n: usize, placement: IoPlacement) -> std::io::Result<Arc<Self>> {
        let dev = NEXT_DEVICE.fetch_add(1, Ordering::Relaxed);
        let mut handles = Vec::new();
        let mut joins = Vec::new();
        // The process's CPUs: a thread inherits its spawner's affinity, and the spawner may be
        // a worker pinned to one core, which would confine every I/O thread to that core.
        let cpus = crate::sys::process_cpus();
        let n = n.clamp(1, MAX_IO_THREADS);
        for i in 0..n {
            let cpu = match (placement, &cpus) {
                (IoPlacement::PerCpu, Some(c)) => c.get(i * c.len() / n).copied(),
                _ => None,
            };
            let poll = Poll::new()?;
            let waker = Waker::new(poll.registry(), WAKE)?;
            let h = Arc::new(Handle {
                inbox: Mutex::new(Vec::new()),
                waker,
                stopped: AtomicBool::new(false),
                load: AtomicUsize::new(0),
                cpu,
            });
            let h2 = Arc::clone(&h);
            let cpus = cpu.map_or_else(|| cpus.clone(), |c| Some(vec![c]));
            let spawned = std::thread::Builder::new()
                .name(format!("soft-io-{dev}-{i}"))
                .spawn(move || {
                    if let Some(c) = cpus {
                        // Not fatal: the thread then runs where its spawner could.
                        let _ = crate::sys::set_thread_cpus(&c);
                    }
                    Loop::new(poll, h2).run();
                });
            match spawned {
                Ok(j) => {
                    handles.push(h);
                    joins.push(j);
                }
                Err(e) => {
                    for h in &handles {
                        h.push(Cmd::Stop);
                    }
                    for j in joins {
                        let _ = j.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Arc::new(Self {
            dev,
            handles,
            joins: Mutex::new(joins),
        }))
    }

    /// The least loaded thread, counted as loaded by this QP at once: QPs attached in a burst
    /// (every worker pairing at start) pick before any thread has taken its attach, and
    /// counting at the attach put them all on thread 0, one thread moving every QP's bytes.
    pub(crate) fn pick(&self) -> usize {
        self.pick_near(None)
    }

    /// The thread pinned to `cpu` when there is one ([`IoPlacement::PerCpu`]), else
    /// [`IoPool::pick`]'s; counted as loaded at once, as there.
    pub(crate) fn pick_near(&self, cpu: Option<usize>) -> usize {
        let near = cpu.and_then(|c| self.handles.iter().position(|h| h.cpu == Some(c)));
        let i = near.unwrap_or_else(|| self.least_loaded());
        if let Some(h) = self.handles.get(i) {
            h.load.fetch_add(1, Ordering::Relaxed);
        }
        i
    }

    fn least_loaded(&self) -> usize {
        self.handles
            .iter()
            .enumerate()
            .min_by_key(|(_, h)| h.load.load(Ordering::Relaxed))
            .map_or(0, |(i, _)| i)
    }

    /// Hands `cmd` to thread `i`; `false` when it has ended.
    pub(crate) fn send(&self, i: usize, cmd: Cmd) -> bool {
        self.handles.get(i).is_some_and(|h| h.push(cmd))
    }

    /// Detaches QP `qpn` from thread `i` and waits up to `limit` for the acknowledgement.
    pub(crate) fn detach(&self, i: usize, qpn: u32, limit: Duration) -> bool {
        let ack = Arc::new(Ack::default());
        if !self.send(i, Cmd::Detach(qpn, Arc::clone(&ack))) {
            return true;
        }
        ack.wait(limit)
    }
}

impl Handle {
    fn push(&self, cmd: Cmd) -> bool {
        let was_empty = {
            let mut q = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            if self.stopped.load(Ordering::Acquire) {
                drop(q);
                if let Cmd::Detach(_, ack) = cmd {
                    ack.set();
                }
                return false;
            }
            let e = q.is_empty();
            q.push(cmd);
            e
        };
        // A non-empty inbox has a wake-up pending already.
        if was_empty {
            // A failed wake leaves the loop to its next timer; nothing else to do.
            let _ = self.waker.wake();
        }
        true
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        for h in &self.handles {
            h.push(Cmd::Stop);
        }
        let me = std::thread::current().id();
        let joins = std::mem::take(&mut *self.joins.lock().unwrap_or_else(PoisonError::into_inner));
        for j in joins {
            // The last reference may go on one of these threads itself: it ends on its own.
            if j.thread().id() != me {
                let _ = j.join();
            }
        }
    }
}

/// A QP's connection on its loop.
struct Conn {
    qp: Arc<QpShared>,
    sock: Arc<TcpStream>,
    /// A second descriptor of the same socket, registered with the poll.
    reg: mio::net::TcpStream,
    rx: Rx,
    rx_ready: bool,
    /// The write side has something to do (attach, a kick, answers or an opened window from
    /// the read side, writability after a full socket): only then is it pumped, so a turn
    /// that only reads takes no lock the posting thread may hold.
    tx_due: bool,
    /// The last pump left a frame partly written (the socket was full).
    tx_blocked: bool,
}

/// What serving a connection left.
enum Turn {
    Keep,
    /// More to read: serve it again before sleeping.
    Again,
    Remove,
}

struct Loop {
    poll: Poll,
    h: Arc<Handle>,
    conns: HashMap<u32, Conn>,
    listener: Option<(mio::net::TcpListener, Weak<DeviceInner>)>,
    pairings: HashMap<usize, Pairing>,
    next_pairing: usize,
    /// Dials in progress, by QPN.
    dials: HashMap<u32, Dial>,
    again: Vec<u32>,
    next_sweep: Option<Instant>,
    /// The soonest RNR-wait or drain deadline armed since the last sweep.
    soonest: Option<Instant>,
}

impl Loop {
    fn new(poll: Poll, h: Arc<Handle>) -> Self {
        Self {
            poll,
            h,
            conns: HashMap::new(),
            listener: None,
            pairings: HashMap::new(),
            next_pairing: 0,
            dials: HashMap::new(),
            again: Vec::new(),
            next_sweep: None,
            soonest: None,
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let mut work: Vec<u32> = Vec::new();
        loop {
            let now = Instant::now();
            let timeout = if self.again.is_empty() {
                [self.next_sweep, self.soonest]
                    .into_iter()
                    .flatten()
                    .min()
                    .map(|t| t.saturating_duration_since(now))
            } else {
                Some(Duration::ZERO)
            };
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != std::io::ErrorKind::Interrupted
            {
                // The poll itself failed: nothing can be served any more.
                break;
            }
            let mut accept = false;
            for ev in &events {
                match ev.token() {
                    WAKE => {}
                    LISTEN => accept = true,
                    Token(t) if t >= PAIR_BASE => self.pairing(t),
                    Token(t) if t >= DIAL_BASE => self.dial_step((t - DIAL_BASE) as u32),
                    Token(t) => {
                        let qpn = t as u32;
                        if let Some(c) = self.conns.get_mut(&qpn) {
                            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                                c.rx_ready = true;
                            }
                            if (ev.is_writable() && c.tx_blocked)
                                || ev.is_write_closed()
                                || ev.is_error()
                            {
                                c.tx_due = true;
                            }
                            work.push(qpn);
                        }
                    }
                }
            }
            if accept {
                self.accept();
            }
            let cmds =
                std::mem::take(&mut *self.h.inbox.lock().unwrap_or_else(PoisonError::into_inner));
            let mut stop = false;
            for cmd in cmds {
                match cmd {
                    Cmd::Attach(qp, sock) => {
                        if let Some(qpn) = self.attach(qp, sock) {
                            work.push(qpn);
                        }
                    }
                    Cmd::Dial(qp, req) => self.dial(qp, req),
                    Cmd::Kick(qpn) => {
                        if let Some(c) = self.conns.get_mut(&qpn) {
                            c.qp.kicked.store(false, Ordering::Release);
                            c.tx_due = true;
                            work.push(qpn);
                        }
                    }
                    Cmd::Detach(qpn, ack) => {
                        self.remove(qpn);
                        self.drop_dial(qpn);
                        ack.set();
                    }
                    Cmd::Listen(l, dev) => self.listen(l, dev),
                    Cmd::Unlisten => self.unlisten(),
                    Cmd::Stop => stop = true,
                }
            }
            if stop {
                break;
            }
            work.append(&mut self.again);
            work.sort_unstable();
            work.dedup();
            for qpn in work.drain(..) {
                self.serve(qpn);
            }
            let now = Instant::now();
            if self.next_sweep.is_none_or(|t| now >= t) || self.soonest.is_some_and(|t| now >= t) {
                self.sweep(now);
            }
        }
        self.shutdown();
    }

    /// Ends the loop: refuses further commands (acknowledging detaches) and drops everything.
    fn shutdown(&mut self) {
        let cmds = {
            let mut q = self.h.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            self.h.stopped.store(true, Ordering::Release);
            std::mem::take(&mut *q)
        };
        for cmd in cmds {
            if let Cmd::Detach(_, ack) = cmd {
                ack.set();
            }
        }
        let dials: Vec<u32> = self.dials.keys().copied().collect();
        for qpn in dials {
            self.end_dial(
                qpn,
                Err(super::qp::QpError::Connect("the I/O thread ended".into())),
            );
        }
        let qpns: Vec<u32> = self.conns.keys().copied().collect();
        for qpn in qpns {
            if let Some(c) = self.conns.get(&qpn) {
                let mut core = c.qp.lock();
                c.qp.fail(&mut core, None, Shut::Both);
            }
            self.remove(qpn);
        }
        self.unlisten();
    }

    fn attach(&mut self, qp: Arc<QpShared>, sock: Arc<TcpStream>) -> Option<u32> {
        let qpn = qp.qpn;
        // A QPN reused before a timed-out detach finished: the old connection goes.
        self.remove(qpn);
        let reg = sock.try_clone().ok().map(mio::net::TcpStream::from_std);
        let Some(mut reg) = reg else {
            self.h.load.fetch_sub(1, Ordering::Relaxed);
            let mut c = qp.lock();
            qp.fail(&mut c, None, Shut::Both);
            return None;
        };
        if self
            .poll
            .registry()
            .register(
                &mut reg,
                Token(qpn as usize),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            self.h.load.fetch_sub(1, Ordering::Relaxed);
            let mut c = qp.lock();
            qp.fail(&mut c, None, Shut::Both);
            return None;
        }
        let epsn = qp.lock().rq_psn;
        self.conns.insert(
            qpn,
            Conn {
                qp,
                sock,
                reg,
                rx: Rx::new(epsn),
                rx_ready: true,
                tx_due: true,
                tx_blocked: false,
            },
        );
        if self.next_sweep.is_none() {
            self.next_sweep = Some(Instant::now() + TICK);
        }
        Some(qpn)
    }

    fn remove(&mut self, qpn: u32) {
        if let Some(mut c) = self.conns.remove(&qpn) {
            let _ = self.poll.registry().deregister(&mut c.reg);
            self.h.load.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// One turn of a connection: read what is there (up to the budget), then write what can
    /// be written.
    fn serve(&mut self, qpn: u32) {
        let Some(c) = self.conns.get_mut(&qpn) else {
            return;
        };
        let turn = c.turn();
        if let Some(d) = c.next_timer() {
            self.soonest = Some(self.soonest.map_or(d, |s| s.min(d)));
        }
        match turn {
            Turn::Keep => {}
            Turn::Again => self.again.push(qpn),
            Turn::Remove => self.remove(qpn),
        }
    }

    /// Timers: RNR waits, drains, stalls, pairing timeouts; then the next tick.
    fn sweep(&mut self, now: Instant) {
        let mut tick = TICK;
        let mut soonest: Option<Instant> = None;
        let mut gone = Vec::new();
        let mut serve = Vec::new();
        for (qpn, c) in &mut self.conns {
            match c.timers(now) {
                Turn::Remove => gone.push(*qpn),
                Turn::Again => serve.push(*qpn),
                Turn::Keep => {}
            }
            tick = tick.min(c.qp.lock().timeout.max(Duration::from_millis(1)));
            if let Some(d) = c.next_timer() {
                soonest = Some(soonest.map_or(d, |s| s.min(d)));
            }
        }
        for qpn in gone {
            self.remove(qpn);
        }
        let expired: Vec<usize> = self
            .pairings
            .iter()
            .filter(|(_, p)| now >= p.until)
            .map(|(t, _)| *t)
            .collect();
        for t in expired {
            self.drop_pairing(t);
        }
        let late: Vec<u32> = self
            .dials
            .iter()
            .filter(|(_, d)| now >= d.until)
            .map(|(q, _)| *q)
            .collect();
        for qpn in late {
            self.end_dial(qpn, Err(super::qp::QpError::Connect("timed out".into())));
        }
        for d in self.dials.values() {
            soonest = Some(soonest.map_or(d.until, |s| s.min(d.until)));
        }
        self.soonest = soonest;
        // After the timers are set: a turn may arm one (a held-back ACK, an RNR wait).
        for qpn in serve {
            self.serve(qpn);
        }
        self.next_sweep = (!self.conns.is_empty() || !self.pairings.is_empty()).then(|| now + tick);
    }

    fn listen(&mut self, l: TcpListener, dev: Weak<DeviceInner>) {
        self.unlisten();
        if l.set_nonblocking(true).is_err() {
            return;
        }
        let mut l = mio::net::TcpListener::from_std(l);
        if self
            .poll
            .registry()
            .register(&mut l, LISTEN, Interest::READABLE)
            .is_ok()
        {
            self.listener = Some((l, dev));
        }
    }

    fn unlisten(&mut self) {
        if let Some((mut l, _)) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        let all: Vec<usize> = self.pairings.keys().copied().collect();
        for t in all {
            self.drop_pairing(t);
        }
    }

    /// Accepts every waiting pairing connection (beyond [`super::MAX_HANDSHAKES`] in progress,
    /// closes them at once).
    fn accept(&mut self) {
        loop {
            let Some((l, dev)) = self.listener.as_ref() else {
                return;
            };
            let sock = match l.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A connection that failed before we took it (reset): the next one.
                Err(_) => continue,
            };
            if self.pairings.len() >= super::device::MAX_HANDSHAKES {
                continue;
            }
            let dev = dev.clone();
            let t = PAIR_BASE + self.next_pairing;
            self.next_pairing = (self.next_pairing + 1) % (1 << 20);
            let mut p = Pairing::new(sock, dev);
            if self
                .poll
                .registry()
                .register(
                    &mut p.sock,
                    Token(t),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                continue;
            }
            self.pairings.insert(t, p);
            if self.next_sweep.is_none() {
                self.next_sweep = Some(Instant::now() + TICK);
            }
            self.pairing(t);
        }
    }

    /// Advances pairing `t`; hands a paired connection to its QP.
    fn pairing(&mut self, t: usize) {
        let Some(p) = self.pairings.get_mut(&t) else {
            return;
        };
        if p.step() {
            return;
        }
        if let Some(mut p) = self.pairings.remove(&t) {
            let _ = self.poll.registry().deregister(&mut p.sock);
            p.finish();
        }
    }

    /// Starts the dial of `qp`'s peer (the loop's timer bounds it by `req.timeout`).
    fn dial(&mut self, qp: Arc<QpShared>, req: DialReq) {
        let qpn = qp.qpn;
        // A QPN reused before a timed-out detach finished: the old dial goes.
        self.drop_dial(qpn);
        let mut d = match Dial::start(qp, req) {
            Ok(d) => d,
            Err((qp, e)) => {
                super::dial::failed(&qp, e);
                return;
            }
        };
        if let Err(e) = self.poll.registry().register(
            &mut d.sock,
            Token(DIAL_BASE + qpn as usize),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            d.finish(Err(super::qp::QpError::Connect(e.to_string())));
            return;
        }
        self.soonest = Some(self.soonest.map_or(d.until, |s| s.min(d.until)));
        self.dials.insert(qpn, d);
        self.dial_step(qpn);
    }

    /// Advances QP `qpn`'s dial; ends it when it is over.
    fn dial_step(&mut self, qpn: u32) {
        let Some(d) = self.dials.get_mut(&qpn) else {
            return;
        };
        if let Some(outcome) = d.step() {
            self.end_dial(qpn, outcome);
        }
    }

    /// Ends QP `qpn`'s dial with `outcome` (the QP is attached or failed).
    fn end_dial(&mut self, qpn: u32, outcome: Result<(), super::qp::QpError>) {
        if let Some(mut d) = self.dials.remove(&qpn) {
            let _ = self.poll.registry().deregister(&mut d.sock);
            d.finish(outcome);
        }
    }

    /// Forgets QP `qpn`'s dial (the QP is being torn down; it fails itself).
    fn drop_dial(&mut self, qpn: u32) {
        if let Some(mut d) = self.dials.remove(&qpn) {
            let _ = self.poll.registry().deregister(&mut d.sock);
            let _ = d.sock.shutdown(std::net::Shutdown::Both);
        }
    }

    fn drop_pairing(&mut self, t: usize) {
        if let Some(mut p) = self.pairings.remove(&t) {
            let _ = self.poll.registry().deregister(&mut p.sock);
        }
    }
}

impl Conn {
    fn turn(&mut self) -> Turn {
        let mut again = false;
        if self.rx_ready || self.rx.waiting_recv() {
            if self.rx.waiting_recv()
                && let Err(s) = self.rx.retry_recv(&self.qp, Instant::now())
                && let Some(t) = self.stopped(s)
            {
                return t;
            }
            if self.rx_ready {
                match self.rx.pass(&self.qp, &self.sock, READ_BUDGET) {
                    Ok(Pass::Blocked) => self.rx_ready = false,
                    Ok(Pass::Budget) => again = true,
                    Ok(Pass::Waiting) => {}
                    Ok(Pass::Drained) => return self.drained(),
                    Err(s) => {
                        if let Some(t) = self.stopped(s) {
                            return t;
                        }
                        // A NAK is queued: the drain reads on at the next turn.
                        again = true;
                    }
                }
            }
        }
        if std::mem::take(&mut self.rx.tx_hint) {
            self.tx_due = true;
        }
        if !std::mem::take(&mut self.tx_due) {
            return if again { Turn::Again } else { Turn::Keep };
        }
        match tx::pump(&self.qp, &self.sock) {
            Ok(blocked) => self.tx_blocked = blocked,
            Err(tx::Stop::Closed) => {
                if !self.rx.draining() {
                    return Turn::Remove;
                }
            }
            Err(tx::Stop::Wire) => {
                self.fail_front(WcStatus::RetryExceeded);
                if !self.rx.draining() {
                    return Turn::Remove;
                }
            }
        }
        if again { Turn::Again } else { Turn::Keep }
    }

    /// Handles a receive-side stop; `None` when the connection lives on (draining after a NAK).
    fn stopped(&mut self, s: Stop) -> Option<Turn> {
        match s {
            Stop::Closed => Some(Turn::Remove),
            Stop::Wire => {
                self.fail_front(WcStatus::RetryExceeded);
                Some(Turn::Remove)
            }
            Stop::Bad(st) => {
                self.fail_front(st);
                Some(Turn::Remove)
            }
            Stop::Nak(psn, code) => {
                let mut c = self.qp.lock();
                if c.state != QpState::Err {
                    c.responses.clear();
                    // The NAK acknowledges everything before `psn`.
                    c.deferred_ack = None;
                    c.responses.push_back(Resp::Nak(psn, code));
                }
                drop(c);
                self.rx.start_drain();
                self.tx_due = true;
                None
            }
        }
    }

    /// The drain after a NAK is over: fail (if the NAK could not be sent) and close.
    fn drained(&mut self) -> Turn {
        let mut c = self.qp.lock();
        self.qp.fail(&mut c, None, Shut::Both);
        drop(c);
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        Turn::Remove
    }

    /// Fails the QP, the oldest outstanding request with `st`.
    fn fail_front(&self, st: WcStatus) {
        let mut c = self.qp.lock();
        let culprit = c.outstanding.front().map(|o| (o.first_seq, st));
        self.qp.fail(&mut c, culprit, Shut::Both);
    }

    /// The soonest of this connection's timers: the read side's (RNR wait, drain) and a
    /// held-back ACK's.
    fn next_timer(&self) -> Option<Instant> {
        [self.rx.deadline(), self.rx.ack_due]
            .into_iter()
            .flatten()
            .min()
    }

    /// This connection's timers at `now`.
    fn timers(&mut self, now: Instant) -> Turn {
        if self.rx.ack_timer(&self.qp, now) {
            self.tx_due = true;
            return Turn::Again;
        }
        if self.rx.waiting_recv() {
            if let Err(s) = self.rx.retry_recv(&self.qp, now) {
                return self.stopped(s).unwrap_or(Turn::Again);
            }
            if !self.rx.waiting_recv() {
                return Turn::Again;
            }
        }
        if self.rx.draining() {
            return match self.rx.deadline() {
                Some(d) if now >= d => self.drained(),
                _ => Turn::Keep,
            };
        }
        let c = self.qp.lock();
        if c.state == QpState::Err {
            return Turn::Remove;
        }
        let quiet = now.saturating_duration_since(self.rx.progress) > c.timeout;
        let waiting = c
            .outstanding
            .front()
            .is_some_and(|o| now.saturating_duration_since(o.sent_at) > c.timeout);
        let rx_stalled = quiet && (self.rx.mid_frame() || waiting) && !self.rx.waiting_recv();
        let tx_stalled = self
            .qp
            .wire_try()
            .is_some_and(|w| w.cur.is_some() && now.saturating_duration_since(w.since) > c.timeout);
        drop(c);
        if rx_stalled || tx_stalled {
            self.fail_front(WcStatus::RetryExceeded);
            return Turn::Remove;
        }
        Turn::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PerCpu` pins each thread to one CPU of the process, spread over them, and a dialling
    /// thread's CPU picks the thread pinned there; `Float` pins none and picks the least loaded.
    #[test]
    fn per_cpu_threads_are_pinned_and_picked_by_the_caller_cpu() {
        let cpus = crate::sys::process_cpus().expect("the process's CPUs");
        let n = cpus.len().min(4);
        let pool = IoPool::start(n, IoPlacement::PerCpu).unwrap();
        let pinned: Vec<usize> = pool.handles.iter().filter_map(|h| h.cpu).collect();
        assert_eq!(pinned.len(), n, "every thread pinned: {pinned:?}");
        let mut distinct = pinned.clone();
        distinct.dedup();
        assert_eq!(distinct, pinned, "one CPU each, in order: {pinned:?}");
        assert!(
            pinned.iter().all(|c| cpus.contains(c)),
            "{pinned:?} of {cpus:?}"
        );
        // The last thread's CPU picks the last thread, however loaded it is.
        let last = n - 1;
        for _ in 0..3 {
            assert_eq!(pool.pick_near(Some(pinned[last])), last);
        }
        // A CPU no thread runs on, or none: the least loaded (thread 0 has no load yet).
        assert_eq!(pool.pick_near(Some(usize::MAX)), 0);
        assert_eq!(pool.pick_near(None), usize::from(n > 2));

        let float = IoPool::start(2, IoPlacement::Float).unwrap();
        assert!(float.handles.iter().all(|h| h.cpu.is_none()));
        assert_eq!(float.pick_near(Some(cpus[0])), 0);
        assert_eq!(
            float.pick_near(Some(cpus[0])),
            1,
            "least loaded, not the CPU"
        );
    }
}
