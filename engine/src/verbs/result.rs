//! `result` layer: one function per C call (named after it, `ibv_` dropped), each turning the
//! C status into `Result` in one idiom. Pointer-taking functions are `unsafe fn`: their
//! contract is that the pointers come from the matching `ibv_*` constructor and are still
//! live. The three `static inline` data-path calls of `verbs.h` (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq`) are reimplemented here through `context->ops`, exactly as
//! the header does.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};
use std::io;
use std::ptr::{self, NonNull};

use super::error::Unavailable;
use super::sys::{self, VerbsApi};

fn last_errno() -> io::Error {
    let e = io::Error::last_os_error();
    // Some providers return NULL without setting errno; say so rather than "Success".
    if e.raw_os_error() == Some(0) {
        io::Error::other("verbs call failed without setting errno")
    } else {
        e
    }
}

fn nonnull<T>(p: *mut T) -> io::Result<NonNull<T>> {
    NonNull::new(p).ok_or_else(last_errno)
}

/// The devices libibverbs lists, by name (`ibv_get_device_list` + `ibv_get_device_name`).
pub fn device_names(api: &VerbsApi) -> Result<Vec<String>, Unavailable> {
    with_device_list(api, |list| {
        list.iter()
            .map(|d| {
                // SAFETY: `d` is an entry of the live device list; the returned name lives in
                // the device struct, copied out before the list is freed.
                let name = unsafe { (api.ibv_get_device_name)(*d) };
                if name.is_null() {
                    String::new()
                } else {
                    // SAFETY: non-null, NUL-terminated (`char name[IBV_SYSFS_NAME_MAX]`).
                    unsafe { CStr::from_ptr(name) }
                        .to_string_lossy()
                        .into_owned()
                }
            })
            .collect()
    })
}

/// Runs `f` over the device list and frees it afterwards.
pub fn with_device_list<R>(
    api: &VerbsApi,
    f: impl FnOnce(&[*mut sys::ibv_device]) -> R,
) -> Result<R, Unavailable> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below with the matching call.
    let list = unsafe { (api.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        return Err(match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSYS) => Unavailable::NoKernelSupport,
            e => Unavailable::DeviceList(e.unwrap_or(0)),
        });
    }
    let len = usize::try_from(n).unwrap_or(0);
    // SAFETY: libibverbs returns `n` valid entries followed by NULL; the slice is dropped
    // before the list is freed.
    let r = f(unsafe { std::slice::from_raw_parts(list, len) });
    // SAFETY: `list` came from `ibv_get_device_list` and is freed once.
    unsafe { (api.ibv_free_device_list)(list) };
    Ok(r)
}

/// `ibv_open_device`.
///
/// # Safety
/// `dev` is an entry of a live device list.
pub unsafe fn open_device(
    api: &VerbsApi,
    dev: *mut sys::ibv_device,
) -> io::Result<NonNull<sys::ibv_context>> {
    // SAFETY: caller contract.
    nonnull(unsafe { (api.ibv_open_device)(dev) })
}

/// `ibv_close_device`.
///
/// # Safety
/// `ctx` is open and every child object has been destroyed.
pub unsafe fn close_device(api: &VerbsApi, ctx: NonNull<sys::ibv_context>) -> io::Result<()> {
    // SAFETY: caller contract.
    status(unsafe { (api.ibv_close_device)(ctx.as_ptr()) })
}

fn status(rc: c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        rc if rc < 0 => Err(io::Error::from_raw_os_error(-rc)),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// `ibv_query_port` (the exported symbol: fills the compat prefix of a zeroed struct).
///
/// # Safety
/// `ctx` is open.
pub unsafe fn query_port(
    api: &VerbsApi,
    ctx: NonNull<sys::ibv_context>,
    port: u8,
) -> io::Result<sys::ibv_port_attr> {
    let mut attr = sys::ibv_port_attr::default();
    // SAFETY: caller contract; `attr` is a zeroed, large-enough out struct.
    status(unsafe { (api.ibv_query_port)(ctx.as_ptr(), port, &mut attr) })?;
    Ok(attr)
}

/// `ibv_query_gid`.
///
/// # Safety
/// `ctx` is open.
pub unsafe fn query_gid(
    api: &VerbsApi,
    ctx: NonNull<sys::ibv_context>,
    port: u8,
    index: u8,
) -> io::Result<[u8; 16]> {
    let mut gid = sys::ibv_gid::default();
    // SAFETY: caller contract; `gid` is a valid out struct.
    status(unsafe { (api.ibv_query_gid)(ctx.as_ptr(), port, c_int::from(index), &mut gid) })?;
    Ok(gid.raw)
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `ctx` is open.
pub unsafe fn alloc_pd(
    api: &VerbsApi,
    ctx: NonNull<sys::ibv_context>,
) -> io::Result<NonNull<sys::ibv_pd>> {
    // SAFETY: caller contract.
    nonnull(unsafe { (api.ibv_alloc_pd)(ctx.as_ptr()) })
}

/// `ibv_dealloc_pd`.
///
/// # Safety
/// `pd` is live and has no MR or QP left.
pub unsafe fn dealloc_pd(api: &VerbsApi, pd: NonNull<sys::ibv_pd>) -> io::Result<()> {
    // SAFETY: caller contract.
    status(unsafe { (api.ibv_dealloc_pd)(pd.as_ptr()) })
}

/// `ibv_reg_mr`, routed as `verbs.h`'s macro does: access flags in the optional range (relaxed
/// ordering) go through `ibv_reg_mr_iova2` with `iova = addr`; a libibverbs without it gets
/// the flags stripped (they are optional by definition).
///
/// # Safety
/// `pd` is live; `addr..addr+len` stays valid memory until [`dereg_mr`], and nothing else
/// holds Rust references into it while the device may write it.
pub unsafe fn reg_mr(
    api: &VerbsApi,
    pd: NonNull<sys::ibv_pd>,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> io::Result<NonNull<sys::ibv_mr>> {
    if access & sys::IBV_ACCESS_OPTIONAL_RANGE != 0
        && let Some(iova2) = api.ibv_reg_mr_iova2
    {
        // SAFETY: caller contract; `access` is non-negative (flag bits below bit 30).
        return nonnull(unsafe { iova2(pd.as_ptr(), addr, len, addr as u64, access as u32) });
    }
    let access = access & !sys::IBV_ACCESS_OPTIONAL_RANGE;
    // SAFETY: caller contract.
    nonnull(unsafe { (api.ibv_reg_mr)(pd.as_ptr(), addr, len, access) })
}

/// `ibv_reg_dmabuf_mr` (optional symbol: `Ok(None)` when this libibverbs lacks it).
///
/// # Safety
/// `pd` is live.
pub unsafe fn reg_dmabuf_mr(
    api: &VerbsApi,
    pd: NonNull<sys::ibv_pd>,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> io::Result<Option<NonNull<sys::ibv_mr>>> {
    let Some(f) = api.ibv_reg_dmabuf_mr else {
        return Ok(None);
    };
    // SAFETY: caller contract; the kernel validates the fd and range.
    nonnull(unsafe { f(pd.as_ptr(), offset, len, iova, fd, access) }).map(Some)
}

/// `ibv_dereg_mr`.
///
/// # Safety
/// `mr` is live; it is not used afterwards.
pub unsafe fn dereg_mr(api: &VerbsApi, mr: NonNull<sys::ibv_mr>) -> io::Result<()> {
    // SAFETY: caller contract.
    status(unsafe { (api.ibv_dereg_mr)(mr.as_ptr()) })
}

/// `ibv_create_cq` (vector 0), reporting to `channel` when it is not null.
///
/// # Safety
/// `ctx` is open; `channel` is null or a live channel of `ctx`.
pub unsafe fn create_cq(
    api: &VerbsApi,
    ctx: NonNull<sys::ibv_context>,
    cqe: c_int,
    channel: *mut sys::ibv_comp_channel,
) -> io::Result<NonNull<sys::ibv_cq>> {
    // SAFETY: caller contract; a NULL cq_context / channel is allowed.
    nonnull(unsafe { (api.ibv_create_cq)(ctx.as_ptr(), cqe, ptr::null_mut(), channel.cast(), 0) })
}

/// `ibv_create_comp_channel`.
///
/// # Safety
/// `ctx` is open.
pub unsafe fn create_comp_channel(
    api: &VerbsApi,
    ctx: NonNull<sys::ibv_context>,
) -> io::Result<NonNull<sys::ibv_comp_channel>> {
    // SAFETY: caller contract.
    nonnull(unsafe { (api.ibv_create_comp_channel)(ctx.as_ptr()) })
}

/// `ibv_destroy_comp_channel`.
///
/// # Safety
/// `channel` is live and no CQ reports to it any more.
pub unsafe fn destroy_comp_channel(
    api: &VerbsApi,
    channel: NonNull<sys::ibv_comp_channel>,
) -> io::Result<()> {
    // SAFETY: caller contract.
    status(unsafe { (api.ibv_destroy_comp_channel)(channel.as_ptr()) })
}

/// `ibv_req_notify_cq` (`static inline` in `verbs.h`: `cq->context->ops.req_notify_cq`): the
/// next completion of `cq` raises one event on its channel.
///
/// # Safety
/// `cq` is live and was created with a completion channel.
pub unsafe fn req_notify_cq(cq: NonNull<sys::ibv_cq>) -> io::Result<()> {
    // SAFETY: caller contract: a live CQ points at its live context.
    let f = unsafe { (*(*cq.as_ptr()).context).ops.req_notify_cq }
        .ok_or_else(|| io::Error::other("provider has no req_notify_cq"))?;
    // SAFETY: as above; `0`: every completion, not only solicited ones.
    let rc = unsafe { f(cq.as_ptr(), 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc.abs()))
    }
}

/// `ibv_get_cq_event`: takes one event off `channel` (the channel's fd is non-blocking here,
/// so `Ok(None)` when there is none) and names the CQ it is for.
///
/// # Safety
/// `channel` is live.
pub unsafe fn get_cq_event(
    api: &VerbsApi,
    channel: NonNull<sys::ibv_comp_channel>,
) -> io::Result<Option<NonNull<sys::ibv_cq>>> {
    let mut cq: *mut sys::ibv_cq = ptr::null_mut();
    let mut ctx: *mut c_void = ptr::null_mut();
    // SAFETY: caller contract; both out-pointers are valid locals.
    let rc = unsafe { (api.ibv_get_cq_event)(channel.as_ptr(), &raw mut cq, &raw mut ctx) };
    if rc == 0 {
        return Ok(NonNull::new(cq));
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(None)
    } else {
        Err(e)
    }
}

/// `ibv_ack_cq_events`: acknowledges `n` events taken for `cq` (its destroy waits for them).
///
/// # Safety
/// `cq` is live.
pub unsafe fn ack_cq_events(api: &VerbsApi, cq: NonNull<sys::ibv_cq>, n: u32) {
    // SAFETY: caller contract.
    unsafe { (api.ibv_ack_cq_events)(cq.as_ptr(), n) }
}

/// `ibv_destroy_cq`.
///
/// # Safety
/// `cq` is live and no QP uses it any more.
pub unsafe fn destroy_cq(api: &VerbsApi, cq: NonNull<sys::ibv_cq>) -> io::Result<()> {
    // SAFETY: caller contract.
    status(unsafe { (api.ibv_destroy_cq)(cq.as_ptr()) })
}

/// `ibv_create_qp`.
///
/// # Safety
/// `pd` and the CQs in `attr` are live.
pub unsafe fn create_qp(
    api: &VerbsApi,
    pd: NonNull<sys::ibv_pd>,
    attr: &mut sys::ibv_qp_init_attr,
) -> io::Result<NonNull<sys::ibv_qp>> {
    // SAFETY: caller contract.
    nonnull(unsafe { (api.ibv_create_qp)(pd.as_ptr(), attr) })
}

/// `ibv_modify_qp`.
///
/// # Safety
/// `qp` is live.
pub unsafe fn modify_qp(
    api: &VerbsApi,
    qp: NonNull<sys::ibv_qp>,
    attr: &mut sys::ibv_qp_attr,
    mask: c_int,
) -> io::Result<()> {
    // SAFETY: caller contract.
    status(unsafe { (api.ibv_modify_qp)(qp.as_ptr(), attr, mask) })
}

/// `ibv_query_qp` for the state alone.
///
/// # Safety
/// `qp` is live.
pub unsafe fn query_qp_state(api: &VerbsApi, qp: NonNull<sys::ibv_qp>) -> io::Result<u32> {
    let mut attr = sys::ibv_qp_attr::default();
    let mut init = sys::ibv_qp_init_attr {
        qp_context: ptr::null_mut(),
        send_cq: ptr::null_mut(),
        recv_cq: ptr::null_mut(),
        srq: ptr::null_mut(),
        cap: sys::ibv_qp_cap::default(),
        qp_type: 0,
        sq_sig_all: 0,
    };
    // SAFETY: caller contract; both out structs are valid.
    status(unsafe { (api.ibv_query_qp)(qp.as_ptr(), &mut attr, sys::IBV_QP_STATE, &mut init) })?;
    Ok(attr.qp_state)
}

/// `ibv_destroy_qp`.
///
/// # Safety
/// `qp` is live; it is not used afterwards.
pub unsafe fn destroy_qp(api: &VerbsApi, qp: NonNull<sys::ibv_qp>) -> io::Result<()> {
    // SAFETY: caller contract.
    status(unsafe { (api.ibv_destroy_qp)(qp.as_ptr()) })
}

/// `ibv_post_send` (static inline in verbs.h: `qp->context->ops.post_send`). On failure returns
/// the errno and the first work request not posted.
///
/// # Safety
/// `qp` is live; `wr` heads a valid `next`-linked list whose SGE arrays outlive the call.
pub unsafe fn post_send(
    qp: NonNull<sys::ibv_qp>,
    wr: *mut sys::ibv_send_wr,
) -> Result<(), (i32, *mut sys::ibv_send_wr)> {
    let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
    // SAFETY: caller contract: `qp` and its context are live, so reading the ops table is.
    let f = unsafe { (*(*qp.as_ptr()).context).ops.post_send };
    let Some(f) = f else {
        return Err((libc::EOPNOTSUPP, wr));
    };
    // SAFETY: the provider's own entry point with the arguments verbs.h passes.
    match unsafe { f(qp.as_ptr(), wr, &mut bad) } {
        0 => Ok(()),
        rc => Err((rc.abs(), bad)),
    }
}

/// `ibv_post_recv` (static inline in verbs.h: `qp->context->ops.post_recv`).
///
/// # Safety
/// As [`post_send`].
pub unsafe fn post_recv(
    qp: NonNull<sys::ibv_qp>,
    wr: *mut sys::ibv_recv_wr,
) -> Result<(), (i32, *mut sys::ibv_recv_wr)> {
    let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
    // SAFETY: as in `post_send`.
    let f = unsafe { (*(*qp.as_ptr()).context).ops.post_recv };
    let Some(f) = f else {
        return Err((libc::EOPNOTSUPP, wr));
    };
    // SAFETY: the provider's own entry point with the arguments verbs.h passes.
    match unsafe { f(qp.as_ptr(), wr, &mut bad) } {
        0 => Ok(()),
        rc => Err((rc.abs(), bad)),
    }
}

/// `ibv_poll_cq` (static inline in verbs.h: `cq->context->ops.poll_cq`): completions written
/// to `out`, or the provider's negative status.
///
/// # Safety
/// `cq` is live.
pub unsafe fn poll_cq(cq: NonNull<sys::ibv_cq>, out: &mut [sys::ibv_wc]) -> Result<usize, i32> {
    let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
    // SAFETY: caller contract: `cq` and its context are live.
    let f = unsafe { (*(*cq.as_ptr()).context).ops.poll_cq };
    let Some(f) = f else {
        return Err(-libc::EOPNOTSUPP);
    };
    // SAFETY: `out` has room for `n` entries.
    let rc = unsafe { f(cq.as_ptr(), n, out.as_mut_ptr()) };
    usize::try_from(rc).map_err(|_| rc)
}
