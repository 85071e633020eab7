//! `hipobj debug relay`: the command-line front of the gateway crate's fault-injecting relay
//! ([`hipobj_gateway::fault_relay`]; the faults are listed there and in `docs/fault-relay.md`).

use std::io::Write;

use hipobj_gateway::fault_relay::{Fault, Relay};

/// `hipobj debug relay`.
#[derive(clap::Args, Debug)]
pub struct RelayArgs {
    /// Address to listen on (port 0: any free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Upstream HOST:PORT every connection is relayed to.
    #[arg(long)]
    pub to: String,
    /// A fault, `KIND[=N][,times=K][,every=M]` (repeatable): latency=MS, reset-after=N,
    /// truncate-after=N, stall-after=N, flip=N, flip-every=N, content-length-minus=K,
    /// slowdown, flip-request=N, drop-header=NAME, lower-content-length=K,
    /// rewrite-header=NAME:VALUE, flip-bodies-of-length=LEN:AT:EVERY, flip-stream=N.
    /// None: a faithful relay.
    #[arg(long, value_parser = Fault::parse)]
    pub fault: Vec<Fault>,
}

/// Runs the relay until the process is stopped: prints `listening on ADDR` first.
pub fn run(args: &RelayArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match Relay::start(&args.listen, &args.to, args.fault.clone()) {
        Ok(relay) => {
            let _ = writeln!(out, "listening on {} -> {}", relay.addr(), args.to);
            let _ = out.flush();
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            let _ = writeln!(
                err,
                "hipobj: error: relay {} -> {}: {e}",
                args.listen, args.to
            );
            1
        }
    }
}
