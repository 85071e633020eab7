//! One request on a client connection: the head was collected by the gate (`gateway/src/gate.rs`);
//! here the body is read with the sans-IO decoder, the request answered, and a keep-alive
//! connection handed back.

/// The `tracing` target of the access log: one INFO event per request served, formatted
/// `METHOD /path[?query] STATUS REQUEST-ID DURATIONms` (status 0: no answer was started).
pub const ACCESS_LOG_TARGET: &str = "hipobj::access";

use std::cell::{Cell, RefCell};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use s3_lite::http::BodyFraming;
use s3_lite::http::server::{
    CONTINUE_100, RequestDecoder, RequestEvent, RequestHead, encode_response_head, reason_phrase,
};

use crate::body::BodySource;
use crate::error::ApiError;
use crate::gate::{Parked, Ready};
use crate::handler::{self, Respond};
use crate::server::Shared;
use crate::time::{http_date, now_secs};

/// Read buffer per connection (counted against `max_buffered_bytes`).
pub const IO_BUF: usize = 256 * 1024;
/// A request body left unread by the handler is drained (to keep the connection) up to this.
const MAX_DRAIN: u64 = 8 << 20;

thread_local! {
    /// The worker thread's read buffer, reused by every request it serves: a fresh zeroed
    /// [`IO_BUF`] per request cost a 256 KiB memset, page faults and a heap consolidation on
    /// every GET (the largest single item of a small GET's CPU).
    static SPARE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One request's read buffer: the thread's spare one, given back when the request is done.
/// Bytes of earlier requests left in it are never read: only `Reader::start..end` is valid.
struct ReadBuf(Vec<u8>);

impl ReadBuf {
    /// The thread's buffer, `len` bytes long.
    fn take(len: usize) -> Self {
        let mut v = SPARE_BUF.with_borrow_mut(std::mem::take);
        v.resize(len, 0);
        Self(v)
    }
}

impl Drop for ReadBuf {
    fn drop(&mut self) {
        // A buffer grown past the usual size is not kept.
        if self.0.capacity() <= IO_BUF {
            let v = std::mem::take(&mut self.0);
            let _ = SPARE_BUF.try_with(|s| *s.borrow_mut() = v);
        }
    }
}

impl std::ops::Deref for ReadBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::ops::DerefMut for ReadBuf {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

struct Reader {
    stream: TcpStream,
    buf: ReadBuf,
    /// INVARIANT: `start <= end <= buf.len()`.
    start: usize,
    end: usize,
}

impl Reader {
    /// Reads more bytes after the buffer was consumed; `Ok(0)` at EOF.
    fn fill(&mut self) -> std::io::Result<usize> {
        self.start = 0;
        self.end = 0;
        let n = self.stream.read(&mut self.buf)?;
        self.end = n;
        Ok(n)
    }
}

#[derive(Clone, Copy, Default)]
struct BodyState {
    done: bool,
    continue_sent: bool,
}

/// The request body as a [`BodySource`] over the connection's buffer (zero copy).
struct ConnBody<'a> {
    reader: &'a mut Reader,
    dec: &'a mut RequestDecoder,
    writer: &'a mut TcpStream,
    expect_continue: bool,
    state: &'a Cell<BodyState>,
    progress: Progress,
}

/// The body must keep moving: at least `min_bytes` (or the rest of the body) in every
/// `window`, so a client trickling a byte now and then cannot hold a worker.
struct Progress {
    window: Duration,
    min_bytes: u64,
    since: Instant,
    bytes: u64,
}

impl Progress {
    fn new(shared: &Shared) -> Self {
        Self {
            window: shared.config.io_timeout,
            min_bytes: shared.config.min_body_progress,
            since: Instant::now(),
            bytes: 0,
        }
    }

    /// Counts bytes that arrived; fails when a whole window passed with too few.
    fn arrived(&mut self, n: usize) -> std::io::Result<()> {
        self.bytes += n as u64;
        if self.since.elapsed() < self.window {
            return Ok(());
        }
        if self.bytes < self.min_bytes {
            return Err(std::io::Error::new(
                ErrorKind::TimedOut,
                format!(
                    "request body too slow: {} bytes in {} s (at least {} needed)",
                    self.bytes,
                    self.window.as_secs(),
                    self.min_bytes
                ),
            ));
        }
        self.since = Instant::now();
        self.bytes = 0;
        Ok(())
    }
}

impl BodySource for ConnBody<'_> {
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        let mut st = self.state.get();
        if st.done {
            return Ok(None);
        }
        if self.expect_continue && !st.continue_sent {
            self.writer.write_all(CONTINUE_100)?;
            st.continue_sent = true;
            self.state.set(st);
        }
        loop {
            let input = self
                .reader
                .buf
                .get(self.reader.start..self.reader.end)
                .unwrap_or_default();
            let d = self
                .dec
                .decode(input)
                .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
            let base = self.reader.start;
            self.reader.start += d.consumed;
            match d.event {
                RequestEvent::Body(b) => {
                    let (from, to) = (base + d.consumed - b.len(), base + d.consumed);
                    return Ok(self.reader.buf.get(from..to));
                }
                RequestEvent::End => {
                    st.done = true;
                    self.state.set(st);
                    return Ok(None);
                }
                RequestEvent::Head(_) => {
                    return Err(std::io::Error::new(
                        ErrorKind::InvalidData,
                        "unexpected head",
                    ));
                }
                RequestEvent::NeedMore => {
                    let n = self.reader.fill()?;
                    if n == 0 {
                        return Err(std::io::Error::new(
                            ErrorKind::UnexpectedEof,
                            "client closed inside the body",
                        ));
                    }
                    self.progress.arrived(n)?;
                }
            }
        }
    }
}

/// Writes responses; decides `Connection: close` at head time.
struct Responder<'a> {
    writer: &'a mut TcpStream,
    request_id: &'a str,
    keep_alive: bool,
    started: bool,
    /// Whether an unread body could be drained after the response (else the connection closes).
    drainable: bool,
    state: &'a Cell<BodyState>,
    is_head: bool,
    /// The status sent (for the access log).
    status: u16,
}

impl Respond for Responder<'_> {
    fn head(
        &mut self,
        status: u16,
        mut headers: Vec<(String, String)>,
        framing: BodyFraming,
    ) -> std::io::Result<()> {
        if !self.state.get().done && !self.drainable {
            self.keep_alive = false;
        }
        self.status = status;
        // An answer relayed from the upstream keeps the upstream's own values of these.
        let mut add = |name: &str, value: String| {
            if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)) {
                headers.push((name.to_owned(), value));
            }
        };
        add("x-amz-request-id", self.request_id.to_owned());
        add("x-amz-id-2", self.request_id.to_owned());
        add("Date", http_date(now_secs()));
        add("Server", "hipobj-gateway".into());
        if !self.keep_alive {
            headers.push(("Connection".into(), "close".into()));
        }
        // A HEAD response announces the length of the GET body it stands for.
        let framing = match framing {
            BodyFraming::Length(n) if self.is_head => {
                if !headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                {
                    headers.push(("Content-Length".into(), n.to_string()));
                }
                BodyFraming::None
            }
            f => f,
        };
        let mut out = Vec::with_capacity(1024);
        encode_response_head(status, reason_phrase(status), &headers, framing, &mut out)
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
        self.started = true;
        self.writer.write_all(&out)
    }

    fn body(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.is_head {
            return Ok(());
        }
        self.writer.write_all(data)
    }

    fn started(&self) -> bool {
        self.started
    }
}

/// The query for the access log, with presigned-URL signatures and session tokens replaced by
/// `REDACTED` (they let the URL be replayed until it expires).
fn loggable_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| {
            let name = pair.split('=').next().unwrap_or("");
            let secret = ["x-amz-signature", "x-amz-security-token"]
                .iter()
                .any(|s| name.eq_ignore_ascii_case(s));
            if secret {
                format!("{name}=REDACTED")
            } else {
                pair.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn resource_of(head: &RequestHead) -> String {
    s3_lite::uri::decode_utf8(&head.path).unwrap_or_else(|_| head.path.clone())
}

/// Writes an error response with the S3 error document.
fn write_error(out: &mut Responder<'_>, err: &ApiError, resource: &str) -> std::io::Result<()> {
    let body = err.to_xml(resource, out.request_id);
    let mut headers = err.headers.clone();
    headers.push(("Content-Type".into(), "application/xml".into()));
    let framing = if out.is_head {
        BodyFraming::None
    } else {
        BodyFraming::Length(body.len() as u64)
    };
    out.head(err.status, headers, framing)?;
    out.body(&body)
}

/// A complete error response (head with `Connection: close`, then the S3 error document), for
/// answers written outside a [`Responder`]: refusals and the gate's head errors.
pub(crate) fn error_response(err: &ApiError, resource: &str, request_id: &str) -> Vec<u8> {
    let body = err.to_xml(resource, request_id);
    let mut headers = err.headers.clone();
    headers.push(("Content-Type".to_owned(), "application/xml".to_owned()));
    headers.push(("x-amz-request-id".to_owned(), request_id.to_owned()));
    headers.push(("Date".to_owned(), http_date(now_secs())));
    if err.status == 503 {
        headers.push(("Retry-After".to_owned(), "1".to_owned()));
    }
    headers.push(("Connection".to_owned(), "close".to_owned()));
    let mut out = Vec::with_capacity(512 + body.len());
    let framing = BodyFraming::Length(body.len() as u64);
    if encode_response_head(
        err.status,
        reason_phrase(err.status),
        &headers,
        framing,
        &mut out,
    )
    .is_err()
    {
        return Vec::new();
    }
    out.extend_from_slice(&body);
    out
}

/// Answers a connection the gateway cannot hold (`503 SlowDown`) and closes it.
pub fn reject(mut stream: TcpStream, request_id: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    // Read what the client sent first (bounded) so closing does not reset the connection
    // before the answer is read.
    let mut scratch = [0u8; 4096];
    let _ = stream.read(&mut scratch);
    let _ = stream.write_all(&error_response(&ApiError::slow_down(), "/", request_id));
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.read(&mut scratch);
}

/// Answers a request the worker cannot take on (e.g. the buffer budget is spent) and closes.
pub(crate) fn refuse(shared: &Shared, ready: Ready, err: &ApiError) {
    let mut stream = ready.stream;
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(shared.config.io_timeout));
    let _ = stream.write_all(&error_response(
        err,
        &resource_of(&ready.head),
        &shared.request_id(),
    ));
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Serves the request whose head the gate collected. Returns the connection for its next
/// request when it stays open.
pub(crate) fn serve(shared: &Shared, ready: Ready) -> Option<Parked> {
    let Ready {
        stream,
        head,
        mut dec,
        pending,
    } = ready;
    stream.set_nonblocking(false).ok()?;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(shared.config.io_timeout));
    let _ = stream.set_read_timeout(Some(shared.config.io_timeout));
    let mut writer = stream.try_clone().ok()?;
    let mut buf = ReadBuf::take(IO_BUF.max(pending.len()));
    buf.get_mut(..pending.len())?.copy_from_slice(&pending);
    let mut reader = Reader {
        stream,
        buf,
        start: 0,
        end: pending.len(),
    };
    let request_id = shared.request_id();
    let state = Cell::new(BodyState {
        done: dec.is_done(),
        continue_sent: false,
    });
    let drainable = !head.expect_continue && head.content_length().is_some_and(|n| n <= MAX_DRAIN);
    let keep_alive = head.keep_alive && !shared.is_shutting_down();
    let resource = resource_of(&head);
    let (keep, fatal) = {
        let mut body = ConnBody {
            reader: &mut reader,
            dec: &mut dec,
            writer: &mut writer,
            expect_continue: head.expect_continue,
            state: &state,
            progress: Progress::new(shared),
        };
        let mut w2 = body.writer.try_clone().ok()?;
        let mut out = Responder {
            writer: &mut w2,
            request_id: &request_id,
            keep_alive,
            started: false,
            drainable,
            state: &state,
            is_head: head.method == "HEAD",
            status: 0,
        };
        let started = Instant::now();
        let result = handler::handle(shared, &head, &mut body, &mut out);
        let fatal = match result {
            Ok(()) => false,
            Err(e) if !out.started => write_error(&mut out, &e, &resource).is_err(),
            Err(_) => true, // the head is out: the only honest signal left is closing
        };
        // The access log: one line per request (`hipobj serve -v` or `--access-log` shows it).
        tracing::info!(
            target: ACCESS_LOG_TARGET,
            "{} {}{}{} {} {} {:.1}ms",
            head.method,
            head.path,
            if head.query.is_empty() { "" } else { "?" },
            loggable_query(&head.query),
            if out.started { out.status } else { 0 },
            request_id,
            started.elapsed().as_secs_f64() * 1e3,
        );
        if !out.started {
            return None;
        }
        (out.keep_alive, fatal)
    };
    if fatal || !keep {
        let _ = writer.flush();
        let _ = writer.shutdown(std::net::Shutdown::Write);
        return None;
    }
    // Drain whatever the handler left unread, then hand the connection back.
    if !state.get().done {
        let mut body = ConnBody {
            reader: &mut reader,
            dec: &mut dec,
            writer: &mut writer,
            expect_continue: false,
            state: &state,
            progress: Progress::new(shared),
        };
        loop {
            match body.next_chunk() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return None,
            }
        }
    }
    dec.reset_for_next().ok()?;
    let pending = reader.buf.get(reader.start..reader.end)?.to_vec();
    Some(Parked {
        stream: reader.stream,
        pending,
    })
}

#[cfg(test)]
mod read_buf_tests {
    use super::{IO_BUF, ReadBuf};

    #[test]
    fn a_worker_reuses_its_read_buffer_and_drops_an_oversized_one() {
        std::thread::spawn(|| {
            let first = ReadBuf::take(IO_BUF);
            let ptr = first.as_ptr();
            assert_eq!(first.len(), IO_BUF);
            drop(first);
            let again = ReadBuf::take(IO_BUF);
            assert_eq!(
                again.as_ptr(),
                ptr,
                "the same allocation, not a fresh zeroed one"
            );
            drop(again);
            // A request whose pending bytes outgrow the usual size gets a bigger buffer, which
            // is not kept afterwards.
            let big = ReadBuf::take(IO_BUF * 4);
            assert_eq!(big.len(), IO_BUF * 4);
            drop(big);
            let next = ReadBuf::take(IO_BUF);
            assert_eq!(next.len(), IO_BUF);
            assert!(next.capacity() <= IO_BUF * 2, "{}", next.capacity());
        })
        .join()
        .unwrap();
    }
}

#[cfg(test)]
mod access_log_tests {
    #[test]
    fn presigned_signatures_are_redacted() {
        assert_eq!(
            super::loggable_query(
                "list-type=2&X-Amz-Signature=abc&x-amz-security-token=t&X-Amz-Credential=AK%2Fx"
            ),
            "list-type=2&X-Amz-Signature=REDACTED&x-amz-security-token=REDACTED&X-Amz-Credential=AK%2Fx"
        );
        assert_eq!(super::loggable_query(""), "");
    }
}
