//! `hipobj debug relay`: a fault-injecting TCP relay for testing clients against misbehaving
//! networks and servers.
//!
//! Every accepted connection is relayed to one upstream address. Both directions go through
//! s3-lite's HTTP/1.1 decoders ([`RequestDecoder`] client→server, [`ResponseDecoder`]
//! server→client), so a fault acts on a chosen request or response of a keep-alive connection
//! and on a body offset, not on an arbitrary TCP segment. Bytes the decoders cannot frame are
//! relayed unchanged (the relay never repairs or rejects traffic: that is the peers' job).
//!
//! Faults (`--fault SPEC`, repeatable; `SPEC` is `KIND[=N][,times=K]`, and `times` limits a
//! fault to its first K applications, counted over the relay's life):
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
//!
//! Without `times`, a fault applies to every response (or connection, or request) it matches.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use s3_lite::http::{BodyFraming, Event, Limits, RequestDecoder, RequestEvent, ResponseDecoder};

/// `hipobj debug relay`.
#[derive(clap::Args, Debug)]
pub struct RelayArgs {
    /// Address to listen on (port 0: any free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Upstream HOST:PORT every connection is relayed to.
    #[arg(long)]
    pub to: String,
    /// A fault, `KIND[=N][,times=K]` (repeatable): latency=MS, reset-after=N,
    /// truncate-after=N, stall-after=N, flip=N, flip-every=N, content-length-minus=K,
    /// slowdown, flip-request=N. None: a faithful relay.
    #[arg(long, value_parser = Fault::parse)]
    pub fault: Vec<Fault>,
}

/// Runs the relay until the process is stopped: prints `listening on ADDR` first.
pub fn run(args: &RelayArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match Relay::start(&args.listen, &args.to, args.fault.clone()) {
        Ok(relay) => {
            let _ = writeln!(out, "listening on {} -> {}", relay.addr(), args.to);
            let _ = out.flush();
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            let _ = writeln!(
                err,
                "hipobj: error: relay {} -> {}: {e}",
                args.listen, args.to
            );
            1
        }
    }
}

/// One kind of fault; see the module documentation for the spec syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Delay every response head.
    Latency(Duration),
    /// Reset the connection after this many response bytes.
    ResetAfter(u64),
    /// Close the connection (FIN) after this many response bytes.
    TruncateAfter(u64),
    /// Stop forwarding responses after this many bytes (the connection stays open).
    StallAfter(u64),
    /// Flip the body byte at this offset of a response.
    Flip(u64),
    /// Flip the first body byte of every Nth response that has a body.
    FlipEvery(u64),
    /// Lower a response's `Content-Length` by this much (and send only that many bytes).
    ContentLengthMinus(u64),
    /// Answer a request with `503 SlowDown` instead of forwarding it.
    SlowDown,
    /// Flip the body byte at this offset of a request.
    FlipRequest(u64),
}

/// A fault and how often it may apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// What it does.
    pub kind: FaultKind,
    /// Applies to the first `times` matches only (`None`: to all).
    pub times: Option<u64>,
}

impl Fault {
    /// A fault that applies to every match.
    pub fn always(kind: FaultKind) -> Self {
        Self { kind, times: None }
    }

    /// A fault that applies to its first `times` matches.
    pub fn times(kind: FaultKind, times: u64) -> Self {
        Self {
            kind,
            times: Some(times),
        }
    }

    /// Parses `KIND[=N][,times=K]`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (main, times) = match spec.split_once(",times=") {
            Some((m, t)) => (
                m,
                Some(
                    t.parse::<u64>()
                        .map_err(|_| format!("fault {spec:?}: times must be a number"))?,
                ),
            ),
            None => (spec, None),
        };
        let (name, arg) = match main.split_once('=') {
            Some((n, a)) => (n, Some(a)),
            None => (main, None),
        };
        let number = || -> Result<u64, String> {
            arg.ok_or_else(|| format!("fault {name:?} needs =N"))?
                .parse::<u64>()
                .map_err(|_| format!("fault {spec:?}: N must be a non-negative integer"))
        };
        let kind = match name {
            "latency" => FaultKind::Latency(Duration::from_millis(number()?)),
            "reset-after" => FaultKind::ResetAfter(number()?),
            "truncate-after" => FaultKind::TruncateAfter(number()?),
            "stall-after" => FaultKind::StallAfter(number()?),
            "flip" => FaultKind::Flip(number()?),
            "flip-every" => FaultKind::FlipEvery(number()?.max(1)),
            "content-length-minus" => FaultKind::ContentLengthMinus(number()?),
            "slowdown" if arg.is_none() => FaultKind::SlowDown,
            "flip-request" => FaultKind::FlipRequest(number()?),
            _ => {
                return Err(format!(
                    "unknown fault {spec:?} (latency=MS, reset-after=N, truncate-after=N, \
                     stall-after=N, flip=N, flip-every=N, content-length-minus=K, slowdown, \
                     flip-request=N; optional ,times=K)"
                ));
            }
        };
        Ok(Self { kind, times })
    }
}

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
}

impl RelayStats {
    /// Faults applied so far.
    pub fn faults(&self) -> u64 {
        self.faults_applied.load(Ordering::SeqCst)
    }
}

/// The faults with their remaining budgets, shared by every connection.
#[derive(Debug)]
struct Faults {
    list: Vec<(FaultKind, Option<AtomicU64>)>,
    responses_with_body: AtomicU64,
    stats: Arc<RelayStats>,
}

impl Faults {
    /// Takes one application of the first fault matching `pick` that has budget left.
    fn take<T>(&self, pick: impl Fn(FaultKind) -> Option<T>) -> Option<T> {
        for (kind, left) in &self.list {
            let Some(v) = pick(*kind) else { continue };
            let granted = match left {
                None => true,
                Some(left) => left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok(),
            };
            if granted {
                self.stats.faults_applied.fetch_add(1, Ordering::SeqCst);
                return Some(v);
            }
        }
        None
    }
}

/// A running relay; stopped (listener closed, no new connections) when dropped.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<RelayStats>,
}

impl Relay {
    /// Binds `listen` and relays every connection to `to` with `faults`, on background threads.
    pub fn start(listen: &str, to: &str, faults: Vec<Fault>) -> std::io::Result<Self> {
        let upstream = to
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{to}: no address")))?;
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(RelayStats::default());
        let faults = Arc::new(Faults {
            list: faults
                .into_iter()
                .map(|f| (f.kind, f.times.map(AtomicU64::new)))
                .collect(),
            responses_with_body: AtomicU64::new(0),
            stats: stats.clone(),
        });
        let stop2 = stop.clone();
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
        Ok(Self { addr, stop, stats })
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
type ClientWriter = Arc<Mutex<TcpStream>>;

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
                responses(server_read, &writer, &methods, &faults);
                if let Some(c) = client {
                    let _ = c.shutdown(Shutdown::Write);
                }
            })
    };
    requests(client_read, &server, &writer, &methods, faults);
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
    if let Ok(h) = back {
        let _ = h.join();
    }
}

/// Closes `stream` with a reset (SO_LINGER 0) instead of an orderly FIN.
fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    let _ = stream.shutdown(Shutdown::Both);
}

const SLOW_DOWN_BODY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown\
</Code><Message>Please reduce your request rate. (hipobj debug relay)</Message><RequestId>\
relay</RequestId></Error>";

fn slow_down_answer() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{SLOW_DOWN_BODY}",
        SLOW_DOWN_BODY.len()
    )
    .into_bytes()
}

/// Client → server: forwards requests, flipping request body bytes and answering
/// `503 SlowDown` itself where the faults say so. Returns when either side closes.
fn requests(
    mut from: TcpStream,
    mut to: &TcpStream,
    writer: &ClientWriter,
    methods: &Mutex<std::collections::VecDeque<bool>>,
    faults: &Faults,
) {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut framed = true;
    let mut buf = vec![0u8; 64 * 1024];
    let mut body_offset = 0u64;
    // Whether the current request has a body a `flip-request` fault may still act on.
    let mut may_flip = false;
    // Whether the current request is being answered by the relay (not forwarded).
    let mut answering = false;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut chunk = buf.get(..n).unwrap_or_default().to_vec();
        if !framed {
            if to.write_all(&chunk).is_err() {
                return;
            }
            continue;
        }
        let mut pos = 0;
        // The decoder reports the end of a message only when asked again (also with no input).
        let mut starved = false;
        while pos < chunk.len() || !starved {
            let input = chunk.get(pos..).unwrap_or_default();
            let d = match decoder.decode(input) {
                Ok(d) => d,
                Err(_) => {
                    // Not HTTP we can frame: relay the rest as it comes.
                    framed = false;
                    if to.write_all(input).is_err() {
                        return;
                    }
                    break;
                }
            };
            let start = pos;
            let end = pos + d.consumed;
            let mut ended = false;
            starved = d.event == RequestEvent::NeedMore && end >= chunk.len();
            match d.event {
                RequestEvent::Head(head) => {
                    faults.stats.requests.fetch_add(1, Ordering::SeqCst);
                    body_offset = 0;
                    let has_body = !matches!(head.framing, BodyFraming::None)
                        && head.content_length() != Some(0);
                    may_flip = has_body;
                    answering =
                        faults.take(|k| (k == FaultKind::SlowDown).then_some(())) == Some(());
                    if !answering && let Ok(mut m) = methods.lock() {
                        m.push_back(head.method.eq_ignore_ascii_case("HEAD"));
                    }
                }
                RequestEvent::Body(data) => {
                    let len = data.len() as u64;
                    let body_start = end - data.len();
                    if may_flip
                        && !answering
                        && let Some(at) = faults.take(|k| match k {
                            FaultKind::FlipRequest(at)
                                if at >= body_offset && at < body_offset + len =>
                            {
                                Some(at)
                            }
                            _ => None,
                        })
                    {
                        may_flip = false;
                        let i = body_start + usize::try_from(at - body_offset).unwrap_or(0);
                        if let Some(b) = chunk.get_mut(i) {
                            *b ^= 0xff;
                        }
                    }
                    body_offset += len;
                }
                RequestEvent::End => ended = true,
                RequestEvent::NeedMore => {}
            }
            if !answering
                && to
                    .write_all(chunk.get(start..end).unwrap_or_default())
                    .is_err()
            {
                return;
            }
            pos = end;
            if ended {
                if answering {
                    faults.stats.slowdowns.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut w) = writer.lock() {
                        let _ = w.write_all(&slow_down_answer());
                        let _ = w.flush();
                    }
                    // `Connection: close` was announced: end the connection cleanly.
                    return;
                }
                if decoder.reset_for_next().is_err() {
                    framed = false;
                    let rest = chunk.get(pos..).unwrap_or_default();
                    if to.write_all(rest).is_err() {
                        return;
                    }
                    break;
                }
            }
        }
        chunk.clear();
    }
}

/// Per-connection state of the response direction.
struct ResponseState {
    /// Response bytes sent to the client on this connection.
    sent: u64,
    /// Byte-count fault of this connection: (kind, limit), taken when it opens.
    cut: Option<(FaultKind, u64)>,
    /// Body offset in the current response.
    body_offset: u64,
    /// Flip this body offset of the current response.
    flip: Option<u64>,
    /// Body bytes still allowed for the current response (after a lowered Content-Length).
    body_left: Option<u64>,
}

/// What [`send`] decided.
enum Sent {
    /// Keep relaying.
    Go,
    /// The connection is over (client gone, or a fault ended it).
    Stop,
    /// A stall fault: forward nothing more, keep the connection open.
    Stall,
}

/// Server → client: forwards responses with the configured faults.
fn responses(
    mut from: TcpStream,
    writer: &ClientWriter,
    methods: &Mutex<std::collections::VecDeque<bool>>,
    faults: &Faults,
) {
    let next_is_head = || {
        methods
            .lock()
            .ok()
            .and_then(|mut m| m.pop_front())
            .unwrap_or(false)
    };
    let mut st = ResponseState {
        sent: 0,
        cut: faults.take(|k| match k {
            FaultKind::ResetAfter(n) | FaultKind::TruncateAfter(n) | FaultKind::StallAfter(n) => {
                Some((k, n))
            }
            _ => None,
        }),
        body_offset: 0,
        flip: None,
        body_left: None,
    };
    let mut decoder: Option<ResponseDecoder> = None;
    // Whether the current response's head is still being decoded.
    let mut awaiting_head = true;
    let mut framed = true;
    // Raw bytes of the head being decoded (held until it is complete, so it can be rewritten).
    let mut head_bytes: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let outcome = 'relay: loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let rest = std::mem::take(&mut head_bytes);
                break 'relay send(writer, &rest, &mut st);
            }
            Ok(n) => n,
        };
        let mut chunk = buf.get(..n).unwrap_or_default().to_vec();
        if !framed {
            match send(writer, &chunk, &mut st) {
                Sent::Go => continue,
                other => break 'relay other,
            }
        }
        let mut pos = 0;
        loop {
            if pos >= chunk.len() && decoder.is_none() {
                // The next response has not started: its decoder is made when bytes come (so
                // it learns whether its request was a HEAD).
                break;
            }
            let dec = decoder.get_or_insert_with(|| {
                awaiting_head = true;
                ResponseDecoder::new(Limits::default(), next_is_head())
            });
            let input = chunk.get(pos..).unwrap_or_default();
            let d = match dec.decode(input) {
                Ok(d) => d,
                Err(_) => {
                    // Not HTTP we can frame: relay everything from here on unchanged.
                    framed = false;
                    let mut rest = std::mem::take(&mut head_bytes);
                    rest.extend_from_slice(input);
                    match send(writer, &rest, &mut st) {
                        Sent::Go => break,
                        other => break 'relay other,
                    }
                }
            };
            let (start, end) = (pos, pos + d.consumed);
            pos = end;
            let starved = d.event == Event::NeedMore && end >= chunk.len();
            let sent = match d.event {
                Event::NeedMore if awaiting_head => {
                    // Part of a head (or interim 1xx heads): hold it.
                    head_bytes.extend_from_slice(chunk.get(start..end).unwrap_or_default());
                    Sent::Go
                }
                Event::NeedMore => send(writer, chunk.get(start..end).unwrap_or_default(), &mut st),
                Event::Head(head) => {
                    awaiting_head = false;
                    head_bytes.extend_from_slice(chunk.get(start..end).unwrap_or_default());
                    faults.stats.responses.fetch_add(1, Ordering::SeqCst);
                    if let Some(d) = faults.take(|k| match k {
                        FaultKind::Latency(d) => Some(d),
                        _ => None,
                    }) {
                        std::thread::sleep(d);
                    }
                    st.body_offset = 0;
                    st.body_left = None;
                    st.flip = None;
                    let body_len = head.content_length();
                    let has_body = match head.framing {
                        BodyFraming::None => false,
                        BodyFraming::Length(n) => n > 0,
                        _ => true,
                    };
                    if has_body {
                        let nth = faults.responses_with_body.fetch_add(1, Ordering::SeqCst) + 1;
                        st.flip = faults.take(|k| match k {
                            FaultKind::Flip(at) if body_len.is_none_or(|l| at < l) => Some(at),
                            FaultKind::FlipEvery(every) if nth.is_multiple_of(every) => Some(0),
                            _ => None,
                        });
                        if let BodyFraming::Length(cl) = head.framing
                            && let Some(k) = faults.take(|k| match k {
                                FaultKind::ContentLengthMinus(k) => Some(k),
                                _ => None,
                            })
                        {
                            let lowered = cl.saturating_sub(k);
                            head_bytes = rewrite_content_length(&head_bytes, lowered);
                            st.body_left = Some(lowered);
                        }
                    }
                    let out = std::mem::take(&mut head_bytes);
                    send(writer, &out, &mut st)
                }
                Event::Body(data) => {
                    let len = data.len() as u64;
                    let body_start = end - data.len();
                    if let Some(at) = st.flip
                        && at >= st.body_offset
                        && at < st.body_offset + len
                    {
                        let i = body_start + usize::try_from(at - st.body_offset).unwrap_or(0);
                        if let Some(b) = chunk.get_mut(i) {
                            *b ^= 0xff;
                        }
                        st.flip = None;
                    }
                    st.body_offset += len;
                    // Framing bytes before the data (chunk sizes) travel with it.
                    let mut stop = start..end;
                    if let Some(left) = st.body_left {
                        let allowed = usize::try_from(left.min(len)).unwrap_or(0);
                        stop = start..body_start + allowed;
                        st.body_left = Some(left - allowed as u64);
                    }
                    let piece = chunk.get(stop).unwrap_or_default().to_vec();
                    send(writer, &piece, &mut st)
                }
                Event::End => {
                    if st.body_left.is_some() {
                        // The lowered Content-Length ended the response early; the rest of
                        // the real body would be garbage on this connection: close it.
                        break 'relay Sent::Stop;
                    }
                    let sent = send(writer, chunk.get(start..end).unwrap_or_default(), &mut st);
                    if dec.is_reusable() {
                        decoder = None;
                    } else {
                        framed = false;
                    }
                    sent
                }
            };
            if !matches!(sent, Sent::Go) {
                break 'relay sent;
            }
            if starved {
                break;
            }
            if !framed {
                let rest = chunk.get(pos..).unwrap_or_default().to_vec();
                match send(writer, &rest, &mut st) {
                    Sent::Go => break,
                    other => break 'relay other,
                }
            }
        }
        chunk.clear();
    };
    if let Sent::Stall = outcome {
        // Read and drop the server's bytes until the connection ends (the client closing
        // makes the request direction shut the server socket down).
        while matches!(from.read(&mut buf), Ok(n) if n > 0) {}
    }
}

/// `head` with its `Content-Length` value replaced by `value`.
fn rewrite_content_length(head: &[u8], value: u64) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive("\r\n") {
        match line.split_once(':') {
            Some((name, _)) if name.eq_ignore_ascii_case("content-length") => {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            _ => out.push_str(line),
        }
    }
    out.into_bytes()
}

/// Sends `bytes` to the client, applying this connection's byte-count fault.
fn send(writer: &ClientWriter, bytes: &[u8], st: &mut ResponseState) -> Sent {
    if bytes.is_empty() {
        return Sent::Go;
    }
    let Ok(mut w) = writer.lock() else {
        return Sent::Stop;
    };
    let room = match st.cut {
        Some((_, limit)) => limit.saturating_sub(st.sent),
        None => u64::MAX,
    };
    let n = usize::try_from(room.min(bytes.len() as u64)).unwrap_or(0);
    if w.write_all(bytes.get(..n).unwrap_or_default()).is_err() {
        return Sent::Stop;
    }
    st.sent += n as u64;
    if n == bytes.len() {
        return Sent::Go;
    }
    let _ = w.flush();
    match st.cut.map(|(k, _)| k) {
        Some(FaultKind::ResetAfter(_)) => {
            reset(&w);
            Sent::Stop
        }
        Some(FaultKind::StallAfter(_)) => Sent::Stall,
        _ => {
            let _ = w.shutdown(Shutdown::Both);
            Sent::Stop
        }
    }
}
