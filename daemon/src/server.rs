//! The daemon's one thread: accepts clients, answers their requests, and moves their queues'
//! entries into the engine and completions back, round-robin between clients.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use engine::Engine;
use engine::attach::wire::{ClientStatus, ErrorKind, MAX_REQUEST, Reply, Request};
use engine::attach::{PeerCred, SeqPacket, SeqPacketListener, SharedMemory};
use engine::gpu::IpcExport;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use ring_api::QueueLayout;

use crate::DaemonConfig;
use crate::link::Link;
use crate::names::{Held, Names, Registration};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Longest a deregistration may hold the loop (the client's timeout is capped to it).
const MAX_DEREGISTER_WAIT: Duration = Duration::from_secs(5);
/// Most queues one client may open.
const MAX_QUEUES: usize = 64;

fn conn_token(client: u64) -> Token {
    Token((client as usize) << 2 | 2)
}

fn link_token(link: u64, engine_side: bool) -> Token {
    Token((link as usize) << 2 | usize::from(engine_side))
}

/// A connected process.
struct Client {
    conn: SeqPacket,
    cred: PeerCred,
    name: Option<String>,
    names: Names,
    links: HashMap<u64, Link>,
    ops: u64,
    bytes: u64,
}

impl Client {
    fn in_flight(&self) -> u32 {
        self.links.values().map(Link::in_flight).sum()
    }
}

/// Why a client is dropped.
type DropReason = String;

pub(crate) struct Server {
    engine: Engine,
    config: DaemonConfig,
    listener: SeqPacketListener,
    poll: Poll,
    clients: HashMap<u64, Client>,
    next_client: u64,
    next_link: u64,
    /// Registrations of departed clients still in use by operations being aborted.
    zombies: Vec<Registration>,
    rotation: usize,
}

impl Server {
    pub(crate) fn new(
        engine: Engine,
        config: DaemonConfig,
        listener: SeqPacketListener,
    ) -> io::Result<(Self, Arc<Waker>)> {
        let poll = Poll::new()?;
        poll.registry().register(
            &mut SourceFd(&listener.as_raw_fd()),
            LISTENER,
            Interest::READABLE,
        )?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok((
            Self {
                engine,
                config,
                listener,
                poll,
                clients: HashMap::new(),
                next_client: 1,
                next_link: 1,
                zombies: Vec::new(),
                rotation: 0,
            },
            waker,
        ))
    }

    /// Runs until `stop` is set (and the waker rung).
    pub(crate) fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        while !stop.load(Ordering::Relaxed) {
            let moved = self.turn_all();
            let timeout = if moved > 0 || !self.prepare_sleep() {
                Some(Duration::ZERO)
            } else if self.zombies.is_empty() {
                Some(Duration::from_secs(1))
            } else {
                Some(Duration::from_millis(50))
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            let mut readable = Vec::new();
            let mut fired = Vec::new();
            for ev in &events {
                match ev.token() {
                    LISTENER => self.accept_all(),
                    WAKER => {}
                    t if t.0 & 3 == 2 => readable.push((t.0 >> 2) as u64),
                    t => fired.push(((t.0 >> 2) as u64, t.0 & 1 == 1)),
                }
            }
            self.woke(&fired);
            for id in readable {
                self.read_requests(id);
            }
            self.reap_closed_links();
            self.retry_zombies();
        }
        Ok(())
    }

    /// One turn over every client queue, clients in rotating order. Returns entries moved.
    fn turn_all(&mut self) -> usize {
        let mut ids: Vec<u64> = self.clients.keys().copied().collect();
        ids.sort_unstable();
        if !ids.is_empty() {
            let r = self.rotation % ids.len();
            ids.rotate_left(r);
        }
        self.rotation = self.rotation.wrapping_add(1);
        let max = self.fair_share();
        let mut moved = 0;
        for id in ids {
            let Some(c) = self.clients.get_mut(&id) else {
                continue;
            };
            let mut link_ids: Vec<u64> = c.links.keys().copied().collect();
            link_ids.sort_unstable();
            for lid in link_ids {
                let allowance = max.saturating_sub(c.in_flight());
                let Some(link) = c.links.get_mut(&lid) else {
                    continue;
                };
                let t = link.turn(&mut c.names, allowance);
                c.ops += t.completed;
                c.bytes += t.bytes;
                moved += t.moved;
            }
        }
        moved
    }

    /// Operations in the engine each client may have now: the daemon's total allowance
    /// shared equally by the clients that have operations in flight or waiting, so that a
    /// newcomer's operations find room at once.
    fn fair_share(&mut self) -> u32 {
        let mut active = 0u32;
        for c in self.clients.values_mut() {
            if c.in_flight() > 0 || c.links.values_mut().any(Link::waiting) {
                active += 1;
            }
        }
        let active = active.max(1);
        (self.config.max_in_flight / active).max(1)
    }

    /// Announces sleep on every queue; `false` when one has work already.
    fn prepare_sleep(&mut self) -> bool {
        let max = self.fair_share();
        for c in self.clients.values_mut() {
            let bound = c.in_flight() >= max;
            for link in c.links.values_mut() {
                if !link.prepare_sleep(bound) {
                    return false;
                }
            }
        }
        true
    }

    /// After waking: every queue withdraws its sleep announcement (no system call); only the
    /// fds that fired are drained (one `read` each), so a wake costs no more system calls
    /// however many queues are open. An armed engine fd that did not fire stays armed: at
    /// worst it fires once more.
    fn woke(&mut self, fired: &[(u64, bool)]) {
        for c in self.clients.values_mut() {
            for (lid, link) in &mut c.links {
                link.woke();
                for (_, engine_side) in fired.iter().filter(|(f, _)| f == lid) {
                    if *engine_side {
                        link.clear_engine_fd();
                    } else {
                        link.drain_doorbell();
                    }
                }
            }
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(Some(conn)) => self.admit(conn),
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    return;
                }
            }
        }
    }

    fn admit(&mut self, conn: SeqPacket) {
        let cred = match conn.peer_cred() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("refused a client: no peer credentials ({e})");
                return;
            }
        };
        if !self.config.allows(cred.uid) {
            tracing::warn!(
                "refused pid {} uid {}: uid not allowed (--allow-uid)",
                cred.pid,
                cred.uid
            );
            return;
        }
        let id = self.next_client;
        self.next_client += 1;
        if let Err(e) = self.poll.registry().register(
            &mut SourceFd(&conn.as_raw_fd()),
            conn_token(id),
            Interest::READABLE,
        ) {
            tracing::warn!("refused pid {}: {e}", cred.pid);
            return;
        }
        tracing::info!("client {id}: pid {} uid {} attached", cred.pid, cred.uid);
        self.clients.insert(
            id,
            Client {
                conn,
                cred,
                name: None,
                names: Names::default(),
                links: HashMap::new(),
                ops: 0,
                bytes: 0,
            },
        );
    }

    /// Reads every pending request of client `id`; drops the client on hang-up or bad input.
    fn read_requests(&mut self, id: u64) {
        let mut buf = vec![0u8; MAX_REQUEST];
        loop {
            let Some(c) = self.clients.get(&id) else {
                return;
            };
            match c.conn.recv(&mut buf) {
                Ok((0, _)) => {
                    self.remove_client(id, "hung up");
                    return;
                }
                Ok((n, fds)) => {
                    let bytes = buf.get(..n).unwrap_or(&[]);
                    if let Err(reason) = self.serve(id, bytes, fds) {
                        self.remove_client(id, &reason);
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.remove_client(id, &format!("bad message: {e}"));
                    return;
                }
            }
        }
    }

    /// Answers one request. `Err` drops the client (malformed input, a descriptor that is not
    /// what it claims, a protocol violation); refusals a client can recover from are error
    /// replies.
    fn serve(&mut self, id: u64, bytes: &[u8], fds: Vec<OwnedFd>) -> Result<(), DropReason> {
        let req = Request::decode(bytes).map_err(|e| format!("malformed request: {e}"))?;
        let Some(c) = self.clients.get_mut(&id) else {
            return Ok(());
        };
        let expects_fd = matches!(req, Request::RegisterHost { .. });
        if fds.len() != usize::from(expects_fd) {
            return Err(format!(
                "{} descriptors with a request that takes {}",
                fds.len(),
                u8::from(expects_fd)
            ));
        }
        if c.name.is_none() && !matches!(req, Request::Hello { .. }) {
            return Err("first request was not Hello".into());
        }
        let (reply, send): (Reply, Vec<SentFd>) = match req {
            Request::Hello { name } => {
                if c.name.is_some() {
                    return Err("second Hello".into());
                }
                c.name = Some(name);
                (
                    Reply::Welcome {
                        endpoint: endpoint_url(self.engine.endpoint()),
                        workers: u32::try_from(self.engine.workers().len()).unwrap_or(u32::MAX),
                        max_in_flight: self.config.max_in_flight,
                    },
                    Vec::new(),
                )
            }
            Request::Intern { bucket, key } => {
                let engine = &self.engine;
                let reply = match c
                    .names
                    .object(&bucket, &key, || engine.object(&bucket, &key))
                {
                    Ok(Some(id)) => Reply::Object { id },
                    Ok(None) => refuse(ErrorKind::Invalid, "too many object names for one client"),
                    Err(e) => refuse(ErrorKind::Invalid, &e.to_string()),
                };
                (reply, Vec::new())
            }
            Request::RegisterHost { len } => {
                let fd = fds.into_iter().next().ok_or("no memfd")?;
                let len_usize =
                    usize::try_from(len).map_err(|_| "registration length overflows")?;
                let mem = SharedMemory::map_sealed(fd, len_usize)
                    .map_err(|e| format!("RegisterHost descriptor: {e}"))?;
                (
                    register_host(&self.engine, &mut c.names, mem, len),
                    Vec::new(),
                )
            }
            Request::RegisterDevice(export) => (
                register_device(&self.engine, &mut c.names, export),
                Vec::new(),
            ),
            Request::Deregister { buf, timeout_ms } => {
                let wait = Duration::from_millis(u64::from(timeout_ms)).min(MAX_DEREGISTER_WAIT);
                (
                    deregister(&self.engine, &mut c.names, buf, wait),
                    Vec::new(),
                )
            }
            Request::OpenQueue {
                sq_entries,
                cq_entries,
                timestamps,
            } => open_queue(
                &self.engine,
                &self.poll,
                &mut self.next_link,
                &mut c.links,
                (sq_entries, cq_entries, timestamps),
            )?,
            Request::Status => (Reply::Status(self.status()), Vec::new()),
            _ => (
                refuse(ErrorKind::Unsupported, "unknown request"),
                Vec::new(),
            ),
        };
        let Some(c) = self.clients.get(&id) else {
            return Ok(());
        };
        let borrowed: Vec<_> = send.iter().map(SentFd::fd).collect();
        c.conn
            .send(&reply.encode(), &borrowed)
            .map_err(|e| format!("answering: {e}"))
    }

    /// Every client as `status` shows it.
    fn status(&self) -> Vec<ClientStatus> {
        let mut ids: Vec<&u64> = self.clients.keys().collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| self.clients.get(id))
            .map(|c| {
                let (registrations, registered_bytes) = c.names.registered();
                ClientStatus {
                    pid: c.cred.pid,
                    uid: c.cred.uid,
                    name: c.name.clone().unwrap_or_default(),
                    queues: c.links.len() as u32,
                    in_flight: u64::from(c.in_flight()),
                    ops: c.ops,
                    bytes: c.bytes,
                    registrations,
                    registered_bytes,
                }
            })
            .collect()
    }

    /// Closes queues the client dropped (its operations in the engine are aborted with the
    /// engine queue) and drops clients whose rings are corrupt.
    fn reap_closed_links(&mut self) {
        let mut corrupt = Vec::new();
        for (id, c) in &mut self.clients {
            let closed: Vec<u64> = c
                .links
                .iter()
                .filter(|(_, l)| l.app_dropped() || l.corrupt())
                .map(|(k, _)| *k)
                .collect();
            for lid in closed {
                if let Some(link) = c.links.remove(&lid) {
                    if link.corrupt() {
                        corrupt.push(*id);
                    }
                    deregister_link(&self.poll, &link);
                }
            }
        }
        for id in corrupt {
            self.remove_client(id, "wrote ring indices its queue cannot have");
        }
    }

    /// Drops a client: its queues (aborting its operations), then its registrations.
    fn remove_client(&mut self, id: u64, reason: &str) {
        let Some(mut c) = self.clients.remove(&id) else {
            return;
        };
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&c.conn.as_raw_fd()));
        let queues = c.links.len();
        for (_, link) in c.links.drain() {
            deregister_link(&self.poll, &link);
        }
        let regs = c.names.drain_registrations();
        let count = regs.len();
        for reg in regs {
            if let Err(reg) = release(&self.engine, reg, MAX_DEREGISTER_WAIT) {
                self.zombies.push(reg);
            }
        }
        tracing::info!(
            "client {id} (pid {}, {:?}) dropped: {reason}; {queues} queues closed, {count} registrations released",
            c.cred.pid,
            c.name.as_deref().unwrap_or("")
        );
    }

    fn retry_zombies(&mut self) {
        let zombies = std::mem::take(&mut self.zombies);
        for reg in zombies {
            if let Err(reg) = release(&self.engine, reg, Duration::ZERO) {
                self.zombies.push(reg);
            }
        }
    }
}

fn deregister_link(poll: &Poll, link: &Link) {
    let _ = poll
        .registry()
        .deregister(&mut SourceFd(&link.doorbell_fd()));
    let _ = poll.registry().deregister(&mut SourceFd(&link.engine_fd()));
}

/// Opens a client queue: its rings, its engine queue, and the registration of its doorbell
/// and engine fd with the loop. A refusal the client can recover from is an error reply;
/// `Err` (the loop cannot watch the queue) drops the client.
fn open_queue(
    engine: &Engine,
    poll: &Poll,
    next_link: &mut u64,
    links: &mut HashMap<u64, Link>,
    (sq_entries, cq_entries, timestamps): (u32, u32, bool),
) -> Result<(Reply, Vec<SentFd>), DropReason> {
    if links.len() >= MAX_QUEUES {
        return Ok((
            refuse(ErrorKind::Invalid, "too many queues for one client"),
            Vec::new(),
        ));
    }
    let layout = match QueueLayout::new(sq_entries, cq_entries, timestamps) {
        Ok(l) => l,
        Err(e) => return Ok((refuse(ErrorKind::Invalid, &e.to_string()), Vec::new())),
    };
    let (link, handout) = match Link::open(engine, layout) {
        Ok(opened) => opened,
        Err(e) => return Ok((refuse(ErrorKind::Failed, &e), Vec::new())),
    };
    let lid = *next_link;
    *next_link += 1;
    let reg = poll.registry();
    reg.register(
        &mut SourceFd(&link.doorbell_fd()),
        link_token(lid, false),
        Interest::READABLE,
    )
    .and_then(|()| {
        reg.register(
            &mut SourceFd(&link.engine_fd()),
            link_token(lid, true),
            Interest::READABLE,
        )
    })
    .map_err(|e| format!("registering a queue: {e}"))?;
    let send = vec![
        SentFd::Mem(handout.mem),
        SentFd::Bell(handout.app_bell),
        SentFd::Bell(Arc::clone(&link.doorbell)),
    ];
    links.insert(lid, link);
    let reply = Reply::Queue {
        sq_entries,
        cq_entries,
        timestamps,
    };
    Ok((reply, send))
}

/// A descriptor sent with a reply, kept alive by what owns it.
enum SentFd {
    Mem(Arc<SharedMemory>),
    Bell(Arc<engine::attach::EventFd>),
}

impl SentFd {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        match self {
            Self::Mem(m) => m.fd(),
            Self::Bell(b) => b.as_fd(),
        }
    }
}

/// The endpoint as a URL an attached engine parses back.
fn endpoint_url(ep: &s3_lite::s3::Endpoint) -> String {
    let scheme = match ep.scheme {
        s3_lite::s3::Scheme::Https => "https",
        _ => "http",
    };
    format!("{scheme}://{}:{}", ep.host, ep.port)
}

fn refuse(kind: ErrorKind, message: &str) -> Reply {
    Reply::Error {
        kind,
        message: message.to_owned(),
    }
}

fn register_host(engine: &Engine, names: &mut Names, mem: SharedMemory, len: u64) -> Reply {
    let Ok(len_usize) = usize::try_from(len) else {
        return refuse(ErrorKind::Invalid, "length overflows");
    };
    // SAFETY: the mapping covers at least `len` bytes (checked by `map_sealed`), its memfd is
    // sealed against shrinking, and it is kept in the registration until the engine's
    // deregistration returned `Ok` (`release`), so the memory stays valid for the engine.
    // The client may write the bytes at any time; the engine treats them as untrusted bytes.
    #[allow(unsafe_code)]
    let handle = match unsafe { engine.register_raw(mem.as_mut_ptr(), len_usize) } {
        Ok(h) => h,
        Err(e) => return refuse(ErrorKind::Failed, &e.to_string()),
    };
    match names.add_registration(Registration {
        handle,
        len,
        held: Held::Host(mem),
    }) {
        Ok(id) => Reply::Buffer { id },
        Err(reg) => {
            let _ = release(engine, reg, Duration::ZERO);
            refuse(ErrorKind::Invalid, "too many registrations for one client")
        }
    }
}

fn register_device(
    engine: &Engine,
    names: &mut Names,
    e: engine::attach::wire::DeviceExport,
) -> Reply {
    let Some(rt) = engine.gpu() else {
        return refuse(
            ErrorKind::Unsupported,
            "device memory: the daemon runs without a GPU runtime (start it with --gpu)",
        );
    };
    let export = IpcExport {
        handle: e.handle,
        offset: e.offset,
        alloc_len: e.alloc_len,
        ordinal: e.ordinal,
    };
    let Ok(len) = usize::try_from(e.len) else {
        return refuse(ErrorKind::Invalid, "length overflows");
    };
    // SAFETY: the export's handle comes from another process; opening it only maps an
    // allocation that process shares (the runtime refuses handles it cannot open), and the
    // mapping is closed only after the engine's deregistration returned `Ok` (`release`).
    #[allow(unsafe_code)]
    let base = match unsafe { rt.ipc_open(&export) } {
        Ok(b) => b,
        Err(err) => {
            return refuse(
                ErrorKind::Invalid,
                &format!("opening the IPC handle: {err}"),
            );
        }
    };
    let ptr = match export.locate(base, e.len) {
        Ok(p) => p,
        Err(err) => {
            close_ipc(engine, base);
            return refuse(ErrorKind::Invalid, &err.to_string());
        }
    };
    // SAFETY: `ptr..ptr+len` lies inside the opened allocation (`locate` checked the range
    // against the export's allocation size), which stays mapped until after deregistration.
    #[allow(unsafe_code)]
    let handle = match unsafe { engine.register_device(ptr, len) } {
        Ok(h) => h,
        Err(err) => {
            close_ipc(engine, base);
            return refuse(ErrorKind::Failed, &err.to_string());
        }
    };
    match names.add_registration(Registration {
        handle,
        len: e.len,
        held: Held::Device { base },
    }) {
        Ok(id) => Reply::Buffer { id },
        Err(reg) => {
            let _ = release(engine, reg, Duration::ZERO);
            refuse(ErrorKind::Invalid, "too many registrations for one client")
        }
    }
}

fn deregister(engine: &Engine, names: &mut Names, buf: u32, wait: Duration) -> Reply {
    let Some(reg) = names.take_registration(buf) else {
        return refuse(ErrorKind::Invalid, &format!("no buffer {buf}"));
    };
    match release(engine, reg, wait) {
        Ok(()) => Reply::Done,
        Err(reg) => {
            names.restore_registration(buf, reg);
            refuse(
                ErrorKind::Busy,
                "the buffer is still in use by operations in flight",
            )
        }
    }
}

/// Deregisters from the engine, then lets go of the memory; the registration back when the
/// engine still uses it.
fn release(engine: &Engine, reg: Registration, wait: Duration) -> Result<(), Registration> {
    match engine.deregister(reg.handle, wait) {
        Ok(()) | Err(engine::EngineError::BadHandle(_)) => {}
        Err(_) => return Err(reg),
    }
    if let Held::Device { base } = reg.held {
        close_ipc(engine, base);
    }
    Ok(())
}

fn close_ipc(engine: &Engine, base: engine::gpu::DevicePtr) {
    if let Some(rt) = engine.gpu() {
        // SAFETY: `base` was returned by `ipc_open` on this runtime and nothing registered
        // uses it any more (deregistered, or never registered).
        #[allow(unsafe_code)]
        if let Err(e) = unsafe { rt.ipc_close(base) } {
            tracing::warn!("closing an IPC mapping: {e}");
        }
    }
}
