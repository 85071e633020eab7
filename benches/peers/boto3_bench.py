#!/usr/bin/env python3
"""Peer: boto3, as a Python user would drive it for concurrent range-gets.

Same arguments, workload and JSON line as the Rust peers in src/bin/ (see
src/lib.rs): N range-gets of S bytes at random S-aligned offsets drawn from the
same splitmix64 stream, C in flight through a ThreadPoolExecutor sharing one
client (botocore clients are thread-safe), path-style addressing.

usage: boto3_bench.py ENDPOINT BUCKET KEY OBJECT_SIZE OPS RANGE_SIZE CONCURRENCY SEED
Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
"""

import json
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config

MASK = (1 << 64) - 1


def splitmix64_stream(seed):
    """Yield splitmix64 outputs; identical to hipobj_peers::splitmix64."""
    state = seed & MASK
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def offsets(n, seed, object_size, range_size):
    slots = object_size // range_size
    g = splitmix64_stream(seed)
    return [(next(g) % slots) * range_size for _ in range(n)]


def percentile(v, p):
    """Nearest-rank percentile of sorted v (same rule as the Rust peers)."""
    if not v:
        return 0
    import math

    rank = math.ceil(p / 100.0 * len(v))
    return v[min(max(rank, 1), len(v)) - 1]


def cpu_times():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def main(argv):
    if len(argv) != 9:
        sys.exit(__doc__)
    endpoint, bucket, key = argv[1], argv[2], argv[3]
    object_size, ops, range_size, conc, seed = (int(x) for x in argv[4:9])
    if not (0 < range_size <= object_size) or ops <= 0 or conc <= 0:
        sys.exit("bad arguments\n" + __doc__)

    cfg = Config(
        s3={"addressing_style": "path"},
        max_pool_connections=conc,  # default is 10: would cap concurrency
        retries={"max_attempts": 1, "mode": "standard"},
        response_checksum_validation="when_required",
    )
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=cfg,
    )

    def one(off):
        t0 = time.perf_counter()
        r = client.get_object(
            Bucket=bucket, Key=key, Range=f"bytes={off}-{off + range_size - 1}"
        )
        n = len(r["Body"].read())
        us = int((time.perf_counter() - t0) * 1e6)
        if n != range_size:
            raise RuntimeError(f"offset {off}: got {n} bytes, expected {range_size}")
        return us

    with ThreadPoolExecutor(max_workers=conc) as pool:
        # Warm-up (not timed): one op per worker, opens the connections.
        list(pool.map(one, offsets(conc, seed ^ 0x5741524D, object_size, range_size)))
        offs = offsets(ops, seed, object_size, range_size)
        u0, s0 = cpu_times()
        t0 = time.perf_counter()
        lat = list(pool.map(one, offs))
        secs = time.perf_counter() - t0
        u1, s1 = cpu_times()

    lat.sort()
    user, sys_ = u1 - u0, s1 - s0
    cpu = user + sys_
    nbytes = ops * range_size
    print(
        json.dumps(
            {
                "client": "boto3",
                "size": range_size,
                "object_size": object_size,
                "ops": ops,
                "concurrency": conc,
                "seconds": round(secs, 6),
                "ops_per_s": round(ops / secs, 1),
                "gb_per_s": round(nbytes / secs / 1e9, 4),
                "cpu_user_s": round(user, 4),
                "cpu_sys_s": round(sys_, 4),
                "cpu_s_per_op": cpu / ops,
                "cpu_s_per_gb": round(cpu / (nbytes / 1e9), 4),
                "p50_us": percentile(lat, 50),
                "p99_us": percentile(lat, 99),
                "p999_us": percentile(lat, 99.9),
                "warmup_ops": conc,
            },
            separators=(",", ":"),
        )
    )


if __name__ == "__main__":
    main(sys.argv)
