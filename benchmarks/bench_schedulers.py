"""Benchmark (not a test): the same crawl with plain Scrapy's scheduler and with scrapy-redis's.

    python -m benchmarks.bench_schedulers                       # 3,000 pages over 10 hosts, 3 rounds
    python -m benchmarks.bench_schedulers --pages 3000 --hosts 10 --rounds 3 --variants plain,redis,scale

Variants (all on the same testbed process, interleaved, the order rotated per round):

- ``plain``: Scrapy 2.x as shipped: its memory scheduler and dupefilter, no add-on;
- ``redis``: scrapy-redis (``scrapy_redis.scheduler.Scheduler`` + ``scrapy_redis.dupefilter.RFPDupeFilter``)
  on ``--redis-url`` (or, with ``--private-redis``, a server of its own whose CPU is then
  counted too), with a queue and dupefilter key unique to each crawl, deleted after it;
- ``scale``: the scrapy-scale add-on on its embedded defaults (SQLite frontier and item store),
  for reference: it does more work per page (durable frontier, outcome classification, item store).

Prints the medians and the ratios to the first variant (median of per-round ratios) as a
Markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from benchmarks.harness import TestbedProcess, Variant, run_rounds, spread, table

PLAIN: dict[str, Any] = {"ADDONS": {}}  # the example project enables the add-on: off for a plain baseline


def redis_cpu(redis_url: str) -> float:
    """CPU seconds the Redis server has used so far (user + system, main and children)."""
    import redis

    info = redis.Redis.from_url(redis_url).info("cpu")
    return float(sum(v for k, v in info.items() if k.startswith("used_cpu_") and "main_thread" not in k))


def redis_variant(redis_url: str) -> Variant:
    cpu_before: dict[str, float] = {}

    def settings(run_id: str) -> dict[str, Any]:
        cpu_before[run_id] = redis_cpu(redis_url)
        return {
            "ADDONS": {},
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "REDIS_URL": redis_url,
            "SCHEDULER_QUEUE_KEY": f"bench:{run_id}:requests",
            "SCHEDULER_DUPEFILTER_KEY": f"bench:{run_id}:dupefilter",
            "SCHEDULER_FLUSH_ON_START": True,
            "SCHEDULER_PERSIST": False,
        }

    def cleanup(run_id: str) -> dict[str, float]:
        import redis

        used = redis_cpu(redis_url) - cpu_before.pop(run_id)
        r = redis.Redis.from_url(redis_url)
        for key in r.scan_iter(match=f"bench:{run_id}:*"):
            r.delete(key)
        return {"redis_cpu": used}

    return Variant("scrapy-redis scheduler", settings, cleanup)


@contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a free port (configured like the machine's: nothing on disk)."""
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("--private-redis needs redis-server (apt-get install redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise SystemExit("the private redis-server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def variants(names: list[str], redis_url: str) -> list[Variant]:
    known = {
        "plain": lambda: Variant("plain Scrapy", PLAIN),
        "redis": lambda: redis_variant(redis_url),
        "scale": lambda: Variant("scrapy-scale add-on", {}),
    }
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(known)}")
    return [known[n]() for n in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", type=int, default=3000, help="detail pages in all (default 3000)")
    p.add_argument("--hosts", type=int, default=10, help="testbed hosts (default 10)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default="plain,redis", help="comma-separated: plain, redis, scale")
    p.add_argument(
        "--per-page",
        type=int,
        default=20,
        help="detail links per listing page (default 20; 1000 makes the queue hold many requests)",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument(
        "--private-redis",
        action="store_true",
        help="start a Redis server of this run's own (no persistence) instead of --redis-url, "
        "so its CPU can be counted with the crawl's",
    )
    args = p.parse_args(argv)
    cmd = "python -m benchmarks.bench_schedulers " + " ".join(sys.argv[1:] if argv is None else argv)
    with ExitStack() as stack:
        redis_url = args.redis_url
        if args.private_redis:
            redis_url = stack.enter_context(private_redis())
        vs = variants([n.strip() for n in args.variants.split(",") if n.strip()], redis_url)
        t0 = time.monotonic()
        load0 = os.getloadavg()[0]
        tb = stack.enter_context(TestbedProcess(args.hosts, args.pages, per_page=args.per_page))
        print(f"testbed: {tb.hosts} hosts x {tb.pages_per_host} pages, {tb.per_page} per listing page")
        results = run_rounds(vs, tb.pages, tb.hosts, args.rounds, testbed=tb)
    extra = []
    if args.private_redis:  # the queue's work is done partly by the Redis server: count it too
        for ms in results.values():
            for m in ms:
                m.extra["cpu_all_per_1k"] = 1000 * (m.cpu + m.extra.get("redis_cpu", 0.0)) / m.pages
        extra.append(("CPU s / 1k pages incl. Redis server", "cpu_all_per_1k", "{:.2f}"))
    print()
    print(
        f"`{cmd.strip()}` ({args.rounds} rounds, {time.monotonic() - t0:.0f} s in all, load average "
        f"{load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end; medians, and ratios to "
        f"{vs[0].name} as the median of the per-round ratios):"
    )
    print()
    print(table(results, extra=extra))
    print()
    print(spread(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
