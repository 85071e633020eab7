//! Checks the fuzz workspace on stable Rust, where libFuzzer cannot instrument:
//! - every `fuzz_targets/*.rs` is declared as a `[[bin]]` and is a one-liner into
//!   a library's `fuzzing` module (`s3_lite::fuzzing`, `ring_api::fuzzing`, `engine::fuzzing` (feature `test-support`),
//!   `hipobj_gateway::fuzzing`, `hipobj_safetensors::fuzzing`) (bodies live in the library, where unit tests run them);
//! - every target binary replays its committed seeds (`seeds/<target>/*`) without a failed
//!   assertion. libFuzzer's `main` runs each file argument once, so this works uninstrumented.

use std::path::{Path, PathBuf};
use std::process::Command;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

/// (target name, binary path) for every `[[bin]]` of this package.
macro_rules! targets {
    ($($name:literal),* $(,)?) => { &[$(($name, env!(concat!("CARGO_BIN_EXE_", $name)))),*] };
}

const TARGETS: &[(&str, &str)] = targets![
    "rc_token",
    "dc_descriptor",
    "rdma_reply",
    "rdma_bytes",
    "v2_headers",
    "v2_target",
    "token_dispatch",
    "checksum_base64",
    "response_head",
    "exchange",
    "chunked_body",
    "error_xml",
    "list_objects_v2",
    "list_buckets",
    "sigv4_authorization",
    "sigv4_canonical",
    "ring_ops",
    "request_head",
    "soft_frame",
    "rdma_answers",
    "gateway_request_parts",
    "safetensors_header",
    "daemon_wire",
];

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

#[test]
fn every_target_file_is_a_declared_one_liner() {
    let manifest = std::fs::read_to_string(Path::new(DIR).join("Cargo.toml")).unwrap();
    let sources = files_in(&Path::new(DIR).join("fuzz_targets"));
    assert_eq!(
        sources.len(),
        TARGETS.len(),
        "fuzz_targets/ and the TARGETS list differ"
    );
    for src in sources {
        let name = src.file_stem().unwrap().to_str().unwrap().to_owned();
        assert!(
            TARGETS.iter().any(|(n, _)| *n == name),
            "{name} missing from TARGETS"
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{name} has no [[bin]]"
        );
        let text = std::fs::read_to_string(&src).unwrap();
        assert!(
            text.contains("::fuzzing::"),
            "{name}: body must live in a library's `fuzzing` module"
        );
        let code_lines = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("//"))
            .count();
        assert!(
            code_lines <= 3,
            "{name}: targets are one-liners ({code_lines} lines)"
        );
    }
}

#[test]
fn every_target_replays_its_seeds() {
    let mut replayed = 0;
    for (name, exe) in TARGETS {
        let seeds = files_in(&Path::new(DIR).join("seeds").join(name));
        if seeds.is_empty() {
            eprintln!("{name}: no seeds under seeds/{name}, replay skipped");
            continue;
        }
        let out = Command::new(exe).args(&seeds).output().unwrap();
        assert!(
            out.status.success(),
            "{name} failed on its seeds:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        replayed += 1;
    }
    assert!(replayed >= 8, "only {replayed} targets have seeds");
}
