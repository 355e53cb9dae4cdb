"""kill -9 and resume, on both backends: a 2,000-page testbed crawl SIGKILLed at
11 seeded random moments, restarted each time with the same ``scrapy crawl``
command. Afterwards every page was crawled, the item store holds exactly the
expected items with no duplicates, and the frontier reconciles (done == pages).

Real processes, real SIGKILL, real stores (SQLite files; Redis + a MongoDB wire server).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crash_support import (
    CRASH_SETTINGS,
    all_paths,
    check_items_exact,
    crash_and_resume,
    expected_requests,
    frontier_counts,
    served_ok_paths,
    stored_items,
)

# not serial: every kill is at a moment of progress (a frontier count or a log line) and the
# held page keeps each run open until its kill, so a loaded machine only makes it slower
pytestmark = pytest.mark.crawl

HOSTS, PAGES = 4, 500  # 2,000 detail pages (items) + 100 listing pages
KILLS = 11


def _check(tb: Testbed, run, frontier_url: str, job: str, store_url: str) -> None:
    total = expected_requests(tb)
    final = run.final
    assert final is not None and final.returncode == 0, final.tail() if final else "no final run"
    assert len(run.kills) == KILLS
    # the last run resumed the run the kills interrupted (it did not start over)
    assert "run 1 (resumed)" in final.log, final.tail()
    # every page crawled (served with 200 at least once)
    missing = all_paths(tb) - served_ok_paths(tb)
    assert not missing, f"{len(missing)} pages never crawled, e.g. {sorted(missing)[:5]}"
    # the store: exactly the expected items, no duplicates
    check_items_exact(tb, stored_items(store_url))
    # the frontier reconciles: every request done, nothing pending, leased, delayed or failed
    counts = frontier_counts(frontier_url, job)
    assert counts == {"pending": 0, "delayed": 0, "leased": 0, "done": total, "failed": 0}, counts
    # resume, not restart: work redone after the kills is bounded by what was in flight
    # or leased at each kill (batch + concurrency, generously), far below a re-crawl per kill
    item_fetches = sum(1 for r in tb.log if r.path.startswith("/item/"))
    assert item_fetches < len(tb.detail_urls()) + KILLS * 250, item_fetches


def _crash_test(tmp_path: Path, job: str, frontier_url: str, store_url: str, seed: int) -> None:
    settings = {**CRASH_SETTINGS, "SCALE_JOB": job, "SCALE_FRONTIER_URL": frontier_url, "SCALE_STORE_URL": store_url}
    with Testbed(hosts=HOSTS, pages=PAGES, seed=seed) as tb:
        run = crash_and_resume(
            tb,
            settings,
            tmp_path,
            frontier_url=frontier_url,
            job=job,
            kills=KILLS,
            seed=20261130 + seed,
            total=expected_requests(tb),
        )
        _check(tb, run, frontier_url, job, store_url)


@pytest.mark.timeout(600)
def test_sqlite_frontier_survives_kill9_at_random_moments(tmp_path: Path) -> None:
    _crash_test(
        tmp_path,
        "crash",
        f"sqlite:///{tmp_path}/state/frontier.db",
        f"sqlite:///{tmp_path}/state/items.sqlite",
        seed=11,
    )


@pytest.mark.timeout(600)
def test_redis_frontier_mongodb_store_survive_kill9_at_random_moments(
    tmp_path: Path, redis_url: str, redis_prefix: str, mongo_uri: str
) -> None:
    # job = redis_prefix: the fixture deletes the job's keys afterwards
    _crash_test(tmp_path, redis_prefix, redis_url, f"{mongo_uri.rstrip('/')}/crash_{uuid.uuid4().hex[:8]}", seed=12)
