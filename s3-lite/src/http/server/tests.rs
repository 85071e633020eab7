//! Unit tests of the server codec: framing, smuggling, limits, keep-alive, splits, encoder.

use super::*;
use crate::http::{BodyFraming, HttpError, Limits};

/// Decodes `wire` fed in pieces of `step` bytes; returns heads, bodies, and the final error.
fn run(
    wire: &[u8],
    step: usize,
    limits: Limits,
) -> (Vec<RequestHead>, Vec<Vec<u8>>, Option<RequestError>) {
    let mut dec = RequestDecoder::new(limits);
    let (mut heads, mut bodies) = (Vec::new(), Vec::new());
    let mut pending = Vec::new();
    let mut fed = 0;
    loop {
        let d = match dec.decode(&pending) {
            Ok(d) => d,
            Err(e) => return (heads, bodies, Some(e)),
        };
        match d.event {
            RequestEvent::NeedMore => {
                pending.clear();
                if fed >= wire.len() {
                    let err = dec.finish_on_eof().err();
                    return (heads, bodies, err);
                }
                let end = (fed + step).min(wire.len());
                pending.extend_from_slice(&wire[fed..end]);
                fed = end;
                continue;
            }
            RequestEvent::Head(h) => {
                heads.push(h);
                bodies.push(Vec::new());
            }
            RequestEvent::Body(b) => bodies.last_mut().unwrap().extend_from_slice(b),
            RequestEvent::End => {
                pending.drain(..d.consumed);
                if dec.reset_for_next().is_err() {
                    return (heads, bodies, None);
                }
                continue;
            }
        }
        pending.drain(..d.consumed);
    }
}

#[test]
fn pipelined_requests_every_split() {
    let wire = b"PUT /b/k?partNumber=1&uploadId=x HTTP/1.1\r\nHost: h:9\r\nContent-Length: 5\r\n\r\nhello\
GET /b/k2 HTTP/1.1\r\nhost: h\r\n\r\n\
POST /b/k HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-amz-checksum-crc32c: AAAAAA==\r\n\r\n";
    for step in 1..=wire.len() {
        let (heads, bodies, err) = run(wire, step, Limits::default());
        assert_eq!(err, None, "step {step}");
        assert_eq!(heads.len(), 3);
        assert_eq!(heads[0].method, "PUT");
        assert_eq!(heads[0].path, "/b/k");
        assert_eq!(heads[0].query, "partNumber=1&uploadId=x");
        assert_eq!(heads[0].framing, BodyFraming::Length(5));
        assert_eq!(heads[1].framing, BodyFraming::None);
        assert_eq!(heads[1].header("HOST"), Some("h"));
        assert_eq!(heads[2].framing, BodyFraming::Chunked);
        assert_eq!(bodies, vec![b"hello".to_vec(), Vec::new(), b"abc".to_vec()]);
    }
}

#[test]
fn trailers_and_continue() {
    let wire = b"PUT /b/k HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n";
    let mut dec = RequestDecoder::new(Limits::default());
    let d = dec.decode(wire).unwrap();
    let RequestEvent::Head(head) = d.event else {
        panic!("head expected")
    };
    assert!(head.expect_continue);
    assert_eq!(head.content_length(), Some(1));
    assert_eq!(dec.finish_on_eof(), Err(RequestError::UnexpectedEof));

    // No body: no 100-continue to send.
    let (heads, _, _) = run(
        b"GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n",
        100,
        Limits::default(),
    );
    assert!(!heads[0].expect_continue);

    let mut dec = RequestDecoder::new(Limits::default());
    let wire = b"PUT / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\n\r\n";
    let d = dec.decode(wire).unwrap();
    let n = d.consumed;
    let d = dec.decode(&wire[n..]).unwrap();
    assert_eq!(d.event, RequestEvent::End);
    assert_eq!(dec.trailers(), &[("A".to_owned(), "1".to_owned())]);
}

#[test]
fn smuggling_patterns_are_refused() {
    let cases: &[(&[u8], RequestError)] = &[
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            HttpError::ConflictingFraming.into(),
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            HttpError::DuplicateContentLength.into(),
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            HttpError::UnsupportedTransferEncoding.into(),
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            HttpError::UnsupportedTransferEncoding.into(),
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            HttpError::ConflictingFraming.into(),
        ),
        (
            b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\n",
            HttpError::InvalidContentLength.into(),
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            RequestError::DuplicateHost,
        ),
        (b"GET / HTTP/1.1\r\n\r\n", RequestError::MissingHost),
        (
            b"GET http://evil/ HTTP/1.1\r\nHost: h\r\n\r\n",
            RequestError::HostMismatch,
        ),
        (
            b"GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n",
            RequestError::InvalidTarget,
        ),
        (
            b"GET http://user@h/ HTTP/1.1\r\nHost: h\r\n\r\n",
            RequestError::InvalidTarget,
        ),
        (b"GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n", RequestError::InvalidTarget),
        (b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", RequestError::InvalidTarget),
        (b"GET b/k HTTP/1.1\r\nHost: h\r\n\r\n", RequestError::InvalidTarget),
        (
            b"GET / HTTP/1.1\r\nHost : h\r\n\r\n",
            HttpError::Malformed(crate::http::Malformed::HeaderName).into(),
        ),
    ];
    for (wire, expected) in cases {
        let (_, _, err) = run(wire, 7, Limits::default());
        assert_eq!(
            err.as_ref(),
            Some(expected),
            "{}",
            String::from_utf8_lossy(wire)
        );
    }
    assert_eq!(
        RequestError::from(HttpError::ConflictingFraming).status(),
        400
    );
    assert_eq!(
        RequestError::from(HttpError::UnsupportedTransferEncoding).status(),
        501
    );
    // HTTP/1.0 without Host is fine and not kept alive.
    let (heads, _, err) = run(b"GET /x HTTP/1.0\r\n\r\n", 3, Limits::default());
    assert_eq!(err, None);
    assert!(!heads[0].keep_alive);
}

#[test]
fn absolute_and_asterisk_form_targets_are_accepted() {
    // RFC 9112 §3.2.2: the AWS SDK for C++ sends absolute-form targets.
    let cases: &[(&[u8], &str, &str)] = &[
        (
            b"GET http://127.0.0.1:9000/b/k?partNumber=1 HTTP/1.1\r\nHost: 127.0.0.1:9000\r\n\r\n",
            "/b/k",
            "partNumber=1",
        ),
        (
            b"GET HTTP://H.example/b/k HTTP/1.1\r\nHost: h.EXAMPLE:80\r\n\r\n",
            "/b/k",
            "",
        ),
        (
            b"GET https://h:443?list-type=2 HTTP/1.1\r\nHost: h\r\n\r\n",
            "/",
            "list-type=2",
        ),
        (b"GET http://h HTTP/1.0\r\n\r\n", "/", ""),
        (b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", "*", ""),
    ];
    for (wire, path, query) in cases {
        for step in [1, 7, 500] {
            let (heads, _, err) = run(wire, step, Limits::default());
            assert_eq!(err, None, "{}", String::from_utf8_lossy(wire));
            assert_eq!(
                (heads[0].path.as_str(), heads[0].query.as_str()),
                (*path, *query)
            );
        }
    }
    // Another port than the Host's is another authority.
    let (_, _, err) = run(
        b"GET http://h:81/ HTTP/1.1\r\nHost: h\r\n\r\n",
        500,
        Limits::default(),
    );
    assert_eq!(err, Some(RequestError::HostMismatch));
    assert_eq!(RequestError::HostMismatch.status(), 400);
}

#[test]
fn limits_fire_at_the_same_byte_whatever_the_split() {
    let limits = Limits {
        max_head_bytes: 64,
        ..Limits::default()
    };
    let wire = format!(
        "GET / HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n",
        "a".repeat(100)
    );
    for step in [1, 5, 200] {
        let (_, _, err) = run(wire.as_bytes(), step, limits);
        assert_eq!(err, Some(HttpError::HeadTooLarge { limit: 64 }.into()));
        assert_eq!(err.unwrap().status(), 431);
    }
    let (_, _, err) = run(
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
        3,
        Limits::default(),
    );
    assert_eq!(err, Some(HttpError::ChunkSizeOverflow.into()));
}

#[test]
fn connection_close_and_eof() {
    let (heads, _, err) = run(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
        10,
        Limits::default(),
    );
    assert_eq!((heads.len(), err), (1, None), "no request after close");
    let (_, _, err) = run(
        b"PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 9\r\n\r\nabc",
        4,
        Limits::default(),
    );
    assert_eq!(err, Some(RequestError::UnexpectedEof));
    let mut dec = RequestDecoder::new(Limits::default());
    assert_eq!(dec.finish_on_eof(), Ok(()), "idle close is clean");
}

#[test]
fn body_slices_are_zero_copy() {
    let wire = b"PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nwxyz";
    let mut dec = RequestDecoder::new(Limits::default());
    let n = dec.decode(wire).unwrap().consumed;
    let d = dec.decode(&wire[n..]).unwrap();
    let RequestEvent::Body(b) = d.event else {
        panic!("body expected")
    };
    assert!(std::ptr::eq(b.as_ptr(), wire[n..].as_ptr()));
    assert_eq!(dec.decode(&[]).unwrap().event, RequestEvent::End);
    assert!(dec.is_reusable());
}

#[test]
fn response_encoder() {
    let h = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
    };
    let mut out = Vec::new();
    encode_response_head(
        200,
        "OK",
        &h(&[("ETag", "\"x\"")]),
        BodyFraming::Length(3),
        &mut out,
    )
    .unwrap();
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nETag: \"x\"\r\nContent-Length: 3\r\n\r\n"
    );
    out.clear();
    // HEAD: Content-Length names the object size, no body follows.
    encode_response_head(
        200,
        "OK",
        &h(&[("Content-Length", "42")]),
        BodyFraming::None,
        &mut out,
    )
    .unwrap();
    assert_eq!(out, b"HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n");
    out.clear();
    encode_response_head(200, "OK", &[], BodyFraming::Chunked, &mut out).unwrap();
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let mut out = Vec::new();
    let refused = [
        encode_response_head(200, "OK\r\nX: y", &[], BodyFraming::None, &mut out),
        encode_response_head(
            200,
            "OK",
            &h(&[("X", "a\r\nB: c")]),
            BodyFraming::None,
            &mut out,
        ),
        encode_response_head(
            200,
            "OK",
            &h(&[("Bad Name", "v")]),
            BodyFraming::None,
            &mut out,
        ),
        encode_response_head(
            200,
            "OK",
            &h(&[("Content-Length", "4")]),
            BodyFraming::Length(3),
            &mut out,
        ),
        encode_response_head(
            200,
            "OK",
            &h(&[("Transfer-Encoding", "chunked")]),
            BodyFraming::Chunked,
            &mut out,
        ),
        encode_response_head(
            204,
            "",
            &h(&[("Content-Length", "0")]),
            BodyFraming::None,
            &mut out,
        ),
        encode_response_head(99, "", &[], BodyFraming::None, &mut out),
    ];
    for r in refused {
        assert!(r.is_err());
    }
    assert!(out.is_empty(), "nothing written on error");
    assert_eq!(reason_phrase(416), "Range Not Satisfiable");
}
