"""Benchmark (not a test): the whole suite and each component against what a user would
use instead, side by side in one run of interleaved rounds.

    python -m benchmarks.bench_suite                               # 4 hosts x 1,500 pages, 3 rounds
    python -m benchmarks.bench_suite --hosts 4 --pages 6000 --rounds 3 --variants plain,addon
    python -m benchmarks.bench_suite --profile addon               # py-spy flame summary of one crawl
    python -m benchmarks.bench_suite --gc-meter ...                # and the garbage collector's CPU

Every variant crawls the same testbed process (its CPU is not counted), with
``CONCURRENT_REQUESTS=32``, 8 per domain and robots.txt off, so only the components differ:

- ``plain``: plain Scrapy with a JSON-lines feed (``-o items.jsonl``): the baseline;
- ``plain-gc`` (not in the default list): ``plain`` with the add-on's garbage-collector tuning
  alone (``scrapy_scale.gc_tuning.GCTuning``), to show how much of the add-on's gain a plain
  Scrapy project gets from that one extension;
- ``plain-items`` (not in the default list): ``plain`` with the add-on's ``CONCURRENT_ITEMS = 16``
  alone (Scrapy's 100 starts 100 tasks for every response), to show how much of the add-on's
  gain a plain Scrapy project gets from that one setting;
- ``autothrottle``: ``plain`` with AutoThrottle at the throttle's own rule (target concurrency 1,
  start delay 0.25 s): the polite baseline the add-on's per-site pacing replaces;
- ``outcomes``: ``plain`` with the outcome middlewares instead of Scrapy's RetryMiddleware;
- ``frontier``: ``plain`` with the SQLite frontier instead of Scrapy's memory scheduler;
- ``store``: plain Scrapy with the SQLite item store instead of the feed;
- ``store-gc`` (not in the default list): ``store`` with the garbage-collector tuning, as
  README's "components alone" suggests;
- ``addon``: the add-on on its embedded defaults (SQLite frontier + SQLite store, throttle on);
- ``addon-unpaced``: ``addon`` with ``SCALE_THROTTLE_ENABLED = False``,
  to tell the per-site pacing's cost in pages/s from the CPU the components cost;
- ``frontier-fifo``, ``addon-fifo`` (not in the default list): ``frontier`` and ``addon`` with
  Scrapy's FIFO queue setting, so each site's requests go in arrival order (the frontier's
  order before it followed Scrapy's LIFO default): what the order is worth, in one run;
- ``addon-redis``: the add-on with the Redis frontier and the MongoDB store;
- ``scrapy-redis``: scrapy-redis's scheduler + the tutorial MongoDB pipeline (``insert_one``
  per item), the distributed baseline ``addon-redis`` is compared with.

Prints medians and ratios to ``plain`` (median of per-round ratios), then the ratios the
issue's goals name (docs/benchmarks.md). MongoDB is MONGO_URI when set, else a SecantusDB
server started here; Redis is ``--redis-url`` (keys unique per crawl, deleted after).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    Metrics,
    TestbedProcess,
    Variant,
    ratio,
    run_rounds,
    run_variant,
    spread,
    table,
)

#: what every variant shares: the crawl the issue measures
COMMON: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 32,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "ROBOTSTXT_OBEY": False,
    "LOG_LEVEL": "INFO",
}
RETRY_OFF = {"scrapy.downloadermiddlewares.retry.RetryMiddleware": None}
OUTCOMES_DL = {**RETRY_OFF, "scrapy_scale.outcomes.OutcomeDownloaderMiddleware": 550}
OUTCOMES_SP = {"scrapy_scale.outcomes.OutcomeSpiderMiddleware": 45}


def job(run_id: str) -> str:
    """A job name from a run id (job names allow letters, digits, '.', '_' and '-')."""
    return "bench-" + re.sub(r"[^A-Za-z0-9._-]", "_", run_id)


def feed(run_id: str) -> dict[str, Any]:
    path = Path(tempfile.gettempdir()) / f"bench-feed-{run_id}.jsonl"
    return {"FEEDS": {str(path): {"format": "jsonlines", "overwrite": True}}}


def plain(run_id: str) -> dict[str, Any]:
    return {**COMMON, "ADDONS": {}, **feed(run_id)}


GC_TUNING = {"scrapy_scale.gc_tuning.GCTuning": 0}


def with_extensions(settings: Any, extensions: dict[str, int]) -> Any:
    """``settings`` (a dict, or a function of the run id) with ``extensions`` added to its own."""

    def merged(run_id: str) -> dict[str, Any]:
        s = dict(settings(run_id) if callable(settings) else settings)
        s["EXTENSIONS"] = {**(s.get("EXTENSIONS") or {}), **extensions}
        return s

    return merged


def plain_gc(run_id: str) -> dict[str, Any]:
    return dict(with_extensions(plain, GC_TUNING)(run_id))


def plain_items(run_id: str) -> dict[str, Any]:
    return {**plain(run_id), "CONCURRENT_ITEMS": 16}


def autothrottle(run_id: str) -> dict[str, Any]:
    return {
        **plain(run_id),
        "AUTOTHROTTLE_ENABLED": True,
        "AUTOTHROTTLE_TARGET_CONCURRENCY": 1.0,
        "AUTOTHROTTLE_START_DELAY": 0.25,
    }


def outcomes(run_id: str) -> dict[str, Any]:
    return {**plain(run_id), "DOWNLOADER_MIDDLEWARES": OUTCOMES_DL, "SPIDER_MIDDLEWARES": OUTCOMES_SP}


def frontier(run_id: str) -> dict[str, Any]:
    return {**plain(run_id), "SCHEDULER": "scrapy_scale.frontier.Scheduler", "SCALE_JOB": job(run_id)}


def store(run_id: str) -> dict[str, Any]:
    return {
        **COMMON,
        "ADDONS": {},
        "FEEDS": None,
        "SCALE_JOB": job(run_id),
        "ITEM_PIPELINES": {"scrapy_scale.storage.StorePipeline": 900},
        "SPIDER_MIDDLEWARES": {"scrapy_scale.storage.StoreSpiderMiddleware": 50},
    }


def store_gc(run_id: str) -> dict[str, Any]:
    return dict(with_extensions(store, GC_TUNING)(run_id))


def addon(run_id: str) -> dict[str, Any]:
    return {**COMMON, "FEEDS": None, "SCALE_JOB": job(run_id)}


def addon_unpaced(run_id: str) -> dict[str, Any]:
    return {**addon(run_id), "SCALE_THROTTLE_ENABLED": False}


#: Scrapy's FIFO queues: the frontier then keeps each site's requests in arrival order (its
#: order before it followed Scrapy's default LIFO), to show what the order is worth
FIFO = {"SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"}


def frontier_fifo(run_id: str) -> dict[str, Any]:
    return {**frontier(run_id), **FIFO}


def addon_fifo(run_id: str) -> dict[str, Any]:
    return {**addon(run_id), **FIFO}


def db(run_id: str) -> str:
    return "bench_" + re.sub(r"[^A-Za-z0-9_]", "_", run_id)[-40:]


class Distributed:
    """The Redis + MongoDB variants: unique keys/databases per crawl, removed after."""

    def __init__(self, redis_url: str, mongo_uri: str):
        self.redis_url = redis_url
        self.mongo_uri = mongo_uri.rstrip("/")

    def addon(self, run_id: str) -> dict[str, Any]:
        return {
            **addon(run_id),
            "SCALE_FRONTIER_URL": self.redis_url,
            "SCALE_STORE_URL": f"{self.mongo_uri}/{db(run_id)}",
        }

    def scrapy_redis(self, run_id: str) -> dict[str, Any]:
        return {
            **COMMON,
            "ADDONS": {},
            "FEEDS": None,
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "REDIS_URL": self.redis_url,
            "SCHEDULER_QUEUE_KEY": f"bench:{run_id}:requests",
            "SCHEDULER_DUPEFILTER_KEY": f"bench:{run_id}:dupefilter",
            "SCHEDULER_PERSIST": False,
            "ITEM_PIPELINES": {"benchmarks.pipelines.MongoInsertOnePipeline": 300},
            "MONGO_URI": self.mongo_uri,
            "MONGO_DATABASE": db(run_id),
        }

    def cleanup(self, run_id: str) -> None:
        import pymongo
        import redis

        r = redis.Redis.from_url(self.redis_url)
        for pattern in (f"bench:{run_id}:*", f"*{job(run_id)}*"):
            for key in r.scan_iter(match=pattern, count=1000):
                r.delete(key)
        client: pymongo.MongoClient = pymongo.MongoClient(self.mongo_uri)
        client.drop_database(db(run_id))
        client.close()


@contextmanager
def mongo_server() -> Iterator[str]:
    env = os.environ.get("MONGO_URI")
    if env:
        yield env
        return
    from tests.support import services

    workdir = Path(tempfile.mkdtemp(prefix="bench-mongo-"))
    p = services.private_mongo(workdir)
    try:
        yield f"mongodb://127.0.0.1:{p.port}/"
    finally:
        p.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def variants(names: list[str], dist: Distributed | None) -> list[Variant]:
    known: dict[str, Any] = {
        "plain": lambda: Variant("plain Scrapy + JSONL feed", plain),
        "plain-gc": lambda: Variant("plain Scrapy + GC tuning", plain_gc),
        "plain-items": lambda: Variant("plain Scrapy + CONCURRENT_ITEMS=16", plain_items),
        "autothrottle": lambda: Variant("plain Scrapy + AutoThrottle", autothrottle),
        "outcomes": lambda: Variant("outcomes middlewares", outcomes),
        "frontier": lambda: Variant("SQLite frontier", frontier),
        "store": lambda: Variant("SQLite store (no feed)", store),
        "store-gc": lambda: Variant("SQLite store + GC tuning", store_gc),
        "addon": lambda: Variant("add-on, SQLite", addon),
        "addon-unpaced": lambda: Variant("add-on, SQLite, throttle off", addon_unpaced),
        "frontier-fifo": lambda: Variant("SQLite frontier, FIFO per site", frontier_fifo),
        "addon-fifo": lambda: Variant("add-on, SQLite, FIFO per site", addon_fifo),
    }
    if dist is not None:
        known["addon-redis"] = lambda: Variant("add-on, Redis + MongoDB", dist.addon, dist.cleanup)
        known["scrapy-redis"] = lambda: Variant("scrapy-redis + insert_one", dist.scrapy_redis, dist.cleanup)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(known)}")
    return [known[n]() for n in names]


#: (goal, variant, against, metric, bound, higher is better)
GOALS = [
    ("whole suite (SQLite) pages/s", "add-on, SQLite", "plain Scrapy + JSONL feed", "pages_per_s", 0.90, True),
    ("whole suite (SQLite) CPU per page", "add-on, SQLite", "plain Scrapy + JSONL feed", "cpu_per_1k", 1.15, False),
    (
        "whole suite (SQLite) vs AutoThrottle, pages/s",
        "add-on, SQLite",
        "plain Scrapy + AutoThrottle",
        "pages_per_s",
        0.90,
        True,
    ),
    (
        "whole suite (SQLite) vs AutoThrottle, CPU per page",
        "add-on, SQLite",
        "plain Scrapy + AutoThrottle",
        "cpu_per_1k",
        1.15,
        False,
    ),
    ("add-on vs AutoThrottle pages/s", "add-on, SQLite", "plain Scrapy + AutoThrottle", "pages_per_s", 1.10, True),
    (
        "add-on, pacing off vs plain pages/s",
        "add-on, SQLite, throttle off",
        "plain Scrapy + JSONL feed",
        "pages_per_s",
        1.05,
        True,
    ),
    (
        "add-on, pacing off vs plain CPU per page",
        "add-on, SQLite, throttle off",
        "plain Scrapy + JSONL feed",
        "cpu_per_1k",
        0.95,
        False,
    ),
    (
        "outcomes vs RetryMiddleware CPU per page",
        "outcomes middlewares",
        "plain Scrapy + JSONL feed",
        "cpu_per_1k",
        1.03,
        False,
    ),
    (
        "SQLite frontier vs memory scheduler pages/s",
        "SQLite frontier",
        "plain Scrapy + JSONL feed",
        "pages_per_s",
        0.95,
        True,
    ),
    (
        "SQLite store vs JSONL feed pages/s",
        "SQLite store (no feed)",
        "plain Scrapy + JSONL feed",
        "pages_per_s",
        0.95,
        True,
    ),
    (
        "Redis + MongoDB vs scrapy-redis + insert_one pages/s",
        "add-on, Redis + MongoDB",
        "scrapy-redis + insert_one",
        "pages_per_s",
        1.0,
        True,
    ),
]


def goals(results: dict[str, list[Metrics]]) -> str:
    out = ["| goal | ratio | bound | holds |", "|---|---:|---:|---|"]
    for name, v, base, attr, bound, higher in GOALS:
        if v not in results or base not in results:
            continue
        r = ratio(results[v], results[base], attr)
        ok = r >= bound if higher else r <= bound
        out.append(f"| {name} | {r:.2f} | {'>=' if higher else '<='} {bound:.2f} | {'yes' if ok else 'NO'} |")
    return "\n".join(out)


def profile(name: str, settings: Any, tb: TestbedProcess, out: Path) -> None:
    """One crawl under py-spy (all threads, GIL waits included), as a speedscope/raw file."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    run_id = f"profile-{uuid.uuid4().hex[:8]}"
    from tests.support.crawling import start_crawl

    proc = start_crawl(
        tb, {**(settings(run_id) if callable(settings) else settings)}, Path(tempfile.mkdtemp(prefix="bench-profile-"))
    )
    rec = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(proc.pid),
            "--format",
            "raw",
            "--gil",
            "--threads",
            "--rate",
            "200",
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proc.wait()
    rec.wait(60)
    print(f"{name}: py-spy raw profile in {out} (collapsed stacks; e.g. flamegraph.pl or speedscope)")


GC_METER = {"benchmarks.gc_meter.GCMeter": 0}


def with_gc_meter(v: Variant) -> Variant:
    """``v`` with the garbage-collector meter (benchmarks/gc_meter.py) added to its extensions."""
    return Variant(v.name, with_extensions(v.settings, GC_METER), v.cleanup)


def gc_per_1k(results: dict[str, list[Metrics]]) -> None:
    for ms in results.values():
        for m in ms:
            m.extra["gc_per_1k"] = 1000 * float(m.stats.get("bench/gc/seconds", 0.0)) / m.pages if m.pages else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", type=int, default=6000, help="detail pages in all (default 6000)")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--variants", default="plain,autothrottle,outcomes,frontier,store,addon,addon-unpaced,addon-redis,scrapy-redis"
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--per-page", type=int, default=20)
    p.add_argument("--profile", metavar="VARIANT", help="record one crawl of VARIANT with py-spy instead")
    p.add_argument("--gc-meter", action="store_true", help="also measure the garbage collector's CPU per page")
    args = p.parse_args(argv)
    names = [n.strip() for n in (args.profile or args.variants).split(",") if n.strip()]
    cmd = "python -m benchmarks.bench_suite " + " ".join(sys.argv[1:] if argv is None else argv)
    with ExitStack() as stack:
        dist = None
        if any(n in ("addon-redis", "scrapy-redis") for n in names):
            dist = Distributed(args.redis_url, stack.enter_context(mongo_server()))
        vs = variants(names, dist)
        if args.gc_meter:
            vs = [with_gc_meter(v) for v in vs]
        tb = stack.enter_context(TestbedProcess(args.hosts, args.pages, per_page=args.per_page))
        if args.profile:
            run_variant("warm-up", vs[0].settings, tb.pages, tb.hosts, testbed=tb, cleanup=vs[0].cleanup)
            profile(vs[0].name, vs[0].settings, tb, Path(f"profile-{names[0]}.txt").resolve())
            return 0
        t0, load0 = time.monotonic(), os.getloadavg()[0]
        results = run_rounds(vs, tb.pages, tb.hosts, args.rounds, testbed=tb)
    print()
    print(
        f"`{cmd.strip()}` ({args.rounds} rounds, {time.monotonic() - t0:.0f} s in all, load average "
        f"{load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end; medians, and ratios to "
        f"{vs[0].name} as the median of the per-round ratios):"
    )
    print()
    if args.gc_meter:
        gc_per_1k(results)
        print(table(results, extra=[("GC CPU s / 1k pages", "gc_per_1k", "{:.2f}")]))
    else:
        print(table(results))
    print()
    print(goals(results))
    print()
    print(spread(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
