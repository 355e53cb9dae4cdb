"""Benchmark (not a test): the fleet sized by measurement (issue 34, item 4).

    python -m benchmarks.bench_fleet                      # defaults below, about 3 minutes
    python -m benchmarks.bench_fleet --partitions 6       # S partitions of the job (once the store has them)

Simulated workers (``benchmarks/fleet_worker.py``: threads in a few processes, no Scrapy,
each doing the store rounds a crawl does) crawl a job of ``--sites`` sites x
``--pages-per-site`` pages, each page fanning out to 5 links of its site (most already
seen), against a private Redis node and a private Redis Cluster of 3 primaries with a
replica each, side by side in one run, to the job's end. Then lease latency on the node
with 8, 32 and 128 workers (``--sweep``), ``--sweep-seconds`` each, on a larger job, the
same load (``--sweep-load`` pages/s) split among them.
Both servers run with AOF ``appendfsync everysec`` (``--aof no`` for none), RDB off.

Per URL crawled (acked), from the servers' ``INFO`` before and after (the primaries
summed) and this run's clients:

- commands: what the clients sent (counted in the client), and what the server ran
  including the commands inside the Lua scripts (``INFO commandstats`` calls);
- round trips: packed sends of the clients (a pipeline is one);
- bytes in and out: ``total_net_input_bytes`` / ``total_net_output_bytes`` (less the
  replication stream to a replica, ``total_net_repl_output_bytes``);
- server CPU: ``INFO commandstats`` usec of the commands the clients sent (a script's
  usec includes the commands it runs; a command name the scripts also run is counted
  for the share of its calls that the clients sent), and ``INFO cpu`` (user + system,
  the whole server process: command execution plus reading and writing sockets);
- bytes in memory: ``MEMORY USAGE`` of each of the job's keys over the URLs (all done:
  what deduplication keeps), and of a second job of pending URLs seeded alone;
- server time by script: a short run with every command in the slow log;
- on the Cluster, each primary's share of the job's keys, memory and commands (as % of a
  third: 100% is a perfect balance), and the partitions it holds (partition 0 has the
  run-level keys: the run record, workers, heartbeats, seed feed);
- lease latency: ``store.lease`` timed in the worker, p50 and p99.

The goals are printed beside the figures, and the sizing table of docs/distributed.md
is computed from them (``--worker-pages``: what one Scrapy worker crawls per second,
for the worker count where the frontier becomes the bottleneck).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fleet_report  # noqa: E402
from benchmarks.fleet_worker import new_request, open_fleet_store, worker_process  # noqa: E402
from scrapy_scale.frontier import settings as frontier_settings  # noqa: E402

#: what the parent itself asks the servers (not the crawl's cost)
OWN_COMMANDS = ("info", "config", "cluster", "command", "dbsize", "memory")


# ---- servers -------------------------------------------------------------------------------


class Node:
    """One Redis server of a run (a node, or a Cluster primary), read with a plain client."""

    def __init__(self, port: int):
        import redis

        self.port = port
        self.r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)

    def snapshot(self) -> dict[str, Any]:
        info = self.r.info("all")
        stats = {k[len("cmdstat_") :]: v for k, v in info.items() if k.startswith("cmdstat_")}
        return {
            "cmd": {k: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()},
            "in": int(info["total_net_input_bytes"]),
            # replication to the replica is not the clients' traffic
            "out": int(info["total_net_output_bytes"]) - int(info.get("total_net_repl_output_bytes", 0)),
            "cpu": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
            "mem": int(info["used_memory"]),
        }

    def job_bytes(self, job: str) -> tuple[int, int]:
        """(keys, bytes) of ``job``'s keys on this server (``MEMORY USAGE`` of each: the key
        and its value; ``used_memory`` also moves with the replication and AOF buffers)."""
        n = size = 0
        for key in self.r.scan_iter(match=f"*{job}*", count=1000):
            n += 1
            size += int(self.r.memory_usage(key, samples=0) or 0)
        return n, size

    def partitions(self, job: str) -> list[str]:
        """The hash tags of ``job``'s partitions on this server (each has a ``run`` key; the
        tag ``job`` alone is partition 0, with the run-level keys)."""
        keys = self.r.scan_iter(match=f"scale:{{{job}*:run", count=1000)
        return [k.decode().split("{", 1)[1].split("}", 1)[0] for k in keys]

    def set_aof(self, mode: str) -> None:
        if mode != "no":
            self.r.config_set("appendfsync", mode)
            self.r.config_set("appendonly", "yes")


@contextmanager
def servers(workdir: Path, aof: str, nice: int = 0) -> Iterator[dict[str, tuple[str, list[int]]]]:
    """A private node and a private Cluster (3 primaries + 3 replicas): name -> (URL, primaries).
    ``nice``: the servers' scheduling priority (below 0: ahead of the machine's other work, as
    a Redis host of its own would be)."""
    from tests.support import services

    with ExitStack() as stack:
        node = services.private_redis(workdir / "node", appendonly=False)
        stack.callback(node.kill)
        cluster = services.private_cluster(workdir / "cluster", appendonly=False)
        stack.callback(cluster.stop)
        for port in [node.port] + [n.port for n in cluster.nodes]:
            Node(port).set_aof(aof)
        for proc in [node.proc] + [n.proc for n in cluster.nodes]:
            if nice and proc is not None:
                os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        yield {
            "one node": (f"redis://127.0.0.1:{node.port}/0", [node.port]),
            "Cluster, 3 primaries": (cluster.url, sorted(cluster.primaries())),
        }


# ---- one run -------------------------------------------------------------------------------


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    cmd = {}
    for k, (calls, usec) in after["cmd"].items():
        c0, u0 = before["cmd"].get(k, (0, 0))
        if calls - c0 and k.split("|")[0] not in OWN_COMMANDS:
            cmd[k] = (calls - c0, usec - u0)
    out = {k: after[k] - before[k] for k in ("in", "out", "cpu", "mem")}
    out["cmd"] = cmd
    return out


def run_fleet(
    url: str,
    ports: list[int],
    workers: int,
    args: argparse.Namespace,
    pages: int,
    seconds: float | None,
    log: Any,
    rate: float | None = None,
) -> dict[str, Any]:
    """``workers`` simulated workers (``rate`` pages/s each, default ``--rate``) on a fresh
    job until it ends (``seconds`` None) or for ``seconds``; what the servers and clients
    measured."""
    rate = args.rate if rate is None else rate
    job = f"fleet-{uuid.uuid4().hex[:8]}"
    nodes = [Node(p) for p in ports]
    store = open_fleet_store(url, job, args.partitions)
    store.begin_run()
    parts = int(getattr(store, "parts", 1))  # S: the partitions the store split the job into
    procs = min(workers, args.procs)
    ctx = multiprocessing.get_context("fork")
    pipes, children = [], []
    for i in range(procs):
        names = [f"fleet/{i}/{j}" for j in range(workers) if j % procs == i]
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(
            target=worker_process,
            args=(child_end, url, job, args.partitions, names, pages, rate, args.batch, args.known),
            daemon=True,
        )
        p.start()
        pipes.append(parent_end)
        children.append(p)
    for c in pipes:
        if not c.poll(180):
            raise SystemExit("a worker process did not start")
        c.recv()
    before = [n.snapshot() for n in nodes]
    t0 = time.perf_counter()
    for c in pipes:
        c.send("go")
    seeds = [new_request(s, 0) for s in range(args.sites)]
    store.enqueue_new(seeds)  # as `scrapy scale seed` writes them: in the measured window
    for c in pipes:
        with suppress(BrokenPipeError):
            c.send("seeded")
    if seconds is not None:
        time.sleep(max(0.0, seconds - (time.perf_counter() - t0)))
        for c in pipes:
            with suppress(BrokenPipeError):  # its workers ended (or failed: said below)
                c.send("stop")
    got = []
    for c in pipes:
        if not c.poll(args.timeout):
            raise SystemExit(f"workers did not end within {args.timeout} s")
        got.append(c.recv())
    wall = time.perf_counter() - t0
    after = [n.snapshot() for n in nodes]
    for p in children:
        p.join(30)
    results = [r for g in got for r in g["results"]]
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"{len(errors)} worker(s) failed: {errors[0]}")
    commands: Counter[str] = Counter()
    for g in got:
        commands.update(g["commands"])
    counts = store.counts()
    store.close()
    crawled = sum(r.crawled for r in results)
    if seconds is None and (crawled != args.sites * pages or counts["done"] != args.sites * pages):
        raise SystemExit(f"the job did not end with every page crawled once: {crawled} acks, {counts}")
    out = {
        "url": url,
        "job": job,
        "workers": workers,
        "partitions": parts,
        "rate": rate,
        "processes": procs,
        "pages_per_site": pages,
        "seconds": wall,
        "crawled": crawled,
        "counts": counts,
        "rounds": sum(r.rounds for r in results),
        "round_trips": sum(g["round_trips"] for g in got),
        "client_commands": dict(commands),
        "lease_ms": [x for r in results for x in r.lease_ms],
        "round_ms": [x for r in results for x in r.round_ms],
        "nodes": [delta(b, a) for b, a in zip(before, after, strict=True)],
    }
    for node, d in zip(nodes, out["nodes"], strict=True):  # the whole job's (not for a timed run's)
        d["keys"], d["job_B"] = node.job_bytes(job) if seconds is None else (0, 0)
        d["partitions"] = node.partitions(job)
    log(f"{len(ports)} primar{'y' if len(ports) == 1 else 'ies'}, {workers} workers: {crawled} URLs in {wall:.1f} s")
    return out


def breakdown(url: str, port: int, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    """Server time per script: a short run of ``--workers`` workers on the node with every
    command in the slow log (``slowlog-log-slower-than 0``: each command's duration; a
    script's includes the commands it runs), by script name."""
    import hashlib

    from scrapy_scale.frontier.backends.redis import lua

    names = {hashlib.sha1(lua.script(k).encode()).hexdigest(): k for k in lua.SCRIPTS}
    node = Node(port)
    old = node.r.config_get("slowlog-*")
    node.r.config_set("slowlog-max-len", 1_000_000)
    node.r.config_set("slowlog-log-slower-than", 0)
    node.r.slowlog_reset()
    try:
        run = run_fleet(url, [port], args.workers, args, max(args.pages_per_site, 100), args.sweep_seconds, log)
        entries = node.r.slowlog_get(1_000_000)
    finally:
        node.r.config_set("slowlog-log-slower-than", str(old["slowlog-log-slower-than"]))
        node.r.config_set("slowlog-max-len", str(old["slowlog-max-len"]))
        node.r.slowlog_reset()
    per: dict[str, list[float]] = {}
    for e in entries:  # the slow log also has the commands run inside scripts: scripts only here
        words = (e["command"].decode(errors="replace") if isinstance(e["command"], bytes) else e["command"]).split()
        if len(words) > 1 and words[0].lower() == "evalsha":
            per.setdefault(names.get(words[1], "?"), []).append(float(e["duration"]))
    return {"crawled": run["crawled"], "lease_ms": run["lease_ms"], "scripts": per}


def pending_bytes(url: str, port: int, n: int, args: argparse.Namespace, listpack_value: int | None = None) -> float:
    """Bytes per pending URL: ``n`` links of the job's kind seeded alone into a fresh job
    (with ``hash-max-listpack-value`` set to ``listpack_value`` for it, when given)."""
    node = Node(port)
    old = node.r.config_get("hash-max-listpack-value")["hash-max-listpack-value"]
    if listpack_value is not None:
        node.r.config_set("hash-max-listpack-value", listpack_value)
    job = f"fleet-pending-{uuid.uuid4().hex[:8]}"
    store = open_fleet_store(url, job, args.partitions)
    store.begin_run()
    per = -(-n // args.sites)
    for i in range(0, per, 10):
        store.enqueue_new([new_request(s, p, p) for p in range(i, min(per, i + 10)) for s in range(args.sites)])
    got = store.counts()["pending"]
    used = node.job_bytes(job)[1]
    store.reset()
    store.close()
    node.r.config_set("hash-max-listpack-value", str(old))
    return used / got


def git_head() -> str:
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return p.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sites", type=int, default=1000, help="sites of the job (default 1,000)")
    p.add_argument("--pages-per-site", type=int, default=20, help="pages per site, side-by-side run (default 20)")
    p.add_argument("--workers", type=int, default=32, help="simulated workers, side-by-side run (default 32)")
    p.add_argument("--sweep", default="8,32,128", help="worker counts of the latency sweep on the node")
    p.add_argument("--sweep-seconds", type=float, default=15.0)
    p.add_argument(
        "--sweep-load",
        type=float,
        default=800.0,
        help="pages/s of all the sweep's workers together, split among them (default 800: what this "
        "machine's Python clients offer beside the server; more and the clients, not Redis, set the latency)",
    )
    p.add_argument("--rate", type=float, default=25.0, help="pages/s each simulated worker crawls (default 25)")
    p.add_argument("--batch", type=int, default=64, help="SCALE_FRONTIER_BATCH of the workers (default 64)")
    p.add_argument(
        "--known",
        type=int,
        default=frontier_settings.KNOWN.default,
        help="SCALE_FRONTIER_KNOWN of the workers (0: every link asks the store)",
    )
    p.add_argument("--procs", type=int, default=8, help="processes the worker threads are spread over (default 8)")
    p.add_argument("--partitions", type=int, default=None, help="S: SCALE_FRONTIER_PARTITIONS (default: the store's)")
    p.add_argument("--aof", default="everysec", choices=("everysec", "always", "no"))
    p.add_argument(
        "--server-nice",
        type=int,
        default=0,
        help="nice value of the Redis servers (e.g. -10 on a loaded machine: the servers then get a core when "
        "they need one, as on a Redis host of their own; needs the right to raise a priority)",
    )
    p.add_argument("--worker-pages", type=float, default=350.0, help="pages/s of one real worker, for the sizing")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", dest="json_path", help="also write every figure to this file")
    args = p.parse_args(argv)
    cmd = "python -m benchmarks.bench_fleet " + " ".join(sys.argv[1:] if argv is None else argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    side: dict[str, dict[str, Any]] = {}
    sweep: dict[int, dict[str, Any]] = {}
    t = time.monotonic()
    load0 = os.getloadavg()[0]
    with servers(Path(tempfile.mkdtemp(prefix="bench-fleet-")), args.aof, args.server_nice) as found:
        for name, (url, ports) in found.items():
            side[name] = run_fleet(url, ports, args.workers, args, args.pages_per_site, None, log)
        url, ports = found["one node"]
        pending_b = {v: pending_bytes(url, ports[0], 20_000, args, v) for v in (None, 256)}
        scripts = breakdown(url, ports[0], args, log)
        big = max(args.pages_per_site, 100)
        for n in (int(x) for x in args.sweep.split(",") if x.strip()):
            sweep[n] = run_fleet(url, ports, n, args, big, args.sweep_seconds, log, args.sweep_load / n)
    head = (
        f"`{cmd.strip()}` at {git_head()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{time.monotonic() - t:.0f} s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(fleet_report.report(head, side, sweep, pending_b, scripts, args))
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps(
                {"side": side, "sweep": sweep, "pending_B": pending_b, "scripts": scripts, "args": vars(args)},
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
