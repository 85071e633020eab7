//! The `hipobj` binary follows the conventions of `aws s3 cp` and s5cmd (issue 18), against a
//! real S3 server (s3s-fs) on 127.0.0.1: a destination prefix or bucket gets the file's name, a
//! local directory gets the key's name.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::path::Path;

use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

fn ok(server: &S3sFs, args: &[&str]) -> String {
    let out = cli::hipobj(&server.endpoint_url(), ACCESS_KEY, SECRET_KEY, args);
    String::from_utf8_lossy(&cli::succeeded(args, out)).into_owned()
}

fn object_on_disk(server: &S3sFs, bucket: &str, key: &str) -> Option<Vec<u8>> {
    std::fs::read(server.root.path().join(bucket).join(key)).ok()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn put_to_a_prefix_or_bucket_appends_the_file_name() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("weights.bin");
    let data = cli::random_bytes(3000, 1);
    std::fs::write(&src, &data).unwrap();
    ok(&server, &["mb", "s3://conv"]);

    ok(&server, &["put", path(&src), "s3://conv/dir/"]);
    assert_eq!(
        object_on_disk(&server, "conv", "dir/weights.bin").as_deref(),
        Some(&data[..]),
        "s3://conv/dir/ must write dir/weights.bin"
    );
    ok(
        &server,
        &["put", path(&src), "s3://conv/a/b/", "--fabric", "http"],
    );
    assert!(object_on_disk(&server, "conv", "a/b/weights.bin").is_some());

    let put = ok(&server, &["put", path(&src), "s3://conv/", "--json"]);
    let put: serde_json::Value = serde_json::from_str(put.trim()).unwrap();
    assert_eq!(put["key"], "weights.bin", "{put}");
    assert_eq!(
        object_on_disk(&server, "conv", "weights.bin").as_deref(),
        Some(&data[..])
    );
    std::fs::remove_file(server.root.path().join("conv/weights.bin")).unwrap();
    ok(&server, &["put", path(&src), "s3://conv"]);
    assert!(object_on_disk(&server, "conv", "weights.bin").is_some());

    // A key that names the object is used as given.
    ok(&server, &["put", path(&src), "s3://conv/named.bin"]);
    assert!(object_on_disk(&server, "conv", "named.bin").is_some());
}

#[test]
fn get_into_a_directory_writes_the_key_name() {
    let server = S3sFs::start();
    server.create_bucket_dir("conv");
    let data = cli::random_bytes(5000, 2);
    server.put_file("conv", "models/layer.bin", &data);
    let dir = tempfile::tempdir().unwrap();

    // An existing directory, without a trailing slash.
    ok(
        &server,
        &["get", "s3://conv/models/layer.bin", path(dir.path())],
    );
    assert_eq!(std::fs::read(dir.path().join("layer.bin")).unwrap(), data);

    // A new directory named with a trailing slash is created.
    let fresh = format!("{}/fresh/", path(dir.path()));
    let get = ok(
        &server,
        &["get", "s3://conv/models/layer.bin", &fresh, "--json"],
    );
    let get: serde_json::Value = serde_json::from_str(get.trim()).unwrap();
    let written = dir.path().join("fresh/layer.bin");
    assert_eq!(get["dest"], path(&written), "{get}");
    assert_eq!(std::fs::read(&written).unwrap(), data);

    // A file path is used as given.
    let file = dir.path().join("copy.bin");
    ok(&server, &["get", "s3://conv/models/layer.bin", path(&file)]);
    assert_eq!(std::fs::read(&file).unwrap(), data);
}

/// Runs `hipobj args...` with no credentials anywhere (no AWS_* variables, no ~/.aws).
fn hipobj_without_credentials(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(args)
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .output()
        .unwrap()
}

#[test]
fn the_no_credentials_error_names_only_what_client_commands_accept() {
    let out = hipobj_without_credentials(&["ls", "s3://bkt"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("hipobj: error: no credentials"),
        "{stderr}"
    );
    assert!(stderr.contains("AWS_ACCESS_KEY_ID"), "{stderr}");
    // Every flag the message names is one `ls` accepts.
    let help =
        String::from_utf8_lossy(&hipobj_without_credentials(&["ls", "--help"]).stdout).into_owned();
    for flag in stderr
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--"))
    {
        assert!(
            help.contains(flag),
            "the error names {flag}, which `ls` rejects: {stderr}"
        );
    }
    assert!(stderr.contains("--profile"), "{stderr}");
}

#[test]
fn engine_put_names_its_etag_and_head_prints_text_with_the_checksum() {
    use hipobj_gateway::{Gateway, RcLimits, RcTarget};
    let root = tempfile::tempdir().unwrap();
    let soft = RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap();
    let gateway = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS_KEY, SECRET_KEY.to_owned())
        .rdma_target(soft)
        .start()
        .unwrap();
    let url = format!("http://{}", gateway.local_addr());
    let run = |args: &[&str]| {
        let out = cli::hipobj(&url, ACCESS_KEY, SECRET_KEY, args);
        String::from_utf8_lossy(&cli::succeeded(args, out)).into_owned()
    };
    run(&["mb", "s3://gwb"]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("t.bin");
    std::fs::write(&src, cli::random_bytes(100_000, 3)).unwrap();

    let put = run(&[
        "put",
        path(&src),
        "s3://gwb/t.bin",
        "--fabric",
        "soft",
        "--json",
    ]);
    let put: serde_json::Value = serde_json::from_str(put.trim()).unwrap();
    assert_eq!(put["client"], "engine", "{put}");
    assert!(put["etag"].as_str().is_some_and(|e| e.len() > 2), "{put}");
    let crc = put["sent_crc64nvme"].as_str().unwrap().to_owned();

    // Without --json: `name: value` lines, not JSON; the stored CRC64NVME is shown.
    let text = run(&["head", "s3://gwb/t.bin"]);
    assert!(
        serde_json::from_str::<serde_json::Value>(&text).is_err(),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l == "content_length: 100000"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == format!("checksum_crc64nvme: {crc}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("etag: {}", put["etag"].as_str().unwrap())),
        "{text}"
    );

    let json = run(&["head", "s3://gwb/t.bin", "--json"]);
    let json: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(json["checksum_crc64nvme"], crc.as_str(), "{json}");
    assert_eq!(json["etag"], put["etag"], "{json}");
    gateway.shutdown();
}

fn stderr_of(endpoint: &str, args: &[&str]) -> String {
    let out = cli::hipobj(endpoint, ACCESS_KEY, SECRET_KEY, args);
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn connection_errors_are_one_clear_line() {
    // A closed port: "connect to" once, the OS reason once.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let err = stderr_of(&format!("http://{closed}"), &["ls", "s3://bkt"]);
    assert!(err.starts_with("hipobj: error: connect to "), "{err}");
    assert_eq!(err.matches("connect to").count(), 1, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    // https:// against a plain-HTTP server says what is wrong.
    let server = S3sFs::start();
    let err = stderr_of(&format!("https://{}", server.addr), &["ls", "s3://bkt"]);
    assert!(
        err.contains("the server did not answer TLS; is the endpoint http://?"),
        "{err}"
    );
}

#[test]
fn every_subcommand_reports_errors_with_one_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let cases: [&[&str]; 4] = [
        &[
            "serve",
            "--listen",
            "127.0.0.1:99999",
            "--root",
            path(dir.path()),
            "--access-key",
            "a",
            "--secret-key",
            "b",
        ],
        &["topo", "--sysfs-root", path(&missing)],
        &[
            "bench",
            "s3://bkt/k",
            "--endpoint-url",
            "http://127.0.0.1:9",
        ],
        &["put", path(&missing), "s3://bkt/k"],
    ];
    for args in cases {
        let out = cli::hipobj("http://127.0.0.1:9", ACCESS_KEY, SECRET_KEY, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.starts_with("hipobj: error: "), "{args:?}: {err}");
    }
}

#[test]
fn client_flags_belong_to_client_commands_before_or_after_them() {
    let server = S3sFs::start();
    server.create_bucket_dir("flags");
    server.put_file("flags", "k", b"0123456789abcdef");
    // After the command (as `aws s3 ... --endpoint-url`) and before it (as aws's global options).
    let after = ok(&server, &["ls", "s3://flags", "--json"]);
    let before = ok(&server, &["--json", "ls", "s3://flags"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(after.trim()).unwrap()["objects"][0]["key"],
        "k"
    );
    assert_eq!(after, before);

    // Commands that are not clients do not offer them.
    let out = cli::hipobj(
        &server.endpoint_url(),
        ACCESS_KEY,
        SECRET_KEY,
        &["serve", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "serve --json must be a usage error"
    );
    let out = cli::hipobj(
        &server.endpoint_url(),
        ACCESS_KEY,
        SECRET_KEY,
        &["--endpoint-url", "http://x", "topo"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("hipobj: error: `topo` takes no client flags"),
        "{err}"
    );
    let help = |cmd: &str| {
        let out = cli::hipobj(
            &server.endpoint_url(),
            ACCESS_KEY,
            SECRET_KEY,
            &[cmd, "--help"],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let h = help("serve");
    assert!(
        !h.contains("--endpoint-url") && !h.contains("--json"),
        "{h}"
    );
    let h = help("topo");
    assert!(
        !h.contains("--endpoint-url") && !h.contains("--ca-bundle"),
        "{h}"
    );
    for cmd in ["put", "get", "head", "ls", "rm", "mb", "rb"] {
        let h = help(cmd);
        assert!(
            h.contains("--endpoint-url") && h.contains("--json"),
            "{cmd}: {h}"
        );
    }
}

#[test]
fn range_takes_the_http_form_too() {
    let server = S3sFs::start();
    server.create_bucket_dir("rng");
    server.put_file("rng", "k", b"0123456789abcdef");
    let dir = tempfile::tempdir().unwrap();
    for (range, want) in [
        ("bytes=0-9", &b"0123456789"[..]),
        ("bytes=-3", b"def"),
        ("2-4", b"234"),
    ] {
        let dest = dir.path().join("r");
        ok(
            &server,
            &["get", "s3://rng/k", path(&dest), "--range", range],
        );
        assert_eq!(std::fs::read(&dest).unwrap(), want, "--range {range}");
    }
}

#[test]
fn ls_lists_buckets_and_rb_refuses_non_empty_unless_forced() {
    let server = S3sFs::start();
    ok(&server, &["mb", "s3://first-bucket"]);
    ok(&server, &["mb", "s3://second-bucket"]);
    for args in [&["ls"][..], &["ls", "s3://"]] {
        let text = ok(&server, args);
        assert!(
            text.contains("first-bucket") && text.contains("second-bucket"),
            "{text}"
        );
    }
    let json = ok(&server, &["ls", "s3://", "--json"]);
    let json: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let names: Vec<&str> = json["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first-bucket", "second-bucket"], "{json}");

    server.put_file("first-bucket", "a/b.bin", b"x");
    server.put_file("first-bucket", "c.bin", b"y");
    let out = cli::hipobj(
        &server.endpoint_url(),
        ACCESS_KEY,
        SECRET_KEY,
        &["rb", "s3://first-bucket"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not empty (2 objects)") && err.contains("--force"),
        "{err}"
    );
    assert!(object_on_disk(&server, "first-bucket", "c.bin").is_some());

    let forced = ok(&server, &["rb", "s3://first-bucket", "--force", "--json"]);
    let forced: serde_json::Value = serde_json::from_str(forced.trim()).unwrap();
    assert_eq!(forced["objects_deleted"], 2, "{forced}");
    ok(&server, &["rb", "s3://second-bucket"]);
    let json = ok(&server, &["ls", "--json"]);
    let json: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(json["buckets"], serde_json::json!([]), "{json}");
}

#[test]
fn verbose_shows_requests_and_path_decisions_and_serve_logs_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, url) = start_serve(dir.path(), "-v");

    let quiet = cli::hipobj(&url, ACCESS_KEY, SECRET_KEY, &["mb", "s3://verbose-b"]);
    assert!(quiet.status.success());
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("GET"),
        "no -v: no log"
    );
    let src = dir.path().join("v.bin");
    std::fs::write(&src, b"verbose").unwrap();
    let out = cli::hipobj(
        &url,
        ACCESS_KEY,
        SECRET_KEY,
        &["-v", "put", path(&src), "s3://verbose-b/v.bin"],
    );
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("data path: --fabric Auto"), "{log}");
    assert!(log.contains("PUT /verbose-b/v.bin -> 200"), "{log}");
    let out = cli::hipobj(
        &url,
        ACCESS_KEY,
        SECRET_KEY,
        &["ls", "s3://verbose-b", "--verbose"],
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("GET /verbose-b?"),
        "--verbose"
    );

    let access = stderr_until(
        &mut serve,
        &[
            "PUT /verbose-b 200",
            "PUT /verbose-b/v.bin 200",
            "GET /verbose-b?",
        ],
    );
    let lines: Vec<&str> = access
        .lines()
        .filter(|l| l.contains("hipobj::access"))
        .collect();
    // mb, the put's capability probe... : every request one line, with its status.
    assert!(
        lines.iter().any(|l| l.contains("PUT /verbose-b 200")),
        "{access}"
    );
    assert!(
        lines.iter().any(|l| l.contains("PUT /verbose-b/v.bin 200")),
        "{access}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("GET /verbose-b?") && l.contains(" 200 ")),
        "{access}"
    );
}

/// `hipobj serve --access-log` (no `-v`): stderr holds one bare line per request —
/// `TIMESTAMP METHOD /path[?query] STATUS REQUEST-ID DURATIONms` — and nothing else.
#[test]
fn serve_access_log_writes_one_line_per_request_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, url) = start_serve(dir.path(), "--access-log");
    let run = |args: &[&str]| cli::hipobj(&url, ACCESS_KEY, SECRET_KEY, args);
    assert!(run(&["mb", "s3://access-b"]).status.success());
    let src = dir.path().join("a.bin");
    std::fs::write(&src, b"access log").unwrap();
    assert!(
        run(&["put", path(&src), "s3://access-b/a.bin"])
            .status
            .success()
    );
    assert!(run(&["ls", "s3://access-b"]).status.success());
    assert!(!run(&["head", "s3://access-b/missing"]).status.success());

    let log = stderr_until(
        &mut serve,
        &[
            " PUT /access-b 200 ",
            " PUT /access-b/a.bin 200 ",
            " GET /access-b?",
            " HEAD /access-b/missing 404 ",
        ],
    );
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 4, "one line per request at least:\n{log}");
    for l in &lines {
        // Bare access lines: a timestamp, then the method; no level, no target, no other events.
        let fields: Vec<&str> = l.split_whitespace().collect();
        assert!(
            fields.len() == 6
                && ["GET", "PUT", "HEAD", "POST", "DELETE"].contains(&fields[1])
                && fields[2].starts_with('/')
                && fields[3].parse::<u16>().is_ok()
                && fields[5].ends_with("ms"),
            "not an access-log line: {l:?}\nwhole log:\n{log}"
        );
        assert!(!l.contains("INFO") && !l.contains("hipobj::"), "{l:?}");
    }
    let has = |want: &str| lines.iter().any(|l| l.contains(want));
    assert!(has(" PUT /access-b 200 "), "{log}");
    assert!(has(" PUT /access-b/a.bin 200 "), "{log}");
    assert!(has(" GET /access-b?"), "{log}");
    assert!(has(" HEAD /access-b/missing 404 "), "{log}");
}

/// Reads a child's stderr until every `wanted` text has appeared (at most 10 s), then stops the
/// child and returns all it wrote. A request's access-log line is written just after its
/// response, so the log is read until the line is there, not at the moment the client is done.
fn stderr_until(child: &mut std::process::Child, wanted: &[&str]) -> String {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut log = String::new();
    while !wanted.iter().all(|w| log.contains(w)) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    for line in rx.try_iter() {
        log.push_str(&line);
        log.push('\n');
    }
    log
}

/// Starts `hipobj serve LOG_FLAG` over `DIR/root` with the test keys; returns the process
/// (stderr piped) and its URL, read from the "listening on" line.
fn start_serve(dir: &Path, log_flag: &str) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut serve = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["serve", log_flag, "--listen", "127.0.0.1:0", "--root"])
        .arg(dir.join("root"))
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("serve did not start: {line:?}"))
        .to_owned();
    (serve, url)
}

/// `--fabric verbs` with an RDMA device that does not exist is a clear error (exit 1, the
/// CLI's prefix, the device and what is missing named, the ways out), not a warning and a
/// silent download over HTTP: verbs was asked for by name. (It used to log
/// `hipobj: warning: rdma: ... payloads go over HTTP` and succeed.)
#[test]
fn verbs_without_its_device_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, url) = start_serve(dir.path(), "--access-log");
    let run = |args: &[&str]| cli::hipobj(&url, ACCESS_KEY, SECRET_KEY, args);
    assert!(run(&["mb", "s3://warn-b"]).status.success());
    let src = dir.path().join("w.bin");
    std::fs::write(&src, b"refused, not carried over HTTP").unwrap();
    assert!(
        run(&["put", path(&src), "s3://warn-b/w.bin"])
            .status
            .success()
    );
    let dst = dir.path().join("w.out");
    let out = run(&[
        "get",
        "--fabric",
        "verbs",
        "--rdma-device",
        "hipobj-no-such-device",
        "s3://warn-b/w.bin",
        path(&dst),
    ]);
    let _ = serve.kill();
    let _ = serve.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!dst.exists(), "nothing may be written on the refused path");
    assert!(
        stderr.lines().any(|l| l.starts_with("hipobj: ")
            && l.contains("--fabric verbs: ")
            && l.contains("no RDMA verbs device could be opened (hipobj-no-such-device)")
            && l.contains("--fabric auto")),
        "no clear error on stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("payloads go over HTTP"),
        "the old fallback warning is back:\n{stderr}"
    );
}
