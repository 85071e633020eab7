"""put_from of a CUDA tensor larger than the engine's GPU bounce pool (256 MiB), on the GPU
machine: as one PUT (the engine refuses it, TooLarge: it cannot be staged at once) and as a
multipart upload in parts of --part-mib (each part staged on its own), then read back into
another CUDA tensor and compared with torch.equal. Prints one JSON line with the timings.

Run by benches/gpu/python_on_device.sh with BENCH=put (it starts the gateway and installs the
wheel)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import torch

import hipobj

ACCESS, SECRET, REGION = "benchkey", "benchsecret", "us-east-1"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--hipobj-bin", required=True)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--part-mib", type=int, default=64)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION)
    subprocess.run([a.hipobj_bin, "mb", "s3://parts", "--endpoint-url", a.endpoint], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    n = int(a.gib * 2**30)
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    result = {"bytes": n, "part_bytes": a.part_mib << 20}
    with hipobj.Engine(endpoint=a.endpoint, access_key=ACCESS, secret_key=SECRET, region=REGION,
                       fabric="soft") as eng:
        try:
            eng.put_from("s3://parts/one.bin", src)
            result["one_put"] = "stored"
        except hipobj.HipobjError as e:
            result["one_put"] = f"{type(e).__name__}: {getattr(e, 'engine_code', None)}"
        t0 = time.perf_counter()
        sent = eng.put_from("s3://parts/parts.bin", src, part_size=a.part_mib << 20)
        result["put_parts_s"] = time.perf_counter() - t0
        assert sent == n, (sent, n)
        dst = torch.zeros_like(src)
        t0 = time.perf_counter()
        got = eng.get_into("s3://parts/parts.bin", dst)
        torch.cuda.synchronize()
        result["get_s"] = time.perf_counter() - t0
        assert got == n, (got, n)
        result["equal"] = bool(torch.equal(src, dst))
    result["put_parts_gb_per_s"] = n / result["put_parts_s"] / 1e9
    result["get_gb_per_s"] = n / result["get_s"] / 1e9
    head = subprocess.run([a.hipobj_bin, "--json", "head", "s3://parts/parts.bin", "--endpoint-url",
                           a.endpoint], env=env, check=True, capture_output=True, text=True)
    result["etag"] = json.loads(head.stdout.strip().splitlines()[-1])["etag"]
    print(json.dumps(result), flush=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0 if result["equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
