//! Keep-alive reuse: a pooled connection the server has closed is probed and dropped before
//! it carries a request, so the next op dials fresh instead of spending an attempt (or a free
//! retry) on a dead socket.
//!
//! The peer (a purpose-built HTTP/1.1 server) answers the first HEAD of its first connection
//! and closes that connection in the same breath (answer and FIN in one TCP segment), then
//! watches whether another request arrives on it. Two HEADs are queued together on one worker
//! with one connection, so the second starts the moment the first's connection goes idle —
//! before the worker has polled the socket again. The FIN arrived with the answer, so no
//! later readiness event will report it: before the probe the engine wrote the second request
//! to the closed connection and then waited for an answer that could never come, until the
//! attempt timeout (the test saw no completion within 10 s).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use engine::{Engine, Placement};
use ring_api::opcode::Head;
use s3_lite::credentials::Credentials;

/// How long the peer watches its closed connection for a late request.
const WATCH: Duration = Duration::from_millis(300);

/// The object size every HEAD answer names.
const SIZE: u64 = 12_345;

struct Peer {
    addr: SocketAddr,
    /// Requests that reached the first connection after it was closed by the peer.
    late_on_closed: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
}

/// Reads one request head (HEAD: no body); `false` at the end of the stream.
fn read_head(s: &mut TcpStream) -> bool {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => got.push(b[0]),
            _ => return false,
        }
    }
    true
}

const ANSWER: &str = "HTTP/1.1 200 OK\r\nContent-Length: 12345\r\nETag: \"e\"\r\n\r\n";

fn peer() -> Peer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let late = Arc::new(AtomicUsize::new(0));
    let conns = Arc::new(AtomicUsize::new(0));
    let (l, c) = (late.clone(), conns.clone());
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            let l = l.clone();
            std::thread::spawn(move || {
                if first {
                    if !read_head(&mut s) {
                        return;
                    }
                    // Corked, the answer waits in the send queue and the FIN is tacked onto
                    // it: answer and end of stream leave in one segment, so the engine can
                    // never read the one without the other being there.
                    socket2::SockRef::from(&s).set_tcp_cork(true).unwrap();
                    let _ = s.write_all(ANSWER.as_bytes());
                    let _ = s.shutdown(Shutdown::Write);
                    // Anything more on this connection was sent to a closed server.
                    let _ = s.set_read_timeout(Some(WATCH));
                    if read_head(&mut s) {
                        l.fetch_add(1, Ordering::SeqCst);
                    }
                    return;
                }
                while read_head(&mut s) {
                    if s.write_all(ANSWER.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Peer {
        addr,
        late_on_closed: late,
        connections: conns,
    }
}

/// Runs the two HEADs against a fresh peer; whether the second was written to the
/// connection the peer had closed.
fn round() -> bool {
    let p = peer();
    let engine = Engine::builder()
        .endpoint_url(format!("http://{}", p.addr))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .connections_per_worker(1)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "k").unwrap();
    let mut q = engine.queue(8).unwrap();
    q.push(&Head::new(obj).user_data(1).build()).unwrap();
    q.push(&Head::new(obj).user_data(2).build()).unwrap();
    let mut done = Vec::new();
    while done.len() < 2 {
        assert!(
            q.wait(1, Some(Duration::from_secs(10))) >= 1,
            "no completion within 10 s"
        );
        done.extend(q.completion());
    }
    // Neither op fails or spends a counted attempt, whichever way the FIN raced.
    for c in &done {
        assert!(c.is_ok(), "{:?}: {:?}", c.user_data(), c.error_code());
        assert_eq!(c.aux(), SIZE);
        assert!(!c.retried());
    }
    // Let the peer's watch on the closed connection end.
    std::thread::sleep(WATCH + Duration::from_millis(100));
    assert_eq!(p.connections.load(Ordering::SeqCst), 2);
    p.late_on_closed.load(Ordering::SeqCst) > 0
}

/// Rounds of the scenario (each a fresh peer and engine).
const ROUNDS: usize = 5;

#[test]
fn a_pooled_connection_closed_by_the_server_is_not_reused() {
    let late = (0..ROUNDS).filter(|_| round()).count();
    assert_eq!(
        late, 0,
        "{late} of {ROUNDS} rounds wrote the second HEAD to the connection the server had closed"
    );
}
