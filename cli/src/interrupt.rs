//! Ctrl-C and `kill` during a download. A download writes a hidden partial file next to its
//! destination and renames it when complete; [`PartialFile`] registers that file so that SIGINT,
//! SIGTERM or SIGHUP remove it and exit with 128 + the signal number (130, 143, 129: what a shell
//! reports for a death by that signal). Nothing is left behind under any name.
//!
//! The signals are watched by a thread (`signal_hook::iterator`), installed the first time a
//! partial file is created; commands that write no file keep the default signal behaviour.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Partial files that exist now; a signal removes every one of them.
static PARTIALS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static WATCH: Once = Once::new();

fn partials() -> MutexGuard<'static, Vec<PathBuf>> {
    PARTIALS.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

fn watch_signals() {
    WATCH.call_once(|| {
        let spawned = Signals::new([SIGINT, SIGTERM, SIGHUP]).and_then(|mut signals| {
            std::thread::Builder::new()
                .name("hipobj-signals".into())
                .spawn(move || {
                    if let Some(signal) = signals.forever().next() {
                        remove_partials_and_exit(signal);
                    }
                })
        });
        if let Err(e) = spawned {
            eprintln!(
                "hipobj: warning: cannot watch for Ctrl-C ({e}): an interrupted download may leave its partial file"
            );
        }
    });
}

/// Runs on the signal thread: holds the registry lock to the end, so no rename can complete
/// after the files are removed.
fn remove_partials_and_exit(signal: i32) -> ! {
    let registered = partials();
    let name = signal_name(signal);
    for path in registered.iter() {
        match std::fs::remove_file(path) {
            Ok(()) => eprintln!(
                "hipobj: interrupted by {name}: removed the partial download {}",
                path.display()
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => eprintln!(
                "hipobj: interrupted by {name}: could not remove the partial download {}: {e}",
                path.display()
            ),
        }
    }
    if registered.is_empty() {
        eprintln!("hipobj: interrupted by {name}");
    }
    std::process::exit(128 + signal)
}

/// A download's temporary file: removed on drop and on SIGINT/SIGTERM/SIGHUP unless
/// [`PartialFile::persist`] renamed it to its final name.
#[derive(Debug)]
pub struct PartialFile {
    path: PathBuf,
}

impl PartialFile {
    /// Creates (truncates) `path`, registered for removal before it exists.
    pub fn create(path: PathBuf) -> io::Result<(Self, File)> {
        watch_signals();
        partials().push(path.clone());
        let partial = PartialFile { path };
        let file = File::create(&partial.path)?;
        Ok((partial, file))
    }

    /// The temporary file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the file to `dest` (the download is complete); a signal arriving now either
    /// removes the file first or finds it renamed.
    pub fn persist(self, dest: &Path) -> io::Result<()> {
        let mut registered = partials();
        std::fs::rename(&self.path, dest)?;
        registered.retain(|p| p != &self.path);
        Ok(())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        let mut registered = partials();
        if let Some(i) = registered.iter().position(|p| p == &self.path) {
            registered.swap_remove(i);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_partial_files_are_removed_and_persisted_ones_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join(".a.hipobj-partial");
        let (partial, _file) = PartialFile::create(tmp.clone()).unwrap();
        assert!(tmp.exists());
        drop(partial);
        assert!(!tmp.exists());
        assert!(!partials().contains(&tmp));

        let (partial, file) = PartialFile::create(tmp.clone()).unwrap();
        drop(file);
        let dest = dir.path().join("a");
        partial.persist(&dest).unwrap();
        assert!(dest.exists() && !tmp.exists());
        assert!(!partials().contains(&tmp));
    }

    #[test]
    fn a_failed_create_unregisters() {
        let tmp = PathBuf::from("/nonexistent-dir-for-hipobj-test/.x.hipobj-partial");
        assert!(PartialFile::create(tmp.clone()).is_err());
        assert!(!partials().contains(&tmp));
    }
}
