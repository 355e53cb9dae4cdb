"""The worker's known fingerprints (``frontier/scheduling/known.py``): a plain request for a
fingerprint the store answered for, or leased to this worker, is the duplicate the store
would answer, counted without a store call; anything that may change the record
(``dont_filter``, a retry) still goes to the store; a failed store call forgets all.
Real Crawler, real SQLite store, syncs in the test's thread."""

from __future__ import annotations

from pathlib import Path

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale.frontier.scheduling.known import KnownFingerprints
from scrapy_scale.frontier.scheduling.scheduler import Scheduler
from scrapy_scale.frontier.store import EnqueueResult, NewRequest
from scrapy_scale.outcomes.model import FailureClass, Outcome
from tests.unit.test_frontier_scheduler_unit import S, lease_one

pytestmark = pytest.mark.pure


def scheduler(tmp_path: Path, **settings: object) -> Scheduler:
    crawler = get_crawler(S, {"SCALE_FRONTIER_URL": f"sqlite:///{tmp_path / 'f.db'}", **settings})
    s = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()
    s.attach(S())
    return s


@pytest.fixture
def sched(tmp_path: Path) -> Scheduler:
    s = scheduler(tmp_path)
    yield s
    s.store.close()


def done(s: Scheduler, r: Request) -> None:
    """``r``'s final outcome, as the outcome middlewares send it."""
    o = Outcome(fingerprint=r.meta[meta_keys.FINGERPRINT], url=r.url, domain="a.test", cls=FailureClass.OK)
    s.crawler.signals.send_catch_log(scale_signals.outcome, outcome=o, request=r, spider=None)


def stat(s: Scheduler, name: str) -> object:
    return s.crawler.stats.get_value(f"scale/frontier/{name}")


def test_the_oldest_learned_is_forgotten_first_and_a_failure_forgets_all() -> None:
    k = KnownFingerprints(3)
    k.learn(["a", "b", "c"])
    k.learn(["a", "d"])  # a is known already: it keeps its place, the oldest (a) goes
    assert [fp for fp in "abcde" if fp in k] == ["b", "c", "d"]
    k.learn(["e", "f", "g", "h"])  # more at once than it holds: the last three stay
    assert [fp for fp in "bcdefgh" if fp in k] == ["f", "g", "h"]
    assert k.answered("h") and not k.answered("b") and k.hits == 1
    k.forget()
    assert len(k) == 0 and not k.answered("h")


def test_a_stale_answer_teaches_nothing_and_a_capacity_of_0_learns_nothing() -> None:
    k = KnownFingerprints(10)
    ops = [("enq", NewRequest("a", "d", "x.test")), ("ack", ("z", 1)), ("enq", NewRequest("b", "d", "x.test"))]
    k.learn_written(ops, [EnqueueResult.STALE, EnqueueResult.DUPLICATE])
    assert "a" not in k and "b" in k  # answers pair with the enqueues in order, acks skipped
    off = KnownFingerprints(0)
    off.learn(["a"])
    off.learn_written(ops, [EnqueueResult.ADDED, EnqueueResult.ADDED])
    assert len(off) == 0


def test_a_link_the_store_answered_for_is_a_duplicate_without_a_store_call(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    sched.sync_blocking()  # the store answers: added
    assert len(sched.known) == 1
    sched.enqueue_request(Request("http://a.test/1"))  # the same link on the next page
    assert len(sched.outbox) == 0  # not queued for the store: answered here
    assert sched.known.hits == 1
    assert stat(sched, "deduplicated") == 1 and stat(sched, "deduplicated_in_worker") == 1
    sched.sync_blocking()
    assert sched.store.counts()["pending"] + sched.store.counts()["leased"] == 1


def test_with_the_cache_off_the_store_answers_every_duplicate(tmp_path: Path) -> None:
    s = scheduler(tmp_path, SCALE_FRONTIER_KNOWN=0)
    try:
        s.enqueue_request(Request("http://a.test/1"))
        s.sync_blocking()
        s.enqueue_request(Request("http://a.test/1"))
        assert len(s.outbox) == 1  # queued for the store
        s.sync_blocking()
        assert stat(s, "deduplicated") == 1 and stat(s, "deduplicated_in_worker") is None
        assert s.known.hits == 0 and len(s.known) == 0
    finally:
        s.store.close()


def test_a_leased_request_is_known_and_dont_filter_or_a_retry_still_goes_to_the_store(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    fp = r.meta[meta_keys.FINGERPRINT]
    assert fp in sched.known
    done(sched, r)
    sched.sync_blocking()
    assert sched.store.counts()["done"] == 1
    sched.enqueue_request(Request("http://a.test/1", dont_filter=True))  # fetched again, whatever its state
    assert len(sched.outbox) == 1 and sched.known.hits == 0
    again = lease_one(sched)  # reopened by the store
    assert again.url == "http://a.test/1" and stat(sched, "enqueued") == 2
    retry = again.replace(dont_filter=True)
    retry.meta[meta_keys.ATTEMPT] = 2
    sched.enqueue_request(retry)  # a retry updates its record: never answered here
    assert len(sched.outbox) == 1 and sched.known.hits == 0
    sched.sync_blocking()
    assert stat(sched, "updated") == 1


def test_after_a_failed_store_call_the_store_is_asked_again(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    sched.sync_blocking()
    assert len(sched.known) == 1
    # every failed sync or write goes through Rounds.trouble: what the store holds may have
    # changed (a failover to a replica that had not caught up)
    sched.rounds.trouble(ConnectionError("the store went away"))
    assert stat(sched, "sync_errors") == 1 and len(sched.known) == 0
    sched.enqueue_request(Request("http://a.test/1"))
    assert len(sched.outbox) == 1  # asked of the store
    sched.sync_blocking()
    assert stat(sched, "deduplicated") == 1 and stat(sched, "deduplicated_in_worker") is None
    assert len(sched.known) == 1  # learned again from its answer
