//! The engine's small libc surface: the monotonic clock, process CPU time, a socket option,
//! `pread(2)` into registered memory, and the process's CPU affinity.
//!
//! `#[allow(unsafe_code)]` is confined to this module and `memory::raw` (see `docs/engine.md`,
//! "Safety model"). Each block makes exactly one libc call on a stack-owned out-parameter,
//! except [`pread_raw`], whose caller vouches for the destination range.
#![allow(unsafe_code)]

use std::time::Duration;

/// Nanoseconds on `CLOCK_MONOTONIC`, the clock [`ring_api::sqe_flags::DEADLINE_ABSOLUTE`]
/// deadlines are expressed in.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed timespec for the duration of the call, and
    // CLOCK_MONOTONIC is always available on Linux, so the call only writes `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// CPU time (user + system) the whole process has used so far, from `getrusage(RUSAGE_SELF)`.
///
/// Benchmarks subtract two readings taken around the timed phase.
#[must_use]
pub fn process_cpu_time() -> Duration {
    // SAFETY: `rusage` is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, exclusively borrowed rusage for the duration of the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    if rc != 0 {
        return Duration::ZERO;
    }
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Sets `TCP_QUICKACK` on a TCP socket: acknowledge at once instead of delaying the ACK.
///
/// Linux clears the flag again on its own, so the HTTP fabric re-arms it after each read.
/// Servers that write a response head and body in two writes without `TCP_NODELAY` (s3s-fs)
/// otherwise stall ~40 ms per small response on Nagle + delayed ACK.
pub(crate) fn set_quickack(fd: std::os::fd::RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: `one` outlives the call and its size is passed; an invalid fd only yields EBADF.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// One `pread(2)` of up to `len` bytes at offset `at` of `fd` into `dst..dst+len`; returns the
/// bytes read (0 at end of file). `EINTR` is retried.
///
/// # Safety
/// `dst..dst+len` must be memory that stays allocated for the call and that no Rust reference
/// covers (registered memory, which the fabrics treat as device memory: the kernel's write is
/// like a DMA).
pub(crate) unsafe fn pread_raw(
    fd: std::os::fd::BorrowedFd<'_>,
    dst: *mut u8,
    len: usize,
    at: u64,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let at = libc::off_t::try_from(at)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "offset too large"))?;
    loop {
        // SAFETY: the caller's contract: `dst..dst+len` is allocated and unaliased by Rust
        // references, so the kernel writing up to `len` bytes there is sound; `fd` is a live
        // borrowed descriptor.
        let n = unsafe { libc::pread(fd.as_raw_fd(), dst.cast(), len, at) };
        match usize::try_from(n) {
            Ok(n) => return Ok(n),
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

fn tv(t: libc::timeval) -> Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u64::try_from(t.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// The CPUs the process's main thread may run on (`sched_getaffinity` of the thread whose id
/// is the process id), in increasing order; `None` when it cannot be read.
///
/// Threads inherit the affinity of the thread that spawns them, and an engine worker pins
/// itself to one core: a helper thread started from a worker would be confined to that core,
/// and `std::thread::available_parallelism` asked there answers 1. The main thread keeps the
/// mask the process was started with (`taskset`, cgroup cpuset), so device threads size
/// themselves and run by this set instead.
#[must_use]
pub(crate) fn process_cpus() -> Option<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value of the plain-data type.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `getpid` has no preconditions. `set` is a valid, exclusively borrowed cpu_set_t
    // of the size passed, which the call only writes.
    let rc = unsafe {
        libc::sched_getaffinity(
            libc::getpid(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &raw mut set,
        )
    };
    if rc != 0 {
        return None;
    }
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `CPU_ISSET` only reads `set`; every index is below the set's capacity in bits.
    let cpus: Vec<usize> = (0..bits)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Lets the calling thread run on exactly `cpus` (`sched_setaffinity(0, ..)`); `false` when
/// the set is empty, names a CPU beyond `cpu_set_t`'s capacity, or the call fails.
pub(crate) fn set_thread_cpus(cpus: &[usize]) -> bool {
    let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() || cpus.iter().any(|&c| c >= bits) {
        return false;
    }
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value of the plain-data type.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: `c` is below the set's capacity in bits (checked above); `set` is local.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed, which the call only reads; pid 0
    // names the calling thread.
    let rc = unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set)
    };
    rc == 0
}

/// The CPU the calling thread runs on now (`sched_getcpu`); `None` when unknown.
#[must_use]
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` takes no arguments and has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(a > 0 && b >= a + 1_000_000, "{a} -> {b}");
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu_time();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(process_cpu_time() > before);
    }
}
