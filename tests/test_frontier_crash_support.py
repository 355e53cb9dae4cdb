"""Helpers (no tests here) for the crash and distributed tests of the persisted frontier.

A crawl is SIGKILLed (``os.kill(pid, SIGKILL)`` on the ``scrapy crawl`` process)
at seeded random moments and started again with the same command; afterwards
the testbed log, the item store and the frontier are read back.

The "moment" of a kill is chosen two ways, both from the seed: a few kills at a
random time after the process started (often during startup: imports, opening
the frontier, the first leases), the others once the frontier has ``done`` at a
random target count, plus a random 0-0.3 s (so the kill lands anywhere in the
scheduler's sync cycle). Progress targets keep the test from finishing early
with fewer kills on a fast machine, or never killing mid-crawl on a slow one.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scrapy_scale.frontier import open_store
from scrapy_scale.storage.backends import open_store as open_item_store
from scrapy_scale.testbed import Testbed
from tests.crawling import CrawlProcess, CrawlResult, start_crawl

#: a fast crawl on 2 shared cores, still with many requests in flight at each kill
CRASH_SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 32,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "LOG_LEVEL": "INFO",
    # a dead worker's leases are taken back at once by its restart (same worker id);
    # a short lease only matters for workers that never come back
    "SCALE_FRONTIER_LEASE": 10.0,
}


@dataclass
class CrashRun:
    kills: list[tuple[str, float, dict[str, int]]] = field(default_factory=list)
    final: CrawlResult | None = None
    runs: int = 0


def listing_paths(tb: Testbed) -> int:
    return tb.catalog.list_pages * len(tb.hosts)


def expected_requests(tb: Testbed) -> int:
    """Frontier records of a complete crawl: every listing page and every detail page."""
    return listing_paths(tb) + len(tb.detail_urls())


def frontier_counts(url: str, job: str) -> dict[str, int]:
    store = open_store(url, job)
    try:
        return store.counts()
    finally:
        store.close()


def _wait_done(proc: CrawlProcess, url: str, job: str, target: int, timeout: float) -> dict[str, int]:
    """Poll the frontier until ``done >= target`` or the crawl exits; the last counts."""
    store = open_store(url, job)
    try:
        deadline = time.monotonic() + timeout
        counts: dict[str, int] = {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                counts = store.counts()
            except Exception:  # noqa: BLE001 - the crawl may still be creating the layout
                counts = {}
            if counts.get("done", 0) >= target:
                return counts
            time.sleep(0.05)
        return counts
    finally:
        store.close()


def crash_and_resume(tb: Testbed, settings: dict[str, Any], tmp_path: Path, *, frontier_url: str, job: str,
                     kills: int, seed: int, total: int, timeout: float = 150,
                     time_kills: int = 3) -> CrashRun:
    """Run the crawl, SIGKILL it ``kills`` times at seeded random moments, restarting it
    with the same command each time, then let the last run finish."""
    rng = random.Random(seed)
    # progress targets spread over the crawl, ascending; a few kills are time-based instead
    targets = sorted(rng.sample(range(total // 20, total * 9 // 10), kills))
    # time-based kills among the earlier ones: late in the crawl a slow kill could come after the end
    timed = set(rng.sample(range(kills * 2 // 3), time_kills))
    out = CrashRun()
    for i in range(kills):
        proc = start_crawl(tb, settings, tmp_path)
        out.runs += 1
        if i in timed:
            time.sleep(rng.uniform(0.3, 3.0))
            counts: dict[str, int] = {}
            how = "time"
        else:
            counts = _wait_done(proc, frontier_url, job, targets[i], timeout=60)
            time.sleep(rng.uniform(0.0, 0.3))
            how = f"done>={targets[i]}"
        if proc.poll() is not None:
            raise AssertionError(
                f"run {i + 1} ended by itself (rc={proc.returncode}) before kill {i + 1} ({how}); "
                f"log tail:\n{proc.result().tail()}"
            )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        out.kills.append((how, time.monotonic() - proc.started, counts))
    proc = start_crawl(tb, settings, tmp_path)
    out.runs += 1
    out.final = proc.finish(timeout)
    return out


def served_ok_paths(tb: Testbed) -> set[tuple[str, str]]:
    return {(r.host, r.path) for r in tb.log if r.status == 200 and r.kind == "ok"}


def all_paths(tb: Testbed) -> set[tuple[str, str]]:
    per_host = tb.catalog.list_pages
    paths: set[tuple[str, str]] = set()
    for h in tb.hosts:
        paths.add((h, "/"))
        paths.update((h, f"/list/{n}") for n in range(2, per_host + 1))
        paths.update((h, f"/item/{n}") for n in range(1, tb.pages + 1))
    return paths


def stored_items(store_url: str) -> list[dict[str, Any]]:
    s = open_item_store(store_url, "items")
    s.open()
    try:
        return list(s.documents())
    finally:
        s.close()


def check_items_exact(tb: Testbed, docs: list[dict[str, Any]]) -> None:
    """The store holds exactly one row per detail page, each the page's expected item."""
    urls = [d["url"] for d in docs]
    dupes = len(urls) - len(set(urls))
    assert dupes == 0, f"{dupes} duplicate rows in the store"
    expected = tb.detail_urls()
    missing = expected - set(urls)
    extra = set(urls) - expected
    assert not missing and not extra, f"missing {len(missing)} (e.g. {sorted(missing)[:3]}), extra {len(extra)}"
    for d in docs:
        assert {k: d[k] for k in ("sku", "title", "price", "url")} == tb.expected_item(d["url"])
