//! The soft device's I/O threads are sized by, and run on, the CPUs of the process, whatever
//! thread starts them. (The engine first uses its shared device on a worker pinned to one
//! core; the threads once inherited that pin, and the count asked there was 1: one thread, at
//! 95% of a core, carried every QP's bytes on a 16-core host.)
//!
//! Its own test binary: it reads every `soft-io-*` thread of the process. With
//! `IoPlacement::PerCpu` (the engine's shared device) each thread runs on one CPU instead.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use engine::soft::{IoPlacement, SoftDevice, default_io_threads};

/// `Cpus_allowed_list` of a thread (`/proc/self/task/<tid>/status`), expanded.
fn allowed(status: &str) -> Vec<usize> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("")
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
        cpus.extend(a..=b);
    }
    cpus
}

/// (name, allowed CPUs) of every thread of this process.
fn threads() -> Vec<(String, Vec<usize>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let p = e.path();
        let (Ok(comm), Ok(status)) = (
            std::fs::read_to_string(p.join("comm")),
            std::fs::read_to_string(p.join("status")),
        ) else {
            continue;
        };
        out.push((comm.trim().to_owned(), allowed(&status)));
    }
    out
}

#[test]
fn io_threads_follow_the_process_cpus_not_the_pinned_thread_that_starts_them() {
    let process: Vec<usize> = allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    assert!(!process.is_empty(), "the process's CPUs could not be read");
    let first = core_affinity::get_core_ids()
        .unwrap()
        .into_iter()
        .min_by_key(|c| c.id)
        .unwrap();
    // Made and started on a thread pinned to one core, as an engine worker is.
    let dev = std::thread::spawn(move || {
        assert!(
            core_affinity::set_for_current(first),
            "could not pin the thread"
        );
        let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
        dev.listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .unwrap();
        dev
    })
    .join()
    .unwrap();
    // Asked on this (unpinned) thread, the default is one per CPU of the process (capped).
    let want = default_io_threads();
    assert!(
        want >= process.len().min(2),
        "default I/O threads {want} for the process's CPUs {process:?}"
    );
    assert_eq!(
        dev.io_threads(),
        want,
        "a device started on a pinned thread sizes itself by the process's CPUs ({process:?})"
    );
    // Each thread sets its affinity as it starts: wait for all of them to have.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let io: Vec<(String, Vec<usize>)> = threads()
            .into_iter()
            .filter(|(n, _)| n.starts_with("soft-io-"))
            .collect();
        let settled = io.len() == want && io.iter().all(|(_, c)| *c == process);
        if settled {
            break;
        }
        assert!(
            Instant::now() < until,
            "soft I/O threads and their CPUs: {io:?}; want {want} threads, each on {process:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The engine's placement: each thread on one CPU of the process, whatever the starter's.
    let before: Vec<String> = threads().into_iter().map(|(n, _)| n).collect();
    let per_cpu = std::thread::spawn(move || {
        assert!(
            core_affinity::set_for_current(first),
            "could not pin the thread"
        );
        let dev = SoftDevice::with_io(Ipv4Addr::LOCALHOST, want, IoPlacement::PerCpu);
        dev.listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .unwrap();
        dev
    })
    .join()
    .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let io: Vec<(String, Vec<usize>)> = threads()
            .into_iter()
            .filter(|(n, _)| n.starts_with("soft-io-") && !before.contains(n))
            .collect();
        let mut one_each: Vec<usize> = io
            .iter()
            .filter(|(_, c)| c.len() == 1)
            .map(|(_, c)| c[0])
            .filter(|c| process.contains(c))
            .collect();
        one_each.sort_unstable();
        one_each.dedup();
        if io.len() == want && one_each.len() == want.min(process.len()) {
            break;
        }
        assert!(
            Instant::now() < until,
            "per-CPU soft I/O threads and their CPUs: {io:?}; want {want}, one CPU each of {process:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop((dev, per_cpu));
}
