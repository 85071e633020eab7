//! Attaching to a node daemon: one engine per node, shared by every process (`hipobj daemon`,
//! docs/daemon.md).
//!
//! - [`wire`]: the control messages (sans-IO, fuzzed).
//! - [`sys`]: `SOCK_SEQPACKET` sockets with descriptor passing and peer credentials, sealed
//!   memfd mappings ([`SharedMemory`], also the rings' [`ring_api::RingMemory`]), `poll(2)`.
//! - `client`: the [`Engine`](crate::Engine) backend of an attached process.
//!
//! The daemon itself (`hipobj-daemon`) is written against the public API: an in-process
//! [`Engine`](crate::Engine), [`wire`], [`sys`] and [`EventFd`].

pub(crate) mod client;
pub mod sys;
pub mod wire;

pub use crate::queue::EventFd;
pub use sys::{PeerCred, SeqPacket, SeqPacketListener, SharedMemory};

/// The environment variable that attaches every engine a process builds to a daemon
/// (`HIPOBJ_DAEMON=/run/hipobj/hipobj.sock`), unless the builder says otherwise
/// ([`EngineBuilder::daemon`](crate::EngineBuilder::daemon),
/// [`EngineBuilder::in_process`](crate::EngineBuilder::in_process)).
pub const DAEMON_ENV: &str = "HIPOBJ_DAEMON";

/// The default socket path: `$XDG_RUNTIME_DIR/hipobj.sock` when `XDG_RUNTIME_DIR` is set,
/// else `/run/hipobj/hipobj.sock`.
#[must_use]
pub fn default_socket_path() -> std::path::PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => std::path::Path::new(&dir).join("hipobj.sock"),
        _ => std::path::PathBuf::from("/run/hipobj/hipobj.sock"),
    }
}
