//! Two processes, one RC connection: the verbs layer between separate address spaces (and, in
//! the VM lane, separate VMs). The out-of-band exchange is one TCP line each way carrying the
//! 88-hex RC token (QPN, GID and a registered window) and the sender's first PSN, as the
//! dialects exchange them in HTTP headers.
//!
//! ```text
//! verbs_rc_peer server <port> [device]        # prints VERBS_PEER_SERVER_OK on success
//! verbs_rc_peer client <host:port> [device]   # prints VERBS_PEER_CLIENT_OK on success
//! ```
//! The server advertises 2 MiB: the client RDMA-WRITEs 1 MiB into the first half (the last
//! 64 KiB as WRITE_WITH_IMM carrying a cookie, consuming the server's RECV), the server checks
//! every byte and says so, then the client RDMA-READs the second half (a pattern the server
//! wrote) and checks it.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::verbs::{
    Access, CompletionQueue, Context, QpCaps, QueuePair, RecvWr, RemoteAddr, SendOp, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};
use s3_lite::rdma::RcToken;

const HALF: usize = 1 << 20;
const TAIL: usize = 64 << 10;
const COOKIE: u32 = 0x5eed_c0de;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ (i >> 11) as u8)
        .collect()
}

fn wait(cq: &CompletionQueue) -> Res<WorkCompletion> {
    let mut wc = [WorkCompletion::default()];
    if cq.poll_wait(&mut wc, Duration::from_secs(60))? != 1 {
        return Err("no completion within 60 s".into());
    }
    if wc[0].status != WcStatus::Success {
        return Err(format!("completion failed: {:?}", wc[0]).into());
    }
    Ok(wc[0])
}

fn setup(
    dev: &str,
) -> Res<(
    Arc<Context>,
    engine::verbs::ProtectionDomain,
    Arc<CompletionQueue>,
    QueuePair,
)> {
    let ctx = Context::open(Some(dev))?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let qp = ctx.create_qp(&pd, &cq, &cq, QpCaps::default())?;
    qp.modify_to_init(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ)?;
    Ok((ctx, pd, cq, qp))
}

fn send_line(s: &mut TcpStream, token: &RcToken, psn: u32) -> Res<()> {
    writeln!(s, "{} {psn}", token.encode())?;
    Ok(())
}

fn read_line(r: &mut BufReader<TcpStream>) -> Res<String> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if line.len() > 256 {
        return Err("peer line too long".into());
    }
    Ok(line.trim().to_string())
}

fn parse_peer(line: &str) -> Res<(RcToken, u32)> {
    let (tok, psn) = line.split_once(' ').ok_or("malformed peer line")?;
    Ok((RcToken::decode(tok)?, psn.parse()?))
}

fn server(port: u16, dev: &str) -> Res<()> {
    let (_ctx, pd, cq, qp) = setup(dev)?;
    let mr = pd.register_owned(
        2 * HALF,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    mr.write(HALF as u64, &pattern(HALF, 0x77))?;
    let listener = TcpListener::bind(("0.0.0.0", port))?;
    println!("server: {} qpn {:#x} listening on :{port}", dev, qp.qpn());
    let (mut sock, peer) = listener.accept()?;
    let mut rd = BufReader::new(sock.try_clone()?);
    let psn = rand::random::<u32>() & 0x00ff_ffff;
    qp.post_recv(&RecvWr {
        wr_id: 1,
        sge: None,
    })?; // before the peer can write
    send_line(
        &mut sock,
        &qp.local_token(Some((&mr, 0, 2 * HALF as u64)))?,
        psn,
    )?;
    let (ptok, ppsn) = parse_peer(&read_line(&mut rd)?)?;
    qp.connect(&ptok, ppsn, psn)?;
    println!("server: connected to {peer} qpn {:#x}", ptok.qpn);
    // Only now may the client write: an RC responder still in INIT would drop its packets.
    writeln!(sock, "READY")?;
    let wc = wait(&cq)?;
    if wc.opcode != WcOpcode::RecvRdmaWithImm
        || wc.imm_data != Some(COOKIE)
        || wc.byte_len as usize != TAIL
    {
        return Err(format!("unexpected RECV completion {wc:?}").into());
    }
    if mr.to_vec(0, HALF)? != pattern(HALF, 0x11) {
        return Err("bytes written by the client differ".into());
    }
    writeln!(sock, "VERIFIED")?;
    if read_line(&mut rd)? != "DONE" {
        return Err("client did not finish".into());
    }
    println!("VERBS_PEER_SERVER_OK 1 MiB WRITE + WRITE_WITH_IMM received byte-exact, READ served");
    Ok(())
}

fn client(addr: &str, dev: &str) -> Res<()> {
    let (_ctx, pd, cq, qp) = setup(dev)?;
    let mr = pd.register_owned(2 * HALF, Access::LOCAL_WRITE)?;
    mr.write(0, &pattern(HALF, 0x11))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sock = loop {
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let mut rd = BufReader::new(sock.try_clone()?);
    let (ptok, ppsn) = parse_peer(&read_line(&mut rd)?)?;
    let psn = rand::random::<u32>() & 0x00ff_ffff;
    send_line(&mut sock, &qp.local_token(None)?, psn)?;
    qp.connect(&ptok, ppsn, psn)?;
    println!(
        "client: {} qpn {:#x} connected to qpn {:#x}",
        dev,
        qp.qpn(),
        ptok.qpn
    );
    if read_line(&mut rd)? != "READY" {
        return Err("server did not reach RTR".into());
    }
    let base = RemoteAddr {
        addr: ptok.addr,
        rkey: ptok.rkey,
    };
    let at = |off: usize| RemoteAddr {
        addr: base.addr + off as u64,
        ..base
    };
    let head = (HALF - TAIL) as u32;
    qp.post_send(&SendWr::new(1, SendOp::Write(at(0)), mr.sge(0, head)?))?;
    let mut last = SendWr::new(
        2,
        SendOp::WriteWithImm(at(HALF - TAIL), COOKIE),
        mr.sge(head.into(), TAIL as u32)?,
    );
    last.signaled = true;
    qp.post_send(&last)?;
    for want in [1, 2] {
        let wc = wait(&cq)?;
        if wc.wr_id != want {
            return Err(format!("completion order: got {} want {want}", wc.wr_id).into());
        }
    }
    if read_line(&mut rd)? != "VERIFIED" {
        return Err("server did not verify the WRITE".into());
    }
    qp.post_send(&SendWr::new(
        3,
        SendOp::Read(at(HALF)),
        mr.sge(HALF as u64, HALF as u32)?,
    ))?;
    let wc = wait(&cq)?;
    if wc.opcode != WcOpcode::RdmaRead || mr.to_vec(HALF as u64, HALF)? != pattern(HALF, 0x77) {
        return Err(format!("RDMA READ bytes differ ({wc:?})").into());
    }
    writeln!(sock, "DONE")?;
    println!(
        "VERBS_PEER_CLIENT_OK 1 MiB WRITE(+IMM) verified by the server, 1 MiB READ byte-exact"
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dev = args.get(3).map_or("rxe0", String::as_str);
    let r = match (args.get(1).map(String::as_str), args.get(2)) {
        (Some("server"), Some(p)) => p.parse().map_err(Into::into).and_then(|p| server(p, dev)),
        (Some("client"), Some(a)) => client(a, dev),
        _ => Err("usage: verbs_rc_peer server <port> [dev] | client <host:port> [dev]".into()),
    };
    if let Err(e) = r {
        eprintln!("verbs_rc_peer: {e}");
        std::process::exit(1);
    }
}
