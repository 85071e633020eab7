//! Multipart uploads through the engine's rings (CreateMultipart, UploadPart,
//! CompleteMultipart, AbortMultipart) against real servers: the project's gateway (directory
//! backend, in-process) and s3s-fs. Stored objects are read back through the engine and
//! compared byte for byte and by CRC64NVME; misuse of a handle is a typed error; a part whose
//! connection is reset mid-body is retried into a correct object.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{S3sFs, pattern};
use engine::{Engine, Placement, RegisterOptions, RetryPolicy};
use hipobj_gateway::{Gateway, RunningGateway};
use ring_api::opcode::{AbortMultipart, CompleteMultipart, CreateMultipart, Get, Head, UploadPart};
use ring_api::{
    BufHandle, BufSlice, Cqe, ErrorClass, ErrorCode, ObjectId, PartNumber, UploadHandle,
};
use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::credentials::Credentials;

const ACCESS: &str = "mpkey";
const SECRET: &str = "mpsecret/0123456789abcdef";
const BUCKET: &str = "multipart";
const MIB: u64 = 1 << 20;
/// Three 5 MiB parts and a ragged fourth.
const PARTS: [u64; 4] = [5 * MIB, 5 * MIB, 5 * MIB, 1_234_567];

fn crc64(data: &[u8]) -> String {
    let mut c = Crc64Nvme::new();
    c.update(data);
    encode_crc64nvme(c.finish())
}

fn part(n: u32) -> PartNumber {
    PartNumber::new(n).unwrap()
}

fn engine_at(url: String, access: &str, secret: &str) -> Engine {
    Engine::builder()
        .endpoint_url(url)
        .credentials(Credentials::new(access, secret))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .retry(RetryPolicy::new(
            4,
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .build()
        .unwrap()
}

fn gateway(root: &std::path::Path) -> RunningGateway {
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .start()
        .unwrap()
}

/// Pushes `sqes` and waits for all their completions (in any order), sorted by `user_data`.
fn run(q: &mut engine::Queue, sqes: &[ring_api::Sqe]) -> Vec<Cqe> {
    q.push_multiple(sqes).unwrap();
    let mut got = Vec::new();
    while got.len() < sqes.len() {
        assert!(
            q.wait(1, Some(Duration::from_secs(30))) > 0,
            "no completion within 30 s ({} of {})",
            got.len(),
            sqes.len()
        );
        got.extend(q.completion());
    }
    got.sort_by_key(Cqe::user_data);
    got
}

fn one(q: &mut engine::Queue, sqe: ring_api::Sqe) -> Cqe {
    run(q, &[sqe]).remove(0)
}

fn ok(c: &Cqe, what: &str) {
    assert!(
        c.is_ok(),
        "{what}: {:?} {:?}",
        c.error_code(),
        c.error_class()
    );
}

fn failed(c: &Cqe) -> (Option<ErrorCode>, Option<ErrorClass>) {
    (c.error_code(), c.error_class())
}

/// One engine with a source buffer holding `data` and a destination as large.
struct Rig {
    engine: Engine,
    src: BufHandle,
    dst: BufHandle,
    data: Vec<u8>,
}

impl Rig {
    fn new(engine: Engine, seed: u64) -> Self {
        let total: u64 = PARTS.iter().sum();
        let data = pattern(total as usize, seed);
        let src = engine
            .register_host(total as usize, RegisterOptions::pageable())
            .unwrap();
        let dst = engine
            .register_host(total as usize, RegisterOptions::pageable())
            .unwrap();
        engine.copy_in(src, 0, &data).unwrap();
        Self {
            engine,
            src,
            dst,
            data,
        }
    }

    /// The UploadPart entries of parts `numbers` (1-based indexes into `PARTS`).
    fn parts(&self, obj: ObjectId, h: UploadHandle, numbers: &[u32]) -> Vec<ring_api::Sqe> {
        numbers
            .iter()
            .map(|&n| {
                let off: u64 = PARTS[..n as usize - 1].iter().sum();
                let len = PARTS[n as usize - 1];
                UploadPart::new(obj, h, part(n), BufSlice::new(self.src, off, len))
                    .user_data(u64::from(n))
                    .build()
            })
            .collect()
    }

    fn create(&self, q: &mut engine::Queue, obj: ObjectId) -> UploadHandle {
        let c = one(q, CreateMultipart::new(obj).user_data(100).build());
        ok(&c, "create");
        assert_ne!(c.aux(), 0, "a handle is never 0");
        UploadHandle(u32::try_from(c.aux()).unwrap())
    }

    /// Reads the whole object back and checks it is the source, byte for byte and by CRC.
    fn assert_stored(&self, q: &mut engine::Queue, obj: ObjectId) {
        let total = self.data.len() as u64;
        let c = one(
            q,
            Get::new(obj, BufSlice::new(self.dst, 0, total))
                .user_data(200)
                .build(),
        );
        ok(&c, "get");
        assert_eq!(c.bytes(), total);
        let got = self.engine.read(self.dst, 0, total).unwrap();
        assert_eq!(
            crc64(&got),
            crc64(&self.data),
            "CRC64NVME of the stored object"
        );
        assert!(
            *got == self.data[..],
            "stored object differs from the source"
        );
    }
}

/// Create, four parts at once, Complete: the stored object is the source.
fn complete_upload(rig: &Rig, key: &str) {
    let mut q = rig.engine.queue(16).unwrap();
    let obj = rig.engine.object(BUCKET, key).unwrap();
    let h = rig.create(&mut q, obj);
    let done = run(&mut q, &rig.parts(obj, h, &[1, 2, 3, 4]));
    for (c, len) in done.iter().zip(PARTS) {
        ok(c, "part");
        assert_eq!(c.bytes(), len);
    }
    let c = one(&mut q, CompleteMultipart::new(obj, h, part(4)).build());
    ok(&c, "complete");
    rig.assert_stored(&mut q, obj);
    // Completed: the handle is gone.
    let again = one(&mut q, CompleteMultipart::new(obj, h, part(4)).build());
    assert_eq!(
        failed(&again),
        (Some(ErrorCode::BadHandle), Some(ErrorClass::Local))
    );
}

/// Complete with a part never uploaded fails before the wire; the upload stays usable.
fn missing_part(rig: &Rig, key: &str) {
    let mut q = rig.engine.queue(16).unwrap();
    let obj = rig.engine.object(BUCKET, key).unwrap();
    let h = rig.create(&mut q, obj);
    for c in run(&mut q, &rig.parts(obj, h, &[1, 3])) {
        ok(&c, "part");
    }
    let c = one(&mut q, CompleteMultipart::new(obj, h, part(3)).build());
    assert_eq!(
        failed(&c),
        (Some(ErrorCode::InvalidArgument), Some(ErrorClass::Local))
    );
    // Still open: upload the gap, complete parts 1..=3 (5 MiB each).
    ok(&run(&mut q, &rig.parts(obj, h, &[2]))[0], "late part");
    ok(
        &one(&mut q, CompleteMultipart::new(obj, h, part(3)).build()),
        "complete",
    );
    let c = one(&mut q, Head::new(obj).build());
    ok(&c, "head");
    assert_eq!(c.aux(), 15 * MIB);
}

/// Abort: no object, and the handle is dead for every later use.
fn abort(rig: &Rig, key: &str) {
    let mut q = rig.engine.queue(16).unwrap();
    let obj = rig.engine.object(BUCKET, key).unwrap();
    let h = rig.create(&mut q, obj);
    ok(&run(&mut q, &rig.parts(obj, h, &[1]))[0], "part");
    ok(&one(&mut q, AbortMultipart::new(obj, h).build()), "abort");
    let head = one(&mut q, Head::new(obj).build());
    assert_eq!(
        head.error_code(),
        Some(ErrorCode::NotFound),
        "object absent"
    );
    let late = run(&mut q, &rig.parts(obj, h, &[2]));
    assert_eq!(
        failed(&late[0]),
        (Some(ErrorCode::BadHandle), Some(ErrorClass::Local))
    );
    let c = one(&mut q, AbortMultipart::new(obj, h).build());
    assert_eq!(
        failed(&c),
        (Some(ErrorCode::BadHandle), Some(ErrorClass::Local))
    );
}

/// Handles never issued, and a handle used with another object.
fn unknown_handle(rig: &Rig, key: &str) {
    let mut q = rig.engine.queue(16).unwrap();
    let obj = rig.engine.object(BUCKET, key).unwrap();
    let never = UploadHandle(0xFFFF_FF00);
    let c = run(&mut q, &rig.parts(obj, never, &[1]));
    assert_eq!(
        failed(&c[0]),
        (Some(ErrorCode::BadHandle), Some(ErrorClass::Local))
    );
    for sqe in [
        CompleteMultipart::new(obj, never, part(1)).build(),
        AbortMultipart::new(obj, never).build(),
    ] {
        assert_eq!(
            failed(&one(&mut q, sqe)),
            (Some(ErrorCode::BadHandle), Some(ErrorClass::Local))
        );
    }
    let h = rig.create(&mut q, obj);
    let other = rig.engine.object(BUCKET, "someone-else").unwrap();
    let c = run(&mut q, &rig.parts(other, h, &[1]));
    assert_eq!(
        failed(&c[0]),
        (Some(ErrorCode::InvalidArgument), Some(ErrorClass::Local))
    );
    ok(&one(&mut q, AbortMultipart::new(obj, h).build()), "abort");
}

fn scenarios(rig: &Rig) {
    complete_upload(rig, "whole.bin");
    missing_part(rig, "gap.bin");
    abort(rig, "aborted.bin");
    unknown_handle(rig, "unknown.bin");
}

#[test]
fn gateway_directory_backend() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let rig = Rig::new(
        engine_at(format!("http://{}", gw.local_addr()), ACCESS, SECRET),
        11,
    );
    scenarios(&rig);
    drop(rig);
    gw.shutdown();
}

/// Two engines in one process upload the same key (one bucket each) at the same time. Each
/// engine's handles name only its own uploads: the other engine naming the same handle and
/// object is refused before anything goes on the wire (it cannot abort or complete an upload
/// it never created), and both uploads complete into their own sources' bytes.
#[test]
fn engines_keep_their_own_uploads() {
    const OTHER_BUCKET: &str = "multipart-twin";
    const KEY: &str = "twin.bin";
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(OTHER_BUCKET)).unwrap();
    let gw = gateway(dir.path());
    let url = format!("http://{}", gw.local_addr());
    let rigs = [
        Rig::new(engine_at(url.clone(), ACCESS, SECRET), 21),
        Rig::new(engine_at(url, ACCESS, SECRET), 22),
    ];
    let buckets = [BUCKET, OTHER_BUCKET];
    let issued: [std::sync::Mutex<Option<UploadHandle>>; 2] = Default::default();
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for me in 0..2 {
            let (rigs, issued, barrier) = (&rigs, &issued, &barrier);
            s.spawn(move || {
                let rig = &rigs[me];
                let mut q = rig.engine.queue(16).unwrap();
                let obj = rig.engine.object(buckets[me], KEY).unwrap();
                let h = rig.create(&mut q, obj);
                for c in run(&mut q, &rig.parts(obj, h, &[1, 2, 3, 4])) {
                    ok(&c, "part");
                }
                *issued[me].lock().unwrap() = Some(h);
                barrier.wait();
                // The other engine's upload, by its handle and object, as seen from here.
                let theirs = issued[1 - me].lock().unwrap().unwrap();
                let their_obj = rig.engine.object(buckets[1 - me], KEY).unwrap();
                let mut reached = Vec::new();
                for sqe in [
                    AbortMultipart::new(their_obj, theirs).build(),
                    CompleteMultipart::new(their_obj, theirs, part(4)).build(),
                ] {
                    let c = one(&mut q, sqe);
                    if c.is_ok() || c.error_class() != Some(ErrorClass::Local) {
                        reached.push(failed(&c));
                    }
                }
                // Both have tried before either completes (and before any assertion, so a
                // failure here never leaves the other thread waiting).
                barrier.wait();
                assert!(
                    reached.is_empty(),
                    "engine {me} reached the other engine's upload {theirs:?}: {reached:?}"
                );
                ok(
                    &one(&mut q, CompleteMultipart::new(obj, h, part(4)).build()),
                    "complete",
                );
                rig.assert_stored(&mut q, obj);
            });
        }
    });
    drop(rigs);
    gw.shutdown();
}

#[test]
fn s3s_fs() {
    let server = S3sFs::start();
    server.create_bucket_dir(BUCKET);
    let rig = Rig::new(
        engine_at(
            server.endpoint_url(),
            common::s3s_fs::ACCESS_KEY,
            common::s3s_fs::SECRET_KEY,
        ),
        12,
    );
    scenarios(&rig);
}

/// A TCP relay that cuts the first connection whose request carries `trigger`, after
/// forwarding `after` more bytes of it (so the server sees a truncated body), and relays
/// every other connection untouched.
struct CuttingRelay {
    addr: SocketAddr,
    cuts: Arc<AtomicUsize>,
}

fn cutting_relay(backend: SocketAddr, trigger: &'static [u8], after: usize) -> CuttingRelay {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cuts = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&cuts);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let cuts = Arc::clone(&c);
            std::thread::spawn(move || relay(client, backend, trigger, after, &cuts));
        }
    });
    CuttingRelay { addr, cuts }
}

fn relay(
    mut client: TcpStream,
    backend: SocketAddr,
    trigger: &[u8],
    after: usize,
    cuts: &AtomicUsize,
) {
    let Ok(mut server) = TcpStream::connect(backend) else {
        return;
    };
    let (Ok(mut s_read), Ok(mut c_write)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut s_read, &mut c_write);
        let _ = c_write.shutdown(Shutdown::Both);
    });
    let mut window: Vec<u8> = Vec::new();
    let mut since: Option<usize> = None;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if since.is_none() && cuts.load(Ordering::SeqCst) == 0 {
            window.extend_from_slice(chunk);
            if window.windows(trigger.len()).any(|w| w == trigger) {
                since = Some(0);
            }
            let keep = window.len().saturating_sub(trigger.len());
            window.drain(..keep);
        } else if let Some(s) = since.as_mut() {
            *s += n;
        }
        if server.write_all(chunk).is_err() {
            break;
        }
        if since.is_some_and(|s| s >= after)
            && cuts
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            let _ = server.shutdown(Shutdown::Both);
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
}

/// Part 2's connection is cut after 1 MiB of its body reached the gateway: the engine retries
/// the part from the same pinned bytes and the completed object is exact.
#[test]
fn part_retried_after_connection_reset() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let relay = cutting_relay(gw.local_addr(), b"partNumber=2&", MIB as usize);
    let rig = Rig::new(
        engine_at(format!("http://{}", relay.addr), ACCESS, SECRET),
        13,
    );
    let mut q = rig.engine.queue(16).unwrap();
    let obj = rig.engine.object(BUCKET, "retried.bin").unwrap();
    let h = rig.create(&mut q, obj);
    let done = run(&mut q, &rig.parts(obj, h, &[1, 2, 3, 4]));
    for c in &done {
        ok(c, "part");
    }
    assert_eq!(relay.cuts.load(Ordering::SeqCst), 1, "the relay cut once");
    assert!(done[1].retried(), "part 2 needed a second attempt");
    ok(
        &one(&mut q, CompleteMultipart::new(obj, h, part(4)).build()),
        "complete",
    );
    rig.assert_stored(&mut q, obj);
    drop(q);
    drop(rig);
    gw.shutdown();
}
