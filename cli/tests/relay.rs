//! `hipobj debug relay` (cli/src/relay.rs) between the library client and s3s-fs: each fault
//! does what it says on one response or request of a keep-alive connection, and a relay
//! without faults is byte-faithful.

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::io::Cursor;
use std::time::{Duration, Instant};

use hipobj_cli::client::{ClientError, ClientSettings, S3Client};
use hipobj_cli::net::tls::TlsOptions;
use hipobj_cli::net::transport::Timeouts;
use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};
use s3_lite::credentials::Credentials;
use s3_lite::s3::{ByteRange, Endpoint};
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

const BUCKET: &str = "relay-bucket";

fn client(url: &str) -> S3Client {
    S3Client::new(ClientSettings {
        endpoint: Endpoint::parse(url).unwrap(),
        credentials: Credentials::new(ACCESS_KEY, SECRET_KEY),
        region: "us-east-1".into(),
        tls: TlsOptions::default(),
        timeouts: Timeouts {
            connect: Duration::from_secs(2),
            io: Duration::from_secs(2),
            expect_continue: Duration::from_secs(1),
        },
    })
    .unwrap()
    .with_retry(engine::RetryPolicy::none())
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// s3s-fs with `obj` (64 KiB) stored, and a relay in front of it with `faults`.
fn rig(faults: Vec<Fault>) -> (S3sFs, Relay, Vec<u8>) {
    let server = S3sFs::start();
    server.create_bucket_dir(BUCKET);
    let bytes = data(64 * 1024);
    server.put_file(BUCKET, "obj", &bytes);
    let to = server
        .endpoint_url()
        .trim_start_matches("http://")
        .to_owned();
    let relay = Relay::start("127.0.0.1:0", &to, faults).unwrap();
    (server, relay, bytes)
}

fn range_get(c: &mut S3Client, a: u64, b: u64) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    c.get(
        BUCKET,
        "obj",
        Some(ByteRange::Inclusive(a, b)),
        &mut out,
        &mut |_| {},
    )?;
    Ok(out)
}

#[test]
fn fault_specs_parse_and_bad_ones_are_refused() {
    assert_eq!(
        Fault::parse("flip=7").unwrap(),
        Fault::always(FaultKind::Flip(7))
    );
    assert_eq!(
        Fault::parse("slowdown,times=2").unwrap(),
        Fault::times(FaultKind::SlowDown, 2)
    );
    assert_eq!(
        Fault::parse("latency=150").unwrap(),
        Fault::always(FaultKind::Latency(Duration::from_millis(150)))
    );
    assert_eq!(
        Fault::parse("lower-content-length=1000,times=1").unwrap(),
        Fault::times(FaultKind::LowerContentLength(1000), 1)
    );
    assert_eq!(
        Fault::parse("rewrite-header=x-amz-rdma-soft-addr:127.0.0.1:9").unwrap(),
        Fault::always(FaultKind::RewriteHeader {
            name: "x-amz-rdma-soft-addr".into(),
            value: "127.0.0.1:9".into()
        })
    );
    assert_eq!(
        Fault::parse("flip-bodies-of-length=100:3:2").unwrap(),
        Fault::always(FaultKind::FlipBodiesOfLength {
            len: 100,
            at: 3,
            every: 2
        })
    );
    assert_eq!(
        Fault::parse("flip-stream=70000,times=1").unwrap(),
        Fault::times(FaultKind::FlipStream(70_000), 1)
    );
    for bad in [
        "flip",
        "flip=-1",
        "nonsense=3",
        "slowdown=3",
        "reset-after=1,times=x",
        "rewrite-header=etag",
        "rewrite-header=etag:a\r\nx: y",
        "flip-bodies-of-length=10:10:1",
        "flip-bodies-of-length=10:3",
        "flip-stream",
    ] {
        assert!(Fault::parse(bad).is_err(), "{bad} must be refused");
    }
}

#[test]
fn without_faults_the_relay_is_faithful_and_keeps_connections_alive() {
    let (_server, relay, bytes) = rig(Vec::new());
    let mut c = client(&relay.url());
    let upload = data(300_000);
    c.put_single(
        BUCKET,
        "up",
        &mut Cursor::new(&upload),
        upload.len() as u64,
        &mut |_| {},
    )
    .unwrap();
    let mut back = Vec::new();
    c.get(BUCKET, "up", None, &mut back, &mut |_| {}).unwrap();
    assert_eq!(back, upload);
    assert_eq!(range_get(&mut c, 10, 20_000).unwrap(), bytes[10..=20_000]);
    assert_eq!(
        c.head(BUCKET, "obj").unwrap().content_length,
        Some(64 * 1024)
    );
    let stats = relay.stats();
    assert_eq!(
        stats.connections.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert_eq!(stats.responses.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert_eq!(stats.faults(), 0);
}

#[test]
fn flip_changes_exactly_one_body_byte_of_each_response() {
    let (_server, relay, bytes) = rig(vec![Fault::times(FaultKind::Flip(100), 1)]);
    let mut c = client(&relay.url());
    let got = range_get(&mut c, 0, 4095).unwrap();
    let diffs: Vec<usize> = (0..got.len()).filter(|&i| got[i] != bytes[i]).collect();
    assert_eq!(diffs, vec![100]);
    assert_eq!(got[100], bytes[100] ^ 0xff);
    // `times=1`: the next response is untouched.
    assert_eq!(range_get(&mut c, 0, 4095).unwrap(), bytes[..4096]);
    assert_eq!(relay.stats().faults(), 1);
}

#[test]
fn flip_every_nth_response() {
    let (_server, relay, bytes) = rig(vec![Fault::always(FaultKind::FlipEvery(3))]);
    let mut c = client(&relay.url());
    let flipped: Vec<bool> = (0..6)
        .map(|_| range_get(&mut c, 0, 99).unwrap() != bytes[..100])
        .collect();
    assert_eq!(flipped, [false, false, true, false, false, true]);
}

#[test]
fn content_length_minus_shortens_the_response() {
    let (_server, relay, _bytes) = rig(vec![Fault::always(FaultKind::ContentLengthMinus(1000))]);
    let mut c = client(&relay.url());
    // Content-Range still says 10,000 bytes; 9,000 arrive.
    let err = range_get(&mut c, 0, 9999).unwrap_err();
    assert!(
        matches!(err, ClientError::WrongLength(_)),
        "expected a length error, got {err}"
    );
    assert_eq!(relay.stats().faults(), 1);
}

#[test]
fn reset_truncate_and_stall_end_the_exchange() {
    for (kind, want) in [
        (FaultKind::ResetAfter(0), "reset"),
        (FaultKind::TruncateAfter(200), "truncate"),
        (FaultKind::StallAfter(300), "stall"),
    ] {
        let (_server, relay, _bytes) = rig(vec![Fault::always(kind)]);
        let mut c = client(&relay.url());
        let started = Instant::now();
        let err = range_get(&mut c, 0, 9999).unwrap_err();
        assert!(
            matches!(err, ClientError::Exchange(_)),
            "{want}: expected a transport error, got {err}"
        );
        // The stall ends at the client's 2 s read timeout, nothing else waits.
        assert!(started.elapsed() < Duration::from_secs(10), "{want} hung");
        assert!(relay.stats().faults() >= 1, "{want} never applied");
    }
}

#[test]
fn slowdown_answers_the_first_requests_itself() {
    let (_server, relay, bytes) = rig(vec![Fault::times(FaultKind::SlowDown, 1)]);
    let mut c = client(&relay.url());
    match range_get(&mut c, 0, 99).unwrap_err() {
        ClientError::S3(e) => {
            assert_eq!((e.status, e.code.as_str()), (503, "SlowDown"));
        }
        other => panic!("expected SlowDown, got {other}"),
    }
    assert_eq!(range_get(&mut c, 0, 99).unwrap(), bytes[..100]);
    assert_eq!(
        relay
            .stats()
            .slowdowns
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[test]
fn flip_request_damages_the_uploaded_body() {
    let (server, relay, _bytes) = rig(vec![Fault::times(FaultKind::FlipRequest(5000), 1)]);
    let mut c = client(&relay.url());
    let upload = data(100_000);
    // The single PUT carries its CRC64NVME: s3s-fs refuses the damaged body.
    match c
        .put_single(
            BUCKET,
            "flipped",
            &mut Cursor::new(&upload),
            100_000,
            &mut |_| {},
        )
        .unwrap_err()
    {
        ClientError::S3(e) => assert_eq!(e.code, "BadDigest"),
        other => panic!("expected BadDigest, got {other}"),
    }
    assert_eq!(relay.stats().faults(), 1);
    drop(server);
}

#[test]
fn drop_header_removes_the_field_from_response_heads() {
    let (_server, relay, _bytes) = rig(vec![Fault::always(FaultKind::DropHeader("etag".into()))]);
    let mut c = client(&relay.url());
    let meta = c.head(BUCKET, "obj").unwrap();
    assert_eq!(meta.etag, None);
    assert_eq!(meta.content_length, Some(64 * 1024));
}

#[test]
fn latency_delays_each_response() {
    let (_server, relay, _bytes) = rig(vec![Fault::always(FaultKind::Latency(
        Duration::from_millis(300),
    ))]);
    let mut c = client(&relay.url());
    let started = Instant::now();
    c.head(BUCKET, "obj").unwrap();
    c.head(BUCKET, "obj").unwrap();
    assert!(started.elapsed() >= Duration::from_millis(600));
}

#[test]
fn lower_content_length_lowers_a_head_answer_and_a_get_once() {
    let (_server, relay, bytes) = rig(vec![Fault::times(FaultKind::LowerContentLength(1000), 2)]);
    let mut c = client(&relay.url());
    // A HEAD answer names the object's size: lowered, no body involved.
    assert_eq!(
        c.head(BUCKET, "obj").unwrap().content_length,
        Some(64 * 1024 - 1000)
    );
    // A GET: Content-Range still says 10,000 bytes, the head 9,000.
    let err = range_get(&mut c, 0, 9999).unwrap_err();
    assert!(
        matches!(err, ClientError::WrongLength(_)),
        "expected a length error, got {err}"
    );
    // The budget is spent: a new connection is faithful again.
    let mut c = client(&relay.url());
    assert_eq!(range_get(&mut c, 0, 9999).unwrap(), bytes[..10_000]);
    assert_eq!(relay.stats().faults(), 2);
}

#[test]
fn rewrite_header_replaces_the_value_in_every_response_that_has_it() {
    let (_server, relay, bytes) = rig(vec![Fault::always(FaultKind::RewriteHeader {
        name: "ETag".into(),
        value: "\"rewritten\"".into(),
    })]);
    let mut c = client(&relay.url());
    for _ in 0..2 {
        let meta = c.head(BUCKET, "obj").unwrap();
        assert_eq!(meta.etag.as_deref(), Some("\"rewritten\""));
        assert_eq!(meta.content_length, Some(64 * 1024));
    }
    assert_eq!(range_get(&mut c, 0, 99).unwrap(), bytes[..100]);
    assert!(relay.stats().faults() >= 3, "{}", relay.stats().faults());
}

#[test]
fn flip_bodies_of_length_flips_every_nth_body_of_that_length_only() {
    let (_server, relay, bytes) = rig(vec![Fault::always(FaultKind::FlipBodiesOfLength {
        len: 100,
        at: 3,
        every: 2,
    })]);
    let mut c = client(&relay.url());
    let mut flipped = Vec::new();
    for _ in 0..3 {
        for (a, b) in [(0u64, 99u64), (0, 199)] {
            let got = range_get(&mut c, a, b).unwrap();
            let want = &bytes[a as usize..=b as usize];
            let diffs: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
            flipped.push(diffs);
        }
    }
    // Bodies of 100 bytes: the 2nd is flipped at 3; 200-byte bodies never.
    let none = Vec::<usize>::new();
    assert_eq!(
        flipped,
        [
            none.clone(),
            none.clone(),
            vec![3],
            none.clone(),
            none.clone(),
            none
        ]
    );
    assert_eq!(relay.stats().flips(), 1);
}

/// A raw server (not HTTP): echoes 4 bytes, then sends 996 more and closes.
fn raw_server() -> (std::net::SocketAddr, Vec<u8>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let tail = data(996);
    let sent = tail.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut ping = [0u8; 4];
            if conn.read_exact(&mut ping).is_ok() {
                let _ = conn.write_all(&ping);
                let _ = conn.write_all(&sent);
            }
        }
    });
    (addr, tail)
}

#[test]
fn flip_stream_relays_raw_bytes_and_flips_one_stream_byte() {
    use std::io::{Read, Write};
    let (addr, tail) = raw_server();
    let relay = Relay::start(
        "127.0.0.1:0",
        &addr.to_string(),
        vec![Fault::times(FaultKind::FlipStream(500), 1)],
    )
    .unwrap();
    // Not HTTP either way: the relay frames nothing.
    let ping = [0x00u8, 0xff, b'\r', b'\n'];
    let mut want = ping.to_vec();
    want.extend_from_slice(&tail);
    let mut diffs = Vec::new();
    for _ in 0..2 {
        let mut s = std::net::TcpStream::connect(relay.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&ping).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), want.len());
        diffs.push(
            (0..got.len())
                .filter(|&i| got[i] != want[i])
                .collect::<Vec<_>>(),
        );
    }
    // `times=1`: the first connection's byte 500, the second connection untouched.
    assert_eq!(diffs, [vec![500], vec![]]);
    assert_eq!(relay.stats().flips(), 1);
}

/// `hipobj debug relay` as a process: it prints the address it listens on and relays.
#[test]
fn the_binary_prints_its_address_and_relays() {
    use std::io::BufRead;
    let (server, _relay, _bytes) = rig(Vec::new());
    let to = server
        .endpoint_url()
        .trim_start_matches("http://")
        .to_owned();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["debug", "relay", "--to", &to, "--fault", "latency=1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let mut c = client(&format!("http://{addr}"));
    let head = c.head(BUCKET, "obj");
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(head.unwrap().content_length, Some(64 * 1024));
    // A bad fault is refused with a message, before listening.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["debug", "relay", "--to", &to, "--fault", "explode=1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown fault"));
}
