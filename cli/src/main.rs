//! `hipobj`: the command-line face of hipObject (modelled on the aws CLI and s5cmd).
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hipobj_cli::commands::{self, GlobalArgs};
use hipobj_cli::{bench, debug_sigv4, serve, topo};

#[derive(Parser, Debug)]
#[command(
    name = "hipobj",
    version,
    about = "RDMA-accelerated S3 client: object data straight into GPU or host memory"
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
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
    /// List objects under s3://BUCKET[/PREFIX].
    Ls(commands::LsArgs),
    /// Delete an object.
    Rm(commands::RmArgs),
    /// Create a bucket.
    Mb(commands::MbArgs),
    /// Run N range-gets of size S at random aligned offsets of an object and print a results table.
    Bench(bench::BenchArgs),
    /// Run the gateway: an S3 server in front of a directory or an upstream S3 store.
    Serve(serve::ServeArgs),
    /// Print the GPU/NIC/CPU topology matrix (like `nvidia-smi topo -m`).
    Topo(topo::TopoArgs),
    /// Debugging helpers.
    #[command(subcommand)]
    Debug(DebugCommand),
}

#[derive(Subcommand, Debug)]
enum DebugCommand {
    /// Show exactly how a raw HTTP request (on stdin) is signed with SigV4.
    Sigv4(debug_sigv4::Sigv4Args),
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Object commands take no lock on stdout/stderr for their whole run: the signal thread
    // (hipobj_cli::interrupt) must be able to report an interrupted download.
    let stdout = || std::io::stdout().lock();
    let stderr = || std::io::stderr().lock();
    match &cli.command {
        Command::Bench(args) => {
            let g = &cli.global;
            let args = args.clone().with_global(
                g.endpoint_url.clone(),
                g.region.clone(),
                g.json,
                g.no_progress,
            );
            if args.embedded {
                exit(hipobj_cli::embedded::run(&args, &mut stdout(), &mut stderr()))
            } else {
                exit(bench::run(&args, &mut stdout(), &mut stderr()))
            }
        }
        Command::Serve(args) => exit(serve::run(args, &mut stdout(), &mut stderr())),
        Command::Topo(args) => exit(topo::run(args, &mut stdout(), &mut stderr())),
        Command::Debug(DebugCommand::Sigv4(args)) => exit(debug_sigv4::run(
            args,
            &mut std::io::stdin().lock(),
            &mut stdout(),
            &mut stderr(),
        )),
        Command::Put(args) => exit(commands::run(&cli.global, |ctx| commands::put(ctx, args))),
        Command::Get(args) => exit(commands::run(&cli.global, |ctx| commands::get(ctx, args))),
        Command::Head(args) => exit(commands::run(&cli.global, |ctx| commands::head(ctx, args))),
        Command::Ls(args) => exit(commands::run(&cli.global, |ctx| commands::ls(ctx, args))),
        Command::Rm(args) => exit(commands::run(&cli.global, |ctx| commands::rm(ctx, args))),
        Command::Mb(args) => exit(commands::run(&cli.global, |ctx| commands::mb(ctx, args))),
    }
}
