"""The scheduler's life on the reactor (frontier/scheduling/lifecycle.py), without running
one: a real Crawler and a real SQLite store, the tick called by the test, a Twisted
``task.Clock`` for the shutdown bound. A clean close runs in the crawl tests
(tests/crawl/test_frontier_scheduler.py, the Ctrl-C cases of test_frontier_contracts.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler
from twisted.internet import task

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as keys
from scrapy_scale.frontier.scheduling.ledger import OVERDUE_SLACK
from scrapy_scale.frontier.scheduling.lifecycle import OVERDUE_EVERY, SHUTDOWN_WRITE_SECONDS
from scrapy_scale.frontier.scheduling.scheduler import Scheduler
from scrapy_scale.frontier.store import State
from scrapy_scale.outcomes.model import FailureClass, Outcome
from tests.support.said import listening

pytestmark = pytest.mark.pure

LOGGER = "scrapy_scale.frontier.scheduling"


class S(Spider):
    name = "unit"

    def parse(self, response):  # pragma: no cover - never called
        yield from ()


@pytest.fixture
def sched(tmp_path: Path) -> Iterator[Scheduler]:
    settings = {"SCALE_FRONTIER_URL": f"sqlite:///{tmp_path / 'f.db'}", "DOWNLOAD_TIMEOUT": 10}
    crawler = get_crawler(S, settings)
    s = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()
    s.attach(S())
    yield s
    s.sync.stop_thread()
    s.store.close()


def handed_out(s: Scheduler, *urls: str) -> list[Request]:
    for url in urls:
        s.enqueue_request(Request(url))
    s.sync_blocking()
    out = [s.next_request() for _ in urls]
    assert all(r is not None for r in out)
    return out  # type: ignore[return-value]


def finished(s: Scheduler, r: Request) -> None:
    o = Outcome(fingerprint=r.meta[meta_keys.FINGERPRINT], url=r.url, domain="a.test", cls=FailureClass.OK, final=True)
    s.crawler.signals.send_catch_log(scale_signals.outcome, outcome=o, request=r, spider=None)


def state(s: Scheduler, r: Request) -> State:
    rec = s.store.get(r.meta[meta_keys.FINGERPRINT])
    assert rec is not None
    return rec["state"]  # type: ignore[return-value]


def test_every_twentieth_tick_names_a_request_in_flight_too_long_once(sched: Scheduler) -> None:
    (r,) = handed_out(sched, "http://a.test/hangs")
    late = 10 + OVERDUE_SLACK + 1  # DOWNLOAD_TIMEOUT + the slack, passed
    sched.lifecycle.monotonic = lambda: time.monotonic() + late
    with listening(LOGGER) as said:
        for _ in range(OVERDUE_EVERY - 1):
            sched.lifecycle.tick()
        assert not said.lines and not sched.stats.get_value(keys.FRONTIER_OVERDUE)
        for _ in range(OVERDUE_EVERY + 1):  # the 20th tick names it, the 40th not again
            sched.lifecycle.tick()
    assert sched.lifecycle.ticks == 2 * OVERDUE_EVERY
    assert sched.stats.get_value(keys.FRONTIER_OVERDUE) == 1
    assert len(said.lines) == 1 and "http://a.test/hangs was handed to the engine" in said.lines[0], said.lines
    assert state(sched, r) == State.LEASED


def test_a_reactor_that_stops_first_gets_the_settled_writes_within_the_bound_and_the_leases_stay(
    sched: Scheduler,
) -> None:
    """A second Ctrl-C stops the reactor with the spider open: what is settled is written,
    what is not keeps its lease (the restarted worker takes it back), the wait for the
    store is bounded, and nothing more runs (no sync, no second write)."""
    clock = task.Clock()
    sched.lifecycle.reactor = clock
    assert sched.lifecycle.reactor_stops() is None  # no store thread yet: nothing to write
    assert not sched.lifecycle.closing
    done, open_ = handed_out(sched, "http://a.test/done", "http://a.test/open")
    finished(sched, done)
    sched.sync.start_thread()
    with listening(LOGGER) as said:
        d = sched.lifecycle.reactor_stops()
        assert d is not None
        assert sched.lifecycle.closing and sched.rounds.closing and sched.buffer.closing
        deadline = time.monotonic() + 30  # the store thread writes while the reactor does not run
        while state(sched, done) != State.DONE:
            assert time.monotonic() < deadline, "the settled ack was not written"
            time.sleep(0.01)
        assert state(sched, open_) == State.LEASED
        assert [c.getTime() for c in clock.getDelayedCalls()] == [SHUTDOWN_WRITE_SECONDS]
        clock.advance(SHUTDOWN_WRITE_SECONDS)  # the answer never came back: the process may exit
        assert sched.lifecycle.reactor_stops() is None  # once
    assert said.lines[0].startswith("frontier: the reactor stops before the spider closed; writing 1 settled op(s)")
    assert said.lines[1].startswith("frontier: final write at shutdown failed"), said.lines
    assert len(said.lines) == 2
    sched.lifecycle.tick()
    assert sched.sync.running is None  # a tick after the end starts no sync
