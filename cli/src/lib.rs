//! The `hipobj` command-line tool, as a library so integration tests can drive its pieces.
pub mod bench;
pub mod capability;
pub mod client;
pub mod client_args;
pub mod commands;
pub mod debug_sigv4;
pub mod embedded;
pub mod engine_io;
pub mod interrupt;
pub mod json_out;
pub mod net;
pub mod s3uri;
pub mod serve;
pub mod synthetic;
pub mod topo;
pub mod units;
pub mod vram;
