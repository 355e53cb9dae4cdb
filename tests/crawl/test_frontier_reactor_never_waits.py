"""The reactor thread never waits for Redis. A write of the outbox on the reactor thread
(the first request while the engine waits for one, or a burst of start requests) took the
store's lock and called Redis: with Redis killed just after the frontier joined, the
reactor waited there, behind a round that waited for Redis, and the whole crawl fell
silent (no download, no LogStats line) until Redis came back. Now that write is left to
the store thread's rounds. A real Redis, killed and started again; the scheduler run
without a reactor (its rounds in the test's threads)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from scrapy_scale.frontier.scheduling.scheduler import Scheduler
from scrapy_scale.frontier.scheduling.sync import FLUSH_WAIT

pytestmark = [pytest.mark.crawl]

DEFERRED = "scale/frontier/outbox_flushes_deferred"


class S(Spider):
    name = "never-waits"


@pytest.fixture
def sched(redis_server: Any) -> Iterator[Scheduler]:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    crawler = get_crawler(S, {"SCALE_FRONTIER_URL": url, "SCALE_FRONTIER_BATCH": 8, "SCALE_JOB": "never-waits"})
    s = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()
    s.attach(S())
    yield s
    s.store.close()


def engine_waits(s: Scheduler) -> None:
    """The engine took the one request and asks again: the next enqueue is written at once."""
    s.enqueue_request(Request("http://a.test/1"))
    s.sync_blocking()
    assert s.next_request().url == "http://a.test/1"
    assert s.next_request() is None


def test_an_enqueue_with_redis_down_returns_at_once_and_the_next_round_writes_it(
    sched: Scheduler, redis_server: Any
) -> None:
    engine_waits(sched)
    redis_server.kill()
    t0 = time.monotonic()
    sched.enqueue_request(Request("http://a.test/2"))
    took = time.monotonic() - t0
    assert sched.crawler.stats.get_value(DEFERRED) == 1  # the path ran: the write was left to a round
    assert took < FLUSH_WAIT, took  # before: until Redis came back
    assert len(sched.outbox) == 1 and not sched.buffer
    redis_server.start()
    sched.sync_blocking()  # a round waits for Redis, then writes and leases it
    assert sched.next_request().url == "http://a.test/2"
    assert sched.store.counts()["pending"] == 0  # both leased, neither written twice


def test_an_enqueue_behind_a_round_that_waits_for_redis_returns_after_the_flush_wait(
    sched: Scheduler, redis_server: Any
) -> None:
    engine_waits(sched)
    redis_server.kill()
    sched.enqueue_request(Request("http://a.test/2"))  # left to a round (the test above)
    # a round in another thread (the store thread's): it holds the store and waits for Redis
    rnd = threading.Thread(target=sched.sync_blocking, daemon=True)
    rnd.start()
    deadline = time.monotonic() + 10
    while not sched.sync.lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sched.sync.lock.locked() and rnd.is_alive()
    assert sched.next_request() is None  # the engine asks again
    t0 = time.monotonic()
    sched.enqueue_request(Request("http://a.test/3"))
    took = time.monotonic() - t0
    assert sched.crawler.stats.get_value(DEFERRED) == 2  # the path ran
    assert took < FLUSH_WAIT + 1.0, took  # at most the flush wait; before: until Redis came back
    assert rnd.is_alive()  # the round still waits
    redis_server.start()
    rnd.join(30)
    assert not rnd.is_alive()
    sched.sync_blocking()
    got = {sched.next_request().url for _ in range(2)}
    assert got == {"http://a.test/2", "http://a.test/3"}
