//! The success rule of `hipObjGet`/`hipObjPut` (docs/protocol.md, "What proves a PUT"; the
//! same for the CLI, the engine and Python): a checksum mismatch is always an error (the
//! engine's `Integrity` completion); a success no server checksum proved is still a success,
//! visibly unverified (`hipObjGetLastOpVerified`, `HIPOBJ_COMPLETION_VERIFIED` clear, and a
//! `warn` event under `HIPOBJ_LOG`), unless `hipObjConfig_t.flags` has `HIPOBJ_CONFIG_VERIFY`,
//! which makes it `hipObjIntegrityError`.

use crate::error::{Fail, OpError};
use crate::io::Dir;

/// Judges a successful `dir` of `bucket/key` whose bytes `verified` says were proven or not,
/// under the library's `verify` flag.
pub fn judge(dir: Dir, bucket: &str, key: &str, verified: bool, verify: bool) -> Result<(), Fail> {
    if verified {
        return Ok(());
    }
    let what = match dir {
        Dir::Get => "the bytes were read, but no server checksum covered them",
        Dir::Put => {
            "the object was stored, but the server's answers named no checksum of our bytes \
             (no echoed CRC64NVME)"
        }
    };
    let msg = format!(
        "unverified: {verb} s3://{bucket}/{key}: {what}",
        verb = verb(dir)
    );
    if verify {
        return Err(Fail::new(
            OpError::IntegrityError,
            format!("{msg} (HIPOBJ_CONFIG_VERIFY makes this an error)"),
        ));
    }
    tracing::warn!("{msg}");
    Ok(())
}

const fn verb(dir: Dir) -> &'static str {
    match dir {
        Dir::Get => "GET",
        Dir::Put => "PUT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unproven_success_under_verify_fails() {
        assert!(judge(Dir::Put, "b", "k", true, true).is_ok());
        assert!(judge(Dir::Put, "b", "k", false, false).is_ok());
        let e = judge(Dir::Put, "b", "k", false, true).unwrap_err();
        assert_eq!(e.op, OpError::IntegrityError);
        assert!(
            e.message.contains("unverified: PUT s3://b/k"),
            "{}",
            e.message
        );
        assert!(judge(Dir::Get, "b", "k", false, true).is_err());
    }
}
