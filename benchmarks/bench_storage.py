"""Benchmark of scrapy_scale.storage (not a test): prints two tables, ratios in one run.

1. Store throughput: items/s written through the batch writer, in batches
   (SCALE_STORE_BATCH_SIZE) vs one write per item, to MongoDB (MONGO_URI, else a
   SecantusDB server started here) and to SQLite. Every write is durable (MongoDB
   j=True; SQLite WAL + synchronous=FULL), as in a crawl.
2. Pipeline overhead on a bench crawl: `scrapy crawl catalog` of a testbed (no faults),
   without any item pipeline vs with StorePipeline to SQLite vs to MongoDB: wall
   seconds, pages/s and CPU seconds of the crawl process.

    python -m benchmarks.bench_storage                 # defaults: 3000 items, 4 x 500 pages
    python -m benchmarks.bench_storage --items 5000 --hosts 4 --pages 500 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from scrapy_scale.storage.backends import DeadRow, Row, open_store
from scrapy_scale.storage.writer import BatchWriter, Submission


def item_doc(i: int) -> dict[str, Any]:
    """About the size of a catalog item plus bookkeeping fields."""
    return {
        "sku": f"SKU-{i:07d}",
        "title": f"Product number {i} with a moderately long title",
        "price": i * 0.37,
        "url": f"http://shop1.example.test:8080/item/{i}",
        "_run_id": "bench",
        "_job": "bench",
        "_source_url": f"http://shop1.example.test:8080/item/{i}",
        "_item_type": "dict",
    }


def store_rate(url: str, n: int, batch_size: int, max_latency: float) -> float:
    """Items per second through BatchWriter to a fresh collection (submit -> all committed)."""
    store = open_store(url, "bench_" + uuid.uuid4().hex[:8])
    store.open()
    done = threading.Semaphore(0)
    w = BatchWriter(store, batch_size=batch_size, max_latency=max_latency)
    w.start()
    t0 = time.perf_counter()
    for i in range(n):
        key = f"k{i:08d}"
        w.submit(
            Submission(
                done=lambda r: done.release(),
                row=Row(key, item_doc(i)),
                on_refused=lambda reason, k=key: DeadRow(k, {"reason": reason}),
            )
        )
    for _ in range(n):
        done.acquire()
    elapsed = time.perf_counter() - t0
    w.close()
    assert store.count() == n, f"{store.count()} of {n} stored"
    store.close()
    return n / elapsed


def crawl(tb: Any, tmp: Path, settings: dict[str, Any]) -> dict[str, float]:
    from tests.support.crawling import run_crawl

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = run_crawl(tb, settings, tmp, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"crawl failed:\n{res.tail()}")
    pages = res.stats.get("response_received_count", 0)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall": res.duration,
        "cpu": cpu,
        "pages": pages,
        "items": res.stats.get("item_scraped_count", 0),
        "stored": res.stats.get("scale/store/written", 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--single-items", type=int, default=1000, help="items for the one-write-per-item runs")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--pages", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip-crawl", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench_storage_"))
    mongo = None
    uri = os.environ.get("MONGO_URI")
    if not uri:
        from tests.support import services

        mongo = services.private_mongo(tmp / "mongo")
        uri = f"mongodb://127.0.0.1:{mongo.port}/"
        server = "SecantusDB (python -m secantus)"
    else:
        server = "mongod at MONGO_URI"
    mongo_url = uri.rstrip("/") + "/bench"
    try:
        print(f"## 1. Store throughput (items/s, durable writes; MongoDB server: {server})\n")
        print(f"| store | one write per item | batches of {args.batch} | ratio |")
        print("|---|---|---|---|")
        for name, url in (("MongoDB", mongo_url), ("SQLite", f"sqlite:///{tmp}/bench.sqlite")):
            single = max(store_rate(url, args.single_items, 1, 0) for _ in range(args.rounds))
            batched = max(store_rate(url, args.items, args.batch, 0.2) for _ in range(args.rounds))
            print(f"| {name} | {single:,.0f} | {batched:,.0f} | {batched / single:.1f}x |")

        if args.skip_crawl:
            return
        from scrapy_scale.testbed import Testbed

        base: dict[str, Any] = {
            "ADDONS": {},
            "LOG_LEVEL": "INFO",
            "CONCURRENT_REQUESTS": 32,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        }
        store_parts = {
            "ITEM_PIPELINES": {"scrapy_scale.storage.StorePipeline": 900},
            "SPIDER_MIDDLEWARES": {"scrapy_scale.storage.StoreSpiderMiddleware": 50},
        }
        variants = {
            "no item pipeline (plain Scrapy)": dict(base),
            "StorePipeline -> SQLite": {**base, **store_parts},
            "StorePipeline -> MongoDB": {**base, **store_parts, "SCALE_STORE_URL": uri.rstrip("/") + "/crawl"},
        }
        results: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
        with Testbed(hosts=args.hosts, pages=args.pages, keep_log=False) as tb:
            for r in range(args.rounds):
                for name, settings in variants.items():
                    results[name].append(crawl(tb, tmp / f"crawl_{r}_{len(results[name])}_{abs(hash(name))}", settings))
        print(
            f"\n## 2. Pipeline overhead on the bench crawl ({args.hosts} hosts x {args.pages} pages, "
            f"median of {args.rounds} rounds)\n"
        )
        print("| variant | wall s | pages/s | CPU s | CPU s / 1,000 pages | items stored | CPU ratio |")
        print("|---|---|---|---|---|---|---|")
        ref = None
        for name, rs in results.items():
            wall = statistics.median(x["wall"] for x in rs)
            cpu = statistics.median(x["cpu"] for x in rs)
            pages = rs[0]["pages"]
            ref = ref or cpu
            print(
                f"| {name} | {wall:.1f} | {pages / wall:,.0f} | {cpu:.1f} | {1000 * cpu / pages:.2f} | "
                f"{int(rs[0]['stored'])} | {cpu / ref:.2f} |"
            )
    finally:
        if mongo is not None:
            mongo.kill()


if __name__ == "__main__":
    main()
