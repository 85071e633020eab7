//! The control-path error of the verbs layer: one variant per failing verb (the C name in the
//! doc), the `errno` as `#[source] io::Error`, and context fields. Data-path failures are not
//! here: they arrive as [`super::WcStatus`] in completions and as [`PostError`] from posting.

use std::io;

use super::qp_state::{MaskError, QpState};

/// Why libibverbs cannot be used at all: the one answer [`super::probe`] gives on hosts
/// without RDMA.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// `libibverbs.so.1` is not installed (`apt-get install libibverbs1 ibverbs-providers`).
    #[error("RDMA verbs unavailable: libibverbs.so.1 could not be loaded ({0})")]
    LibraryMissing(String),
    /// libibverbs is too old for a symbol we need.
    #[error("RDMA verbs unavailable: libibverbs lacks {0} (rdma-core older than 17)")]
    MissingSymbol(&'static str),
    /// The library loaded but lists no device (no RDMA NIC, no `rdma link add … type rxe`,
    /// no `ib_uverbs` module, or no provider library for the NIC).
    #[error(
        "RDMA verbs unavailable: libibverbs found no RDMA device (no NIC, no ib_uverbs, or no \
         provider in ibverbs-providers)"
    )]
    NoDevice,
    /// `ibv_get_device_list` failed with `ENOSYS`: the running kernel has no RDMA support
    /// (no `ib_uverbs`; containers and kernels built without `CONFIG_INFINIBAND`).
    #[error(
        "RDMA verbs unavailable: the kernel has no RDMA support (ibv_get_device_list: ENOSYS; \
         load ib_uverbs or use a kernel with CONFIG_INFINIBAND)"
    )]
    NoKernelSupport,
    /// `ibv_get_device_list` failed otherwise.
    #[error("RDMA verbs unavailable: ibv_get_device_list failed (errno {0})")]
    DeviceList(i32),
}

/// A failing verb.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The library or every device is unavailable.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// No device of that name (`ibv_get_device_list`).
    #[error("no RDMA device named {name:?} (have: {available})")]
    NoSuchDevice {
        /// Name asked for.
        name: String,
        /// Names present, comma-separated.
        available: String,
    },
    /// `ibv_open_device`.
    #[error("ibv_open_device({device}) failed")]
    OpenDevice {
        /// Device name.
        device: String,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_port`.
    #[error("ibv_query_port({device}, port {port}) failed")]
    QueryPort {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// The port is not `ACTIVE` (cable, link down, or `rdma link` not up).
    #[error("{device} port {port} is not active (state {state})")]
    PortDown {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// Raw `ibv_port_state`.
        state: u32,
    },
    /// `ibv_query_gid`.
    #[error("ibv_query_gid({device}, port {port}, index {index}) failed")]
    QueryGid {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// Index.
        index: u8,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// No usable GID (all zero or unknown type) in sysfs for the port.
    #[error("{device} port {port}: no usable RoCE/IB GID in {path}")]
    NoGid {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// The sysfs directory read.
        path: String,
    },
    /// No GID of the peer's family on the port (docs/verbs.md, GID choice): the peer's token cannot be
    /// paired from this device.
    #[error("no local GID of the peer's family ({family}) on {device} port {port}")]
    NoGidForPeer {
        /// Device.
        device: String,
        /// Port.
        port: u8,
        /// The peer GID's family.
        family: super::gid::GidFamily,
    },
    /// `ibv_alloc_pd`.
    #[error("ibv_alloc_pd failed")]
    AllocPd(#[source] io::Error),
    /// Host memory for a registration could not be allocated.
    #[error("could not allocate {0} bytes to register")]
    Alloc(usize),
    /// `ibv_reg_mr`.
    #[error("ibv_reg_mr({len} bytes, access {access:#x}) failed")]
    RegMr {
        /// Bytes.
        len: usize,
        /// Access flags.
        access: i32,
        /// errno (`ENOMEM`: raise `ulimit -l`).
        #[source]
        source: io::Error,
    },
    /// `ibv_reg_dmabuf_mr`.
    #[error("ibv_reg_dmabuf_mr(fd {fd}, offset {offset}, {len} bytes) failed")]
    RegDmabufMr {
        /// dmabuf fd.
        fd: i32,
        /// Offset in the dmabuf.
        offset: u64,
        /// Bytes.
        len: usize,
        /// errno (`EOPNOTSUPP`: the provider cannot).
        #[source]
        source: io::Error,
    },
    /// A verb this libibverbs or provider lacks (`EOPNOTSUPP`, or an absent optional symbol).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// `ibv_create_cq`.
    #[error("ibv_create_cq({cqe} entries) failed")]
    CreateCq {
        /// Entries asked for.
        cqe: u32,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_create_qp`.
    #[error("ibv_create_qp(RC, send {max_send_wr}, recv {max_recv_wr}) failed")]
    CreateQp {
        /// Send queue depth asked for.
        max_send_wr: u32,
        /// Receive queue depth asked for.
        max_recv_wr: u32,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// An attribute mask that does not fit the transition, caught before calling the kernel.
    #[error("modify_qp refused before the call: {0}")]
    Mask(#[from] MaskError),
    /// `ibv_modify_qp` failed; `detail` is the QP state table's diagnosis for `EINVAL`.
    #[error("ibv_modify_qp(qpn {qpn:#x}, {from:?} -> {to:?}) failed: {detail}")]
    ModifyQp {
        /// QP number.
        qpn: u32,
        /// State the caller believed the QP was in.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// What to change.
        detail: String,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_poll_cq` returned a negative value (CQ overrun or provider failure).
    #[error("ibv_poll_cq failed ({0})")]
    PollCq(i32),
    /// `ibv_req_notify_cq` failed (or the CQ has no completion channel).
    #[error("ibv_req_notify_cq failed")]
    ArmCq(#[source] io::Error),
    /// A peer's token cannot drive this QP.
    #[error(transparent)]
    PeerToken(#[from] super::token::PeerTokenError),
    /// An argument out of range (offset past a region, zero-length registration...).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
}

/// Why a post was refused (`ibv_post_send` / `ibv_post_recv` non-zero): nothing from `bad_wr` on
/// was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// `ENOMEM`: the work queue is full (the soft fabric's `QueueFull`).
    #[error("work queue full")]
    QueueFull,
    /// `EINVAL` or another errno: a malformed request or a QP state that refuses posts.
    #[error("post refused (errno {errno}) at work request {wr_id:#x}; QP state {state:?}")]
    Refused {
        /// errno.
        errno: i32,
        /// The first work request not posted.
        wr_id: u64,
        /// QP state as cached by the safe layer.
        state: QpState,
    },
    /// A work request the verbs layer does not translate.
    #[error("unsupported work request: {0}")]
    Unsupported(&'static str),
    /// A batch longer than the send queue.
    #[error("batch of {0} work requests exceeds the queue depth")]
    TooLong(usize),
}
