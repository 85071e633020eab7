#!/usr/bin/env python3
"""Slowloris flood benchmark (issue 33 item 5): N slow clients that send half a request head,
then one byte every --trickle seconds, and reconnect as soon as the gateway drops them, while
`hipobj ls` runs --calls times. Prints failures and the ls latency (p50/p99) unloaded and under
the flood.

    hipobj serve --listen 127.0.0.1:9000 --root /tmp/r --max-connections 256 &
    hipobj mb s3://flood --endpoint-url http://127.0.0.1:9000
    benches/scripts/slow-flood.py --endpoint 127.0.0.1:9000 --clients 1000 --calls 200

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY as for hipobj itself.
"""
import argparse
import asyncio
import os
import statistics
import subprocess
import threading
import time


async def slow_client(host, port, trickle, stop, counts):
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        counts["connects"] += 1
        try:
            writer.write(b"GET /flood HTTP/1.1\r\nx-slow: ")
            await writer.drain()
            while not stop.is_set():
                try:
                    data = await asyncio.wait_for(reader.read(512), trickle)
                    if data or reader.at_eof():
                        break  # answered (503/408) or closed: reconnect at once
                except asyncio.TimeoutError:
                    pass
                writer.write(b"a")
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


def flood(host, port, clients, trickle, stop, counts, started):
    async def main():
        tasks = [
            asyncio.create_task(slow_client(host, port, trickle, stop, counts))
            for _ in range(clients)
        ]
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def ls_calls(hipobj, endpoint, bucket, calls):
    lat, failures = [], []
    for _ in range(calls):
        t = time.monotonic()
        out = subprocess.run(
            [hipobj, "ls", f"s3://{bucket}", "--endpoint-url", f"http://{endpoint}"],
            capture_output=True,
            text=True,
        )
        lat.append(time.monotonic() - t)
        if out.returncode != 0:
            failures.append(out.stderr.strip().splitlines()[-1:])
    return lat, failures


def report(name, lat, failures):
    lat = sorted(lat)
    p99 = lat[min(len(lat) - 1, len(lat) * 99 // 100)]
    print(
        f"{name}: {len(failures)}/{len(lat)} failed, p50 {statistics.median(lat) * 1e3:.1f} ms,"
        f" p99 {p99 * 1e3:.1f} ms" + (f", e.g. {failures[0]}" if failures else "")
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", default="127.0.0.1:9000")
    p.add_argument("--bucket", default="flood")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--trickle", type=float, default=2.0)
    p.add_argument("--hipobj", default=os.environ.get("HIPOBJ", "hipobj"))
    a = p.parse_args()
    host, port = a.endpoint.rsplit(":", 1)
    report("unloaded", *ls_calls(a.hipobj, a.endpoint, a.bucket, a.calls))
    stop, started, counts = threading.Event(), threading.Event(), {"connects": 0}
    th = threading.Thread(
        target=flood, args=(host, int(port), a.clients, a.trickle, stop, counts, started)
    )
    th.start()
    started.wait()
    time.sleep(2)
    try:
        lat, failures = ls_calls(a.hipobj, a.endpoint, a.bucket, a.calls)
    finally:
        stop.set()
        th.join()
    report(f"{a.clients} reconnecting slow clients ({counts['connects']} connections)", lat, failures)


if __name__ == "__main__":
    main()
