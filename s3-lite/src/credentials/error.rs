//! Why credentials, region or endpoint could not be resolved.

use std::path::PathBuf;

use thiserror::Error;

/// A resolution failure. Every variant names where it looked, so a user can fix the right file.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// A shared file exists but could not be read.
    #[error("cannot read {}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error text (`io::Error` is not `Clone`).
        message: String,
    },
    /// A shared file is larger than the reader accepts.
    #[error("{} is larger than {limit} bytes", path.display())]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// A shared file does not follow the INI grammar.
    #[error("{}:{line}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line (0: the whole file).
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A profile has one half of a key pair.
    #[error("{}:{line}: profile {profile:?} sets {present} but not {missing}", path.display())]
    IncompleteProfile {
        /// The file.
        path: PathBuf,
        /// Line of the key that is present.
        line: usize,
        /// The profile.
        profile: String,
        /// The key found.
        present: &'static str,
        /// The key missing.
        missing: &'static str,
    },
    /// One of `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` is set without the other.
    #[error("environment sets {present} but not {missing}")]
    IncompleteEnvironment {
        /// The variable set.
        present: &'static str,
        /// The variable missing.
        missing: &'static str,
    },
    /// Only one of the explicit access key / secret key was given.
    #[error("explicit credentials need both an access key and a secret key; {missing} is missing")]
    IncompleteExplicit {
        /// Which one is missing.
        missing: &'static str,
    },
    /// A profile was selected explicitly but exists in neither file.
    #[error("profile {profile:?} not found in {}", looked_in.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    ProfileNotFound {
        /// The profile.
        profile: String,
        /// The files searched.
        looked_in: Vec<PathBuf>,
    },
    /// No source had credentials.
    #[error("no credentials found; looked at: {}", looked_at.join(", "))]
    NoCredentials {
        /// Each source consulted, in order.
        looked_at: Vec<String>,
    },
}
