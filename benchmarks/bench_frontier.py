"""Benchmark (not a test): the persisted frontier against what users run today.

    python -m benchmarks.bench_frontier                          # every part, defaults below
    python -m benchmarks.bench_frontier --parts crawl --pages 3000 --hosts 10 --rounds 3
    python -m benchmarks.bench_frontier --parts ops,rss,kill9

Parts (each prints Markdown, ratios side by side from one run):

- ``crawl``: the bench crawl (testbed process, ``--pages`` detail pages over ``--hosts``,
  no faults, plain Scrapy otherwise: ``ADDONS = {}``) with five schedulers, interleaved by
  ``benchmarks.harness.run_rounds``: Scrapy's default scheduler, Scrapy with ``JOBDIR``,
  ``scrapy_scale.frontier.Scheduler`` on SQLite, the scrapy-redis scheduler
  (``scrapy_redis.scheduler.Scheduler`` + ``RFPDupeFilter``), and our scheduler on Redis;
  both Redis variants on the same Redis server (a private one by default, so its CPU is
  counted). Two tables: SQLite frontier vs default vs JOBDIR; Redis frontier vs scrapy-redis.
- ``ops``: store operations per second on the same Redis: our enqueue (batches of 64, as
  the scheduler writes them), lease (batches of 64) and ack (batches of 64), and the same
  with batches of 1, vs scrapy-redis ``RFPDupeFilter.request_seen`` + ``PriorityQueue.push``
  and ``PriorityQueue.pop`` (one call per request, as its scheduler makes them). Each side
  includes its own fingerprinting and (de)serialisation. SQLite store for reference.
- ``rss``: peak RSS of a worker crawling ``--rss-pages`` pages (``CLOSESPIDER_PAGECOUNT``)
  from a frontier holding ``--pending`` (1,000,000) pending requests vs an empty one, per
  backend (SQLite; Redis on a private server).
- ``kill9``: the kill -9 comparison: a 2,000-page site (4 x 500), the crawl SIGKILLed
  once after ``--kill-at`` responses and resumed with the same command to its end:
  distinct pages ever crawled with scrapy-redis (``SCHEDULER_PERSIST``) vs our frontier.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks.bench_schedulers import PLAIN, private_redis, redis_cpu, redis_variant
from benchmarks.harness import (
    BASE_SETTINGS,
    TestbedProcess,
    Variant,
    run_rounds,
    spread,
    table,
    wait_measured,
)

FRONTIER = "scrapy_scale.frontier.Scheduler"


# ---- crawl ---------------------------------------------------------------------------------


def frontier_redis_variant(redis_url: str, extra: dict[str, Any] | None = None) -> Variant:
    cpu_before: dict[str, float] = {}

    def settings(run_id: str) -> dict[str, Any]:
        cpu_before[run_id] = redis_cpu(redis_url)
        return {
            "ADDONS": {},
            "SCHEDULER": FRONTIER,
            "SCALE_FRONTIER_URL": redis_url,
            "SCALE_JOB": f"bench-{run_id}",
            **(extra or {}),
        }

    def cleanup(run_id: str) -> dict[str, float]:
        used = redis_cpu(redis_url) - cpu_before.pop(run_id)
        _delete_keys(redis_url, f"scale:{{bench-{run_id}}}*")
        return {"redis_cpu": used}

    return Variant("Redis frontier", settings, cleanup)


def _delete_keys(redis_url: str, pattern: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    for key in r.scan_iter(match=pattern, count=1000):
        r.delete(key)


def part_crawl(args: argparse.Namespace, redis_url: str) -> str:
    jobdirs = Path(tempfile.mkdtemp(prefix="bench-jobdir-"))
    ours = {"SCALE_FRONTIER_BATCH": args.frontier_batch} if args.frontier_batch else {}
    variants = [
        Variant("Scrapy default scheduler", PLAIN),
        Variant("Scrapy JOBDIR", lambda run_id: {"ADDONS": {}, "JOBDIR": str(jobdirs / run_id)}),
        Variant("SQLite frontier", {"ADDONS": {}, "SCHEDULER": FRONTIER, **ours}),
        redis_variant(redis_url),
        frontier_redis_variant(redis_url, ours),
    ]
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    with TestbedProcess(args.hosts, args.pages, per_page=args.per_page) as tb:
        results = run_rounds(variants, tb.pages, tb.hosts, args.rounds, testbed=tb)
    for ms in results.values():
        for m in ms:
            m.extra["cpu_all_per_1k"] = 1000 * (m.cpu + m.extra.get("redis_cpu", 0.0)) / m.pages
    one = {k: results[k] for k in ("SQLite frontier", "Scrapy default scheduler", "Scrapy JOBDIR")}
    two = {k: results[k] for k in ("Redis frontier", "scrapy-redis scheduler")}
    extra = [("CPU s / 1k pages incl. Redis server", "cpu_all_per_1k", "{:.2f}")]
    lines = [
        f"Crawl: {tb.hosts} hosts x {tb.pages_per_host} pages, {tb.per_page} links per listing page, "
        f"{args.rounds} rounds + warm-up, "
        f"{time.monotonic() - t0:.0f} s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}. "
        "Ratios: each row over the table's first row (median of the per-round ratios).",
        "",
        table(
            {k: one[k] for k in ("Scrapy default scheduler", "Scrapy JOBDIR", "SQLite frontier")},
            baseline="Scrapy default scheduler",
        ),
        "",
        table(
            {"Scrapy JOBDIR": one["Scrapy JOBDIR"], "SQLite frontier": one["SQLite frontier"]}, baseline="Scrapy JOBDIR"
        ),
        "",
        table(
            {"scrapy-redis scheduler": two["scrapy-redis scheduler"], "Redis frontier": two["Redis frontier"]},
            baseline="scrapy-redis scheduler",
            extra=extra,
        ),
        "",
        spread(results),
    ]
    return "\n".join(lines)


# ---- ops -------------------------------------------------------------------------------------


class _Spider:
    """What scrapy-redis and the codec need of a spider (a name; callbacks by name)."""

    name = "benchops"

    def parse(self, response: Any) -> None:  # pragma: no cover - never called
        pass


def _requests(n: int) -> list[Any]:
    from scrapy import Request

    sp = _Spider()
    return [Request(f"http://shop{i % 10 + 1}.example.test:8080/item/{i}", callback=sp.parse) for i in range(n)]


def _phase(n: int, fn: Callable[[], None], redis_url: str | None) -> dict[str, float]:
    """Run ``fn`` (``n`` operations): ops/s (wall), this process's CPU and the Redis server's
    CPU, each in microseconds per operation."""
    r0 = redis_cpu(redis_url) if redis_url else 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    server = (redis_cpu(redis_url) - r0) if redis_url else 0.0
    return {"rate": n / wall, "client_us": 1e6 * cpu / n, "server_us": 1e6 * server / n}


def ops_ours(url: str, n: int, batch: int) -> dict[str, dict[str, float]]:
    from scrapy.utils.request import RequestFingerprinter

    from scrapy_scale.frontier import NewRequest, open_store
    from scrapy_scale.frontier.records import codec
    from scrapy_scale.frontier.store import domain_of

    sp = _Spider()
    fper = RequestFingerprinter()
    reqs = _requests(n)
    job = f"benchops-{uuid.uuid4().hex[:8]}"
    store = open_store(url, job)
    store.begin_run()
    leased: list[Any] = []
    rurl = url if url.startswith("redis") else None

    def enqueue() -> None:  # fingerprint + encode (reactor thread) and the store call (store thread)
        for i in range(0, n, batch):
            store.enqueue(
                [
                    NewRequest(fper.fingerprint(r).hex(), codec.encode(r, sp), domain_of(r.url))
                    for r in reqs[i : i + batch]
                ]
            )

    def lease() -> None:  # the store call, then decode (reactor thread, next_request)
        while True:
            got = store.lease("w", batch, 600)
            if not got:
                break
            for lz in got:
                codec.decode(lz.data, sp)  # type: ignore[arg-type]
            leased.extend(got)

    def ack() -> None:
        for i in range(0, len(leased), batch):
            store.ack("w", [(x.fingerprint, x.token) for x in leased[i : i + batch]])

    try:
        out = {"enqueue": _phase(n, enqueue, rurl), "take": _phase(n, lease, rurl), "ack": _phase(n, ack, rurl)}
        assert len(leased) == n and store.counts()["done"] == n, (len(leased), store.counts())
        return out
    finally:
        store.reset()
        store.close()
        if rurl:
            _delete_keys(url, f"scale:{{{job}}}*")


def ops_scrapy_redis(url: str, n: int) -> dict[str, dict[str, float]]:
    import redis
    from scrapy_redis.dupefilter import RFPDupeFilter
    from scrapy_redis.queue import PriorityQueue

    server = redis.Redis.from_url(url)
    key = f"benchops-{uuid.uuid4().hex[:8]}"
    sp = _Spider()
    q = PriorityQueue(server, sp, f"{key}:requests")
    df = RFPDupeFilter(server, f"{key}:dupefilter")
    reqs = _requests(n)
    popped: list[Any] = []

    def push() -> None:
        for r in reqs:
            if not df.request_seen(r):
                q.push(r)

    def pop() -> None:
        while True:
            r = q.pop()
            if r is None:
                break
            popped.append(r)

    try:
        out = {"enqueue": _phase(n, push, url), "take": _phase(n, pop, url)}
        assert len(popped) == n
        return out
    finally:
        server.delete(f"{key}:requests", f"{key}:dupefilter")


def part_ops(args: argparse.Namespace, redis_url: str) -> str:
    n = args.ops
    runs: dict[str, list[dict[str, dict[str, float]]]] = {
        "scrapy-redis: dupefilter + PriorityQueue, one call per request": [],
        "Redis frontier, batches of 64 (as the scheduler)": [],
        "Redis frontier, batches of 1": [],
        "SQLite frontier, batches of 64 (reference)": [],
    }
    names = list(runs)
    for _ in range(args.rounds):  # interleaved, so load changes hit every variant alike
        runs[names[0]].append(ops_scrapy_redis(redis_url, n))
        runs[names[1]].append(ops_ours(redis_url, n, 64))
        runs[names[2]].append(ops_ours(redis_url, min(n, 5000), 1))
        runs[names[3]].append(ops_ours(f"sqlite:///{tempfile.mkdtemp(prefix='bench-ops-')}/f.db", n, 64))

    def med(name: str, phase: str, k: str) -> float:
        vals = [r[phase][k] for r in runs[name] if phase in r]
        return float(statistics.median(vals)) if vals else float("nan")

    base = names[0]
    rows = []
    for name in names:
        cells = []
        for phase in ("enqueue", "take", "ack"):
            if phase == "ack" and name == base:
                cells.append("- (pop is destructive)")
                continue
            rate = med(name, phase, "rate")
            ratio = f" ({rate / med(base, phase, 'rate'):.2f})" if phase != "ack" else ""
            server = "" if name.startswith("SQLite") else f" / {med(name, phase, 'server_us'):.0f}"
            cells.append(f"{rate:,.0f}{ratio}; {med(name, phase, 'client_us'):.0f}{server} us")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    head = [
        f"Store operations, {n:,} requests per round ({min(n, 5000):,} with batches of 1), one client, "
        f"median of {args.rounds} interleaved rounds. Each cell: operations/s (ratio to scrapy-redis); "
        "client CPU / Redis server CPU in microseconds per operation. Client CPU includes each side's "
        "fingerprinting and (de)serialisation: scrapy-redis pickles `Request.to_dict`, the frontier "
        "writes versioned JSON. take = scrapy-redis `pop()` vs our `lease()` + decode.",
        "",
        "| store | enqueue | take (pop / lease) | ack |",
        "|---|---:|---:|---:|",
    ]
    return "\n".join(head + rows)


# ---- rss -------------------------------------------------------------------------------------


def fill(url: str, job: str, tb: TestbedProcess, pending: int, log: Callable[[str], None]) -> float:
    """Open a run of ``job`` holding ``pending`` pending detail-page requests of the testbed."""
    from scrapy import Request

    from scrapy_scale.frontier import NewRequest, open_store
    from scrapy_scale.frontier.records import codec

    sp = _Spider()
    port = tb.state["port"]
    tmpl_url = f"http://shop1.example.test:{port}/item/1"
    tmpl = codec.encode(Request(tmpl_url, callback=sp.parse), sp).replace('"parse"', '"parse_item"')
    store = open_store(url, job)
    t = time.monotonic()
    try:
        store.begin_run()
        batch = []
        per_host = tb.pages_per_host
        for i in range(pending):
            h, item = i % tb.hosts + 1, i // tb.hosts + 1
            if item > per_host:
                raise SystemExit("--pending is larger than the testbed's catalog")
            u = f"http://shop{h}.example.test:{port}/item/{item}"
            # a stable per-URL key (Scrapy's fingerprinter costs ~100 us each: 2 min for a million)
            batch.append(
                NewRequest(hashlib.sha1(u.encode()).hexdigest(), tmpl.replace(tmpl_url, u), f"shop{h}.example.test")
            )
            if len(batch) == 10_000:
                store.enqueue(batch)
                batch = []
        if batch:
            store.enqueue(batch)
        counts = store.counts()
    finally:
        store.close()
    took = time.monotonic() - t
    log(f"filled {job}: {counts} in {took:.0f} s")
    return took


def measure(tb: TestbedProcess, settings: dict[str, Any], workdir: Path, timeout: float = 900) -> dict[str, Any]:
    from tests.support.crawling import start_crawl

    proc = start_crawl(tb, {**BASE_SETTINGS, **settings}, workdir)
    t = time.monotonic()
    status, usage, hwm = wait_measured(proc.pid, timeout)
    proc.returncode = os.waitstatus_to_exitcode(status)
    res = proc.result()
    if proc.returncode != 0:
        raise RuntimeError(f"crawl failed ({proc.returncode}): {res.tail()}")
    return {
        "rss": hwm,
        "ru_maxrss": usage.ru_maxrss / 1024,
        "pages": res.stats.get("downloader/response_count", 0),
        "wall": time.monotonic() - t,
        "cpu": usage.ru_utime + usage.ru_stime,
        "pending_after": res.stats.get("scale/frontier/queue_length"),
    }


def part_rss(args: argparse.Namespace, stack: ExitStack, log: Callable[[str], None]) -> str:
    hosts = 10
    per_host = -(-args.pending // hosts) + 1000
    tb = stack.enter_context(TestbedProcess(hosts, per_host * hosts))
    work = Path(tempfile.mkdtemp(prefix="bench-rss-"))
    rows = []
    backends: list[tuple[str, Callable[[str], str]]] = [
        ("SQLite", lambda name: f"sqlite:///{work}/{name}.db"),
    ]
    rurl = stack.enter_context(private_redis())
    backends.append(("Redis", lambda name: rurl))
    for backend, url_of in backends:
        res: dict[str, list[dict[str, Any]]] = {"empty": [], "full": []}
        fill_s = 0.0
        for r in range(args.rss_rounds):
            for kind in ("empty", "full") if r % 2 == 0 else ("full", "empty"):
                job = f"rss-{kind}-{uuid.uuid4().hex[:6]}"
                url = url_of(job)
                if kind == "full":
                    fill_s = fill(url, job, tb, args.pending, log)
                s = {
                    "ADDONS": {},
                    "SCHEDULER": FRONTIER,
                    "SCALE_FRONTIER_URL": url,
                    "SCALE_JOB": job,
                    "CLOSESPIDER_PAGECOUNT": args.rss_pages,
                }
                m = measure(tb, s, work / job)
                log(f"{backend} {kind}: {m}")
                res[kind].append(m)
                if backend == "Redis":
                    _delete_keys(rurl, f"scale:{{{job}}}*")
        e = statistics.median(m["rss"] for m in res["empty"])
        f = statistics.median(m["rss"] for m in res["full"])
        rows.append(
            f"| {backend} | {args.pending:,} | {fill_s:.0f} | {e:.0f} | {f:.0f} | {f - e:+.0f} | "
            f"{statistics.median(m['pages'] for m in res['full']):.0f} |"
        )
    head = [
        f"Peak RSS (MiB) of a worker (scheduler only, `ADDONS = {{}}`) crawling {args.rss_pages:,} pages "
        f"(`CLOSESPIDER_PAGECOUNT`) from a frontier with {args.pending:,} pending requests vs an empty one; "
        f"median of {args.rss_rounds} each.",
        "",
        "| backend | pending | fill s | empty frontier | with the pending | difference | pages crawled |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    return "\n".join(head + rows)


# ---- kill9 -----------------------------------------------------------------------------------


@contextmanager
def _in_process_testbed(hosts: int, pages: int) -> Iterator[Any]:
    from scrapy_scale.testbed import Testbed

    with Testbed(hosts=hosts, pages=pages, seed=4) as tb:
        yield tb


def kill9_once(tb: Any, settings: dict[str, Any], workdir: Path, kill_at: int) -> dict[str, Any]:
    from tests.support.crawling import start_crawl

    tb.clear_log()
    first = start_crawl(tb, {**BASE_SETTINGS, **settings}, workdir)
    deadline = time.monotonic() + 120
    while len(tb.log) < kill_at:
        if first.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the crawl ended before the kill: {first.result().tail()}")
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    at_kill = len(tb.log)
    second = start_crawl(tb, {**BASE_SETTINGS, **settings}, workdir).finish(600)
    if second.returncode != 0:
        raise RuntimeError(f"the resumed crawl failed: {second.tail()}")
    ok = {r.path and (r.host, r.path) for r in tb.log if r.status == 200 and r.kind == "ok"}
    details = sum(1 for _, p in ok if p.startswith("/item/"))
    return {
        "at_kill": at_kill,
        "pages": len(ok),
        "details": details,
        "fetches": sum(1 for r in tb.log if r.kind == "ok"),
    }


def part_kill9(args: argparse.Namespace, redis_url: str) -> str:
    base = {"CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 8}
    work = Path(tempfile.mkdtemp(prefix="bench-kill9-"))
    kill_points = [int(x) for x in args.kill_at.split(",")]
    rows = []
    with _in_process_testbed(4, 500) as tb:
        total_pages = len(tb.detail_urls()) + tb.catalog.list_pages * len(tb.hosts)
        variants: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
            (
                "scrapy-redis scheduler (SCHEDULER_PERSIST)",
                lambda rid: {
                    **base,
                    "ADDONS": {},
                    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                    "REDIS_URL": redis_url,
                    "SCHEDULER_QUEUE_KEY": f"k9:{rid}:requests",
                    "SCHEDULER_DUPEFILTER_KEY": f"k9:{rid}:dupefilter",
                    "SCHEDULER_PERSIST": True,
                },
            ),
            (
                "Redis frontier (scheduler only)",
                lambda rid: {
                    **base,
                    "ADDONS": {},
                    "SCHEDULER": FRONTIER,
                    "SCALE_FRONTIER_URL": redis_url,
                    "SCALE_JOB": f"k9-{rid}",
                },
            ),
            ("scrapy-scale add-on (SQLite frontier + store)", lambda rid: {**base}),
        ]
        for name, settings in variants:
            results = []
            for kill_at in kill_points:
                rid = uuid.uuid4().hex[:8]
                results.append(kill9_once(tb, settings(rid), work / rid, kill_at))
                _delete_keys(redis_url, f"k9:{rid}:*")
                _delete_keys(redis_url, f"scale:{{k9-{rid}}}*")
            cells = [", ".join(str(r[k]) for r in results) for k in ("details", "pages", "fetches")]
            rows.append(f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} |")
    head = [
        f"kill -9 once after N responses (N = {', '.join(map(str, kill_points))}: one crawl each, one "
        "number per crawl), then the same command again to its end; a 4 x 500-page site "
        f"({len(tb.detail_urls()):,} detail + {total_pages - len(tb.detail_urls())} listing pages), "
        "CONCURRENT_REQUESTS=16 (8 per domain), fresh queue keys per crawl.",
        "",
        f"| scheduler | detail pages ever crawled (of {len(tb.detail_urls()):,}) | all pages (of {total_pages:,}) "
        "| fetches, both runs |",
        "|---|---:|---:|---:|",
    ]
    return "\n".join(head + rows)


# ---- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="crawl,ops,rss,kill9")
    p.add_argument("--pages", type=int, default=3000, help="crawl: detail pages in all (default 3000)")
    p.add_argument("--hosts", type=int, default=10, help="crawl: testbed hosts (default 10)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--per-page",
        type=int,
        default=20,
        help="crawl: detail links per listing page (default 20: each host is a chain of listing pages)",
    )
    p.add_argument(
        "--frontier-batch",
        type=int,
        default=None,
        help="crawl: SCALE_FRONTIER_BATCH of the frontier variants (default: the setting's default)",
    )
    p.add_argument("--ops", type=int, default=20_000, help="ops: requests per round (default 20,000)")
    p.add_argument("--pending", type=int, default=1_000_000, help="rss: pending requests (default 1,000,000)")
    p.add_argument("--rss-pages", type=int, default=2000, help="rss: pages each crawl fetches (default 2,000)")
    p.add_argument("--rss-rounds", type=int, default=1)
    p.add_argument(
        "--kill-at",
        default="300,700,1100",
        help="kill9: responses before the kill, one crawl per value (default 300,700,1100)",
    )
    p.add_argument(
        "--redis-url",
        default=None,
        help="Redis for crawl/ops/kill9 (default: a private redis-server, so its CPU is counted)",
    )
    args = p.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = set(parts) - {"crawl", "ops", "rss", "kill9"}
    if unknown:
        raise SystemExit(f"unknown part(s): {', '.join(sorted(unknown))}")
    cmd = "python -m benchmarks.bench_frontier " + " ".join(sys.argv[1:] if argv is None else argv)
    out = [f"`{cmd.strip()}`", ""]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    with ExitStack() as stack:
        redis_url = args.redis_url or stack.enter_context(private_redis())
        for part in parts:
            t = time.monotonic()
            log(f"--- {part}")
            if part == "crawl":
                text = part_crawl(args, redis_url)
            elif part == "ops":
                text = part_ops(args, redis_url)
            elif part == "rss":
                text = part_rss(args, stack, log)
            else:
                text = part_kill9(args, redis_url)
            out += [f"### {part} ({time.monotonic() - t:.0f} s)", "", text, ""]
            print("\n".join(out[-4:]), flush=True)
    print()
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
