"""8 ranks loading their safetensors shards into cuda:0: one process with its own engine, 8
processes through `hipobj daemon`, and 8 processes each with its own engine (issue 34).

Run by benches/gpu/daemon_ranks.sh on the GPU machine. Each shard is SHARD_MIB of random bf16
tensors (names unique per rank), generated on the GPU from a per-rank seed; every loaded tensor
is compared with torch.equal against its regenerated reference. The 8 rank processes start
their timers together (a barrier file) after one untimed warm-up load each (engine threads,
connections, the pinned bounce pool and the CUDA context exist before the timer starts; the
daemon stays up across runs); a scenario's aggregate GB/s is all bytes over the span from the
first start to the last end. Each of --runs rounds runs every scenario once (drift of the
machine reaches all alike); a scenario's ratio is the median over rounds of its rate over the
same round's one-process rate. Each process also reports its load's phases (headers, allocation
with registration, fetch). Threads are counted in the middle of each scenario: all loader
processes together (Python and torch threads included), and the daemon's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ACCESS, SECRET, REGION, BUCKET = "benchkey", "benchsecret", "us-east-1", "ranks"


def shard_tensors(rank: int, shard_mib: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    out, left, j = {}, shard_mib << 20, 0
    while left > 0:
        n = min(64 << 20, left) // 2  # bf16 elements
        out[f"r{rank}.t{j}"] = torch.randn((n,), generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)
        left -= n * 2
        j += 1
    return out


def engine(a, daemon=None):
    import hipobj

    return hipobj.Engine(endpoint=a.endpoint, access_key=ACCESS, secret_key=SECRET, region=REGION,
                         fabric=a.fabric, daemon=daemon)


def check(rank: int, shard_mib: int, loaded: dict) -> None:
    import torch

    ref = shard_tensors(rank, shard_mib)
    assert sorted(ref) == sorted(k for k in loaded if k.startswith(f"r{rank}.")), f"rank {rank}: names differ"
    for k, v in ref.items():
        assert torch.equal(loaded[k], v), f"rank {rank}: tensor {k} differs"


PHASES = ("seconds_headers", "seconds_allocate", "seconds_fetch")


def phases(eng) -> dict:
    """The load's split (headers read, buffers allocated and registered, bytes fetched)."""
    rep = getattr(eng, "last_load_report", None) or {}
    return {k: rep.get(k) for k in PHASES}


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.0005)


def role_rank(a) -> int:
    """One rank: load shard `a.rank` (through the daemon when --daemon is given)."""
    import torch

    eng = engine(a, a.daemon)
    torch.cuda.init()
    # Warm-up (untimed): the engine's threads, connections and bounce pool, the CUDA context.
    del_ = eng.load_safetensors(f"s3://{BUCKET}/shard-{a.rank}.safetensors", device="cuda:0")
    del del_
    torch.cuda.empty_cache()
    open(os.path.join(a.sync, f"ready-{a.rank}"), "w").close()
    wait_for(os.path.join(a.sync, "go"))
    t0 = time.time()
    loaded = eng.load_safetensors(f"s3://{BUCKET}/shard-{a.rank}.safetensors", device="cuda:0")
    torch.cuda.synchronize()
    t1 = time.time()
    check(a.rank, a.shard_mib, loaded)
    print(json.dumps({"rank": a.rank, "start": t0, "end": t1, **phases(eng),
                      "bytes": sum(v.numel() * v.element_size() for v in loaded.values())}), flush=True)
    eng.close()
    return 0


def role_one(a) -> int:
    """One process, its own engine, every shard (the prefix holds them all)."""
    import torch

    eng = engine(a)
    torch.cuda.init()
    # Warm-up (untimed), as for the ranks.
    del_ = eng.load_safetensors(f"s3://{BUCKET}/", device="cuda:0")
    del del_
    torch.cuda.empty_cache()
    open(os.path.join(a.sync, "ready-0"), "w").close()
    wait_for(os.path.join(a.sync, "go"))
    t0 = time.time()
    loaded = eng.load_safetensors(f"s3://{BUCKET}/", device="cuda:0")
    torch.cuda.synchronize()
    t1 = time.time()
    for r in range(a.shards):
        check(r, a.shard_mib, loaded)
    print(json.dumps({"rank": -1, "start": t0, "end": t1, **phases(eng),
                      "bytes": sum(v.numel() * v.element_size() for v in loaded.values())}), flush=True)
    eng.close()
    return 0


def threads_of(pids) -> int:
    n = 0
    for p in pids:
        try:
            n += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            pass
    return n


def scenario(a, label: str, processes: int, daemon_sock=None, daemon_pid=None):
    """Starts the processes, waits until all are ready, releases them together."""
    sync = os.path.join(a.workdir, f"sync-{label}-{time.time_ns()}")
    os.makedirs(sync)
    me = [sys.executable, __file__, "--endpoint", a.endpoint, "--hipobj-bin", a.hipobj_bin or "", "--fabric", a.fabric, "--shards", str(a.shards),
          "--shard-mib", str(a.shard_mib), "--sync", sync, "--workdir", a.workdir]
    if processes == 1:
        cmds = [me + ["--role", "one"]]
    else:
        cmds = [me + ["--role", "rank", "--rank", str(r)] + (["--daemon", daemon_sock] if daemon_sock else [])
                for r in range(processes)]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
    ready = [os.path.join(sync, f"ready-{r}") for r in range(processes)]
    deadline = time.time() + 300
    while not all(os.path.exists(p) for p in ready):
        if time.time() > deadline or any(p.poll() not in (None, 0) for p in procs):
            for p in procs:
                p.kill()
            raise SystemExit(f"{label}: a process failed before the start")
        time.sleep(0.01)
    open(os.path.join(sync, "go"), "w").close()
    time.sleep(0.3)
    node_threads = (threads_of([p.pid for p in procs]), threads_of([daemon_pid]) if daemon_pid else 0)
    if daemon_sock and a.hipobj_bin:
        st = subprocess.run([a.hipobj_bin, "daemon", "status", "--json", "--socket", daemon_sock],
                            capture_output=True, text=True)
        clients = [json.loads(l) for l in st.stdout.splitlines() if l.strip()]
        print(f"  mid-run daemon status: {len(clients)} clients, in flight "
              f"{[c['in_flight'] for c in clients]}", flush=True)
    results, failed = [], []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            failed.append(p.returncode)
        else:
            results.append(json.loads(out.strip().splitlines()[-1]))
    if failed:
        raise SystemExit(f"{label}: {len(failed)} of {len(procs)} processes failed (exit {failed[0]})")
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    total = sum(r["bytes"] for r in results)
    # Where the span went: the processes' own phases (median over processes, ms) and how far
    # apart they started and ended.
    split = {k: round(1000 * statistics.median(r[k] for r in results), 1)
             for k in PHASES if all(r.get(k) is not None for r in results)}
    split["start_skew"] = round(1000 * (max(r["start"] for r in results) - min(r["start"] for r in results)), 1)
    split["end_skew"] = round(1000 * (max(r["end"] for r in results) - min(r["end"] for r in results)), 1)
    split["span"] = round(1000 * span, 1)
    print(f"  {label}: {total / span / 1e9:.2f} GB/s, ms {split}", flush=True)
    return total / span / 1e9, node_threads, total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--fabric", default="http")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shard-mib", type=int, default=512)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--hipobj-bin")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out")
    ap.add_argument("--role", default="parent")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--daemon")
    ap.add_argument("--sync")
    ap.add_argument("--upload", action="store_true")
    ap.add_argument("--daemon-cpus", default="8-15")
    ap.add_argument("--max-in-flight", type=int, default=256)
    a = ap.parse_args()
    if a.role == "rank":
        return role_rank(a)
    if a.role == "one":
        return role_one(a)

    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION)
    if a.upload:
        from safetensors.torch import save_file

        cli = lambda *args: subprocess.run([a.hipobj_bin, *args, "--endpoint-url", a.endpoint], env=env, check=True,
                                           stdout=subprocess.DEVNULL)
        cli("mb", f"s3://{BUCKET}")
        weight_map = {}
        for r in range(a.shards):
            path = os.path.join(a.workdir, f"shard-{r}.safetensors")
            tensors = shard_tensors(r, a.shard_mib)
            weight_map.update({k: f"shard-{r}.safetensors" for k in tensors})
            save_file({k: v.contiguous() for k, v in tensors.items()}, path)
            cli("put", path, f"s3://{BUCKET}/shard-{r}.safetensors")
            os.remove(path)
        # The one-process scenario loads the prefix: an index names every shard.
        index = os.path.join(a.workdir, "model.safetensors.index.json")
        with open(index, "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        cli("put", index, f"s3://{BUCKET}/model.safetensors.index.json")
        print(f"uploaded {a.shards} shards of {a.shard_mib} MiB", flush=True)

    sock = os.path.join(a.workdir, f"hipobj-{a.fabric}.sock")
    daemon = subprocess.Popen(["taskset", "-c", a.daemon_cpus, a.hipobj_bin, "daemon", "--socket", sock,
                               "--endpoint-url", a.endpoint, "--fabric", a.fabric, "--gpu",
                               "--max-in-flight", str(a.max_in_flight)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = daemon.stdout.readline()
    if "listening" not in line:
        raise SystemExit(f"hipobj daemon did not start: {line} {daemon.stderr.read()}")
    print(line.strip(), flush=True)
    scenarios = [("one process, own engine", 1, None),
                 (f"{a.shards} processes, daemon", a.shards, sock),
                 (f"{a.shards} processes, own engines", a.shards, None)]
    # Rounds, not blocks: each round runs every scenario once, so drift of the machine over the
    # minutes of a run (the one-process rate moved by half between two runs a minute apart)
    # reaches every scenario alike, and each round gives its own ratios.
    runs = {label: {"gbps": [], "node_threads": []} for label, _, _ in scenarios}
    try:
        for i in range(a.runs):
            for label, procs, via in scenarios:
                row = runs[label]
                if "error" in row:
                    continue
                try:
                    gbps, nthreads, total = scenario(a, label, procs, via, daemon.pid if via else None)
                except SystemExit as e:  # a scenario that cannot finish is reported, not hidden
                    print(f"{a.fabric:<5} {label:<30} FAILED: {e}", flush=True)
                    row["error"] = str(e)
                    continue
                row["gbps"].append(gbps)
                row["node_threads"].append(nthreads)
                row["bytes"] = total
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    base = runs["one process, own engine"]["gbps"]
    rows = {}
    for label, row in runs.items():
        if "error" in row or not row["gbps"]:
            rows[label] = {"error": row.get("error", "no run")}
            continue
        rates = row["gbps"]
        ratios = [r / b for r, b in zip(rates, base)] if len(base) == len(rates) else []
        row.update(median_gbps=statistics.median(rates), ratios=ratios,
                   median_ratio=statistics.median(ratios) if ratios else None)
        rows[label] = row
        ratio = f"{row['median_ratio']:5.2f}x of one process (rounds {['%.2f' % r for r in ratios]})" \
            if ratios else "no ratio"
        print(f"{a.fabric:<5} {label:<30} {row['median_gbps']:6.2f} GB/s  runs {['%.2f' % r for r in rates]}"
              f"  {ratio}  threads (loader processes, daemon) {row['node_threads']}", flush=True)
    print("every tensor equal (torch.equal) in every run", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"fabric": a.fabric, "shards": a.shards, "shard_mib": a.shard_mib, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
