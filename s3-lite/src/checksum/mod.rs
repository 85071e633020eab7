//! CRC64NVME and CRC32C as S3 defines them (`x-amz-checksum-*`, docs/rdma-headers.md, `checksum`).
//!
//! Why both: S3 flexible checksums use CRC64NVME by default and it is always full-object (a
//! multipart upload's value is the combine of its parts' CRCs, never a composite `…-N`); Ceph's
//! RDMA checksum headers also offer CRC32C. On the wire a checksum is its CRC bytes in big-endian
//! order, standard base64 with padding: 12 characters for CRC64NVME, 8 for CRC32C. The parser is
//! strict — wrong length, foreign alphabet, missing padding or non-zero pad bits are errors —
//! because hipObject's and versitygw's parsers are, and a lenient decoder would accept two
//! spellings of one checksum.

mod combine;
mod crc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use thiserror::Error;

pub use crc::{Crc32c, Crc64Nvme};

/// Request/response header carrying a CRC64NVME.
pub const HEADER_CRC64NVME: &str = "x-amz-checksum-crc64nvme";
/// Request/response header carrying a CRC32C.
pub const HEADER_CRC32C: &str = "x-amz-checksum-crc32c";
/// Names the algorithm of a (trailing or multipart) checksum.
pub const HEADER_ALGORITHM: &str = "x-amz-checksum-algorithm";
/// Sent with value [`MODE_ENABLED`] on GET/HEAD so S3 returns the stored checksum.
pub const HEADER_MODE: &str = "x-amz-checksum-mode";
/// The only value of [`HEADER_MODE`].
pub const MODE_ENABLED: &str = "ENABLED";
/// Response header of `hipobj serve` on a ranged GET (206) whose body it sent: the CRC64NVME
/// (base64) of exactly the body bytes, computed by the server as it read them. Clients that
/// know it compare it with the bytes received (an RDMA reply uses
/// [`crate::rdma::RDMA_CHECKSUM_CRC64NVME`] instead, which covers the transferred bytes).
pub const HEADER_RANGE_CRC64NVME: &str = "x-hipobj-range-checksum-crc64nvme";
/// Base64 of the CRC64NVME of the empty input: what a server that ignored an RDMA PUT computes.
pub const EMPTY_CRC64NVME_BASE64: &str = "AAAAAAAAAAA=";

/// A checksum algorithm S3 and the RDMA headers use here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChecksumAlgorithm {
    /// CRC-64/NVME (the default).
    Crc64Nvme,
    /// CRC-32C.
    Crc32c,
}

impl ChecksumAlgorithm {
    /// Upper-case name as S3 writes it (`CRC64NVME`, `CRC32C`).
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc64Nvme => "CRC64NVME",
            ChecksumAlgorithm::Crc32c => "CRC32C",
        }
    }

    /// Parses a name case-insensitively; other algorithms are not supported here.
    pub fn parse(name: &str) -> Result<Self, ChecksumError> {
        if name.eq_ignore_ascii_case("CRC64NVME") {
            Ok(ChecksumAlgorithm::Crc64Nvme)
        } else if name.eq_ignore_ascii_case("CRC32C") {
            Ok(ChecksumAlgorithm::Crc32c)
        } else {
            Err(ChecksumError::UnknownAlgorithm(
                name.chars().take(32).collect(),
            ))
        }
    }

    /// The `x-amz-checksum-*` header of this algorithm.
    pub fn header(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc64Nvme => HEADER_CRC64NVME,
            ChecksumAlgorithm::Crc32c => HEADER_CRC32C,
        }
    }

    /// Length of the base64 wire form.
    pub fn base64_len(self) -> usize {
        match self {
            ChecksumAlgorithm::Crc64Nvme => 12,
            ChecksumAlgorithm::Crc32c => 8,
        }
    }
}

/// Why a checksum header value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ChecksumError {
    /// Not the fixed length of the algorithm's base64 form.
    #[error("{algorithm} checksum: {found} base64 characters, expected {expected}")]
    WrongLength {
        /// Algorithm name.
        algorithm: &'static str,
        /// Required length.
        expected: usize,
        /// Length found.
        found: usize,
    },
    /// Not canonical padded standard base64 (bad character, bad padding, non-zero pad bits).
    #[error("{algorithm} checksum: not canonical base64")]
    NotCanonical {
        /// Algorithm name.
        algorithm: &'static str,
    },
    /// An algorithm name other than CRC64NVME/CRC32C (first 32 characters).
    #[error("unsupported checksum algorithm {0:?}")]
    UnknownAlgorithm(String),
}

/// A checksum value of one algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Checksum {
    /// CRC-64/NVME value.
    Crc64Nvme(u64),
    /// CRC-32C value.
    Crc32c(u32),
}

impl Checksum {
    /// Computes the checksum of `data` with `algorithm`.
    pub fn compute(algorithm: ChecksumAlgorithm, data: &[u8]) -> Self {
        match algorithm {
            ChecksumAlgorithm::Crc64Nvme => Checksum::Crc64Nvme(Crc64Nvme::checksum(data)),
            ChecksumAlgorithm::Crc32c => Checksum::Crc32c(Crc32c::checksum(data)),
        }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> ChecksumAlgorithm {
        match self {
            Checksum::Crc64Nvme(_) => ChecksumAlgorithm::Crc64Nvme,
            Checksum::Crc32c(_) => ChecksumAlgorithm::Crc32c,
        }
    }

    /// The base64 wire form.
    pub fn to_base64(&self) -> String {
        match self {
            Checksum::Crc64Nvme(v) => encode_crc64nvme(*v),
            Checksum::Crc32c(v) => encode_crc32c(*v),
        }
    }

    /// Parses the base64 wire form of `algorithm`.
    pub fn from_base64(algorithm: ChecksumAlgorithm, value: &str) -> Result<Self, ChecksumError> {
        match algorithm {
            ChecksumAlgorithm::Crc64Nvme => decode_crc64nvme(value).map(Checksum::Crc64Nvme),
            ChecksumAlgorithm::Crc32c => decode_crc32c(value).map(Checksum::Crc32c),
        }
    }
}

/// `x-amz-checksum-crc64nvme` value of a CRC: 12 characters.
pub fn encode_crc64nvme(crc: u64) -> String {
    STANDARD.encode(crc.to_be_bytes())
}

/// `x-amz-checksum-crc32c` value of a CRC: 8 characters.
pub fn encode_crc32c(crc: u32) -> String {
    STANDARD.encode(crc.to_be_bytes())
}

/// Strictly decodes exactly `N` big-endian bytes from canonical padded base64.
fn decode_fixed<const N: usize>(
    algorithm: ChecksumAlgorithm,
    value: &str,
) -> Result<[u8; N], ChecksumError> {
    let expected = algorithm.base64_len();
    if value.len() != expected {
        return Err(ChecksumError::WrongLength {
            algorithm: algorithm.name(),
            expected,
            found: value.len(),
        });
    }
    let mut out = [0u8; N];
    // `STANDARD` requires canonical padding and rejects non-zero trailing bits; the length check
    // above makes the decoded size exactly N, which the count comparison confirms.
    match STANDARD.decode_slice(value, &mut out) {
        Ok(n) if n == N => Ok(out),
        _ => Err(ChecksumError::NotCanonical {
            algorithm: algorithm.name(),
        }),
    }
}

/// Parses an `x-amz-checksum-crc64nvme` value.
pub fn decode_crc64nvme(value: &str) -> Result<u64, ChecksumError> {
    decode_fixed::<8>(ChecksumAlgorithm::Crc64Nvme, value).map(u64::from_be_bytes)
}

/// Parses an `x-amz-checksum-crc32c` value.
pub fn decode_crc32c(value: &str) -> Result<u32, ChecksumError> {
    decode_fixed::<4>(ChecksumAlgorithm::Crc32c, value).map(u32::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_forms_of_check_values() {
        assert_eq!(encode_crc64nvme(0xAE8B_1486_0A79_9888), "rosUhgp5mIg=");
        assert_eq!(
            encode_crc64nvme(Crc64Nvme::checksum(b"")),
            EMPTY_CRC64NVME_BASE64
        );
        assert_eq!(decode_crc64nvme("rosUhgp5mIg="), Ok(0xAE8B_1486_0A79_9888));
        assert_eq!(decode_crc64nvme("AAAAAAAAAAA="), Ok(0));
        // 0xE3069283 → bytes e3 06 92 83 → "4waSgw==".
        assert_eq!(encode_crc32c(0xE306_9283), "4waSgw==");
        assert_eq!(decode_crc32c("4waSgw=="), Ok(0xE306_9283));
        assert_eq!(
            Checksum::compute(ChecksumAlgorithm::Crc32c, b"123456789").to_base64(),
            "4waSgw=="
        );
    }

    #[test]
    fn strict_base64() {
        let not = |a| Err(ChecksumError::NotCanonical { algorithm: a });
        // Last data char 'h' = 0b100001: the two pad bits are not zero.
        assert_eq!(decode_crc64nvme("rosUhgp5mIh="), not("CRC64NVME"));
        assert_eq!(
            decode_crc64nvme("rosUhgp5mIg"),
            Err(ChecksumError::WrongLength {
                algorithm: "CRC64NVME",
                expected: 12,
                found: 11
            })
        );
        assert_eq!(decode_crc64nvme("rosUhgp5mIgA"), not("CRC64NVME"));
        assert_eq!(decode_crc64nvme("rosUhgp5mI-="), not("CRC64NVME"));
        assert_eq!(
            decode_crc64nvme("rosUhgp5mIg=-3").map(|_| ()),
            Err(ChecksumError::WrongLength {
                algorithm: "CRC64NVME",
                expected: 12,
                found: 14
            })
        );
        assert_eq!(decode_crc64nvme(" osUhgp5mIg="), not("CRC64NVME"));
        let not32 = Err(ChecksumError::NotCanonical {
            algorithm: "CRC32C",
        });
        assert_eq!(decode_crc32c("4waSgx=="), not32);
        assert_eq!(decode_crc32c("4waSg==="), not32);
        assert_eq!(
            decode_crc32c("4waSgw="),
            Err(ChecksumError::WrongLength {
                algorithm: "CRC32C",
                expected: 8,
                found: 7
            })
        );
    }

    #[test]
    fn algorithm_names() {
        assert_eq!(
            ChecksumAlgorithm::parse("crc64nvme"),
            Ok(ChecksumAlgorithm::Crc64Nvme)
        );
        assert_eq!(
            ChecksumAlgorithm::parse("CRC32C"),
            Ok(ChecksumAlgorithm::Crc32c)
        );
        assert_eq!(
            ChecksumAlgorithm::parse("SHA256"),
            Err(ChecksumError::UnknownAlgorithm("SHA256".into()))
        );
        assert_eq!(ChecksumAlgorithm::Crc32c.header(), "x-amz-checksum-crc32c");
        assert_eq!(ChecksumAlgorithm::Crc64Nvme.name(), "CRC64NVME");
        let c = Checksum::from_base64(ChecksumAlgorithm::Crc64Nvme, "rosUhgp5mIg=").unwrap();
        assert_eq!(
            (c, c.algorithm()),
            (
                Checksum::Crc64Nvme(0xAE8B_1486_0A79_9888),
                ChecksumAlgorithm::Crc64Nvme
            )
        );
    }
}
