//! `hipobj get/put --fabric soft` against a v2-only server (issue 12): the peer of
//! `gateway/tests/support/v2_peer.rs` refuses the rc-persistent routes (404) and serves
//! hipobj-rc-v2. Without any `--dialect` flag the bytes must move by RDMA and `--json` must name
//! `hipobj-rc-v2`; before issue 12 the CLI paired, got 404 and fell back to HTTP. With
//! `--dialect http` the same transfer names `http`.

#[path = "support/cli.rs"]
mod cli;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/v2_peer.rs"]
mod v2_peer;

use serde_json::Value;

fn ok_json(url: &str, args: &[&str]) -> Value {
    let out = cli::hipobj(url, raw::ACCESS, raw::SECRET, args);
    serde_json::from_slice(&cli::succeeded(args, out)).unwrap_or(Value::Null)
}

#[test]
fn get_and_put_against_a_v2_only_server_use_hipobj_rc_v2() {
    let root = tempfile::tempdir().unwrap();
    let gw = v2_peer::gateway(root.path());
    assert_eq!(
        raw::call(gw.local_addr(), "PUT", "/vbucket", "", &[], b"").status(),
        200
    );
    let (peer, seen) = v2_peer::start_peer(gw.local_addr(), v2_peer::Peer::NoMp);
    let url = format!("http://{peer}");
    let dir = tempfile::tempdir().unwrap();
    let data = cli::random_bytes((3 << 20) + 11, 9);
    let src = dir.path().join("in.bin");
    std::fs::write(&src, &data).unwrap();

    let put = ok_json(
        &url,
        &[
            "--json",
            "put",
            src.to_str().unwrap(),
            "s3://vbucket/k",
            "--fabric",
            "soft",
        ],
    );
    assert_eq!(put["dialect"], "hipobj-rc-v2", "{put}");
    assert_eq!(put["path"], "rdma-soft", "{put}");
    let out = dir.path().join("out.bin");
    let get = ok_json(
        &url,
        &[
            "--json",
            "get",
            "s3://vbucket/k",
            out.to_str().unwrap(),
            "--fabric",
            "soft",
        ],
    );
    assert_eq!(get["dialect"], "hipobj-rc-v2", "{get}");
    assert_eq!(get["path"], "rdma-soft", "{get}");
    assert!(
        std::fs::read(&out).unwrap() == data,
        "downloaded bytes differ"
    );
    assert!(
        seen.lock().unwrap().rc_persistent >= 1,
        "rc-persistent tried first"
    );

    let out2 = dir.path().join("out2.bin");
    let get = ok_json(
        &url,
        &[
            "--json",
            "get",
            "s3://vbucket/k",
            out2.to_str().unwrap(),
            "--fabric",
            "soft",
            "--dialect",
            "http",
        ],
    );
    assert_eq!(get["dialect"], "http", "{get}");
    assert_eq!(get["path"], "http", "{get}");
    assert!(
        std::fs::read(&out2).unwrap() == data,
        "HTTP download differs"
    );
}
