"""Benchmark (not a test): where the Redis server's time per URL crawled goes, by script.

    python -m benchmarks.bench_fleet_scripts              # 1,000 sites x 20 pages, about 1 minute
    python -m benchmarks.bench_fleet_scripts --nice -10   # the server ahead of the machine's other work

``bench_fleet``'s crawl (``benchmarks/fleet_worker.py``: page i of a site links to pages
5i+1..5i+5 of it) made by **one** client, round after round with no pause, each round
as ``StoreSync.run`` makes it (``--pages`` pages' links and acks, the heartbeat, the fair
share, the lease, the counts; a lease as the scheduler asks one, back up to ``--batch``
once half of it is left), against a private Redis node (AOF ``everysec``). One
client, so each script call's server time is exact: ``INFO commandstats``'s evalsha
usec read before and after each call (a second connection; INFO is not counted in
evalsha). That is wall time inside the server: a loaded machine preempts the server
mid-script, which ``--nice`` below 0 makes rarer and the median shows less than the mean.
Per script: calls per URL, usec per call (mean and median) and usec per URL; and for the
whole run, the server CPU per URL as commandstats usec and as ``INFO cpu`` (the process's
user + system time, the INFO calls of the timing included).

Then (``--lease-sizes``, default 1,2,32,64) one client's ``store.lease`` of n records at a
time, timed in the client (server and client together, nothing else running against the
server) on a job of ``--sites`` sites seeded with 20 pages each: p50 and p99 of 200
leases per size. A lease's own cost, against which ``bench_fleet``'s lease latency under
many simulated workers (threads on this machine's cores beside the server) can be read.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_fleet import Node, delta, git_head  # noqa: E402
from benchmarks.fleet_report import pct, top_level_usec  # noqa: E402
from benchmarks.fleet_worker import Meter, learn, new_request, open_fleet_store, page_ops, parse_data  # noqa: E402
from scrapy_scale.frontier import settings as frontier_settings  # noqa: E402
from scrapy_scale.frontier.scheduling.known import KnownFingerprints  # noqa: E402


def evalsha_usec(node: Node) -> int:
    return int(node.r.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))


def crawl(
    url: str,
    node: Node | None,
    job: str,
    sites: int,
    pages: int,
    per_round: int,
    batch: int,
    known_capacity: int = frontier_settings.KNOWN.default,
) -> Any:
    """The whole job crawled by one client; returns the URLs acked and each script's
    calls' usec (name -> list; none timed when ``node`` is None)."""
    from scrapy_scale.frontier.scheduling.local import lease_wanted
    from scrapy_scale.frontier.scheduling.sync import StoreSync, SyncPlan

    store = open_fleet_store(url, job, None)
    store.begin_run()
    per: dict[str, list[float]] = {}

    def timed(call: Any) -> Any:
        def run(part: int, script: str, *args: Any) -> Any:
            assert node is not None
            u = evalsha_usec(node)
            try:
                return call(part, script, *args)
            finally:
                per.setdefault(script, []).append(float(evalsha_usec(node) - u))

        return run

    if node is not None:
        # the store's units call the scripts through its connection (one partition: one
        # call at a time, even through call_many)
        conn = store.conn  # type: ignore[attr-defined]
        conn.call_at = timed(conn.call_at)
        conn.call_at_bytes = timed(conn.call_at_bytes)
    sync = StoreSync(store, lease_seconds=60.0, error_deadline=600, floor=min(16, batch))
    sync.worker = "scripts/0"
    store.enqueue_new([new_request(s, 0) for s in range(sites)])
    held: list[Any] = []
    acked = 0
    known = KnownFingerprints(known_capacity)
    while True:
        ops: list[tuple[str, Any]] = []
        for x in held[:per_round]:
            site, page = parse_data(x.data)
            ops += page_ops(known, site, page, pages)
            ops.append(("ack", (x.fingerprint, x.token)))
        del held[:per_round]
        out = sync.run(SyncPlan(ops=ops, want=lease_wanted(len(held), batch, 0), held=len(held)))
        learn(known, ops, out)
        acked += out.acked
        held += [x for x in out.leased if not x.error]
        c = out.counts
        if not held and not (c["pending"] or c["delayed"] or c["leased"]):
            break
    store.close()
    if node is not None and not per:
        raise SystemExit("no script call was timed: the store no longer calls its scripts through conn.call_at")
    return acked, per


def add_job_args(p: argparse.ArgumentParser) -> None:
    """The options of the one client's crawl (also ``bench_fleet_replay``'s)."""
    p.add_argument("--sites", type=int, default=1000)
    p.add_argument("--pages-per-site", type=int, default=20)
    p.add_argument("--pages", type=int, default=6, help="pages written per round (bench_fleet's rounds: about 6)")
    p.add_argument("--batch", type=int, default=64, help="SCALE_FRONTIER_BATCH (default 64)")
    p.add_argument(
        "--known",
        type=int,
        default=frontier_settings.KNOWN.default,
        help="SCALE_FRONTIER_KNOWN (0: every link asks the store, as before the worker's cache)",
    )
    p.add_argument("--nice", type=int, default=0, help="nice value of the Redis server (below 0 needs the right)")


def crawl_job(url: str, node: Node | None, job: str, args: argparse.Namespace) -> Any:
    """:func:`crawl` with the options of :func:`add_job_args`."""
    return crawl(url, node, job, args.sites, args.pages_per_site, args.pages, args.batch, args.known)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_job_args(p)
    p.add_argument("--lease-sizes", default="1,2,32,64", help="records per lease of the lease timing ('' = none)")
    p.add_argument(
        "--untimed", action="store_true", help="no per-script timing (no INFO per call: for a profiler's run)"
    )
    args = p.parse_args(argv)
    from tests.support import services

    server = services.private_redis(Path(tempfile.mkdtemp(prefix="bench-fleet-scripts-")), appendonly=False)
    try:
        if args.nice and server.proc is not None:
            os.setpriority(os.PRIO_PROCESS, server.proc.pid, args.nice)
        node = Node(server.port)
        node.set_aof("everysec")
        load0, t = os.getloadavg()[0], time.monotonic()
        before = node.snapshot()
        url = f"redis://127.0.0.1:{server.port}/0"
        job = f"fleet-{uuid.uuid4().hex[:8]}"
        meter = Meter()
        meter.install()
        meter.on = True
        n, per = crawl_job(url, None if args.untimed else node, job, args)
        meter.on = False
        after = node.snapshot()
        sizes = [int(x) for x in args.lease_sizes.split(",") if x.strip()]
        lease_ms = lease_latency(url, args.sites, sizes)
    finally:
        server.kill()
    d = delta(before, after)
    print(
        f"`python -m benchmarks.bench_fleet_scripts {' '.join(sys.argv[1:] if argv is None else argv)}` at "
        f"{git_head()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.monotonic() - t:.0f} s, "
        f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; {n:,} URLs crawled\n"
    )
    print("| script | calls / URL | usec / call, mean | usec / call, median | usec / URL |")
    print("|---|---:|---:|---:|---:|")
    total = 0.0
    for name, xs in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        total += sum(xs) / n
        row = (name, len(xs) / n, sum(xs) / len(xs), statistics.median(xs), sum(xs) / n)
        print("| {} | {:.3f} | {:.1f} | {:.1f} | {:.1f} |".format(*row))
    print(f"| all scripts | | | | {total:.1f} |\n")
    # the commands the client sent (a script's usec includes the commands it runs; the
    # timing's INFO calls are left out with the server's own commands)
    usec = sum(u for _, u in top_level_usec(d, dict(meter.commands)).values())
    calls = sum(c for c, _ in d["cmd"].values())
    print(
        f"Whole run, per URL: {calls / n:.2f} commands run (incl. in scripts), server CPU {usec / n:.1f} us "
        f"(commandstats) and {1e6 * d['cpu'] / n:.1f} us (INFO cpu, the timing's INFO calls included)"
    )
    if lease_ms:
        print("\nOne client's leases of n records (client and server, 200 each):\n")
        print("| n | p50 ms | p99 ms | ms per record, p50 |")
        print("|---:|---:|---:|---:|")
        for size, xs in lease_ms.items():
            p50, p99 = pct(xs, 0.5), pct(xs, 0.99)
            print(f"| {size} | {p50:.2f} | {p99:.2f} | {p50 / size:.3f} |")
    return 0


def lease_latency(url: str, sites: int, sizes: list[int], each: int = 200) -> dict[int, list[float]]:
    """ms of each of ``each`` leases of n records by one client, for each n of ``sizes``
    (a fresh job of ``sites`` sites x 20 pages, enough for every lease)."""
    if not sizes:
        return {}
    store = open_fleet_store(url, f"fleet-lease-{uuid.uuid4().hex[:8]}", None)
    store.begin_run()
    pages = max(20, -(-sum(sizes) * each // sites))
    for i in range(0, pages, 10):
        store.enqueue_new([new_request(s, p, p) for p in range(i, min(pages, i + 10)) for s in range(sites)])
    out: dict[int, list[float]] = {}
    for size in sizes:
        xs = out.setdefault(size, [])
        for _ in range(each):
            t = time.perf_counter()
            got = store.lease(f"lease/{size}", size, 60.0)
            xs.append(1000 * (time.perf_counter() - t))
            if len(got) != size:
                raise SystemExit(f"a lease of {size} got {len(got)}: the job ran short")
    store.reset()
    store.close()
    return out


if __name__ == "__main__":
    raise SystemExit(main())
