//! A real S3 server for integration tests: s3s-fs 0.14.1 on 127.0.0.1.
//!
//! s3s-fs verifies SigV4 strictly, serves ranges and multipart, and validates
//! `x-amz-checksum-crc64nvme`. The binary is found in this order: `$S3S_FS_BIN`, `s3s-fs` on
//! `PATH`, `~/.cargo/bin/s3s-fs`, `<workspace>/.tools/bin/s3s-fs`. When none exists the test
//! fails with the command that installs it (`benches/scripts/install-s3s-fs.sh`, which
//! `benches/scripts/test.sh` and `.ci/run` run before the tests): a test never spends minutes
//! installing software behind the runner's back.
//!
//! Shared between crates with `#[path = "…/cli/tests/support/s3s_fs.rs"] mod s3s_fs;`.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use md5::Digest as _;
use std::time::{Duration, Instant};

/// Access key the test server is started with.
pub const ACCESS_KEY: &str = "hipobjtestkey";
/// Secret key the test server is started with.
pub const SECRET_KEY: &str = "hipobjtestsecret/1234567890abcdef";

fn workspace_root() -> PathBuf {
    // Every crate of the workspace sits one level below the root.
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

fn candidate_paths() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("S3S_FS_BIN") {
        out.push(PathBuf::from(p));
    }
    if let Some(path) = std::env::var_os("PATH") {
        out.extend(std::env::split_paths(&path).map(|d| d.join("s3s-fs")));
    }
    if let Some(home) = std::env::var_os("HOME") {
        out.push(PathBuf::from(home).join(".cargo/bin/s3s-fs"));
    }
    out.push(workspace_root().join(".tools/bin/s3s-fs"));
    out
}

/// Path of the s3s-fs binary; panics with the install command when there is none.
pub fn binary() -> PathBuf {
    let candidates = candidate_paths();
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return found.clone();
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    panic!(
        "s3s-fs 0.14.1, the S3 server these tests start, is not installed (looked at {}).\n\
         Install it once (about 3 minutes, needs network): {}/benches/scripts/install-s3s-fs.sh\n\
         (= cargo install --locked s3s-fs@0.14.1 --features binary --root .tools), or set S3S_FS_BIN.",
        looked.join(", "),
        workspace_root().display()
    );
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// A running s3s-fs process serving a temporary directory. Killed on drop.
pub struct S3sFs {
    child: Child,
    /// `127.0.0.1:port`.
    pub addr: SocketAddr,
    /// The directory it serves (buckets are its sub-directories).
    pub root: tempfile::TempDir,
}

impl S3sFs {
    /// Starts a server with [`ACCESS_KEY`]/[`SECRET_KEY`] and waits until it accepts connections.
    pub fn start() -> Self {
        let binary = binary();
        for _attempt in 0..5 {
            let root = tempfile::tempdir().expect("temp dir");
            let port = free_port();
            let child = Command::new(&binary)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
                .arg(root.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn s3s-fs");
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut server = S3sFs { child, addr, root };
            if server.wait_ready(Duration::from_secs(10)) {
                return server;
            }
            // The port may have been taken between probing and binding; try another.
            let _ = server.child.kill();
        }
        panic!("s3s-fs did not start");
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                // The port was free when probed, but another test's listener may have taken
                // it since: then s3s-fs fails to bind and exits while our connect reached the
                // other server. Still alive a moment later means the listener is s3s-fs.
                std::thread::sleep(Duration::from_millis(150));
                return matches!(self.child.try_wait(), Ok(None));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `http://127.0.0.1:port`.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates a bucket directly on disk (s3s-fs maps buckets to directories).
    pub fn create_bucket_dir(&self, bucket: &str) {
        std::fs::create_dir_all(self.root.path().join(bucket)).expect("create bucket dir");
    }

    /// Writes an object straight into the served directory, with the ETag sidecar that s3s-fs's
    /// PutObject would store. Without the sidecar s3s-fs MD5-hashes the whole file on every GET
    /// (measured: 27 vs 933 ops/s for 4 KiB ranges of a 16 MiB object), which would make every
    /// test measure the server's hashing.
    pub fn put_file(&self, bucket: &str, key: &str, data: &[u8]) -> PathBuf {
        use base64::Engine as _;
        let path = self.root.path().join(bucket).join(key);
        std::fs::create_dir_all(path.parent().expect("key has a parent dir")).expect("create dirs");
        std::fs::write(&path, data).expect("write object");
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let md5 = md5::Md5::digest(data);
        let etag: String = md5.iter().map(|b| format!("{b:02x}")).collect();
        let sidecar = self.root.path().join(format!(
            ".bucket-{}.object-{}.internal.json",
            enc(bucket),
            enc(key)
        ));
        std::fs::write(sidecar, format!("{{\"e_tag\":\"{etag}\"}}")).expect("write sidecar");
        path
    }

    /// Kills the server (to test failures mid-run); the directory stays.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        self.kill();
    }
}
