//! Reads one object through a registered buffer much smaller than it: range-gets awaited from
//! tokio through an [`engine::AsyncQueue`], each slot reused as its completion frees it, every
//! byte checked against the CRC-32 you give, and the path each op took reported.
//!
//! ```text
//! python3 -c 'import zlib,sys; print("%08x" % zlib.crc32(open(sys.argv[1],"rb").read()))' FILE
//! cargo run -p engine --features tokio --example windowed_batch -- BUCKET KEY CRC32
//! ```
//!
//! The endpoint is `--endpoint URL` or, like the AWS CLI, `AWS_ENDPOINT_URL` / the profile;
//! credentials and region come from the environment or `~/.aws`. Options: `--slots N`
//! (default 8), `--slot-len BYTES` (default 1048576), `--fabric auto|soft|http` (default
//! auto). The guide is docs/embedding.md.

mod window;

use std::process::ExitCode;
use std::time::Duration;

use engine::{Engine, Fabric};
use window::{Window, read_windowed};

const USAGE: &str = "usage: windowed_batch BUCKET KEY CRC32 [--endpoint URL] [--slots N] [--slot-len BYTES] [--fabric auto|soft|http]
  CRC32  the object's CRC-32 (zlib/IEEE) in hex: every byte read is checked against it";

struct Args {
    window: Window,
    crc32: u32,
    endpoint: Option<String>,
    fabric: Fabric,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut positional = Vec::new();
    let (mut endpoint, mut slots, mut slot_len, mut fabric) =
        (None, 8usize, 1u64 << 20, Fabric::Auto);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--endpoint" => endpoint = Some(value("--endpoint")?),
            "--slots" => slots = value("--slots")?.parse().map_err(|_| "bad --slots")?,
            "--slot-len" => {
                slot_len = value("--slot-len")?.parse().map_err(|_| "bad --slot-len")?
            }
            "--fabric" => {
                fabric = match value("--fabric")?.as_str() {
                    "auto" => Fabric::Auto,
                    "soft" => Fabric::Soft,
                    "http" => Fabric::Http,
                    other => return Err(format!("unknown fabric {other:?}")),
                }
            }
            _ => positional.push(a.clone()),
        }
    }
    let [bucket, key, crc] = positional.as_slice() else {
        return Err("expected BUCKET KEY CRC32".into());
    };
    let crc32 = u32::from_str_radix(crc.trim_start_matches("0x"), 16)
        .map_err(|_| format!("bad CRC32 {crc:?} (hex expected)"))?;
    Ok(Args {
        window: Window {
            bucket: bucket.clone(),
            key: key.clone(),
            slots,
            slot_len,
            deadline: Duration::from_secs(30),
        },
        crc32,
        endpoint,
        fabric,
    })
}

/// CRC-32 (zlib/IEEE, reflected 0xEDB88320), continued from `crc`.
fn crc32_update(crc: u32, bytes: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = (c >> 1) ^ (0xEDB8_8320 & (c & 1).wrapping_neg());
        }
    }
    !c
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut builder = Engine::builder().fabric(args.fabric);
    if let Some(url) = &args.endpoint {
        builder = builder.endpoint_url(url.clone());
    }
    let engine = match builder.build() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("engine: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Ranges complete out of order; they are placed into one copy of the object whose CRC
    // is compared at the end (a real loader would hand each range to its consumer instead).
    let mut object = Vec::new();
    let result = rt.block_on(read_windowed(&engine, &args.window, |offset, bytes| {
        let end = offset as usize + bytes.len();
        if object.len() < end {
            object.resize(end, 0);
        }
        object[offset as usize..end].copy_from_slice(bytes);
        Ok(())
    }));
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("batch failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let got = crc32_update(0, &object);
    println!(
        "{} bytes in {} range-gets through {} slots of {} bytes; paths: {:?}",
        report.object_len,
        report.ops.len(),
        args.window.slots,
        args.window.slot_len,
        report.by_path()
    );
    if object.len() as u64 != report.object_len || got != args.crc32 {
        eprintln!(
            "CRC-32 mismatch: read {got:08x}, expected {:08x}",
            args.crc32
        );
        return ExitCode::FAILURE;
    }
    println!("CRC-32 {got:08x} matches");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_check_value() {
        assert_eq!(crc32_update(0, b"123456789"), 0xCBF4_3926);
        assert_eq!(
            crc32_update(crc32_update(0, b"1234"), b"56789"),
            0xCBF4_3926
        );
    }

    #[test]
    fn arguments_are_checked() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert!(parse(&s(&["b", "k"])).is_err());
        assert!(parse(&s(&["b", "k", "zz"])).is_err());
        assert!(parse(&s(&["b", "k", "1", "--fabric", "rdma"])).is_err());
        let a = parse(&s(&[
            "b",
            "k",
            "0xcbf43926",
            "--slots",
            "3",
            "--fabric",
            "soft",
        ]))
        .unwrap();
        assert_eq!(
            (a.crc32, a.window.slots, a.fabric),
            (0xCBF4_3926, 3, Fabric::Soft)
        );
    }
}
