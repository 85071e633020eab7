//! Work requests and work completions, shaped like verbs (`ibv_send_wr`, `ibv_recv_wr`,
//! `ibv_wc`) so the verbs fabric can take the same values.

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

/// Completion status (verbs `ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcStatus {
    /// Done.
    #[default]
    Success,
    /// A received SEND was longer than the RECV buffer.
    LocalLengthError,
    /// The SGE's lkey, bounds or access flags were wrong, or its region was deregistered.
    LocalProtectionError,
    /// Flushed: the queue pair entered the error state before this request ran.
    WrFlushError,
    /// The peer refused the rkey, the bounds or the access (nothing outside the grant moved).
    RemoteAccessError,
    /// The peer found the request malformed or out of protocol.
    RemoteInvalidRequest,
    /// The peer failed locally.
    RemoteOperationError,
    /// No progress from the peer within the timeout, or the connection broke.
    RetryExceeded,
    /// The peer had no RECV posted within its receiver-not-ready wait.
    RnrRetryExceeded,
    /// The peer's response was inconsistent with the request.
    BadResponse,
}

/// What a completion reports (verbs `ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcOpcode {
    /// An RDMA WRITE (with or without immediate) we posted.
    #[default]
    RdmaWrite,
    /// An RDMA READ we posted.
    RdmaRead,
    /// A SEND we posted.
    Send,
    /// A RECV consumed by a peer's SEND.
    Recv,
    /// A RECV consumed by a peer's WRITE_WITH_IMM (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RecvRdmaWithImm,
}

/// One completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Kind.
    pub opcode: WcOpcode,
    /// Bytes moved (for `RecvRdmaWithImm`: the whole RDMA WRITE message).
    pub byte_len: u32,
    /// Immediate data (host order), when the peer sent one.
    pub imm_data: Option<u32>,
    /// The local queue pair.
    pub qp_num: u32,
}
