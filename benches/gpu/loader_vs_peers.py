"""A safetensors model from S3 into cuda:0: hipobj next to what a user would pick instead (issue 31).

Run by benches/gpu/loader_vs_peers.sh on the GPU machine against one running S3 server (our
gateway, or s3s-fs): generates a sharded bf16 model with Llama-like shapes and random data (the
reference tensors stay on the GPU), uploads it, then times each loader in turn, warm medians of
--runs runs, and checks every tensor of every run with torch.equal:

  hipobj-http-cuda   hipobj.load_safetensors(prefix, device="cuda:0"), Engine(fabric="http")
  hipobj-http-host   the same load into host memory (device="cpu"): the goal's yardstick
  hipobj-soft-cuda   the same load into cuda:0 over the soft RDMA fabric (our gateway only)
  hipobj-stream      hipobj.stream_safetensors(prefix, device="cuda:0") over HTTP: time to first
                     tensor and to the last
  boto3-pinned       16 boto3 threads, 64 MiB ranges into one pinned buffer per shard, one copy
                     to the GPU per shard, tensors cut from it (the 30-line script)
  runai              Run:ai Model Streamer's documented SafetensorsStreamer usage, every tensor
                     .to("cuda:0"): time to first tensor and to the last

GB/s = tensor bytes / wall seconds of the whole load. Prints one table and writes JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_gen import ACCESS, REGION, SECRET, check, generate  # noqa: E402

BUCKET, PREFIX = "bench", "model/"


def sync_time(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def hipobj_load(endpoint, fabric, device):
    import hipobj

    eng = hipobj.Engine(endpoint=endpoint, access_key=ACCESS, secret_key=SECRET, region=REGION, fabric=fabric)

    def run():
        return eng.load_safetensors(f"s3://{BUCKET}/{PREFIX}", device=device), None

    return run, eng


def hipobj_stream(endpoint):
    import hipobj

    eng = hipobj.Engine(endpoint=endpoint, access_key=ACCESS, secret_key=SECRET, region=REGION, fabric="http")

    def run():
        t0, first, out = time.perf_counter(), None, {}
        for name, tensor in eng.stream_safetensors(f"s3://{BUCKET}/{PREFIX}", device="cuda:0"):
            if first is None:
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
            out[name] = tensor
        return out, first

    return run, eng


def boto3_pinned(endpoint, files, threads=16, chunk=64 << 20):
    """The short script a user writes: 16 threads, 64 MiB ranges into one pinned buffer (the
    size of the largest shard, allocated once, outside the timed loads), one copy per shard to
    the GPU, tensors cut from it."""
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
                      region_name=REGION, config=Config(max_pool_connections=threads))
    dt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    keys = [PREFIX + f for f in files]
    pinned = torch.empty(max(s3.head_object(Bucket=BUCKET, Key=k)["ContentLength"] for k in keys),
                         dtype=torch.uint8, pin_memory=True)
    view = memoryview(pinned.numpy())
    pool = concurrent.futures.ThreadPoolExecutor(threads)

    def fetch(job):
        key, a, b = job
        body = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={a}-{b - 1}")["Body"]
        at = a
        for piece in body.iter_chunks(1 << 20):
            view[at:at + len(piece)] = piece
            at += len(piece)
        assert at == b, f"{key}: {at - a} of {b - a} bytes"

    def run():
        out = {}
        for key in keys:
            n = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
            list(pool.map(fetch, [(key, a, min(a + chunk, n)) for a in range(0, n, chunk)]))
            gpu = pinned[:n].to("cuda:0")
            (hlen,) = struct.unpack("<Q", bytes(view[:8]))
            header = json.loads(bytes(view[8:8 + hlen]))
            base = 8 + hlen
            for name, m in header.items():
                if name == "__metadata__":
                    continue
                a, b = m["data_offsets"]
                out[name] = gpu[base + a:base + b].view(dt[m["dtype"]]).reshape(m["shape"])
        return out, None

    return run, None


def runai(endpoint, files):
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET,
                      AWS_REGION=REGION, AWS_EC2_METADATA_DISABLED="true",
                      RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0", RUNAI_STREAMER_LOG_LEVEL="WARNING")
    from runai_model_streamer import SafetensorsStreamer

    def run():
        t0, first, out = time.perf_counter(), None, {}
        with SafetensorsStreamer() as streamer:
            streamer.stream_files([f"s3://{BUCKET}/{PREFIX}{f}" for f in files])
            for name, tensor in streamer.get_tensors():
                out[name] = tensor.to("cuda:0")
                if first is None:
                    torch.cuda.synchronize()
                    first = time.perf_counter() - t0
        return out, first

    return run, None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--hipobj-bin", required=True)
    ap.add_argument("--gib", type=float, default=6.2)
    ap.add_argument("--shard-gib", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--methods", default="hipobj-http-cuda,hipobj-http-host,hipobj-soft-cuda,hipobj-stream,boto3-pinned,runai")
    ap.add_argument("--server", default="hipobj serve")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()

    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION)
    gen = tempfile.mkdtemp(dir=a.workdir)
    source, files = generate(gen, a.gib, a.shard_gib)
    total = sum(v.numel() * v.element_size() for v in source.values())
    print(f"model: {len(source)} tensors, {total / 1e9:.2f} GB in {len(files)} shards; server: {a.server}", flush=True)
    cli = lambda *args: subprocess.run([a.hipobj_bin, *args, "--endpoint-url", a.endpoint], env=env, check=True,
                                       stdout=subprocess.DEVNULL)
    cli("mb", f"s3://{BUCKET}")
    for f in files + ["model.safetensors.index.json"]:
        cli("put", os.path.join(gen, f), f"s3://{BUCKET}/{PREFIX}{f}")
    host_source = None
    rows = []
    for method in a.methods.split(","):
        if method == "hipobj-http-cuda":
            run, eng = hipobj_load(a.endpoint, "http", "cuda:0")
        elif method == "hipobj-http-host":
            run, eng = hipobj_load(a.endpoint, "http", "cpu")
            if host_source is None:
                host_source = {k: v.cpu() for k, v in source.items()}
        elif method == "hipobj-soft-cuda":
            run, eng = hipobj_load(a.endpoint, "soft", "cuda:0")
        elif method == "hipobj-stream":
            run, eng = hipobj_stream(a.endpoint)
        elif method == "boto3-pinned":
            run, eng = boto3_pinned(a.endpoint, files)
        elif method == "runai":
            run, eng = runai(a.endpoint, files)
        else:
            raise SystemExit(f"unknown method {method}")
        times, firsts, reports = [], [], []
        try:
            for i in range(a.runs + 1):  # the first run warms up (engine threads, CUDA context, page cache)
                (loaded, first), s = sync_time(run)
                check(host_source if method == "hipobj-http-host" else source, loaded, method)
                if eng is not None and getattr(eng, "last_load_report", None):
                    reports.append(eng.last_load_report)
                del loaded
                torch.cuda.empty_cache()
                if i > 0:
                    times.append(s)
                    if first is not None:
                        firsts.append(first)
        except Exception as e:  # a loader that cannot run here is reported, not hidden
            print(f"{method:<18} FAILED: {type(e).__name__}: {e}", flush=True)
            rows.append({"method": method, "error": f"{type(e).__name__}: {e}"})
            continue
        finally:
            if eng is not None:
                eng.close()
        med = statistics.median(times)
        row = {"method": method, "runs_s": times, "median_s": med, "gb_per_s": total / med / 1e9,
               "first_tensor_s": statistics.median(firsts) if firsts else None, "reports": reports[-1:]}
        rows.append(row)
        ttft = f"  first tensor {row['first_tensor_s'] * 1e3:7.1f} ms" if firsts else ""
        print(f"{method:<18} median {med:7.3f} s  {row['gb_per_s']:6.2f} GB/s{ttft}", flush=True)
    by = {r["method"]: r for r in rows if "gb_per_s" in r}
    ours = by.get("hipobj-http-cuda")
    if ours:
        for other in ("hipobj-http-host", "boto3-pinned", "runai"):
            if other in by:
                print(f"hipobj-http-cuda / {other}: {ours['gb_per_s'] / by[other]['gb_per_s']:.2f}x", flush=True)
    print("every tensor equal (torch.equal) in every run of every method that did not fail", flush=True)
    with open(a.out, "w") as f:
        json.dump({"bytes": total, "tensors": len(source), "shards": len(files), "server": a.server,
                   "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1,
                  default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
