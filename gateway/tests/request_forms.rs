//! Request-target forms other than origin-form, over a real socket to a running gateway
//! (issue 32): the absolute form the AWS SDK for C++ sends (Run:ai's model streamer), and
//! `OPTIONS *`.

#[path = "support/raw.rs"]
mod raw;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use raw::*;
use s3_lite::http::{BodyFraming, encode_request_head};

/// The wire bytes of `r` (signed as usual: SigV4 signs the path, not the request-target
/// form) with its request-target replaced by `target`.
fn with_target(r: &s3_lite::Request, target: &str) -> Vec<u8> {
    let mut wire = Vec::new();
    encode_request_head(r, BodyFraming::None, &mut wire).unwrap();
    let line_end = wire.windows(2).position(|w| w == b"\r\n").unwrap();
    let mut out = format!("{} {target} HTTP/1.1", r.method).into_bytes();
    out.extend_from_slice(&wire[line_end..]);
    out
}

fn send_raw(addr: SocketAddr, wire: &[u8], head_req: bool) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(wire).unwrap();
    read_response(&mut s, head_req)
}

#[test]
fn signed_absolute_form_get_returns_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/forms", "", &[], b"").status(), 200);
    let data = b"absolute-form bytes, as the AWS SDK for C++ asks for them";
    assert_eq!(
        call(a, "PUT", "/forms/dir/obj%201", "", &[], data).status(),
        200
    );

    // GET http://127.0.0.1:PORT/forms/dir/obj%201 HTTP/1.1, signed like any GET.
    let r = sign(req(a, "GET", "/forms/dir/obj%201", ""), b"", None);
    let got = send_raw(
        a,
        &with_target(&r, &format!("http://{a}/forms/dir/obj%201")),
        false,
    );
    assert_eq!(got.status(), 200, "{}", got.text());
    assert_eq!(got.body, data);

    // With a query (a ranged, listed request in absolute form).
    let r = sign(
        req(a, "GET", "/forms", "list-type=2&prefix=dir%2F"),
        b"",
        None,
    );
    let got = send_raw(
        a,
        &with_target(&r, &format!("http://{a}/forms?list-type=2&prefix=dir%2F")),
        false,
    );
    assert_eq!(got.status(), 200, "{}", got.text());
    assert!(
        got.text().contains("<Key>dir/obj 1</Key>"),
        "{}",
        got.text()
    );

    // An authority that is not the signed Host is refused, not served.
    let got = send_raw(
        a,
        &with_target(
            &r,
            "http://elsewhere.example:1/forms?list-type=2&prefix=dir%2F",
        ),
        false,
    );
    assert_eq!(got.status(), 400, "{}", got.text());

    // The signature still covers the path: a different absolute path fails authentication.
    let r = sign(req(a, "GET", "/forms/dir/obj%201", ""), b"", None);
    let got = send_raw(
        a,
        &with_target(&r, &format!("http://{a}/forms/other")),
        false,
    );
    assert_eq!(got.status(), 403, "{}", got.text());
    gw.shutdown();
}

#[test]
fn options_asterisk_names_the_methods() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path());
    let a = gw.local_addr();
    let wire = format!("OPTIONS * HTTP/1.1\r\nHost: {a}\r\nContent-Length: 0\r\n\r\n");
    let got = send_raw(a, wire.as_bytes(), false);
    assert_eq!(got.status(), 200, "{}", got.text());
    let allow = got.header("allow").unwrap_or_default().to_owned();
    for m in ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"] {
        assert!(allow.contains(m), "{allow}");
    }
    assert!(got.body.is_empty());

    // `*` names no resource: any other method with it is refused.
    let wire = format!("GET * HTTP/1.1\r\nHost: {a}\r\n\r\n");
    assert_eq!(send_raw(a, wire.as_bytes(), false).status(), 400);

    // The connection stays usable after OPTIONS * (keep-alive).
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("OPTIONS * HTTP/1.1\r\nHost: {a}\r\n\r\n").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut s, false).status(), 200);
    let r = sign(req(a, "GET", "/", ""), b"", None);
    assert_eq!(send_on(&mut s, &r, b"").status(), 200);
    gw.shutdown();
}
