//! The fault matrix of issue 19 for uploads, retries and the GET rows this branch proves:
//! `hipobj` (the binary, blocking client) through `hipobj debug relay` (in-process) to s3s-fs
//! and to our gateway, op × server × fault → a verified success or a non-zero exit, with no
//! false success, no partial file under the final name, and nothing slower than the deadline.
//!
//! A success is checked against the bytes the server stores (read back without the relay);
//! the expected retry counts come from `--json`.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hipobj_gateway::fault_relay::{Fault, Relay};
use hipobj_gateway::{Gateway, RunningGateway};
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

const BUCKET: &str = "matrix";
/// No row may take longer (the slowest expected row is a few seconds).
const ROW_DEADLINE: Duration = Duration::from_secs(30);
const MIB: usize = 1 << 20;

/// A server of the matrix, with the bytes it was seeded with.
enum Server {
    S3sFs(S3sFs),
    Gateway(RunningGateway),
}

impl Server {
    fn name(&self) -> &'static str {
        match self {
            Server::S3sFs(_) => "s3s-fs",
            Server::Gateway(_) => "gateway",
        }
    }

    fn url(&self) -> String {
        match self {
            Server::S3sFs(s) => s.endpoint_url(),
            Server::Gateway(g) => format!("http://{}", g.local_addr()),
        }
    }

    fn start(gateway: bool, dir: &Path) -> Self {
        if gateway {
            Server::Gateway(
                Gateway::builder()
                    .listen("127.0.0.1:0")
                    .root_dir(dir.join("gw-root"))
                    .credentials(ACCESS_KEY, SECRET_KEY)
                    .start()
                    .unwrap(),
            )
        } else {
            Server::S3sFs(S3sFs::start())
        }
    }
}

fn hipobj(url: &str, args: &[&str]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let out = cli::hipobj(url, ACCESS_KEY, SECRET_KEY, args);
    (out, started.elapsed())
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null)
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `put` of this many bytes (multipart above 16 MiB, 8 MiB parts).
    Put(usize),
    /// Whole-object `get` of the seeded object (single PUT, stored with its CRC64NVME).
    Get,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Exit 0, bytes verified, exactly this many retries.
    Ok { retries: u64 },
    /// Non-zero exit whose message contains this.
    Fails(&'static str),
}

struct Row {
    op: Op,
    faults: Vec<Fault>,
    expect: Expect,
}

fn row(op: Op, faults: &[&str], expect: Expect) -> Row {
    Row {
        op,
        faults: faults.iter().map(|f| Fault::parse(f).unwrap()).collect(),
        expect,
    }
}

fn rows() -> Vec<Row> {
    use Expect::{Fails, Ok};
    use Op::{Get, Put};
    vec![
        row(Put(MIB), &[], Ok { retries: 0 }),
        row(Put(MIB), &["slowdown,times=1"], Ok { retries: 1 }),
        row(Put(MIB), &["slowdown"], Fails("SlowDown")),
        row(Put(MIB), &["reset-after=0,times=1"], Ok { retries: 1 }),
        row(Put(MIB), &["flip-request=1000,times=1"], Fails("")),
        row(Put(20 * MIB), &[], Ok { retries: 0 }),
        // Case 5 of issue 19: one flipped request byte in a multipart upload.
        row(Put(20 * MIB), &["flip-request=1000,times=1"], Fails("")),
        row(Put(20 * MIB), &["flip-request=3000000,times=1"], Fails("")),
        row(Put(20 * MIB), &["slowdown,times=2"], Ok { retries: 2 }),
        row(Put(20 * MIB), &["slowdown"], Fails("SlowDown")),
        row(Get, &[], Ok { retries: 0 }),
        row(Get, &["slowdown,times=1"], Ok { retries: 1 }),
        row(Get, &["slowdown"], Fails("SlowDown")),
        row(Get, &["reset-after=0,times=1"], Ok { retries: 1 }),
        row(Get, &["flip=5000"], Fails("")),
        // Cut once partway: the rest is asked for with a Range request (issue 33).
        row(Get, &["truncate-after=3000,times=1"], Ok { retries: 1 }),
        row(Get, &["reset-after=70000,times=1"], Ok { retries: 1 }),
        // Cut on every connection: the retries run out before the last byte arrives.
        row(Get, &["truncate-after=3000"], Fails("")),
        row(Get, &["reset-after=20000"], Fails("")),
    ]
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    cli::random_bytes(len, seed)
}

/// Runs one row; returns a line describing a violation, if any.
fn run_row(server: &Server, dir: &Path, i: usize, r: &Row, seeded: &[u8]) -> Option<String> {
    let to = server.url().trim_start_matches("http://").to_owned();
    let relay = Relay::start("127.0.0.1:0", &to, r.faults.clone()).unwrap();
    let label = format!("{} {:?} {:?}", server.name(), r.op, r.faults);
    let (out, took, check): (_, _, Box<dyn Fn() -> Option<String>>) = match r.op {
        Op::Put(len) => {
            let bytes = data(len, 100 + i as u64);
            let src = dir.join(format!("src-{i}.bin"));
            std::fs::write(&src, &bytes).unwrap();
            let key = format!("s3://{BUCKET}/put-{i}");
            let (out, took) = hipobj(
                &relay.url(),
                &[
                    "put",
                    src.to_str().unwrap(),
                    &key,
                    "--fabric",
                    "http",
                    "--json",
                ],
            );
            let direct = server.url();
            let back = dir.join(format!("back-{i}.bin"));
            let check = Box::new(move || {
                let args = [
                    "get",
                    key.as_str(),
                    back.to_str().unwrap(),
                    "--fabric",
                    "http",
                ];
                let (o, _) = hipobj(&direct, &args);
                let stored = o
                    .status
                    .success()
                    .then(|| std::fs::read(&back).ok())
                    .flatten();
                (stored.as_deref() != Some(&bytes[..]))
                    .then(|| "exit 0 but the stored object differs (false success)".to_owned())
            }) as Box<dyn Fn() -> Option<String>>;
            (out, took, check)
        }
        Op::Get => {
            let dest: PathBuf = dir.join(format!("got-{i}.bin"));
            let (out, took) = hipobj(
                &relay.url(),
                &[
                    "get",
                    &format!("s3://{BUCKET}/seeded"),
                    dest.to_str().unwrap(),
                    "--fabric",
                    "http",
                    "--json",
                ],
            );
            let want = seeded.to_vec();
            let ok = out.status.success();
            let check = Box::new(move || {
                let file = std::fs::read(&dest).ok();
                match (ok, file) {
                    (true, f) if f.as_deref() != Some(&want[..]) => {
                        Some("exit 0 but the file differs (false success)".to_owned())
                    }
                    (false, Some(_)) => {
                        Some("failed but left a file under the final name".to_owned())
                    }
                    _ => None,
                }
            }) as Box<dyn Fn() -> Option<String>>;
            (out, took, check)
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = json_of(&out);
    if took > ROW_DEADLINE {
        return Some(format!("{label}: took {took:?}"));
    }
    if stderr.contains("panicked") {
        return Some(format!("{label}: panicked: {stderr}"));
    }
    let violation = match (r.expect, out.status.success()) {
        (Expect::Ok { retries }, true) => {
            if json["retries"].as_u64() != Some(retries) {
                Some(format!("expected {retries} retries: {json}"))
            } else if matches!(r.op, Op::Put(_)) && json["verified"] != true {
                Some(format!("upload not verified: {json}"))
            } else {
                check()
            }
        }
        (Expect::Ok { .. }, false) => Some(format!("expected success, failed: {stderr}")),
        (Expect::Fails(_), true) => Some(format!(
            "exit 0 where a failure was expected (false success?): {json}"
        )),
        (Expect::Fails(text), false) => {
            if !stderr.contains(text) {
                Some(format!("failed without {text:?}: {stderr}"))
            } else if matches!(r.op, Op::Get) {
                check()
            } else {
                None
            }
        }
    };
    eprintln!(
        "{label}: exit {:?} in {took:?} verified_by {}{}",
        out.status.code(),
        json["verified_by"],
        stderr
            .lines()
            .next()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default()
    );
    violation.map(|v| format!("{label}: {v}"))
}

fn matrix(gateway: bool) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(gateway, dir.path());
    let seeded = data(200_000, 7);
    let seed_src = dir.path().join("seeded.bin");
    std::fs::write(&seed_src, &seeded).unwrap();
    cli::succeeded(
        &["mb"],
        hipobj(&server.url(), &["mb", &format!("s3://{BUCKET}")]).0,
    );
    let key = format!("s3://{BUCKET}/seeded");
    let args = [
        "put",
        seed_src.to_str().unwrap(),
        key.as_str(),
        "--fabric",
        "http",
    ];
    cli::succeeded(&args, hipobj(&server.url(), &args).0);
    let violations: Vec<String> = rows()
        .iter()
        .enumerate()
        .filter_map(|(i, r)| run_row(&server, dir.path(), i, r, &seeded))
        .collect();
    assert!(
        violations.is_empty(),
        "{} violation(s):\n{}",
        violations.len(),
        violations.join("\n")
    );
}

#[test]
fn matrix_against_s3s_fs() {
    matrix(false);
}

#[test]
fn matrix_against_the_gateway() {
    matrix(true);
}

/// A server whose answers prove nothing (no echoed checksum, no ETag, no stored checksum: the
/// relay drops them; a third-party hipobj-rc-v2 server answers so): `put` succeeds by default with an `unverified` warning on stderr and
/// `"verified": false` (as `get` does, issue 33 item 1); `--verify` makes it exit 1 saying
/// the upload is unverified; `--no-verify` succeeds without the warning. The stored object is
/// ours in every case.
#[test]
fn an_unproven_upload_succeeds_unverified_unless_verify_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3sFs::start();
    server.create_bucket_dir(BUCKET);
    let to = server
        .endpoint_url()
        .trim_start_matches("http://")
        .to_owned();
    let faults = ["drop-header=etag", "drop-header=x-amz-checksum-crc64nvme"]
        .map(|f| Fault::parse(f).unwrap())
        .to_vec();
    let relay = Relay::start("127.0.0.1:0", &to, faults).unwrap();
    // (A multipart upload cannot be made unprovable this way: its parts' ETags are needed.)
    let (name, len) = ("small", 100_000);
    {
        let bytes = data(len, 3);
        let src = dir.path().join(format!("{name}.bin"));
        std::fs::write(&src, &bytes).unwrap();
        let key = format!("s3://{BUCKET}/{name}");
        let args = [
            "put",
            src.to_str().unwrap(),
            key.as_str(),
            "--fabric",
            "http",
            "--multipart-threshold",
            "5MiB",
            "--part-size",
            "5MiB",
            "--json",
        ];
        let (out, _) = hipobj(&relay.url(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{name}: an unproven upload exited non-zero by default: {stderr}"
        );
        assert!(
            stderr.contains("hipobj: warning: unverified:"),
            "{name}: {stderr}"
        );
        let json = json_of(&out);
        assert_eq!(json["verified"], false, "{json}");
        assert!(json["unverified_reason"].is_string(), "{json}");

        let strict = [&args[..], &["--verify"]].concat();
        let (out, _) = hipobj(&relay.url(), &strict);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: exit 0 under --verify");
        assert!(stderr.contains("upload unverified"), "{stderr}");

        let waived = [&args[..], &["--no-verify"]].concat();
        let (out, _) = hipobj(&relay.url(), &waived);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains("unverified"), "{stderr}");
        assert_eq!(json_of(&out)["verified"], false);

        let back = dir.path().join(format!("{name}.back"));
        let get = [
            "get",
            key.as_str(),
            back.to_str().unwrap(),
            "--fabric",
            "http",
        ];
        cli::succeeded(&get, hipobj(&server.endpoint_url(), &get).0);
        assert_eq!(
            std::fs::read(&back).unwrap(),
            bytes,
            "{name}: stored object"
        );

        // The engine's PUT (`--fabric soft`: s3s-fs has no soft fabric, the engine sends the
        // body over HTTP), judged by the HEAD after it: the message of the issue, now a
        // warning by default and an error under --verify.
        let mut engine_args = args.to_vec();
        engine_args[4] = "soft";
        let (out, _) = hipobj(&relay.url(), &engine_args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "engine put: {stderr}");
        assert!(
            stderr.contains("HEAD after the PUT named no CRC64NVME and no MD5 ETag"),
            "{stderr}"
        );
        let json = json_of(&out);
        assert_eq!(json["client"], "engine", "{json}");
        assert_eq!(json["verified"], false, "{json}");
        engine_args.push("--verify");
        let (out, _) = hipobj(&relay.url(), &engine_args);
        assert!(!out.status.success(), "engine put --verify: exit 0");
    }
}

/// A multipart upload whose CompleteMultipartUpload answer is cut short (`Content-Length` 20
/// bytes short, then the connection closes; the server completed it): `put` asks the server
/// (HEAD) before failing, finds our object and succeeds — proven by its ETag or checksum on
/// our gateway — instead of exiting 1 (issue 33 item 1). The relay's second response with a
/// body is the Complete answer (the first is CreateMultipartUpload's; parts have none).
/// s3s-fs answers Complete with a chunked body (no `Content-Length` to lower), so the case
/// runs against the gateway.
#[test]
fn a_complete_answer_cut_short_is_checked_before_failing() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = true;
    {
        let server = Server::start(gateway, dir.path());
        let url = server.url();
        cli::succeeded(&["mb"], hipobj(&url, &["mb", &format!("s3://{BUCKET}")]).0);
        let bytes = data(6 * MIB, 11);
        let src = dir.path().join("mp.bin");
        std::fs::write(&src, &bytes).unwrap();
        let key = format!("s3://{BUCKET}/cut-{gateway}");
        let to = url.trim_start_matches("http://").to_owned();
        let fault = Fault::parse("content-length-minus=20,every=2,times=1").unwrap();
        let relay = Relay::start("127.0.0.1:0", &to, vec![fault]).unwrap();
        let args = [
            "put",
            src.to_str().unwrap(),
            key.as_str(),
            "--fabric",
            "http",
            "--multipart-threshold",
            "5MiB",
            "--part-size",
            "5MiB",
            "--json",
            "--verify",
        ];
        let (out, _) = hipobj(&relay.url(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            relay.stats().faults(),
            1,
            "{}: fault not met",
            server.name()
        );
        assert!(
            out.status.success(),
            "{}: a completed upload whose answer was cut exited non-zero: {stderr}",
            server.name()
        );
        let json = json_of(&out);
        assert_eq!(json["verified"], true, "{}: {json}", server.name());
        assert_eq!(json["parts"], 2, "{json}");
        let back = dir.path().join(format!("cut-{gateway}.back"));
        let get = [
            "get",
            key.as_str(),
            back.to_str().unwrap(),
            "--fabric",
            "http",
        ];
        cli::succeeded(&get, hipobj(&url, &get).0);
        assert_eq!(std::fs::read(&back).unwrap(), bytes, "{}", server.name());
    }
}

/// The GET rows of issue 19: whole-object length from `Content-Range`/HEAD, range checksums.
/// With `--verify` each faulty download must end non-zero with no file under the final name.
/// Without it, a download no checksum can prove (a multipart object on s3s-fs, which keeps no
/// checksum for it) may succeed only when its result says `unverified` on stderr: an exit 0
/// that reads as a plain success is a false success.
#[test]
fn get_rows_that_need_the_get_side_proofs() {
    let dir = tempfile::tempdir().unwrap();
    let mut false_successes = Vec::new();
    for gateway in [false, true] {
        let server = Server::start(gateway, dir.path());
        let url = server.url();
        cli::succeeded(&["mb"], hipobj(&url, &["mb", &format!("s3://{BUCKET}")]).0);
        // A multipart object: s3s-fs keeps no full-object checksum for it.
        let bytes = data(20 * MIB, 9);
        let src = dir.path().join("mp.bin");
        std::fs::write(&src, &bytes).unwrap();
        let key = format!("s3://{BUCKET}/mp");
        let put = [
            "put",
            src.to_str().unwrap(),
            key.as_str(),
            "--fabric",
            "http",
        ];
        cli::succeeded(&put, hipobj(&url, &put).0);
        let to = url.trim_start_matches("http://").to_owned();
        let cases: [(&str, &[&str]); 3] = [
            ("flip=1000", &[]),
            ("content-length-minus=1000", &[]),
            ("flip=10", &["--range", "0-99999"]),
        ];
        for (i, (fault, extra)) in cases.into_iter().enumerate() {
            let relay =
                Relay::start("127.0.0.1:0", &to, vec![Fault::parse(fault).unwrap()]).unwrap();
            let dest = dir.path().join(format!("get-{gateway}-{i}.bin"));
            let mut args = vec![
                "get",
                key.as_str(),
                dest.to_str().unwrap(),
                "--fabric",
                "http",
            ];
            args.extend_from_slice(extra);
            let (out, _) = hipobj(&relay.url(), &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            eprintln!(
                "{} {fault} {extra:?}: exit {:?} {}",
                server.name(),
                out.status.code(),
                stderr.trim()
            );
            if out.status.success() && !stderr.contains("unverified") {
                false_successes.push(format!("{} {fault} {extra:?}", server.name()));
            }
            if !out.status.success() && dest.exists() {
                false_successes.push(format!("{} {fault} {extra:?}: partial file", server.name()));
            }
            let _ = std::fs::remove_file(&dest);
            let relay =
                Relay::start("127.0.0.1:0", &to, vec![Fault::parse(fault).unwrap()]).unwrap();
            args.push("--verify");
            let (out, _) = hipobj(&relay.url(), &args);
            if out.status.success() || dest.exists() {
                false_successes.push(format!("{} {fault} {extra:?} --verify", server.name()));
            }
        }
    }
    assert!(
        false_successes.is_empty(),
        "false successes: {false_successes:?}"
    );
}
