//! SHA-1 (`x-amz-checksum-sha1`): the one S3 checksum the spooling pass does not compute, so
//! it is computed from the spooled file only when an upload declares it.

use std::io::Read;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::body::Spooled;
use crate::error::ApiError;

/// Verifies a declared `x-amz-checksum-sha1` (header or aws-chunked trailer) against the
/// spooled body: `BadDigest` on mismatch, else the checksum to echo and store.
pub fn verify_sha1(
    body: &Spooled,
    headers: &[(String, String)],
) -> Result<Option<(String, String)>, ApiError> {
    let Some(given) = headers
        .iter()
        .chain(body.trailers.iter())
        .find(|(n, _)| n.eq_ignore_ascii_case("x-amz-checksum-sha1"))
        .map(|(_, v)| v.trim().to_owned())
    else {
        return Ok(None);
    };
    let actual = STANDARD.encode(sha1_of(body)?);
    if given != actual {
        return Err(ApiError::new(
            400,
            "BadDigest",
            "The SHA1 checksum you specified did not match the calculated checksum.",
        ));
    }
    Ok(Some(("x-amz-checksum-sha1".to_owned(), actual)))
}

/// SHA-1 of a spooled body (read back from its file).
pub fn sha1_of(body: &Spooled) -> Result<[u8; 20], ApiError> {
    let mut file = body.file.reopen()?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(buf.get(..n).unwrap_or_default());
    }
    let mut out = [0u8; 20];
    out.copy_from_slice(ctx.finish().as_ref());
    Ok(out)
}
