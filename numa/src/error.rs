//! Typed errors. Every error names the sysfs path it came from, so a report from a user's machine
//! points at the file to look at.

use std::io;
use std::path::PathBuf;

use crate::cpulist::CpuListError;

/// Why the topology could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopoError {
    /// Opening, reading or listing a path failed.
    #[error("{}: {message}", path.display())]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error kind (kept instead of `io::Error` so the error is `Clone + PartialEq`).
        kind: io::ErrorKind,
        /// The operating system's message.
        message: String,
    },
    /// A file's content does not have the expected form (`numa_node` = `abc`, class = `0x3`).
    #[error("{}: malformed {what}: {detail}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Which attribute was expected (`numa_node`, `cpulist`, `PCI class`, ...).
        what: &'static str,
        /// What was wrong, including the offending text.
        detail: String,
    },
    /// A cpulist file failed to parse.
    #[error("{}: malformed cpulist: {source}", path.display())]
    CpuList {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: CpuListError,
    },
    /// A file, directory or chain is larger than we are willing to read.
    #[error("{}: {what} exceeds the limit of {limit}", path.display())]
    Limit {
        /// The path.
        path: PathBuf,
        /// What was counted (bytes, directory entries, bridges).
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A symbolic link resolves outside the sysfs root (a fixture with absolute links, or a
    /// tampered tree); following it would read the host's real files instead of the fixture's.
    #[error("{}: resolves outside the sysfs root, to {}", path.display(), target.display())]
    OutsideRoot {
        /// The link.
        path: PathBuf,
        /// Where it resolved to.
        target: PathBuf,
    },
    /// A caller named a device or node that the topology does not contain.
    #[error("no {kind} {name} in this topology")]
    Unknown {
        /// `GPU`, `NIC` or `NUMA node`.
        kind: &'static str,
        /// The index or name asked for.
        name: String,
    },
}

impl TopoError {
    pub(crate) fn io(path: impl Into<PathBuf>, err: &io::Error) -> Self {
        TopoError::Io {
            path: path.into(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }

    pub(crate) fn malformed(
        path: impl Into<PathBuf>,
        what: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        TopoError::Malformed {
            path: path.into(),
            what,
            detail: detail.into(),
        }
    }

    /// True when the error is "file not found" (used where an attribute is optional).
    pub fn is_not_found(&self) -> bool {
        matches!(self, TopoError::Io { kind, .. } if *kind == io::ErrorKind::NotFound)
    }
}
