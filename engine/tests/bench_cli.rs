//! `hipobj bench` (cli/src/bench.rs, compiled here against this crate) against s3s-fs.

mod common;

#[allow(dead_code, unreachable_pub)]
#[path = "../../cli/src/bench.rs"]
mod bench;
/// The `--json` shapes bench.rs refers to as `crate::json_out`.
#[path = "../../cli/src/json_out.rs"]
mod json_out;
/// The path and dialect names bench.rs refers to as `crate::paths` (the loader crate's).
#[allow(dead_code, unreachable_pub)]
#[path = "../../loader/src/paths.rs"]
mod paths;
/// The `--soft-nics` topology bench.rs refers to as `crate::soft_nics`.
#[allow(dead_code, unreachable_pub)]
#[path = "../../cli/src/soft_nics.rs"]
mod soft_nics;

use clap::Parser;
use common::{S3sFs, pattern, put_file, s3s_fs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: bench::BenchArgs,
}

fn run(server: &S3sFs, argv: &[&str]) -> (i32, String, String) {
    // `--json-out` stands in for the global `--json` the real binary copies in.
    let json = argv.contains(&"--json-out");
    let rest = argv.iter().copied().filter(|a| *a != "--json-out");
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(rest)).unwrap();
    let args = cli.args.with_global(
        Some(server.endpoint_url()),
        Some("us-east-1".into()),
        json,
        true,
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = bench::run(&args, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn bench_reports_table_and_json() {
    let server = S3sFs::start();
    put_file(&server, "bench", "obj", &pattern(1 << 20, 5));
    // Credentials come from the environment, as for the real CLI.
    // SAFETY: no other thread reads the environment concurrently in this single-test binary.
    unsafe {
        std::env::set_var("AWS_ACCESS_KEY_ID", s3s_fs::ACCESS_KEY);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", s3s_fs::SECRET_KEY);
    }
    let (code, out, err) = run(
        &server,
        &[
            "s3://bench/obj",
            "--ops",
            "300",
            "--size",
            "4KiB",
            "--concurrency",
            "8",
            "--workers",
            "1",
        ],
    );
    assert_eq!(code, 0, "stderr: {err}\nstdout: {out}");
    for label in ["ops/s", "GB/s", "p50", "p99", "p999", "cpu s", "errors"] {
        assert!(out.contains(label), "table lacks {label}: {out}");
    }
    let (code, out, err) = run(
        &server,
        &[
            "s3://bench/obj",
            "--ops",
            "200",
            "--size",
            "64KiB",
            "--concurrency",
            "4",
            "--json-out",
        ],
    );
    assert_eq!(code, 0, "stderr: {err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ops"], 200);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["size"], 65536);
    assert_eq!(v["object_size"], 1 << 20);
    let (ops_s, gb_s) = (
        v["ops_per_s"].as_f64().unwrap(),
        v["gb_per_s"].as_f64().unwrap(),
    );
    assert!(
        (gb_s - ops_s * 65536.0 / 1e9).abs() < 1e-6 * ops_s.max(1.0),
        "GB/s = ops/s x size"
    );
    assert!(v["p50_us"].as_f64().unwrap() <= v["p99_us"].as_f64().unwrap());
    assert!(v["cpu_s"].as_f64().unwrap() > 0.0);

    let (code, _, err) = run(&server, &["s3://bench/missing", "--ops", "10"]);
    assert_eq!(code, 1);
    assert!(err.contains("NotFound"), "{err}");
}
