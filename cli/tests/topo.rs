//! `hipobj topo` against the committed sysfs fixtures of the `numa` crate.

use std::path::{Path, PathBuf};

use hipobj_cli::topo::{TopoArgs, run};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../numa/fixtures")
}

fn topo(root: Option<PathBuf>, json: bool) -> (i32, String, String) {
    topo_with(root, json, &[], 16)
}

fn topo_with(
    root: Option<PathBuf>,
    json: bool,
    nics: &[&str],
    workers_per_nic: usize,
) -> (i32, String, String) {
    let args = TopoArgs {
        sysfs_root: root,
        json,
        nics: nics.iter().map(|s| s.to_string()).collect(),
        workers_per_nic,
        // The fixtures are nvidia-smi's output, escapes included.
        color: hipobj_cli::topo::Color::Always,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&args, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn hgx_matrix_matches_expected_file() {
    let (code, out, err) = topo(Some(fixtures().join("hgx-h100")), false);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err, "");
    let expected = std::fs::read_to_string(fixtures().join("hgx-h100.topo.txt")).unwrap();
    // The matrix and legends are nvidia-smi's format; the RDMA device listing follows them.
    let (matrix, rdma) = out
        .split_once("\nRDMA devices:\n")
        .expect("an RDMA device section");
    assert_eq!(matrix, expected);
    assert_eq!(rdma.matches("closest NIC for GPU").count(), 8, "{rdma}");
}

/// On the H200 VM our matrix is byte-for-byte what `nvidia-smi topo -m` printed there, except
/// for the legend's NVLink line, which we never print.
#[test]
fn h200_matrix_matches_nvidia_smi() {
    let (code, out, err) = topo(Some(fixtures().join("h200-vm")), false);
    assert_eq!(code, 0, "{err}");
    let smi = std::fs::read_to_string(fixtures().join("h200-vm.nvidia-smi-topo.txt")).unwrap();
    let smi: String = smi
        .lines()
        .filter(|l| !l.starts_with("  NV#"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (matrix, buffers) = out
        .split_once("\nGPU buffers")
        .expect("a GPU buffers section");
    assert_eq!(matrix, smi);
    assert_eq!(
        buffers,
        " (engine, Placement::Auto: 16 workers):\n\n  GPU0 0000:00:06.0: no RDMA NIC with a worker -> \
         any of workers 0-15 on cores 0-15\n"
    );
}

/// Each GPU's buffers: its own NIC and that NIC's workers, on every fixture with NICs.
#[test]
fn gpu_buffers_section_names_nics_and_workers() {
    let (code, out, err) = topo_with(Some(fixtures().join("hgx-h100")), false, &[], 2);
    assert_eq!(code, 0, "{err}");
    let (_, buffers) = out.split_once("\nGPU buffers").unwrap();
    assert!(
        buffers.starts_with(" (engine, Placement::Auto: 16 workers):\n"),
        "{buffers}"
    );
    assert!(
        buffers.contains("\n  GPU0 0000:1b:00.0: mlx5_0 (PIX) -> workers 0-1 on cores 1,5\n"),
        "{buffers}"
    );
    assert!(
        buffers.contains("\n  GPU7 0000:df:00.0: mlx5_11 (PIX) -> workers 14-15 on cores 59,63\n"),
        "{buffers}"
    );
    let (code, out, _) = topo_with(Some(fixtures().join("two-socket-2nic")), false, &[], 1);
    assert_eq!(code, 0);
    assert!(
        out.contains("  GPU1 0000:31:00.0: mlx5_0 (NODE) -> worker 0 on core 1\n"),
        "{out}"
    );
    assert!(
        out.contains("  GPU2 0000:91:00.0: mlx5_1 (PHB) -> worker 1 on core 32\n"),
        "{out}"
    );
    // Restricted to two NICs by name and PCI address: the other GPUs of each socket use the
    // socket's remaining NIC (NODE), never the other socket's.
    let (code, out, err) = topo_with(
        Some(fixtures().join("mi300x")),
        false,
        &["ionic_0", "0000:13:00.0"],
        1,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  GPU0 0000:16:00.0: bnxt_re0 (PXB) -> worker 0 on core 1\n"),
        "{out}"
    );
    assert!(
        out.contains("  GPU3 0000:76:00.0: bnxt_re0 (NODE) -> worker 0 on core 1\n"),
        "{out}"
    );
    assert!(
        out.contains("  GPU5 0000:b6:00.0: ionic_0 (NODE) -> worker 1 on core 48\n"),
        "{out}"
    );
}

#[test]
fn a_nic_that_names_nothing_is_exit_1_listing_the_nics() {
    let (code, out, err) = topo_with(Some(fixtures().join("mi300x")), false, &["mlx5_0"], 1);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(
        err.starts_with("hipobj: error: no RDMA NIC matches \"mlx5_0\""),
        "{err}"
    );
    assert!(err.contains("bnxt_re0, bnxt_re1"), "{err}");
}

#[test]
fn dev_vm_reports_no_devices() {
    let (code, out, _) = topo(Some(fixtures().join("dev-vm")), false);
    assert_eq!(code, 0);
    assert!(out.starts_with("No GPU or RDMA NIC found under "), "{out}");
    assert!(out.ends_with("NUMA nodes:\n  node0: CPUs 0-1\n"), "{out}");
}

#[test]
fn hgx_json() {
    let (code, out, err) = topo(Some(fixtures().join("hgx-h100")), true);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(v["gpus"][0]["pci"], "0000:1b:00.0");
    assert_eq!(v["gpus"][0]["vendor"], "nvidia");
    assert_eq!(v["gpus"][0]["device_id"], "0x2330");
    assert_eq!(v["gpus"][0]["class"], "0x030200");
    assert_eq!(v["nics"][0]["vendor"], "0x15b3");
    assert_eq!(v["gpus"][4]["local_cpus"], "56-111,168-223");
    assert_eq!(v["nics"][6]["name"], "mlx5_10");
    assert_eq!(v["nics"][6]["netdevs"][0], "ibp206s0");
    assert_eq!(v["nodes"][1]["cpus"], "56-111,168-223");
    assert_eq!(v["net_functions"][0]["netdevs"][0], "eno1");
    assert_eq!(v["matrix"]["labels"][8], "NIC0");
    assert_eq!(v["matrix"]["cells"][0][0], serde_json::Value::Null);
    assert_eq!(v["matrix"]["cells"][0][8], "PIX");
    assert_eq!(v["matrix"]["cells"][0][12], "SYS");
    for g in 0..8 {
        assert_eq!(v["closest_nics"][g]["class"], "PIX");
        assert_eq!(v["closest_nics"][g]["nics"], serde_json::json!([g]));
    }
    assert_eq!(v["workers"].as_array().unwrap().len(), 8);
    assert_eq!(v["workers"][4]["target"], serde_json::json!({"nic": 4}));
    assert_eq!(v["workers"][4]["core"], 56);
    // 16 engine workers per NIC (the default): GPU g's buffers use NIC g's sixteen.
    assert_eq!(v["engine_workers"].as_array().unwrap().len(), 128);
    assert_eq!(v["engine_workers"][16]["nic"], "mlx5_3");
    for g in 0..8 {
        assert_eq!(v["buffers"][g]["nics"][0], v["nics"][g]["name"]);
        assert_eq!(v["buffers"][g]["class"], "PIX");
        let w: Vec<u64> = (16 * g as u64..16 * g as u64 + 16).collect();
        assert_eq!(v["buffers"][g]["workers"], serde_json::json!(w));
    }
}

#[test]
fn h200_json_has_node_worker() {
    let (code, out, _) = topo(Some(fixtures().join("h200-vm")), true);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nics"], serde_json::json!([]));
    assert_eq!(v["closest_nics"][0]["nics"], serde_json::json!([]));
    assert_eq!(v["closest_nics"][0]["class"], serde_json::Value::Null);
    assert_eq!(
        v["workers"],
        serde_json::json!([{"target": {"node": 0}, "cpus": "0-15", "core": 1}])
    );
    assert_eq!(
        v["buffers"],
        serde_json::json!([{"gpu": 0, "nics": [], "class": null, "workers": []}])
    );
}

#[test]
fn bad_root_is_exit_1_with_message() {
    let (code, out, err) = topo(Some(PathBuf::from("/nonexistent/hipobj-topo")), false);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(
        err.starts_with("hipobj: error: /nonexistent/hipobj-topo: "),
        "{err}"
    );
}

#[test]
fn malformed_fixture_is_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("sys/devices/system/node/node0");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::write(node.join("cpulist"), "5-2\n").unwrap();
    let (code, _, err) = topo(Some(dir.path().to_path_buf()), true);
    assert_eq!(code, 1);
    assert!(
        err.contains("node0/cpulist: malformed cpulist: range 5-2 ends before it starts"),
        "{err}"
    );
}

/// `hipobj topo | head`: a pipe gets no ANSI escapes unless `--color always` asks for them;
/// the text is otherwise the same.
#[test]
fn a_pipe_gets_no_escape_sequences() {
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hipobj"))
            .arg("topo")
            .arg("--sysfs-root")
            .arg(fixtures().join("hgx-h100"))
            .args(extra)
            .env_remove("NO_COLOR")
            .output()
            .expect("run hipobj");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let piped = run(&[]);
    assert!(!piped.contains('\x1b'), "{piped}");
    assert!(
        piped.contains("CPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"),
        "{piped}"
    );
    let always = run(&["--color", "always"]);
    assert!(always.contains("\t\x1b[4mGPU0\t"), "{always}");
    assert_eq!(always.replace("\x1b[4m", "").replace("\x1b[0m", ""), piped);
    assert!(!run(&["--color", "never"]).contains('\x1b'));
}
