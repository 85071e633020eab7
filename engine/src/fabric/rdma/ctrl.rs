//! One side exchange of the RDMA dialects (the pairing's connect, hipobj-rc-v2's PREPARE /
//! READY / CANCEL) on a connection of its own, driven by the worker's `mio` poll: the sans-IO
//! exchange machine (`s3_lite::http::Exchange`) fed from a non-blocking socket registered under
//! a token at or above [`CTRL_BASE`]. Nothing here blocks: the connect is non-blocking, writes
//! and reads stop at `WouldBlock`, and the owner bounds the whole exchange with the worker's
//! timers. A kept-alive connection carries the next request of the same op (READY after
//! PREPARE).
//!
//! For an `https://` endpoint the socket is wrapped in TLS exactly as the HTTP transport's
//! connections are (`s3_lite::net::transport::Transport` with the engine's
//! [`TlsContext`]: its CA bundle or roots, verification unless switched off, the endpoint's
//! host as SNI); rustls is sans-IO, so the handshake moves on the same readiness edges. A
//! refused certificate ends the exchange as [`Step::Refused`] (recorded for
//! `Engine::tls_failure`), which the dialects turn into the op's failure, never into a plain
//! retry. Only these control exchanges are encrypted: the payload moves over the RDMA fabric.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Interest, Token};
use s3_lite::Request;
use s3_lite::http::{BodyFraming, Event, Exchange, Limits, Output, ResponseHead};
use s3_lite::net::transport::Transport;

use crate::fabric::http::connect_finished;
use crate::fabric::http::tls::TlsContext;

/// Tokens of side exchanges start here (connection slots of the HTTP transport are small
/// indices below it; the dialects' and the worker's own tokens sit at the top of the range).
pub(crate) const CTRL_BASE: usize = 1 << 40;

/// Whether `token` names a side exchange.
pub(crate) fn is_ctrl(token: Token) -> bool {
    token.0 >= CTRL_BASE && token.0 < usize::MAX - 16
}

/// Largest answer body kept (an error document); a longer one ends the exchange there.
const MAX_ANSWER_BODY: usize = 64 * 1024;

/// Where a driven exchange stands.
#[derive(Debug)]
pub(crate) enum Step {
    /// Waiting for readiness.
    Pending,
    /// The answer arrived (its body bounded by [`MAX_ANSWER_BODY`]).
    Answer(ResponseHead, Vec<u8>),
    /// The connection failed or the answer did not parse.
    Broken,
    /// The endpoint's TLS certificate was refused (recorded in its [`TlsContext`]).
    Refused,
}

/// One side-exchange connection.
#[derive(Debug)]
pub(crate) struct Ctrl {
    /// Plain TCP, or TLS over it for an `https://` endpoint.
    stream: Transport<TcpStream>,
    tls: Option<Arc<TlsContext>>,
    pub(crate) token: Token,
    connected: bool,
    ex: Exchange,
    rbuf: Box<[u8]>,
    /// INVARIANT: `rstart <= rend <= rbuf.len()`.
    rstart: usize,
    rend: usize,
    head: Option<ResponseHead>,
    body: Vec<u8>,
    /// The answer's body was longer than kept: the connection cannot carry another request.
    cut: bool,
    /// The current request was answered (readiness until the next request is ignored).
    answered: bool,
}

impl Ctrl {
    /// Starts a non-blocking connect to `addr` (TLS with `tls`: the endpoint is `https://`),
    /// registered with `io` under `token`.
    pub(crate) fn open(
        addr: SocketAddr,
        tls: Option<&Arc<TlsContext>>,
        token: Token,
        io: &mio::Registry,
    ) -> io::Result<Self> {
        let sock = TcpStream::connect(addr)?;
        let _ = sock.set_nodelay(true);
        let mut stream = match tls {
            None => Transport::plain(sock),
            Some(t) => Transport::tls(sock, &t.config, &t.server_name)?,
        };
        io.register(
            stream.socket_mut(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        )?;
        Ok(Self {
            stream,
            tls: tls.cloned(),
            token,
            connected: false,
            ex: Exchange::new(Limits::default()),
            rbuf: vec![0; 16 * 1024].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            head: None,
            body: Vec::new(),
            cut: false,
            answered: false,
        })
    }

    /// Starts `req` (no body) on this connection and writes what the socket takes. The answer
    /// is read on readiness only ([`Ctrl::drive`]): its arrival is a readiness edge of its own.
    /// `Broken` when the connection cannot carry it (its last answer was not reusable).
    pub(crate) fn request(&mut self, req: &Request) -> Step {
        if self.cut || self.ex.request(req, BodyFraming::None).is_err() {
            return Step::Broken;
        }
        self.head = None;
        self.body.clear();
        self.answered = false;
        match self.check_connected() {
            Ok(true) => self.write(),
            Ok(false) => Step::Pending,
            Err(e) => self.failed(&e),
        }
    }

    /// Makes as much progress as the socket allows (on readiness).
    pub(crate) fn drive(&mut self) -> Step {
        if self.answered {
            return Step::Pending;
        }
        match self.check_connected() {
            Ok(true) => {}
            Ok(false) => return Step::Pending,
            Err(e) => return self.failed(&e),
        }
        match self.write() {
            Step::Pending if self.ex.request_sent() => self.receive(),
            other => other,
        }
    }

    /// Writes the request's head, then queued TLS records; `Pending` once written (or when
    /// the socket is full: the next writable edge goes on).
    fn write(&mut self) -> Step {
        while let Output::Bytes(b) = self.ex.output() {
            match self.stream.write(b) {
                Ok(0) => return Step::Broken,
                Ok(n) => self.ex.wrote(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.failed(&e),
            }
        }
        // TLS: records may still be queued after the plaintext was taken.
        match self.stream.flush() {
            Ok(_) => Step::Pending,
            Err(e) => self.failed(&e),
        }
    }

    /// The step for a failed socket or TLS call: a refused certificate is recorded and
    /// ends the exchange as `Refused`; anything else breaks it.
    fn failed(&self, e: &io::Error) -> Step {
        if TlsContext::refusal(self.tls.as_deref(), e) {
            Step::Refused
        } else {
            Step::Broken
        }
    }

    fn check_connected(&mut self) -> io::Result<bool> {
        if !self.connected {
            self.connected = connect_finished(self.stream.socket())?;
        }
        Ok(self.connected)
    }

    fn receive(&mut self) -> Step {
        loop {
            if let Some(step) = self.decode() {
                return step;
            }
            self.rstart = 0;
            self.rend = 0;
            match self.stream.read(&mut self.rbuf) {
                Ok(0) => {
                    if self.ex.finish_on_eof().is_err() {
                        return Step::Broken;
                    }
                    self.cut = true;
                    return self.decode().unwrap_or(Step::Broken);
                }
                Ok(n) => self.rend = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.failed(&e),
            }
        }
    }

    /// Feeds buffered input to the machine: `None` when it needs more.
    fn decode(&mut self) -> Option<Step> {
        loop {
            let input = self.rbuf.get(self.rstart..self.rend).unwrap_or_default();
            let Ok(d) = self.ex.receive(input) else {
                return Some(Step::Broken);
            };
            self.rstart += d.consumed;
            match d.event {
                Event::NeedMore => return None,
                Event::Head(h) => self.head = Some(h),
                Event::Body(b) => {
                    if self.body.len() + b.len() > MAX_ANSWER_BODY {
                        self.cut = true;
                        return Some(self.answer());
                    }
                    self.body.extend_from_slice(b);
                }
                Event::End => {
                    if !self.ex.is_reusable() || self.rstart != self.rend {
                        self.cut = true;
                    }
                    return Some(self.answer());
                }
            }
        }
    }

    fn answer(&mut self) -> Step {
        self.answered = true;
        match self.head.take() {
            Some(h) => Step::Answer(h, std::mem::take(&mut self.body)),
            None => Step::Broken,
        }
    }

    /// Deregisters the connection and closes it.
    pub(crate) fn close(mut self, io: &mio::Registry) {
        let _ = io.deregister(self.stream.socket_mut());
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    use super::*;

    fn req(path: &str) -> Request {
        let mut r = Request::new("POST", path);
        r.add_header("Host", "h");
        r.add_header("Content-Length", "0");
        r
    }

    fn until_answer(poll: &mut mio::Poll, c: &mut Ctrl, first: Step) -> Step {
        let mut step = first;
        let end = Instant::now() + Duration::from_secs(5);
        let mut events = mio::Events::with_capacity(8);
        while matches!(step, Step::Pending) && Instant::now() < end {
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            if events.iter().any(|e| e.token() == c.token) {
                step = c.drive();
            }
        }
        step
    }

    /// Two requests on one kept connection, driven by readiness only; a peer that never
    /// answers leaves the exchange pending (the owner's timer ends it), never blocks.
    #[test]
    fn two_exchanges_on_a_kept_connection_then_a_silent_peer() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            for answer in [
                &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"[..],
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\n\r\nno!",
            ] {
                let n = c.read(&mut buf).unwrap();
                assert!(buf[..n].starts_with(b"POST /a HTTP/1.1\r\n"));
                c.write_all(answer).unwrap();
            }
            // Reads the third request and never answers.
            let _ = c.read(&mut buf);
            std::thread::sleep(Duration::from_millis(400));
        });
        let mut poll = mio::Poll::new().unwrap();
        let token = Token(CTRL_BASE);
        assert!(is_ctrl(token));
        let mut c = Ctrl::open(addr, None, token, poll.registry()).unwrap();
        let first = c.request(&req("/a"));
        let Step::Answer(h, body) = until_answer(&mut poll, &mut c, first) else {
            panic!("no answer");
        };
        assert_eq!((h.status, body.as_slice()), (200, &b"hello"[..]));
        let first = c.request(&req("/a"));
        let Step::Answer(h, body) = until_answer(&mut poll, &mut c, first) else {
            panic!("no answer");
        };
        assert_eq!((h.status, body.as_slice()), (403, &b"no!"[..]));
        let started = Instant::now();
        let mut step = c.request(&req("/a"));
        let mut events = mio::Events::with_capacity(8);
        while started.elapsed() < Duration::from_millis(200) {
            poll.poll(&mut events, Some(Duration::from_millis(20)))
                .unwrap();
            if events.iter().any(|e| e.token() == c.token) {
                step = c.drive();
            }
        }
        assert!(matches!(step, Step::Pending), "{step:?}");
        c.close(poll.registry());
        server.join().unwrap();
    }
}
