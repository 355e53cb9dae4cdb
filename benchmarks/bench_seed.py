"""Benchmark (not a test): how fast seeds get into the frontier (issue 11: >= 50,000 URLs/s).

    python -m benchmarks.bench_seed                          # 1,000,000 URLs, every path and backend
    python -m benchmarks.bench_seed --urls 200000 --paths command,core --backends sqlite

Paths (each into a fresh SQLite file and into a Redis job key unique to the run, deleted after):

- ``command``: ``python -m scrapy scale seed JOB --file FILE`` in a subprocess (start-up
  counted), the real entry point. When the command has no ``--file`` (before issue 11), the
  URLs go on its command line in chunks that fit ``ARG_MAX``, one process per chunk, as
  ``xargs`` would run it: the only way to hand it a million URLs.
- ``core``: the same operation in this process (``cli_ops.open_job`` + the seeding call the
  command makes), without the process start-up.
- ``feed`` (Redis only: SQLite has no feed): the URLs pushed as JSON strings to the job's
  feed key (``scale:{JOB}:seeds``, push time shown apart), then a frontier scheduler
  (``scrapy_scale.frontier.Scheduler`` of a real Crawler, run without a reactor) syncs
  back to back (``sync_blocking``) until the key is empty: the rate of the worker's sync
  loop with no pause between syncs (a running worker syncs at least every 0.25 s, and at
  once while there is more to do).

Every run checks that the frontier holds exactly the URLs' count of pending records, so a
broken path never shows up as a fast one. The URLs: ``--hosts`` hosts, one in ten with a
query string, all distinct.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PYTHON = sys.executable
#: bytes of URLs per command line when the command has no --file (ARG_MAX is 2 MiB here)
ARGV_BYTES = 1_500_000


def make_urls(n: int, hosts: int) -> Iterator[str]:
    for i in range(n):
        host = f"https://shop{i % hosts}.example.com"
        if i % 10 == 9:
            yield f"{host}/search?q=item+{i}&page={i % 7}"
        else:
            yield f"{host}/item/{i}"


def write_urls(path: Path, n: int, hosts: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for u in make_urls(n, hosts):
            f.write(u + "\n")


def command_has_file() -> bool:
    p = subprocess.run([PYTHON, "-m", "scrapy", "scale", "-h"], capture_output=True, text=True, env=_env())
    return "--file" in p.stdout


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _wait(argv: list[str], cwd: str) -> float:
    """Run ``argv`` to its end; its wall seconds."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... failed ({p.returncode}): {err[-2000:]}")
    return wall


def run_command(url_file: Path, frontier: str, job: str, workdir: str, use_file: bool) -> dict[str, Any]:
    base = [PYTHON, "-m", "scrapy", "scale", "seed", job]
    sets = ["-s", f"SCALE_FRONTIER_URL={frontier}", "-s", f"SCALE_STATE_DIR={workdir}"]
    c0 = os.times()
    wall = 0.0
    procs = 0
    if use_file:
        w = _wait([*base, "--file", str(url_file), *sets], workdir)
        wall, procs = w, 1
    else:
        chunk: list[str] = []
        size = 0
        with open(url_file, encoding="utf-8") as f:
            for line in f:
                u = line.strip()
                chunk.append(u)
                size += len(u) + 9
                if size >= ARGV_BYTES:
                    wall += _wait([*base, *chunk, *sets], workdir)
                    procs += 1
                    chunk, size = [], 0
        if chunk:
            wall += _wait([*base, *chunk, *sets], workdir)
            procs += 1
    c1 = os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    return {"seconds": wall, "cpu": cpu, "processes": procs}


def run_core(url_file: Path, frontier: str, job: str, workdir: str) -> dict[str, Any]:
    from scrapy.settings import Settings

    from scrapy_scale.frontier.ops import cli_ops

    settings = Settings({"SCALE_FRONTIER_URL": frontier, "SCALE_STATE_DIR": workdir})
    c0, t0 = time.process_time(), time.perf_counter()
    with cli_ops.open_job(settings, job, must_exist=False) as ops:
        if hasattr(ops, "seed_file"):  # what `scrapy scale seed JOB --file FILE` calls
            ops.seed_file(str(url_file))
        else:  # before issue 11: the command's call, on the whole list
            with open(url_file, encoding="utf-8") as f:
                ops.seed([line.strip() for line in f])
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "processes": 0}


def run_feed(url_file: Path, frontier: str, job: str, workdir: str) -> dict[str, Any]:
    import redis
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_scale.frontier.scheduling.scheduler import Scheduler

    class FeedSpider(Spider):
        name = "benchseed"

        def parse(self, response: Any) -> Any:  # pragma: no cover - never called
            yield from ()

    r = redis.Redis.from_url(frontier)
    key = f"scale:{{{job}}}:seeds"
    t0 = time.perf_counter()
    with open(url_file, encoding="utf-8") as f:
        pipe = r.pipeline(transaction=False)
        batch: list[str] = []
        for line in f:
            batch.append(json.dumps(line.strip()))
            if len(batch) >= 10_000:
                pipe.rpush(key, *batch)
                pipe.execute()
                batch = []
        if batch:
            pipe.rpush(key, *batch)
            pipe.execute()
    push = time.perf_counter() - t0
    crawler = get_crawler(FeedSpider, {"SCALE_FRONTIER_URL": frontier, "SCALE_JOB": job, "LOG_LEVEL": "WARNING"})
    sched = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()  # type: ignore[call-arg]
    sched.attach(FeedSpider())
    syncs = 0
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        while r.llen(key):
            sched.sync_blocking()
            syncs += 1
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        sched.store.close()
    return {"seconds": seconds, "cpu": cpu, "processes": 0, "push": push, "syncs": syncs}


def pending_count(frontier: str, job: str, workdir: str) -> dict[str, int]:
    from scrapy_scale.frontier.backends import open_store

    store = open_store(frontier, job, state_dir=workdir)
    try:
        return store.counts()
    finally:
        store.close()


def delete_job(redis_url: str, job: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    keys = list(r.scan_iter(match=f"scale:{{{job}}}*", count=1000))
    for i in range(0, len(keys), 500):
        r.unlink(*keys[i : i + 500])


def one(
    path: str, backend: str, url_file: Path, n: int, redis_url: str, use_file: bool, log: Callable[[str], None]
) -> dict[str, Any]:
    job = f"benchseed-{uuid.uuid4().hex[:8]}"
    workdir = tempfile.mkdtemp(prefix="bench-seed-")
    frontier = f"sqlite:///{workdir}/frontier.db" if backend == "sqlite" else redis_url
    try:
        if path == "command":
            res = run_command(url_file, frontier, job, workdir, use_file)
        elif path == "core":
            res = run_core(url_file, frontier, job, workdir)
        else:
            res = run_feed(url_file, frontier, job, workdir)
        counts = pending_count(frontier, job, workdir)
        leased = counts["leased"]  # the feed's scheduler leases its buffer as it syncs
        got = counts["pending"] + leased
        if got != n or counts["done"] or counts["failed"]:
            raise SystemExit(f"{path}/{backend}: expected {n} pending records, got {counts}")
        res["rate"] = n / res["seconds"]
        log(f"{path:8} {backend:7} {res['seconds']:7.1f} s  {res['rate']:9,.0f} URLs/s  {res}")
        return res
    finally:
        if backend == "redis":
            delete_job(redis_url, job)
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--urls", type=int, default=1_000_000, help="URLs to seed (default 1,000,000)")
    p.add_argument("--hosts", type=int, default=1000, help="distinct hosts among the URLs (default 1,000)")
    p.add_argument("--paths", default="command,core,feed", help="command, core, feed (default: all)")
    p.add_argument("--backends", default="sqlite,redis", help="sqlite, redis (default: both)")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = p.parse_args(argv)
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    backends = [x.strip() for x in args.backends.split(",") if x.strip()]
    if set(paths) - {"command", "core", "feed"} or set(backends) - {"sqlite", "redis"}:
        raise SystemExit("unknown path or backend")
    cmd = "python -m benchmarks.bench_seed " + " ".join(sys.argv[1:] if argv is None else argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="bench-seed-urls-"))
    try:
        url_file = tmp / "urls.txt"
        write_urls(url_file, args.urls, args.hosts)
        use_file = "command" in paths and command_has_file()
        load0 = os.getloadavg()
        rows = []
        for path in paths:
            for backend in backends:
                if path == "feed" and backend != "redis":
                    continue
                rows.append((path, backend, one(path, backend, url_file, args.urls, args.redis_url, use_file, log)))
        load1 = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    how = {
        "command": "`scrapy scale seed JOB --file FILE`"
        if use_file
        else f"`scrapy scale seed JOB URL...`, {ARGV_BYTES // 1000} kB of URLs per process",
        "core": "in-process, no start-up",
        "feed": "scheduler syncs back to back",
    }
    print(f"`{cmd.strip()}`")
    print()
    print(
        f"{args.urls:,} distinct URLs over {args.hosts} hosts; load average "
        f"{load0[0]:.2f} before, {load1[0]:.2f} after; {os.cpu_count()} cores."
    )
    print()
    print("| path | backend | how | seconds | URLs/s | CPU s | processes / syncs |")
    print("|---|---|---|---:|---:|---:|---:|")
    for path, backend, r in rows:
        extra = r["syncs"] if path == "feed" else r["processes"] or "-"
        print(
            f"| {path} | {backend} | {how[path]} | {r['seconds']:.1f} | {r['rate']:,.0f} | {r['cpu']:.1f} | {extra} |"
        )
    feed = [r for path, _, r in rows if path == "feed"]
    if feed:
        print()
        print(f"Feed: pushing the messages (RPUSH, 10,000 per call) took {feed[0]['push']:.1f} s, not counted above.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
