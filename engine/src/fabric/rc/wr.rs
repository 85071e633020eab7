//! The RC vocabulary both devices speak: work requests, scatter entries, remote addresses,
//! access rights and completions, shaped like verbs (`ibv_send_wr`, `ibv_recv_wr`, `ibv_sge`,
//! `IBV_ACCESS_*`, `ibv_wc`). The soft fabric and the libibverbs wrapper both take and return
//! these values; neither borrows the other's types. Plain data: no I/O, no unsafe.

use std::ops::BitOr;

/// A local buffer: `length` bytes at `addr` inside the region named by `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Virtual address (region `addr()` + offset).
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// A peer's buffer, as a token grants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Virtual address in the peer's region.
    pub addr: u64,
    /// The peer region's rkey.
    pub rkey: u32,
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// RDMA WRITE of the SGE into the remote buffer.
    Write(RemoteAddr),
    /// RDMA WRITE then an immediate that consumes one RECV at the peer.
    WriteWithImm(RemoteAddr, u32),
    /// RDMA READ of the remote buffer into the SGE (needs `LOCAL_WRITE`).
    Read(RemoteAddr),
    /// SEND of the SGE into the peer's next RECV buffer.
    Send,
    /// SEND with an immediate.
    SendWithImm(u32),
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The local buffer (source, or destination for READ).
    pub sge: Sge,
    /// Generate a completion on success (errors always complete), `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// The receiver checks these bytes end to end (a WRITE into an engine soft GET window,
    /// whose landing digest it compares with the checksum named for the whole range), so the
    /// soft fabric sends the WRITE's frames without their CRC-32C trailer (`UNCHECKED`,
    /// docs/soft-fabric.md); a receiver that does not track the region's landing refuses them.
    /// Set it only when the receiver asked for it. Verbs ignores it (the NIC checks every
    /// packet).
    pub checked_end_to_end: bool,
    /// Nobody waits on this WRITE's completion soon (a server's last WRITE of a GET it has
    /// already answered), so the soft fabric lets the receiver hold its acknowledgement back
    /// and send it with a later one (`ACK_LATER`, docs/soft-fabric.md): up to 8 messages or
    /// 1 ms later. Set it only when the receiver said it understands the flag (the
    /// `x-amz-rdma-soft-features: ack-later` of its pairing). Verbs ignores it (a NIC
    /// coalesces acknowledgements by itself).
    pub ack_later: bool,
}

impl SendWr {
    /// A signaled work request.
    #[must_use]
    pub const fn new(wr_id: u64, op: SendOp, sge: Sge) -> Self {
        Self {
            wr_id,
            op,
            sge,
            signaled: true,
            checked_end_to_end: false,
            ack_later: false,
        }
    }
}

/// A receive-queue work request: consumed by an incoming WRITE_WITH_IMM (buffer unused) or
/// SEND (payload lands in `sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Buffer for SEND payloads; `None` for immediate-only use.
    pub sge: Option<Sge>,
}

/// Access rights of a registered region (verbs `IBV_ACCESS_*`, as neutral bits; the verbs
/// wrapper turns them into the C constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local reads (sources of WRITE / SEND).
    pub const NONE: Access = Access(0);
    /// Local work requests may write it (RDMA READ destinations, RECV buffers).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may RDMA WRITE into it.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may RDMA READ from it.
    pub const REMOTE_READ: Access = Access(4);
    /// PCIe relaxed ordering (a NIC hint; the soft fabric ignores it).
    pub const RELAXED_ORDERING: Access = Access(8);

    /// Whether every right in `other` is granted.
    #[must_use]
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Completion status, named after verbs' `enum ibv_wc_status` (the soft fabric reports the
/// first ten; a NIC any of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    #[default]
    Success,
    /// `IBV_WC_LOC_LEN_ERR`.
    LocalLengthError,
    /// `IBV_WC_LOC_PROT_ERR`: lkey, bounds or access of the SGE.
    LocalProtectionError,
    /// `IBV_WC_WR_FLUSH_ERR`: the QP entered the error state first.
    WrFlushError,
    /// `IBV_WC_REM_ACCESS_ERR`: the peer refused rkey, bounds or access.
    RemoteAccessError,
    /// `IBV_WC_REM_INV_REQ_ERR`.
    RemoteInvalidRequest,
    /// `IBV_WC_REM_OP_ERR`.
    RemoteOperationError,
    /// `IBV_WC_RETRY_EXC_ERR`: no ACK within timeout × retry_cnt (peer QP not in RTR, path).
    RetryExceeded,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: the peer had no RECV posted.
    RnrRetryExceeded,
    /// `IBV_WC_BAD_RESP_ERR`.
    BadResponse,
    /// `IBV_WC_LOC_QP_OP_ERR`.
    LocalQpOperationError,
    /// `IBV_WC_LOC_ACCESS_ERR`.
    LocalAccessError,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    RemoteInvalidReadRequest,
    /// `IBV_WC_FATAL_ERR`.
    Fatal,
    /// `IBV_WC_GENERAL_ERR`.
    General,
    /// Any other value (MW, EEC, tag matching).
    Other(u32),
}

/// What a completion reports (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcOpcode {
    /// `IBV_WC_RDMA_WRITE` (with or without immediate).
    #[default]
    RdmaWrite,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead,
    /// `IBV_WC_SEND`.
    Send,
    /// `IBV_WC_RECV`: a RECV consumed by a SEND.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a RECV consumed by a WRITE_WITH_IMM.
    RecvRdmaWithImm,
    /// Anything else (atomics, MW bind, TSO...).
    Other(u32),
}

/// One completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Kind. Only meaningful on success for send-side completions (verbs leaves it undefined
    /// on error).
    pub opcode: WcOpcode,
    /// Bytes (receives: the message length).
    pub byte_len: u32,
    /// Immediate data in host order, when `IBV_WC_WITH_IMM` is set.
    pub imm_data: Option<u32>,
    /// The local QP.
    pub qp_num: u32,
    /// Vendor-specific error detail.
    pub vendor_err: u32,
}

impl WorkCompletion {
    /// Whether the work request succeeded.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}
