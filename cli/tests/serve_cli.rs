//! The `hipobj` binary against the gateway, and the `hipobj serve` arguments.
//!
//! The object commands run against an in-process gateway (`hipobj_gateway`), so this file does
//! not depend on how `serve` is wired into the binary; `serve.rs` itself is compiled here
//! through `#[path]` to test its argument handling and its refusal of fabrics that do not
//! exist yet.

#[path = "../src/serve.rs"]
#[allow(dead_code)]
mod serve;

use std::path::Path;
use std::process::Output;

use clap::Parser;
use hipobj_gateway::{Gateway, RunningGateway};

const ACCESS: &str = "cli-serve-key";
const SECRET: &str = "cli-serve-secret";

#[path = "support/cli.rs"]
mod cli;

fn hipobj(gw: &RunningGateway, secret: &str, args: &[&str]) -> Output {
    cli::hipobj(&format!("http://{}", gw.local_addr()), ACCESS, secret, args)
}

fn ok(gw: &RunningGateway, args: &[&str]) -> String {
    String::from_utf8_lossy(&cli::succeeded(args, hipobj(gw, SECRET, args))).into_owned()
}

fn gateway(root: &Path) -> RunningGateway {
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .start()
        .unwrap()
}

#[test]
fn binary_commands_against_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("root"));
    ok(&gw, &["mb", "s3://cli-bucket"]);
    let data: Vec<u8> = (0..(15 << 20) + 4321u32)
        .map(|i| (i.wrapping_mul(40503) >> 7) as u8)
        .collect();
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let put = ok(
        &gw,
        &[
            "put",
            src.to_str().unwrap(),
            "s3://cli-bucket/m/obj.bin",
            "--part-size",
            "5MiB",
            "--multipart-threshold",
            "5MiB",
            "--json",
        ],
    );
    let put: serde_json::Value = serde_json::from_str(put.trim()).unwrap();
    assert_eq!(put["parts"], 4, "{put}");
    for (range, expect) in [
        ("0-9", 0..10),
        ("5242875-5242885", 5_242_875..5_242_886),
        ("15728000-", 15_728_000..data.len()),
        ("-5", data.len() - 5..data.len()),
    ] {
        let dest = dir.path().join("r.out");
        ok(
            &gw,
            &[
                "get",
                "s3://cli-bucket/m/obj.bin",
                dest.to_str().unwrap(),
                "--range",
                range,
            ],
        );
        assert!(
            std::fs::read(&dest).unwrap() == data[expect],
            "range {range}"
        );
    }
    let dest = dir.path().join("whole.out");
    ok(
        &gw,
        &["get", "s3://cli-bucket/m/obj.bin", dest.to_str().unwrap()],
    );
    assert!(std::fs::read(&dest).unwrap() == data);
    let ls = ok(&gw, &["ls", "s3://cli-bucket"]);
    assert!(ls.contains("PRE") && ls.contains("m/"), "{ls}");
    let head = ok(&gw, &["head", "s3://cli-bucket/m/obj.bin", "--json"]);
    let head: serde_json::Value = serde_json::from_str(head.trim()).unwrap();
    assert_eq!(head["content_length"], data.len());
    ok(&gw, &["rm", "s3://cli-bucket/m/obj.bin"]);
    let out = hipobj(&gw, SECRET, &["head", "s3://cli-bucket/m/obj.bin"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("NoSuchKey"));
    let out = hipobj(&gw, "wrong", &["ls", "s3://cli-bucket"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SignatureDoesNotMatch"));
    gw.shutdown();
}

#[derive(Parser, Debug)]
struct Wrapper {
    #[command(flatten)]
    args: serve::ServeArgs,
}

fn parse(args: &[&str]) -> Result<serve::ServeArgs, clap::Error> {
    Wrapper::try_parse_from(std::iter::once("serve").chain(args.iter().copied())).map(|w| w.args)
}

#[test]
fn serve_arguments_and_unavailable_fabrics() {
    assert!(
        parse(&["--listen", "127.0.0.1:0"]).is_err(),
        "a backend is required"
    );
    assert!(
        parse(&["--root", "/x", "--upstream", "http://h:1"]).is_err(),
        "only one backend"
    );
    let a = parse(&[
        "--root",
        "/x",
        "--fabric",
        "verbs",
        "--rdma-device",
        "no-such-rdma-device0",
        "--access-key",
        "k",
        "--secret-key",
        "s",
    ])
    .unwrap();
    // No such device (or, on hosts without RDMA, no libibverbs / no device at all): a clear
    // one-line error naming the fabric, exit 1, nothing started.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(serve::run(&a, &mut out, &mut err), 1);
    let msg = String::from_utf8_lossy(&err);
    assert!(msg.contains("--fabric verbs:"), "{msg}");
    assert!(
        msg.contains("RDMA verbs unavailable") || msg.contains("no-such-rdma-device0"),
        "{msg}"
    );
    assert!(out.is_empty());
    let a = parse(&[
        "--root",
        "/x",
        "--fabric",
        "verbs",
        "--rdma-device",
        "no-such-rdma-device0",
        "--access-key",
        "k",
        "--secret-key",
        "s",
    ])
    .unwrap();
    assert_eq!(serve::run(&a, &mut Vec::new(), &mut Vec::new()), 1);
    // https upstreams are served (tls.rs: serve_bridges_to_an_https_upstream).
}

#[test]
fn rdma_transfer_timeout_sets_both_dialects_bounds() {
    let base = ["--root", "/x", "--access-key", "k", "--secret-key", "s"];
    let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
    let d = serve::rc_limits(&with(&[]).unwrap());
    assert_eq!(d.transfer_timeout, std::time::Duration::from_secs(30));
    assert_eq!(d.v2.transfer, std::time::Duration::from_secs(30));
    let l = serve::rc_limits(&with(&["--rdma-transfer-timeout", "300"]).unwrap());
    assert_eq!(l.transfer_timeout, std::time::Duration::from_secs(300));
    assert_eq!(l.v2.transfer, std::time::Duration::from_secs(300));
    // Everything else stays the default.
    assert_eq!(l.max_put, d.max_put);
    assert_eq!(l.v2.max_size, d.v2.max_size);
    assert!(
        with(&["--rdma-transfer-timeout", "0"]).is_err(),
        "0 s is refused"
    );
    assert!(with(&["--rdma-transfer-timeout", "soon"]).is_err());
}

#[test]
fn rdma_v2_sessions_per_key_sets_the_v2_limit_within_the_total() {
    let base = ["--root", "/x", "--access-key", "k", "--secret-key", "s"];
    let with = |extra: &[&str]| parse(&[&base[..], extra].concat());
    let d = serve::rc_limits(&with(&[]).unwrap());
    assert_eq!(d.v2.max_per_principal, 8);
    let l = serve::rc_limits(&with(&["--rdma-v2-sessions-per-key", "32"]).unwrap());
    assert_eq!(l.v2.max_per_principal, 32);
    assert_eq!(l.v2.max_sessions, d.v2.max_sessions);
    for bad in ["0", "33", "many"] {
        assert!(
            with(&["--rdma-v2-sessions-per-key", bad]).is_err(),
            "{bad} is refused"
        );
    }
}
