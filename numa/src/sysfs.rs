//! Bounded access to a sysfs tree under a configurable root.
//!
//! All paths handed to this module are *sysfs paths* (`sys/bus/pci/devices`, relative to the
//! root); all paths it returns are relative to the root too, so a fixture tree and the live `/sys`
//! look the same to the rest of the crate. Symlinks are resolved with `realpath`
//! (`std::fs::canonicalize`) and must stay inside the root.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::cpulist::CpuSet;
use crate::error::TopoError;

/// Largest attribute file we read. sysfs attributes are at most one page; a cpulist of a
/// 16384-CPU machine in the worst fragmentation is about 64 KiB, so that is the cap.
pub const MAX_ATTR_BYTES: usize = 64 * 1024;

/// Most entries we accept in one directory listing (PCI functions, netdevs, RDMA devices).
pub const MAX_DIR_ENTRIES: usize = 4096;

/// A sysfs tree rooted at `root` (`/` on a live system, a fixture directory in tests).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// Opens the tree at `root`. The root is canonicalized so that link targets can be checked
    /// against it.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, TopoError> {
        let root = root.as_ref();
        let root = fs::canonicalize(root).map_err(|e| TopoError::io(root, &e))?;
        Ok(Self { root })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path of a root-relative sysfs path (used in error messages).
    pub fn abs(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    /// True when the root-relative path exists (following links).
    pub fn exists(&self, rel: &Path) -> bool {
        self.abs(rel).exists()
    }

    /// Reads a text attribute, trimmed of surrounding whitespace. Files over
    /// [`MAX_ATTR_BYTES`] and non-UTF-8 content are errors.
    pub fn read_attr(&self, rel: &Path) -> Result<String, TopoError> {
        let path = self.abs(rel);
        let file = fs::File::open(&path).map_err(|e| TopoError::io(&path, &e))?;
        let mut buf = Vec::new();
        file.take(MAX_ATTR_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(|e| TopoError::io(&path, &e))?;
        if buf.len() > MAX_ATTR_BYTES {
            return Err(TopoError::Limit {
                path,
                what: "file size in bytes",
                limit: MAX_ATTR_BYTES,
            });
        }
        let text = String::from_utf8(buf)
            .map_err(|_| TopoError::malformed(&path, "text attribute", "not UTF-8"))?;
        Ok(text.trim().to_string())
    }

    /// Reads an optional attribute: `Ok(None)` when the file does not exist.
    pub fn read_attr_opt(&self, rel: &Path) -> Result<Option<String>, TopoError> {
        match self.read_attr(rel) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads and parses a cpulist attribute.
    pub fn read_cpulist(&self, rel: &Path) -> Result<CpuSet, TopoError> {
        let text = self.read_attr(rel)?;
        CpuSet::parse(&text).map_err(|source| TopoError::CpuList {
            path: self.abs(rel),
            source,
        })
    }

    /// Lists the entry names of a directory, sorted. A missing directory is an empty list
    /// (`/sys/class/infiniband` does not exist on a host without RDMA).
    pub fn list_dir(&self, rel: &Path) -> Result<Vec<String>, TopoError> {
        let path = self.abs(rel);
        let iter = match fs::read_dir(&path) {
            Ok(it) => it,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(TopoError::io(&path, &e)),
        };
        let mut names = Vec::new();
        for entry in iter {
            let entry = entry.map_err(|e| TopoError::io(&path, &e))?;
            if names.len() >= MAX_DIR_ENTRIES {
                return Err(TopoError::Limit {
                    path,
                    what: "directory entries",
                    limit: MAX_DIR_ENTRIES,
                });
            }
            match entry.file_name().into_string() {
                Ok(n) => names.push(n),
                Err(raw) => {
                    return Err(TopoError::malformed(
                        &path,
                        "directory entry name",
                        format!("{raw:?} is not UTF-8"),
                    ));
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// Resolves every link in a root-relative path and returns the result relative to the root.
    /// A target outside the root is [`TopoError::OutsideRoot`].
    pub fn resolve(&self, rel: &Path) -> Result<PathBuf, TopoError> {
        let path = self.abs(rel);
        let real = fs::canonicalize(&path).map_err(|e| TopoError::io(&path, &e))?;
        match real.strip_prefix(&self.root) {
            Ok(r) => Ok(r.to_path_buf()),
            Err(_) => Err(TopoError::OutsideRoot { path, target: real }),
        }
    }
}
