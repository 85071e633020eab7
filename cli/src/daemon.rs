//! `hipobj daemon`: run the node daemon (one engine shared by every process that attaches,
//! docs/daemon.md), and `hipobj daemon status`: list its clients.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use engine::gpu::GpuRuntime;
use engine::{Engine, Fabric, Placement};
use hipobj_daemon::DaemonConfig;

/// `hipobj daemon` flags.
#[derive(Args, Debug, Clone)]
pub struct DaemonArgs {
    /// `status`: list the running daemon's clients.
    #[command(subcommand)]
    pub action: Option<DaemonAction>,
    /// The Unix socket (default: $XDG_RUNTIME_DIR/hipobj.sock, else /run/hipobj/hipobj.sock).
    /// Under systemd socket activation the passed socket is used instead.
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
    /// S3 endpoint the shared engine talks to (default: AWS_ENDPOINT_URL).
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub endpoint_url: Option<String>,
    /// Region (default: AWS_REGION, the profile's, us-east-1).
    #[arg(long)]
    pub region: Option<String>,
    /// Data path of the shared engine: auto, http, soft or verbs.
    #[arg(long, default_value = "auto", value_parser = crate::load::command::parse_fabric)]
    pub fabric: Fabric,
    /// Engine workers (default: the engine's placement, one per core of its NICs' nodes).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Load the CUDA (else HIP) runtime so that clients can register device memory.
    #[arg(long)]
    pub gpu: bool,
    /// Operations in the engine at once over all clients (shared equally by clients with
    /// work; default 256).
    #[arg(long)]
    pub max_in_flight: Option<u32>,
    /// Admit this uid besides the daemon's own (repeatable); the socket's mode must let it
    /// connect too (--mode).
    #[arg(long = "allow-uid")]
    pub allow_uids: Vec<u32>,
    /// Socket file mode, octal (default 600: the daemon's user only).
    #[arg(long, default_value = "600", value_parser = parse_mode)]
    pub mode: u32,
}

/// `hipobj daemon` subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum DaemonAction {
    /// List the daemon's clients: pid, uid, name, queues, operations in flight and done,
    /// bytes, registrations.
    Status {
        /// One JSON object per client instead of the table.
        #[arg(long)]
        json: bool,
    },
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("--mode {s}: an octal file mode such as 600 or 660"))
}

/// Runs `hipobj daemon [status]`; returns the exit code.
pub fn run(args: &DaemonArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(engine::attach::default_socket_path);
    match &args.action {
        Some(DaemonAction::Status { json }) => status(&socket, *json, out, err),
        None => serve(args, socket, out, err),
    }
}

fn status(socket: &std::path::Path, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let clients = match hipobj_daemon::query_status(socket) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(
                err,
                "hipobj: error: no daemon answers at {} ({e}); start one with `hipobj daemon`",
                socket.display()
            );
            return 1;
        }
    };
    if json {
        for c in &clients {
            let v = serde_json::json!({
                "pid": c.pid, "uid": c.uid, "name": c.name, "queues": c.queues,
                "in_flight": c.in_flight, "ops": c.ops, "bytes": c.bytes,
                "registrations": c.registrations, "registered_bytes": c.registered_bytes,
            });
            let _ = writeln!(out, "{v}");
        }
        return 0;
    }
    let _ = writeln!(
        out,
        "{:>8} {:>6} {:<24} {:>6} {:>9} {:>10} {:>14} {:>5} {:>14}",
        "PID", "UID", "NAME", "QUEUES", "IN-FLIGHT", "OPS", "BYTES", "REGS", "REG-BYTES"
    );
    for c in &clients {
        let _ = writeln!(
            out,
            "{:>8} {:>6} {:<24} {:>6} {:>9} {:>10} {:>14} {:>5} {:>14}",
            c.pid,
            c.uid,
            c.name,
            c.queues,
            c.in_flight,
            c.ops,
            c.bytes,
            c.registrations,
            c.registered_bytes
        );
    }
    0
}

fn serve(args: &DaemonArgs, socket: PathBuf, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let fail = |err: &mut dyn Write, m: String| {
        let _ = writeln!(err, "hipobj: error: {m}");
        1
    };
    let mut config = DaemonConfig {
        socket,
        mode: args.mode,
        allow_uids: args.allow_uids.clone(),
        ..DaemonConfig::default()
    };
    if let Some(n) = args.max_in_flight {
        config.max_in_flight = n.max(1);
    }
    // The systemd socket first (before any thread reads the environment), else our own.
    let listener = match engine::attach::SeqPacketListener::from_systemd() {
        Ok(Some(l)) => {
            // The socket unit owns the file: it stays when the service stops or restarts.
            config.remove_socket = false;
            l
        }
        Ok(None) => match hipobj_daemon::listen(&config) {
            Ok(l) => l,
            Err(e) => return fail(err, e.to_string()),
        },
        Err(e) => return fail(err, format!("systemd socket: {e}")),
    };
    let mut b = Engine::builder().in_process().fabric(args.fabric);
    if let Some(url) = &args.endpoint_url {
        b = b.endpoint_url(url);
    }
    if let Some(r) = &args.region {
        b = b.region(r);
    }
    if let Some(n) = args.workers {
        b = b.placement(Placement::Workers(n));
    }
    if args.gpu {
        match engine::gpu::detect() {
            Some(rt) => b = b.gpu(Arc::clone(&rt) as Arc<dyn GpuRuntime>),
            None => {
                return fail(
                    err,
                    "--gpu: no CUDA or HIP runtime could be loaded on this machine".into(),
                );
            }
        }
    }
    let engine = match b.build() {
        Ok(e) => e,
        Err(e) => return fail(err, format!("engine: {e}")),
    };
    let workers = engine.workers().len();
    let endpoint = format!("{}:{}", engine.endpoint().host, engine.endpoint().port);
    let shown = config.socket.clone();
    let handle = match hipobj_daemon::spawn(engine, config, listener) {
        Ok(h) => h,
        Err(e) => return fail(err, e.to_string()),
    };
    let _ = writeln!(
        out,
        "hipobj daemon: listening at {} ({workers} workers, endpoint {endpoint}); attach with HIPOBJ_DAEMON={}",
        shown.display(),
        shown.display()
    );
    let _ = out.flush();
    let signal = wait_for_signal();
    let _ = writeln!(out, "hipobj daemon: {signal}, stopping");
    match handle.stop() {
        Ok(()) => 0,
        Err(e) => fail(err, format!("daemon loop: {e}")),
    }
}

/// Blocks until SIGINT, SIGTERM or SIGHUP; returns its name.
fn wait_for_signal() -> &'static str {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(mut s) => match s.forever().next() {
            Some(SIGINT) => "SIGINT",
            Some(SIGHUP) => "SIGHUP",
            _ => "SIGTERM",
        },
        Err(_) => {
            // Without signal handling the default actions end the process anyway.
            loop {
                std::thread::park();
            }
        }
    }
}
