//! The `hipobj` command-line tool, as a library so integration tests can drive its pieces.
pub mod debug_sigv4;
pub mod topo;
