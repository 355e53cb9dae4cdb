"""Helpers (no tests here) for the crash and distributed tests of the persisted frontier.

A crawl is SIGKILLed (``os.kill(pid, SIGKILL)`` on the ``scrapy crawl`` process)
at seeded random moments and started again with the same command; afterwards
the testbed log, the item store and the frontier are read back.

The "moment" of a kill is chosen from progress, never from the clock, both ways
from the seed: a few kills at a startup milestone (Scrapy opened the spider, the
frontier joined the run and took its leases back, the first ack of this process),
the others once the frontier has ``done`` at a random target count (the test polls
every 50 ms, so the kill lands anywhere in the scheduler's 0.25 s sync cycle).

While the kills go on, one detail page never answers (:data:`HOLD`, a testbed
``hang`` fault; Scrapy's 180 s download timeout is longer than any killed run), so
no killed run can drain the job and end by itself before its kill, however fast the
machine: the race of the 11th kill against the crawl's end (the run finished, then
the SIGKILL landed, and the last run started a new run instead of resuming) cannot
happen. The fault is lifted for the last run, which then drains the job.
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
from tests.support.crawling import CrawlProcess, CrawlResult, start_crawl
from tests.support.hang import hang_guard

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


#: the page that hangs while the kills go on (host 1's first detail page)
HOLD = "hang@1:/item/1"

#: startup milestones a kill can wait for: a line of the crawl's log, or "acked" (done grew)
MILESTONES = ("Spider opened", "took back", "acked")


def _counts_or_empty(store: Any) -> dict[str, int]:
    try:
        return store.counts()  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - the crawl may still be creating the layout
        return {}


def _wait_progress(
    proc: CrawlProcess,
    url: str,
    job: str,
    *,
    done: int | None = None,
    milestone: str | None = None,
    timeout: float = 60,
) -> dict[str, int]:
    """Poll until the frontier has ``done`` records done, or the crawl reached
    ``milestone`` (see MILESTONES), or the crawl exits; the last counts."""
    store = open_store(url, job)
    log = proc.run_dir / "crawl.log"
    try:
        first = _counts_or_empty(store).get("done", 0)
        deadline = time.monotonic() + hang_guard(timeout)
        counts: dict[str, int] = {}
        while time.monotonic() < deadline and proc.poll() is None:
            counts = _counts_or_empty(store)
            if done is not None and counts.get("done", 0) >= done:
                return counts
            if milestone == "acked" and counts.get("done", 0) > first:
                return counts
            if milestone and milestone != "acked" and milestone in log.read_text(errors="replace"):
                return counts
            time.sleep(0.05)
        raise AssertionError(
            f"no progress to {done if done is not None else milestone!r} within {timeout}s "
            f"(rc={proc.poll()}); last counts {counts}; log tail:\n{proc.result().tail()}"
        )
    finally:
        store.close()


def _run_ended(url: str, job: str) -> bool:
    store = open_store(url, job)
    try:
        runs = store.runs()
        return bool(runs) and runs[-1].ended_at is not None
    finally:
        store.close()


def crash_and_resume(
    tb: Testbed,
    settings: dict[str, Any],
    tmp_path: Path,
    *,
    frontier_url: str,
    job: str,
    kills: int,
    seed: int,
    total: int,
    timeout: float = 150,
    startup_kills: int = 3,
) -> CrashRun:
    """Run the crawl, SIGKILL it ``kills`` times at seeded random moments of progress,
    restarting it with the same command each time, then let the last run finish."""
    rng = random.Random(seed)
    # progress targets spread over the crawl, ascending; a few kills are at startup milestones
    targets = sorted(rng.sample(range(total // 20, total * 9 // 10), kills))
    at_startup = set(rng.sample(range(kills), startup_kills))
    out = CrashRun()
    tb.set_faults(HOLD)  # no killed run can drain the job before its kill
    for i in range(kills):
        proc = start_crawl(tb, settings, tmp_path)
        out.runs += 1
        if i in at_startup:
            how = rng.choice(MILESTONES)
            counts = _wait_progress(proc, frontier_url, job, milestone=how)
        else:
            counts = _wait_progress(proc, frontier_url, job, done=targets[i])
            how = f"done>={targets[i]}"
        if proc.poll() is not None:
            raise AssertionError(
                f"run {i + 1} ended by itself (rc={proc.returncode}) before kill {i + 1} ({how}); "
                f"log tail:\n{proc.result().tail()}"
            )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(hang_guard(30))
        assert proc.returncode == -signal.SIGKILL
        # holds whichever way the kill raced the crawl: the held page keeps the run open
        assert not _run_ended(frontier_url, job), f"run {i + 1} ended before kill {i + 1} ({how})"
        out.kills.append((how, time.monotonic() - proc.started, counts))
    tb.set_faults([])
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
