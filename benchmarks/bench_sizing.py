"""Benchmark (not a test): what a frontier record costs, in Redis memory and in SQLite file
size, and how long ``scrapy scale status`` and a lease round take at that size.

    python -m benchmarks.bench_sizing                       # 100,000 URLs, Redis and SQLite
    python -m benchmarks.bench_sizing --urls 100000,1000000 --backends redis,sqlite

For each size N: a private Redis (``redis-server`` on a free loopback port, data in a temp
folder, never the shared one) and a fresh SQLite file get N URLs seeded the way
``scrapy scale seed --file`` does (``--hosts`` hosts, one URL in ten with a query), then:

- **pending**: bytes per pending record (Redis: ``INFO memory`` ``used_memory`` after minus
  before, over N; ``MEMORY USAGE`` of one record's key shown apart; SQLite: file size over
  N after a checkpoint);
- ``scrapy scale status JOB`` timed as a subprocess (start-up included) and in this process
  (``store.status()``), and one lease round (lease 64 + ack 64, the median of 20) at N
  pending;
- **done**: every record leased and acked (batches of 1,000), then bytes per done record
  (SQLite: after ``VACUUM``; a done record is also what deduplication keeps of a URL), and
  on Redis the encodings of the done set's buckets (they must all be listpacks).

Prints a table (and ``--json`` writes the figures). The figures and the projection to
10^8 and 10^9 URLs are in docs/frontier.md, "Sizing".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_seed import make_urls  # noqa: E402
from scrapy_scale.frontier.backends import open_store  # noqa: E402
from scrapy_scale.frontier.records.codec import RecordRules  # noqa: E402
from scrapy_scale.frontier.records.seeding import UrlSeeds  # noqa: E402
from scrapy_scale.frontier.store import FrontierStore  # noqa: E402

JOB = "sizing"
WORKER = "bench/0"
CHUNK = 50_000


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def seed(store: FrontierStore, n: int, hosts: int) -> float:
    seeds = UrlSeeds(RecordRules())
    t0 = time.perf_counter()
    store.begin_run()
    batch: list[str] = []
    for u in make_urls(n, hosts):
        batch.append(u)
        if len(batch) >= CHUNK:
            store.enqueue_new(seeds.records(batch))
            batch = []
    if batch:
        store.enqueue_new(seeds.records(batch))
    return time.perf_counter() - t0


def status_command(url: str, workdir: str) -> float:
    argv = [sys.executable, "-m", "scrapy", "scale", "status", JOB, "-s", f"SCALE_FRONTIER_URL={url}"]
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=workdir, env=_env(), capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"status failed ({p.returncode}): {p.stderr[-2000:]}")
    return time.perf_counter() - t0


def timings(store: FrontierStore, url: str, workdir: str) -> dict[str, float]:
    cmd = status_command(url, workdir)
    t0 = time.perf_counter()
    store.status()
    in_process = time.perf_counter() - t0
    rounds = []
    for _ in range(20):
        t0 = time.perf_counter()
        got = store.lease(WORKER, 64, 600)
        store.ack(WORKER, [(x.fingerprint, x.token) for x in got])
        rounds.append(time.perf_counter() - t0)
    return {"status_cmd_s": cmd, "status_s": in_process, "lease_round_ms": 1000 * statistics.median(rounds)}


def finish_all(store: FrontierStore) -> float:
    t0 = time.perf_counter()
    while True:
        got = store.lease(WORKER, 1000, 600)
        if not got:
            break
        store.ack(WORKER, [(x.fingerprint, x.token) for x in got])
    return time.perf_counter() - t0


def redis_size(n: int, hosts: int, workdir: str) -> dict[str, Any]:
    import redis

    from tests.support import services

    p = services.private_redis(Path(workdir), appendonly=False)
    try:
        url = f"redis://127.0.0.1:{p.port}/0"
        r = redis.Redis.from_url(url)
        store = open_store(url, JOB)
        store.open()
        store.begin_run()
        base = int(r.info("memory")["used_memory"])
        seconds = seed(store, n, hosts)
        pending = int(r.info("memory")["used_memory"]) - base
        prefix = store.run_prefix()  # type: ignore[attr-defined]
        one = next(iter(r.scan_iter(match=f"{prefix}:r:*", count=1000)))
        record = int(r.memory_usage(one, samples=0) or 0)
        encoding = r.object("encoding", one).decode()
        out: dict[str, Any] = {
            "backend": "redis",
            "urls": n,
            "seed_s": seconds,
            "pending_B": pending / n,
            "record_key_B": record,
            "record_encoding": encoding,
        }
        out.update(timings(store, url, workdir))
        out["finish_s"] = finish_all(store)
        assert store.counts()["done"] == n, store.counts()
        out["done_B"] = (int(r.info("memory")["used_memory"]) - base) / n
        # the done set's buckets must stay listpacks (a hashtable costs about three times more)
        kinds: dict[str, int] = {}
        for key in r.scan_iter(match=f"{prefix}:d:*", count=1000):
            kind = r.object("encoding", key).decode()
            kinds[kind] = kinds.get(kind, 0) + 1
        out["done_buckets"] = kinds
        store.close()
        r.close()
        return out
    finally:
        p.kill()


def sqlite_size(n: int, hosts: int, workdir: str) -> dict[str, Any]:
    path = Path(workdir) / "frontier.db"
    url = f"sqlite:///{path}"
    store = open_store(url, JOB)
    store.open()
    seconds = seed(store, n, hosts)
    db = store.db  # type: ignore[attr-defined]
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out: dict[str, Any] = {"backend": "sqlite", "urls": n, "seed_s": seconds, "pending_B": path.stat().st_size / n}
    out.update(timings(store, url, workdir))
    out["finish_s"] = finish_all(store)
    assert store.counts()["done"] == n, store.counts()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("VACUUM")
    out["done_B"] = path.stat().st_size / n
    store.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--urls", default="100000", help="sizes, comma-separated (default 100000)")
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--backends", default="redis,sqlite")
    p.add_argument("--json", dest="json_path", help="also write the figures to this file")
    args = p.parse_args()
    rows = []
    for n in (int(x) for x in args.urls.split(",")):
        for backend in args.backends.split(","):
            workdir = tempfile.mkdtemp(prefix="bench-sizing-")
            try:
                row = (redis_size if backend == "redis" else sqlite_size)(n, args.hosts, workdir)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print("| backend | URLs | pending B/URL | done (dedup) B/URL | status command s | status() s | lease round ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['urls']:,} | {r['pending_B']:.0f} | {r['done_B']:.0f} | "
            f"{r['status_cmd_s']:.2f} | {r['status_s']:.3f} | {r['lease_round_ms']:.1f} |"
        )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
