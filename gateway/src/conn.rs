//! One client connection: read requests with the sans-IO decoder, answer them, keep alive.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use s3_lite::http::BodyFraming;
use s3_lite::http::server::{
    CONTINUE_100, RequestDecoder, RequestEvent, RequestHead, encode_response_head, reason_phrase,
};

use crate::body::BodySource;
use crate::error::ApiError;
use crate::handler::{self, Respond};
use crate::server::Shared;
use crate::time::{http_date, now_secs};

/// Read buffer per connection (counted against `max_buffered_bytes`).
pub const IO_BUF: usize = 256 * 1024;
/// A request body left unread by the handler is drained (to keep the connection) up to this.
const MAX_DRAIN: u64 = 8 << 20;
/// How often an idle keep-alive connection checks for shutdown and for queued connections.
const IDLE_SLICE: Duration = Duration::from_millis(100);

struct Reader {
    stream: TcpStream,
    buf: Vec<u8>,
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
                    if self.reader.fill()? == 0 {
                        return Err(std::io::Error::new(
                            ErrorKind::UnexpectedEof,
                            "client closed inside the body",
                        ));
                    }
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
        headers.push(("x-amz-request-id".into(), self.request_id.to_owned()));
        headers.push(("x-amz-id-2".into(), self.request_id.to_owned()));
        headers.push(("Date".into(), http_date(now_secs())));
        headers.push(("Server".into(), "hipobj-gateway".into()));
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

/// Answers a connection the gateway cannot take (`503 SlowDown`) and closes it.
pub fn reject(mut stream: TcpStream, request_id: &str) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    // Read what the client sent first (bounded) so closing does not reset the connection
    // before the answer is read.
    let mut scratch = [0u8; 4096];
    let _ = stream.read(&mut scratch);
    let err = ApiError::slow_down();
    let body = err.to_xml("/", request_id);
    let headers = vec![
        ("Content-Type".to_owned(), "application/xml".to_owned()),
        ("x-amz-request-id".to_owned(), request_id.to_owned()),
        ("Retry-After".to_owned(), "1".to_owned()),
        ("Connection".to_owned(), "close".to_owned()),
    ];
    let mut out = Vec::new();
    if encode_response_head(
        503,
        "Slow Down",
        &headers,
        BodyFraming::Length(body.len() as u64),
        &mut out,
    )
    .is_ok()
    {
        out.extend_from_slice(&body);
        let _ = stream.write_all(&out);
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.read(&mut scratch);
}

/// Waits for the next request head. `None`: the connection ends (EOF, idle timeout,
/// shutdown, pressure, or an error already answered).
fn read_head(
    shared: &Shared,
    r: &mut Reader,
    dec: &mut RequestDecoder,
    w: &mut TcpStream,
) -> Option<RequestHead> {
    let idle_since = Instant::now();
    loop {
        let input = r.buf.get(r.start..r.end).unwrap_or_default();
        match dec.decode(input) {
            Ok(d) => {
                r.start += d.consumed;
                match d.event {
                    RequestEvent::Head(h) => return Some(h),
                    RequestEvent::NeedMore => {}
                    _ => return None,
                }
            }
            Err(e) => {
                let status = e.status();
                let err = ApiError::new(
                    status,
                    if status == 431 {
                        "RequestHeaderSectionTooLarge"
                    } else {
                        "BadRequest"
                    },
                    e.to_string(),
                );
                let id = shared.request_id();
                let state = Cell::new(BodyState {
                    done: true,
                    continue_sent: false,
                });
                let mut out = Responder {
                    writer: w,
                    request_id: &id,
                    keep_alive: false,
                    started: false,
                    drainable: false,
                    state: &state,
                    is_head: false,
                    status: 0,
                };
                let _ = write_error(&mut out, &err, "/");
                return None;
            }
        }
        let started = dec.has_started();
        let timeout = if started {
            shared.config.io_timeout
        } else {
            IDLE_SLICE
        };
        let _ = r.stream.set_read_timeout(Some(timeout));
        match r.fill() {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e)
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) && !started =>
            {
                if shared.is_shutting_down()
                    || shared.has_queued()
                    || idle_since.elapsed() >= shared.config.idle_timeout
                {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

/// Serves one connection until it closes.
pub fn serve(shared: &Shared, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(shared.config.io_timeout));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = Reader {
        stream,
        buf: vec![0; IO_BUF],
        start: 0,
        end: 0,
    };
    let mut dec = RequestDecoder::new(shared.config.http_limits);
    loop {
        let Some(head) = read_head(shared, &mut reader, &mut dec, &mut writer) else {
            return;
        };
        let _ = reader
            .stream
            .set_read_timeout(Some(shared.config.io_timeout));
        let request_id = shared.request_id();
        let state = Cell::new(BodyState {
            done: dec.is_done(),
            continue_sent: false,
        });
        let drainable =
            !head.expect_continue && head.content_length().is_some_and(|n| n <= MAX_DRAIN);
        let keep_alive = head.keep_alive && !shared.is_shutting_down();
        let resource = resource_of(&head);
        let (keep, fatal) = {
            let mut body = ConnBody {
                reader: &mut reader,
                dec: &mut dec,
                writer: &mut writer,
                expect_continue: head.expect_continue,
                state: &state,
            };
            let mut w2 = match body.writer.try_clone() {
                Ok(w) => w,
                Err(_) => return,
            };
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
            let started = std::time::Instant::now();
            let result = handler::handle(shared, &head, &mut body, &mut out);
            let fatal = match result {
                Ok(()) => false,
                Err(e) if !out.started => write_error(&mut out, &e, &resource).is_err(),
                Err(_) => true, // the head is out: the only honest signal left is closing
            };
            // The access log: one line per request (`hipobj serve -v` shows it on stderr).
            tracing::info!(
                target: "hipobj::access",
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
                return;
            }
            (out.keep_alive, fatal)
        };
        if fatal || !keep {
            let _ = writer.flush();
            let _ = writer.shutdown(std::net::Shutdown::Write);
            return;
        }
        // Drain whatever the handler left unread, then take the next request.
        if !state.get().done {
            let mut body = ConnBody {
                reader: &mut reader,
                dec: &mut dec,
                writer: &mut writer,
                expect_continue: false,
                state: &state,
            };
            loop {
                match body.next_chunk() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
        if dec.reset_for_next().is_err() {
            return;
        }
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
