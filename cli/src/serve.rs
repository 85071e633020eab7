//! `hipobj serve`: run the gateway (S3 server) in the foreground.
//!
//! Prints `listening on http://ADDR` as its first stdout line (tests and scripts parse it), then
//! serves until killed.

use std::io::Write;
use std::path::PathBuf;

use hipobj_gateway::{Gateway, GetDecline, RcLimits, RcTarget};
use s3_lite::credentials::Credentials;

/// Which fabric carries RDMA payloads.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fabric {
    /// No RDMA: requests with `x-amz-rdma-token` are declined (`x-amz-rdma-reply: 501`) and
    /// clients fall back to HTTP.
    None,
    /// User-space RC emulation over TCP (`rc-persistent` and hipobj-rc-v2; the soft listener
    /// binds the `--listen` IP on a free port and is advertised in connect replies).
    Soft,
    /// libibverbs RC queue pairs on an RDMA device (`--rdma-device`, or the first one): a
    /// RoCE NIC or Soft-RoCE (`rdma link add rxe0 type rxe netdev eth0`).
    Verbs,
}

/// How a GET with an RDMA token is declined.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decline {
    /// Data in the HTTP body with `x-amz-rdma-reply: 501` (aws-c-s3 spec).
    Body,
    /// `501 NotImplemented`, no data (MinIO AIStor).
    Error,
}

/// Arguments of `hipobj serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: String,
    /// Serve this directory (created if missing).
    #[arg(
        long,
        conflicts_with = "upstream",
        required_unless_present = "upstream"
    )]
    pub root: Option<PathBuf>,
    /// Bridge to this upstream S3 endpoint (http://host:port).
    #[arg(long)]
    pub upstream: Option<String>,
    /// Access key clients sign with (default: $AWS_ACCESS_KEY_ID).
    #[arg(long, env = "HIPOBJ_SERVE_ACCESS_KEY")]
    pub access_key: Option<String>,
    /// Secret key clients sign with (default: $AWS_SECRET_ACCESS_KEY).
    #[arg(long, env = "HIPOBJ_SERVE_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
    /// Access key for the upstream (default: the gateway's own key).
    #[arg(long)]
    pub upstream_access_key: Option<String>,
    /// Secret key for the upstream (default: the gateway's own secret).
    #[arg(long, hide_env_values = true)]
    pub upstream_secret_key: Option<String>,
    /// Region signatures must be scoped to (also used to sign upstream requests).
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Enable virtual-host addressing for `<bucket>.<SUFFIX>` hosts.
    #[arg(long)]
    pub virtual_host_suffix: Option<String>,
    /// RDMA fabric.
    #[arg(long, value_enum, default_value = "none")]
    pub fabric: Fabric,
    /// The verbs device of `--fabric verbs` (default: the first one libibverbs lists).
    #[arg(long)]
    pub rdma_device: Option<String>,
    /// Longest one RDMA transfer (the gateway's WRITEs of a GET, READs of a PUT, a v2
    /// session's transfer) may take, in seconds. The default suits real NICs; emulated ones
    /// (the Soft-RoCE VM lane moves a few MiB/s) need more for large objects.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub rdma_transfer_timeout: u64,
    /// hipobj-rc-v2 sessions one access key may hold at once (prepared or transferring); a
    /// PREPARE beyond it is answered 503 SlowDown (the engine then waits for one of its own
    /// sessions to end). At most the gateway's 32 sessions in all.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub rdma_v2_sessions_per_key: u16,
    /// How a GET carrying an RDMA token that cannot be honoured is answered.
    #[arg(long, value_enum, default_value = "body")]
    pub rdma_get_decline: Decline,
    /// Worker threads (connections served at once).
    #[arg(long, default_value_t = 32)]
    pub threads: usize,
    /// Connections accepted at once; more are answered 503 SlowDown.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Write an access log to stderr: one line per request (`METHOD /path STATUS REQUEST-ID
    /// DURATIONms`), without the rest of `-v`'s output.
    #[arg(long)]
    pub access_log: bool,
}

/// The RDMA target's bounds for `args` (the defaults with `--rdma-transfer-timeout` and
/// `--rdma-v2-sessions-per-key`).
pub fn rc_limits(args: &ServeArgs) -> RcLimits {
    let t = std::time::Duration::from_secs(args.rdma_transfer_timeout);
    let defaults = RcLimits::default();
    let mut v2 = defaults.v2;
    v2.transfer = t;
    v2.max_per_principal = usize::from(args.rdma_v2_sessions_per_key);
    RcLimits {
        transfer_timeout: t,
        v2,
        ..defaults
    }
}

/// Runs the gateway until the process is killed; returns the exit code on failure to start.
pub fn run(args: &ServeArgs, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(access), Some(secret)) = (
        args.access_key.clone().or_else(|| env("AWS_ACCESS_KEY_ID")),
        args.secret_key
            .clone()
            .or_else(|| env("AWS_SECRET_ACCESS_KEY")),
    ) else {
        let _ = writeln!(
            stderr,
            "hipobj: error: --access-key and --secret-key are required (or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        );
        return 2;
    };
    let mut b = Gateway::builder()
        .listen(args.listen.clone())
        .credentials(access.clone(), secret.clone())
        .region(args.region.clone())
        .threads(args.threads)
        .max_connections(args.max_connections)
        .get_decline(match args.rdma_get_decline {
            Decline::Body => GetDecline::Body,
            Decline::Error => GetDecline::Error,
        });
    if let Some(s) = &args.virtual_host_suffix {
        b = b.virtual_host_suffix(s.clone());
    }
    if args.fabric == Fabric::Soft {
        let ip = match args.listen.parse::<std::net::SocketAddr>() {
            Ok(a) if !a.ip().is_unspecified() => a.ip(),
            _ => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        };
        match RcTarget::start(std::net::SocketAddr::new(ip, 0), rc_limits(args)) {
            Ok(t) => b = b.rdma_target(t),
            Err(e) => {
                let _ = writeln!(stderr, "hipobj: error: soft fabric: {e}");
                return 1;
            }
        }
    }
    if args.fabric == Fabric::Verbs {
        match RcTarget::start_verbs(args.rdma_device.as_deref(), rc_limits(args)) {
            Ok(t) => {
                let _ = writeln!(stdout, "rdma: verbs device {}", t.device_name());
                b = b.rdma_target(t);
            }
            Err(e) => {
                let _ = writeln!(stderr, "hipobj: error: --fabric verbs: {e}");
                return 1;
            }
        }
    }
    b = match (&args.root, &args.upstream) {
        (Some(root), None) => b.root_dir(root.clone()),
        (None, Some(url)) => {
            let creds = Credentials::new(
                args.upstream_access_key.clone().unwrap_or(access),
                args.upstream_secret_key.clone().unwrap_or(secret),
            );
            b.upstream(url.clone(), creds, args.region.clone())
        }
        _ => {
            let _ = writeln!(
                stderr,
                "hipobj: error: give exactly one of --root DIR or --upstream URL"
            );
            return 2;
        }
    };
    let gw = match b.start() {
        Ok(gw) => gw,
        Err(e) => {
            let _ = writeln!(stderr, "hipobj: error: {e}");
            return 1;
        }
    };
    let _ = writeln!(stdout, "listening on http://{}", gw.local_addr());
    let _ = stdout.flush();
    gw.wait();
    0
}
