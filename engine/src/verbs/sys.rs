//! libibverbs C ABI, `sys` layer: structs, constants and a function table filled by `dlopen`.
//!
//! Written by hand from `<infiniband/verbs.h>` of **rdma-core 44.0** (Debian bookworm,
//! `libibverbs-dev 44.0-2`), x86_64 / LP64. Every struct below is checked at compile time
//! (size and the offsets we touch) against `sys_layout.rs`, which `regen-bindings.sh` generates
//! from the real header with a C compiler; a mismatch fails the build. The structs used here
//! have been append-only in rdma-core since the `ibv_context_ops` compat rework (v17); newer
//! releases only add fields after the ones we read, which is why a 44.0 layout is safe with the
//! `libibverbs.so.1` of later distributions.
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are `static inline` in `verbs.h`: they
//! call through `qp->context->ops` / `cq->context->ops`. They are reimplemented that way in
//! `result.rs` (the [`ibv_context_ops`] slots are checked against the header too).
//!
//! `#[allow(unsafe_code)]`: resolving symbols with `libloading` is unsafe (the declared type
//! must match the C prototype); each prototype below is copied from the header named above.
#![allow(unsafe_code)]
#![allow(non_camel_case_types)]
// Fields and constants are named after, and documented by, the C header.
#![allow(missing_docs)]
// Bindings: constants are kept complete for the enums they come from, used or not.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

use libloading::Library;

#[path = "sys_layout.rs"]
mod layout;

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

// enum ibv_qp_state
pub const IBV_QPS_RESET: c_uint = 0;
pub const IBV_QPS_INIT: c_uint = 1;
pub const IBV_QPS_RTR: c_uint = 2;
pub const IBV_QPS_RTS: c_uint = 3;
pub const IBV_QPS_SQD: c_uint = 4;
pub const IBV_QPS_SQE: c_uint = 5;
pub const IBV_QPS_ERR: c_uint = 6;

// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_CUR_STATE: c_int = 1 << 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_ALT_PATH: c_int = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: c_int = 1 << 18;
pub const IBV_QP_CAP: c_int = 1 << 19;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

// enum ibv_qp_type
pub const IBV_QPT_RC: c_uint = 2;

// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: c_int = 1 << 3;
/// `IBV_ACCESS_OPTIONAL_FIRST`: ignored by providers that do not support it.
pub const IBV_ACCESS_RELAXED_ORDERING: c_int = 1 << 20;
/// `IBV_ACCESS_OPTIONAL_RANGE` (`IB_UVERBS_ACCESS_OPTIONAL_RANGE`): flags the kernel may drop.
/// `verbs.h` routes registrations carrying any of them to `ibv_reg_mr_iova2`.
pub const IBV_ACCESS_OPTIONAL_RANGE: c_int = 0x3ff0_0000;

// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
pub const IBV_WR_SEND: c_uint = 2;
pub const IBV_WR_SEND_WITH_IMM: c_uint = 3;
pub const IBV_WR_RDMA_READ: c_uint = 4;

// enum ibv_send_flags
pub const IBV_SEND_FENCE: c_uint = 1 << 0;
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;

// enum ibv_wc_opcode
pub const IBV_WC_SEND: c_uint = 0;
pub const IBV_WC_RDMA_WRITE: c_uint = 1;
pub const IBV_WC_RDMA_READ: c_uint = 2;
pub const IBV_WC_RECV: c_uint = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_uint = (1 << 7) + 1;

// enum ibv_wc_flags
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;

// enum ibv_port_state
pub const IBV_PORT_ACTIVE: c_uint = 4;

// link layer
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `struct _ibv_device_ops` (two unused slots).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct _ibv_device_ops {
    pub _dummy1: *mut c_void,
    pub _dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *)`.
pub type poll_cq_fn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `int (*req_notify_cq)(struct ibv_cq *, int solicited_only)`.
pub type req_notify_cq_fn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **)`.
pub type post_send_fn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **)`.
pub type post_recv_fn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: 32 function-pointer slots; only the four slots that `verbs.h`
/// calls from its inline functions (the data path and `ibv_req_notify_cq`) are typed, the
/// rest are opaque.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context_ops {
    /// Slots 0..=10 (`_compat_query_device` .. `_compat_create_cq`).
    pub _before_poll: [*mut c_void; 11],
    pub poll_cq: Option<poll_cq_fn>,
    pub req_notify_cq: Option<req_notify_cq_fn>,
    /// Slots 13..=24 (`_compat_cq_event` .. `_compat_destroy_qp`).
    pub _between: [*mut c_void; 12],
    pub post_send: Option<post_send_fn>,
    pub post_recv: Option<post_recv_fn>,
    /// Slots 27..=31 (`_compat_create_ah` .. `_compat_async_event`).
    pub _after: [*mut c_void; 5],
}

/// `struct ibv_context`. `pthread_mutex_t` is 40 bytes on x86_64 / aarch64 glibc.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: [u64; 5],
    pub abi_compat: *mut c_void,
}

/// `struct ibv_comp_channel`: a completion channel; its `fd` turns readable when an armed CQ
/// of the channel gets a completion.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_cq` (`pthread_mutex_t` 40 + `pthread_cond_t` 48 bytes).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut c_void,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: [u64; 5],
    pub cond: [u64; 6],
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    pub mutex: [u64; 5],
    pub cond: [u64; 6],
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `union ibv_gid`: 16 raw bytes, 8-byte aligned (the `global` view holds two `__be64`).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_port_attr` (rdma-core 44: ends with `flags`, `port_cap_flags2`). The exported
/// `ibv_query_port` symbol fills the older prefix (`_compat_ibv_port_attr`, through
/// `link_layer`); callers zero the struct first, as `verbs.h` does.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_wc`. `imm_data` is the `__be32` arm of an anonymous union (network order).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The `wr.rdma` arm of `ibv_send_wr`'s `wr` union, padded to the union's size (the `atomic`
/// arm is the largest: 28 bytes, 8-aligned → 32).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
    pub _pad: [u32; 5],
}

/// `struct ibv_send_wr`, with the unions flattened to the arms RC RDMA uses; the trailing
/// `qp_type` and `bind_mw`/`tso` unions are kept as zeroed padding.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// `imm_data` (`__be32`) / `invalidate_rkey`.
    pub imm_data: u32,
    pub rdma: ibv_send_wr_rdma,
    /// `qp_type.xrc.remote_srqn` + padding.
    pub qp_type: [u32; 2],
    /// `bind_mw` / `tso` union.
    pub _bind_mw: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

// Layout checks against the C compiler's view of rdma-core 44.0 (sys_layout.rs).
const _: () = {
    use layout::*;
    assert!(size_of::<ibv_device>() == SIZE_ibv_device);
    assert!(offset_of!(ibv_device, name) == OFF_ibv_device_name);
    assert!(offset_of!(ibv_device, ibdev_path) == OFF_ibv_device_ibdev_path);
    assert!(size_of::<ibv_context_ops>() == SIZE_ibv_context_ops);
    assert!(offset_of!(ibv_context_ops, poll_cq) == OFF_ibv_context_ops_poll_cq);
    assert!(offset_of!(ibv_context_ops, post_send) == OFF_ibv_context_ops_post_send);
    assert!(offset_of!(ibv_context_ops, post_recv) == OFF_ibv_context_ops_post_recv);
    assert!(offset_of!(ibv_context_ops, req_notify_cq) == OFF_ibv_context_ops_req_notify_cq);
    assert!(size_of::<ibv_comp_channel>() == SIZE_ibv_comp_channel);
    assert!(offset_of!(ibv_comp_channel, fd) == OFF_ibv_comp_channel_fd);
    assert!(size_of::<ibv_context>() == SIZE_ibv_context);
    assert!(offset_of!(ibv_context, ops) == OFF_ibv_context_ops);
    assert!(offset_of!(ibv_context, cmd_fd) == OFF_ibv_context_cmd_fd);
    assert!(size_of::<ibv_pd>() == SIZE_ibv_pd);
    assert!(size_of::<ibv_mr>() == SIZE_ibv_mr);
    assert!(offset_of!(ibv_mr, addr) == OFF_ibv_mr_addr);
    assert!(offset_of!(ibv_mr, lkey) == OFF_ibv_mr_lkey);
    assert!(offset_of!(ibv_mr, rkey) == OFF_ibv_mr_rkey);
    assert!(size_of::<ibv_cq>() == SIZE_ibv_cq);
    assert!(offset_of!(ibv_cq, cqe) == OFF_ibv_cq_cqe);
    assert!(size_of::<ibv_qp>() == SIZE_ibv_qp);
    assert!(offset_of!(ibv_qp, qp_num) == OFF_ibv_qp_qp_num);
    assert!(offset_of!(ibv_qp, state) == OFF_ibv_qp_state);
    assert!(offset_of!(ibv_qp, qp_type) == OFF_ibv_qp_qp_type);
    assert!(size_of::<ibv_qp_cap>() == SIZE_ibv_qp_cap);
    assert!(size_of::<ibv_qp_init_attr>() == SIZE_ibv_qp_init_attr);
    assert!(offset_of!(ibv_qp_init_attr, cap) == OFF_ibv_qp_init_attr_cap);
    assert!(offset_of!(ibv_qp_init_attr, qp_type) == OFF_ibv_qp_init_attr_qp_type);
    assert!(offset_of!(ibv_qp_init_attr, sq_sig_all) == OFF_ibv_qp_init_attr_sq_sig_all);
    assert!(size_of::<ibv_global_route>() == SIZE_ibv_global_route);
    assert!(offset_of!(ibv_global_route, flow_label) == OFF_ibv_global_route_flow_label);
    assert!(offset_of!(ibv_global_route, sgid_index) == OFF_ibv_global_route_sgid_index);
    assert!(size_of::<ibv_ah_attr>() == SIZE_ibv_ah_attr);
    assert!(offset_of!(ibv_ah_attr, dlid) == OFF_ibv_ah_attr_dlid);
    assert!(offset_of!(ibv_ah_attr, is_global) == OFF_ibv_ah_attr_is_global);
    assert!(offset_of!(ibv_ah_attr, port_num) == OFF_ibv_ah_attr_port_num);
    assert!(size_of::<ibv_qp_attr>() == SIZE_ibv_qp_attr);
    assert!(offset_of!(ibv_qp_attr, qp_access_flags) == OFF_ibv_qp_attr_qp_access_flags);
    assert!(offset_of!(ibv_qp_attr, cap) == OFF_ibv_qp_attr_cap);
    assert!(offset_of!(ibv_qp_attr, ah_attr) == OFF_ibv_qp_attr_ah_attr);
    assert!(offset_of!(ibv_qp_attr, alt_ah_attr) == OFF_ibv_qp_attr_alt_ah_attr);
    assert!(offset_of!(ibv_qp_attr, pkey_index) == OFF_ibv_qp_attr_pkey_index);
    assert!(offset_of!(ibv_qp_attr, max_rd_atomic) == OFF_ibv_qp_attr_max_rd_atomic);
    assert!(offset_of!(ibv_qp_attr, port_num) == OFF_ibv_qp_attr_port_num);
    assert!(offset_of!(ibv_qp_attr, rnr_retry) == OFF_ibv_qp_attr_rnr_retry);
    assert!(offset_of!(ibv_qp_attr, rate_limit) == OFF_ibv_qp_attr_rate_limit);
    assert!(size_of::<ibv_port_attr>() == SIZE_ibv_port_attr);
    assert!(offset_of!(ibv_port_attr, active_mtu) == OFF_ibv_port_attr_active_mtu);
    assert!(offset_of!(ibv_port_attr, gid_tbl_len) == OFF_ibv_port_attr_gid_tbl_len);
    assert!(offset_of!(ibv_port_attr, lid) == OFF_ibv_port_attr_lid);
    assert!(offset_of!(ibv_port_attr, link_layer) == OFF_ibv_port_attr_link_layer);
    assert!(offset_of!(ibv_port_attr, port_cap_flags2) == OFF_ibv_port_attr_port_cap_flags2);
    assert!(size_of::<ibv_gid>() == SIZE_ibv_gid);
    assert!(align_of::<ibv_gid>() == ALIGN_ibv_gid);
    assert!(size_of::<ibv_wc>() == SIZE_ibv_wc);
    assert!(offset_of!(ibv_wc, status) == OFF_ibv_wc_status);
    assert!(offset_of!(ibv_wc, byte_len) == OFF_ibv_wc_byte_len);
    assert!(offset_of!(ibv_wc, imm_data) == OFF_ibv_wc_imm_data);
    assert!(offset_of!(ibv_wc, qp_num) == OFF_ibv_wc_qp_num);
    assert!(offset_of!(ibv_wc, wc_flags) == OFF_ibv_wc_wc_flags);
    assert!(offset_of!(ibv_wc, dlid_path_bits) == OFF_ibv_wc_dlid_path_bits);
    assert!(size_of::<ibv_sge>() == SIZE_ibv_sge);
    assert!(size_of::<ibv_send_wr>() == SIZE_ibv_send_wr);
    assert!(offset_of!(ibv_send_wr, next) == OFF_ibv_send_wr_next);
    assert!(offset_of!(ibv_send_wr, num_sge) == OFF_ibv_send_wr_num_sge);
    assert!(offset_of!(ibv_send_wr, opcode) == OFF_ibv_send_wr_opcode);
    assert!(offset_of!(ibv_send_wr, send_flags) == OFF_ibv_send_wr_send_flags);
    assert!(offset_of!(ibv_send_wr, imm_data) == OFF_ibv_send_wr_imm_data);
    assert!(offset_of!(ibv_send_wr, rdma) == OFF_ibv_send_wr_wr);
    assert!(offset_of!(ibv_send_wr, qp_type) == OFF_ibv_send_wr_qp_type);
    assert!(offset_of!(ibv_send_wr, _bind_mw) == OFF_ibv_send_wr_bind_mw);
    assert!(size_of::<ibv_recv_wr>() == SIZE_ibv_recv_wr);
    assert!(offset_of!(ibv_recv_wr, num_sge) == OFF_ibv_recv_wr_num_sge);
};

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
compile_error!("engine::verbs: the checked-in libibverbs layout is for 64-bit Linux only");

/// The soname loaded at run time (the ABI-stable name every distribution ships).
pub const LIB_NAME: &str = "libibverbs.so.1";

/// The exported libibverbs entry points we call, resolved once by `dlopen`.
#[derive(Debug)]
pub struct VerbsApi {
    pub ibv_get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub ibv_free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub ibv_get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    pub ibv_open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub ibv_close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    /// Exported as taking `_compat_ibv_port_attr` (a prefix of [`ibv_port_attr`]).
    pub ibv_query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub ibv_query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    pub ibv_alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub ibv_dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub ibv_reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub ibv_dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub ibv_create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut c_void,
        c_int,
    ) -> *mut ibv_cq,
    pub ibv_destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub ibv_create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub ibv_destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub ibv_get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    pub ibv_ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, c_uint),
    pub ibv_create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub ibv_modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub ibv_query_qp:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    pub ibv_destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    /// rdma-core ≥ 29 (`IBVERBS_1.8`): `(pd, addr, length, iova, access)`; what `verbs.h`'s
    /// `ibv_reg_mr` macro calls when optional access flags are set.
    pub ibv_reg_mr_iova2:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut ibv_mr>,
    /// rdma-core ≥ 34 (`IBVERBS_1.12`): `(pd, offset, length, iova, fd, access)`.
    pub ibv_reg_dmabuf_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr>,
    /// INVARIANT: the library the pointers above point into; dropped last (after them).
    pub _lib: Library,
}

macro_rules! required {
    ($lib:expr, $name:ident) => {{
        // SAFETY: the field's type is the C prototype of `$name` from verbs.h (rdma-core 44);
        // the symbol stays valid while `_lib` (stored alongside) lives.
        match unsafe { $lib.get(concat!(stringify!($name), "\0").as_bytes()) } {
            Ok(sym) => *sym,
            Err(_) => return Err(LoadError::MissingSymbol(stringify!($name))),
        }
    }};
}

/// Why libibverbs could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// `dlopen` failed (not installed): the loader's message.
    NotFound(String),
    /// A required symbol is absent (a libibverbs older than rdma-core 17).
    MissingSymbol(&'static str),
}

impl VerbsApi {
    /// `dlopen`s [`LIB_NAME`] and resolves every entry point.
    pub fn load() -> Result<Self, LoadError> {
        // SAFETY: loading libibverbs runs its initialisers (provider discovery), which is what
        // using it requires; the name is the library's soname.
        let lib =
            unsafe { Library::new(LIB_NAME) }.map_err(|e| LoadError::NotFound(e.to_string()))?;
        // SAFETY: as in `required!`; an absent optional symbol is `None`.
        let dmabuf = unsafe { lib.get(b"ibv_reg_dmabuf_mr\0") }.ok().map(|s| *s);
        // SAFETY: as above.
        let iova2 = unsafe { lib.get(b"ibv_reg_mr_iova2\0") }.ok().map(|s| *s);
        Ok(Self {
            ibv_get_device_list: required!(lib, ibv_get_device_list),
            ibv_free_device_list: required!(lib, ibv_free_device_list),
            ibv_get_device_name: required!(lib, ibv_get_device_name),
            ibv_open_device: required!(lib, ibv_open_device),
            ibv_close_device: required!(lib, ibv_close_device),
            ibv_query_port: required!(lib, ibv_query_port),
            ibv_query_gid: required!(lib, ibv_query_gid),
            ibv_alloc_pd: required!(lib, ibv_alloc_pd),
            ibv_dealloc_pd: required!(lib, ibv_dealloc_pd),
            ibv_reg_mr: required!(lib, ibv_reg_mr),
            ibv_dereg_mr: required!(lib, ibv_dereg_mr),
            ibv_create_cq: required!(lib, ibv_create_cq),
            ibv_destroy_cq: required!(lib, ibv_destroy_cq),
            ibv_create_comp_channel: required!(lib, ibv_create_comp_channel),
            ibv_destroy_comp_channel: required!(lib, ibv_destroy_comp_channel),
            ibv_get_cq_event: required!(lib, ibv_get_cq_event),
            ibv_ack_cq_events: required!(lib, ibv_ack_cq_events),
            ibv_create_qp: required!(lib, ibv_create_qp),
            ibv_modify_qp: required!(lib, ibv_modify_qp),
            ibv_query_qp: required!(lib, ibv_query_qp),
            ibv_destroy_qp: required!(lib, ibv_destroy_qp),
            ibv_reg_mr_iova2: iova2,
            ibv_reg_dmabuf_mr: dmabuf,
            _lib: lib,
        })
    }
}

impl ibv_send_wr {
    /// An all-zero work request (null pointers, no SGE).
    #[must_use]
    pub const fn zeroed() -> Self {
        Self {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            rdma: ibv_send_wr_rdma {
                remote_addr: 0,
                rkey: 0,
                _pad: [0; 5],
            },
            qp_type: [0; 2],
            _bind_mw: [0; 6],
        }
    }
}

impl ibv_recv_wr {
    /// An all-zero receive request.
    #[must_use]
    pub const fn zeroed() -> Self {
        Self {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        }
    }
}
