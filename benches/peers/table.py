#!/usr/bin/env python3
"""Result plumbing for benches/side_by_side.sh (stdlib only).

  table.py record RAW_JSONL CLIENT SIZE OPS CONC RUN SERVER_CPU_S LOAD1 STDOUT_FILE [ERROR]
      Pull the last JSON object line out of a client's stdout, normalise its
      field names (hipobj's are not fixed yet: see FIELD_ALIASES), add the
      harness's own fields and append one line to RAW_JSONL. With ERROR (or
      no JSON found) append an error line instead, so the table still has a row.

  table.py render RAW_JSONL MACHINE_JSON
      Print the markdown report: machine facts, one table per size, ratios of
      hipobj to each peer against the issue-3 goals.
"""

import json
import math
import sys

# Canonical field -> names accepted from a client's JSON, first match wins.
# hipobj's `bench --json` is expected to print ops_per_s, gb_per_s, p50_us,
# p99_us, p999_us and cpu_s (docs/benchmarks-side-by-side.md); the aliases
# only make the table robust while that output settles.
FIELD_ALIASES = {
    "ops_per_s": ["ops_per_s", "ops_s", "iops", "ops_per_sec", "throughput_ops"],
    "gb_per_s": ["gb_per_s", "gbps", "gb_s", "throughput_gb_s", "gbytes_per_s"],
    "p50_us": ["p50_us", "latency_p50_us", "p50"],
    "p99_us": ["p99_us", "latency_p99_us", "p99"],
    "p999_us": ["p999_us", "latency_p999_us", "p999"],
    "seconds": ["seconds", "elapsed_s", "wall_s", "secs", "duration_s"],
    "cpu_s": ["cpu_s", "cpu_seconds", "client_cpu_s"],
    "cpu_user_s": ["cpu_user_s", "user_s"],
    "cpu_sys_s": ["cpu_sys_s", "sys_s", "system_s"],
    "cpu_s_per_op": ["cpu_s_per_op"],
    "cpu_s_per_gb": ["cpu_s_per_gb"],
    "ops": ["ops", "count", "n_ops"],
    "size": ["size", "range_size", "bytes_per_op"],
    "warmup_ops": ["warmup_ops", "warmup"],
    "errors": ["errors", "error_count"],
}


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def normalise(raw, client, size, ops, conc):
    """Map a client's JSON onto canonical fields and derive what is missing."""
    out = {}
    for canon, names in FIELD_ALIASES.items():
        for n in names:
            if n in raw and num(raw[n]) is not None:
                out[canon] = num(raw[n])
                break
    out["client"] = client
    out.setdefault("size", float(size))
    out.setdefault("ops", float(ops))
    out["concurrency"] = int(raw.get("concurrency", conc))
    s, o, sz = out.get("seconds"), out["ops"], out["size"]
    if "ops_per_s" not in out and s:
        out["ops_per_s"] = o / s
    if "gb_per_s" not in out and "ops_per_s" in out:
        out["gb_per_s"] = out["ops_per_s"] * sz / 1e9
    if "cpu_s" not in out and "cpu_user_s" in out and "cpu_sys_s" in out:
        out["cpu_s"] = out["cpu_user_s"] + out["cpu_sys_s"]
    if "cpu_s_per_op" not in out and num(raw.get("cpu_us_per_op")) is not None:
        out["cpu_s_per_op"] = num(raw["cpu_us_per_op"]) / 1e6
    if "cpu_s_per_op" not in out and "cpu_s" in out and o:
        out["cpu_s_per_op"] = out["cpu_s"] / o
    if "cpu_s_per_gb" not in out and "cpu_s_per_op" in out and sz:
        out["cpu_s_per_gb"] = out["cpu_s_per_op"] / (sz / 1e9)
    out["raw"] = raw
    return out


def record(argv):
    path, client, size, ops, conc, run, server_cpu, load1, stdout_file = argv[:9]
    error = argv[9] if len(argv) > 9 else ""
    line = None
    if not error:
        try:
            with open(stdout_file, encoding="utf-8", errors="replace") as f:
                for ln in f:
                    ln = ln.strip()
                    if ln.startswith("{"):
                        try:
                            line = json.loads(ln)
                        except json.JSONDecodeError:
                            pass
        except OSError as e:
            error = f"cannot read output: {e}"
        if line is None and not error:
            error = "no JSON line in output"
    if error:
        rec = {"client": client, "size": float(size), "ops": float(ops),
               "concurrency": int(conc), "error": error}
    else:
        rec = normalise(line, client, size, ops, conc)
    rec["run"] = int(run)
    rec["server_cpu_s"] = num(server_cpu)
    rec["load1"] = num(load1)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    if error:
        print(f"    {client}: {error}", file=sys.stderr)
    else:
        print(f"    {client}: {rec.get('ops_per_s', 0):.0f} ops/s, "
              f"{rec.get('gb_per_s', 0):.3f} GB/s, p50 {rec.get('p50_us', 0):.0f} us",
              file=sys.stderr)


def human_size(b):
    b = int(b)
    for unit, f in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f and b % f == 0:
            return f"{b // f} {unit}"
    return f"{b} B"


def fmt(v, digits=0, scale=1.0):
    if v is None:
        return "–"
    return f"{v * scale:,.{digits}f}"


CLIENT_ORDER = ["hipobj", "hipobj-http", "hipobj-soft", "hipobj-verbs", "aws-sdk-s3", "object_store", "boto3"]
PEER_ORDER = ["aws-sdk-s3", "object_store", "boto3"]


def pick(runs):
    """Median run by ops/s (odd count) or lower median; plus the ops/s spread."""
    ok = sorted((r for r in runs if "error" not in r), key=lambda r: r.get("ops_per_s", 0))
    if not ok:
        return None, None
    med = ok[(len(ok) - 1) // 2]
    spread = None
    if len(ok) > 1:
        spread = (ok[0].get("ops_per_s"), ok[-1].get("ops_per_s"))
    return med, spread


def render(argv):
    raw_path, machine_path = argv[:2]
    with open(raw_path, encoding="utf-8") as f:
        recs = [json.loads(l) for l in f if l.strip()]
    with open(machine_path, encoding="utf-8") as f:
        m = json.load(f)

    out = []
    p = out.append
    p(f"Measured {m.get('date', '?')} on `{m.get('host', '?')}` — "
      f"{m.get('nproc', '?')} CPUs ({m.get('cpu_model', '?')}), {m.get('uname', '?')}.")
    p("")
    p(f"Command: `{m.get('command', '?')}`")
    p("")
    p(f"- Server: {m.get('server', '?')} on loopback, TCP_NODELAY shim active: "
      f"**{m.get('nodelay_shim_active', '?')}**; object {human_size(m.get('object_size', 0))} "
      f"of random bytes; concurrency {m.get('concurrency', '?')}; {m.get('repeat', 1)} run(s) per cell "
      f"(median by ops/s shown{', spread = min–max ops/s' if int(m.get('repeat', 1)) > 1 else ''}).")
    p(f"- Clients: {m.get('versions', '?')}.")
    if m.get("server_cpus") or m.get("client_cpus"):
        p(f"- Cores (taskset): server {m.get('server_cpus', 'any')}, clients {m.get('client_cpus', 'any')}.")
    p(f"- Load average (1/5/15 min) before: {m.get('load_before', '?')}; after: "
      f"{m.get('load_after', '?')}. Busiest other processes at start: {m.get('top_before', '?')}.")
    p("- Client CPU = getrusage(RUSAGE_SELF) user+sys over the timed phase only "
      "(after an untimed warm-up of one op per in-flight slot). Server CPU = the server's "
      "utime+stime from /proc over the whole client run, divided by timed + warm-up ops. GB = 10^9 bytes. Latency = issue → "
      "last body byte, nearest-rank percentiles.")
    p("")

    sizes = sorted({r["size"] for r in recs})
    best = {}
    for size in sizes:
        here = [r for r in recs if r["size"] == size]
        clients = sorted({r["client"] for r in here},
                         key=lambda c: CLIENT_ORDER.index(c) if c in CLIENT_ORDER else 99)
        p(f"### {human_size(size)} range-gets")
        p("")
        p("| client | ops | ops/s | GB/s | client CPU µs/op | client CPU s/GB | p50 µs | p99 µs "
          "| server CPU µs/op | load1 | ops/s spread |")
        p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for c in clients:
            runs = [r for r in here if r["client"] == c]
            med, spread = pick(runs)
            if med is None:
                err = runs[-1].get("error", "failed")
                p(f"| {c} | {err} |  |  |  |  |  |  |  |  |  |")
                continue
            best[(c, size)] = med
            if med.get("errors"):
                c = f"{c} ({med['errors']:.0f} failed ops)"
            ops = med.get("ops") or 0
            srv = med.get("server_cpu_s")
            # The server is measured over the whole client process: count the
            # client's untimed warm-up ops too (same size as the timed ones).
            served = ops + (med.get("warmup_ops") or 0)
            srv_op = srv / served if srv is not None and served else None
            sp = f"{spread[0]:,.0f}–{spread[1]:,.0f}" if spread else "–"
            p(f"| {c} | {ops:,.0f} | {fmt(med.get('ops_per_s'))} | {fmt(med.get('gb_per_s'), 3)} "
              f"| {fmt(med.get('cpu_s_per_op'), 1, 1e6)} | {fmt(med.get('cpu_s_per_gb'), 2)} "
              f"| {fmt(med.get('p50_us'))} | {fmt(med.get('p99_us'))} | {fmt(srv_op, 1, 1e6)} "
              f"| {fmt(med.get('load1'), 2)} | {sp} |")
        p("")

    p("### Ratios: hipobj ÷ peer")
    p("")
    peers = [c for c in PEER_ORDER if any(k[0] == c for k in best)]
    ours = [c for c in CLIENT_ORDER if c.startswith("hipobj") and any(k[0] == c for k in best)]
    p("| metric | hipobj row | " + " | ".join(peers) + " |")
    p("|---|---|" + "--:|" * len(peers))

    def ratio(h_name, metric, size, invert=False):
        cells = []
        h = best.get((h_name, size))
        for c in peers:
            q = best.get((c, size))
            if h is None or q is None:
                cells.append("n/a")
                continue
            a, b = h.get(metric), q.get(metric)
            if not a or not b:
                cells.append("n/a")
                continue
            cells.append(f"{(b / a) if invert else (a / b):.2f}×")
        return cells

    for size in sizes:
        for h in ours:
            p(f"| {human_size(size)} GB/s (higher is better) | {h} | "
              + " | ".join(ratio(h, "gb_per_s", size)) + " |")
            p(f"| {human_size(size)} client CPU per byte, peer ÷ hipobj (higher is better) | {h} | "
              + " | ".join(ratio(h, "cpu_s_per_gb", size, invert=True)) + " |")
            p(f"| {human_size(size)} p50 latency, hipobj ÷ peer (lower is better) | {h} | "
              + " | ".join(ratio(h, "p50_us", size)) + " |")
    if not ours:
        p("")
        p("n/a: no hipobj row in this run (`hipobj bench` not available yet), so no ratio.")
    p("")
    print("\n".join(out))


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("record", "render"):
        sys.exit(__doc__)
    {"record": record, "render": render}[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
