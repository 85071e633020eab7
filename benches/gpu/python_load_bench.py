"""hipobj.load_safetensors into cuda:0 next to what a Python user does today (issue 16).

Run by benches/gpu/python_on_device.sh on the GPU machine (torch present, no network): it
generates a sharded safetensors model with random tensors of realistic (Llama-style) shapes,
uploads it to a running `hipobj serve`, and times, against that same server in the same run:

  hipobj       hipobj.load_safetensors(prefix, device="cuda:0") (fabric http and auto)
  boto3-file   boto3 download_file of each shard + safetensors.torch.load_file(device="cuda:0")
  boto3-mem    boto3 get_object into memory + safetensors.torch.load(bytes) + .to("cuda:0")
  urllib-mem   (only without boto3) signed urllib GETs + safetensors/torch parse + .to("cuda:0")

Every loaded tensor is compared with the source tensor on the GPU (torch.equal). Prints one
table and writes a JSON file. GB/s = tensor bytes / wall seconds of the whole load.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import torch

import hipobj

ACCESS, SECRET, REGION = "benchkey", "benchsecret", "us-east-1"


def llama_like(layers: int, hidden: int, inter: int, vocab: int) -> list:
    shapes = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [(p + "self_attn.q_proj.weight", (hidden, hidden)), (p + "self_attn.k_proj.weight", (hidden, hidden)),
                   (p + "self_attn.v_proj.weight", (hidden, hidden)), (p + "self_attn.o_proj.weight", (hidden, hidden)),
                   (p + "mlp.gate_proj.weight", (inter, hidden)), (p + "mlp.up_proj.weight", (inter, hidden)),
                   (p + "mlp.down_proj.weight", (hidden, inter)), (p + "input_layernorm.weight", (hidden,)),
                   (p + "post_attention_layernorm.weight", (hidden,))]
    shapes += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return shapes


def generate(outdir: str, gib: float, shard_gib: float):
    """Random bf16 tensors on the GPU (kept as the reference), written as shards + index."""
    from safetensors.torch import save_file

    hidden, inter, vocab = 4096, 11008, 32000
    per_layer = (4 * hidden * hidden + 3 * inter * hidden) * 2
    layers = max(1, int((gib * 2**30 - 2 * vocab * hidden * 2) // per_layer) + 1)
    g = torch.Generator(device="cuda").manual_seed(16)
    source, shards, current, size = {}, [], {}, 0
    for name, shape in llama_like(layers, hidden, inter, vocab):
        t = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)
        source[name] = t
        current[name] = t
        size += t.numel() * 2
        if size >= shard_gib * 2**30:
            shards.append(current)
            current, size = {}, 0
    if current:
        shards.append(current)
    n = len(shards)
    weight_map, files = {}, []
    for i, tensors in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(outdir, fname))
        files.append(fname)
        weight_map.update({k: fname for k in tensors})
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return source, files


def check(source: dict, loaded: dict, label: str) -> None:
    assert sorted(loaded) == sorted(source), f"{label}: tensor names differ"
    for k, v in source.items():
        got = loaded[k]
        assert got.device == v.device and got.dtype == v.dtype and got.shape == v.shape, f"{label}: {k}"
        assert torch.equal(got, v), f"{label}: tensor {k} differs"


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def sigv4_get(url_base: str, bucket: str, key: str) -> bytes:
    """A signed GET with urllib (the fallback when boto3 is absent)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    host = url_base.split("://", 1)[1]
    path = "/" + bucket + "/" + urllib.request.quote(key)
    empty = hashlib.sha256(b"").hexdigest()
    headers = {"host": host, "x-amz-content-sha256": empty, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["GET", path, "", "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, empty])
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + SECRET).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    req = urllib.request.Request(url_base + path, headers={
        "x-amz-content-sha256": empty, "x-amz-date": amz_date,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={signed}, Signature={sig}"})
    with urllib.request.urlopen(req) as r:
        return r.read()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--hipobj-bin", required=True)
    ap.add_argument("--gib", type=float, default=4.5)
    ap.add_argument("--shard-gib", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()

    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION)
    gen = tempfile.mkdtemp(dir=a.workdir)
    source, files = generate(gen, a.gib, a.shard_gib)
    total = sum(v.numel() * v.element_size() for v in source.values())
    print(f"model: {len(source)} tensors, {total / 2**30:.2f} GiB in {len(files)} shards", flush=True)
    cli = lambda *args: subprocess.run([a.hipobj_bin, *args, "--endpoint-url", a.endpoint], env=env, check=True,
                                       stdout=subprocess.DEVNULL)
    cli("mb", "s3://bench")
    for f in files + ["model.safetensors.index.json"]:
        cli("put", os.path.join(gen, f), f"s3://bench/model/{f}")
    prefix = "s3://bench/model/"
    rows = []

    def record(method, seconds_list, extra=None):
        best = min(seconds_list)
        rows.append({"method": method, "runs": seconds_list, "best_s": best,
                     "median_s": statistics.median(seconds_list), "gb_per_s": total / best / 1e9, **(extra or {})})
        print(f"{method:<22} best {best:7.3f} s  median {statistics.median(seconds_list):7.3f} s  "
              f"{total / best / 1e9:7.2f} GB/s", flush=True)

    # hipobj: a small warm-up load (CUDA context, engine threads), then timed runs.
    for fabric in ("http", "auto"):
        with hipobj.Engine(endpoint=a.endpoint, access_key=ACCESS, secret_key=SECRET, region=REGION,
                           fabric=fabric) as eng:
            times, reports = [], []
            for _ in range(a.runs):
                loaded, s = timed(lambda: eng.load_safetensors(prefix, device="cuda:0"))
                check(source, loaded, f"hipobj[{fabric}]")
                reports.append(eng.last_load_report)
                del loaded
                torch.cuda.empty_cache()
                times.append(s)
            record(f"hipobj fabric={fabric}", times, {"reports": reports})

    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        boto3 = None
    from safetensors.torch import load as st_load, load_file as st_load_file

    if boto3 is not None:
        s3 = boto3.client("s3", endpoint_url=a.endpoint, aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
                          region_name=REGION, config=Config(max_pool_connections=32))
        dl = tempfile.mkdtemp(dir=a.workdir)

        def boto_file():
            out = {}
            for f in files:
                p = os.path.join(dl, f)
                s3.download_file("bench", "model/" + f, p)
                out.update(st_load_file(p, device="cuda:0"))
            return out

        def boto_mem():
            out = {}
            for f in files:
                body = s3.get_object(Bucket="bench", Key="model/" + f)["Body"].read()
                out.update({k: v.to("cuda:0") for k, v in st_load(body).items()})
            return out

        for label, fn in (("boto3 download_file", boto_file), ("boto3 get_object", boto_mem)):
            times = []
            for _ in range(a.runs):
                loaded, s = timed(fn)
                check(source, loaded, label)
                del loaded
                torch.cuda.empty_cache()
                times.append(s)
            record(label, times)
    else:
        print("boto3 is not installed here: the baseline is signed urllib GETs", flush=True)

        def url_mem():
            out = {}
            for f in files:
                body = sigv4_get(a.endpoint, "bench", "model/" + f)
                out.update({k: v.to("cuda:0") for k, v in st_load(body).items()})
            return out

        times = []
        for _ in range(a.runs):
            loaded, s = timed(url_mem)
            check(source, loaded, "urllib")
            del loaded
            torch.cuda.empty_cache()
            times.append(s)
        record("urllib GET", times)

    ours = min(r["best_s"] for r in rows if r["method"].startswith("hipobj"))
    theirs = [r for r in rows if not r["method"].startswith("hipobj")]
    best_other = min(theirs, key=lambda r: r["best_s"])
    print(f"every tensor equal (torch.equal) for every method; hipobj best {ours:.3f} s vs "
          f"{best_other['method']} {best_other['best_s']:.3f} s: {best_other['best_s'] / ours:.2f}x", flush=True)
    with open(a.out, "w") as f:
        json.dump({"bytes": total, "tensors": len(source), "shards": len(files), "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(0), "rows": rows,
                   "speedup_vs_best_alternative": best_other["best_s"] / ours}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
