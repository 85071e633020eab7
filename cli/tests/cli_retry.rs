//! Issue 33, item 2: every request of the blocking client that is safe to repeat is retried
//! like the AWS CLI retries it, and a GET cut partway resumes where it was cut. `hipobj` (the
//! binary) through the fault relay (in-process) to s3s-fs and to our gateway, one fault each:
//! the command must succeed and say (`--json` `retries`, the relay's counters) that the fault
//! was met.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use hipobj_gateway::fault_relay::{Fault, Relay};
use hipobj_gateway::{Gateway, RunningGateway};
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

const BUCKET: &str = "retry";

enum Server {
    S3sFs(S3sFs),
    Gateway(RunningGateway),
}

impl Server {
    fn start(gateway: bool, dir: &std::path::Path) -> Self {
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

    fn url(&self) -> String {
        match self {
            Server::S3sFs(s) => s.endpoint_url(),
            Server::Gateway(g) => format!("http://{}", g.local_addr()),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Server::S3sFs(_) => "s3s-fs",
            Server::Gateway(_) => "gateway",
        }
    }

    /// A relay in front of the server with one fault.
    fn relay(&self, fault: &str) -> Relay {
        let to = self.url().trim_start_matches("http://").to_owned();
        Relay::start("127.0.0.1:0", &to, vec![Fault::parse(fault).unwrap()]).unwrap()
    }
}

fn hipobj(url: &str, args: &[&str]) -> std::process::Output {
    cli::hipobj(url, ACCESS_KEY, SECRET_KEY, args)
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null)
}

/// Runs `args` through a relay with `fault` (met once): it must succeed, and the relay must
/// have applied the fault. Returns the `--json` result.
fn succeeds_through(server: &Server, fault: &str, args: &[&str]) -> serde_json::Value {
    let relay = server.relay(fault);
    let out = hipobj(&relay.url(), args);
    assert!(
        out.status.success(),
        "{} {fault}: hipobj {args:?} failed: {}",
        server.name(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        relay.stats().faults(),
        1,
        "{} {fault}: hipobj {args:?}: the fault was not met",
        server.name()
    );
    json_of(&out)
}

/// One 503 SlowDown, one reset before any answer byte, one reset after a few answer bytes
/// (the server did receive and carry out that request): `mb`, `ls` (buckets and objects),
/// `rm` and `rb` succeed, and what they did is what the server holds.
#[test]
fn bucket_and_listing_commands_retry_after_slowdown_and_resets() {
    let dir = tempfile::tempdir().unwrap();
    for gateway in [false, true] {
        let server = Server::start(gateway, dir.path());
        let direct = server.url();
        for (i, fault) in [
            "slowdown,times=1",
            "reset-after=0,times=1",
            "reset-after=10,times=1",
        ]
        .into_iter()
        .enumerate()
        {
            let bucket = format!("{BUCKET}-{i}");
            let uri = format!("s3://{bucket}");
            succeeds_through(&server, fault, &["mb", &uri, "--json"]);
            // The bucket exists: a direct `ls` of it succeeds.
            cli::succeeded(&["ls"], hipobj(&direct, &["ls", &uri]));

            let src = dir.path().join(format!("obj-{i}.bin"));
            std::fs::write(&src, cli::random_bytes(10_000, i as u64)).unwrap();
            let key = format!("{uri}/obj");
            let put = [
                "put",
                src.to_str().unwrap(),
                key.as_str(),
                "--fabric",
                "http",
            ];
            cli::succeeded(&put, hipobj(&direct, &put));

            let listed = succeeds_through(&server, fault, &["ls", &uri, "--json"]);
            assert_eq!(listed["objects"][0]["key"], "obj", "{listed}");
            let buckets = succeeds_through(&server, fault, &["ls", "--json"]);
            let names: Vec<&str> = buckets["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["name"].as_str())
                .collect();
            assert!(names.contains(&bucket.as_str()), "{buckets}");

            succeeds_through(&server, fault, &["rm", &key, "--json"]);
            let after = json_of(&hipobj(&direct, &["ls", &uri, "--json"]));
            assert_eq!(after["objects"], serde_json::json!([]), "rm left {after}");

            succeeds_through(&server, fault, &["rb", &uri, "--json"]);
            let gone = hipobj(&direct, &["ls", &uri]);
            assert!(!gone.status.success(), "rb left {uri} behind");
        }
    }
}

/// `get --fabric http` whose answer is cut partway (reset, or closed early) resumes with a
/// Range request for the rest: the file is byte-exact and the download still proven by the
/// checksum of the whole object; a ranged get resumes the same way.
#[test]
fn get_resumes_an_answer_cut_partway() {
    let dir = tempfile::tempdir().unwrap();
    for gateway in [false, true] {
        let server = Server::start(gateway, dir.path());
        let direct = server.url();
        let uri = format!("s3://{BUCKET}");
        cli::succeeded(&["mb"], hipobj(&direct, &["mb", &uri]));
        let bytes = cli::random_bytes(1 << 20, 5);
        let src = dir.path().join("src.bin");
        std::fs::write(&src, &bytes).unwrap();
        let key = format!("{uri}/obj");
        let put = [
            "put",
            src.to_str().unwrap(),
            key.as_str(),
            "--fabric",
            "http",
        ];
        cli::succeeded(&put, hipobj(&direct, &put));
        for (i, fault) in [
            "reset-after=100000,times=1",
            "truncate-after=300000,times=1",
        ]
        .into_iter()
        .enumerate()
        {
            let dest = dir.path().join(format!("got-{gateway}-{i}.bin"));
            let args = [
                "get",
                key.as_str(),
                dest.to_str().unwrap(),
                "--fabric",
                "http",
                "--json",
                "--verify",
            ];
            let json = succeeds_through(&server, fault, &args);
            assert_eq!(
                std::fs::read(&dest).unwrap(),
                bytes,
                "{} {fault}",
                server.name()
            );
            assert_eq!(json["retries"], 1, "{} {fault}: {json}", server.name());
            assert_eq!(json["checksum_verified"], true, "{json}");

            let ranged = dir.path().join(format!("range-{gateway}-{i}.bin"));
            let args = [
                "get",
                key.as_str(),
                ranged.to_str().unwrap(),
                "--fabric",
                "http",
                "--range",
                "1000-799999",
                "--json",
            ];
            let json = succeeds_through(&server, fault, &args);
            assert_eq!(
                std::fs::read(&ranged).unwrap(),
                &bytes[1000..800_000],
                "{} {fault} ranged",
                server.name()
            );
            assert_eq!(json["retries"], 1, "{json}");
        }
    }
}

/// The rest of a cut answer is asked for with `If-Match` on the first answer's ETag: when the
/// object is no longer that version (here the relay renames the ETag the client sees), the
/// download fails saying the object changed, and leaves no file behind.
#[test]
fn a_resumed_get_of_a_changed_object_fails() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(true, dir.path());
    let direct = server.url();
    let uri = format!("s3://{BUCKET}");
    cli::succeeded(&["mb"], hipobj(&direct, &["mb", &uri]));
    let src = dir.path().join("src.bin");
    std::fs::write(&src, cli::random_bytes(1 << 20, 6)).unwrap();
    let key = format!("{uri}/obj");
    let put = [
        "put",
        src.to_str().unwrap(),
        key.as_str(),
        "--fabric",
        "http",
    ];
    cli::succeeded(&put, hipobj(&direct, &put));
    let to = direct.trim_start_matches("http://").to_owned();
    let faults = [
        "reset-after=100000,times=1",
        "rewrite-header=etag:\"0123456789abcdef0123456789abcdef\"",
    ]
    .map(|f| Fault::parse(f).unwrap())
    .to_vec();
    let relay = Relay::start("127.0.0.1:0", &to, faults).unwrap();
    let dest = dir.path().join("got.bin");
    let out = hipobj(
        &relay.url(),
        &["get", &key, dest.to_str().unwrap(), "--fabric", "http"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit 0 for a changed object");
    assert!(
        stderr.contains("changed while it was being downloaded"),
        "{stderr}"
    );
    assert!(!dest.exists(), "a partial file under the final name");
}
