//! Ctrl-C during a download (issue 18): SIGINT or SIGTERM sent to a `hipobj get` that is stuck
//! mid-object removes its hidden `.NAME.hipobj-partial` file and exits 130 or 143, on the
//! blocking client and on the engine. The server is s3s-fs behind a relay that forwards the first
//! few MiB of replies and then stalls, so the download is reliably in progress when the signal
//! arrives.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

/// A TCP relay that forwards requests in full and replies until `budget` bytes in total have
/// gone back to clients; then it holds every connection open without forwarding more.
struct StallingRelay {
    addr: SocketAddr,
    stalled: Arc<AtomicBool>,
}

impl StallingRelay {
    fn start(upstream: SocketAddr, budget: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stalled = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let flag = stalled.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(upstream) else {
                    return;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pipe(c2, s2));
                let (sent, flag) = (sent.clone(), flag.clone());
                std::thread::spawn(move || replies(server, client, budget, &sent, &flag));
            }
        });
        StallingRelay { addr, stalled }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 64 << 10];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn replies(
    mut from: TcpStream,
    mut to: TcpStream,
    budget: u64,
    sent: &AtomicU64,
    stalled: &AtomicBool,
) {
    let mut buf = [0u8; 16 << 10];
    loop {
        let room = budget.saturating_sub(sent.load(Ordering::SeqCst));
        if room == 0 {
            stalled.store(true, Ordering::SeqCst);
            // Hold the connection: the client waits for bytes that never come.
            std::thread::sleep(Duration::from_secs(120));
            return;
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        match from.read(&mut buf[..want]) {
            Ok(n @ 1..) => {
                sent.fetch_add(n as u64, Ordering::SeqCst);
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            _ => return,
        }
    }
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

/// Starts `hipobj get` of a 24 MiB object through a relay that stalls after 3 MiB, sends
/// `signal` once the partial file exists and the relay stalled, and checks the aftermath.
fn interrupted_get_leaves_nothing(signal: &str, code: i32, extra: &[&str]) {
    let server = S3sFs::start();
    server.create_bucket_dir("slow");
    server.put_file("slow", "big.bin", &cli::random_bytes(24 << 20, 9));
    let relay = StallingRelay::start(server.addr, 3 << 20);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("big.bin");
    let partial = dir.path().join(".big.bin.hipobj-partial");

    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["get", "s3://slow/big.bin", dest.to_str().unwrap()])
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", format!("http://{}", relay.addr))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let in_progress = wait_until(Duration::from_secs(30), || {
        relay.stalled.load(Ordering::SeqCst) && partial.exists()
    });
    if !in_progress {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "the download never stalled mid-object: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Give the client a moment to write what it received.
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal}");
    let exit = wait_exit(&mut child, Duration::from_secs(20));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let exit = exit.unwrap_or_else(|| panic!("hipobj ignored {signal}: {stderr}"));
    assert_eq!(
        exit.code(),
        Some(code),
        "{signal}: {exit:?}, stderr: {stderr}"
    );
    assert!(!partial.exists(), "{signal} left {}", partial.display());
    assert!(!dest.exists(), "{signal} left a file under the final name");
    assert!(dir_is_empty(dir.path()), "{signal} left files behind");
    assert!(stderr.contains("interrupted"), "{stderr}");
}

fn dir_is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn sigint_during_a_blocking_get_removes_the_partial_file_and_exits_130() {
    interrupted_get_leaves_nothing("-INT", 130, &["--fabric", "http"]);
}

#[test]
fn sigterm_during_a_blocking_get_removes_the_partial_file_and_exits_143() {
    interrupted_get_leaves_nothing("-TERM", 143, &["--fabric", "http"]);
}

#[test]
fn sigint_during_an_engine_get_removes_the_partial_file_and_exits_130() {
    interrupted_get_leaves_nothing("-INT", 130, &["--fabric", "soft"]);
}
