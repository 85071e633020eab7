//! Multipart checksums with S3's rules: for CRC32, CRC32C, SHA-1 and SHA-256 an upload is
//! `COMPOSITE` by default — the checksum of the parts' checksums (raw bytes, concatenated
//! in part order), written `<base64>-<part count>` — and CRC32/CRC32C may ask for
//! `FULL_OBJECT` instead; CRC64NVME (and an upload naming no algorithm) is always
//! `FULL_OBJECT`, computed by combining the parts' CRCs.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use s3_lite::checksum::Crc32c;

/// An algorithm whose multipart checksum can be composite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// CRC-32 (ISO-HDLC).
    Crc32,
    /// CRC-32C.
    Crc32c,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
}

impl Algorithm {
    /// From an `x-amz-checksum-algorithm` value; `None` for CRC64NVME and unknown names.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_uppercase().as_str() {
            "CRC32" => Some(Self::Crc32),
            "CRC32C" => Some(Self::Crc32c),
            "SHA1" => Some(Self::Sha1),
            "SHA256" => Some(Self::Sha256),
            _ => None,
        }
    }

    /// The name S3 writes (`ChecksumSHA256` uses it after `Checksum`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Sha1 => "SHA1",
            Self::Sha256 => "SHA256",
        }
    }

    /// Whether an upload with this algorithm and `x-amz-checksum-type` is composite.
    pub fn is_composite(self, checksum_type: Option<&str>) -> bool {
        match self {
            Self::Sha1 | Self::Sha256 => true,
            Self::Crc32 | Self::Crc32c => {
                !checksum_type.is_some_and(|t| t.eq_ignore_ascii_case("FULL_OBJECT"))
            }
        }
    }

    /// The composite checksum of parts whose raw checksums are `parts`, in order.
    pub fn composite(self, parts: &[Vec<u8>]) -> String {
        let joined: Vec<u8> = parts.concat();
        let digest: Vec<u8> = match self {
            Self::Crc32 => {
                let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32IsoHdlc);
                d.update(&joined);
                (d.finalize() as u32).to_be_bytes().to_vec()
            }
            Self::Crc32c => {
                let mut c = Crc32c::new();
                c.update(&joined);
                c.finish().to_be_bytes().to_vec()
            }
            Self::Sha1 => ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &joined)
                .as_ref()
                .to_vec(),
            Self::Sha256 => ring::digest::digest(&ring::digest::SHA256, &joined)
                .as_ref()
                .to_vec(),
        };
        format!("{}-{}", STANDARD.encode(digest), parts.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composite_is_the_checksum_of_the_part_checksums() {
        let p1 = ring::digest::digest(&ring::digest::SHA256, b"one")
            .as_ref()
            .to_vec();
        let p2 = ring::digest::digest(&ring::digest::SHA256, b"two")
            .as_ref()
            .to_vec();
        let mut both = p1.clone();
        both.extend_from_slice(&p2);
        let want = STANDARD.encode(ring::digest::digest(&ring::digest::SHA256, &both));
        assert_eq!(Algorithm::Sha256.composite(&[p1, p2]), format!("{want}-2"));
        assert!(Algorithm::Crc32.is_composite(None));
        assert!(!Algorithm::Crc32c.is_composite(Some("FULL_OBJECT")));
        assert!(Algorithm::Sha1.is_composite(Some("FULL_OBJECT")));
        assert_eq!(Algorithm::parse("crc64nvme"), None);
    }
}
