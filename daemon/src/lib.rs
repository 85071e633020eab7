//! `hipobj daemon`: one engine per node, shared by every process that attaches to it.
//!
//! Processes attach with `HIPOBJ_DAEMON=/path/to/socket` or
//! [`engine::EngineBuilder::daemon`]; they then use the same [`engine::Engine`] and
//! [`engine::Queue`] API as with an engine of their own. The daemon:
//!
//! - listens on a `SOCK_SEQPACKET` Unix socket (mode 0600 by default), admits peers whose uid
//!   it allows (`SO_PEERCRED`), and answers their control requests
//!   ([`engine::attach::wire`]);
//! - creates each client queue's rings in a sealed memfd both processes map; the client's
//!   submissions are validated, their names translated into the engine's (a client names only
//!   what it interned or registered: `names`), and handed to one engine queue per client queue
//!   (`link`); completions go back the same way;
//! - shares [`DaemonConfig::max_in_flight`] operations in the engine equally among the
//!   clients with work and serves them round-robin, so a client's 10,000-entry batch does not
//!   delay another's single GET behind it;
//! - drops a client that sends a malformed message, a descriptor that is not what it claims,
//!   or writes impossible ring indices, and releases everything a departed client held: its
//!   queues (their operations aborted) and its registrations.
//!
//! One thread runs all of this (`server`); the engine's workers do the I/O. The node's thread
//! count is therefore the engine's plus one, whatever the number of clients. docs/daemon.md
//! has the model, the wire, the security rules and the systemd units.

mod link;
mod names;
mod server;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use engine::Engine;
use engine::attach::wire::{ClientStatus, MAX_REPLY, Reply, Request};
use engine::attach::{SeqPacket, SeqPacketListener};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The socket path ([`engine::attach::default_socket_path`] by default).
    pub socket: PathBuf,
    /// The socket file's mode (default `0o600`: the daemon's user only).
    pub mode: u32,
    /// Uids admitted besides the daemon's own.
    pub allow_uids: Vec<u32>,
    /// Operations in the engine at once, over all clients (default 4 ×
    /// [`engine::DEFAULT_CONNECTIONS`] = 256: what one loader process keeps in flight, eight
    /// queues of 32; RDMA GETs free their connection before their bytes land, so more
    /// operations than connections pay off). Clients with work share it equally.
    pub max_in_flight: u32,
    /// Remove the socket file when the daemon stops (default `true`). `false` for a socket
    /// systemd passed ([`SeqPacketListener::from_systemd`]): the socket unit owns that file
    /// and keeps listening on it while the service restarts; removed, no client could
    /// connect again until the socket unit restarted too.
    pub remove_socket: bool,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            socket: engine::attach::default_socket_path(),
            mode: 0o600,
            allow_uids: Vec::new(),
            max_in_flight: 4 * engine::DEFAULT_CONNECTIONS as u32,
            remove_socket: true,
        }
    }
}

impl DaemonConfig {
    fn allows(&self, uid: u32) -> bool {
        uid == current_uid() || self.allow_uids.contains(&uid)
    }
}

fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // The owner of /proc/self is this process's real uid (no libc call needed).
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// Errors starting the daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// Another daemon answers at the socket path.
    #[error("another hipobj daemon already listens at {0}")]
    InUse(PathBuf),
    /// The socket could not be created.
    #[error("cannot listen at {path}: {source}")]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The event loop could not start.
    #[error("event loop: {0}")]
    Poll(#[source] io::Error),
}

/// Binds `config.socket`: removes a stale socket file nobody answers at, refuses one a live
/// daemon answers at, creates the parent directory when missing.
pub fn listen(config: &DaemonConfig) -> Result<SeqPacketListener, DaemonError> {
    let path = &config.socket;
    let err = |source| DaemonError::Listen {
        path: path.clone(),
        source,
    };
    if path.exists() {
        if SeqPacket::connect(path).is_ok() {
            return Err(DaemonError::InUse(path.clone()));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    SeqPacketListener::bind(path, config.mode).map_err(err)
}

/// A daemon running on its own thread.
pub struct DaemonHandle {
    stop: Arc<AtomicBool>,
    waker: Arc<mio::Waker>,
    thread: Option<JoinHandle<io::Result<()>>>,
    socket: PathBuf,
    remove_socket: bool,
}

impl std::fmt::Debug for DaemonHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonHandle")
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl DaemonHandle {
    /// The socket clients attach to.
    #[must_use]
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops the loop and waits for it; the socket file is removed unless
    /// [`DaemonConfig::remove_socket`] is `false`.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        let result = match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("daemon thread panicked"))),
            None => Ok(()),
        };
        if self.remove_socket {
            let _ = std::fs::remove_file(&self.socket);
        }
        result
    }
}

impl Drop for DaemonHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Starts the daemon's loop on a new thread, serving `engine` (built in process:
/// [`engine::EngineBuilder::in_process`]) on `listener`.
pub fn spawn(
    engine: Engine,
    config: DaemonConfig,
    listener: SeqPacketListener,
) -> Result<DaemonHandle, DaemonError> {
    let socket = config.socket.clone();
    let remove_socket = config.remove_socket;
    let (mut server, waker) =
        server::Server::new(engine, config, listener).map_err(DaemonError::Poll)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("hipobj-daemon".into())
        .spawn(move || server.run(&flag))
        .map_err(DaemonError::Poll)?;
    Ok(DaemonHandle {
        stop,
        waker,
        thread: Some(thread),
        socket,
        remove_socket,
    })
}

/// Asks the daemon at `socket` for its clients (`hipobj daemon status`).
pub fn query_status(socket: &Path) -> io::Result<Vec<ClientStatus>> {
    let conn = SeqPacket::connect(socket)?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    let mut buf = vec![0u8; MAX_REPLY];
    let mut ask = |req: Request| -> io::Result<Reply> {
        conn.send(&req.encode(), &[])?;
        let (n, _) = conn.recv(&mut buf)?;
        Reply::decode(buf.get(..n).unwrap_or(&[]))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    };
    ask(Request::Hello {
        name: "hipobj daemon status".into(),
    })?;
    match ask(Request::Status)? {
        Reply::Status(clients) => Ok(clients),
        other => Err(io::Error::other(format!("unexpected answer {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        // Nothing is sent: an engine whose endpoint is never reached.
        Engine::builder()
            .in_process()
            .endpoint_url("http://127.0.0.1:1")
            .credentials(engine::Credentials::new("AKIDEXAMPLE", "secret"))
            .region("us-east-1")
            .placement(engine::Placement::Workers(1))
            .fabric(engine::Fabric::Http)
            .build()
            .expect("engine")
    }

    #[test]
    fn the_socket_file_is_removed_on_stop_only_when_the_daemon_owns_it() {
        let dir = tempfile::tempdir().unwrap();
        for remove_socket in [true, false] {
            let config = DaemonConfig {
                socket: dir.path().join(format!("{remove_socket}.sock")),
                remove_socket,
                ..DaemonConfig::default()
            };
            let path = config.socket.clone();
            let listener = listen(&config).unwrap();
            let handle = spawn(engine(), config, listener).unwrap();
            assert!(path.exists());
            handle.stop().unwrap();
            assert_eq!(
                path.exists(),
                !remove_socket,
                "remove_socket = {remove_socket}"
            );
        }
    }
}
