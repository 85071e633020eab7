//! Pure codecs for the `x-amz-rdma-*` header family (documented in `docs/rdma-headers.md`; the
//! exchanges that use them in `docs/protocol.md`).
//!
//! "S3 control plane over HTTP, payload over RDMA" has several dialects keyed on
//! `x-amz-rdma-token`: NVIDIA cuObject DC descriptors (MinIO AIStor, Ceph, versitygw, NooBaa,
//! Dell via `x-rdma-info`), AMD hipObject's RC token (v1 one-shot and the two-phase
//! hipobj-rc-v2), libfabric `ofi1` windows (mmgaggle's Ceph/hipObject) and elbencho's RC shim.
//! Everything here is a pure function of header values: no I/O, no allocation proportional to
//! anything but the (bounded) input, a typed error for every malformed value, never a panic.
//!
//! Header names are given in lower case; HTTP header names are case-insensitive, so compare with
//! `eq_ignore_ascii_case`.
//!
//! Modules:
//! - [`token`]: the 44-byte / 88-hex hipObject RC token, `:addr:size` suffix, GID ↔ IPv4.
//! - [`descriptor`]: the 81-character cuObject DC descriptor, with optional suffix.
//! - [`reply`]: `x-amz-rdma-reply` (`ok`/`err`, decimal, `200:<token>`), parse, classify, encode.
//! - [`bytes`]: `x-amz-rdma-bytes-transferred` / `x-amz-rdma-bytes` (`N` or `N/total`).
//! - [`v2`]: hipobj-rc-v2 headers (session, cookie, PSN, QPN, MR, op, target, size, offset,
//!   checksums of both generations, capabilities).
//! - [`dispatch`]: which token family a header value belongs to.
//! - [`pairing`]: `rc-persistent` pairing and the capability route (routes, fabric names,
//!   the connect request and the judgement of its answer).
//! - [`acceptance`]: the client's acceptance rules for an answer to a tokened request.
//! - [`cuobject`]: cuObject's checksum check of an accepted GET's destination.
//! - [`v2::client`]: the client half of hipobj-rc-v2 (request headers, answer judgements).
//!
//! This module is the only place in the workspace that spells an `x-amz-rdma-*` header or an
//! RDMA route (`s3-lite/tests/rdma_spelling.rs` checks the other crates).

pub mod acceptance;
pub mod bytes;
pub mod cuobject;
pub mod descriptor;
pub mod dispatch;
mod field;
pub mod pairing;
pub mod reply;
pub mod token;
pub mod v2;

pub use bytes::{BytesError, BytesTransferred};
pub use descriptor::{DcDescriptor, DescriptorError, DescriptorWithSuffix};
pub use dispatch::{DispatchError, OfiToken, RcShimToken, TokenKind, classify};
pub use field::FieldError;
pub use reply::{Reply, ReplyClass, ReplyError};
pub use token::{
    AddrSize, RcToken, TokenError, TokenWithSuffix, Transport, client_nic_ipv4, gid_from_ipv4,
};

/// Request: the RDMA token or descriptor; its presence makes a request an RDMA request.
pub const RDMA_TOKEN: &str = "x-amz-rdma-token";
/// Dell ObjectScale's alias for [`RDMA_TOKEN`], carrying a cuObject descriptor.
pub const DELL_RDMA_INFO: &str = "x-rdma-info";
/// Request/response, NooBaa only: the RDMA agent (`cuobj`; absent means cuobj).
pub const RDMA_AGENT: &str = "x-amz-rdma-agent";
/// The only known value of [`RDMA_AGENT`].
pub const RDMA_AGENT_CUOBJ: &str = "cuobj";
/// Response: the RDMA outcome ([`reply`]).
pub const RDMA_REPLY: &str = "x-amz-rdma-reply";
/// Response: bytes moved over RDMA (spec name).
pub const RDMA_BYTES_TRANSFERRED: &str = "x-amz-rdma-bytes-transferred";
/// Response: bytes moved over RDMA (NooBaa / aws-c-s3 plugin name).
pub const RDMA_BYTES: &str = "x-amz-rdma-bytes";

/// v2: protocol marker (`hipobj-rc-v2`).
pub const RDMA_PROTOCOL: &str = "x-amz-rdma-protocol";
/// v2: status marker a server adds to a 501 when it does not speak the requested protocol.
pub const RDMA_PROTOCOL_STATUS: &str = "x-amz-rdma-protocol-status";
/// Value of [`RDMA_PROTOCOL_STATUS`] (sent as `X-Amz-Rdma-Protocol-Status: unsupported`).
pub const PROTOCOL_STATUS_UNSUPPORTED: &str = "unsupported";
/// v2 (and elbencho RC shim): session / connection id, 32 hex.
pub const RDMA_SESSION: &str = "x-amz-rdma-session";
/// v2: 32-bit client cookie, 8 hex.
pub const RDMA_COOKIE: &str = "x-amz-rdma-cookie";
/// v2 (and RC shim): packet sequence number, 6 hex.
pub const RDMA_PSN: &str = "x-amz-rdma-psn";
/// v2: queue pair number, bare hex.
pub const RDMA_QPN: &str = "x-amz-rdma-qpn";
/// v2: memory region address, bare hex.
pub const RDMA_MR_ADDR: &str = "x-amz-rdma-mr-addr";
/// v2: memory region rkey, bare hex.
pub const RDMA_MR_RKEY: &str = "x-amz-rdma-mr-rkey";
/// v2: `GET` or `PUT`.
pub const RDMA_OP: &str = "x-amz-rdma-op";
/// v2: `/bucket/key[?query]`.
pub const RDMA_TARGET: &str = "x-amz-rdma-target";
/// v2: transfer size, decimal.
pub const RDMA_SIZE: &str = "x-amz-rdma-size";
/// v2: object offset, decimal, optional.
pub const RDMA_OFFSET: &str = "x-amz-rdma-offset";
/// v2 (Ceph fork): requested RDMA checksum algorithm.
pub const RDMA_CHECKSUM_ALGORITHM: &str = "x-amz-rdma-checksum-algorithm";
/// v2 FINAL, old generation: `CRC64NVME <b64>`.
pub const RDMA_CHECKSUM: &str = "x-amz-rdma-checksum";
/// v2 FINAL, new generation: CRC64NVME base64.
pub const RDMA_CHECKSUM_CRC64NVME: &str = "x-amz-rdma-checksum-crc64nvme";
/// v2 FINAL, new generation: CRC32C base64.
pub const RDMA_CHECKSUM_CRC32C: &str = "x-amz-rdma-checksum-crc32c";
/// v2 FINAL: ETag of the stored object.
pub const RDMA_ETAG: &str = "x-amz-rdma-etag";
/// v2 FINAL: version id.
pub const RDMA_VERSION_ID: &str = "x-amz-rdma-version-id";
/// v2: server capabilities, comma list (`mp`).
pub const RDMA_CAPABILITIES: &str = "x-amz-rdma-capabilities";

/// versitygw's legacy three-header cuObject scheme: the descriptor.
pub const CUOBJ_RDMA_DESCR: &str = "x-cuobj-rdma-descr";
/// versitygw legacy: content length.
pub const CUOBJ_CONTENT_LENGTH: &str = "x-cuobj-content-length";
/// versitygw legacy: remote buffer start.
pub const CUOBJ_REMOTE_BUF_START: &str = "x-cuobj-remote-buf-start";

/// Every `x-amz-rdma-*` request header must be covered by SigV4 (docs/protocol.md, Signing the RDMA headers); true for
/// names of this family (case-insensitive).
pub fn is_rdma_header(name: &str) -> bool {
    name.get(..11)
        .is_some_and(|p| p.eq_ignore_ascii_case("x-amz-rdma-"))
        || name.eq_ignore_ascii_case(DELL_RDMA_INFO)
}

/// A response head decoded from `status` and `headers` (unit tests of the judgements).
#[cfg(test)]
pub(crate) fn test_head(status: u16, headers: &[(&str, &str)]) -> crate::http::ResponseHead {
    let mut wire = format!("HTTP/1.1 {status} X\r\n");
    for (n, v) in headers {
        wire.push_str(&format!("{n}: {v}\r\n"));
    }
    wire.push_str("\r\n");
    let mut d = crate::http::ResponseDecoder::new(crate::http::Limits::default(), false);
    match d.decode(wire.as_bytes()).unwrap().event {
        crate::http::Event::Head(h) => h,
        other => panic!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_membership() {
        assert!(is_rdma_header("X-Amz-Rdma-Token"));
        assert!(is_rdma_header(RDMA_CHECKSUM_CRC32C));
        assert!(is_rdma_header("X-RDMA-INFO"));
        assert!(!is_rdma_header("x-amz-date"));
        assert!(!is_rdma_header("x-amz-rdma"));
        assert!(!is_rdma_header("ü-amz-rdma-x"));
    }
}
