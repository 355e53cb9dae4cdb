"""Measure a running testbed's throughput: ``python -m scrapy_scale.testbed.loadgen STATE_FILE``.

Opens ``--conns`` keep-alive connections spread over the testbed's hosts, sends
``--requests`` sequential requests on each (detail and listing pages), and prints
requests/s plus the CPU seconds the testbed process spent (read from /proc via the
pid in the state file), i.e. how many requests one core of the testbed serves per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _worker(ip: str, port: int, host: str, n: int, offset: int, done: list[int]) -> None:
    reader, writer = await asyncio.open_connection(ip, port)
    for i in range(n):
        k = (offset + i) % 1000
        path = f"/list/{k % 50 + 1}" if k % 20 == 0 else f"/item/{k + 1}"
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: */*\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        done[0] += 1
    writer.close()


async def run(state: dict[str, Any], conns: int, requests: int) -> dict[str, float]:
    hosts = state["hosts"]
    done = [0]
    cpu0 = cpu_seconds(state["pid"])
    t0 = time.perf_counter()
    await asyncio.gather(
        *(
            _worker(
                state["addresses"][hosts[c % len(hosts)]], state["port"], hosts[c % len(hosts)], requests, c * 37, done
            )
            for c in range(conns)
        )
    )
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(state["pid"]) - cpu0
    return {
        "requests": done[0],
        "wall_s": wall,
        "req_per_s": done[0] / wall,
        "server_cpu_s": cpu,
        "req_per_cpu_s": done[0] / cpu if cpu else float("inf"),
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m scrapy_scale.testbed.loadgen", description=__doc__)
    p.add_argument("state_file")
    p.add_argument("--conns", type=int, default=20)
    p.add_argument("--requests", type=int, default=500, help="per connection")
    a = p.parse_args()
    with open(a.state_file) as f:
        state = json.load(f)
    r = asyncio.run(run(state, a.conns, a.requests))
    print(
        f"{r['requests']} requests in {r['wall_s']:.2f}s = {r['req_per_s']:.0f} req/s; testbed CPU "
        f"{r['server_cpu_s']:.2f}s = {r['req_per_cpu_s']:.0f} requests per CPU second"
    )


if __name__ == "__main__":
    main()
