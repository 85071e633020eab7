//! A TLS ClientHello sent to the gateway's plain-HTTP port is answered at once (400 naming
//! `http://`, then close), not after the head timeout; our clients (the blocking driver and the
//! engine) turn that answer into a clear "plain HTTP, not TLS" error without waiting or
//! retrying.

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use engine::RegisterOptions;
use raw::{ACCESS, SECRET};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, ErrorClass, ErrorCode};
use s3_lite::net::stream::{Stream, Timeouts};
use s3_lite::net::tls::{CertificateProblem, TlsClientConfig, TlsOptions, client_config};

/// The head timeout is long, so an answer that waits for it fails every time limit below.
const HEAD_TIMEOUT: Duration = Duration::from_secs(15);
const AT_ONCE: Duration = Duration::from_secs(3);

fn gateway(root: &std::path::Path) -> hipobj_gateway::RunningGateway {
    hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .head_timeout(HEAD_TIMEOUT)
        .start()
        .expect("gateway starts")
}

fn insecure() -> std::sync::Arc<TlsClientConfig> {
    client_config(&TlsOptions {
        insecure_skip_verify: true,
        ..Default::default()
    })
    .unwrap()
}

/// The first bytes of a TLS 1.2/1.3 ClientHello record (type 0x16, version 0x0301, length),
/// then the start of the handshake message: the 0x16 0x03 a plain port must recognise.
const HELLO_START: &[u8] = &[
    0x16, 0x03, 0x01, 0x00, 0xf4, 0x01, 0x00, 0x00, 0xf0, 0x03, 0x03,
];

fn read_all_within(s: &mut TcpStream, limit: Duration) -> String {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_client_hello_on_the_plain_port_is_answered_400_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let a = gw.local_addr();
    for hello in [HELLO_START, &HELLO_START[..1], &HELLO_START[..2]] {
        let started = Instant::now();
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(hello).unwrap();
        let answer = read_all_within(&mut s, HEAD_TIMEOUT + Duration::from_secs(5));
        let took = started.elapsed();
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "{} hello bytes: {answer:?}",
            hello.len()
        );
        assert!(answer.contains("plain HTTP"), "{answer}");
        assert!(answer.contains("http://"), "{answer}");
        assert!(took < AT_ONCE, "answered after {took:?}, not at once");
    }
    // Normal requests are still served.
    assert_eq!(raw::call(a, "PUT", "/tls-bkt", "", &[], b"").status(), 200);
    gw.shutdown();
}

#[test]
fn a_real_handshake_fails_at_once_with_a_plain_http_error() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let a = gw.local_addr();
    let started = Instant::now();
    let connected = Stream::connect(
        "127.0.0.1",
        a.port(),
        Some(&insecure()),
        Timeouts::default(),
    );
    let Err(err) = connected else {
        panic!("a TLS session with a plain-HTTP port");
    };
    let took = started.elapsed();
    assert!(took < AT_ONCE, "the handshake failed after {took:?}");
    assert!(
        err.to_string().contains("is the endpoint http://?"),
        "{err}"
    );
    gw.shutdown();
}

fn engine_over_https(a: SocketAddr) -> engine::Engine {
    rig::engine_builder(a)
        .endpoint_url(format!("https://127.0.0.1:{}", a.port()))
        .insecure_skip_tls_verify(true)
        .fabric(engine::Fabric::Http)
        .build()
        .unwrap()
}

#[test]
fn the_engine_names_a_plain_http_answer_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let a = gw.local_addr();
    assert_eq!(raw::call(a, "PUT", "/tls-bkt", "", &[], b"").status(), 200);
    assert_eq!(
        raw::call(a, "PUT", "/tls-bkt/obj", "", &[], &[7u8; 8192]).status(),
        200
    );
    let engine = engine_over_https(a);
    let obj = engine.object("tls-bkt", "obj").unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    let started = Instant::now();
    q.push(&RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096)).build())
        .unwrap();
    assert_eq!(q.wait(1, Some(HEAD_TIMEOUT * 3)), 1);
    let took = started.elapsed();
    let c = q.completion().next().unwrap();
    assert!(!c.is_ok(), "a plain-HTTP answer is no success");
    assert!(took < AT_ONCE, "the op failed after {took:?}");
    assert_eq!(c.error_code(), Some(ErrorCode::AccessDenied));
    assert_eq!(c.error_class(), Some(ErrorClass::Transport));
    let problem = engine.tls_failure().expect("the mismatch is named");
    assert_eq!(problem, CertificateProblem::PlainHttpAnswer);
    assert!(
        problem.to_string().contains("is the endpoint http://?"),
        "{problem}"
    );
    gw.shutdown();
}
