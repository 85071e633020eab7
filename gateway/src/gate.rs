//! The head gate: one thread that owns every connection while it is *between* requests.
//!
//! It accepts connections and reads request heads without blocking (mio, edge-triggered), and
//! hands a connection to the worker pool only once a complete request head has arrived.
//! Workers give keep-alive connections back after each response ([`GateHandle::park`]). So a
//! client that is slow to send its head, or idle between requests, holds no worker thread:
//! the pool only ever waits on clients that have asked for something.
//!
//! Limits, all from [`Config`](crate::server::Config):
//! - `head_timeout`: the whole request head must arrive within this time of its first byte
//!   (408 `RequestTimeout`, then close). The per-read `io_timeout` does not reset it.
//! - `idle_timeout`: a connection that sends no byte for this long is closed.
//! - `max_connections`: connections held at once (waiting here + being served). At capacity a
//!   new connection evicts the waiting connection that has made the least use of its time: a
//!   half-sent head that started first (answered 503 `SlowDown`), else the connection silent
//!   for longest (idle keep-alive, or accepted and silent); a connection just accepted comes
//!   last. Only when every connection is inside a request is the new one refused (503).
//!   One address holds at most a quarter of `max_connections` half-sent heads (its oldest is
//!   evicted when it starts one more), and eviction at capacity takes a half-sent head of the
//!   address holding the most, so a flood from one address cycles through its own share.
//!   Arrived heads are read before new connections are accepted, and accepts come in batches
//!   of a quarter of `max_connections`, so reconnecting slow clients cannot cycle a normal
//!   client's new connection out before its head is read.
//! - A connection whose first bytes are a TLS record (a ClientHello on this plain-HTTP port) is
//!   answered 400 at once, naming `http://`, and closed: it does not wait for `head_timeout`.
//! - Memory: a waiting connection holds its partial head (at most `http_limits.max_head_bytes`)
//!   inside its decoder, and nothing else.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, TcpStream as StdStream};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use s3_lite::http::server::{RequestDecoder, RequestEvent, RequestHead};

use crate::conn;
use crate::error::ApiError;
use crate::server::Shared;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;
/// Longest the gate sleeps without looking at its deadlines.
const MAX_SLEEP: Duration = Duration::from_secs(1);
/// Read size while a head is being collected.
const READ_SLICE: usize = 16 * 1024;

/// A connection with a complete request head, ready for a worker.
pub(crate) struct Ready {
    pub(crate) stream: StdStream,
    pub(crate) head: RequestHead,
    /// The decoder, positioned after the head (in the body, or done).
    pub(crate) dec: RequestDecoder,
    /// Bytes read after the head (the start of the body or of pipelined requests).
    pub(crate) pending: Vec<u8>,
}

/// A keep-alive connection a worker gives back after a response.
pub(crate) struct Parked {
    pub(crate) stream: StdStream,
    /// Bytes already read that belong to the next request(s).
    pub(crate) pending: Vec<u8>,
}

/// The workers' way back to the gate.
#[derive(Clone)]
pub(crate) struct GateHandle {
    returns: mpsc::Sender<Parked>,
    waker: Arc<Waker>,
}

impl GateHandle {
    /// Gives a keep-alive connection back; it waits in the gate for its next head.
    pub(crate) fn park(&self, parked: Parked) {
        if self.returns.send(parked).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// Wakes the gate (shutdown).
    pub(crate) fn wake(&self) {
        let _ = self.waker.wake();
    }
}

/// One connection waiting for its next request head.
struct Waiting {
    stream: TcpStream,
    dec: RequestDecoder,
    /// Since the connection arrived or its last response: idle time counts from here.
    since: Instant,
    /// When the first byte of the current head arrived.
    head_started: Option<Instant>,
    /// The client's address (for the per-peer cap on half-sent heads).
    peer: Option<IpAddr>,
}

/// What reading a waiting connection led to.
enum Progress {
    /// The socket has no more bytes for now.
    Waiting,
    /// A complete head (with the bytes read after it).
    Head(RequestHead, Vec<u8>),
    /// The connection is over (EOF, error, or an error answer already sent).
    Closed,
}

/// The gate's thread state.
pub(crate) struct Gate {
    poll: Poll,
    listener: TcpListener,
    shared: Arc<Shared>,
    to_workers: crate::handoff::Sender<Ready>,
    returns: mpsc::Receiver<Parked>,
    waiting: HashMap<usize, Waiting>,
    next_token: usize,
}

impl Gate {
    /// Sets the gate up around a bound listener; `run` it on its own thread.
    pub(crate) fn new(
        listener: std::net::TcpListener,
        shared: Arc<Shared>,
        to_workers: crate::handoff::Sender<Ready>,
    ) -> std::io::Result<(Self, GateHandle)> {
        listener.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = mpsc::channel();
        let gate = Self {
            poll,
            listener,
            shared,
            to_workers,
            returns: rx,
            waiting: HashMap::new(),
            next_token: FIRST_CONN,
        };
        Ok((gate, GateHandle { returns: tx, waker }))
    }

    /// Runs until the gateway shuts down; then closes every waiting connection.
    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(256);
        // Connections may still wait in the backlog (the last batch was full).
        let mut backlog = false;
        while !self.shared.is_shutting_down() {
            let sleep = if backlog {
                Duration::ZERO
            } else {
                self.next_deadline().map_or(MAX_SLEEP, |d| {
                    d.saturating_duration_since(Instant::now()).min(MAX_SLEEP)
                })
            };
            if let Err(e) = self.poll.poll(&mut events, Some(sleep))
                && e.kind() != ErrorKind::Interrupted
            {
                return;
            }
            // Heads that arrived are read before anything new is accepted, so a connection
            // accepted in the last round is handed over before new arrivals can evict it.
            let mut accept = backlog;
            for ev in &events {
                match ev.token() {
                    LISTENER => accept = true,
                    WAKER => {}
                    Token(t) => self.on_readable(t),
                }
            }
            self.take_returns();
            backlog = accept && self.accept_batch();
            self.expire(Instant::now());
        }
        for (_, w) in self.waiting.drain() {
            self.shared.connection_ended();
            drop(w);
        }
    }

    /// Accepts at most a batch of connections (a quarter of `max_connections`, at least one):
    /// at capacity each evicts a waiting one, and a bounded batch keeps a burst of reconnecting
    /// clients from cycling through every slot before the heads already sent are read. True
    /// when the batch was full (more may be waiting: the listener is edge-triggered).
    fn accept_batch(&mut self) -> bool {
        let batch = (self.shared.config.max_connections / 4).max(1);
        for _ in 0..batch {
            match self.listener.accept() {
                Ok((stream, addr)) => self.admit(stream, addr.ip()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // EMFILE and friends: leave the rest in the backlog until something closes.
                Err(_) => return false,
            }
        }
        true
    }

    fn admit(&mut self, stream: TcpStream, peer: IpAddr) {
        if self.shared.is_full() && !self.evict_one() {
            self.shared.reject(StdStream::from(stream));
            return;
        }
        self.shared.connection_started();
        let _ = stream.set_nodelay(true);
        self.watch(Waiting {
            stream,
            dec: RequestDecoder::new(self.shared.config.http_limits),
            since: Instant::now(),
            head_started: None,
            peer: Some(peer),
        });
    }

    /// Registers a waiting connection under a fresh token.
    fn watch(&mut self, mut w: Waiting) {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(FIRST_CONN);
        if self
            .poll
            .registry()
            .register(&mut w.stream, Token(token), Interest::READABLE)
            .is_err()
        {
            self.shared.connection_ended();
            return;
        }
        self.waiting.insert(token, w);
    }

    fn on_readable(&mut self, token: usize) {
        let Some(mut w) = self.waiting.remove(&token) else {
            return;
        };
        let was_half_sent = w.head_started.is_some();
        match read_head(&mut w, &self.shared) {
            Progress::Waiting => {
                let peer = w.peer;
                let half_sent = w.head_started.is_some();
                self.waiting.insert(token, w);
                if half_sent && !was_half_sent {
                    self.cap_peer(peer);
                }
            }
            Progress::Head(head, pending) => self.hand_over(w, head, pending),
            Progress::Closed => self.shared.connection_ended(),
        }
    }

    fn hand_over(&mut self, mut w: Waiting, head: RequestHead, pending: Vec<u8>) {
        let _ = self.poll.registry().deregister(&mut w.stream);
        let stream = StdStream::from(w.stream);
        let ready = Ready {
            stream,
            head,
            dec: w.dec,
            pending,
        };
        if self.to_workers.send(ready).is_err() {
            self.shared.connection_ended();
        }
    }

    /// Keep-alive connections coming back from workers: a head may already be buffered.
    fn take_returns(&mut self) {
        while let Ok(parked) = self.returns.try_recv() {
            let Parked { stream, pending } = parked;
            if stream.set_nonblocking(true).is_err() {
                self.shared.connection_ended();
                continue;
            }
            let peer = stream.peer_addr().ok().map(|a| a.ip());
            let mut w = Waiting {
                stream: TcpStream::from_std(stream),
                dec: RequestDecoder::new(self.shared.config.http_limits),
                since: Instant::now(),
                head_started: None,
                peer,
            };
            match feed(&mut w, &pending, &self.shared) {
                // Whatever else the socket holds arrives as a readable event after register.
                Progress::Waiting => match read_head(&mut w, &self.shared) {
                    Progress::Waiting => self.watch(w),
                    Progress::Head(head, rest) => self.hand_over(w, head, rest),
                    Progress::Closed => self.shared.connection_ended(),
                },
                Progress::Head(head, rest) => self.hand_over(w, head, rest),
                Progress::Closed => self.shared.connection_ended(),
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let cfg = &self.shared.config;
        self.waiting
            .values()
            .map(|w| match w.head_started {
                Some(t) => t + cfg.head_timeout,
                None => w.since + cfg.idle_timeout,
            })
            .min()
    }

    /// Closes idle connections and answers heads that missed their deadline.
    fn expire(&mut self, now: Instant) {
        let cfg = &self.shared.config;
        let late: Vec<usize> = self
            .waiting
            .iter()
            .filter(|(_, w)| match w.head_started {
                Some(t) => now.duration_since(t) >= cfg.head_timeout,
                None => now.duration_since(w.since) >= cfg.idle_timeout,
            })
            .map(|(t, _)| *t)
            .collect();
        for token in late {
            if let Some(mut w) = self.waiting.remove(&token) {
                if w.head_started.is_some() {
                    let err = ApiError::new(
                        408,
                        "RequestTimeout",
                        format!(
                            "the request head did not arrive within {} s",
                            cfg.head_timeout.as_secs_f64()
                        ),
                    );
                    answer_and_close(&mut w.stream, &err, &self.shared);
                }
                self.shared.connection_ended();
            }
        }
    }

    /// Half-sent heads per client address.
    fn half_sent_by_peer(&self) -> HashMap<Option<IpAddr>, usize> {
        let mut n = HashMap::new();
        for w in self.waiting.values().filter(|w| w.head_started.is_some()) {
            *n.entry(w.peer).or_insert(0) += 1;
        }
        n
    }

    /// The per-peer cap: an address may hold at most a quarter of `max_connections` (at least
    /// one) half-sent heads; one more evicts that address's oldest. So a flood from one
    /// address cycles through its own share, and a slow head from anyone else keeps its
    /// place. Silent connections are not capped: a client opening many connections at once
    /// sends each its whole head in one go, and must not lose them before they are read.
    fn cap_peer(&mut self, peer: Option<IpAddr>) {
        let cap = (self.shared.config.max_connections / 4).max(1);
        let mut theirs: Vec<(Instant, usize)> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.peer == peer)
            .filter_map(|(t, w)| w.head_started.map(|s| (s, *t)))
            .collect();
        if theirs.len() <= cap {
            return;
        }
        theirs.sort_unstable();
        for (_, token) in theirs.iter().take(theirs.len() - cap) {
            self.evict(*token);
        }
    }

    /// Makes room for a new connection: closes a half-sent head (a slow client) of the address
    /// holding the most of them, the one that started first; else the connection silent for
    /// longest (idle keep-alive, or accepted and still silent). A connection just accepted is
    /// thus the last candidate: its head is usually on its way, and a flood of reconnecting
    /// slow clients evicts its own kind. False when every connection is inside a request.
    fn evict_one(&mut self) -> bool {
        let half_sent = self.half_sent_by_peer();
        let victim = self
            .waiting
            .iter()
            .min_by_key(|(_, w)| match w.head_started {
                Some(t) => (
                    0,
                    usize::MAX - half_sent.get(&w.peer).copied().unwrap_or(0),
                    t,
                ),
                None => (1, 0, w.since),
            })
            .map(|(t, _)| *t);
        let Some(token) = victim else {
            return false;
        };
        self.evict(token);
        true
    }

    /// Closes a waiting connection: a half-sent head is answered `503 SlowDown` first.
    fn evict(&mut self, token: usize) {
        if let Some(mut w) = self.waiting.remove(&token) {
            if w.head_started.is_some() {
                answer_and_close(&mut w.stream, &ApiError::slow_down(), &self.shared);
            }
            self.shared.connection_ended();
        }
    }
}

/// Reads what the socket has (until it would block) into the head decoder.
fn read_head(w: &mut Waiting, shared: &Shared) -> Progress {
    let mut buf = [0u8; READ_SLICE];
    loop {
        match w.stream.read(&mut buf) {
            Ok(0) => return Progress::Closed,
            Ok(n) => match feed(w, buf.get(..n).unwrap_or_default(), shared) {
                Progress::Waiting => {}
                done => return done,
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::Waiting,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Progress::Closed,
        }
    }
}

/// Feeds bytes to the head decoder; the bytes after a complete head are returned with it.
fn feed(w: &mut Waiting, mut input: &[u8], shared: &Shared) -> Progress {
    if input.is_empty() {
        return Progress::Waiting;
    }
    if w.head_started.is_none() && is_tls_record(input) {
        answer_tls_and_close(&mut w.stream, shared);
        return Progress::Closed;
    }
    w.head_started.get_or_insert_with(Instant::now);
    loop {
        match w.dec.decode(input) {
            Ok(d) => {
                let rest = input.get(d.consumed..).unwrap_or_default();
                match d.event {
                    RequestEvent::Head(head) => return Progress::Head(head, rest.to_vec()),
                    RequestEvent::NeedMore if rest.is_empty() => return Progress::Waiting,
                    RequestEvent::NeedMore => input = rest,
                    // A head always comes first: anything else means the decoder is done.
                    _ => return Progress::Closed,
                }
            }
            Err(e) => {
                let status = e.status();
                let code = if status == 431 {
                    "RequestHeaderSectionTooLarge"
                } else {
                    "BadRequest"
                };
                answer_and_close(
                    &mut w.stream,
                    &ApiError::new(status, code, crate::request_error::describe(&e)),
                    shared,
                );
                return Progress::Closed;
            }
        }
    }
}

/// Whether the first bytes of a request are a TLS handshake record (type 0x16, version 0x03xx):
/// a ClientHello sent to this plain-HTTP port. A lone 0x16 counts too: no HTTP method starts
/// with a control character.
fn is_tls_record(first: &[u8]) -> bool {
    matches!(first, [0x16] | [0x16, 0x03, ..])
}

/// Answers a TLS ClientHello at once (400, saying the port speaks plain `http://`) instead of
/// letting it wait for the head timeout. The rest of the hello is read first (bounded, without
/// blocking) so closing does not reset the connection before the client reads the answer; a
/// TLS client then fails its handshake at once on the plaintext answer.
fn answer_tls_and_close(stream: &mut TcpStream, shared: &Shared) {
    let err = ApiError::new(
        400,
        "BadRequest",
        "this endpoint speaks plain HTTP, not TLS: use http:// (the client sent a TLS ClientHello)",
    );
    let mut scratch = [0u8; READ_SLICE];
    for _ in 0..4 {
        match stream.read(&mut scratch) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    answer_and_close(stream, &err, shared);
}

/// Best-effort error answer on a non-blocking socket that is about to close (the answer is
/// small: it fits the socket buffer of a connection that has not been answered yet).
fn answer_and_close(stream: &mut TcpStream, err: &ApiError, shared: &Shared) {
    let bytes = conn::error_response(err, "/", &shared.request_id());
    let _ = stream.write_all(&bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}
