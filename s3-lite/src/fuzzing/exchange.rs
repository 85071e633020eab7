//! Fuzz body for the exchange machine ([`crate::http::Exchange`]).
//!
//! The first byte picks the request (bit 0: `Expect: 100-continue`; bit 1: HEAD instead of
//! PUT; bit 2: a chunked body instead of `Content-Length`; bits 3..: body length 0..=31); the
//! rest is what the server sends. A driver writes whatever the machine offers between reads
//! and feeds the server's bytes in one piece, byte by byte and in derived splits. Asserted:
//! - the response side (heads, body, trailers, error) is identical for every split and equal
//!   to what a bare [`ResponseDecoder`] makes of the same bytes (the machine adds no parsing
//!   of its own that could disagree with the decoder);
//! - a body never goes out before `100 Continue` on an `Expect` request, never beyond its
//!   declared length, and never after a final answer;
//! - reuse is only offered for a complete response to a completely sent request.

use super::http::{derived_splits, tight_limits};
use crate::Request;
use crate::http::{
    BodyFraming, Event, Exchange, HttpError, Limits, Output, ResponseDecoder, ResponseHead,
};

/// Everything observable on the response side.
#[derive(Debug, PartialEq)]
struct Seen {
    heads: Vec<ResponseHead>,
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
    result: Result<(), HttpError>,
}

struct Config {
    expect: bool,
    head: bool,
    chunked: bool,
    len: u64,
}

impl Config {
    fn of(byte: u8) -> Self {
        Self {
            expect: byte & 1 != 0,
            head: byte & 2 != 0,
            chunked: byte & 4 != 0,
            len: u64::from(byte >> 3),
        }
    }

    fn request(&self) -> (Request, BodyFraming) {
        let mut r = Request::new(if self.head { "HEAD" } else { "PUT" }, "/b/k");
        r.add_header("Host", "h");
        if self.expect {
            r.add_header("Expect", "100-continue");
        }
        let framing = match (self.head, self.chunked) {
            (true, _) => BodyFraming::None,
            (false, true) => BodyFraming::Chunked,
            (false, false) => BodyFraming::Length(self.len),
        };
        (r, framing)
    }
}

/// Writes what the machine offers, checking the request-side rules.
fn write_all(ex: &mut Exchange, cfg: &Config, head_seen: bool, chunks_done: &mut bool) {
    loop {
        match ex.output() {
            Output::Bytes(b) => {
                let n = b.len();
                ex.wrote(n);
            }
            Output::Body { remaining } => {
                assert!(
                    !cfg.expect || ex.continue_seen(),
                    "body before 100 Continue"
                );
                assert!(!head_seen, "body offered after a final answer");
                assert!(remaining <= cfg.len, "more body offered than declared");
                let r = ex.body_written(remaining);
                assert!(r.is_ok(), "offered body refused: {r:?}");
            }
            Output::Chunks => {
                assert!(
                    !cfg.expect || ex.continue_seen(),
                    "chunks before 100 Continue"
                );
                assert!(!head_seen, "chunks offered after a final answer");
                assert!(!*chunks_done, "chunks offered after the last chunk");
                let piece = vec![b'x'; usize::try_from(cfg.len).unwrap_or(0)];
                let r = ex.push_chunk(&piece).and_then(|()| ex.end_chunks(&[]));
                assert!(r.is_ok(), "offered chunks refused: {r:?}");
                *chunks_done = true;
            }
            Output::AwaitContinue | Output::Done => return,
        }
    }
}

fn drive(data: &[u8], cfg: &Config, pieces: &[usize], limits: Limits) -> Seen {
    let (req, framing) = cfg.request();
    let mut ex = Exchange::new(limits);
    let r = ex.request(&req, framing);
    assert!(r.is_ok(), "request refused: {r:?}");
    let mut seen = Seen {
        heads: Vec::new(),
        body: Vec::new(),
        trailers: Vec::new(),
        result: Ok(()),
    };
    let (mut pending, mut input) = (Vec::new(), super::Pieces::new(data, pieces));
    let mut chunks_done = false;
    loop {
        write_all(&mut ex, cfg, !seen.heads.is_empty(), &mut chunks_done);
        let d = match ex.receive(&pending) {
            Ok(d) => d,
            Err(e) => {
                assert_eq!(ex.receive(b""), Err(e.clone()), "errors are sticky");
                assert!(!ex.is_reusable());
                seen.result = Err(e);
                return seen;
            }
        };
        assert!(d.consumed <= pending.len());
        match d.event {
            Event::NeedMore => {
                pending.clear();
                if !input.next_into(&mut pending)
                    && let Err(e) = ex.finish_on_eof()
                {
                    seen.result = Err(e);
                    return seen;
                }
                continue;
            }
            Event::Head(h) => {
                if !ex.request_sent() {
                    assert_eq!(
                        ex.output(),
                        Output::Done,
                        "a final answer stops the request"
                    );
                }
                seen.heads.push(h);
            }
            Event::Body(b) => seen.body.extend_from_slice(b),
            Event::End => {
                seen.trailers = ex.trailers().to_vec();
                if ex.is_reusable() {
                    assert!(ex.request_sent() && ex.is_complete());
                }
                if framing == BodyFraming::None || framing == BodyFraming::Length(0) {
                    assert!(ex.request_sent(), "a bodiless request is always sent");
                }
                return seen;
            }
        }
        pending.drain(..d.consumed);
    }
}

/// What a bare decoder makes of the same bytes (one response).
fn reference(data: &[u8], cfg: &Config, limits: Limits) -> Seen {
    let mut dec = ResponseDecoder::new(limits, cfg.head);
    let mut seen = Seen {
        heads: Vec::new(),
        body: Vec::new(),
        trailers: Vec::new(),
        result: Ok(()),
    };
    let mut pos = 0;
    let mut eof = false;
    loop {
        let d = match dec.decode(data.get(pos..).unwrap_or_default()) {
            Ok(d) => d,
            Err(e) => {
                seen.result = Err(e);
                return seen;
            }
        };
        pos += d.consumed;
        match d.event {
            Event::NeedMore if eof => return seen,
            Event::NeedMore => {
                eof = true;
                if let Err(e) = dec.finish_on_eof() {
                    seen.result = Err(e);
                    return seen;
                }
            }
            Event::Head(h) => seen.heads.push(h),
            Event::Body(b) => seen.body.extend_from_slice(b),
            Event::End => {
                seen.trailers = dec.trailers().to_vec();
                return seen;
            }
        }
    }
}

/// Fuzz body: see the module docs.
pub fn exchange(data: &[u8]) {
    let Some((&first, server)) = data.split_first() else {
        return;
    };
    let cfg = Config::of(first);
    let splits = derived_splits(server);
    for limits in [Limits::default(), tight_limits()] {
        let whole = drive(server, &cfg, &[server.len().max(1)], limits);
        let bytewise = drive(server, &cfg, &vec![1; server.len()], limits);
        let split = drive(server, &cfg, &splits, limits);
        assert_eq!(whole, bytewise, "one piece vs byte by byte");
        assert_eq!(whole, split, "one piece vs derived splits");
        assert_eq!(
            whole,
            reference(server, &cfg, limits),
            "exchange vs bare decoder"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_seeds() {
        for (name, data) in crate::fuzzing::seeds("exchange", 4) {
            println!("{name}");
            exchange(&data);
        }
    }

    /// The decoder's own seeds (hostile heads, chunked trailers, 1xx, until-close) under every
    /// request shape.
    #[test]
    fn response_head_seeds_under_every_request_shape() {
        for (_, data) in crate::fuzzing::seeds("response_head", 3) {
            for first in [0u8, 1, 2, 3, 4, 5, 0x29, 0x2d, 0xff] {
                let mut input = vec![first];
                input.extend_from_slice(&data);
                exchange(&input);
            }
        }
    }
}
