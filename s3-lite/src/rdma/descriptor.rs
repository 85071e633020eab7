//! The cuObject DC descriptor (docs/rdma-headers.md, `rdma::descriptor`).
//!
//! NVIDIA's `libcuobjclient` mints it with `cuMemObjGetRDMAToken`; versitygw
//! (`cumiddleware/cuobj.go`), NooBaa (`src/util/rdma_utils.js`), minio-cpp (`rdma.h`) and
//! mmgaggle/ceph (`rdma_token.h`) agree on the layout `%016x:%08x:%08x:%04x:%06x:%1x:%032x`:
//! address, size, rkey, LID, DCT number, GID-present flag, GID — 81 characters, lower-case.
//! Clients of NIXL ≤ Jul 2026, minio-cpp ≤ PR #244 and hipObject append `:<addr16>:<size16>`;
//! MinIO/NIXL tolerate a trailing `;`. Ceph caps any token at 512 characters.
//!
//! Parsing is strict (NooBaa's `S3_RDMA_VALIDATE_TOKEN_HDR` rule: exact widths), so
//! `parse(s).format() == s` for every accepted descriptor.

use std::net::Ipv4Addr;

use thiserror::Error;

use super::field::{self, Case, FieldError};
use super::token::{AddrSize, client_nic_ipv4};

/// Length of a bare descriptor.
pub const DESCRIPTOR_LEN: usize = 81;
/// Largest token any peer accepts (Ceph).
pub const MAX_TOKEN_LEN: usize = 512;
/// Field widths in hex digits, in order.
pub const FIELD_WIDTHS: [usize; 7] = [16, 8, 8, 4, 6, 1, 32];
const FIELD_NAMES: [&str; 7] = ["addr", "size", "rkey", "lid", "dctn", "gid_present", "gid"];

/// Why a descriptor was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DescriptorError {
    /// Longer than [`MAX_TOKEN_LEN`].
    #[error("cuObject descriptor: {0} characters, at most 512 allowed")]
    TooLong(usize),
    /// Not 7 (bare) or 9 (with `:addr:size`) colon-separated fields.
    #[error("cuObject descriptor: {0} ':'-separated fields, expected 7 or 9")]
    FieldCount(usize),
    /// One field is malformed.
    #[error("cuObject descriptor field {field}: {source}")]
    Field {
        /// Field name (`addr`, `size`, `rkey`, `lid`, `dctn`, `gid_present`, `gid`,
        /// `suffix_addr`, `suffix_size`).
        field: &'static str,
        /// What was wrong with it.
        source: FieldError,
    },
}

/// A parsed cuObject DC descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DcDescriptor {
    /// Remote base address of the registered buffer (host or device VA).
    pub addr: u64,
    /// Size of the region from the base (u32: hence cuObject's < 4 GiB limit).
    pub size: u32,
    /// Remote key.
    pub rkey: u32,
    /// LID of the client NIC (0 on RoCE).
    pub lid: u16,
    /// DC target number (24-bit).
    pub dctn: u32,
    /// Whether the GID field is meaningful (1 on RoCE).
    pub gid_present: bool,
    /// GID of the client NIC, raw table order.
    pub gid: [u8; 16],
}

fn field_err(field: &'static str) -> impl Fn(FieldError) -> DescriptorError {
    move |source| DescriptorError::Field { field, source }
}

impl DcDescriptor {
    /// Parses exactly the 81-character bare descriptor (no suffix, no `;`).
    pub fn parse(value: &str) -> Result<Self, DescriptorError> {
        if value.len() > MAX_TOKEN_LEN {
            return Err(DescriptorError::TooLong(value.len()));
        }
        match split_fields(value) {
            ([a, b, c, d, e, f, g, _, _], 7) => Self::from_fields([a, b, c, d, e, f, g]),
            (_, n) => Err(DescriptorError::FieldCount(n)),
        }
    }

    /// Parses the seven fields (already split).
    fn from_fields(fields: [&str; 7]) -> Result<Self, DescriptorError> {
        let [addr, size, rkey, lid, dctn, gid_present, gid] = fields;
        let names = FIELD_NAMES;
        let hex = |i: usize, s: &str| {
            let width = FIELD_WIDTHS.get(i).copied().unwrap_or(0);
            let name = names.get(i).copied().unwrap_or("?");
            field::hex_u64(s, width, width, Case::Lower).map_err(field_err(name))
        };
        // Widths guarantee the narrowing conversions below cannot fail; map defensively anyway.
        let narrow = |name: &'static str, v: u64| -> Result<u32, DescriptorError> {
            u32::try_from(v).map_err(|_| field_err(name)(FieldError::Overflow))
        };
        let flag = hex(5, gid_present)?;
        let gid_present = match flag {
            0 => false,
            1 => true,
            value => {
                return Err(field_err("gid_present")(FieldError::OutOfRange {
                    value,
                    min: 0,
                    max: 1,
                }));
            }
        };
        Ok(DcDescriptor {
            addr: hex(0, addr)?,
            size: narrow("size", hex(1, size)?)?,
            rkey: narrow("rkey", hex(2, rkey)?)?,
            lid: u16::try_from(hex(3, lid)?).map_err(|_| field_err("lid")(FieldError::Overflow))?,
            dctn: narrow("dctn", hex(4, dctn)?)?,
            gid_present,
            gid: field::hex_array::<16>(gid, Case::Lower).map_err(field_err("gid"))?,
        })
    }

    /// The canonical 81-character form (`%016x:%08x:%08x:%04x:%06x:%1x:%032x`).
    ///
    /// `dctn` above 24 bits cannot be represented; it is masked to 24 bits (the parser never
    /// produces such a value).
    pub fn format(&self) -> String {
        let mut s = String::with_capacity(DESCRIPTOR_LEN);
        field::push_hex(&mut s, &self.addr.to_be_bytes());
        s.push(':');
        field::push_hex(&mut s, &self.size.to_be_bytes());
        s.push(':');
        field::push_hex(&mut s, &self.rkey.to_be_bytes());
        s.push(':');
        field::push_hex(&mut s, &self.lid.to_be_bytes());
        s.push(':');
        let [_, d0, d1, d2] = (self.dctn & 0x00ff_ffff).to_be_bytes();
        field::push_hex(&mut s, &[d0, d1, d2]);
        s.push(':');
        s.push(if self.gid_present { '1' } else { '0' });
        s.push(':');
        field::push_hex(&mut s, &self.gid);
        s
    }

    /// The client NIC's IPv4 address from the GID field (`…0000ffffAABBCCDD`), which minio-cpp
    /// binds its HTTP socket to. `None` if the GID is absent or not IPv4-mapped.
    pub fn nic_ipv4(&self) -> Option<Ipv4Addr> {
        if self.gid_present {
            client_nic_ipv4(&self.gid)
        } else {
            None
        }
    }
}

/// Splits on `:` into at most nine slots; the count is of all fields, so extras are reported.
fn split_fields(value: &str) -> ([&str; 9], usize) {
    let mut fields = [""; 9];
    let mut count = 0usize;
    for part in value.split(':') {
        if let Some(slot) = fields.get_mut(count) {
            *slot = part;
        }
        count += 1;
    }
    (fields, count)
}

impl std::fmt::Display for DcDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.format())
    }
}

/// A descriptor optionally followed by `:<addr 16 hex>:<size 16 hex>`, one trailing `;` allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DescriptorWithSuffix {
    /// The descriptor.
    pub descriptor: DcDescriptor,
    /// Remote buffer start and transfer size when the client appended them.
    pub suffix: Option<AddrSize>,
}

impl DescriptorWithSuffix {
    /// Parses the `x-amz-rdma-token` (or Dell `x-rdma-info`) value.
    pub fn parse(value: &str) -> Result<Self, DescriptorError> {
        if value.len() > MAX_TOKEN_LEN {
            return Err(DescriptorError::TooLong(value.len()));
        }
        let value = value.strip_suffix(';').unwrap_or(value);
        let (fields, count) = split_fields(value);
        let [a, b, c, d, e, f, g, sa, ss] = fields;
        let descriptor = match count {
            7 | 9 => DcDescriptor::from_fields([a, b, c, d, e, f, g])?,
            n => return Err(DescriptorError::FieldCount(n)),
        };
        let suffix = if count == 9 {
            let sfx = |name, s| field::hex_u64(s, 16, 16, Case::Any).map_err(field_err(name));
            Some(AddrSize {
                addr: sfx("suffix_addr", sa)?,
                size: sfx("suffix_size", ss)?,
            })
        } else {
            None
        };
        Ok(DescriptorWithSuffix { descriptor, suffix })
    }

    /// The canonical value: descriptor, then the suffix in lower case, no `;`.
    pub fn format(&self) -> String {
        let mut s = self.descriptor.format();
        if let Some(sfx) = &self.suffix {
            sfx.push_suffix(&mut s);
        }
        s
    }

    /// Remote buffer start: suffix address, else descriptor field 1.
    pub fn remote_addr(&self) -> u64 {
        self.suffix.map_or(self.descriptor.addr, |s| s.addr)
    }

    /// Transfer size: suffix size, else descriptor field 2.
    pub fn size(&self) -> u64 {
        self.suffix
            .map_or(u64::from(self.descriptor.size), |s| s.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str =
        "00007f7c12340000:00800000:001a2b3c:0000:00abcd:1:00000000000000000000ffff0a000005";

    fn example() -> DcDescriptor {
        DcDescriptor {
            addr: 0x7f7c_1234_0000,
            size: 0x0080_0000,
            rkey: 0x001a_2b3c,
            lid: 0,
            dctn: 0xabcd,
            gid_present: true,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 5],
        }
    }

    #[test]
    fn parses_and_formats_example() {
        assert_eq!(EXAMPLE.len(), DESCRIPTOR_LEN);
        assert_eq!(DcDescriptor::parse(EXAMPLE), Ok(example()));
        assert_eq!(example().format(), EXAMPLE);
        assert_eq!(example().nic_ipv4(), Some(Ipv4Addr::new(10, 0, 0, 5)));
        let no_gid = DcDescriptor {
            gid_present: false,
            ..example()
        };
        assert_eq!(no_gid.nic_ipv4(), None);
    }

    #[test]
    fn suffix_and_semicolon() {
        let v = format!("{EXAMPLE}:00007f7c12350000:0000000000001000;");
        let p = DescriptorWithSuffix::parse(&v).unwrap();
        assert_eq!(p.descriptor, example());
        assert_eq!(
            p.suffix,
            Some(AddrSize {
                addr: 0x7f7c_1235_0000,
                size: 0x1000
            })
        );
        assert_eq!((p.remote_addr(), p.size()), (0x7f7c_1235_0000, 0x1000));
        assert_eq!(p.format(), v.trim_end_matches(';'));
        let bare = DescriptorWithSuffix::parse(&format!("{EXAMPLE};")).unwrap();
        assert_eq!(
            (bare.suffix, bare.remote_addr(), bare.size()),
            (None, 0x7f7c_1234_0000, 0x0080_0000)
        );
        assert!(matches!(
            DcDescriptor::parse(&format!("{EXAMPLE};")),
            Err(DescriptorError::Field {
                field: "gid",
                source: FieldError::WrongLength {
                    expected: 32,
                    found: 33
                }
            })
        ));
        assert_eq!(DcDescriptor::parse(&v), Err(DescriptorError::FieldCount(9)));
    }

    #[test]
    fn strict_widths_and_case() {
        let upper = EXAMPLE.replace("7f7c", "7F7C");
        assert_eq!(
            DcDescriptor::parse(&upper),
            Err(DescriptorError::Field {
                field: "addr",
                source: FieldError::UpperCase { offset: 5 }
            })
        );
        let short_rkey = EXAMPLE.replace(":001a2b3c:", ":1a2b3c:");
        assert_eq!(
            DcDescriptor::parse(&short_rkey),
            Err(DescriptorError::Field {
                field: "rkey",
                source: FieldError::WrongLength {
                    expected: 8,
                    found: 6
                }
            })
        );
        let flag2 = EXAMPLE.replace(":1:", ":2:");
        assert_eq!(
            DcDescriptor::parse(&flag2),
            Err(DescriptorError::Field {
                field: "gid_present",
                source: FieldError::OutOfRange {
                    value: 2,
                    min: 0,
                    max: 1
                }
            })
        );
        assert_eq!(
            DcDescriptor::parse("00:11"),
            Err(DescriptorError::FieldCount(2))
        );
        let short_sfx = format!("{EXAMPLE}:1:2");
        assert_eq!(
            DescriptorWithSuffix::parse(&short_sfx),
            Err(DescriptorError::Field {
                field: "suffix_addr",
                source: FieldError::WrongLength {
                    expected: 16,
                    found: 1
                }
            })
        );
        assert_eq!(
            DescriptorWithSuffix::parse(&"a".repeat(513)),
            Err(DescriptorError::TooLong(513))
        );
    }
}
