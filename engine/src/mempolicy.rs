//! `get_mempolicy(2)`: the NUMA node a page of host memory is on.
//!
//! `#[allow(unsafe_code)]`: one raw syscall (libc does not wrap `get_mempolicy`; libnuma is
//! not a dependency) on a stack-owned out-parameter.
#![allow(unsafe_code)]

/// `MPOL_F_NODE` (`<linux/mempolicy.h>`): return a node id instead of a policy.
const MPOL_F_NODE: libc::c_ulong = 1;
/// `MPOL_F_ADDR`: of the page holding `addr`.
const MPOL_F_ADDR: libc::c_ulong = 2;

/// The NUMA node of the page holding `addr`; `None` when the kernel does not say (no NUMA
/// support, a seccomp filter, an unmapped address). A page not yet faulted in is allocated by
/// the kernel as if read, as `get_mempolicy(2)` documents, and its node returned.
pub(crate) fn node_of(addr: *const u8) -> Option<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: `node` is a live, exclusively borrowed int the kernel writes; the nodemask
    // pointer is null with maxnode 0, which MPOL_F_NODE | MPOL_F_ADDR permits; `addr` is only
    // looked up in this process's address space (an unmapped one fails with EFAULT), never
    // dereferenced by us.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &raw mut node,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if rc != 0 {
        return None;
    }
    u32::try_from(node).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heap_page_is_on_an_existing_node_and_an_unmapped_address_is_none() {
        let buf = vec![1u8; 4096];
        let node = node_of(buf.as_ptr());
        // Kernels without CONFIG_NUMA answer ENOSYS: then there is nothing to check.
        if let Some(n) = node {
            assert!(
                std::path::Path::new(&format!("/sys/devices/system/node/node{n}")).exists(),
                "node {n}"
            );
        }
        assert_eq!(node_of(8 as *const u8), None, "page 0 is never mapped");
    }
}
