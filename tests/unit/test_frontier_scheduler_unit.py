"""The scheduler's contract handling, without a reactor: a real Crawler and a real
SQLite store, syncs run in the test's thread (``sync_blocking``).

Contracts 2 (retries update their record) and 3 (ack = done-class final
outcome + all its items seen; a terminal failure keeps class and reason) of
docs/architecture.md ("The contracts, numbered"),
dedup rules for start requests and dont_filter, and dead letters.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from scrapy import Request, Spider, signals
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale.frontier.scheduling.scheduler import Scheduler
from scrapy_scale.frontier.scheduling.waiting import HELD_CAP
from scrapy_scale.frontier.store import State
from scrapy_scale.outcomes.model import FailureClass, Outcome

pytestmark = pytest.mark.pure


class S(Spider):
    name = "unit"

    def parse(self, response):  # pragma: no cover - never called
        yield from ()


@pytest.fixture
def sched(tmp_path: Path) -> Scheduler:
    crawler = get_crawler(S, {"SCALE_FRONTIER_URL": f"sqlite:///{tmp_path / 'f.db'}", "SCALE_FRONTIER_BATCH": 8})
    s = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()
    s.attach(S())
    yield s
    s.store.close()


def lease_one(s: Scheduler) -> Request:
    s.sync_blocking()
    r = s.next_request()
    assert r is not None
    return r


def outcome(
    r: Request, cls: FailureClass = FailureClass.OK, items: int = 0, final: bool = True, reason: str = ""
) -> None:
    o = Outcome(
        fingerprint=r.meta[meta_keys.FINGERPRINT],
        url=r.url,
        domain="a.test",
        cls=cls,
        reason=reason,
        items=items,
        final=final,
    )
    crawler = sched_crawler[0]
    crawler.signals.send_catch_log(scale_signals.outcome, outcome=o, request=r, spider=None)


sched_crawler: list = []


@pytest.fixture(autouse=True)
def _keep_crawler(sched: Scheduler) -> None:
    sched_crawler[:] = [sched.crawler]


def item(s: Scheduler, r: Request) -> None:
    resp = HtmlResponse(r.url, body=b"<html></html>", request=r)
    s.crawler.signals.send_catch_log(signals.item_scraped, item={"x": 1}, response=resp, spider=None)


def state(s: Scheduler, r: Request) -> State:
    rec = s.store.get(r.meta[meta_keys.FINGERPRINT])
    assert rec is not None
    return rec["state"]  # type: ignore[return-value]


def test_ack_waits_for_every_item_of_the_request(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    item(sched, r)  # an item may be stored before the outcome is sent
    outcome(r, items=3)
    sched.sync_blocking()
    assert state(sched, r) == State.LEASED
    item(sched, r)
    sched.sync_blocking()
    assert state(sched, r) == State.LEASED
    item(sched, r)
    sched.sync_blocking()
    assert state(sched, r) == State.DONE
    outcome(r, items=3)  # a second final outcome does not ack twice
    assert sched.crawler.stats.get_value("scale/frontier/acked") == 1
    # nothing left as of the last sync: pending until a sync has finished the run (so the
    # engine calls the spider idle only once the end is known)
    assert sched.has_pending_requests() and sched.rounds.finish_requested
    res = sched.sync_blocking()
    assert res.finished_run and not sched.has_pending_requests()


def test_a_request_whose_item_was_not_stored_is_never_acked_and_is_released_at_close(sched: Scheduler) -> None:
    from twisted.python.failure import Failure

    from scrapy_scale.storage.backends import StoreBroken

    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    resp = HtmlResponse(r.url, body=b"<html></html>", request=r)
    outcome(r, items=2)
    item(sched, r)
    sched.crawler.signals.send_catch_log(
        signals.item_error,
        item={"x": 2},
        response=resp,
        spider=None,
        failure=Failure(StoreBroken("store cannot be written")),
    )
    sched.sync_blocking()
    sched.inflight.settle_finished()  # the engine is done with it: still no ack
    sched.sync_blocking()
    assert state(sched, r) == State.LEASED
    assert not sched.crawler.stats.get_value("scale/frontier/acked")
    sched.store.release(sched.worker, list(sched.inflight))  # what close() does with held leases
    assert state(sched, r) == State.PENDING


def test_terminal_failure_keeps_class_and_reason(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    outcome(r, FailureClass.BLOCKED, final=False)  # will be retried: no change
    sched.sync_blocking()
    assert state(sched, r) == State.LEASED
    outcome(r, FailureClass.BLOCKED, reason="403 from target")
    sched.sync_blocking()
    rec = sched.store.get(r.meta[meta_keys.FINGERPRINT])
    assert rec["state"] == State.FAILED and rec["last_failure"] == ("blocked", "403 from target")  # type: ignore[index]


def test_a_retry_updates_its_record_and_is_held_until_eligible(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    retry = r.replace(
        dont_filter=True,
        meta={
            **r.meta,
            meta_keys.ATTEMPT: 2,
            meta_keys.NOT_BEFORE: time.time() + 60,
            meta_keys.LAST_FAILURE: ["rate_limited", "HTTP 429"],
        },
    )
    sched.enqueue_request(retry)
    sched.sync_blocking()
    rec = sched.store.get(r.meta[meta_keys.FINGERPRINT])
    assert rec["state"] == State.PENDING and rec["attempts"] == 1  # type: ignore[index]
    assert rec["last_failure"] == ("rate_limited", "HTTP 429")  # type: ignore[index]
    assert rec["eligible_at"] > time.time() + 50  # type: ignore[index,operator]
    assert sched.store.counts()["delayed"] == 1
    assert sched.next_request() is None and sched.has_pending_requests()
    # the first attempt's outcome arrives late: it must not ack the pending retry
    outcome(r)
    sched.sync_blocking()
    assert sched.store.counts()["done"] == 0


def test_a_redirect_continues_its_record_but_copied_meta_does_not(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/old"))
    r = lease_one(sched)
    fp = r.meta[meta_keys.FINGERPRINT]
    moved = r.replace(url="http://a.test/new", meta={**r.meta, "redirect_urls": ["http://a.test/old"]})
    sched.enqueue_request(moved)
    assert moved.meta[meta_keys.FINGERPRINT] == fp
    child = Request("http://a.test/child", meta=dict(r.meta))  # meta=response.meta, a common idiom
    sched.enqueue_request(child)
    assert child.meta[meta_keys.FINGERPRINT] != fp
    sched.sync_blocking()
    c = sched.store.counts()
    assert c["pending"] + c["leased"] == 2 and c["done"] == 0  # the record holds the redirect target now
    urls = {sched.next_request().url for _ in range(2)}  # type: ignore[union-attr]
    assert urls == {"http://a.test/new", "http://a.test/child"}


def test_same_url_with_copied_meta_is_a_duplicate_not_a_retry(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    again = Request(r.url, meta=dict(r.meta))  # no dont_filter: Scrapy would filter it
    sched.enqueue_request(again)
    sched.sync_blocking()
    assert state(sched, r) == State.LEASED  # not reset to pending (that would loop forever)
    assert sched.crawler.stats.get_value("scale/frontier/deduplicated") == 1


def test_start_requests_dedup_even_with_dont_filter_other_dont_filter_reopens(sched: Scheduler) -> None:
    seed = Request("http://a.test/", dont_filter=True, meta={"is_start_request": True})
    sched.enqueue_request(seed)
    r = lease_one(sched)
    outcome(r)
    sched.sync_blocking()
    # a resumed crawl yields its seeds again: done seeds are not crawled again
    sched.enqueue_request(Request("http://a.test/", dont_filter=True, meta={"is_start_request": True}))
    sched.sync_blocking()
    assert sched.store.counts() == {"pending": 0, "delayed": 0, "leased": 0, "done": 1, "failed": 0}
    assert sched.crawler.stats.get_value("scale/frontier/deduplicated") == 1
    # a dont_filter request from a callback means "fetch again"
    sched.enqueue_request(Request("http://a.test/", dont_filter=True))
    sched.sync_blocking()
    c = sched.store.counts()
    assert c["pending"] + c["leased"] == 1 and c["done"] == 0


def test_an_unreadable_record_is_dead_lettered_and_the_crawl_goes_on(sched: Scheduler) -> None:
    from scrapy_scale.frontier.store import NewRequest

    sched.store.enqueue([NewRequest("bad", "{not json", "a.test", priority=5)])
    sched.enqueue_request(Request("http://a.test/ok"))
    sched.sync_blocking()
    r = sched.next_request()
    assert r is not None and r.url == "http://a.test/ok"
    sched.sync_blocking()
    (d,) = sched.store.dead_letters()
    assert d.fingerprint == "bad" and "not JSON" in d.reason
    assert sched.crawler.stats.get_value("scale/frontier/dead_lettered") == 1


def test_a_record_with_a_garbled_field_is_dead_lettered_and_its_batch_goes_on(sched: Scheduler) -> None:
    import sqlite3

    sched.enqueue_request(Request("http://a.test/bad"))
    sched.enqueue_request(Request("http://a.test/ok"))
    sched.sync_blocking()  # written and leased
    sched.store.release(sched.worker)
    sched.buffer.clear()
    bad = sched.fingerprinter.fingerprint(Request("http://a.test/bad")).hex()
    db = sqlite3.connect(sched.store.path)  # type: ignore[attr-defined]
    db.execute("UPDATE requests SET eligible_at='x' WHERE fp=?", (bad,))
    db.commit()
    db.close()
    sched.sync_blocking()  # before: TypeError in the lease, this sync and every later one
    r = sched.next_request()
    assert r is not None and r.url == "http://a.test/ok"
    assert sched.next_request() is None
    (d,) = sched.store.dead_letters()
    assert d.fingerprint == bad and "eligible_at" in d.reason
    assert sched.crawler.stats.get_value("scale/frontier/dead_lettered") == 1


def test_buffer_is_bounded(sched: Scheduler) -> None:
    for i in range(100):
        sched.enqueue_request(Request(f"http://d{i % 5}.test/{i}"))
    sched.sync_blocking()
    assert len(sched.buffer) == sched.batch == 8
    assert sched.store.counts()["leased"] == 8
    # round-robin across the 5 domains
    assert len({x.domain for x in list(sched.buffer)[:5]}) == 5


def test_the_first_request_while_the_engine_waits_is_written_and_leased_at_once(sched: Scheduler) -> None:
    """Scrapy's scheduler hands a request to an engine that waits for one the moment it is
    enqueued: the frontier writes and leases it at once, so what is enqueued after it (a
    callback's child while a lazy start() yields its next request) cannot go first
    (Scrapy's engine test test_lazy: 1, 3, 2, 4 before). Once per time the engine asked."""
    sched.enqueue_request(Request("http://a.test/1"))
    assert len(sched.outbox) == 1 and not sched.buffer  # the engine has not asked: a sync writes it
    sched.sync_blocking()
    assert sched.next_request().url == "http://a.test/1"
    assert sched.next_request() is None  # the engine waits for one
    sched.enqueue_request(Request("http://a.test/2"))
    assert len(sched.buffer) == 1 and not sched.outbox  # written and leased without a sync
    assert sched.crawler.stats.get_value("scale/frontier/outbox_flushes") == 1
    sched.enqueue_request(Request("http://a.test/3"))
    assert len(sched.outbox) == 1  # once per ask: the next ones wait for a sync
    assert sched.next_request().url == "http://a.test/2"
    sched.sync_blocking()
    assert sched.next_request().url == "http://a.test/3"
    # an engine that was handed something since it asked does not wait: no write
    assert sched.next_request() is None
    sched.enqueue_request(Request("http://a.test/4"))
    assert sched.next_request().url == "http://a.test/4"
    sched.enqueue_request(Request("http://a.test/5"))
    assert len(sched.outbox) == 1
    # nor for a request not eligible yet
    sched.sync_blocking()
    assert sched.next_request().url == "http://a.test/5" and sched.next_request() is None
    sched.enqueue_request(Request("http://a.test/6", meta={"scale_not_before": time.time() + 60}))
    assert not sched.buffer and len(sched.outbox) == 1
    assert sched.crawler.stats.get_value("scale/frontier/outbox_flushes") == 2


def test_outbox_is_bounded_when_the_reactor_does_not_come_back(sched: Scheduler) -> None:
    """Scrapy may consume start() without yielding to the reactor: no sync can run,
    so enqueue_request itself writes the outbox once it holds OUTBOX_CAP batches."""
    from scrapy_scale.frontier.scheduling.rounds import OUTBOX_CAP

    cap = OUTBOX_CAP * sched.batch
    for i in range(5 * cap):
        sched.enqueue_request(Request(f"http://a.test/{i}", meta={"is_start_request": True}))
        assert len(sched.outbox) < cap
    # the first flush also leased a batch for the empty buffer (the engine that reads
    # start() without coming back is not kept waiting until start() is all read)
    assert len(sched.buffer) == sched.batch
    assert sched.store.counts()["pending"] == 5 * cap - sched.batch
    assert sched.crawler.stats.get_value("scale/frontier/outbox_flushes") == 5


def test_new_requests_that_arrive_during_a_sync_start_the_next_one_at_once(sched: Scheduler) -> None:
    """Children enqueued while a sync runs (its outbox already taken) are leasable as soon
    as they are written: with the buffer low the next sync starts when this one ends, not
    at the next tick (the engine got None meanwhile and waits to be woken)."""
    kicks: list[int] = []
    sched.rounds.kick = lambda: kicks.append(len(sched.outbox))  # type: ignore[method-assign]
    sched.enqueue_request(Request("http://a.test/parent"))
    plan = sched.rounds.plan()  # the sync starts: it took the outbox
    res = sched.sync.run(plan)
    sched.enqueue_request(Request("http://a.test/child"))  # arrives while it runs
    sched.rounds.synced(res)  # leased the parent; the buffer is low: kick (as before)
    assert kicks == [1]
    assert sched.next_request() is not None and kicks == [1, 1]  # next_request kicks when low, as before
    kicks.clear()
    res = sched.sync.run(sched.rounds.plan())  # writes the child, leases it
    assert [x.fingerprint for x in res.leased] and not sched.outbox
    sched.enqueue_request(Request("http://a.test/grandchild"))
    res.leased = []  # a sync that leased nothing (the child was not written yet when it leased)
    sched.rounds.synced(res)
    assert kicks == [1]  # the grandchild waits in the outbox: sync again now
    kicks.clear()
    res = sched.sync.run(sched.rounds.plan())
    res.leased = []
    sched.rounds.synced(res)
    assert kicks == []  # nothing new waiting and nothing leased: the tick will do


def test_default_frontier_file_is_under_jobdir_else_the_state_dir(tmp_path: Path) -> None:
    from scrapy.settings import Settings

    from scrapy_scale.frontier.settings import frontier_url

    assert (
        frontier_url(Settings({"SCALE_STATE_DIR": str(tmp_path / "st")}))
        == f"sqlite:///{tmp_path / 'st' / 'frontier.db'}"
    )
    assert (
        frontier_url(Settings({"SCALE_STATE_DIR": "st", "JOBDIR": str(tmp_path / "job")}))
        == f"sqlite:///{tmp_path / 'job' / 'frontier.db'}"
    )
    assert frontier_url(Settings({"SCALE_FRONTIER_URL": "redis://h:1/2"})) == "redis://h:1/2"


# ---- what waits locally: len(), priorities ------------------------------------------------


def test_len_counts_what_waits_in_the_outbox(sched: Scheduler) -> None:
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.test/{i}"))
    assert sched.has_pending_requests() and len(sched) == 3
    plan = sched.rounds.plan()  # a sync takes the outbox: still waiting, not yet counted by the store
    assert len(sched) == 3
    sched.rounds.synced(sched.sync.run(plan))
    assert len(sched) == 3  # now buffered (leased), none pending in the store
    sched.next_request()
    assert len(sched) == 2  # one in flight


def _drain(s: Scheduler) -> list[int]:
    out = []
    while (r := s.next_request()) is not None:
        out.append(r.priority)
    return out


def test_a_late_higher_priority_request_is_served_before_the_buffered_ones(sched: Scheduler) -> None:
    """The bound: a request of higher priority than everything buffered reaches the engine
    before any of them, after at most two syncs (the one running when it arrived, then the
    one that writes and leases it); the engine gets None meanwhile."""
    for i in range(8):
        sched.enqueue_request(Request(f"http://a.test/low{i}"))
    sched.sync_blocking()
    assert len(sched.buffer) == sched.batch  # a full batch of priority 0 leased
    assert sched.next_request().priority == 0
    plan = sched.rounds.plan()  # a sync is running ...
    sched.enqueue_request(Request("http://a.test/high", priority=5))  # ... when it arrives
    assert sched.next_request() is None  # held back: the buffer has only lower priorities
    sched.rounds.synced(sched.sync.run(plan))
    assert sched.next_request() is None  # still in the outbox
    sched.sync_blocking()  # writes it and leases it although the buffer is more than half full
    served = _drain(sched)
    assert served == [5] + [0] * 7
    # the engine asked and got None: the next request is written and leased at once
    sched.enqueue_request(Request("http://a.test/first"))
    assert sched.next_request().url == "http://a.test/first"
    # ties do not wait: the buffered one goes although a newer one of its priority is on its
    # way (within a site the store leases the newest first, as Scrapy's LIFO queue)
    sched.enqueue_request(Request("http://a.test/tie0"))
    sched.enqueue_request(Request("http://a.test/tie1"))
    sched.sync_blocking()
    assert sched.next_request().url == "http://a.test/tie1"
    sched.enqueue_request(Request("http://a.test/tie2"))
    assert sched.next_request().url == "http://a.test/tie0"


def test_a_higher_priority_written_by_a_sync_that_did_not_lease_is_leased_next(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/top", priority=9))
    for i in range(7):
        sched.enqueue_request(Request(f"http://a.test/low{i}"))
    sched.sync_blocking()
    sched.enqueue_request(Request("http://a.test/mid", priority=5))
    plan = sched.rounds.plan()  # buffer full and its best (9) outranks 5: this sync leases nothing
    assert plan.want == 0
    assert sched.next_request().priority == 9
    assert sched.next_request() is None  # 5 is being written; the buffer has only 0s
    sched.rounds.synced(sched.sync.run(plan))
    assert sched.next_request() is None  # written, pending in the store, not leased yet
    sched.sync_blocking()
    assert _drain(sched) == [5] + [0] * 7


def test_memory_only_requests_take_their_turn_by_priority(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/p1", priority=1))
    sched.sync_blocking()
    sched.enqueue_request(Request("http://a.test/mem", priority=3, meta={"o": object()}))
    sched.enqueue_request(Request("http://a.test/mem0", priority=0, meta={"o": object()}))
    sched.sync_blocking()  # their dedup records are written
    assert [r.url for r in iter(sched.next_request, None)] == [
        "http://a.test/mem",
        "http://a.test/p1",
        "http://a.test/mem0",
    ]


def test_a_late_ack_after_the_lease_passed_to_another_worker_is_counted_stale(sched: Scheduler) -> None:
    """A frozen worker that comes back after its lease expired and another worker took the
    request: the store refuses its ack (the token), and the stats must say so, not count it
    as an ack (per-worker acked summed to more than the requests done)."""
    from scrapy_scale.clock import FakeClock

    clock = FakeClock()
    sched.store.clock = clock
    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    clock.advance(sched.lease_seconds + 1)  # this worker froze past its lease
    other = sched.store
    assert other.reclaim() == 1
    (taken,) = other.lease("other/0", 1, 60.0)  # another worker takes it: a new token
    outcome(r, items=0)  # the frozen worker comes back and finishes its copy
    sched.inflight.settle_finished()
    sched.sync_blocking()
    stats = sched.crawler.stats
    assert not stats.get_value("scale/frontier/acked")
    assert stats.get_value("scale/frontier/stale_acks") == 1
    assert state(sched, r) == State.LEASED  # still the other worker's
    assert other.ack("other/0", [(taken.fingerprint, taken.token)]) == 1


class Opaque:
    """A value no record can hold."""


def test_requests_kept_in_memory_are_deduplicated_and_acked_like_the_others(sched: Scheduler) -> None:
    """A detail page that links back to its listing with an object in cb_kwargs looped:
    requests that could not be stored were never deduplicated (10,000+ requests for 6 URLs)."""
    sched.enqueue_request(Request("http://a.test/list"))
    listing = lease_one(sched)
    outcome(listing)
    for _ in range(3):  # the listing again, and a detail page twice, all with an object
        sched.enqueue_request(Request("http://a.test/list", cb_kwargs={"o": Opaque()}))
        sched.enqueue_request(Request("http://a.test/detail", cb_kwargs={"o": Opaque()}))
    sched.sync_blocking()
    served = list(iter(sched.next_request, None))
    assert [r.url for r in served] == ["http://a.test/detail"]
    assert isinstance(served[0].cb_kwargs["o"], Opaque)
    # its record dedups stored requests too, and is acked once the request is done
    sched.enqueue_request(Request("http://a.test/detail"))
    sched.sync_blocking()
    assert sched.next_request() is None
    assert state(sched, served[0]) == State.LEASED
    outcome(served[0])
    sched.sync_blocking()
    assert state(sched, served[0]) == State.DONE
    stats = sched.crawler.stats
    # the listing's three are duplicates this worker knows (it leased the listing): answered
    # before they are encoded, as Scrapy's dupefilter drops one before its disk queue
    assert stats.get_value("scale/frontier/unserializable") == 3
    assert stats.get_value("scale/frontier/unserializable/Opaque") == 3
    assert stats.get_value("scale/frontier/deduplicated") == 6  # 5 with an object + 1 stored
    assert stats.get_value("scale/frontier/deduplicated_in_worker") == 4  # all but the detail's 2 repeats


def test_a_request_kept_in_memory_and_lost_at_a_stop_is_dead_lettered_with_why(sched: Scheduler) -> None:
    sched.enqueue_request(Request("http://a.test/lost", cb_kwargs={"o": Opaque()}))
    sched.sync_blocking()
    assert len(sched.buffer) == 1
    sched.store.release(sched.worker)  # what a stop does with what it holds ...
    sched.buffer.clear()  # ... and the next process starts with nothing in memory
    sched.sync_blocking()  # it leases the record: there is no request in it
    assert sched.next_request() is None
    sched.sync_blocking()
    (d,) = sched.store.dead_letters()
    assert "kept in memory only" in d.reason and "Opaque" in d.reason


def test_a_sync_that_brings_nothing_does_not_wake_an_engine_that_waits(sched: Scheduler) -> None:
    """Every pending record delayed (a retry waiting for its backoff): the engine asks, gets
    None and waits for a sync. A sync that leases nothing must not wake it, or the engine asks
    again at once, kicks another sync, and the two spin as fast as the store answers for the
    whole wait (27,000 syncs in a 10 s crawl of 3,000 pages, measured before this rule). The
    sync that leases the record wakes it."""
    wakes: list[int] = []
    sched.rounds.wake_engine = lambda: wakes.append(1)
    sched.enqueue_request(Request("http://a.test/1"))
    r = lease_one(sched)
    wakes.clear()
    retry = r.replace(dont_filter=True, meta={**r.meta, meta_keys.ATTEMPT: 2, meta_keys.NOT_BEFORE: time.time() + 0.3})
    sched.enqueue_request(retry)
    sched.sync_blocking()  # writes the retry (delayed); nothing leased
    wakes.clear()
    for _ in range(5):
        assert sched.next_request() is None  # the engine asks and waits
        sched.sync_blocking()
    assert wakes == [], "a sync that changed nothing the engine waits for woke it"
    assert sched.has_pending_requests()
    time.sleep(0.35)
    assert sched.next_request() is None
    sched.sync_blocking()  # the retry is eligible now: leased, the engine is woken
    assert wakes == [1]
    got = sched.next_request()
    assert got is not None and got.url == "http://a.test/1"


def test_a_sync_wakes_for_idleness_only_an_engine_that_asked(sched: Scheduler) -> None:
    """The first tick's sync found nothing anywhere and woke the engine; under load that came
    after the engine started but before its start() gave the first request, so the engine
    asked, got None and sent scheduler_empty, which plain Scrapy never sends then: a lazy
    spider added its next request ahead of its first (served 2, 1, 3, ... in 2 crawls of 80
    at load 10, tests/crawl/test_frontier_contracts.py). Only an engine that asked is woken
    to see it is idle."""
    wakes: list[int] = []
    sched.rounds.wake_engine = lambda: wakes.append(1)
    sched.sync_blocking()  # nothing anywhere; the engine has not asked
    sched.sync_blocking()
    assert wakes == []
    assert sched.next_request() is None  # it asks: nothing
    sched.sync_blocking()  # still nothing anywhere: it is woken to see it is idle
    assert wakes == [1]
    assert not sched.has_work_for_this_worker()


def test_a_waiting_engine_is_woken_when_what_held_it_back_is_gone(sched: Scheduler) -> None:
    """The other reason the engine waits: a request outranking the buffer waits to be written.
    A sync that writes it (even one that leases nothing) ends that wait: the engine is woken."""
    wakes: list[int] = []
    sched.rounds.wake_engine = lambda: wakes.append(1)
    for i in range(3):
        sched.enqueue_request(Request(f"http://a.test/{i}"))
    sched.sync_blocking()
    sched.enqueue_request(Request("http://a.test/urgent", priority=10))
    wakes.clear()
    assert sched.next_request() is None  # held back for the urgent one
    assert sched.engine_waits
    sched.sync_blocking()  # writes and leases it
    assert wakes == [1]
    got = sched.next_request()
    assert got is not None and got.url == "http://a.test/urgent"


class HoldAll:
    """A pacer that holds every site until ``open`` (the throttle wakes the engine then)."""

    def __init__(self) -> None:
        self.open = False

    def hold_until(self, domain: str) -> float:
        return 0.0 if self.open else math.inf

    def spacing(self, domain: str) -> float:
        return 0.0

    def handed_out(self, request: Request, domain: str, fingerprint: str | None) -> None:
        pass


def test_a_higher_priority_request_is_leased_even_when_the_pacer_filled_the_buffer(sched: Scheduler) -> None:
    """The pacer holds every buffered request and the buffer is at its bound (HELD_CAP
    batches): a request outranking them all must still be leased, or the engine waits for it
    forever while the scheduler syncs in a loop (seen: a paced crawl whose listing pages had a
    higher priority stopped at 220 of 3,152 pages)."""
    pacer = HoldAll()
    sched.buffer.pacer = pacer
    for i in range(60):
        sched.enqueue_request(Request(f"http://a.test/{i}"))
    for _ in range(10):
        sched.sync_blocking()
        assert sched.next_request() is None  # all held
    assert len(sched.buffer) == HELD_CAP * sched.batch
    sched.enqueue_request(Request("http://a.test/urgent", priority=5))
    assert sched.next_request() is None  # the engine waits for the urgent one to be leased
    sched.sync_blocking()
    assert sched.buffer.top_priority() == 5, "the urgent request was not leased"
    pacer.open = True
    got = sched.next_request()
    assert got is not None and got.url == "http://a.test/urgent"


def test_a_dont_filter_request_while_its_record_is_leased_gets_its_own_record_and_retries(
    sched: Scheduler,
) -> None:
    """dont_filter means fetch again (issue 19 item 2): a re-request while the page's record
    is leased gets a record of its own, and that record's retry continues it (not a new
    chain from attempt 1, which would retry forever)."""
    sched.enqueue_request(Request("http://a.test/1"))
    first = lease_one(sched)
    sched.enqueue_request(Request("http://a.test/1", dont_filter=True))
    sched.sync_blocking()
    again = sched.next_request()
    assert again is not None and again.url == first.url
    key = again.meta[meta_keys.FINGERPRINT]
    assert key != first.meta[meta_keys.FINGERPRINT] and key.startswith(first.meta[meta_keys.FINGERPRINT] + "~")
    assert sched.store.counts()["leased"] == 2
    retry = again.replace(dont_filter=True, meta={**again.meta, meta_keys.ATTEMPT: 2})
    sched.enqueue_request(retry)
    assert retry.meta[meta_keys.FINGERPRINT] == key and retry.meta[meta_keys.ATTEMPT] == 2
    sched.sync_blocking()
    assert sched.store.get(key)["attempts"] == 1  # type: ignore[index]
    outcome(first)
    sched.sync_blocking()
    assert sched.store.counts()["done"] == 1


def test_the_engine_backs_out_while_it_waits_for_a_sync_that_brings_it_work(sched: Scheduler) -> None:
    """Scrapy's lazy start asks engine.needs_backout() before each start request: a request
    in the outbox (not yet leased) must make it True, as a full downloader would with
    Scrapy's scheduler, else start() runs ahead (issue 19 item 11)."""
    assert not sched.engine_backs_out()  # nothing anywhere: scheduler_empty is true
    sched.enqueue_request(Request("http://a.test/1"))
    assert sched.engine_backs_out() and sched.engine_waits  # woken after the sync
    sched.sync_blocking()
    assert not sched.engine_backs_out()  # buffered: the engine takes it
    assert sched.next_request() is not None
    assert not sched.engine_backs_out()
    sched.enqueue_request(Request("http://a.test/2", priority=5))
    sched.enqueue_request(Request("http://a.test/3"))
    sched.sync_blocking()
    sched.enqueue_request(Request("http://a.test/4", priority=9))  # outranks the buffer
    assert sched.engine_backs_out()


def test_install_backout_answers_for_the_engine_and_comes_off() -> None:
    from scrapy_scale.frontier.scheduling.engine_glue import install_backout

    class Engine:
        full = False

        def needs_backout(self) -> bool:
            return self.full

    engine, waits = Engine(), [True]
    remove = install_backout(engine, lambda: waits[0])
    assert engine.needs_backout()
    waits[0] = False
    assert not engine.needs_backout()
    engine.full = True
    assert engine.needs_backout()
    remove()
    engine.full, waits[0] = False, True
    assert not engine.needs_backout() and "needs_backout" not in engine.__dict__


def test_a_backed_out_engine_gets_a_batch_leased_without_a_sync(sched: Scheduler) -> None:
    """While the engine backs out with nothing buffered, Scrapy reads start() without
    coming back to the reactor, so no sync ends: once a batch of start requests is in the
    outbox it is written and leased on the spot (it waited for OUTBOX_CAP batches, about
    1,000 start requests before the first download)."""
    sched.enqueue_request(Request("http://a.test/0"))
    assert sched.engine_backs_out()
    for i in range(1, sched.batch):
        sched.enqueue_request(Request(f"http://a.test/{i}"))
    assert len(sched.buffer) > 0 and not sched.outbox  # leased without a sync
    assert sched.next_request() is not None


def test_a_url_scheme_not_allowed_is_advised_about_the_schemes_setting(
    sched: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    """A `data:` URL is kept in memory like an unstorable value, but the warning's advice is
    SCALE_FRONTIER_SCHEMES (it was "put plain data in meta/cb_kwargs")."""
    import logging

    with caplog.at_level(logging.WARNING, logger="scrapy_scale"):
        sched.enqueue_request(Request("data:,hello"))
        sched.enqueue_request(Request("data:,again"))
        sched.enqueue_request(Request("http://a.test/o", cb_kwargs={"o": Opaque()}))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned  # once for schemes, once for values
    scheme, value = warned
    assert "SCALE_FRONTIER_SCHEMES" in scheme and "'data'" in scheme and "cb_kwargs" not in scheme, scheme
    assert "meta/cb_kwargs" in value, value
    assert sched.crawler.stats.get_value("scale/frontier/unserializable/refused") == 2


def test_a_bad_setting_is_found_before_the_store_is_opened(tmp_path: Path) -> None:
    """Every frontier setting is read before the store opens: a bad one leaves no new
    frontier file (nor an open connection) behind, as before the scheduler was split."""
    from scrapy_scale.config import ScaleSettingError

    folder = tmp_path / "bad"  # tmp_path holds the autouse scheduler's own file
    folder.mkdir()
    crawler = get_crawler(S, {"SCALE_FRONTIER_URL": f"sqlite:///{folder / 'f.db'}", "SCALE_FRONTIER_BATCH": 0})
    with pytest.raises(ScaleSettingError):
        Scheduler.from_crawler(crawler)
    assert not list(folder.iterdir())
