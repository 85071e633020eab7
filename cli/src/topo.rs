//! `hipobj topo [--sysfs-root DIR] [--json]`: the GPU/NIC topology matrix.
//!
//! The text form matches `nvidia-smi topo -m` (tab-separated, underlined header, `X` on the
//! diagonal, CPU and NUMA affinity of each GPU, legend, NIC legend), so the two can be compared
//! side by side. GPU↔GPU cells show the PCIe path class: NVLink is not visible in sysfs, so where
//! `nvidia-smi` prints `NV18` we print the PCIe path that would be used without it. The JSON form
//! carries the whole [`numa::Topology`] plus the matrix, each GPU's closest NICs and the worker
//! plan the engine would use.
//!
//! Both forms end with, for each GPU, the NICs and the engine workers its buffers would use
//! (`engine::PlacementPlan` under `Placement::Auto`, as `hipobj get`/`put` build the engine): on
//! the live system for the cores this process may run on, on a `--sysfs-root` tree for all of
//! its online CPUs.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use engine::{EngineError, PlacementPlan};
use numa::{Matrix, PathClass, TopoError, Topology, Worker};
use serde::Serialize;

/// Print the GPU/NIC topology matrix, like `nvidia-smi topo -m`, read from sysfs.
#[derive(clap::Args, Debug)]
pub struct TopoArgs {
    /// Read sysfs below this directory instead of `/` (a captured fixture tree).
    #[arg(long)]
    pub sysfs_root: Option<PathBuf>,
    /// Print JSON instead of the `nvidia-smi topo -m` style matrix.
    #[arg(long)]
    pub json: bool,
    /// Preview the engine restricted to these RDMA NICs (name, netdev or PCI address; repeat
    /// or separate with commas), as `EngineBuilder::nics` / the C API's `nicHint` do.
    #[arg(long = "nic", value_delimiter = ',')]
    pub nics: Vec<String>,
    /// Workers per NIC in the preview (the engine's default: 16).
    #[arg(long, default_value_t = engine::DEFAULT_WORKERS_PER_NIC)]
    pub workers_per_nic: usize,
    /// Underline the matrix header as `nvidia-smi topo -m` does: `auto` (default) only when
    /// stdout is a terminal and `NO_COLOR` is unset, `always`, or `never`. A pipe
    /// (`hipobj topo | head`) gets no escape sequences.
    #[arg(long, value_enum, default_value = "auto")]
    pub color: Color,
}

/// `--color`: when the matrix header carries ANSI underline escapes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Color {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    /// Always (byte-for-byte `nvidia-smi topo -m`).
    Always,
    /// Never.
    Never,
}

impl Color {
    /// Whether to underline, given whether stdout is a terminal and whether `NO_COLOR` is set
    /// (non-empty, per no-color.org).
    #[must_use]
    pub fn underline(self, stdout_is_terminal: bool, no_color: bool) -> bool {
        match self {
            Self::Always => true,
            Self::Never => false,
            Self::Auto => stdout_is_terminal && !no_color,
        }
    }
}

/// Runs the subcommand; returns the process exit code (0 success, 1 when the topology cannot be
/// read or the output cannot be written).
pub fn run(args: &TopoArgs, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
    let root = args
        .sysfs_root
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    let result = Topology::from_root(&root)
        .map_err(|e| e.to_string())
        .and_then(|t| {
            let plan = preview(&t, args, args.sysfs_root.is_some()).map_err(|e| e.to_string())?;
            let text = if args.json {
                render_json_with(&t, Some(&plan))?
            } else {
                let underline = args.color.underline(
                    std::io::stdout().is_terminal(),
                    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
                );
                let mut text = render_text_with(&t, underline).map_err(|e| e.to_string())?;
                text.push_str(&render_buffers(&t, &plan));
                text
            };
            stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .map_err(|e| format!("writing output: {e}"))
        });
    match result {
        Ok(()) => 0,
        Err(msg) => {
            // Nothing more can be done if stderr itself fails.
            let _ = writeln!(stderr, "hipobj: error: {msg}");
            1
        }
    }
}

/// The legend `nvidia-smi topo -m` prints, without its NVLink line (we never print `NV#`).
const LEGEND: &str = "\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
";

/// Renders the matrix the way `nvidia-smi topo -m` does, header underlined.
pub fn render_text(t: &Topology) -> Result<String, TopoError> {
    render_text_with(t, true)
}

/// [`render_text`], the header underlined (ANSI `ESC[4m` … `ESC[0m`) only when `underline`.
pub fn render_text_with(t: &Topology, underline: bool) -> Result<String, TopoError> {
    let (on, off) = if underline {
        ("\x1b[4m", "\x1b[0m")
    } else {
        ("", "")
    };
    if t.gpus.is_empty() && t.nics.is_empty() {
        let mut out = format!(
            "No GPU or RDMA NIC found under {}.\n\nNUMA nodes:\n",
            t.root.join("sys").display()
        );
        for n in &t.nodes {
            out.push_str(&format!("  node{}: CPUs {}\n", n.id, cpus_or_na(&n.cpus)));
        }
        return Ok(out);
    }
    let m = t.matrix()?;
    let mut out = format!("\t{on}");
    for l in &m.labels {
        out.push_str(l);
        out.push('\t');
    }
    out.push_str("CPU Affinity\tNUMA Affinity\tGPU NUMA ID");
    out.push_str(off);
    out.push('\n');
    for (row, label) in m.labels.iter().enumerate() {
        out.push_str(label);
        for cell in m.cells.get(row).into_iter().flatten() {
            out.push('\t');
            out.push_str(cell.map_or(" X ", PathClass::as_str));
        }
        if let Some(gpu) = t.gpus.get(row) {
            let numa = gpu.numa_node.map_or("N/A".to_string(), |n| n.to_string());
            out.push_str(&format!("\t{}\t{numa}\t\tN/A", cpus_or_na(&gpu.local_cpus)));
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(LEGEND);
    if !t.nics.is_empty() {
        out.push_str("\nNIC Legend:\n\n");
        for n in &t.nics {
            out.push_str(&format!("  NIC{}: {}\n", n.index, n.name));
        }
        out.push_str(&rdma_devices(t));
    }
    Ok(out)
}

/// Ports and GID tables of the RDMA devices, with the GID the engine would choose (RoCEv2 IPv4
/// first, read from `gid_attrs` the way `engine::verbs::gid` does for the real fabric) and the
/// GPUs for which the device is closest.
fn rdma_devices(t: &Topology) -> String {
    let sys = t.root.join("sys");
    let mut out = String::from("\nRDMA devices:\n\n");
    for n in &t.nics {
        let closest_for: Vec<String> = t
            .gpus
            .iter()
            .filter(|g| {
                t.closest_nics(g.index)
                    .is_ok_and(|v| v.iter().any(|c| c.index == n.index))
            })
            .map(|g| format!("GPU{}", g.index))
            .collect();
        let numa = n
            .numa_node
            .map_or_else(|| "N/A".to_owned(), |v| v.to_string());
        let closest = if closest_for.is_empty() {
            "-".to_owned()
        } else {
            closest_for.join(",")
        };
        out.push_str(&format!(
            "  {} (NIC{}): NUMA {numa}, closest NIC for {closest}\n",
            n.name, n.index
        ));
        for p in &n.ports {
            let rate = p
                .rate
                .as_deref()
                .map(|r| format!(", {r}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "    port {}: {} {}{rate}\n",
                p.port, p.state, p.link_layer
            ));
            let Ok(port) = u8::try_from(p.port) else {
                continue;
            };
            match engine::verbs::gid::read_table(&sys, &n.name, port) {
                Ok(entries) => {
                    let best = engine::verbs::gid::choose(&entries);
                    for e in &entries {
                        let mark = if Some(*e) == best { "  <- chosen" } else { "" };
                        out.push_str(&format!("      gid {e}{mark}\n"));
                    }
                }
                Err(_) => out.push_str("      (no GID table in sysfs)\n"),
            }
        }
    }
    out
}

fn cpus_or_na(c: &numa::CpuSet) -> String {
    if c.is_empty() {
        "N/A".to_string()
    } else {
        c.to_string()
    }
}

/// The engine's plan for `t` under `Placement::Auto`: for a fixture tree (`fixture`) as if the
/// process could run on every online CPU of it, else for this process's CPUs.
fn preview(t: &Topology, args: &TopoArgs, fixture: bool) -> Result<PlacementPlan, EngineError> {
    let auto = engine::Placement::Auto;
    if fixture {
        let all: Vec<u32> = t.online_cpus.iter().collect();
        PlacementPlan::new(
            Some(t.clone()),
            &auto,
            args.workers_per_nic,
            &args.nics,
            &all,
        )
    } else {
        PlacementPlan::for_process(Some(t.clone()), &auto, args.workers_per_nic, &args.nics)
    }
}

/// Comma-separated ranges (`0-15,32`) of sorted small integers.
fn ranges(v: impl IntoIterator<Item = usize>) -> String {
    let ids: Vec<u32> = v
        .into_iter()
        .filter_map(|i| u32::try_from(i).ok())
        .collect();
    numa::CpuSet::from_cpus(ids).map_or_else(|_| "?".to_owned(), |s| s.to_string())
}

/// "workers 0-15 on cores 1-16" for worker indices `w` of `plan`.
fn describe_workers(plan: &PlacementPlan, w: &[usize]) -> String {
    let cores: Vec<usize> = w
        .iter()
        .filter_map(|&i| plan.workers().get(i).and_then(|p| p.core))
        .collect();
    let on = if cores.is_empty() {
        "unpinned".to_owned()
    } else {
        let plural = if cores.len() == 1 { "" } else { "s" };
        format!("on core{plural} {}", ranges(cores))
    };
    format!(
        "worker{} {} {on}",
        if w.len() == 1 { "" } else { "s" },
        ranges(w.iter().copied())
    )
}

/// For each GPU, the NICs and engine workers its buffers would use.
pub fn render_buffers(t: &Topology, plan: &PlacementPlan) -> String {
    if t.gpus.is_empty() {
        return String::new();
    }
    let n = plan.workers().len();
    let mut out = format!(
        "\nGPU buffers (engine, Placement::Auto: {n} worker{}):\n\n",
        if n == 1 { "" } else { "s" }
    );
    for g in &t.gpus {
        let line = match plan.for_gpu(g.pci) {
            Some(a) => format!(
                "{} ({}) -> {}",
                a.nics.join(", "),
                a.class.map_or("-", PathClass::as_str),
                describe_workers(plan, &a.workers)
            ),
            None => format!(
                "no RDMA NIC with a worker -> any of {}",
                describe_workers(plan, &(0..n).collect::<Vec<_>>())
            ),
        };
        out.push_str(&format!("  GPU{} {}: {line}\n", g.index, g.pci));
    }
    out
}

/// One GPU's buffers in the JSON report.
#[derive(Serialize)]
struct GpuBuffers {
    gpu: usize,
    /// NIC names (empty: unbound, any worker).
    nics: Vec<String>,
    class: Option<PathClass>,
    /// Indices into `engine_workers`.
    workers: Vec<usize>,
}

/// One engine worker in the JSON report.
#[derive(Serialize)]
struct EngineWorker {
    core: Option<usize>,
    nic: Option<String>,
    numa_node: Option<u32>,
}

/// Closest NICs of one GPU, for the JSON report.
#[derive(Serialize)]
struct Closest {
    gpu: usize,
    class: Option<PathClass>,
    nics: Vec<usize>,
}

/// The JSON document: the topology, its matrix, each GPU's closest NICs and the worker plan.
#[derive(Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    topology: &'a Topology,
    matrix: Matrix,
    closest_nics: Vec<Closest>,
    workers: Vec<Worker>,
    /// The engine's workers under `Placement::Auto` (absent without a plan).
    #[serde(skip_serializing_if = "Option::is_none")]
    engine_workers: Option<Vec<EngineWorker>>,
    /// For each GPU, the NICs and engine workers its buffers would use.
    #[serde(skip_serializing_if = "Option::is_none")]
    buffers: Option<Vec<GpuBuffers>>,
}

/// Renders the JSON report (pretty-printed, newline-terminated).
pub fn render_json(t: &Topology) -> Result<String, String> {
    render_json_with(t, None)
}

/// [`render_json`] plus the engine's workers and each GPU's buffers under `plan`.
pub fn render_json_with(t: &Topology, plan: Option<&PlacementPlan>) -> Result<String, String> {
    let mut closest_nics = Vec::with_capacity(t.gpus.len());
    for g in &t.gpus {
        let ranking = t.nic_ranking(g.index).map_err(|e| e.to_string())?;
        let best = ranking.first().map(|(_, d)| d.class);
        let nics = t
            .closest_nics(g.index)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|n| n.index)
            .collect();
        closest_nics.push(Closest {
            gpu: g.index,
            class: best,
            nics,
        });
    }
    let report = Report {
        topology: t,
        matrix: t.matrix().map_err(|e| e.to_string())?,
        closest_nics,
        workers: t.worker_plan().map_err(|e| e.to_string())?,
        engine_workers: plan.map(|p| {
            p.workers()
                .iter()
                .map(|w| EngineWorker {
                    core: w.core,
                    nic: w.nic.clone(),
                    numa_node: w.numa_node,
                })
                .collect()
        }),
        buffers: plan.map(|p| {
            t.gpus
                .iter()
                .map(|g| {
                    let a = p.for_gpu(g.pci);
                    GpuBuffers {
                        gpu: g.index,
                        nics: a.as_ref().map(|a| a.nics.clone()).unwrap_or_default(),
                        class: a.as_ref().and_then(|a| a.class),
                        workers: a.map(|a| a.workers).unwrap_or_default(),
                    }
                })
                .collect()
        }),
    };
    let mut s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    s.push('\n');
    Ok(s)
}
