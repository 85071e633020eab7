//! The `hipobj` command-line tool, as a library so integration tests can drive its pieces.
pub mod bench;
pub mod capability;
pub mod client_args;
pub mod commands;
pub mod daemon;
pub mod debug_sigv4;
pub mod diagnose;
pub mod embedded;
pub mod engine_io;
pub mod fallback;
pub mod interrupt;
pub mod json_out;
pub mod load;
pub mod net;
pub mod quiet_log;
pub mod recursive;
pub mod relay;
pub mod serve;
pub mod soft_nics;
pub mod synthetic;
pub mod topo;
pub mod units;
pub mod vram;

// Moved to the loader crate; re-exported under the paths the CLI has always used.
pub use hipobj_loader::{client, paths, s3uri, upload_proof};
