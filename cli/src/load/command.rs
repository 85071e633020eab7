//! `hipobj load s3://BUCKET/MODEL/ --device cpu|cuda:N`: a safetensors model into host memory
//! or VRAM through the engine, timed; prints tensors, bytes, seconds and GB/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use engine::gpu::{DeviceBuffer, GpuRuntime};
use engine::{Engine, Fabric, RegisterOptions};
use ring_api::BufHandle;
use serde_json::{Value, json};

use super::model::{self, FetchOptions, Model};
use crate::client_args::ClientArgs;
use crate::commands::{CommandResult, Context};
use crate::s3uri::S3Uri;

/// `hipobj load`.
#[derive(Args, Debug)]
pub struct LoadArgs {
    /// The model: s3://BUCKET/PREFIX/ (holding model.safetensors.index.json or
    /// model.safetensors), an index .json, or one .safetensors file.
    pub src: String,
    /// Where the tensors go: `cpu` (registered host memory) or `cuda:N` (VRAM of device N,
    /// through the engine's GPU staging).
    #[arg(long, default_value = "cpu", value_parser = Device::parse)]
    pub device: Device,
    /// Engine fabric: `auto` (RDMA when the endpoint pairs, else HTTP), `soft`, `verbs`, `http`.
    #[arg(long, default_value = "auto", value_parser = parse_fabric)]
    pub fabric: Fabric,
    /// RDMA dialect: `auto`, `rc-persistent`, `rc-v2` or `http`.
    #[arg(long, value_parser = crate::engine_io::parse_dialect, default_value = "auto")]
    pub dialect: engine::Dialect,
    /// Print every tensor (name, dtype, shape, bytes, file).
    #[arg(long)]
    pub tensors: bool,
    /// Engine workers (default: one per NUMA node or RDMA NIC).
    #[arg(long)]
    pub workers: Option<usize>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Where `hipobj load` puts the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Registered host memory.
    Cpu,
    /// VRAM of this CUDA device.
    Cuda(u32),
}

impl Device {
    /// `cpu`, `cuda` (device 0) or `cuda:N`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| format!("--device {s:?}: expected cpu or cuda:N")),
        }
    }

    /// `cpu` or `cuda:N`.
    #[must_use]
    pub fn name(self) -> String {
        match self {
            Self::Cpu => "cpu".into(),
            Self::Cuda(n) => format!("cuda:{n}"),
        }
    }
}

/// `--fabric` of `load`: the engine's fabric.
pub fn parse_fabric(s: &str) -> Result<Fabric, String> {
    match s {
        "auto" => Ok(Fabric::Auto),
        "soft" => Ok(Fabric::Soft),
        "verbs" => Ok(Fabric::Verbs),
        "http" => Ok(Fabric::Http),
        _ => Err(format!(
            "--fabric {s:?}: expected auto, soft, verbs or http"
        )),
    }
}

/// The files' destinations; VRAM images are freed after the engine lets go of them.
struct Buffers {
    handles: Vec<Option<BufHandle>>,
    _vram: Vec<DeviceBuffer>,
}

fn allocate(
    engine: &Engine,
    model: &Model,
    device: Device,
    rt: Option<&Arc<dyn GpuRuntime>>,
) -> Result<Buffers, String> {
    let mut handles = Vec::with_capacity(model.files.len());
    let mut vram = Vec::new();
    for f in &model.files {
        let len = usize::try_from(f.data_len()).map_err(|_| "file too large for this host")?;
        if len == 0 {
            handles.push(None);
            continue;
        }
        let h = match (device, rt) {
            (Device::Cuda(ordinal), Some(rt)) => {
                let img = DeviceBuffer::new(rt, ordinal, len)
                    .map_err(|e| format!("{}: {len} bytes of VRAM: {e}", device.name()))?;
                // SAFETY: `img` is a live allocation of the engine's runtime, `len` bytes
                // long, kept in `Buffers` and dropped only after the handle is deregistered;
                // nothing reads the VRAM while range-gets into it are in flight.
                let h = unsafe { engine.register_device(img.ptr(), len) };
                vram.push(img);
                h
            }
            _ => engine.register_host(len, RegisterOptions::pageable()),
        }
        .map_err(|e| format!("registering {len} bytes for {}: {e}", f.key))?;
        handles.push(Some(h));
    }
    Ok(Buffers {
        handles,
        _vram: vram,
    })
}

/// Runs `hipobj load`.
pub fn load(ctx: &mut Context, args: &LoadArgs) -> CommandResult {
    let uri = S3Uri::parse(&args.src).map_err(|e| e.to_string())?;
    let rt = match args.device {
        Device::Cpu => None,
        Device::Cuda(n) => match engine::gpu::cuda::CudaRuntime::load() {
            Ok(rt) if rt.device_count() > n => Some(Arc::new(rt) as Arc<dyn GpuRuntime>),
            Ok(rt) => {
                return Err(format!(
                    "--device cuda:{n}: {} reports {} device(s)",
                    rt.name(),
                    rt.device_count()
                ));
            }
            Err(e) => return Err(format!("--device cuda:{n}: no CUDA runtime: {e}")),
        },
    };
    let mut b = Engine::builder()
        .endpoint_url(&ctx.site.url)
        .credentials(ctx.site.credentials.clone())
        .region(&ctx.site.region)
        .fabric(args.fabric)
        .dialect(args.dialect);
    if let Some(n) = args.workers {
        b = b.placement(engine::Placement::Workers(n));
    }
    if let Some(rt) = &rt {
        b = b.gpu(Arc::clone(rt));
    }
    let engine = b.build().map_err(|e| format!("engine: {e}"))?;
    let start = Instant::now();
    let model =
        model::open(&engine, &uri.bucket, &uri.key, &mut || false).map_err(|e| e.to_string())?;
    let bufs = allocate(&engine, &model, args.device, rt.as_ref())?;
    let opts = FetchOptions::for_engine(&engine);
    let report = model::fetch(
        &engine,
        &model,
        &bufs.handles,
        &opts,
        Some(&mut ctx.client),
        &mut || false,
    );
    let seconds = start.elapsed().as_secs_f64();
    for h in bufs.handles.iter().flatten() {
        let _ = engine.deregister(*h, Duration::from_secs(30));
    }
    let report = report.map_err(|e| e.to_string())?;
    let bytes = model.data_bytes();
    let gbps = if seconds > 0.0 {
        bytes as f64 / seconds / 1e9
    } else {
        0.0
    };
    let files: Vec<Value> = model
        .files
        .iter()
        .zip(&report.verification)
        .map(|(f, v)| {
            json!({
                "key": f.key,
                "tensors": f.header.tensors.len(),
                "bytes": f.data_len(),
                "verification": v.map_or("none", model::Verification::name),
            })
        })
        .collect();
    if args.tensors && !ctx.json {
        for f in &model.files {
            for t in &f.header.tensors {
                println!(
                    "{}\t{}\t{:?}\t{}\t{}",
                    t.name,
                    t.dtype.name(),
                    t.shape,
                    t.len(),
                    f.key
                );
            }
        }
    }
    let unverified = report
        .verification
        .iter()
        .filter(|v| **v == Some(model::Verification::Unverified))
        .count();
    if !ctx.json {
        println!(
            "loaded {} tensors from {} file(s) into {}: {bytes} bytes in {seconds:.3} s, {gbps:.2} GB/s ({} requests; {})",
            model.tensor_count(),
            model.files.len(),
            args.device.name(),
            report.requests,
            if unverified == 0 {
                "every file verified".to_owned()
            } else {
                format!("{unverified} file(s) unverified: the server keeps no checksum")
            }
        );
    }
    let mut out = json!({
        "op": "load",
        "device": args.device.name(),
        "tensors": model.tensor_count(),
        "bytes": bytes,
        "seconds": seconds,
        "gb_per_s": gbps,
        "requests": report.requests,
        "files": files,
        "paths": report.paths.to_json(),
        "dialect": report.paths.dialect(),
    });
    if args.tensors {
        out["tensor_list"] = model
            .files
            .iter()
            .flat_map(|f| {
                f.header.tensors.iter().map(move |t| {
                    json!({"name": t.name, "dtype": t.dtype.name(), "shape": t.shape, "bytes": t.len(), "file": f.key})
                })
            })
            .collect();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_fabrics_parse() {
        assert_eq!(Device::parse("cpu"), Ok(Device::Cpu));
        assert_eq!(Device::parse("cuda"), Ok(Device::Cuda(0)));
        assert_eq!(Device::parse("cuda:3"), Ok(Device::Cuda(3)));
        assert!(Device::parse("cuda:x").is_err());
        assert!(Device::parse("gpu").is_err());
        assert_eq!(Device::Cuda(2).name(), "cuda:2");
        assert_eq!(parse_fabric("soft"), Ok(Fabric::Soft));
        assert!(parse_fabric("rdma").is_err());
    }
}
