//! "Is there RDMA here?": one call with one typed answer, for the engine's fallback choice
//! and `hipobj topo`.

use std::sync::atomic::{AtomicBool, Ordering};

use super::context::{self, Context};
use super::error::Unavailable;
use super::gid::GidEntry;
use super::port::PortInfo;
use super::result;
use super::vendor::Vendor;

/// One device as the probe saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    /// Kernel device name.
    pub name: String,
    /// Vendor row.
    pub vendor: Vendor,
    /// Port 1, when it could be queried.
    pub port1: Option<PortInfo>,
    /// The source GID RC would use on port 1, when one is usable.
    pub gid: Option<GidEntry>,
    /// Why the device could not be opened or queried, if it could not.
    pub problem: Option<String>,
}

/// The probe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// libibverbs loaded and lists these devices (at least one).
    Available(Vec<DeviceSummary>),
    /// Verbs cannot be used here; the reason is one sentence.
    Unavailable(Unavailable),
}

impl Probe {
    /// Whether at least one device is listed.
    #[must_use]
    pub fn is_available(&self) -> bool {
        matches!(self, Self::Available(_))
    }
}

/// Loads libibverbs (once per process) and lists the devices with port 1 and GID choice.
/// Never panics and never fails: a host without RDMA gets `Probe::Unavailable`.
#[must_use]
pub fn probe() -> Probe {
    let api = match context::api() {
        Ok(a) => a,
        Err(u) => return Probe::Unavailable(u),
    };
    let names = match result::device_names(&api) {
        Ok(n) => n,
        Err(u) => return Probe::Unavailable(u),
    };
    if names.is_empty() {
        return Probe::Unavailable(Unavailable::NoDevice);
    }
    let devices = names
        .into_iter()
        .map(|name| match Context::open(Some(&name)) {
            Ok(ctx) => {
                let port1 = ctx.query_port(1);
                let gid = ctx.choose_gid(1);
                DeviceSummary {
                    vendor: super::vendor::identify_sysfs(std::path::Path::new("/sys"), &name),
                    name,
                    problem: port1
                        .as_ref()
                        .err()
                        .map(ToString::to_string)
                        .or_else(|| gid.as_ref().err().map(ToString::to_string)),
                    port1: port1.ok(),
                    gid: gid.ok(),
                }
            }
            Err(e) => DeviceSummary {
                vendor: super::vendor::identify(&name, None),
                name,
                port1: None,
                gid: None,
                problem: Some(e.to_string()),
            },
        })
        .collect();
    Probe::Available(devices)
}

/// The sentence to log about `probe`'s answer, the first time only in this process (the
/// engine states "no RDMA here" once, then uses its fallback quietly).
#[must_use]
pub fn report_once(p: &Probe) -> Option<String> {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::AcqRel) {
        return None;
    }
    Some(match p {
        Probe::Unavailable(u) => format!("{u}; using the configured fallback"),
        Probe::Available(d) => {
            let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
            format!("RDMA verbs available: {}", names.join(", "))
        }
    })
}
