"""Failing frontier syncs: backoff, a bounded log, a deadline (SyncTrouble, plain Python), and
the scheduler stopping the crawl on an error that cannot pass instead of retrying it forever."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from scrapy_scale import exitcode
from scrapy_scale.frontier.scheduling.scheduler import Scheduler
from scrapy_scale.frontier.scheduling.trouble import SyncTrouble
from tests.crawl.test_frontier_store import corruption_error

pytestmark = pytest.mark.crawl


def test_failures_back_off_log_once_per_period_and_give_up_past_the_deadline() -> None:
    t = SyncTrouble(deadline=100.0, log_every=30.0, base=0.25, cap=5.0)
    lines = []
    now = 0.0
    while True:  # a failing sync every time the backoff allows one
        assert t.may_sync(now)
        line, give_up = t.failed(now, "OperationalError: database or disk is full")
        if line:
            lines.append((now, line))
        if give_up:
            break
        assert not t.may_sync(now)
        now = t.retry_at
    assert lines[0] == (
        0.0,
        "frontier sync failed (will retry with backoff): OperationalError: database or disk is full",
    )
    # before: one ERROR line per 0.25 s tick (~400 over 100 s); now at most one per 30 s
    assert len(lines) <= 2 + 100 / 30, lines
    assert t.failures < 40  # backoff: delays double up to 5 s
    assert "still failing: " in lines[1][1] and "failures in the last" in lines[1][1]
    assert "past the deadline of 100 s" in lines[-1][1]


def test_recovery_is_logged_and_resets_the_backoff() -> None:
    t = SyncTrouble(deadline=0.0)
    assert t.succeeded(1.0) is None
    for i in range(5):
        t.failed(float(i), "x")
    assert t.failed(10_000.0, "x")[1] is False  # deadline 0: never gives up
    assert t.succeeded(10_001.0) == "frontier sync works again after 6 failures over 10001 s"
    assert t.may_sync(10_001.0) and t.failures == 0


class S(Spider):
    name = "trouble"


@pytest.fixture
def sched(tmp_path: Path):
    crawler = get_crawler(S, {"SCALE_FRONTIER_URL": f"sqlite:///{tmp_path / 'f.db'}"})
    s = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()
    s.attach(S())
    yield s
    s.store.close()
    exitcode.reset()


def test_a_corrupt_frontier_during_the_crawl_stops_it_with_exit_1(sched: Scheduler, tmp_path: Path) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    sched.rounds.failed(corruption_error(tmp_path))
    assert len(sched.outbox) == 1  # kept, never written to a store that cannot be trusted
    msg = sched.crawler.stats.get_value("scale/frontier/error")
    assert msg and "is corrupt" in msg and "PRAGMA integrity_check" in msg
    assert exitcode.requested() is not None and exitcode.requested()[0] == 1
    sched.sync.start_thread()  # as if open: no sync may start again
    try:
        sched.rounds.kick()
        assert sched.sync.running is None
    finally:
        sched.sync.stop_thread()


def test_disk_full_is_retried_with_backoff(sched: Scheduler) -> None:
    sched.rounds.failed(sqlite3.OperationalError("database or disk is full"))
    assert sched.sync.fatal is None and sched.sync.trouble.failures == 1
    assert exitcode.requested() is None
    sched.sync.start_thread()
    try:
        sched.rounds.kick()  # within the backoff: no sync
        assert sched.sync.running is None
    finally:
        sched.sync.stop_thread()


@pytest.mark.timeout(200)
def test_a_crawl_on_a_garbled_sqlite_frontier_stops_at_once_naming_the_file(tmp_path: Path) -> None:
    # before: the resume leased what it could read, then logged 'Crawled N pages (at 0 pages/min)' forever
    from scrapy_scale.testbed import Testbed
    from tests.crawl.test_frontier_store import _filled_sqlite_frontier, _garble
    from tests.support.crawling import run_crawl

    (tmp_path / "state").mkdir()
    path = tmp_path / "state" / "frontier.db"
    _filled_sqlite_frontier(path, job="catalog")  # an unfinished run of the job, 2,000 records
    _garble(path)
    with Testbed(hosts=1, pages=5, seed=3) as tb:
        res = run_crawl(tb, {"LOG_LEVEL": "INFO"}, tmp_path, timeout=120)
    assert res.returncode == 1, res.tail()
    assert f"the SQLite frontier '{path}' is corrupt" in res.log and "PRAGMA integrity_check" in res.log, res.tail()
