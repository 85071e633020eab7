//! A tiny tokio server that fetches object ranges through the engine, many requests at once
//! on one [`engine::AsyncQueue`]:
//!
//! ```text
//! cargo run -p engine --features tokio --example tokio_server -- http://127.0.0.1:9000 127.0.0.1:7070
//! printf 'GET bucket key 0 16\n' | nc 127.0.0.1 7070
//! ```
//!
//! Credentials and region come from the environment or the `~/.aws` profile
//! (`AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, …). The protocol is in `serve.rs`.

mod serve;

use std::process::ExitCode;
use std::sync::Arc;

use engine::{Engine, Fabric};

const USAGE: &str = "usage: tokio_server ENDPOINT_URL [LISTEN_ADDR] [http|soft|auto]
  ENDPOINT_URL  S3 endpoint, e.g. http://127.0.0.1:9000
  LISTEN_ADDR   where to accept requests (default 127.0.0.1:7070)
  fabric        how the engine moves bytes (default auto)
requests: one per line, 'GET <bucket> <key> <offset> <len>' -> 'OK <n>\\n<bytes>' or 'ERR <why>'";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, listen, fabric) = match args.as_slice() {
        [url] => (url.clone(), "127.0.0.1:7070".to_owned(), Fabric::Auto),
        [url, listen] => (url.clone(), listen.clone(), Fabric::Auto),
        [url, listen, f] => {
            let fabric = match f.as_str() {
                "http" => Fabric::Http,
                "soft" => Fabric::Soft,
                "auto" => Fabric::Auto,
                other => {
                    eprintln!("unknown fabric {other:?}\n{USAGE}");
                    return ExitCode::from(2);
                }
            };
            (url.clone(), listen.clone(), fabric)
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let engine = match Engine::builder().endpoint_url(url).fabric(fabric).build() {
        Ok(e) => Arc::new(e),
        Err(e) => {
            eprintln!("engine: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        let server = Arc::new(serve::RangeServer::new(engine, 64, 1 << 20)?);
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("bind {listen}: {e}"))?;
        eprintln!("serving ranges on {listen}");
        server.serve(listener).await.map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
