//! `hipobj`: the command-line face of hipObject (modelled on the aws CLI and s5cmd).
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hipobj_cli::client_args::{ClientArgs, EndpointArgs, OutputArgs};
use hipobj_cli::commands;
use hipobj_cli::quiet_log::QuietFormat;
use hipobj_cli::{bench, daemon, debug_sigv4, relay, serve, topo};

#[derive(Parser, Debug)]
#[command(
    name = "hipobj",
    version,
    about = "RDMA-accelerated S3 client: object data straight into GPU or host memory"
)]
struct Cli {
    /// Log to stderr: -v requests, retries and data-path decisions (and `serve`'s access log,
    /// one line per request), -vv more detail, -vvv everything.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Client flags given before the command (as the aws CLI allows); the same flags after it win.
    #[command(
        flatten,
        next_help_heading = "Client options (put, get, head, ls, rm, mb, rb; endpoint and output ones for bench)"
    )]
    client: ClientArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Upload a file (multipart above --multipart-threshold).
    Put(commands::PutArgs),
    /// Download an object (or a byte range of it) to a file or stdout.
    Get(commands::GetArgs),
    /// Show an object's metadata.
    Head(commands::HeadArgs),
    /// List objects under s3://BUCKET[/PREFIX], or the buckets (no argument, or s3://).
    Ls(commands::LsArgs),
    /// Delete an object.
    Rm(commands::RmArgs),
    /// Create a bucket.
    Mb(commands::MbArgs),
    /// Delete a bucket (--force: its objects first).
    Rb(commands::RbArgs),
    /// Load a safetensors model (s3://BUCKET/PREFIX/) into host memory or VRAM through the
    /// engine and print tensors, bytes, seconds and GB/s.
    Load(hipobj_cli::load::command::LoadArgs),
    /// Run N range-gets of size S at random aligned offsets of an object and print a results table.
    Bench {
        #[command(flatten)]
        args: bench::BenchArgs,
        #[command(flatten)]
        endpoint: EndpointArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Run the gateway: an S3 server in front of a directory or an upstream S3 store.
    Serve(serve::ServeArgs),
    /// Print the GPU/NIC/CPU topology matrix (like `nvidia-smi topo -m`).
    Topo(topo::TopoArgs),
    /// Run the node daemon: one engine shared by every process that attaches
    /// (HIPOBJ_DAEMON=SOCKET); `hipobj daemon status` lists its clients.
    Daemon(daemon::DaemonArgs),
    /// Debugging helpers.
    #[command(subcommand)]
    Debug(DebugCommand),
}

#[derive(Subcommand, Debug)]
enum DebugCommand {
    /// Show exactly how a raw HTTP request (on stdin) is signed with SigV4.
    Sigv4(debug_sigv4::Sigv4Args),
    /// Relay TCP connections to a server, injecting faults (latency, resets, truncation,
    /// stalls, flipped bytes, a rewritten Content-Length, 503 SlowDown).
    Relay(relay::RelayArgs),
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Client flags given before a command that does not take them: a usage error (exit 2).
fn refuse_client_flags(command: &str) -> ExitCode {
    eprintln!(
        "hipobj: error: `{command}` takes no client flags (--endpoint-url, --region, --profile, \
         --json, --no-progress, --ca-bundle, --insecure-skip-tls-verify, --addressing-style); \
         see `hipobj {command} --help`"
    );
    ExitCode::from(2)
}

/// Without `-v`: WARN events only (e.g. a NIC whose RDMA device failed to open beside others),
/// as `hipobj: warning: ...` lines. `-v`: tracing events at INFO and above (DEBUG with -vv,
/// TRACE with -vvv) to stderr. `serve --access-log` without `-v`: the access log's events, one
/// bare line each, plus the warnings.
fn init_logging(verbose: u8, access_log: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let level = match verbose {
        0 => {
            let mut quiet =
                tracing_subscriber::filter::Targets::new().with_default(tracing::Level::WARN);
            if access_log {
                quiet = quiet.with_target(
                    hipobj_gateway::conn::ACCESS_LOG_TARGET,
                    tracing::Level::INFO,
                );
            }
            let _ = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::INFO)
                .with_writer(std::io::stderr)
                .event_format(QuietFormat)
                .finish()
                .with(quiet)
                .try_init();
            return;
        }
        1 => tracing::Level::INFO,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(
        cli.verbose,
        matches!(&cli.command, Command::Serve(a) if a.access_log),
    );
    // No command holds the stdout/stderr lock for its whole run: other threads write too (the
    // signal thread of hipobj_cli::interrupt, `-v` logging from the gateway's and engine's
    // threads), and would block on it.
    let stdout = std::io::stdout;
    let stderr = std::io::stderr;
    let before = &cli.client;
    let name = match &cli.command {
        Command::Serve(_) => "serve",
        Command::Topo(_) => "topo",
        Command::Daemon(_) => "daemon",
        Command::Debug(_) => "debug",
        Command::Bench { .. } if before.has_object_only_flags() => "bench",
        _ => "",
    };
    if !name.is_empty() && (name == "bench" || !before.is_empty()) {
        return refuse_client_flags(name);
    }
    match &cli.command {
        Command::Bench {
            args,
            endpoint,
            output,
        } => {
            let endpoint = endpoint.or(&before.endpoint);
            let output = output.or(&before.output);
            let args = args.clone().with_global(
                endpoint.endpoint_url,
                endpoint.region,
                output.json,
                output.no_progress,
            );
            if args.embedded {
                exit(hipobj_cli::embedded::run(
                    &args,
                    &mut stdout(),
                    &mut stderr(),
                ))
            } else {
                exit(bench::run(&args, &mut stdout(), &mut stderr()))
            }
        }
        Command::Serve(args) => exit(serve::run(args, &mut stdout(), &mut stderr())),
        Command::Topo(args) => exit(topo::run(args, &mut stdout(), &mut stderr())),
        Command::Daemon(args) => exit(daemon::run(args, &mut stdout(), &mut stderr())),
        Command::Debug(DebugCommand::Sigv4(args)) => exit(debug_sigv4::run(
            args,
            &mut std::io::stdin().lock(),
            &mut stdout(),
            &mut stderr(),
        )),
        Command::Debug(DebugCommand::Relay(args)) => {
            exit(relay::run(args, &mut stdout(), &mut stderr()))
        }
        Command::Put(a) => exit(commands::run(&a.client.or(before), |ctx| {
            commands::put(ctx, a)
        })),
        Command::Get(a) => exit(commands::run(&a.client.or(before), |ctx| {
            commands::get(ctx, a)
        })),
        Command::Head(a) => exit(commands::run(&a.client.or(before), |ctx| {
            commands::head(ctx, a)
        })),
        Command::Ls(a) => exit(commands::run(&a.client.or(before), |ctx| {
            commands::ls(ctx, a)
        })),
        Command::Rm(a) => exit(commands::run(&a.client.or(before), |ctx| {
            commands::rm(ctx, a)
        })),
        Command::Mb(a) => exit(commands::run(&a.client.or(before), |ctx| {
            commands::mb(ctx, a)
        })),
        Command::Rb(a) => exit(commands::run(&a.client.or(before), |ctx| {
            commands::rb(ctx, a)
        })),
        Command::Load(a) => exit(commands::run(&a.client.or(before), |ctx| {
            hipobj_cli::load::command::load(ctx, a)
        })),
    }
}
