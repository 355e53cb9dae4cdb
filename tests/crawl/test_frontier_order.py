"""The order within a site, on every backend (the conformance suite's fixtures): a request
the crawl found goes ahead of what waits in its site's queue, newest first (Scrapy's
default LIFO queues), start requests and seeds wait behind in their order, and the
project's FIFO queues make every request wait behind. Priority and round-robin across
sites come first, as before."""

from __future__ import annotations

import dataclasses

import pytest
from scrapy import Request
from scrapy.settings import Settings

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.records.identity import new_record
from scrapy_scale.frontier.scheduling import scrapy_scheduler_settings as scrapy_settings
from scrapy_scale.frontier.store import FrontierStore, NewRequest
from tests.crawl import test_frontier_store as conformance

# the conformance suite's fixtures: every backend (SQLite, Redis, Redis Cluster)
backend, clock, make_store = conformance.backend, conformance.clock, conformance.make_store
redis_cluster_url, store = conformance.redis_cluster_url, conformance.store

pytestmark = pytest.mark.crawl

W = "host/0"
LEASE = 60.0


def found(url: str, priority: int = 0) -> NewRequest:
    """A request the crawl found (a callback's output): the head of its queue."""
    return dataclasses.replace(codec.new_request(Request(url, priority=priority)), tail=False)


def seed(url: str, priority: int = 0) -> NewRequest:
    return codec.new_request(Request(url, priority=priority))


def urls(store: FrontierStore, n: int) -> list[str]:
    return [codec.decode(x.data).url for x in store.lease(W, n, LEASE)]


def test_found_requests_go_first_newest_first_seeds_behind_in_order(store: FrontierStore) -> None:
    store.enqueue([seed(f"http://a.test/seed{i}") for i in range(3)])
    store.enqueue([found("http://a.test/detail1"), found("http://a.test/detail2")])
    store.enqueue([found("http://a.test/page2")])  # the listing's next page, found last
    assert urls(store, 6) == [
        "http://a.test/page2",
        "http://a.test/detail2",
        "http://a.test/detail1",
        "http://a.test/seed0",
        "http://a.test/seed1",
        "http://a.test/seed2",
    ]


def test_a_next_page_does_not_wait_behind_the_details_of_its_site(store: FrontierStore) -> None:
    """The crawl of a listing: page 1 yields 20 details then page 2; page 2 is leased
    before the details, so its own details join the queue early."""
    store.enqueue([found(f"http://a.test/d/{i}") for i in range(20)] + [found("http://a.test/page/2")])
    assert urls(store, 1) == ["http://a.test/page/2"]


def test_priority_and_round_robin_come_before_the_order_within_a_site(store: FrontierStore) -> None:
    store.enqueue([found("http://a.test/1"), found("http://a.test/2"), found("http://b.test/1")])
    store.enqueue([found("http://a.test/high", 5), seed("http://b.test/seed", 5)])
    got = urls(store, 5)
    assert set(got[:2]) == {"http://a.test/high", "http://b.test/seed"}
    rest = got[2:]
    assert rest.index("http://a.test/2") < rest.index("http://a.test/1")  # newest first in a.test
    assert {u.split("/")[2] for u in rest[:2]} == {"a.test", "b.test"}  # round-robin across sites


def test_fifo_requests_wait_behind_in_arrival_order(store: FrontierStore) -> None:
    reqs = [dataclasses.replace(found(f"http://a.test/{i}"), tail=True) for i in range(4)]
    store.enqueue(reqs)
    assert urls(store, 4) == [f"http://a.test/{i}" for i in range(4)]


def test_a_due_retry_goes_first_and_a_requeued_failure_goes_behind(store: FrontierStore, clock: FakeClock) -> None:
    store.enqueue([found("http://a.test/retry"), found("http://a.test/failed")])
    leased = {codec.decode(x.data).url: x for x in store.lease(W, 2, LEASE)}
    fl = leased["http://a.test/failed"]
    assert store.fail(W, [(fl.fingerprint, fl.token, "fatal", "x")]) == 1
    rt = leased["http://a.test/retry"]
    again = dataclasses.replace(found("http://a.test/retry"), update=True, not_before=clock() + 10, attempts=1)
    assert again.fingerprint == rt.fingerprint
    store.enqueue([again])
    store.enqueue([seed("http://a.test/s"), found("http://a.test/new")])
    clock.advance(11)
    assert urls(store, 3) == ["http://a.test/retry", "http://a.test/new", "http://a.test/s"]
    assert store.requeue() == 1
    store.enqueue([found("http://a.test/newer")])
    assert urls(store, 2) == ["http://a.test/newer", "http://a.test/failed"]


def _opts(**values: object) -> dict[str, bool]:
    s = Settings()
    for k, v in values.items():
        s.set(k, v, priority="project")
    return scrapy_settings.read(s).record_options()


def test_scrapys_queue_settings_choose_the_order() -> None:
    assert _opts() == {"dedup": True, "fifo": False, "start_fifo": True}
    # Scrapy's breadth-first recipe
    bfo = _opts(
        SCHEDULER_DISK_QUEUE="scrapy.squeues.PickleFifoDiskQueue",
        SCHEDULER_MEMORY_QUEUE="scrapy.squeues.FifoMemoryQueue",
    )
    assert bfo["fifo"] is True
    assert _opts(SCHEDULER_START_MEMORY_QUEUE=None)["start_fifo"] is False
    s = Settings()
    s.set("SCHEDULER_MEMORY_QUEUE", "myproject.MyQueue", priority="project")
    read = scrapy_settings.read(s)
    assert read.fifo is False and any("SCHEDULER_MEMORY_QUEUE" in w for w in read.warnings)
    lifo = Settings()
    lifo.set("SCHEDULER_MEMORY_QUEUE", "scrapy.squeues.LifoMemoryQueue", priority="project")
    assert scrapy_settings.read(lifo).warnings == ()


def test_new_record_places_start_requests_and_found_ones() -> None:
    start = Request("http://a.test/", meta={"is_start_request": True})
    child = Request("http://a.test/x")
    assert new_record(start, "f", False, "{}", dedup=True).tail is True
    assert new_record(child, "f", False, "{}", dedup=True).tail is False
    assert new_record(child, "f", False, "{}", dedup=True, fifo=True).tail is True
    assert new_record(start, "f", False, "{}", dedup=True, start_fifo=False).tail is False


def test_requests_the_pacer_deferred_come_back_in_their_order(store: FrontierStore, clock: FakeClock) -> None:
    """The lease buffer sends leased requests of a site due later back to the store,
    delayed until their turns (LeaseBuffer.next_entry). When several are due by the next
    lease they come back in their order: SQLite gave every record promoted at once the
    same seq, and ties were read newest record first (start request 9 before 7)."""
    store.enqueue([seed(f"http://a.test/start{i}") for i in range(6)])
    leased = store.lease(W, 6, LEASE)
    assert [codec.decode(x.data).url for x in leased] == [f"http://a.test/start{i}" for i in range(6)]
    turn = clock.now + 1.5
    deferred = [
        NewRequest(
            fingerprint=lz.fingerprint,
            data=lz.data,
            domain=lz.domain,
            priority=lz.priority,
            not_before=turn + 0.2 * k,
            attempts=lz.attempts,
            update=True,
            token=lz.token,
        )
        for k, lz in enumerate(leased)
    ]
    store.enqueue(deferred)
    assert store.lease(W, 6, LEASE) == []  # none due yet: the deferral took
    clock.advance(10)
    assert urls(store, 6) == [f"http://a.test/start{i}" for i in range(6)]
