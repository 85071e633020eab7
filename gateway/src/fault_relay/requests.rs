//! Client → server: requests are forwarded, answered with `503 SlowDown` or damaged.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use s3_lite::http::{BodyFraming, Limits, RequestDecoder, RequestEvent};

use super::ClientWriter;
use super::fault::{FaultKind, Faults};

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
pub(crate) fn requests(
    mut from: TcpStream,
    mut to: &TcpStream,
    writer: &ClientWriter,
    methods: &Mutex<std::collections::VecDeque<bool>>,
    faults: &Faults,
) {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut framed = !faults.raw();
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
                        faults.take(|k| (*k == FaultKind::SlowDown).then_some(())) == Some(());
                    if !answering && let Ok(mut m) = methods.lock() {
                        m.push_back(head.method.eq_ignore_ascii_case("HEAD"));
                    }
                }
                RequestEvent::Body(data) => {
                    let len = data.len() as u64;
                    let body_start = end - data.len();
                    if may_flip
                        && !answering
                        && let Some(at) = faults.take(|k| match *k {
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
                            faults.stats.flipped.fetch_add(1, Ordering::SeqCst);
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
