//! A small fault-injecting TCP relay for tests: forwards every connection to a backend and
//! applies one [`Fault`], once (the first connection where it applies). Included with
//! `#[path]` by gateway, engine and CLI tests. Faults:
//!
//! - [`Fault::FlipRequestBody`]: one byte of the first request body (client → server).
//! - [`Fault::FlipResponseBody`]: one byte of the first response body long enough to hold it.
//! - [`Fault::LowerContentLength`]: the `Content-Length` of the first response that names more
//!   than `by` bytes (a GET's body or a HEAD's object size), lowered by `by` (a body is still
//!   forwarded whole).
//! - [`Fault::RewriteHeader`]: the value of a response header (e.g. the soft fabric address a
//!   connect reply names, to send the data port through a second relay).
//! - [`Fault::FlipStream`]: one byte at an offset of the server → client byte stream (a raw
//!   protocol such as the soft fabric's data port).
//! - [`Fault::FlipBodiesOfLength`]: one byte in every `every`-th response body of exactly
//!   `len` bytes (all connections counted together; [`Relay::flips`] says how many).
//!
//! HTTP faults follow messages by `Content-Length` (no chunked bodies); answers to HEAD
//! requests are known to carry none.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the relay does to the traffic (once).
#[derive(Debug, Clone)]
pub enum Fault {
    /// XOR 0x01 into the byte `at` bytes after the head of the first request with a body.
    FlipRequestBody { at: usize },
    /// XOR 0x01 into the byte `at` bytes into the body of the first response whose
    /// `Content-Length` exceeds `at`.
    FlipResponseBody { at: u64 },
    /// Lower the `Content-Length` of the first response that names more than `by` bytes (a
    /// GET's body length or a HEAD's object size; a body is forwarded whole).
    LowerContentLength { by: u64 },
    /// Replace the value of response header `name` (every response) with `value`.
    RewriteHeader { name: String, value: String },
    /// XOR 0x01 into byte `at` of the first connection's server → client stream.
    FlipStream { at: u64 },
    /// XOR 0x01 into byte `at` of every `every`-th response body of exactly `len` bytes.
    FlipBodiesOfLength { at: u64, len: u64, every: u64 },
}

/// A running relay.
pub struct Relay {
    /// Where clients connect.
    pub addr: SocketAddr,
    fired: Arc<AtomicBool>,
    counts: Arc<Counts>,
}

/// Counters shared by every connection of a relay.
#[derive(Default)]
struct Counts {
    /// Response bodies of the length [`Fault::FlipBodiesOfLength`] names, seen so far.
    seen: AtomicU64,
    /// Bytes flipped.
    flips: AtomicU64,
}

impl Relay {
    /// Starts a relay to `backend` applying `fault`.
    pub fn start(backend: SocketAddr, fault: Fault) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let fired = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let (f, c) = (Arc::clone(&fired), Arc::clone(&counts));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let shared = Shared {
                    fault: fault.clone(),
                    fired: Arc::clone(&f),
                    counts: Arc::clone(&c),
                    heads: Arc::new(Mutex::new(VecDeque::new())),
                };
                std::thread::spawn(move || relay_one(client, backend, shared));
            }
        });
        Relay {
            addr,
            fired,
            counts,
        }
    }

    /// Bytes flipped so far.
    pub fn flips(&self) -> u64 {
        self.counts.flips.load(Ordering::SeqCst)
    }

    /// Whether the fault was applied.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

/// What both directions of one connection share.
#[derive(Clone)]
struct Shared {
    fault: Fault,
    fired: Arc<AtomicBool>,
    counts: Arc<Counts>,
    /// Requests forwarded and not yet answered: `true` for HEAD (its answer has no body).
    heads: Arc<Mutex<VecDeque<bool>>>,
}

fn relay_one(client: TcpStream, backend: SocketAddr, shared: Shared) {
    let Ok(server) = TcpStream::connect(backend) else {
        return;
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (Ok(c_read), Ok(s_write), Ok(s_read), Ok(c_write)) = (
        client.try_clone(),
        server.try_clone(),
        server.try_clone(),
        client.try_clone(),
    ) else {
        return;
    };
    let up = shared.clone();
    std::thread::spawn(move || pump(c_read, s_write, &up, Direction::Up));
    pump(s_read, c_write, &shared, Direction::Down);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client → server.
    Up,
    /// Server → client.
    Down,
}

/// Forwards `from` to `to`, applying `fault` to this direction's bytes.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, dir: Direction) {
    let mut edit = Editor::new(shared, dir);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let out = edit.feed(&buf[..n]);
        if to.write_all(&out).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// The per-direction state of one connection.
struct Editor<'f> {
    shared: &'f Shared,
    fault: &'f Fault,
    dir: Direction,
    /// Bytes of this direction seen so far.
    offset: u64,
    /// HTTP faults: the head being collected (before it is forwarded).
    head: Vec<u8>,
    /// HTTP faults: body bytes of the current message still to forward after its head
    /// (`None`: the next bytes start a head).
    body_left: Option<u64>,
    /// The body offset to flip in the current message.
    flip_at: Option<u64>,
    body_pos: u64,
}

impl<'f> Editor<'f> {
    fn new(shared: &'f Shared, dir: Direction) -> Self {
        Editor {
            shared,
            fault: &shared.fault,
            dir,
            offset: 0,
            head: Vec::new(),
            body_left: None,
            flip_at: None,
            body_pos: 0,
        }
    }

    fn http(&self) -> bool {
        !matches!(self.fault, Fault::FlipStream { .. })
    }

    /// Returns the bytes to forward for `data`.
    fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        let fired = &*self.shared.fired;
        if let (Fault::FlipStream { at }, Direction::Down) = (self.fault, self.dir) {
            let mut out = data.to_vec();
            let base = self.offset;
            self.offset += data.len() as u64;
            if *at >= base && *at < self.offset && !fired.swap(true, Ordering::SeqCst) {
                out[(*at - base) as usize] ^= 0x01;
            }
            return out;
        }
        if !self.http() {
            return data.to_vec();
        }
        let mut out = Vec::with_capacity(data.len() + 64);
        let mut rest = data;
        while !rest.is_empty() {
            match self.body_left {
                Some(left) => {
                    let n = (left.min(rest.len() as u64)) as usize;
                    let mut piece = rest[..n].to_vec();
                    if let Some(at) = self.flip_at
                        && at >= self.body_pos
                        && at < self.body_pos + n as u64
                    {
                        piece[(at - self.body_pos) as usize] ^= 0x01;
                        self.flip_at = None;
                    }
                    out.extend_from_slice(&piece);
                    self.body_pos += n as u64;
                    rest = &rest[n..];
                    let left = left - n as u64;
                    self.body_left = (left > 0).then_some(left);
                }
                None => {
                    self.head.push(rest[0]);
                    rest = &rest[1..];
                    if self.head.ends_with(b"\r\n\r\n") {
                        let head = std::mem::take(&mut self.head);
                        let (head, body) = self.edit_head(&head);
                        out.extend_from_slice(&head);
                        self.body_pos = 0;
                        self.body_left = (body > 0).then_some(body);
                    }
                }
            }
        }
        out
    }

    /// Applies the fault to one message head; returns the head to forward and the number of
    /// body bytes that follow it on the wire.
    fn edit_head(&mut self, head: &[u8]) -> (Vec<u8>, u64) {
        let fired = &*self.shared.fired;
        let text = String::from_utf8_lossy(head).into_owned();
        let mut len = content_length(&text).unwrap_or(0);
        self.flip_at = None;
        let mut heads = self.shared.heads.lock().unwrap();
        match self.dir {
            Direction::Up => heads.push_back(text.starts_with("HEAD ")),
            // An interim 1xx answers nothing yet; a HEAD's answer has no body.
            Direction::Down if text.starts_with("HTTP/1.1 1") => len = 0,
            Direction::Down => {
                if heads.pop_front() == Some(true) {
                    len = 0;
                }
            }
        }
        drop(heads);
        // Faults apply to one direction only.
        let mine = match self.fault {
            Fault::FlipRequestBody { .. } => self.dir == Direction::Up,
            _ => self.dir == Direction::Down,
        };
        if !mine {
            return (head.to_vec(), len);
        }
        match self.fault {
            Fault::FlipRequestBody { .. } | Fault::FlipResponseBody { .. } if len == 0 => {
                (head.to_vec(), 0)
            }
            Fault::FlipRequestBody { at } => {
                if (*at as u64) < len && !fired.swap(true, Ordering::SeqCst) {
                    self.flip_at = Some(*at as u64);
                }
                (head.to_vec(), len)
            }
            Fault::FlipResponseBody { at } => {
                if *at < len && !fired.swap(true, Ordering::SeqCst) {
                    self.flip_at = Some(*at);
                }
                (head.to_vec(), len)
            }
            Fault::LowerContentLength { by } => {
                // The header's value: a HEAD answer names the object's size without a body.
                let named = content_length(&text).unwrap_or(0);
                if named > *by && !fired.swap(true, Ordering::SeqCst) {
                    let lowered =
                        replace_header(&text, "content-length", &(named - by).to_string());
                    (lowered.into_bytes(), len)
                } else {
                    (head.to_vec(), len)
                }
            }
            Fault::RewriteHeader { name, value } => {
                if header(&text, name).is_some() {
                    fired.store(true, Ordering::SeqCst);
                    (replace_header(&text, name, value).into_bytes(), len)
                } else {
                    (head.to_vec(), len)
                }
            }
            Fault::FlipBodiesOfLength {
                at,
                len: want,
                every,
            } => {
                if len == *want && *at < len {
                    let n = self.shared.counts.seen.fetch_add(1, Ordering::SeqCst) + 1;
                    if n.is_multiple_of((*every).max(1)) {
                        fired.store(true, Ordering::SeqCst);
                        self.shared.counts.flips.fetch_add(1, Ordering::SeqCst);
                        self.flip_at = Some(*at);
                    }
                }
                (head.to_vec(), len)
            }
            Fault::FlipStream { .. } => (head.to_vec(), len),
        }
    }
}

/// The value of header `name` in a message head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A head's `Content-Length` (the caller knows which answers carry none).
fn content_length(head: &str) -> Option<u64> {
    header(head, "content-length")?.parse().ok()
}

/// `head` with the value of header `name` replaced by `value`.
fn replace_header(head: &str, name: &str, value: &str) -> String {
    let mut out = String::with_capacity(head.len() + 16);
    for (i, line) in head.split("\r\n").enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        match line.split_once(':') {
            Some((n, _)) if i > 0 && n.trim().eq_ignore_ascii_case(name) => {
                out.push_str(n);
                out.push_str(": ");
                out.push_str(value);
            }
            _ => out.push_str(line),
        }
    }
    out
}
