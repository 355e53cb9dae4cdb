"""A store call over several partitions whose call in one partition fails with a real error
(not a dropped connection: those run again alone) while the others ran, on a real Redis.

The scheduler puts the failed writes back and sends them again (scheduling/rounds.py). The
partitions that answered the first time have changed the store already: their requests
must be answered as they were then (not "duplicate" of themselves: a request kept in
memory only would be dropped from the worker), their leases handed to the worker by the
next lease (not left to expire), and their acks counted once (not as stale).

The failure is a partition's run key of another type (a string where the run's hash is):
each script of that partition fails on its first read, before it writes anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from scrapy import Request

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier import codec
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.backends.redis import RedisStore, lua
from scrapy_scale.frontier.backends.redis import partitions as P
from scrapy_scale.frontier.store import EnqueueResult, NewRequest

pytestmark = pytest.mark.crawl

W = "host/0"
SITES = [f"site{i}.test" for i in range(12)]
BROKEN = 1  # the partition whose calls fail


def req(url: str) -> NewRequest:
    return codec.new_request(Request(url))


@pytest.fixture
def store(redis_url: str, redis_prefix: str) -> Iterator[RedisStore]:
    s = open_store(redis_url, redis_prefix, clock=FakeClock(), partitions=3)
    assert isinstance(s, RedisStore)
    s.begin_run()
    yield s
    s.close()


@pytest.fixture
def broken(store: RedisStore, redis_url: str) -> Iterator[Callable[[], Callable[[], None]]]:
    """``broken()`` makes partition BROKEN's scripts fail (its run key a string) and returns
    the function that mends it."""
    r = redis.Redis.from_url(redis_url)
    key = f"{store.keys[BROKEN]}:run"

    def make() -> Callable[[], None]:
        # every script loaded: the pipeline runs each partition's call (a script the node
        # has not loaded would run alone after the failure, in order, and stop there)
        for text in lua.TEXTS.values():
            r.script_load(text)
        saved = r.dump(key)
        assert saved is not None
        r.delete(key)
        r.set(key, "not a hash")

        def mend() -> None:
            r.delete(key)
            r.restore(key, 0, saved)

        return mend

    yield make


def _in(part: int, xs: list[Any], domain: Callable[[Any], str]) -> list[Any]:
    return [x for x in xs if P.partition_of(domain(x), 3) == part]


def test_requests_written_beside_a_failed_partition_are_answered_as_written_on_the_retry(
    store: RedisStore, broken: Callable[[], Callable[[], None]]
) -> None:
    reqs = [req(f"http://{d}/") for d in SITES]
    assert {P.partition_of(r.domain, 3) for r in reqs} == {0, 1, 2}
    # one request kept in memory only (its record leased to this worker from the start)
    good = next(r for r in reqs if P.partition_of(r.domain, 3) != BROKEN)
    held = dataclasses.replace(good, held_by=W, held_seconds=60.0, data=codec.memory_marker("function"))
    reqs[reqs.index(good)] = held
    mend = broken()
    for _ in range(2):  # failed twice: the second try keeps what the first did
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            store.enqueue(reqs)
    # the path under test ran: the other partitions wrote theirs, the broken one nothing
    mend()
    for r in reqs:
        written = store.get(r.fingerprint) is not None
        assert written == (P.partition_of(r.domain, 3) != BROKEN), r.domain
    # the retry of the same writes: each answered as written, none a duplicate of itself
    assert store.enqueue(reqs) == [EnqueueResult.ADDED] * len(reqs)
    assert store.counts() == {"pending": len(reqs) - 1, "delayed": 0, "leased": 1, "done": 0, "failed": 0}
    # a request asked for again later (another object) is the duplicate it is
    again = [req(f"http://{d}/") for d in SITES]
    assert store.enqueue(again) == [EnqueueResult.DUPLICATE] * len(again)


def test_rows_leased_beside_a_failed_partition_are_handed_out_by_the_next_lease(
    store: RedisStore, broken: Callable[[], Callable[[], None]]
) -> None:
    reqs = [req(f"http://{d}/{i}") for d in SITES for i in range(2)]
    assert store.enqueue(reqs) == [EnqueueResult.ADDED] * len(reqs)
    mend = broken()
    for _ in range(2):  # failed twice: the second lease keeps the first's rows and adds its own
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            store.lease(W, 6, 60.0)
    mend()
    # the path under test ran: the other partitions leased some to this worker
    taken = store.counts()["leased"]
    assert taken > 0
    got = store.lease(W, len(reqs), 60.0)
    fps = [x.fingerprint for x in got if not x.error]
    assert sorted(fps) == sorted(r.fingerprint for r in reqs)  # every one, once
    assert store.counts() == {"pending": 0, "delayed": 0, "leased": len(reqs), "done": 0, "failed": 0}
    assert store.ack(W, [(x.fingerprint, x.token) for x in got]) == len(reqs)


def test_acks_finished_beside_a_failed_partition_are_counted_once_on_the_retry(
    store: RedisStore, broken: Callable[[], Callable[[], None]]
) -> None:
    reqs = [req(f"http://{d}/") for d in SITES]
    store.enqueue(reqs)
    got = store.lease(W, len(reqs), 60.0)
    assert len(got) == len(reqs)
    acks = [(x.fingerprint, x.token) for x in got]
    mend = broken()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        store.ack(W, acks)
    mend()
    # the path under test ran: the other partitions' acks were done, the broken one's not
    c = store.counts()
    assert c["done"] == len(reqs) - len(_in(BROKEN, got, lambda x: x.domain)) and c["leased"] == len(reqs) - c["done"]
    assert store.ack(W, acks) == len(reqs)  # each ack counted once, none stale
    assert store.counts() == {"pending": 0, "delayed": 0, "leased": 0, "done": len(reqs), "failed": 0}


class Opaque:
    """A value no record can hold: its request is kept in the worker's memory only."""


def test_the_scheduler_retries_a_sync_that_failed_in_one_partition_and_loses_nothing(
    redis_url: str, redis_prefix: str
) -> None:
    """The whole path: the scheduler's sync fails in one partition, its writes go back, the
    next sync after the partition mends writes them again. Every request is taken once (the
    one kept in memory is served), none counted a duplicate of itself."""
    from scrapy.utils.test import get_crawler

    from scrapy_scale.frontier.scheduling.scheduler import Scheduler
    from tests.unit.test_frontier_scheduler_unit import S

    crawler = get_crawler(
        S,
        {
            "SCALE_FRONTIER_URL": redis_url,
            "SCALE_JOB": redis_prefix,
            "SCALE_FRONTIER_PARTITIONS": 3,
            "SCALE_FRONTIER_BATCH": 64,
        },
    )
    sched = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()
    sched.attach(S())
    try:
        store = sched.store
        assert isinstance(store, RedisStore) and store.parts == 3
        r = redis.Redis.from_url(redis_url)
        for text in lua.TEXTS.values():
            r.script_load(text)
        key = f"{store.keys[BROKEN]}:run"
        saved = r.dump(key)
        assert saved is not None
        urls = [f"http://{d}/" for d in SITES]
        kept = next(u for u in urls if P.partition_of(u.split("/")[2], 3) != BROKEN)
        for u in urls:
            sched.enqueue_request(Request(u, cb_kwargs={"o": Opaque()} if u == kept else {}))
        r.delete(key)
        r.set(key, "not a hash")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            sched.sync_blocking()
        sched.rounds.failed(redis.ResponseError("WRONGTYPE"))  # as the tick's errback does
        assert crawler.stats.get_value("scale/frontier/sync_errors") == 1  # the failure path ran
        r.delete(key)
        r.restore(key, 0, saved)
        sched.sync_blocking()
        stats = crawler.stats
        assert stats.get_value("scale/frontier/enqueued") == len(urls)
        assert not stats.get_value("scale/frontier/deduplicated")
        served = []
        for _ in range(5):
            served += list(iter(sched.next_request, None))
            if len(served) == len(urls):
                break
            sched.sync_blocking()
        assert sorted(x.url for x in served) == sorted(urls)
        assert isinstance(next(x for x in served if x.url == kept).cb_kwargs["o"], Opaque)
    finally:
        sched.store.close()


def test_rows_kept_for_the_next_lease_go_back_with_the_workers_leases_at_a_release(
    store: RedisStore, broken: Callable[[], Callable[[], None]]
) -> None:
    reqs = [req(f"http://{d}/") for d in SITES]
    store.enqueue(reqs)
    mend = broken()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        store.lease(W, 12, 60.0)
    mend()
    assert store.counts()["leased"] > 0  # the path under test ran
    store.release(W)  # a clean stop: every lease of the worker back to pending
    assert store.counts()["leased"] == 0
    got = store.lease(W, len(reqs), 60.0)  # none handed out twice, none out of date
    assert sorted(x.fingerprint for x in got) == sorted(r.fingerprint for r in reqs)
    assert store.ack(W, [(x.fingerprint, x.token) for x in got]) == len(reqs)
