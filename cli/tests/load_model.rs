//! The safetensors loader (`hipobj_loader`, re-exported as `hipobj_cli::load`; behind
//! `hipobj load` and the Python package) against the gateway started in this process with the
//! soft RDMA fabric: a sharded model lands byte-exact in registered memory with every range
//! proven by the gateway's checksums and carried over RDMA; a corrupt header fails the load
//! before anything is fetched; `hipobj load --json` reports the same.

use std::time::Duration;

use engine::{Engine, RegisterOptions};
use hipobj_cli::load::model::{self, FetchOptions, LoadError, Verification};
use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use s3_lite::credentials::Credentials;
use serde_json::{Value, json};

const ACCESS: &str = "load-test";
const SECRET: &str = "load-test-secret-0123456789";

#[path = "support/cli.rs"]
mod cli;
use cli::random_bytes;

/// A safetensors file: `(name, dtype, shape, bytes)` per tensor, in order.
fn safetensors(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            (*name).to_owned(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let mut json = Value::Object(header).to_string().into_bytes();
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&data);
    out
}

fn put(url: &str, dir: &std::path::Path, key: &str, bytes: &[u8]) {
    let file = dir.join(key.replace('/', "_"));
    std::fs::write(&file, bytes).unwrap();
    let dest = format!("s3://models/{key}");
    let args = ["put", file.to_str().unwrap(), &dest, "--fabric", "http"];
    cli::succeeded(&args, cli::hipobj(url, ACCESS, SECRET, &args));
}

#[test]
fn a_sharded_model_loads_exactly_over_rdma_and_a_corrupt_header_loads_nothing() {
    let root = tempfile::tempdir().unwrap();
    let soft = RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap();
    let gateway = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET.to_owned())
        .rdma_target(soft)
        .start()
        .unwrap();
    let url = format!("http://{}", gateway.local_addr());
    let mb = ["mb", "s3://models"];
    cli::succeeded(&mb, cli::hipobj(&url, ACCESS, SECRET, &mb));
    let dir = tempfile::tempdir().unwrap();
    // Shard 1: a 9 MiB tensor (split into two range-gets) and small neighbours (coalesced).
    let big = random_bytes(9 << 20, 1);
    let one = safetensors(&[
        ("big", "U8", vec![9 << 20], big.clone()),
        ("small.a", "F32", vec![3], random_bytes(12, 2)),
        ("small.b", "I64", vec![], random_bytes(8, 3)),
    ]);
    let two = safetensors(&[("z", "F16", vec![2, 5], random_bytes(20, 4))]);
    put(&url, dir.path(), "m/model-1.safetensors", &one);
    put(&url, dir.path(), "m/model-2.safetensors", &two);
    let index = json!({"weight_map": {"big": "model-1.safetensors", "small.a": "model-1.safetensors",
        "small.b": "model-1.safetensors", "z": "model-2.safetensors"}});
    put(
        &url,
        dir.path(),
        "m/model.safetensors.index.json",
        index.to_string().as_bytes(),
    );

    let engine = Engine::builder()
        .endpoint_url(&url)
        .credentials(Credentials::new(ACCESS, SECRET))
        .region("us-east-1")
        .build()
        .unwrap();
    let loaded = model::open(&engine, "models", "m/", &mut || false).unwrap();
    assert_eq!(loaded.tensor_count(), 4);
    let keys: Vec<&str> = loaded.files.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(keys, ["m/model-1.safetensors", "m/model-2.safetensors"]);
    let bufs: Vec<_> = loaded
        .files
        .iter()
        .map(|f| {
            let len = usize::try_from(f.data_len()).unwrap();
            Some(
                engine
                    .register_host(len, RegisterOptions::pageable())
                    .unwrap(),
            )
        })
        .collect();
    let report = model::fetch(
        &engine,
        &loaded,
        &bufs,
        &FetchOptions::for_engine(&engine),
        None,
        &mut || false,
    )
    .unwrap();
    // Shard 1 is one run of 9 MiB + 20 bytes: an 8 MiB read, then the rest of `big` with the
    // two small tensors coalesced behind it; shard 2 is one read.
    assert_eq!(report.requests, 3);
    assert_eq!(report.paths.0, [("rdma-soft", loaded.data_bytes())]);
    assert_eq!(report.paths.dialect(), "rc-persistent");
    assert_eq!(report.verification, [Some(Verification::RangeChecksums); 2]);
    for (f, (buf, file)) in loaded.files.iter().zip(bufs.iter().zip([&one, &two])) {
        let start = usize::try_from(f.header.data_start).unwrap();
        let got = engine.read(buf.unwrap(), 0, f.data_len()).unwrap();
        assert_eq!(&got[..], &file[start..], "{}", f.key);
    }
    for b in bufs.into_iter().flatten() {
        engine.deregister(b, Duration::from_secs(5)).unwrap();
    }

    // A shard whose header promises more bytes than the file holds: refused at open, so the
    // caller never allocates (open returns no model).
    let mut bad = two.clone();
    bad.truncate(bad.len() - 2);
    put(&url, dir.path(), "m/model-2.safetensors", &bad);
    match model::open(&engine, "models", "m/", &mut || false) {
        Err(LoadError::Header { key, source, .. }) => {
            assert_eq!(key, "m/model-2.safetensors");
            assert!(source.to_string().contains("file holds 18"), "{source}");
        }
        other => panic!("expected a header error, got {other:?}"),
    }
    let args = ["load", "s3://models/m/", "--json"];
    let out = cli::hipobj(&url, ACCESS, SECRET, &args);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("corrupt safetensors header"), "{stderr}");

    put(&url, dir.path(), "m/model-2.safetensors", &two);
    let v: Value = serde_json::from_slice(&cli::succeeded(
        &args,
        cli::hipobj(&url, ACCESS, SECRET, &args),
    ))
    .unwrap();
    assert_eq!(v["tensors"], 4);
    assert_eq!(v["bytes"], loaded.data_bytes());
    assert_eq!(v["paths"], json!({"rdma-soft": loaded.data_bytes()}));
    assert_eq!(v["dialect"], "rc-persistent");
    assert_eq!(v["files"][0]["verification"], "range-checksums");
}
