"""Scheduler settings a Scrapy or scrapy-redis project already sets, with the frontier:
SCHEDULER_PERSIST = False and SCHEDULER_FLUSH_ON_START = True start the job over,
DUPEFILTER_CLASS = BaseDupeFilter turns deduplication off, and the settings with no
meaning here (another dupefilter, SCHEDULER_PRIORITY_QUEUE / DISK_QUEUE / MEMORY_QUEUE /
START_DISK_QUEUE / START_MEMORY_QUEUE)
get one startup warning each. A real Crawler and a real SQLite store, no reactor; and
real `scrapy crawl` runs for the start-over settings."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale.frontier.scheduling import scrapy_scheduler_settings
from scrapy_scale.frontier.scheduling.scheduler import Scheduler
from scrapy_scale.frontier.store import State
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.testbed import Testbed
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl


class S(Spider):
    name = "compat"

    def parse(self, response):  # pragma: no cover - never called
        yield from ()


def scheduler(tmp_path: Path, **settings: Any) -> Scheduler:
    crawler = get_crawler(
        S, {"SCALE_FRONTIER_URL": f"sqlite:///{tmp_path / 'f.db'}", "SCALE_FRONTIER_BATCH": 8, **settings}
    )
    s = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()
    s.attach(S())
    return s


def half_crawl(tmp_path: Path, **settings: Any) -> Scheduler:
    """A crawl that stops (killed, Ctrl-C, CLOSESPIDER_*) with 3 requests known, 1 leased."""
    s = scheduler(tmp_path, **settings)
    for i in range(3):
        s.enqueue_request(Request(f"http://a.test/{i}"))
    s.sync_blocking()
    assert s.next_request() is not None
    s.store.close()
    return s


def test_a_half_done_job_resumes_by_default_and_with_scheduler_persist_true(tmp_path: Path) -> None:
    half_crawl(tmp_path)
    for settings in ({}, {"SCHEDULER_PERSIST": True}, {"SCHEDULER_FLUSH_ON_START": False}):
        s = scheduler(tmp_path, **settings)
        assert s.stats.get_value("scale/frontier/run") == 1, settings
        assert sum(s.store.counts().values()) == 3
        s.store.close()


@pytest.mark.parametrize(
    "settings", [{"SCHEDULER_PERSIST": False}, {"SCHEDULER_FLUSH_ON_START": True}, {"SCHEDULER_PERSIST": "False"}]
)
def test_scheduler_persist_false_and_flush_on_start_make_each_crawl_a_new_run(tmp_path: Path, settings) -> None:
    first = half_crawl(tmp_path, **settings)
    assert first.stats.get_value("scale/frontier/run") == 1
    s = scheduler(tmp_path, **settings)  # this worker's own leases (same id) do not keep the old run
    assert s.stats.get_value("scale/frontier/run") == 2
    assert s.worker == first.worker
    assert sum(s.store.counts().values()) == 0
    s.store.close()


def test_a_worker_joining_a_job_others_crawl_does_not_throw_their_work_away(tmp_path: Path) -> None:
    half_crawl(tmp_path, SCALE_FRONTIER_WORKER="other-host/0")  # its lease has not expired: it lives
    s = scheduler(tmp_path, SCHEDULER_PERSIST=False)
    assert s.stats.get_value("scale/frontier/run") == 1
    assert sum(s.store.counts().values()) == 3
    s.store.close()


def _done(s: Scheduler, r: Request) -> None:
    o = Outcome(fingerprint=r.meta[meta_keys.FINGERPRINT], url=r.url, domain="a.test", cls=FailureClass.OK)
    s.crawler.signals.send_catch_log(scale_signals.outcome, outcome=o, request=r, spider=None)
    s.sync_blocking()


@pytest.mark.parametrize("dupefilter", ["scrapy.dupefilters.BaseDupeFilter", BaseDupeFilter, None])
def test_base_dupefilter_turns_deduplication_off(tmp_path: Path, dupefilter) -> None:
    s = scheduler(tmp_path, **({"DUPEFILTER_CLASS": dupefilter} if dupefilter else {}))
    s.enqueue_request(Request("http://a.test/page"))
    s.sync_blocking()
    r = s.next_request()
    assert r is not None
    _done(s, r)
    assert s.store.get(r.meta[meta_keys.FINGERPRINT])["state"] == State.DONE  # type: ignore[index]
    s.enqueue_request(Request("http://a.test/page"))  # the same URL again, no dont_filter
    s.sync_blocking()
    again = s.next_request()
    if dupefilter is None:  # Scrapy's RFPDupeFilter semantics: seen, dropped
        assert again is None and s.stats.get_value("scale/frontier/deduplicated") == 1
    else:  # fetched again
        assert again is not None and again.url == r.url
        assert s.stats.get_value("scale/frontier/enqueued") == 2
    s.store.close()


def test_settings_without_a_meaning_here_get_one_warning_each(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, "scrapy_scale"):
        s = scheduler(
            tmp_path,
            DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
            SCHEDULER_PRIORITY_QUEUE="scrapy.pqueues.DownloaderAwarePriorityQueue",
            SCHEDULER_DISK_QUEUE="scrapy.squeues.PickleFifoDiskQueue",
            SCHEDULER_MEMORY_QUEUE="scrapy.squeues.FifoMemoryQueue",
            SCHEDULER_START_DISK_QUEUE="scrapy.squeues.PickleLifoDiskQueue",
            SCHEDULER_START_MEMORY_QUEUE="scrapy.squeues.LifoMemoryQueue",
        )
        s.store.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name, instead in [
        ("DUPEFILTER_CLASS", "BaseDupeFilter"),
        ("SCHEDULER_PRIORITY_QUEUE", "round-robin"),
        ("SCHEDULER_START_DISK_QUEUE", "SCALE_FRONTIER_URL"),
        ("SCHEDULER_START_MEMORY_QUEUE", "set it to None"),
    ]:
        mine = [ln for ln in lines if ln.startswith(name + " = ")]
        assert len(mine) == 1 and "is not used" in mine[0] and instead in mine[0], (name, lines)
    assert s.scheduler_settings.dedup  # a dupefilter the frontier cannot use: deduplication stays on
    # Scrapy's FIFO queues (its breadth-first recipe) are followed: no warning, FIFO order
    assert not [ln for ln in lines if ln.startswith(("SCHEDULER_DISK_QUEUE", "SCHEDULER_MEMORY_QUEUE"))]
    assert s.scheduler_settings.fifo


def test_scrapys_defaults_and_its_own_dupefilter_say_nothing(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, "scrapy_scale"):
        s = scheduler(tmp_path, DUPEFILTER_CLASS="scrapy.dupefilters.RFPDupeFilter")
        s.store.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert s.scheduler_settings == scrapy_scheduler_settings.SchedulerSettings()


def test_scheduler_persist_false_in_real_crawls(tmp_path: Path) -> None:
    """A crawl stopped early (CLOSESPIDER_PAGECOUNT) leaves its run unfinished: the next
    `scrapy crawl` resumes it, unless SCHEDULER_PERSIST = False (then it is a new run)."""
    stop = {"CLOSESPIDER_PAGECOUNT": 3, "CONCURRENT_REQUESTS": 1}
    with Testbed(hosts=1, pages=8, seed=3) as tb:
        first = run_crawl(tb, stop, tmp_path, timeout=90)
        resumed = run_crawl(tb, stop, tmp_path, timeout=90)
        fresh = run_crawl(tb, {**stop, "SCHEDULER_PERSIST": False}, tmp_path, timeout=90)
    for res in (first, resumed, fresh):
        assert res.returncode == 0, res.tail()
    assert first.stats["scale/frontier/run"] == resumed.stats["scale/frontier/run"] == 1
    assert fresh.stats["scale/frontier/run"] == 2
    assert "SCHEDULER_PERSIST = False: job 'catalog' starts over" in fresh.log
