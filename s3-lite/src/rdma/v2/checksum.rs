//! The RDMA checksum headers of the READY (FINAL) response, both generations (docs/protocol.md, hipobj-rc-v2, READY).
//!
//! * old (ROCm `v2-wire.cpp`, versitygw Go client, early Ceph): `x-amz-rdma-checksum: CRC64NVME <b64>`
//! * new (mmgaggle/hipObject, mmgaggle/ceph): `x-amz-rdma-checksum-crc64nvme: <b64>` and
//!   `x-amz-rdma-checksum-crc32c: <b64>`
//!
//! Both cover exactly the bytes delivered (unlike `x-amz-checksum-*`, which is full-object). Each
//! old parser ignores the new headers and vice versa, so a server sends both and a client reads
//! both, requiring agreement when both carry CRC64NVME.

use thiserror::Error;

use crate::checksum::{self, Checksum, ChecksumAlgorithm, ChecksumError};
use crate::rdma::{RDMA_CHECKSUM, RDMA_CHECKSUM_CRC32C, RDMA_CHECKSUM_CRC64NVME};

/// Why an RDMA checksum header was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RdmaChecksumError {
    /// Old form without the `<ALGORITHM> <b64>` shape.
    #[error("x-amz-rdma-checksum is not '<ALGORITHM> <base64>'")]
    Malformed,
    /// Bad algorithm or non-canonical base64.
    #[error("{header}: {source}")]
    Value {
        /// Header name.
        header: &'static str,
        /// The checksum error.
        source: ChecksumError,
    },
    /// Old and new generation disagree on CRC64NVME.
    #[error("x-amz-rdma-checksum and x-amz-rdma-checksum-crc64nvme disagree")]
    Inconsistent,
    /// A header repeated with different values.
    #[error("{0} repeated with different values")]
    Repeated(&'static str),
}

/// Parses the old-generation value `<ALGORITHM> <b64>` (algorithm case-insensitive, one space).
pub fn parse_legacy_checksum(value: &str) -> Result<Checksum, RdmaChecksumError> {
    let (alg, b64) = value.split_once(' ').ok_or(RdmaChecksumError::Malformed)?;
    let wrap = |source| RdmaChecksumError::Value {
        header: RDMA_CHECKSUM,
        source,
    };
    let alg = ChecksumAlgorithm::parse(alg).map_err(wrap)?;
    Checksum::from_base64(alg, b64).map_err(wrap)
}

/// The old-generation value for `c`: `CRC64NVME rosUhgp5mIg=`.
pub fn legacy_checksum_value(c: &Checksum) -> String {
    format!("{} {}", c.algorithm().name(), c.to_base64())
}

/// The RDMA checksums found in (or to be put into) a FINAL response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaChecksums {
    /// CRC-64/NVME of the transferred bytes.
    pub crc64nvme: Option<u64>,
    /// CRC-32C of the transferred bytes.
    pub crc32c: Option<u32>,
}

fn set_once<T: PartialEq + Copy>(
    slot: &mut Option<T>,
    v: T,
    header: &'static str,
) -> Result<(), RdmaChecksumError> {
    match slot {
        Some(prev) if *prev != v => Err(RdmaChecksumError::Repeated(header)),
        _ => {
            *slot = Some(v);
            Ok(())
        }
    }
}

impl RdmaChecksums {
    /// Reads both generations from `(name, value)` pairs (names case-insensitive).
    pub fn from_headers<'a, I>(headers: I) -> Result<Self, RdmaChecksumError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut legacy: Option<Checksum> = None;
        let mut out = RdmaChecksums::default();
        for (name, value) in headers {
            if name.eq_ignore_ascii_case(RDMA_CHECKSUM) {
                set_once(&mut legacy, parse_legacy_checksum(value)?, RDMA_CHECKSUM)?;
            } else if name.eq_ignore_ascii_case(RDMA_CHECKSUM_CRC64NVME) {
                let v = checksum::decode_crc64nvme(value).map_err(|source| {
                    RdmaChecksumError::Value {
                        header: RDMA_CHECKSUM_CRC64NVME,
                        source,
                    }
                })?;
                set_once(&mut out.crc64nvme, v, RDMA_CHECKSUM_CRC64NVME)?;
            } else if name.eq_ignore_ascii_case(RDMA_CHECKSUM_CRC32C) {
                let v =
                    checksum::decode_crc32c(value).map_err(|source| RdmaChecksumError::Value {
                        header: RDMA_CHECKSUM_CRC32C,
                        source,
                    })?;
                set_once(&mut out.crc32c, v, RDMA_CHECKSUM_CRC32C)?;
            }
        }
        match legacy {
            Some(Checksum::Crc64Nvme(v)) => set_once(&mut out.crc64nvme, v, RDMA_CHECKSUM)
                .map_err(|_| RdmaChecksumError::Inconsistent)?,
            Some(Checksum::Crc32c(v)) => set_once(&mut out.crc32c, v, RDMA_CHECKSUM)
                .map_err(|_| RdmaChecksumError::Inconsistent)?,
            None => {}
        }
        Ok(out)
    }

    /// Header pairs for a FINAL response: both generations for CRC64NVME (the old header only
    /// ever carried CRC64NVME on the wire), the new header for CRC32C.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = Vec::with_capacity(3);
        if let Some(v) = self.crc64nvme {
            h.push((
                RDMA_CHECKSUM,
                legacy_checksum_value(&Checksum::Crc64Nvme(v)),
            ));
            h.push((RDMA_CHECKSUM_CRC64NVME, checksum::encode_crc64nvme(v)));
        }
        if let Some(v) = self.crc32c {
            h.push((RDMA_CHECKSUM_CRC32C, checksum::encode_crc32c(v)));
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK: u64 = 0xAE8B_1486_0A79_9888;

    #[test]
    fn legacy_form() {
        assert_eq!(
            parse_legacy_checksum("CRC64NVME rosUhgp5mIg="),
            Ok(Checksum::Crc64Nvme(CHECK))
        );
        assert_eq!(
            parse_legacy_checksum("crc32c 4waSgw=="),
            Ok(Checksum::Crc32c(0xE306_9283))
        );
        assert_eq!(
            legacy_checksum_value(&Checksum::Crc64Nvme(CHECK)),
            "CRC64NVME rosUhgp5mIg="
        );
        assert_eq!(
            parse_legacy_checksum("CRC64NVME"),
            Err(RdmaChecksumError::Malformed)
        );
        assert!(matches!(
            parse_legacy_checksum("CRC64NVME  rosUhgp5mIg="),
            Err(RdmaChecksumError::Value {
                source: ChecksumError::WrongLength { .. },
                ..
            })
        ));
        assert!(matches!(
            parse_legacy_checksum("CRC64NVME rosUhgp5mIh="),
            Err(RdmaChecksumError::Value {
                source: ChecksumError::NotCanonical { .. },
                ..
            })
        ));
        assert!(matches!(
            parse_legacy_checksum("SHA256 abc"),
            Err(RdmaChecksumError::Value {
                source: ChecksumError::UnknownAlgorithm(_),
                ..
            })
        ));
    }

    #[test]
    fn both_generations() {
        let both = RdmaChecksums {
            crc64nvme: Some(CHECK),
            crc32c: Some(0xE306_9283),
        };
        let h = both.headers();
        assert_eq!(
            h,
            [
                ("x-amz-rdma-checksum", "CRC64NVME rosUhgp5mIg=".to_owned()),
                ("x-amz-rdma-checksum-crc64nvme", "rosUhgp5mIg=".to_owned()),
                ("x-amz-rdma-checksum-crc32c", "4waSgw==".to_owned()),
            ]
        );
        let pairs: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
        assert_eq!(RdmaChecksums::from_headers(pairs), Ok(both));
        let old_only = [("X-Amz-Rdma-Checksum", "CRC64NVME rosUhgp5mIg=")];
        assert_eq!(
            RdmaChecksums::from_headers(old_only).map(|c| c.crc64nvme),
            Ok(Some(CHECK))
        );
        let new_only = [("x-amz-rdma-checksum-crc64nvme", "AAAAAAAAAAA=")];
        assert_eq!(
            RdmaChecksums::from_headers(new_only).map(|c| c.crc64nvme),
            Ok(Some(0))
        );
        let disagree = [
            ("x-amz-rdma-checksum", "CRC64NVME rosUhgp5mIg="),
            ("x-amz-rdma-checksum-crc64nvme", "AAAAAAAAAAA="),
        ];
        assert_eq!(
            RdmaChecksums::from_headers(disagree),
            Err(RdmaChecksumError::Inconsistent)
        );
        let repeated = [
            ("x-amz-rdma-checksum-crc32c", "4waSgw=="),
            ("x-amz-rdma-checksum-crc32c", "AAAAAA=="),
        ];
        assert_eq!(
            RdmaChecksums::from_headers(repeated),
            Err(RdmaChecksumError::Repeated(RDMA_CHECKSUM_CRC32C))
        );
        assert_eq!(
            RdmaChecksums::from_headers([("etag", "x")]),
            Ok(RdmaChecksums::default())
        );
    }
}
