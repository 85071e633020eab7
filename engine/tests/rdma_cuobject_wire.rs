//! The engine as a cuObject client (`Dialect::CuObject`). No DC hardware exists here, so the
//! bytes never move by DC in these tests: the provider mints syntactically valid descriptors
//! for the op's buffer range, and the tests prove
//! (a) the exact request sent (a hand-rolled server captures it: token present and signed,
//!     `UNSIGNED-PAYLOAD`, `Content-Length: 0` and no body, PUT's CRC64NVME),
//! (b) against our gateway (which cannot serve DC: `501`) GET, RANGE_GET and PUT fall back to
//!     HTTP byte-exact with path `Http`,
//! (c) how a server that answers without moving data is judged: a wrong count, a body or a
//!     missing count is never success; a reply 200 with the right count is accepted (the
//!     client cannot observe a DC write — documented limitation).

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engine::{
    DcOp, DcTokenError, DcTokenProvider, Dialect, Engine, Fabric, Placement, RegisterOptions,
    RetryPolicy,
};
use hipobj_gateway::{Gateway, RunningGateway};
use raw::{ACCESS, SECRET, call};
use rig::{crc64, pattern};
use ring_api::opcode::{Get, Put, RangeGet};
use ring_api::{BufSlice, DataPath, ErrorClass};
use s3_lite::credentials::Credentials;
use s3_lite::rdma::descriptor::DescriptorWithSuffix;

/// Mints what `cuMemObjGetRDMAToken` would: the buffer's address and size in fields 1–2,
/// fixed rkey / DCT number / RoCE GID (10.0.0.5); records every call.
#[derive(Debug, Default)]
struct FakeDc {
    calls: Mutex<Vec<(u64, u64, DcOp)>>,
    suffix: bool,
}

impl DcTokenProvider for FakeDc {
    fn mint(&self, addr: u64, len: u64, op: DcOp) -> Result<String, DcTokenError> {
        self.calls.lock().unwrap().push((addr, len, op));
        let size = u32::try_from(len).map_err(|_| DcTokenError::Unavailable("≥ 4 GiB".into()))?;
        let mut d = format!(
            "{addr:016x}:{size:08x}:001a2b3c:0000:00abcd:1:00000000000000000000ffff0a000005"
        );
        if self.suffix {
            d.push_str(&format!(":{addr:016x}:{len:016x}"));
        }
        Ok(d)
    }
}

fn engine_for(addr: SocketAddr, dc: Arc<FakeDc>) -> Engine {
    rig::engine_builder(addr)
        .fabric(Fabric::Soft)
        .dialect(Dialect::CuObject)
        .dc_token_provider(dc)
        .build()
        .unwrap()
}

/// One captured request: head lines (lower-case names) and any bytes after the head.
#[derive(Debug, Clone)]
struct Captured {
    line: String,
    headers: Vec<(String, String)>,
    extra: Vec<u8>,
}

impl Captured {
    fn header(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    }
    fn signed(&self) -> Vec<String> {
        let auth = self.header("authorization").unwrap();
        let sh = auth.split("SignedHeaders=").nth(1).unwrap();
        let sh = sh.split(',').next().unwrap();
        sh.split(';').map(str::to_owned).collect()
    }
}

/// Serves `answers` in order, one connection each (`Connection: close`), capturing requests.
fn capture_server(answers: Vec<String>) -> (SocketAddr, std::thread::JoinHandle<Vec<Captured>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let mut got = Vec::new();
        for answer in answers {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let end = loop {
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "closed before the head ended");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break p + 4;
                }
            };
            // Anything sent after the head (there must be nothing) within 300 ms.
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut extra = buf[end..].to_vec();
            while let Ok(n) = s.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                extra.extend_from_slice(&chunk[..n]);
            }
            let text = String::from_utf8(buf[..end].to_vec()).unwrap();
            let mut lines = text.split("\r\n");
            let line = lines.next().unwrap().to_owned();
            let headers = lines
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (n, v) = l.split_once(':').unwrap();
                    (n.trim().to_ascii_lowercase(), v.trim().to_owned())
                })
                .collect();
            got.push(Captured {
                line,
                headers,
                extra,
            });
            s.write_all(answer.as_bytes()).unwrap();
        }
        got
    });
    (addr, h)
}

fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut s = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
    for (n, v) in headers {
        s.push_str(&format!("{n}: {v}\r\n"));
    }
    s.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s
}

#[test]
fn sends_the_standard_single_request() {
    let len = 4096u64;
    let crc = crc64(&pattern(len as usize, 3));
    let get_ok = answer(
        200,
        &[
            ("x-amz-rdma-reply", "200"),
            ("x-amz-rdma-bytes-transferred", "4096"),
        ],
        "",
    );
    let range_ok = answer(
        206,
        &[
            ("x-amz-rdma-reply", "206"),
            ("x-amz-rdma-bytes", "1000/9000"),
            ("Content-Range", "bytes 77-1076/9000"),
        ],
        "",
    );
    let put_ok = answer(
        200,
        &[
            ("x-amz-rdma-reply", "200"),
            ("ETag", "\"x\""),
            ("x-amz-checksum-crc64nvme", &crc),
        ],
        "",
    );
    let (addr, server) = capture_server(vec![get_ok, range_ok, put_ok]);
    let dc = Arc::new(FakeDc::default());
    let engine = engine_for(addr, Arc::clone(&dc));
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    engine
        .copy_in(buf, 8192, &pattern(len as usize, 3))
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("bkt", "dir/k.bin").unwrap();
    let ops = [
        Get::new(obj, BufSlice::new(buf, 0, len))
            .user_data(1)
            .build(),
        RangeGet::new(obj, 77, BufSlice::new(buf, 65536, 1000))
            .user_data(2)
            .build(),
        Put::new(obj, BufSlice::new(buf, 8192, len))
            .user_data(3)
            .build(),
    ];
    let mut paths = Vec::new();
    for op in &ops {
        q.push(op).unwrap();
        assert_eq!(q.wait(1, Some(Duration::from_secs(20))), 1);
        let c = q.completion().next().unwrap();
        assert!(c.is_ok(), "{c:?}");
        paths.push((c.bytes(), c.path()));
    }
    let got = server.join().unwrap();
    assert_eq!(got.len(), 3);
    let calls = dc.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3);
    assert_eq!(paths[0].0, len);
    assert_eq!(paths[1].0, 1000);
    assert_eq!(paths[2].0, len);
    for (i, (c, (a, n, op))) in got.iter().zip(&calls).enumerate() {
        let token = c.header("x-amz-rdma-token").expect("token header");
        let d = DescriptorWithSuffix::parse(token).unwrap();
        assert_eq!(token.len(), 81, "bare descriptor");
        assert_eq!(d.remote_addr(), *a);
        assert_eq!(d.size(), *n);
        assert_eq!(*op, if i == 2 { DcOp::Put } else { DcOp::Get });
        // PUT: UNSIGNED-PAYLOAD (docs/protocol.md, cuObject descriptor). GET: the request encoder (not this
        // dialect's code) signs the empty-body hash, which is also true of a body-less GET.
        let hash = c.header("x-amz-content-sha256");
        if i == 2 {
            assert_eq!(hash, Some("UNSIGNED-PAYLOAD"));
        } else {
            assert!(
                hash == Some("UNSIGNED-PAYLOAD") || hash == Some(s3_lite::sigv4::EMPTY_SHA256),
                "{hash:?}"
            );
            assert!(c.header("content-length").is_none_or(|v| v == "0"));
        }
        let signed = c.signed();
        assert!(signed.iter().any(|s| s == "x-amz-content-sha256"));
        for (name, _) in &c.headers {
            if s3_lite::rdma::is_rdma_header(name) {
                assert!(signed.contains(name), "{name} unsigned: {signed:?}");
            }
        }
        assert!(signed.iter().any(|s| s == "x-amz-rdma-token"));
        assert!(
            c.extra.is_empty(),
            "bytes after the head: {}",
            c.extra.len()
        );
        assert!(c.header("transfer-encoding").is_none());
        assert!(c.header("content-md5").is_none());
    }
    assert!(
        got[0].line.starts_with("GET /bkt/dir/k.bin "),
        "{}",
        got[0].line
    );
    assert_eq!(calls[0].1, len);
    assert_eq!(got[1].header("range"), Some("bytes=77-1076"));
    assert!(
        got[2].line.starts_with("PUT /bkt/dir/k.bin "),
        "{}",
        got[2].line
    );
    assert_eq!(got[2].header("content-length"), Some("0"));
    assert_eq!(
        got[2].header("x-amz-checksum-crc64nvme"),
        Some(crc.as_str())
    );
    assert!(
        got[2]
            .signed()
            .iter()
            .any(|s| s == "x-amz-checksum-crc64nvme")
    );
    // No DC hardware: the completion reports the RDMA path the fabric knows (see report).
    assert_ne!(paths[0].1, Some(DataPath::Http));
}

/// What a server that did not move the data can make the client believe.
#[test]
fn lying_get_answers_are_judged_by_reply_and_count() {
    let cases: Vec<(String, Option<ErrorClass>)> = vec![
        // Short count (`N/total` with N < total): never success.
        (
            answer(
                200,
                &[
                    ("x-amz-rdma-reply", "200"),
                    ("x-amz-rdma-bytes-transferred", "4095/4096"),
                ],
                "",
            ),
            Some(ErrorClass::Integrity),
        ),
        // No count at all.
        (
            answer(200, &[("x-amz-rdma-reply", "200")], ""),
            Some(ErrorClass::Integrity),
        ),
        // Reply 200 but a body: not an RDMA success.
        (
            answer(
                200,
                &[
                    ("x-amz-rdma-reply", "200"),
                    ("x-amz-rdma-bytes-transferred", "4"),
                ],
                "abcd",
            ),
            Some(ErrorClass::Integrity),
        ),
        // Reply 200 with the exact count: accepted — with DC the client cannot observe the
        // write; only a covering checksum could refute it (docs/engine.md).
        (
            answer(
                206,
                &[
                    ("x-amz-rdma-reply", "206"),
                    ("x-amz-rdma-bytes-transferred", "512"),
                ],
                "",
            ),
            None,
        ),
    ];
    // A covering checksum refutes a lie: the destination still holds zeros.
    let zeros = vec![0u8; 512];
    let wrong = crc64(&pattern(512, 9));
    let right = crc64(&zeros);
    let mut cases: Vec<(String, Option<ErrorClass>)> = cases;
    for (claim, want) in [
        (wrong.as_str(), Some(ErrorClass::Integrity)),
        (right.as_str(), None),
    ] {
        cases.push((
            answer(
                206,
                &[
                    ("x-amz-rdma-reply", "206"),
                    ("x-amz-rdma-bytes-transferred", "512"),
                    ("x-amz-rdma-checksum-crc64nvme", claim),
                ],
                "",
            ),
            want,
        ));
    }
    let ranged = |i: usize| i >= 3;
    for (i, (a, want)) in cases.into_iter().enumerate() {
        let (addr, server) = capture_server(vec![a]);
        let engine = Engine::builder()
            .endpoint_url(format!("http://{addr}"))
            .credentials(Credentials::new(ACCESS, SECRET))
            .region("us-east-1")
            .placement(Placement::Workers(1))
            .retry(RetryPolicy::new(
                1,
                Duration::from_millis(5),
                Duration::from_millis(5),
            ))
            .fabric(Fabric::Soft)
            .dialect(Dialect::CuObject)
            .dc_token_provider(Arc::new(FakeDc::default()))
            .build()
            .unwrap();
        let buf = engine
            .register_host(1 << 16, RegisterOptions::pageable())
            .unwrap();
        let mut q = engine.queue(2).unwrap();
        let obj = engine.object("bkt", "k").unwrap();
        let op = if ranged(i) {
            RangeGet::new(obj, 0, BufSlice::new(buf, 0, 512))
                .user_data(1)
                .build()
        } else {
            Get::new(obj, BufSlice::new(buf, 0, 4096))
                .user_data(1)
                .build()
        };
        q.push(&op).unwrap();
        assert_eq!(q.wait(1, Some(Duration::from_secs(20))), 1);
        let c = q.completion().next().unwrap();
        match want {
            Some(class) => {
                assert!(!c.is_ok(), "case {i}: {c:?}");
                assert_eq!(c.error_class(), Some(class), "case {i}: {c:?}");
            }
            None => {
                assert!(c.is_ok(), "case {i}: {c:?}");
                assert_eq!(c.bytes(), 512);
            }
        }
        drop(engine);
        let _ = server.join();
    }
}

fn gateway(root: &std::path::Path) -> RunningGateway {
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .start()
        .unwrap()
}

#[test]
fn gateway_declines_dc_and_ops_fall_back_to_http() {
    for suffix in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path());
        let a = gw.local_addr();
        let data = pattern(2 * (1 << 20) + 4321, 7);
        assert_eq!(call(a, "PUT", "/dcb", "", &[], b"").status(), 200);
        assert_eq!(call(a, "PUT", "/dcb/o.bin", "", &[], &data).status(), 200);

        // What the gateway answers a valid DC descriptor directly: an explicit decline.
        let token = FakeDc {
            suffix,
            ..FakeDc::default()
        }
        .mint(0x7f00_0000_1000, 4096, DcOp::Get)
        .unwrap();
        let r = call(
            a,
            "GET",
            "/dcb/o.bin",
            "",
            &[("x-amz-rdma-token", &token)],
            b"",
        );
        assert_eq!(r.header("x-amz-rdma-reply"), Some("501"), "{}", r.status());

        let dc = Arc::new(FakeDc {
            suffix,
            ..FakeDc::default()
        });
        let engine = engine_for(a, Arc::clone(&dc));
        let buf = engine
            .register_host(8 << 20, RegisterOptions::pageable())
            .unwrap();
        let mut q = engine.queue(4).unwrap();
        let obj = engine.object("dcb", "o.bin").unwrap();
        q.push(
            &Get::new(obj, BufSlice::new(buf, 0, 3 << 20))
                .user_data(1)
                .build(),
        )
        .unwrap();
        q.push(
            &RangeGet::new(obj, 1_000_003, BufSlice::new(buf, 3 << 20, 700_001))
                .user_data(2)
                .build(),
        )
        .unwrap();
        assert_eq!(q.wait(2, Some(Duration::from_secs(30))), 2);
        let mut got: Vec<_> = q.completion().collect();
        got.sort_by_key(|c| c.user_data());
        for c in &got {
            assert!(c.is_ok(), "{c:?}");
            assert_eq!(c.path(), Some(DataPath::Http), "{c:?}");
        }
        assert_eq!(got[0].bytes(), data.len() as u64);
        let whole = engine.read(buf, 0, data.len() as u64).unwrap().to_vec();
        assert_eq!(crc64(&whole), crc64(&data));
        assert!(whole == data);
        let range = engine.read(buf, 3 << 20, 700_001).unwrap().to_vec();
        assert!(range == data[1_000_003..1_700_004]);

        let fresh = pattern((1 << 20) + 17, 91);
        engine.copy_in(buf, 5 << 20, &fresh).unwrap();
        let put_obj = engine.object("dcb", "new obj").unwrap();
        q.push(
            &Put::new(put_obj, BufSlice::new(buf, 5 << 20, fresh.len() as u64))
                .user_data(3)
                .build(),
        )
        .unwrap();
        assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
        let c = q.completion().next().unwrap();
        assert!(c.is_ok(), "{c:?}");
        assert_eq!(c.path(), Some(DataPath::Http));
        let back = call(a, "GET", "/dcb/new%20obj", "", &[], b"");
        assert_eq!(back.status(), 200);
        assert_eq!(crc64(&back.body), crc64(&fresh));
        assert!(back.body == fresh);
        // The provider was asked for each op: DC was really attempted before the fallback.
        assert!(dc.calls.lock().unwrap().len() >= 3);
        gw.shutdown();
    }
}
