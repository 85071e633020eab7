//! What proves that a server stored the bytes of an upload (docs/protocol.md, "What proves a
//! PUT / multipart upload"): the digests we compute of what we send (CRC64NVME and MD5 in one
//! pass) and the comparisons with what the server answers.
//!
//! A proof is one of: the server echoed our CRC64NVME (it computed it over the bytes it
//! received); the server's ETag is the MD5 of our bytes (servers with MD5 ETags, also the
//! `"<md5 of the part MD5s>-N"` ETag of a multipart object); a HEAD after Complete names the
//! full-object CRC64NVME we computed. A difference is an [`IntegrityMismatch`]; no answer that
//! proves anything leaves the upload *unverified* (never silently ok).

use md5::Digest as _;
use s3_lite::checksum::Crc64Nvme;

/// CRC64NVME and MD5 of one stretch of bytes, computed in the same pass.
#[derive(Debug, Clone)]
pub struct SourceDigest {
    /// CRC64NVME.
    pub crc64nvme: u64,
    /// MD5.
    pub md5: [u8; 16],
}

/// Feeds bytes to both digests.
#[derive(Debug, Clone, Default)]
pub struct DigestPass {
    crc: Crc64Nvme,
    md5: md5::Md5,
}

impl DigestPass {
    /// A pass over no bytes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// More bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.crc.update(data);
        self.md5.update(data);
    }

    /// The digests of everything fed.
    pub fn finish(self) -> SourceDigest {
        let mut md5 = [0u8; 16];
        md5.copy_from_slice(&self.md5.finalize());
        SourceDigest {
            crc64nvme: self.crc.finish(),
            md5,
        }
    }
}

impl SourceDigest {
    /// Of `data` in one call.
    pub fn of(data: &[u8]) -> Self {
        let mut p = DigestPass::new();
        p.update(data);
        p.finish()
    }

    /// The `Content-MD5` header value (base64 of the digest).
    pub fn content_md5(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(self.md5)
    }

    /// The MD5 as lowercase hex (an MD5 ETag without quotes).
    pub fn md5_hex(&self) -> String {
        hex(&self.md5)
    }
}

/// How a server proved that it holds what we sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// It echoed our CRC64NVME (computed over the bytes it received).
    ChecksumEchoed,
    /// Its ETag is the MD5 of our bytes (for a multipart object: the MD5 of the part MD5s).
    EtagMd5,
    /// A HEAD after Complete named our full-object CRC64NVME and our size.
    StoredChecksum,
}

impl Proof {
    /// The name printed in `--json` (`"verified_by"`).
    pub fn name(self) -> &'static str {
        match self {
            Proof::ChecksumEchoed => "checksum-echoed",
            Proof::EtagMd5 => "etag-md5",
            Proof::StoredChecksum => "head-checksum",
        }
    }
}

/// What the server answered differs from what we sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("integrity: {what}: we sent {expected}, the server answered {got}")]
pub struct IntegrityMismatch {
    /// What was compared (e.g. "part 2 ETag (MD5)", "stored size").
    pub what: String,
    /// Ours.
    pub expected: String,
    /// The server's.
    pub got: String,
}

fn mismatch(
    what: impl Into<String>,
    expected: impl Into<String>,
    got: impl Into<String>,
) -> IntegrityMismatch {
    IntegrityMismatch {
        what: what.into(),
        expected: expected.into(),
        got: got.into(),
    }
}

/// An ETag without its quotes (and without a weak-validator prefix).
fn bare(etag: &str) -> &str {
    etag.trim().trim_start_matches("W/").trim_matches('"')
}

/// Whether an ETag has the shape of an MD5 (32 hex digits, optionally `-N`): only then may it
/// be compared with our MD5 (other servers use opaque ETags).
fn md5_shaped(etag: &str) -> bool {
    let (digest, suffix) = match bare(etag).split_once('-') {
        Some((d, n)) => (d, Some(n)),
        None => (bare(etag), None),
    };
    digest.len() == 32
        && digest.bytes().all(|b| b.is_ascii_hexdigit())
        && suffix.is_none_or(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Judges the answer to one PUT or UploadPart (`what` names it in an error): the echoed
/// CRC64NVME first, then an MD5-shaped ETag. `Ok(None)`: the answer proves nothing.
pub fn judge_put(
    what: &str,
    sent: &SourceDigest,
    echoed_crc64nvme: Option<&str>,
    etag: Option<&str>,
) -> Result<Option<Proof>, IntegrityMismatch> {
    let mut proof = None;
    if let Some(echoed) = echoed_crc64nvme {
        let ours = s3_lite::checksum::encode_crc64nvme(sent.crc64nvme);
        if echoed != ours {
            return Err(mismatch(format!("{what} CRC64NVME"), ours, echoed));
        }
        proof = Some(Proof::ChecksumEchoed);
    }
    if let Some(etag) = etag.filter(|e| md5_shaped(e) && !bare(e).contains('-')) {
        let ours = sent.md5_hex();
        if !bare(etag).eq_ignore_ascii_case(&ours) {
            return Err(mismatch(format!("{what} ETag (MD5)"), ours, bare(etag)));
        }
        proof = proof.or(Some(Proof::EtagMd5));
    }
    Ok(proof)
}

/// The ETag S3 gives a multipart object: `<md5 of the concatenated part MD5s>-<parts>`.
pub fn multipart_etag(part_md5s: &[[u8; 16]]) -> String {
    let mut h = md5::Md5::new();
    for m in part_md5s {
        h.update(m);
    }
    format!("{}-{}", hex(&h.finalize()), part_md5s.len())
}

/// Judges the ETag of a completed multipart upload against the parts we sent. `Ok(None)`: the
/// ETag is not of the MD5-of-MD5s form (it proves nothing).
pub fn judge_multipart_etag(
    part_md5s: &[[u8; 16]],
    etag: Option<&str>,
) -> Result<Option<Proof>, IntegrityMismatch> {
    let Some(etag) = etag.filter(|e| md5_shaped(e) && bare(e).contains('-')) else {
        return Ok(None);
    };
    let ours = multipart_etag(part_md5s);
    if bare(etag).eq_ignore_ascii_case(&ours) {
        Ok(Some(Proof::EtagMd5))
    } else {
        Err(mismatch(
            "multipart ETag (MD5 of the part MD5s)",
            ours,
            bare(etag),
        ))
    }
}

/// Judges what a HEAD after Complete says: the size must be ours; a full-object CRC64NVME, when
/// the server keeps one, must be ours (`Some(StoredChecksum)`); composite values prove nothing.
pub fn judge_stored(
    len: u64,
    crc64nvme: u64,
    stored_len: Option<u64>,
    stored_crc: Option<&str>,
    checksum_type: Option<&str>,
) -> Result<Option<Proof>, IntegrityMismatch> {
    match stored_len {
        Some(n) if n == len => {}
        Some(n) => return Err(mismatch("stored size", len.to_string(), n.to_string())),
        None => {
            return Err(mismatch(
                "stored size",
                len.to_string(),
                "no Content-Length on HEAD",
            ));
        }
    }
    let composite = checksum_type.is_some_and(|t| t.eq_ignore_ascii_case("COMPOSITE"));
    match stored_crc.filter(|c| !composite && !c.contains('-')) {
        Some(c) => {
            let ours = s3_lite::checksum::encode_crc64nvme(crc64nvme);
            if c == ours {
                Ok(Some(Proof::StoredChecksum))
            } else {
                Err(mismatch("stored CRC64NVME", ours, c))
            }
        }
        None => Ok(None),
    }
}

/// The `--json` fields and the exit decision of an upload: `Err` (exit 1) when a proof was
/// `required` (`--verify`) and none was found; otherwise (the default) an unproven upload is a
/// success reported as `"verified": false` with the reason, as an unproven GET is.
pub fn upload_verdict(
    required: bool,
    verified_by: Option<&str>,
    unverified: Option<&str>,
) -> Result<serde_json::Value, String> {
    match (verified_by, required) {
        (Some(by), _) => Ok(serde_json::json!({"verified": true, "verified_by": by})),
        (None, false) => {
            Ok(serde_json::json!({"verified": false, "unverified_reason": unverified}))
        }
        (None, true) => Err(format!(
            "upload unverified: {} (--verify asks for a proof; the object may well be stored: without --verify this is a warning)",
            unverified.unwrap_or("the server's answers proved nothing")
        )),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_etags_are_compared_and_opaque_ones_are_not() {
        let d = SourceDigest::of(b"hello");
        assert_eq!(d.md5_hex(), "5d41402abc4b2a76b9719d911017c592");
        let good = format!("\"{}\"", d.md5_hex());
        assert_eq!(
            judge_put("part 1", &d, None, Some(&good)),
            Ok(Some(Proof::EtagMd5))
        );
        let bad = "\"00000000000000000000000000000000\"";
        let err = judge_put("part 3", &d, None, Some(bad)).unwrap_err();
        assert_eq!(err.what, "part 3 ETag (MD5)");
        assert_eq!(err.got, "00000000000000000000000000000000");
        assert_eq!(judge_put("x", &d, None, Some("\"opaque-etag\"")), Ok(None));
        assert_eq!(judge_put("x", &d, None, None), Ok(None));
    }

    #[test]
    fn an_echoed_checksum_proves_or_refutes() {
        let d = SourceDigest::of(b"hello");
        let ours = s3_lite::checksum::encode_crc64nvme(d.crc64nvme);
        assert_eq!(
            judge_put("PUT", &d, Some(&ours), None),
            Ok(Some(Proof::ChecksumEchoed))
        );
        assert!(judge_put("PUT", &d, Some("AAAAAAAAAAA="), None).is_err());
    }

    #[test]
    fn multipart_etag_is_the_md5_of_the_part_md5s() {
        let parts = [SourceDigest::of(b"a").md5, SourceDigest::of(b"b").md5];
        let etag = multipart_etag(&parts);
        assert!(etag.ends_with("-2"));
        assert_eq!(
            judge_multipart_etag(&parts, Some(&format!("\"{etag}\""))),
            Ok(Some(Proof::EtagMd5))
        );
        assert!(judge_multipart_etag(&parts[..1], Some(&etag)).is_err());
        assert_eq!(judge_multipart_etag(&parts, Some("\"abc\"")), Ok(None));
    }

    #[test]
    fn an_unproven_upload_fails_only_when_a_proof_is_required() {
        let err = upload_verdict(true, None, Some("no echo")).unwrap_err();
        assert!(err.contains("upload unverified: no echo"), "{err}");
        let waived = upload_verdict(false, None, Some("no echo")).unwrap();
        assert_eq!(waived["verified"], false);
        assert_eq!(waived["unverified_reason"], "no echo");
        let proven = upload_verdict(true, Some("etag-md5"), None).unwrap();
        assert_eq!(
            (proven["verified"].as_bool(), proven["verified_by"].as_str()),
            (Some(true), Some("etag-md5"))
        );
    }

    #[test]
    fn stored_size_and_checksum() {
        let crc = 0x1234;
        let ours = s3_lite::checksum::encode_crc64nvme(crc);
        assert_eq!(
            judge_stored(10, crc, Some(10), Some(&ours), None),
            Ok(Some(Proof::StoredChecksum))
        );
        assert_eq!(judge_stored(10, crc, Some(10), None, None), Ok(None));
        assert_eq!(
            judge_stored(10, crc, Some(10), Some(&ours), Some("COMPOSITE")),
            Ok(None)
        );
        assert_eq!(
            judge_stored(10, crc, Some(0), None, None).unwrap_err().what,
            "stored size"
        );
        assert!(judge_stored(10, crc, Some(10), Some("AAAAAAAAAAA="), None).is_err());
    }
}
