//! Server → client: responses are forwarded with latency, flipped bytes, a lowered or
//! rewritten header, or cut after a byte count (reset, FIN or stall); raw streams (no HTTP)
//! with a flipped byte or a cut.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use s3_lite::http::{BodyFraming, Event, Limits, ResponseDecoder};

use super::fault::{FaultKind, Faults};
use super::{ClientWriter, reset};

/// Per-connection state of the response direction.
struct ResponseState<'f> {
    /// The relay's faults.
    faults: &'f Faults,
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
pub(crate) fn responses(
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
        faults,
        sent: 0,
        cut: faults.take(|k| match *k {
            FaultKind::ResetAfter(n) | FaultKind::TruncateAfter(n) | FaultKind::StallAfter(n) => {
                Some((k.clone(), n))
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
    let mut framed = !faults.raw();
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
                    if let Some(d) = faults.take(|k| match *k {
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
                        let of_length = match head.framing {
                            BodyFraming::Length(n) => faults.body_of_length(n),
                            _ => None,
                        };
                        st.flip = of_length.or_else(|| {
                            faults.take(|k| match *k {
                                FaultKind::Flip(at) if body_len.is_none_or(|l| at < l) => Some(at),
                                FaultKind::FlipEvery(every) if nth.is_multiple_of(every) => Some(0),
                                _ => None,
                            })
                        });
                        if let BodyFraming::Length(cl) = head.framing
                            && let Some(k) = faults.take(|k| match *k {
                                FaultKind::ContentLengthMinus(k) => Some(k),
                                _ => None,
                            })
                        {
                            let lowered = cl.saturating_sub(k);
                            head_bytes = rewrite_header(&head_bytes, "content-length", &lowered);
                            st.body_left = Some(lowered);
                        }
                    }
                    // The named length (a HEAD answer's too), lowered; the body still comes
                    // whole, framed by the real length.
                    if let Some(named) = head.content_length()
                        && let Some(by) = faults.take(|k| match *k {
                            FaultKind::LowerContentLength(by) if named > by => Some(by),
                            _ => None,
                        })
                    {
                        head_bytes = rewrite_header(&head_bytes, "content-length", &(named - by));
                    }
                    let rewrites = faults.take_each(|k| match k {
                        FaultKind::RewriteHeader { name, value }
                            if head
                                .headers
                                .iter()
                                .any(|(n, _)| n.eq_ignore_ascii_case(name)) =>
                        {
                            Some((name.clone(), value.clone()))
                        }
                        _ => None,
                    });
                    for (name, value) in rewrites {
                        head_bytes = rewrite_header(&head_bytes, &name, &value);
                    }
                    let dropped = faults.take_each(|k| match k {
                        FaultKind::DropHeader(name) => Some(name.clone()),
                        _ => None,
                    });
                    if !dropped.is_empty() {
                        head_bytes = drop_headers(&head_bytes, &dropped);
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
                            faults.stats.flipped.fetch_add(1, Ordering::SeqCst);
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

/// `head` without the fields named in `names` (case-insensitive).
fn drop_headers(head: &[u8], names: &[String]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    text.split_inclusive("\r\n")
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(n, _)| names.iter().any(|d| d.eq_ignore_ascii_case(n)))
        })
        .collect::<String>()
        .into_bytes()
}

/// `head` with the value of every field `field` (case-insensitive) replaced by `value`.
fn rewrite_header(head: &[u8], field: &str, value: &dyn std::fmt::Display) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive("\r\n") {
        match line.split_once(':') {
            Some((name, _)) if name.eq_ignore_ascii_case(field) => {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            _ => out.push_str(line),
        }
    }
    out.into_bytes()
}

/// Sends `bytes` to the client, applying this connection's byte-count fault and any
/// `flip-stream` fault whose offset (in this connection's stream) they hold.
fn send(writer: &ClientWriter, bytes: &[u8], st: &mut ResponseState) -> Sent {
    if bytes.is_empty() {
        return Sent::Go;
    }
    let room = match st.cut {
        Some((_, limit)) => limit.saturating_sub(st.sent),
        None => u64::MAX,
    };
    let n = usize::try_from(room.min(bytes.len() as u64)).unwrap_or(0);
    // A stream byte is flipped (and counted) only where it is actually sent.
    let (from, to) = (st.sent, st.sent + n as u64);
    let flipped;
    let bytes = match st.faults.take(|k| match *k {
        FaultKind::FlipStream(at) if (from..to).contains(&at) => Some(at),
        _ => None,
    }) {
        Some(at) => {
            let mut copy = bytes.to_vec();
            if let Some(b) = copy.get_mut(usize::try_from(at - from).unwrap_or(usize::MAX)) {
                *b ^= 0xff;
                st.faults.stats.flipped.fetch_add(1, Ordering::SeqCst);
            }
            flipped = copy;
            &flipped[..]
        }
        None => bytes,
    };
    let Ok(mut w) = writer.lock() else {
        return Sent::Stop;
    };
    if w.write_all(bytes.get(..n).unwrap_or_default()).is_err() {
        return Sent::Stop;
    }
    st.sent += n as u64;
    if n == bytes.len() {
        return Sent::Go;
    }
    let _ = w.flush();
    match st.cut.as_ref().map(|(k, _)| k) {
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
