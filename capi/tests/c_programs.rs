//! C programs compiled with the system `cc` against `libhipobj.so` and run against the
//! project's gateway (`hipobj-gateway`, a real S3 server with SigV4 checks) on loopback.

#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;
mod support;
#[path = "../../cli/tests/support/tls_front.rs"]
mod tls_front;
// The gateway tests' v2-only peer (`v2_peer` reaches its raw client as `super::raw`).
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/v2_peer.rs"]
mod v2_peer;

use support::*;

/// Compiles `name` and runs it against `hipobj serve --fabric soft` (the gateway in-process
/// with the soft RDMA target), expecting every op over `rdma-soft`.
fn run_against_soft_gateway(name: &str, needle: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(name, dir.path());
    let gw = gateway_soft(&dir.path().join("objects"));
    assert_eq!(gw.fabric(), "soft");
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, "rdma-soft"],
        dir.path(),
    );
    let stdout = expect_ok(&out, needle);
    gw.shutdown();
    stdout
}

/// Compiles `name` and runs it against s3s-fs (a plain S3 server: no RDMA pairing), expecting
/// every op over `http`.
fn run_against_s3s_fs(name: &str, needle: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(name, dir.path());
    let server = s3s_fs::S3sFs::start();
    server.create_bucket_dir(BUCKET);
    let out = run(
        &exe,
        &[
            &server.endpoint_url(),
            s3s_fs::ACCESS_KEY,
            s3s_fs::SECRET_KEY,
            BUCKET,
            "http",
        ],
        dir.path(),
    );
    expect_ok(&out, needle)
}

#[test]
fn quickstart_over_rdma_soft() {
    let out = run_against_soft_gateway("quickstart", "quickstart ok");
    assert!(out.contains("dialects: rc-persistent=5\n"), "{out}");
    println!("{out}");
}

/// A multipart upload through the batch queue, its parts over `rdma-soft` (the gateway READs
/// them from the registered buffer), read back byte-exact; aborts and bad ids refused.
#[test]
fn multipart_over_rdma_soft() {
    let out = run_against_soft_gateway("multipart", "multipart ok");
    println!("{out}");
}

/// The same against s3s-fs, a plain S3 server: every part over HTTP.
#[test]
fn multipart_over_http_to_s3s_fs() {
    let out = run_against_s3s_fs("multipart", "multipart ok");
    println!("{out}");
}

/// `HIPOBJ_DIALECT_RC_V2` against the same gateway: every op over `rdma-soft` in
/// `hipobj-rc-v2` (PREPARE / READY per op), the dialect the configuration asked for.
#[test]
fn quickstart_over_rdma_soft_in_hipobj_rc_v2() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("quickstart", dir.path());
    let gw = gateway_soft(&dir.path().join("objects"));
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, "rdma-soft", "2"],
        dir.path(),
    );
    let out = expect_ok(&out, "quickstart ok");
    gw.shutdown();
    assert!(out.contains("dialects: hipobj-rc-v2=5\n"), "{out}");
    println!("{out}");
}

/// Dialect negotiation under `HIPOBJ_DIALECT_AUTO`: a v2-only peer (the `rc-persistent` routes
/// answer 404, as third-party hipobj-rc-v2 servers do) in front of the soft gateway. The library
/// tries rc-persistent, learns the refusal and carries every op over `rdma-soft` in
/// `hipobj-rc-v2`, byte-exact.
#[test]
fn quickstart_negotiates_hipobj_rc_v2_with_a_v2_only_peer() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("quickstart", dir.path());
    let root = dir.path().join("objects");
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    let gw = v2_peer::gateway(&root);
    let (peer, seen) = v2_peer::start_peer(gw.local_addr(), v2_peer::Peer::Mp);
    let endpoint = format!("http://{peer}");
    let out = run(
        &exe,
        &[&endpoint, raw::ACCESS, raw::SECRET, BUCKET, "rdma-soft"],
        dir.path(),
    );
    let out = expect_ok(&out, "quickstart ok");
    assert!(out.contains("dialects: hipobj-rc-v2=5\n"), "{out}");
    let seen = seen.lock().unwrap();
    assert!(
        seen.rc_persistent > 0,
        "rc-persistent was never tried: {seen:?}"
    );
    println!(
        "{out}rc-persistent attempts refused by the peer: {}",
        seen.rc_persistent
    );
    gw.shutdown();
}

#[test]
fn batch_of_1000_over_rdma_soft() {
    let out = run_against_soft_gateway("batch", "batch ok 1000 range-gets");
    assert!(out.contains("dialects: rc-persistent=1002\n"), "{out}");
    println!("{out}");
}

#[test]
fn quickstart_against_s3s_fs_is_http() {
    let out = run_against_s3s_fs("quickstart", "quickstart ok");
    assert!(out.contains("dialects: http=5\n"), "{out}");
    println!("{out}");
}

#[test]
fn batch_of_1000_against_s3s_fs_is_http() {
    let out = run_against_s3s_fs("batch", "batch ok 1000 range-gets");
    assert!(out.contains("dialects: http=1002\n"), "{out}");
    println!("{out}");
}

/// Compiles `name`, starts a gateway and runs the program with its endpoint and keys.
fn run_against_gateway(name: &str, needle: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(name, dir.path());
    let root = dir.path().join("objects");
    let gw = gateway(&root);
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(&exe, &[&endpoint, ACCESS, SECRET, BUCKET], dir.path());
    let stdout = expect_ok(&out, needle);
    gw.shutdown();
    stdout
}

/// `hipObjBufAlloc` memory through a node daemon (`hipObjConfig_t.daemonSocket`): a PUT and
/// GETs move bytes through memory the daemon maps, and `malloc`ed memory is refused there
/// with a message naming `hipObjBufAlloc`. The same program in process first, as the control.
#[test]
fn host_memory_from_hipobjbufalloc_through_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("daemon", dir.path());
    let gw = gateway(&dir.path().join("objects"));
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(&exe, &[&endpoint, ACCESS, SECRET, BUCKET, "-"], dir.path());
    expect_ok(&out, "daemon ok (in process)");

    let engine = engine::Engine::builder()
        .in_process()
        .endpoint_url(&endpoint)
        .credentials(engine::Credentials::new(ACCESS, SECRET))
        .region("us-east-1")
        .placement(engine::Placement::Workers(2))
        .fabric(engine::Fabric::Http)
        .build()
        .unwrap();
    let socket = dir.path().join("hipobj.sock");
    let config = hipobj_daemon::DaemonConfig {
        socket: socket.clone(),
        ..hipobj_daemon::DaemonConfig::default()
    };
    let listener = hipobj_daemon::listen(&config).unwrap();
    let daemon = hipobj_daemon::spawn(engine, config, listener).unwrap();
    let out = run(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, socket.to_str().unwrap()],
        dir.path(),
    );
    expect_ok(&out, "daemon ok (attached)");
    daemon.stop().unwrap();
    gw.shutdown();
}

#[test]
fn quickstart_with_host_memory() {
    let out = run_against_gateway("quickstart", "quickstart ok");
    assert!(out.starts_with("hipobj-rs "), "{out}");
}

/// The Quick Start with `cuMemAlloc` (= `cudaMalloc`) memory, registered host-staged. Needs a
/// CUDA device: ignored here, run by the GPU lane (`benches/gpu/run_capi_on_device.sh`, with
/// `--include-ignored`), where a missing device fails it.
#[test]
#[ignore = "needs a CUDA device; the GPU lane runs it (benches/gpu/run_capi_on_device.sh)"]
fn quickstart_with_cuda_memory() {
    let cuda = engine::gpu::detect().filter(|rt| rt.backend() == engine::gpu::Backend::Cuda);
    let rt = cuda.expect("this test needs a CUDA device (none was found)");
    println!(
        "cuda: {} ({} device(s), driver API {})",
        rt.device_name(0).unwrap_or_default(),
        rt.device_count(),
        rt.version()
    );
    let out = run_against_gateway("quickstart_cuda", "quickstart_cuda ok");
    println!("{out}");
}

/// The CUDA Quick Start compiles without CUDA headers and, where no CUDA device is visible (none
/// here; `CUDA_VISIBLE_DEVICES=` hides any), says so and exits 77 instead of failing.
#[test]
fn quickstart_cuda_without_a_device_exits_77() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("quickstart_cuda", dir.path());
    let out = run_with_env(
        &exe,
        &["http://127.0.0.1:9", ACCESS, SECRET, BUCKET],
        dir.path(),
        &[("CUDA_VISIBLE_DEVICES", "")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(77), "{stdout}");
    assert!(stdout.starts_with("skip: "), "{stdout}");
}

#[test]
fn batch_of_1000_range_gets() {
    let out = run_against_gateway("batch", "batch ok 1000 range-gets");
    println!("{out}");
}

#[test]
fn error_paths() {
    let out = run_against_gateway("errors", "errors ok");
    // The detail line of the wrong-secret GET, as a C caller sees it.
    let line = out
        .lines()
        .find(|l| l.starts_with("wrong credentials: "))
        .unwrap();
    assert!(line.contains("SignatureDoesNotMatch"), "{line}");
    assert!(line.contains("HTTP 403"), "{line}");
    println!("{out}");
}

/// The same error paths against the gateway with the soft RDMA target: the S3 errors are still
/// named, and the message names the path (`rdma-soft`) and dialect the endpoint negotiated.
#[test]
fn error_paths_over_rdma_soft() {
    let out = run_against_soft_gateway("errors", "errors ok");
    let line = out
        .lines()
        .find(|l| l.starts_with("no such key: "))
        .unwrap();
    assert!(line.contains("NoSuchKey"), "{line}");
    assert!(
        line.contains("path rdma-soft, dialect rc-persistent (requested auto)"),
        "{line}"
    );
    println!("{out}");
}

/// `https://`: the Quick Start through a TLS front (rustls, a fresh test CA) relaying to the
/// gateway. With the CA in `AWS_CA_BUNDLE` every op completes byte-exact over `http` (the RDMA
/// dialects need `http://`); without it the first op fails and the message names the
/// certificate problem and how to trust the CA.
#[test]
fn quickstart_over_https_needs_the_right_ca() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("quickstart", dir.path());
    let gw = gateway(&dir.path().join("objects"));
    let front = tls_front::TlsFront::start(gw.local_addr());
    let endpoint = format!("https://127.0.0.1:{}", front.port);
    let ca = front.write_ca(dir.path());
    let ok = run_with_env(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, "http"],
        dir.path(),
        &[("AWS_CA_BUNDLE", ca.to_str().unwrap())],
    );
    let out = expect_ok(&ok, "quickstart ok");
    assert!(out.contains("dialects: http=5\n"), "{out}");
    println!("{out}");

    let refused = run(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, "http"],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    // check.h prints the code: hipObjNetworkError is 18.
    assert!(stderr.contains("-> 18 (network error"), "{stderr}");
    assert!(
        stderr.contains("TLS: certificate issued by an unknown CA")
            && stderr.contains("AWS_CA_BUNDLE"),
        "{stderr}"
    );
    println!("{stderr}");
    gw.shutdown();
}

#[test]
fn token_helpers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("tokens", dir.path());
    let out = run(&exe, &[], dir.path());
    expect_ok(&out, "tokens ok");
}

#[test]
fn token_helpers_linked_statically() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_static("tokens", dir.path());
    let ldd = std::process::Command::new("ldd")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("libhipobj"),
        "linked dynamically"
    );
    let out = run(&exe, &[], dir.path());
    expect_ok(&out, "tokens ok");
}

/// `hipObjConfig_t.fabric = HIPOBJ_FABRIC_HTTP` against the gateway with the soft RDMA target
/// (which pairs under the default AUTO, see `quickstart_over_rdma_soft`): the library never
/// pairs and every op goes over `http`, byte-exact.
#[test]
fn http_fabric_against_a_soft_gateway_is_http() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("quickstart", dir.path());
    let gw = gateway_soft(&dir.path().join("objects"));
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, "http", "0", "http"],
        dir.path(),
    );
    let out = expect_ok(&out, "quickstart ok");
    gw.shutdown();
    assert!(out.contains("dialects: http=5\n"), "{out}");
    println!("{out}");
}

/// `HIPOBJ_FABRIC_SOFT` against the soft gateway: every op over `rdma-soft` (explicitly asked
/// for, rather than chosen by AUTO on a host without verbs).
#[test]
fn soft_fabric_against_a_soft_gateway_is_rdma_soft() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("batch", dir.path());
    let gw = gateway_soft(&dir.path().join("objects"));
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, "rdma-soft", "soft"],
        dir.path(),
    );
    let out = expect_ok(&out, "batch ok 1000 range-gets");
    gw.shutdown();
    assert!(out.contains("dialects: rc-persistent=1002\n"), "{out}");
    println!("{out}");
}

/// `HIPOBJ_FABRIC_SOFT` against s3s-fs (a plain S3 server that refuses the pairing routes):
/// the engine's `Fabric::Soft` rule is per-request HTTP fallback, so every op succeeds over
/// `http`, byte-exact — no error, no op lost.
#[test]
fn soft_fabric_against_s3s_fs_falls_back_to_http() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("quickstart", dir.path());
    let server = s3s_fs::S3sFs::start();
    server.create_bucket_dir(BUCKET);
    let out = run(
        &exe,
        &[
            &server.endpoint_url(),
            s3s_fs::ACCESS_KEY,
            s3s_fs::SECRET_KEY,
            BUCKET,
            "http",
            "0",
            "soft",
        ],
        dir.path(),
    );
    let out = expect_ok(&out, "quickstart ok");
    assert!(out.contains("dialects: http=5\n"), "{out}");
    println!("{out}");
}

/// `HIPOBJ_FABRIC_VERBS` on a host where libibverbs lists no device (this one; the VM lane
/// runs the verbs case, `benches/rxe/guest.sh`): `hipObjInit` fails with `hipObjNicNotFound`
/// and says why, instead of carrying the payloads over HTTP unasked.
#[test]
fn verbs_fabric_without_a_verbs_device_is_nic_not_found() {
    let probe = engine::verbs::probe();
    assert!(
        !probe.is_available(),
        "this test needs a host without RDMA verbs devices (found {probe:?}); the VM lane \
         covers HIPOBJ_FABRIC_VERBS with a device"
    );
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("quickstart", dir.path());
    let gw = gateway_soft(&dir.path().join("objects"));
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(
        &exe,
        &[
            &endpoint,
            ACCESS,
            SECRET,
            BUCKET,
            "rdma-verbs",
            "0",
            "verbs",
        ],
        dir.path(),
    );
    gw.shutdown();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // check.h prints the code: hipObjNicNotFound is 8.
    assert!(
        stderr.contains("hipObjInit(&config) -> 8 (") && stderr.contains("HIPOBJ_FABRIC_VERBS"),
        "{stderr}"
    );
    println!("{stderr}");
}

/// Runs `capi/tests/c/cuobject.c` against the gateway without an RDMA target (it answers a DC
/// descriptor with `x-amz-rdma-reply: 501`, as in `engine/tests/rdma_cuobject_wire.rs`).
fn run_cuobject(dialect: &str, mode: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("cuobject", dir.path());
    let gw = gateway(&dir.path().join("objects"));
    let endpoint = format!("http://{}", gw.local_addr());
    let out = run(
        &exe,
        &[&endpoint, ACCESS, SECRET, BUCKET, dialect, mode],
        dir.path(),
    );
    let out = expect_ok(&out, "cuobject ok");
    gw.shutdown();
    assert!(out.contains("dialects: http=3\n"), "{out}");
    println!("{out}");
    out
}

/// cuObject from C (`HIPOBJ_DIALECT_CUOBJECT` + `dcTokenProvider`): the C provider is asked,
/// on a worker thread, for exactly each op's buffer range and direction; the gateway cannot
/// serve DC, so every op then completes over `http`, byte-exact.
#[test]
fn cuobject_provider_mints_per_op_and_a_dc_less_gateway_falls_back_to_http() {
    run_cuobject("4", "mint");
}

/// A provider that returns non-zero: no descriptor, each op over `http`, none fails.
#[test]
fn cuobject_provider_refusing_sends_ops_over_http() {
    run_cuobject("4", "refuse");
}

/// `HIPOBJ_DIALECT_AUTO` with a provider against a gateway that refuses both RC dialects:
/// negotiation reaches cuObject (the provider is asked for every op), then HTTP.
#[test]
fn auto_dialect_negotiates_cuobject_when_a_provider_is_set() {
    run_cuobject("0", "mint");
}

/// The success rule of uploads (issue 33): against the gateway, whose PUT answers echo our
/// CRC64NVME, every PUT is verified (`hipObjGetLastOpVerified`, `HIPOBJ_COMPLETION_VERIFIED`)
/// and `HIPOBJ_CONFIG_VERIFY` changes nothing; through the fault relay dropping that echo (a
/// server that proves nothing), the PUT succeeds unverified by default and fails with
/// `hipObjIntegrityError` under `HIPOBJ_CONFIG_VERIFY`.
#[test]
fn an_unproven_put_is_visible_and_verify_makes_it_an_error() {
    use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("verify", dir.path());
    let gw = gateway(&dir.path().join("objects"));
    let direct = format!("http://{}", gw.local_addr());
    let out = run(
        &exe,
        &[&direct, ACCESS, SECRET, BUCKET, "proven"],
        dir.path(),
    );
    println!("{}", expect_ok(&out, "verify ok"));
    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::always(FaultKind::DropHeader(
            "x-amz-checksum-crc64nvme".into(),
        ))],
    )
    .unwrap();
    let relayed = format!("http://{}", relay.addr());
    let out = run(
        &exe,
        &[&relayed, ACCESS, SECRET, BUCKET, "unproven"],
        dir.path(),
    );
    println!("{}", expect_ok(&out, "verify ok"));
    gw.shutdown();
}
