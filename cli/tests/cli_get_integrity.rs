//! `hipobj get` only reports success for bytes something proves (issue 19), through a
//! fault-injecting relay in front of a real server (s3s-fs, or our gateway in-process):
//! a whole-object GET whose `Content-Length` a relay lowered by 1,000 fails and leaves no file
//! under the destination name; a ranged GET from our gateway with one body byte flipped fails
//! on the gateway's range checksum; a download no checksum proves says `unverified` on
//! stderr, and fails under `--verify`.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Output;

use cli::random_bytes;
use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};
use hipobj_gateway::{Gateway, RunningGateway};
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

const GW_ACCESS: &str = "getint-key";
const GW_SECRET: &str = "getint-secret";

fn gateway(root: &Path) -> RunningGateway {
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(GW_ACCESS, GW_SECRET)
        .start()
        .unwrap()
}

/// `hipobj get` (blocking client) against `addr` with the gateway's or s3s-fs's keys.
fn get(addr: SocketAddr, s3s: bool, args: &[&str]) -> Output {
    let (a, s) = if s3s {
        (ACCESS_KEY, SECRET_KEY)
    } else {
        (GW_ACCESS, GW_SECRET)
    };
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--fabric", "http"]);
    cli::hipobj(&format!("http://{addr}"), a, s, &all)
}

fn s3s_addr(server: &S3sFs) -> SocketAddr {
    server
        .endpoint_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Nothing under the destination name and no partial file beside it.
fn nothing_kept(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn a_whole_get_with_a_lowered_content_length_fails_and_keeps_no_file() {
    // s3s-fs with an object it holds no checksum for (the case), then our gateway.
    let server = S3sFs::start();
    let data = random_bytes(700_000, 3);
    server.create_bucket_dir("integrity");
    server.put_file("integrity", "obj", &data);
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let gw_put = cli::hipobj(
        &format!("http://{}", gw.local_addr()),
        GW_ACCESS,
        GW_SECRET,
        &["mb", "s3://integrity"],
    );
    cli::succeeded(&["mb"], gw_put);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let put = cli::hipobj(
        &format!("http://{}", gw.local_addr()),
        GW_ACCESS,
        GW_SECRET,
        &["put", src.to_str().unwrap(), "s3://integrity/obj"],
    );
    cli::succeeded(&["put"], put);

    for (backend, s3s) in [(s3s_addr(&server), true), (gw.local_addr(), false)] {
        let out_dir = tempfile::tempdir().unwrap();
        let dest = out_dir.path().join("obj");
        let relay = Relay::start(
            "127.0.0.1:0",
            &backend.to_string(),
            vec![Fault::times(FaultKind::LowerContentLength(1000), 1)],
        )
        .unwrap();
        let o = get(
            relay.addr(),
            s3s,
            &["s3://integrity/obj", dest.to_str().unwrap()],
        );
        assert!(
            relay.stats().faults() > 0,
            "the relay never lowered a Content-Length"
        );
        assert!(
            !o.status.success(),
            "a download 1000 bytes short exited 0 (s3s-fs: {s3s}): {}",
            stderr(&o)
        );
        nothing_kept(out_dir.path());

        // Straight to the server the same download is exact.
        let o = get(
            backend,
            s3s,
            &["s3://integrity/obj", dest.to_str().unwrap()],
        );
        cli::succeeded(&["get"], o);
        assert!(std::fs::read(&dest).unwrap() == data);
    }
}

/// `hipobj get` on the engine (soft fabric) HEADs the object, then range-gets it: a HEAD
/// whose `Content-Length` a relay lowered must not shorten the download unnoticed (each
/// range's answer names the real size).
#[test]
fn an_engine_get_after_a_lowered_head_fails_and_keeps_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let soft = hipobj_gateway::RcTarget::start(
        "127.0.0.1:0".parse().unwrap(),
        hipobj_gateway::RcLimits::default(),
    )
    .unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path().join("root"))
        .credentials(GW_ACCESS, GW_SECRET)
        .rdma_target(soft)
        .start()
        .unwrap();
    let url = format!("http://{}", gw.local_addr());
    cli::succeeded(
        &["mb"],
        cli::hipobj(&url, GW_ACCESS, GW_SECRET, &["mb", "s3://integrity"]),
    );
    let data = random_bytes(600_000, 11);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    cli::succeeded(
        &["put"],
        cli::hipobj(
            &url,
            GW_ACCESS,
            GW_SECRET,
            &["put", src.to_str().unwrap(), "s3://integrity/obj"],
        ),
    );
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("obj");
    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::times(FaultKind::LowerContentLength(1000), 1)],
    )
    .unwrap();
    let o = cli::hipobj(
        &format!("http://{}", relay.addr()),
        GW_ACCESS,
        GW_SECRET,
        &[
            "get",
            "s3://integrity/obj",
            dest.to_str().unwrap(),
            "--fabric",
            "soft",
        ],
    );
    assert!(
        relay.stats().faults() > 0,
        "the relay never lowered a Content-Length"
    );
    assert!(
        !o.status.success(),
        "an engine download after a lowered HEAD exited 0: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("HEAD said"), "{}", stderr(&o));
    nothing_kept(out_dir.path());

    // Without the relay: exact, every range proven by the gateway's checksums.
    let o = cli::hipobj(
        &url,
        GW_ACCESS,
        GW_SECRET,
        &[
            "get",
            "s3://integrity/obj",
            dest.to_str().unwrap(),
            "--fabric",
            "soft",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&cli::succeeded(&["get"], o)).unwrap();
    assert_eq!(v["client"], "engine", "{v}");
    assert_eq!(v["checksum_verified"], true, "{v}");
    assert!(std::fs::read(&dest).unwrap() == data);
}

#[test]
fn a_ranged_get_from_our_gateway_with_a_flipped_byte_fails() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("root"));
    let url = format!("http://{}", gw.local_addr());
    cli::succeeded(
        &["mb"],
        cli::hipobj(&url, GW_ACCESS, GW_SECRET, &["mb", "s3://integrity"]),
    );
    let data = random_bytes(900_000, 5);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    cli::succeeded(
        &["put"],
        cli::hipobj(
            &url,
            GW_ACCESS,
            GW_SECRET,
            &["put", src.to_str().unwrap(), "s3://integrity/obj"],
        ),
    );
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("part");
    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::times(FaultKind::Flip(4321), 1)],
    )
    .unwrap();
    let args = [
        "s3://integrity/obj",
        dest.to_str().unwrap(),
        "--range",
        "1000-300999",
    ];
    let o = get(relay.addr(), false, &args);
    assert!(relay.stats().flips() > 0, "the relay never flipped a byte");
    assert!(
        !o.status.success(),
        "a damaged range exited 0: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("checksum"), "{}", stderr(&o));
    nothing_kept(out_dir.path());

    // Without the relay: exact and verified by the gateway's range checksum.
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let o = get(gw.local_addr(), false, &json_args);
    let v: serde_json::Value = serde_json::from_slice(&cli::succeeded(&args, o)).unwrap();
    assert_eq!(v["checksum_verified"], true, "{v}");
    assert!(std::fs::read(&dest).unwrap() == data[1000..301_000]);
}

#[test]
fn a_download_nothing_proves_says_unverified_and_fails_under_verify() {
    let server = S3sFs::start();
    let data = random_bytes(300_000, 9);
    server.create_bucket_dir("integrity");
    server.put_file("integrity", "plain", &data);
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("plain");
    let dest_s = dest.to_str().unwrap();

    // A flipped byte that nothing can detect: the default says so, --verify refuses.
    let relay = Relay::start(
        "127.0.0.1:0",
        &s3s_addr(&server).to_string(),
        vec![Fault::times(FaultKind::Flip(777), 1)],
    )
    .unwrap();
    let o = get(
        relay.addr(),
        true,
        &["s3://integrity/plain", dest_s, "--verify"],
    );
    assert!(relay.stats().flips() > 0);
    assert!(
        !o.status.success(),
        "--verify accepted an unproven download"
    );
    assert!(stderr(&o).contains("unverified"), "{}", stderr(&o));
    nothing_kept(out_dir.path());

    let o = get(
        s3s_addr(&server),
        true,
        &["s3://integrity/plain", dest_s, "--json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unverified"),
        "the default must say unverified on stderr: {}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["checksum_verified"], false, "{v}");
    assert!(std::fs::read(&dest).unwrap() == data);

    let o = get(
        s3s_addr(&server),
        true,
        &["s3://integrity/plain", dest_s, "--no-verify"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

/// `bytes=0-` of an empty object is answered 416: `get` then reads it with a plain GET.
#[test]
fn an_empty_object_downloads_empty() {
    let server = S3sFs::start();
    server.create_bucket_dir("integrity");
    server.put_file("integrity", "empty", b"");
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("empty");
    let o = get(
        s3s_addr(&server),
        true,
        &["s3://integrity/empty", dest.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&dest).unwrap().len(), 0);
}
