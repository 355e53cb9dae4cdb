"""Benchmark (not a test): the same crawl with plain Scrapy's scheduler and with scrapy-redis's.

    python -m benchmarks.bench_schedulers                       # 3,000 pages over 10 hosts, 3 rounds
    python -m benchmarks.bench_schedulers --pages 3000 --hosts 10 --rounds 3 --variants plain,redis,scale

Variants (all on the same testbed process, interleaved, the order rotated per round):

- ``plain``: Scrapy 2.x as shipped: its memory scheduler and dupefilter, no add-on;
- ``redis``: scrapy-redis (``scrapy_redis.scheduler.Scheduler`` + ``scrapy_redis.dupefilter.RFPDupeFilter``)
  on ``--redis-url``, with a queue and dupefilter key unique to each crawl, deleted after it;
- ``scale``: the scrapy-scale add-on on its embedded defaults (SQLite frontier and item store),
  for reference: it does more work per page (durable frontier, outcome classification, item store).

Prints the medians and their ratios to the first variant as a Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from benchmarks.harness import TestbedProcess, Variant, run_rounds, spread, table

PLAIN: dict[str, Any] = {"ADDONS": {}}  # the example project enables the add-on: off for a plain baseline


def redis_variant(redis_url: str) -> Variant:
    def settings(run_id: str) -> dict[str, Any]:
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

    def cleanup(run_id: str) -> None:
        import redis

        r = redis.Redis.from_url(redis_url)
        for key in r.scan_iter(match=f"bench:{run_id}:*"):
            r.delete(key)

    return Variant("scrapy-redis scheduler", settings, cleanup)


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
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = p.parse_args(argv)
    vs = variants([n.strip() for n in args.variants.split(",") if n.strip()], args.redis_url)
    cmd = "python -m benchmarks.bench_schedulers " + " ".join(sys.argv[1:] if argv is None else argv)
    t0 = time.monotonic()
    with TestbedProcess(args.hosts, args.pages) as tb:
        print(f"testbed: {tb.hosts} hosts x {tb.pages_per_host} pages (pid {tb.proc.pid if tb.proc else '?'})")
        results = run_rounds(vs, tb.pages, tb.hosts, args.rounds, testbed=tb)
    print()
    print(f"`{cmd.strip()}` ({args.rounds} rounds, {time.monotonic() - t0:.0f} s in all; "
          f"medians, ratios to {vs[0].name}):")
    print()
    print(table(results))
    print()
    print(spread(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
