//! A fault-injecting TCP relay for testing clients against misbehaving networks and servers:
//! the engine behind `hipobj debug relay` and the fault tests of the engine, gateway and CLI
//! (`docs/fault-relay.md`).
//!
//! Every accepted connection is relayed to one upstream address. Both directions go through
//! s3-lite's HTTP/1.1 decoders ([`RequestDecoder`](s3_lite::http::RequestDecoder) client→server,
//! [`ResponseDecoder`](s3_lite::http::ResponseDecoder)
//! server→client), so a fault acts on a chosen request or response of a keep-alive connection
//! and on a body offset, not on an arbitrary TCP segment. Bytes the decoders cannot frame are
//! relayed unchanged (the relay never repairs or rejects traffic: that is the peers' job).
//! With a `flip-stream` fault the relay frames nothing: it relays raw bytes (a non-HTTP
//! protocol such as the soft fabric's data port) and only the byte-count faults and
//! `flip-stream` apply.
//!
//! Faults (`--fault SPEC`, repeatable; `SPEC` is `KIND[=N][,times=K][,every=M]`: `times`
//! limits a fault to its first K applications and `every` to every Mth match, both counted
//! over the relay's life):
//!
//! | KIND                  | Effect |
//! |-----------------------|--------|
//! | `latency=MS`          | hold every response head for MS milliseconds |
//! | `reset-after=N`       | send N response bytes on a connection, then reset it (RST) |
//! | `truncate-after=N`    | send N response bytes on a connection, then close it (FIN) |
//! | `stall-after=N`       | send N response bytes on a connection, then forward nothing more |
//! | `flip=N`              | flip (xor 0xff) body byte N of each response whose body reaches it |
//! | `flip-every=N`        | flip the first body byte of every Nth response with a body |
//! | `content-length-minus=K` | lower each response's `Content-Length` by K, send that many body bytes, close |
//! | `slowdown`            | answer requests itself with `503 SlowDown` (use `times=K` for the first K) |
//! | `flip-request=N`      | flip body byte N of each request whose body reaches it (client→server) |
//! | `drop-header=NAME`    | remove the header field NAME from every response head |
//! | `lower-content-length=K` | lower the `Content-Length` a response names (a HEAD's too) by K when it names more than K; the body is forwarded whole |
//! | `rewrite-header=NAME:VALUE` | replace the value of response header NAME with VALUE |
//! | `flip-bodies-of-length=LEN:AT:EVERY` | flip body byte AT of every EVERYth response whose body is exactly LEN bytes (all connections counted together) |
//! | `flip-stream=N`       | raw relay (no HTTP framing); flip byte N of a connection's server→client stream |
//!
//! Without `times`, a fault applies to every response (or connection, or request) it matches.

mod fault;
mod requests;
mod responses;

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fault::{Armed, Faults};
pub use fault::{Fault, FaultKind};

/// What the relay did, for tests and the CLI's log.
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Client connections accepted.
    pub connections: AtomicU64,
    /// Requests seen (complete heads).
    pub requests: AtomicU64,
    /// Responses seen (complete heads, 1xx excluded).
    pub responses: AtomicU64,
    /// Faults applied.
    pub faults_applied: AtomicU64,
    /// `503 SlowDown` answers the relay gave itself.
    pub slowdowns: AtomicU64,
    /// Bytes actually flipped (request, response body or raw stream).
    pub flipped: AtomicU64,
}

impl RelayStats {
    /// Faults applied so far.
    pub fn faults(&self) -> u64 {
        self.faults_applied.load(Ordering::SeqCst)
    }

    /// Bytes flipped so far.
    pub fn flips(&self) -> u64 {
        self.flipped.load(Ordering::SeqCst)
    }
}

/// A running relay; stopped (listener closed, no new connections) when dropped.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<RelayStats>,
    faults: Arc<Faults>,
}

impl Relay {
    /// Binds `listen` and relays every connection to `to` with `faults`, on background threads.
    pub fn start(listen: &str, to: &str, faults: Vec<Fault>) -> std::io::Result<Self> {
        Self::start_with(listen, to, faults, false)
    }

    /// As [`Relay::start`], but relaying raw bytes (no HTTP framing) whatever the faults, as
    /// a `flip-stream` fault does: for a protocol that is not HTTP (the soft fabric's data
    /// port) with only byte-count faults (`reset-after`, `truncate-after`, `stall-after`).
    pub fn start_raw(listen: &str, to: &str, faults: Vec<Fault>) -> std::io::Result<Self> {
        Self::start_with(listen, to, faults, true)
    }

    /// From now on no fault applies (connections already cut, stalled or reset stay so):
    /// the relay forwards faithfully, so a test can check that its client recovers.
    pub fn disarm(&self) {
        self.faults.disarmed.store(true, Ordering::SeqCst);
    }

    fn start_with(
        listen: &str,
        to: &str,
        faults: Vec<Fault>,
        raw_mode: bool,
    ) -> std::io::Result<Self> {
        let upstream = to
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{to}: no address")))?;
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(RelayStats::default());
        let faults = Arc::new(Faults {
            list: faults.into_iter().map(Armed::new).collect(),
            responses_with_body: AtomicU64::new(0),
            stats: stats.clone(),
            raw_mode,
            disarmed: AtomicBool::new(false),
        });
        let stop2 = stop.clone();
        let kept = faults.clone();
        std::thread::Builder::new()
            .name("relay-accept".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    faults.stats.connections.fetch_add(1, Ordering::SeqCst);
                    let faults = faults.clone();
                    let _ = std::thread::Builder::new()
                        .name("relay-conn".into())
                        .spawn(move || relay_connection(client, upstream, &faults));
                }
            })?;
        Ok(Self {
            addr,
            stop,
            stats,
            faults: kept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for an endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Counters.
    pub fn stats(&self) -> &RelayStats {
        &self.stats
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// The client side of a connection, written by both directions (the relay's own answers and
/// the forwarded responses) under one lock so they never interleave.
pub(crate) type ClientWriter = Arc<Mutex<TcpStream>>;

fn relay_connection(client: TcpStream, upstream: SocketAddr, faults: &Arc<Faults>) {
    let _ = client.set_nodelay(true);
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
        reset(&client);
        return;
    };
    let _ = server.set_nodelay(true);
    let (Ok(client_read), Ok(client_write), Ok(server_read)) =
        (client.try_clone(), client.try_clone(), server.try_clone())
    else {
        return;
    };
    let writer: ClientWriter = Arc::new(Mutex::new(client_write));
    // HEAD responses have no body: the request direction tells the response direction.
    let methods: Arc<Mutex<std::collections::VecDeque<bool>>> = Arc::default();
    let back = {
        let (writer, methods, faults) = (writer.clone(), methods.clone(), faults.clone());
        let client = client.try_clone().ok();
        std::thread::Builder::new()
            .name("relay-s2c".into())
            .spawn(move || {
                responses::responses(server_read, &writer, &methods, &faults);
                if let Some(c) = client {
                    let _ = c.shutdown(Shutdown::Write);
                }
            })
    };
    requests::requests(client_read, &server, &writer, &methods, faults);
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
    if let Ok(h) = back {
        let _ = h.join();
    }
}

/// Closes `stream` with a reset (SO_LINGER 0) instead of an orderly FIN.
pub(crate) fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    let _ = stream.shutdown(Shutdown::Both);
}
