//! The engine's small libc surface: the monotonic clock and process CPU time.
//!
//! `#[allow(unsafe_code)]` is confined to this module and `memory::raw` (see `docs/engine.md`,
//! "Safety model"). Each block makes exactly one libc call on a stack-owned out-parameter.
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

fn tv(t: libc::timeval) -> Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u64::try_from(t.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros)
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
