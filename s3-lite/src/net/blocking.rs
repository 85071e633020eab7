//! One blocking HTTP/1.1 exchange at a time over a kept-alive connection.
//!
//! The exchange machine ([`crate::http::Exchange`]) decides what is sent when, decodes the
//! response and says whether the connection may be reused; this module only moves bytes. Response body bytes are handed to a [`BodySink`] straight from the read buffer, so a
//! download is written to its destination without an intermediate copy of the payload.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use rustls::ClientConfig;

use super::stream::{Stream, Timeouts};
use crate::Request;
use crate::http::{BodyFraming, Event, Exchange, HttpError, Limits, Output, ResponseHead};
use crate::s3::{Endpoint, Scheme};

/// Size of the read buffer, and of the pieces a streamed request body is sent in.
const IO_CHUNK: usize = 256 * 1024;

/// In-memory bodies up to this size go out in the same write as the head.
const COALESCE_BODY: usize = 64 * 1024;

/// A request body.
pub enum RequestBody<'a> {
    /// No body and no framing header (GET, HEAD, DELETE).
    None,
    /// An in-memory body sent with `Content-Length`.
    Bytes(&'a [u8]),
    /// Exactly `len` bytes read from `reader`, sent with `Content-Length`.
    Reader(&'a mut dyn Read, u64),
    /// Exactly `len` bytes from the start of a seekable source (a spooled file), sent with
    /// `Content-Length`; rewound for every attempt, so it can be replayed like `Bytes`.
    Rewindable(&'a mut dyn ReadSeek, u64),
}

/// A body source that can be rewound ([`RequestBody::Rewindable`]).
pub trait ReadSeek: Read + Seek {}

impl<T: Read + Seek> ReadSeek for T {}

/// Where response body bytes go.
pub trait BodySink {
    /// Called once with the final response head, before any body bytes.
    fn begin(&mut self, _head: &ResponseHead) -> io::Result<()> {
        Ok(())
    }

    /// Takes the next piece of the body (in order).
    fn accept(&mut self, data: &[u8]) -> io::Result<()>;
}

impl BodySink for Vec<u8> {
    fn accept(&mut self, data: &[u8]) -> io::Result<()> {
        self.extend_from_slice(data);
        Ok(())
    }
}

/// Adapts any writer; `on_bytes` is told how many bytes arrived (progress bars).
pub struct WriteSink<'a, W: Write> {
    /// The destination.
    pub writer: W,
    /// Progress callback.
    pub on_bytes: &'a mut dyn FnMut(u64),
}

impl<W: Write> BodySink for WriteSink<'_, W> {
    fn accept(&mut self, data: &[u8]) -> io::Result<()> {
        self.writer.write_all(data)?;
        (self.on_bytes)(data.len() as u64);
        Ok(())
    }
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// Connecting, reading or writing failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The server's response was not valid HTTP/1.1 (or broke our limits).
    #[error("invalid HTTP response from {host}: {source}")]
    Http {
        /// The server.
        host: String,
        /// The codec's error.
        #[source]
        source: HttpError,
    },
    /// The request itself could not be encoded (invalid header value, ...).
    #[error("cannot encode request: {0}")]
    Encode(#[source] HttpError),
    /// The body reader ended before the declared length.
    #[error("request body ended after {sent} of {declared} bytes")]
    ShortBody {
        /// Bytes sent.
        sent: u64,
        /// `Content-Length` declared.
        declared: u64,
    },
    /// The response body could not be written to its destination.
    #[error("writing the response body: {0}")]
    Sink(#[source] io::Error),
}

impl ExchangeError {
    /// Whether retrying on a fresh connection may succeed (connection-level failures).
    pub fn is_retryable(&self) -> bool {
        matches!(self, ExchangeError::Io { .. })
            || matches!(
                self,
                ExchangeError::Http {
                    source: HttpError::UnexpectedEof | HttpError::EmptyResponse,
                    ..
                }
            )
    }
}

struct Connection {
    host: String,
    stream: Stream,
    exchange: Exchange,
    buf: Vec<u8>,
    /// INVARIANT: `start <= end <= buf.len()`; `buf[start..end]` holds unread bytes.
    start: usize,
    end: usize,
}

/// A blocking HTTP client for one endpoint, keeping one idle connection alive.
pub struct HttpClient {
    endpoint: Endpoint,
    tls: Option<Arc<ClientConfig>>,
    timeouts: Timeouts,
    limits: Limits,
    idle: Option<Connection>,
}

impl HttpClient {
    /// A client for `endpoint`; `tls` is required for `https://` endpoints.
    pub fn new(endpoint: Endpoint, tls: Option<Arc<ClientConfig>>, timeouts: Timeouts) -> Self {
        Self {
            endpoint,
            tls,
            timeouts,
            limits: Limits::default(),
            idle: None,
        }
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn connection(&mut self, host: &str) -> Result<(Connection, bool), ExchangeError> {
        if let Some(conn) = self.idle.take()
            && conn.host == host
        {
            return Ok((conn, true));
        }
        let tls = match self.endpoint.scheme {
            Scheme::Https => self.tls.as_ref(),
            Scheme::Http => None,
        };
        let stream =
            Stream::connect(host, self.endpoint.port, tls, self.timeouts).map_err(|source| {
                ExchangeError::Io {
                    context: format!("connect to {host}:{}", self.endpoint.port),
                    source,
                }
            })?;
        Ok((
            Connection {
                host: host.to_owned(),
                stream,
                exchange: Exchange::new(self.limits),
                buf: vec![0; IO_CHUNK],
                start: 0,
                end: 0,
            },
            false,
        ))
    }

    /// Sends `req` with `body` to the server for `bucket` and streams the response body into
    /// `sink`. Returns the response head. A request on a reused connection that fails before any
    /// response byte arrived is retried once on a fresh connection (the server may have closed
    /// the idle connection), but only when the body can be replayed.
    pub fn execute(
        &mut self,
        req: &Request,
        bucket: Option<&str>,
        mut body: RequestBody<'_>,
        sink: &mut dyn BodySink,
    ) -> Result<ResponseHead, ExchangeError> {
        let started = std::time::Instant::now();
        let result = self.execute_once_or_twice(req, bucket, &mut body, sink);
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let target = format!(
            "{}{}{}",
            req.path,
            if req.query.is_empty() { "" } else { "?" },
            req.query
        );
        match &result {
            Ok(head) => tracing::info!("{} {target} -> {} ({ms:.1} ms)", req.method, head.status),
            Err(e) => tracing::info!("{} {target} -> failed: {e} ({ms:.1} ms)", req.method),
        }
        result
    }

    fn execute_once_or_twice(
        &mut self,
        req: &Request,
        bucket: Option<&str>,
        body: &mut RequestBody<'_>,
        sink: &mut dyn BodySink,
    ) -> Result<ResponseHead, ExchangeError> {
        let host = self.endpoint.connect_host(bucket);
        let replayable = !matches!(body, RequestBody::Reader(..));
        let (conn, reused) = self.connection(&host)?;
        match self.exchange(conn, req, body, sink) {
            Err((err, false)) if reused && replayable && err.is_retryable() => {
                tracing::info!(
                    "{} {}: the reused connection failed before any answer ({err}); retrying on a fresh one",
                    req.method,
                    req.path
                );
                let (conn, _) = self.connection(&host)?;
                self.exchange(conn, req, body, sink).map_err(|(e, _)| e)
            }
            other => other.map_err(|(e, _)| e),
        }
    }

    /// One attempt. The error's flag says whether any response byte was seen.
    fn exchange(
        &mut self,
        mut conn: Connection,
        req: &Request,
        body: &mut RequestBody<'_>,
        sink: &mut dyn BodySink,
    ) -> Result<ResponseHead, (ExchangeError, bool)> {
        let framing = match body {
            RequestBody::None => BodyFraming::None,
            RequestBody::Bytes(b) => BodyFraming::Length(b.len() as u64),
            RequestBody::Reader(_, len) | RequestBody::Rewindable(_, len) => {
                BodyFraming::Length(*len)
            }
        };
        conn.exchange
            .request(req, framing)
            .map_err(|e| (ExchangeError::Encode(e), false))?;
        let coalesce = req.header("expect").is_none();
        let mut response_head: Option<ResponseHead> = None;
        let mut seen_bytes = false;
        let http_err = |host: &str, source, seen| {
            (
                ExchangeError::Http {
                    host: host.to_owned(),
                    source,
                },
                seen,
            )
        };
        loop {
            send_offered(&mut conn, body, coalesce).map_err(|e| (e, seen_bytes))?;
            // Decode first: the machine may have an event (End) without needing more input.
            let input = conn.buf.get(conn.start..conn.end).unwrap_or_default();
            let decoded = conn
                .exchange
                .receive(input)
                .map_err(|source| http_err(&conn.host, source, seen_bytes))?;
            conn.start += decoded.consumed;
            match decoded.event {
                // A `100 Continue` just released the body: send it before reading on.
                Event::NeedMore
                    if matches!(
                        conn.exchange.output(),
                        Output::Bytes(_) | Output::Body { .. }
                    ) =>
                {
                    continue;
                }
                Event::NeedMore => {}
                Event::Head(h) => {
                    sink.begin(&h).map_err(|e| (ExchangeError::Sink(e), true))?;
                    response_head = Some(h);
                    continue;
                }
                Event::Body(data) => {
                    sink.accept(data)
                        .map_err(|e| (ExchangeError::Sink(e), true))?;
                    continue;
                }
                Event::End => break,
            }
            // NeedMore: the machine has taken everything buffered; read more.
            conn.start = 0;
            conn.end = 0;
            let awaiting = conn.exchange.output() == Output::AwaitContinue;
            let read = if awaiting {
                // `Expect: 100-continue`: wait a little for the go-ahead, then send anyway.
                conn.stream
                    .read_within(&mut conn.buf, self.timeouts.expect_continue)
            } else {
                conn.stream.read(&mut conn.buf)
            };
            let n = match read {
                Err(e) if awaiting && is_timeout(&e) => {
                    conn.exchange.continue_without_100();
                    continue;
                }
                other => other.map_err(|e| {
                    (
                        ExchangeError::Io {
                            context: "read response".into(),
                            source: timeout_is_timeout(e),
                        },
                        seen_bytes,
                    )
                })?,
            };
            if n == 0 {
                conn.exchange
                    .finish_on_eof()
                    .map_err(|source| http_err(&conn.host, source, seen_bytes))?;
                // A body delimited by close: the next decode reports End; the connection is gone.
                conn.exchange
                    .receive(b"")
                    .map_err(|source| http_err(&conn.host, source, seen_bytes))?;
                return response_head
                    .ok_or_else(|| http_err(&conn.host, HttpError::UnexpectedEof, seen_bytes));
            }
            seen_bytes = true;
            conn.end = n;
        }
        let head =
            response_head.ok_or_else(|| http_err(&conn.host, HttpError::UnexpectedEof, true))?;
        // Leftover bytes after a complete response mean the server sent more than it framed:
        // never reuse such a connection.
        if conn.exchange.is_reusable() && conn.start == conn.end {
            self.idle = Some(conn);
        }
        Ok(head)
    }
}

/// Writes what the exchange machine offers until it waits: the head (with a small in-memory
/// body in the same write), then the body.
/// `coalesce`: the body may follow the head at once (no `Expect: 100-continue`).
fn send_offered(
    conn: &mut Connection,
    body: &mut RequestBody<'_>,
    coalesce: bool,
) -> Result<(), ExchangeError> {
    let io_err = |context: &str, source| ExchangeError::Io {
        context: context.to_owned(),
        source,
    };
    loop {
        match conn.exchange.output() {
            Output::Bytes(head) => {
                let n = head.len();
                match body {
                    RequestBody::Bytes(b)
                        if coalesce && !b.is_empty() && b.len() <= COALESCE_BODY =>
                    {
                        let mut one = Vec::with_capacity(n + b.len());
                        one.extend_from_slice(head);
                        one.extend_from_slice(b);
                        conn.stream
                            .write_all(&one)
                            .map_err(|e| io_err("send request", e))?;
                        conn.exchange.wrote(n);
                        conn.exchange
                            .body_written(b.len() as u64)
                            .map_err(ExchangeError::Encode)?;
                    }
                    _ => {
                        conn.stream
                            .write_all(head)
                            .map_err(|e| io_err("send request", e))?;
                        conn.exchange.wrote(n);
                    }
                }
            }
            Output::Body { remaining } => {
                let sent = conn.exchange.body_sent();
                match body {
                    RequestBody::Bytes(b) => {
                        let from = usize::try_from(sent).unwrap_or(usize::MAX);
                        let rest = b.get(from..).unwrap_or_default();
                        if rest.len() as u64 != remaining {
                            return Err(ExchangeError::Encode(HttpError::RequestBodyMismatch));
                        }
                        conn.stream
                            .write_all(rest)
                            .map_err(|e| io_err("send request body", e))?;
                        conn.exchange
                            .body_written(remaining)
                            .map_err(ExchangeError::Encode)?;
                    }
                    RequestBody::Reader(reader, len) => {
                        // The machine offers the whole declared length once (`sent` is 0).
                        debug_assert_eq!(sent, 0);
                        let _ = len;
                        send_from_reader(&mut conn.stream, *reader, remaining)?;
                        conn.exchange
                            .body_written(remaining)
                            .map_err(ExchangeError::Encode)?;
                    }
                    RequestBody::Rewindable(source, _) => {
                        debug_assert_eq!(sent, 0);
                        source
                            .seek(SeekFrom::Start(0))
                            .map_err(|source| ExchangeError::Io {
                                context: "rewind request body".into(),
                                source,
                            })?;
                        send_from_reader(&mut conn.stream, &mut **source, remaining)?;
                        conn.exchange
                            .body_written(remaining)
                            .map_err(ExchangeError::Encode)?;
                    }
                    RequestBody::None => {
                        return Err(ExchangeError::Encode(HttpError::RequestBodyMismatch));
                    }
                }
            }
            Output::Chunks | Output::AwaitContinue | Output::Done => break,
        }
    }
    conn.stream.flush().map_err(|e| io_err("send request", e))
}

fn send_from_reader(
    stream: &mut Stream,
    reader: &mut dyn Read,
    len: u64,
) -> Result<(), ExchangeError> {
    let mut buf = vec![0u8; IO_CHUNK];
    let mut sent = 0u64;
    while sent < len {
        let want = usize::try_from((len - sent).min(IO_CHUNK as u64)).unwrap_or(IO_CHUNK);
        let piece = buf.get_mut(..want).unwrap_or_default();
        let n = reader.read(piece).map_err(|source| ExchangeError::Io {
            context: "read request body".into(),
            source,
        })?;
        if n == 0 {
            return Err(ExchangeError::ShortBody {
                sent,
                declared: len,
            });
        }
        stream
            .write_all(piece.get(..n).unwrap_or_default())
            .map_err(|source| ExchangeError::Io {
                context: "send request body".into(),
                source,
            })?;
        sent += n as u64;
    }
    Ok(())
}

/// Whether a read failed because its timeout passed (`WouldBlock` on Linux).
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A socket read timeout surfaces as `WouldBlock` (EAGAIN) on Linux; say what it means.
fn timeout_is_timeout(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "timed out waiting for the server")
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    /// A server that reads a PUT's head, optionally answers `100 Continue`, reads the 5-byte
    /// body and answers 200; returns what it received after the head.
    fn server(send_continue: bool) -> (u16, std::thread::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = c.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let mut body = got.split_off(head_end);
            assert!(body.is_empty(), "the body must wait for the go-ahead");
            if send_continue {
                c.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
            }
            while body.len() < 5 {
                let n = c.read(&mut buf).unwrap();
                body.extend_from_slice(&buf[..n]);
            }
            c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
            body
        });
        (port, h)
    }

    fn put(port: u16, wait: Duration) -> (u16, Vec<u8>, Duration) {
        let ep = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let timeouts = Timeouts {
            expect_continue: wait,
            ..Timeouts::default()
        };
        let mut client = HttpClient::new(ep, None, timeouts);
        let mut req = Request::new("PUT", "/b/k");
        req.add_header("Host", format!("127.0.0.1:{port}"));
        req.add_header("Expect", "100-continue");
        let mut sink = Vec::new();
        let t = std::time::Instant::now();
        let head = client
            .execute(&req, None, RequestBody::Bytes(b"hello"), &mut sink)
            .unwrap();
        (head.status, sink, t.elapsed())
    }

    #[test]
    fn expect_continue_sends_the_body_after_100() {
        let (port, h) = server(true);
        let (status, body, took) = put(port, Duration::from_secs(10));
        assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
        assert!(
            took < Duration::from_secs(5),
            "went on at the 100: {took:?}"
        );
        assert_eq!(h.join().unwrap(), b"hello");
    }

    #[test]
    fn expect_continue_sends_the_body_anyway_after_the_wait() {
        let (port, h) = server(false);
        let (status, _, took) = put(port, Duration::from_millis(200));
        assert_eq!(status, 200);
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert_eq!(h.join().unwrap(), b"hello");
    }
}
