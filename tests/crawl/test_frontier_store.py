"""Conformance suite of the frontier store: one suite, every backend (SQLite, Redis).

Time is a FakeClock: lease expiry and delayed retries are tested by moving it,
never by sleeping. Redis tests use a unique job name on the shared Redis (the
redis_prefix fixture deletes its keys afterwards).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scrapy
from scrapy import Request

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.store import (
    EnqueueResult,
    FrontierError,
    FrontierStore,
    Leased,
    NewRequest,
    State,
)

pytestmark = pytest.mark.crawl

W = "host/0"
LEASE = 60.0


@pytest.fixture(params=["sqlite", "redis", "redis-s3", "redis-cluster"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private 3-node Redis Cluster (no replicas, no AOF) on loopback, for the whole session;
    the URL of its second node."""
    from tests.support import services

    cluster = services.private_cluster(tmp_path_factory.mktemp("cluster"), primaries=3, replicas=0, appendonly=False)
    try:
        yield f"redis://127.0.0.1:{cluster.nodes[1].port}/0"
    finally:
        cluster.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_store(backend: str, tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest):
    opened: list[FrontierStore] = []
    parts = None
    if backend in ("redis", "redis-s3"):
        url = request.getfixturevalue("redis_url")
        job = request.getfixturevalue("redis_prefix")
        parts = 3 if backend == "redis-s3" else None  # one job in 3 partitions on one node
    elif backend == "redis-cluster":
        url = request.getfixturevalue("redis_cluster_url")
        job = f"job-{uuid.uuid4().hex[:8]}"
    else:
        url = f"sqlite:///{tmp_path / 'f.db'}"
        job = "job"

    def make(job_name: str | None = None) -> FrontierStore:
        s = open_store(url, job_name or job, clock=clock, partitions=parts)
        if backend == "redis-cluster":  # really talking to a cluster, not to one node
            assert getattr(s, "cluster", False)
            assert getattr(s, "parts", 0) == 12  # the default: 4 per primary
        if backend == "redis-s3":
            assert getattr(s, "parts", 0) == 3
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store) -> Iterator[FrontierStore]:
    s = make_store()
    s.begin_run()
    yield s


def req(url: str, priority: int = 0, **kw) -> NewRequest:
    r = Request(url, priority=priority)
    return codec.new_request(r, **kw)


def fp(url: str) -> str:
    return codec.default_fingerprint(Request(url))


# ---- states, dedup ------------------------------------------------------------------


def test_enqueue_dedups_by_fingerprint(store: FrontierStore) -> None:
    a = req("http://a.test/1")
    assert store.enqueue([a, req("http://a.test/2"), a]) == [
        EnqueueResult.ADDED,
        EnqueueResult.ADDED,
        EnqueueResult.DUPLICATE,
    ]
    assert store.enqueue([a]) == [EnqueueResult.DUPLICATE]
    assert store.counts()["pending"] == 2


def test_lease_ack_fail_transitions(store: FrontierStore, clock: FakeClock) -> None:
    store.enqueue([req("http://a.test/1"), req("http://a.test/2")])
    got = store.lease(W, 10, LEASE)
    assert {x.fingerprint for x in got} == {fp("http://a.test/1"), fp("http://a.test/2")}
    assert store.counts() == {"pending": 0, "delayed": 0, "leased": 2, "done": 0, "failed": 0}
    rec = store.get(got[0].fingerprint)
    assert rec is not None and rec["state"] == State.LEASED and rec["owner"] == W
    assert rec["lease_expires"] == pytest.approx(clock.now + LEASE)
    assert codec.decode(got[0].data).url.startswith("http://a.test/")

    assert store.ack(W, [(got[0].fingerprint, got[0].token)]) == 1
    assert store.ack(W, [(got[0].fingerprint, got[0].token)]) == 0  # a repeated ack changes nothing
    assert store.fail(W, [(got[1].fingerprint, got[1].token, "blocked", "403 from target")]) == 1
    assert store.get(got[0].fingerprint)["state"] == State.DONE  # type: ignore[index]
    failed = store.get(got[1].fingerprint)
    assert failed["state"] == State.FAILED and failed["last_failure"] == ("blocked", "403 from target")  # type: ignore[index]
    assert store.counts() == {"pending": 0, "delayed": 0, "leased": 0, "done": 1, "failed": 1}
    assert store.lease(W, 10, LEASE) == []
    # a done fingerprint stays deduplicated
    assert store.enqueue([req("http://a.test/1")]) == [EnqueueResult.DUPLICATE]


def test_a_request_held_in_memory_is_deduplicated_leased_to_its_worker_and_acked(
    store: FrontierStore, clock: FakeClock
) -> None:
    """A request whose values cannot be stored is kept in its worker's memory; its record
    (no request data) dedups it both ways and is leased to that worker from the start."""
    marker = codec.memory_marker("Thing")
    held = NewRequest(fp("http://a.test/mem"), marker, "a.test", held_by=W, held_seconds=LEASE)
    assert store.enqueue([held, held]) == [EnqueueResult.ADDED, EnqueueResult.DUPLICATE]
    rec = store.get(held.fingerprint)
    assert rec is not None and rec["state"] == State.LEASED and rec["owner"] == W
    assert store.counts()["leased"] == 1 and store.lease(W, 10, LEASE) == []  # never leased out again
    assert store.enqueue([req("http://a.test/mem")]) == [EnqueueResult.DUPLICATE]
    assert store.status().leases_by_worker == {W: 1}
    assert store.ack(W, [(held.fingerprint, 0)]) == 1 and store.get(held.fingerprint)["state"] == State.DONE
    # a known fingerprint held again: a duplicate, whatever its state
    store.enqueue([req("http://a.test/known")])
    again = NewRequest(fp("http://a.test/known"), marker, "a.test", held_by=W, held_seconds=LEASE)
    assert store.enqueue([again]) == [EnqueueResult.DUPLICATE]
    # its worker gone, the lease expires and the record comes back as pending (nothing to fetch in it)
    lost = NewRequest(fp("http://a.test/lost"), marker, "a.test", held_by=W, held_seconds=LEASE)
    store.enqueue([lost])
    clock.advance(LEASE + 1)
    assert store.reclaim() == 1
    (back,) = [x for x in store.lease("other/0", 10, LEASE) if x.fingerprint == lost.fingerprint]
    with pytest.raises(codec.CodecError, match="kept in memory only"):
        codec.decode(back.data)


def test_dont_filter_reopens_only_finished_records(store: FrontierStore) -> None:
    a = req("http://a.test/1")
    store.enqueue([a])
    reopen = NewRequest(a.fingerprint, a.data, a.domain, reopen=True)
    assert store.enqueue([reopen]) == [EnqueueResult.DUPLICATE]  # still pending: nothing to do
    (x,) = store.lease(W, 1, LEASE)
    store.ack(W, [(x.fingerprint, x.token)])
    assert store.enqueue([reopen]) == [EnqueueResult.REOPENED]
    assert store.counts()["pending"] == 1


def test_in_one_call_a_repeat_is_a_duplicate_and_a_reopen_after_it_still_reopens(store: FrontierStore) -> None:
    """The Redis enqueue answers a plain repeat of a fingerprint it already handled in the
    call without a look (lua/enqueue.lua); a flagged request for it is still looked at."""
    a = req("http://a.test/1")
    store.enqueue([a])
    (x,) = store.lease(W, 1, LEASE)
    store.ack(W, [(x.fingerprint, x.token)])
    reopen = NewRequest(a.fingerprint, a.data, a.domain, reopen=True)
    got = store.enqueue([a, a, reopen, a, reopen])
    assert (
        got
        == [EnqueueResult.DUPLICATE, EnqueueResult.DUPLICATE, EnqueueResult.REOPENED] + [EnqueueResult.DUPLICATE] * 2
    )
    assert store.counts()["pending"] == 1 and store.counts()["done"] == 0


def test_dont_filter_with_again_fetches_again_whatever_the_state(store: FrontierStore) -> None:
    """dont_filter means fetch again: with ``again``, a request whose record is pending or
    leased gets a record of its own under that key; a finished record is reopened."""
    a = req("http://a.test/1")
    store.enqueue([a])
    again1 = NewRequest(a.fingerprint, a.data, a.domain, reopen=True, again=a.fingerprint + "~1")
    assert store.enqueue([again1]) == [EnqueueResult.ADDED]  # pending: a record of its own
    assert store.enqueue([again1]) == [EnqueueResult.DUPLICATE]  # that key is known now
    assert store.counts()["pending"] == 2
    leased = store.lease(W, 10, LEASE)
    assert sorted(x.fingerprint for x in leased) == sorted([a.fingerprint, a.fingerprint + "~1"])
    again2 = NewRequest(a.fingerprint, a.data, a.domain, reopen=True, again=a.fingerprint + "~2")
    assert store.enqueue([again2]) == [EnqueueResult.ADDED]  # leased: a record of its own too
    store.ack(W, [(x.fingerprint, x.token) for x in leased])
    again3 = NewRequest(a.fingerprint, a.data, a.domain, reopen=True, again=a.fingerprint + "~3")
    assert store.enqueue([again3]) == [EnqueueResult.REOPENED]  # done: the record itself again
    assert store.get(a.fingerprint + "~3") is None
    assert store.counts() == {"pending": 2, "delayed": 0, "leased": 0, "done": 1, "failed": 0}
    # ``again`` means nothing without reopen (a plain duplicate stays one)
    plain = NewRequest(a.fingerprint, a.data, a.domain, again=a.fingerprint + "~4")
    assert store.enqueue([plain]) == [EnqueueResult.DUPLICATE]
    assert store.get(a.fingerprint + "~4") is None


# ---- retries: update, delay ---------------------------------------------------------


def test_retry_updates_the_record_and_waits_until_eligible(store: FrontierStore, clock: FakeClock) -> None:
    a = req("http://a.test/1")
    store.enqueue([a])
    (x,) = store.lease(W, 1, LEASE)
    retry = NewRequest(
        a.fingerprint,
        a.data,
        a.domain,
        not_before=clock.now + 30,
        attempts=1,
        last_failure=("rate_limited", "429"),
        update=True,
    )
    assert store.enqueue([retry]) == [EnqueueResult.UPDATED]
    assert store.counts() == {"pending": 0, "delayed": 1, "leased": 0, "done": 0, "failed": 0}
    rec = store.get(a.fingerprint)
    assert rec["state"] == State.PENDING and rec["eligible_at"] == clock.now + 30  # type: ignore[index]
    assert store.next_eligible_at() == clock.now + 30
    assert store.lease(W, 10, LEASE) == []
    # the lease of the first attempt is void: its late ack must not mark the retry done
    assert store.ack(W, [(x.fingerprint, x.token)]) == 0
    clock.advance(29)
    assert store.lease(W, 10, LEASE) == []
    clock.advance(2)
    (y,) = store.lease(W, 10, LEASE)
    assert y.fingerprint == a.fingerprint and y.attempts == 1
    assert y.last_failure == ("rate_limited", "429")
    assert y.token != x.token
    assert store.ack(W, [(y.fingerprint, y.token)]) == 1


def test_a_late_update_from_a_worker_whose_lease_passed_on_is_stale(store: FrontierStore, clock: FakeClock) -> None:
    """A worker frozen past its lease hands a leased request back when it wakes (a pacer
    deferral or a retry: an update with its lease token). The lease passed on meanwhile:
    the update is refused as stale, like a late ack, and neither reopens the record the
    other worker finished (it was fetched and acked twice) nor takes away its lease."""
    a, b = req("http://a.test/1"), req("http://a.test/2")
    store.enqueue([a, b])
    frozen = {x.fingerprint: x for x in store.lease("frozen/0", 2, LEASE)}
    clock.advance(LEASE + 1)
    assert store.reclaim() == 2
    other = {x.fingerprint: x for x in store.lease("other/0", 2, LEASE)}
    assert store.ack("other/0", [(a.fingerprint, other[a.fingerprint].token)]) == 1

    def late(x: Leased) -> NewRequest:
        return NewRequest(x.fingerprint, x.data, x.domain, not_before=clock.now + 5, update=True, token=x.token)

    assert store.enqueue([late(frozen[a.fingerprint]), late(frozen[b.fingerprint])]) == [
        EnqueueResult.STALE,
        EnqueueResult.STALE,
    ]
    assert store.get(a.fingerprint)["state"] == State.DONE  # type: ignore[index]
    rec = store.get(b.fingerprint)
    assert rec["state"] == State.LEASED and rec["owner"] == "other/0"  # type: ignore[index]
    assert store.counts() == {"pending": 0, "delayed": 0, "leased": 1, "done": 1, "failed": 0}
    clock.advance(10)
    assert store.lease("other/0", 10, LEASE) == []
    assert store.ack("other/0", [(b.fingerprint, other[b.fingerprint].token)]) == 1
    # the holder's own update (its token is current) still goes through
    c = req("http://a.test/3")
    store.enqueue([c])
    (x,) = store.lease("other/0", 1, LEASE)
    assert store.enqueue([late(x)]) == [EnqueueResult.UPDATED]
    assert store.counts()["delayed"] == 1


def test_delayed_new_request_is_held(store: FrontierStore, clock: FakeClock) -> None:
    store.enqueue([NewRequest("f1", codec.encode(Request("http://a.test/")), "a.test", not_before=clock.now + 5)])
    assert store.counts()["delayed"] == 1 and not store.drained()
    assert store.lease(W, 1, LEASE) == []
    clock.advance(5)
    assert [x.fingerprint for x in store.lease(W, 1, LEASE)] == ["f1"]


def test_status_tells_delayed_retries_from_requests_held_by_pacing(store: FrontierStore, clock: FakeClock) -> None:
    """`delayed` counted retries and the pacer's deferrals together (66 delayed for about
    34 retries): status tells them apart by the attempts made, and gives the latest
    next-eligible time (the ETA is no sooner)."""
    a, b, c = req("http://a.test/1"), req("http://b.test/1"), req("http://c.test/1")
    store.enqueue([a, b, c])
    leased = {x.fingerprint: x for x in store.lease(W, 3, LEASE)}
    assert len(leased) == 3
    # a: a retry after its backoff; b: a first attempt the pacer put back until its site's turn
    retry = NewRequest(a.fingerprint, a.data, a.domain, not_before=clock.now + 30, attempts=1, update=True)
    paced = NewRequest(b.fingerprint, b.data, b.domain, not_before=clock.now + 90, attempts=0, update=True)
    store.enqueue([retry, paced])
    st = store.status()
    assert st.counts["delayed"] == 2
    assert st.delayed_retries == 1
    assert st.last_eligible_at == clock.now + 90
    store.ack(W, [(c.fingerprint, leased[c.fingerprint].token)])
    clock.advance(100)
    store.lease(W, 10, LEASE)
    st = store.status()
    assert st.counts["delayed"] == 0 and st.delayed_retries == 0 and st.last_eligible_at is None


# ---- order ----------------------------------------------------------------------------


def test_priority_first(store: FrontierStore) -> None:
    store.enqueue([req("http://a.test/low", -5), req("http://a.test/mid"), req("http://b.test/high", 10)])
    order = [codec.decode(x.data).url for x in store.lease(W, 3, LEASE)]
    assert order == ["http://b.test/high", "http://a.test/mid", "http://a.test/low"]


def test_one_lease_batch_never_interleaves_priority_levels(store: FrontierStore) -> None:
    """Priorities 1,1,0,0 of one domain come back 1,1,0,0 (SQLite gave 1,0,1,0): a batch
    is priority levels in turn, highest first, round-robin across domains only within one."""
    store.enqueue(
        [req("http://a.test/1a", 1), req("http://a.test/1b", 1), req("http://a.test/0a", 0), req("http://a.test/0b", 0)]
    )
    got = [(x.priority, codec.decode(x.data).url) for x in store.lease(W, 4, LEASE)]
    assert got == [(1, "http://a.test/1a"), (1, "http://a.test/1b"), (0, "http://a.test/0a"), (0, "http://a.test/0b")]
    # several domains and ties: non-increasing priority over the whole batch
    batch = [req(f"http://{d}.test/{p}/{i}", p) for i in range(3) for d in "abc" for p in (0, 1, 2)]
    store.enqueue(batch)
    prios = [x.priority for x in store.lease(W, len(batch), LEASE)]
    assert prios == sorted(prios, reverse=True) and len(prios) == len(batch)


def test_fairness_one_big_domain_cannot_starve_others(store: FrontierStore) -> None:
    store.enqueue([req(f"http://big.test/{i}") for i in range(200)])
    store.enqueue([req("http://small1.test/1"), req("http://small2.test/1"), req("http://small2.test/2")])
    first = [x.domain for x in store.lease(W, 6, LEASE)]
    # all three domains are served in the first batch, round-robin
    assert first[:3] == sorted(first[:3], key=["big.test", "small1.test", "small2.test"].index) or set(first[:3]) == {
        "big.test",
        "small1.test",
        "small2.test",
    }
    assert first.count("small1.test") == 1 and first.count("small2.test") == 2
    # leasing one at a time alternates domains too
    store.enqueue([req(f"http://other.test/{i}") for i in range(5)])
    singles = [store.lease(W, 1, LEASE)[0].domain for _ in range(4)]
    assert set(singles) == {"big.test", "other.test"}
    assert all(a != b for a, b in zip(singles, singles[1:], strict=False))


def test_fifo_within_a_domain(store: FrontierStore) -> None:
    store.enqueue([req(f"http://a.test/{i}") for i in range(5)])
    urls = [codec.decode(x.data).url for x in store.lease(W, 5, LEASE)]
    assert urls == [f"http://a.test/{i}" for i in range(5)]


# ---- leases -----------------------------------------------------------------------------


def test_expired_lease_returns_to_pending(store: FrontierStore, clock: FakeClock) -> None:
    store.enqueue([req("http://a.test/1")])
    (x,) = store.lease("dead/0", 1, LEASE)
    clock.advance(LEASE - 1)
    assert store.reclaim() == 0
    clock.advance(2)
    assert store.reclaim() == 1
    assert store.counts()["pending"] == 1
    (y,) = store.lease("alive/0", 1, LEASE)
    assert y.fingerprint == x.fingerprint
    assert store.ack("dead/0", [(x.fingerprint, x.token)]) == 0  # the dead worker's token is stale
    assert store.ack("alive/0", [(y.fingerprint, y.token)]) == 1


def test_renew_keeps_leases_alive(store: FrontierStore, clock: FakeClock) -> None:
    store.enqueue([req("http://a.test/1"), req("http://a.test/2")])
    store.lease(W, 2, LEASE)
    clock.advance(50)
    assert store.renew(W, LEASE) == 2
    clock.advance(50)
    assert store.reclaim() == 0
    assert store.status().leases_by_worker == {W: 2}


def test_restarted_worker_takes_its_own_leases_back_at_once(store: FrontierStore) -> None:
    store.enqueue([req("http://a.test/1"), req("http://b.test/1")])
    store.lease(W, 1, LEASE)
    store.lease("other/0", 1, LEASE)
    assert store.reclaim(W) == 1  # only mine, though unexpired
    c = store.counts()
    assert c["pending"] == 1 and c["leased"] == 1


def test_feed_messages_of_a_worker_no_longer_alive_go_back_to_the_head_of_the_feed(
    store: FrontierStore, clock: FakeClock
) -> None:
    if store.feed_key is None:  # SQLite has no feed
        assert store.take_feed(W, 10) == []
        store.feed_done(W)
        return
    r: Any = store.r  # type: ignore[attr-defined]
    feed, takers = store.feed_key, f"{store.feed_key}:takers"
    msgs = [json.dumps(f"http://a.test/{i}") for i in range(10)]
    r.rpush(feed, *msgs)
    store.heartbeat("dies/0", clock.now + 30)
    store.heartbeat("lives/0", clock.now + 100)
    assert store.take_feed("dies/0", 3) == msgs[:3]
    assert store.take_feed("lives/0", 2) == msgs[3:5]
    assert store.take_feed("dies/0", 3) == msgs[:3]  # not written yet: the same ones again
    assert r.lrange(feed, 0, -1) == msgs[5:]
    store.reclaim()  # both alive: nothing moves
    assert r.lrange(feed, 0, -1) == msgs[5:] and r.smembers(takers) == {"dies/0", "lives/0"}
    clock.advance(31)  # the first one's heartbeat expired (killed), the other beats on
    store.reclaim()
    assert r.lrange(feed, 0, -1) == msgs[:3] + msgs[5:]  # at the head, in order
    assert r.lrange(store.taken_key("lives/0"), 0, -1) == msgs[3:5]  # type: ignore[attr-defined]
    assert not r.exists(store.taken_key("dies/0")) and r.smembers(takers) == {"lives/0"}  # type: ignore[attr-defined]
    # a worker without any heartbeat, and one that stopped (until = now), are not alive either
    assert store.take_feed("ghost/0", 2) == msgs[:2]
    store.heartbeat("stopped/0", clock.now)
    assert store.take_feed("stopped/0", 2) == [msgs[2], msgs[5]]
    clock.advance(0.5)
    store.reclaim()
    assert r.lrange(feed, 0, 3) in ([*msgs[:3], msgs[5]], [msgs[2], msgs[5], *msgs[:2]])  # each list in order
    assert r.lrange(feed, 4, -1) == msgs[6:] and r.smembers(takers) == {"lives/0"}
    store.feed_done("lives/0")  # written: gone for good
    assert not r.exists(store.taken_key("lives/0")) and not r.smembers(takers)  # type: ignore[attr-defined]
    assert r.llen(feed) == 8
    store.take_feed("lives/0", 1)
    store.reset()  # a reset drops taken messages with the feed
    assert not r.exists(feed, takers, store.taken_key("lives/0"))  # type: ignore[attr-defined]


def test_release_returns_leases(store: FrontierStore) -> None:
    store.enqueue([req(f"http://a.test/{i}") for i in range(3)])
    got = store.lease(W, 3, LEASE)
    assert store.release(W, [got[0].fingerprint]) == 1
    assert store.release(W) == 2
    assert store.counts()["pending"] == 3


def test_two_workers_never_lease_the_same_record(make_store) -> None:
    s1, s2 = make_store(), make_store()
    s1.begin_run()
    s2.begin_run()
    s1.enqueue([req(f"http://d{i % 7}.test/{i}") for i in range(100)])
    seen: list[str] = []
    while True:
        a, b = s1.lease("w/1", 8, LEASE), s2.lease("w/2", 8, LEASE)
        if not a and not b:
            break
        seen += [x.fingerprint for x in a + b]
    assert len(seen) == len(set(seen)) == 100


def test_claim_worker_reuses_a_dead_slot(store: FrontierStore) -> None:
    alive = {111, 222}
    assert store.claim_worker("h", 111, alive.__contains__) == "h/0"
    assert store.claim_worker("h", 222, alive.__contains__) == "h/1"
    alive.discard(111)  # the first process died: a new one takes its id
    alive.add(333)
    assert store.claim_worker("h", 333, alive.__contains__) == "h/0"
    assert store.claim_worker("h", 222, alive.__contains__) == "h/1"  # same pid: same slot


# ---- drain and runs -----------------------------------------------------------------------


def test_drain_and_runs(make_store, clock: FakeClock) -> None:
    s = make_store()
    first = s.begin_run()
    assert not first.resumed
    s.enqueue([req("http://a.test/1")])
    assert s.finish_run() is None  # pending
    (x,) = s.lease(W, 1, LEASE)
    assert s.finish_run() is None  # leased
    s.enqueue([NewRequest(x.fingerprint, x.data, x.domain, not_before=clock.now + 9, attempts=1, update=True)])
    assert s.finish_run() is None  # delayed
    clock.advance(10)
    (y,) = s.lease(W, 1, LEASE)
    s.ack(W, [(y.fingerprint, y.token)])
    assert s.drained()
    ended = s.finish_run()
    assert ended is not None and ended.ended_at == clock.now and ended.counts["done"] == 1
    # an interrupted (unfinished) run is resumed; a finished one is followed by a new run
    again = make_store().begin_run()
    assert again.run_id == first.run_id + 1 and not again.resumed
    assert s.counts()["done"] == 0  # the new run starts from an empty frontier
    s.enqueue([req("http://a.test/1")])
    resumed = make_store().begin_run()
    assert resumed.resumed and resumed.run_id == again.run_id
    assert s.counts()["pending"] == 1
    assert [r.run_id for r in s.runs()] == [first.run_id, again.run_id]


# ---- bad records, commands ----------------------------------------------------------------


def test_dead_letter(store: FrontierStore) -> None:
    store.enqueue([NewRequest("bad", '{"v": 99, "r": {}}', "a.test")])
    (x,) = store.lease(W, 1, LEASE)
    with pytest.raises(codec.CodecError, match="version 99"):
        codec.decode(x.data)
    store.dead_letter(x.fingerprint, "version 99")
    assert store.drained()
    (d,) = store.dead_letters()
    assert (d.fingerprint, d.reason) == ("bad", "version 99") and "99" in d.data
    assert store.status().dead_letters == 1


def test_status_requeue_reset(store: FrontierStore, clock: FakeClock) -> None:
    store.enqueue([req(f"http://a.test/{i}") for i in range(6)])
    clock.advance(4)
    got = store.lease(W, 4, LEASE)
    store.fail(
        W,
        [
            (got[0].fingerprint, got[0].token, "blocked", "403"),
            (got[1].fingerprint, got[1].token, "blocked", "block page"),
            (got[2].fingerprint, got[2].token, "fatal", "400"),
        ],
    )
    clock.advance(6)
    st = store.status()
    assert st.counts == {"pending": 2, "delayed": 0, "leased": 1, "done": 0, "failed": 3}
    assert st.failed_by_class == {"blocked": 2, "fatal": 1}
    assert st.leases_by_worker == {W: 1}
    assert st.average_wait == pytest.approx(4.0)
    assert st.oldest_pending_age == pytest.approx(10.0)
    assert st.run is not None and st.run.ended_at is None

    assert store.requeue("blocked") == 2
    st = store.status()
    assert st.counts["pending"] == 4 and st.failed_by_class == {"fatal": 1}
    assert store.requeue() == 1

    store.reset()
    assert store.counts() == dict.fromkeys(["pending", "delayed", "leased", "done", "failed"], 0)
    assert store.status().run.ended_at is not None  # type: ignore[union-attr]


def test_resolve_makes_failed_records_done_and_leaves_the_others(store: FrontierStore) -> None:
    """scrapy scale replay: failed pages whose output was recovered from snapshots become done."""
    store.enqueue([req(f"http://a.test/{i}") for i in range(4)])
    got = store.lease(W, 3, LEASE)
    store.fail(
        W,
        [
            (got[0].fingerprint, got[0].token, "parse_failed", "missing fields: price"),
            (got[1].fingerprint, got[1].token, "parse_failed", "no items"),
        ],
    )
    assert store.finish_run() is None  # a lease and a pending record are left: the run goes on
    n = store.resolve([got[0].fingerprint, got[2].fingerprint, fp("http://a.test/3"), "unknown"])
    assert n == 1, "only the failed record changes (a leased or pending one is left alone)"
    st = store.status()
    assert st.counts == {"pending": 1, "delayed": 0, "leased": 1, "done": 1, "failed": 1}
    assert st.failed_by_class == {"parse_failed": 1}
    assert store.get(got[0].fingerprint)["state"] == State.DONE  # type: ignore[index]
    assert store.resolve([got[0].fingerprint]) == 0, "resolving twice is harmless"
    assert store.requeue("parse_failed") == 1, "the resolved record is not requeued"


def test_seed_from_outside_reopens_a_finished_job(store: FrontierStore) -> None:
    assert store.finish_run() is not None
    res = store.seed(["http://a.test/1", "http://a.test/1", Request("http://b.test/")])
    assert res == [EnqueueResult.ADDED, EnqueueResult.DUPLICATE, EnqueueResult.ADDED]
    assert store.status().run.ended_at is None  # type: ignore[union-attr]
    assert store.counts()["pending"] == 2


# ---- startup errors ----------------------------------------------------------------------


def test_unknown_scheme_fails_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(FrontierError, match="unknown URL scheme 'mysql'.*sqlite:///.*redis://"):
        open_store("mysql://x/y", "job")


def test_unreachable_redis_fails_at_startup() -> None:
    from tests.support.services import free_port

    with pytest.raises(FrontierError, match="cannot reach Redis.*start"):
        open_store(f"redis://127.0.0.1:{free_port()}/0", "job")


def test_foreign_or_incompatible_sqlite_file_fails(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)")
    with pytest.raises(FrontierError, match="another program"):
        open_store(f"sqlite:///{other}", "job")
    old = tmp_path / "old.db"
    open_store(f"sqlite:///{old}", "job").close()
    db = sqlite3.connect(old)
    db.execute("UPDATE scale_meta SET value='0' WHERE key='layout'")
    db.commit()
    db.close()
    with pytest.raises(FrontierError, match="layout 0.*move the file away"):
        open_store(f"sqlite:///{old}", "job")
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(FrontierError, match="not a usable"):
        open_store(f"sqlite:///{junk}", "job")


def test_sqlite_url_reading() -> None:
    from scrapy_scale.frontier.backends.sqlite import SqliteStore

    assert SqliteStore.path_from_url("sqlite:///abs/f.db") == "/abs/f.db"
    assert SqliteStore.path_from_url("sqlite:////abs/f.db") == "/abs/f.db"
    assert SqliteStore.path_from_url("sqlite://rel/f.db") == "rel/f.db"
    assert SqliteStore.path_from_url("sqlite://", "st") == os.path.join("st", "frontier.db")


# ---- codec ---------------------------------------------------------------------------------


def test_codec_round_trip_and_refusals() -> None:
    r = Request(
        "http://a.test/x",
        method="POST",
        body=b"\x00\xffhi",
        headers={"X": "y"},
        meta={"scale_attempt": 2, "k": [1, {"a": b"b"}]},
        cb_kwargs={"n": 1},
        priority=3,
    )
    back = codec.decode(codec.encode(r))
    assert (back.url, back.method, back.body, back.priority) == (r.url, "POST", b"\x00\xffhi", 3)
    assert back.headers[b"X"] == b"y" and back.meta == r.meta and back.cb_kwargs == {"n": 1}
    with pytest.raises(codec.CodecError, match="type object"):
        codec.encode(Request("http://a.test/", meta={"o": object()}))
    with pytest.raises(codec.CodecError, match="not JSON"):
        codec.decode("{nope")
    assert codec.request_from_feed('"http://a.test/f"').url == "http://a.test/f"
    assert codec.request_from_feed('{"url": "http://a.test/g", "priority": 4}').priority == 4
    with pytest.raises(codec.CodecError, match="unknown fields"):
        codec.request_from_feed('{"url": "http://a.test/", "evil": 1}')


class _CallbackSpider(scrapy.Spider):
    name = "cbs"

    def parse_item(self, response: Any) -> None:
        pass

    alias = parse_item  # the same function under a second name: Scrapy picks the first by name

    def on_error(self, failure: Any) -> None:
        pass


def test_codec_request_dict_is_scrapy_to_dict() -> None:
    """The codec's own ``to_dict`` (callback names cached per spider) gives exactly what
    Scrapy's ``Request.to_dict(spider=...)`` gives, and fails where it fails."""
    from scrapy import FormRequest
    from scrapy.http.request import NO_CALLBACK

    spider = _CallbackSpider()
    other = _CallbackSpider()
    requests = [
        Request("http://a.test/1"),
        Request(
            "http://a.test/2",
            callback=spider.parse_item,
            errback=spider.on_error,
            meta={"depth": 1},
            headers={"Referer": "http://a.test/"},
            cb_kwargs={"n": 1},
            priority=2,
            flags=["f"],
        ),
        Request("http://a.test/3", callback=spider.alias),
        Request("http://a.test/4", callback=other.parse_item),  # the same function of another instance
        FormRequest("http://a.test/6", formdata={"a": "b"}, callback=spider.parse),
    ]
    for _ in range(2):  # the second time from the cache
        for r in requests:
            assert codec.request_dict(r, spider) == r.to_dict(spider=spider)
    assert codec.request_dict(requests[2], spider)["callback"] == "alias"
    for bad in (Request("http://a.test/7", callback=NO_CALLBACK), Request("http://a.test/8", callback=print)):
        with pytest.raises(ValueError, match="not an instance method"):
            bad.to_dict(spider=spider)
        with pytest.raises(ValueError, match="not an instance method"):
            codec.request_dict(bad, spider)
    spider.alias = spider.on_error  # type: ignore[method-assign]  # an instance attribute shadows the cached name
    r = Request("http://a.test/9", callback=spider.parse_item)
    assert codec.request_dict(r, spider) == r.to_dict(spider=spider)
    assert codec.request_dict(r, spider)["callback"] == "parse_item"


#: a record as format 1 was first written (by the recursive-walk codec): stored records
#: must keep reading back the same, and new ones must be written the same way
V1_RECORD = (
    '{"v":1,"r":{"url":"http://a.test/x?q=1","callback":null,"errback":null,"headers":{"$d":[[{"$b":"UmVmZXJlcg=="},'
    '[{"$b":"aHR0cDovL2EudGVzdC8="}]]]},"body":{"$b":"AP8="},"cookies":{},"meta":{"depth":2,"k":[1,[2,3],'
    '{"a":{"$b":"Yg=="}}],"m":{"$d":[["$b","not bytes"]]},"t":{"$d":[[[1,2],"x"]]}},"encoding":"utf-8",'
    '"flags":["f"],"cb_kwargs":{"n":null,"f":1.5},"dont_filter":true,"method":"POST","priority":-3}}'
)


#: the same request as format 2 writes it: tuples are tagged now (format 1 wrote them as lists)
V2_RECORD = (
    '{"v":2,"r":{"url":"http://a.test/x?q=1","callback":null,"errback":null,"headers":{"$d":[[{"$b":"UmVmZXJlcg=="},'
    '[{"$b":"aHR0cDovL2EudGVzdC8="}]]]},"body":{"$b":"AP8="},"cookies":{},"meta":{"depth":2,"k":[1,{"$t":[2,3]},'
    '{"a":{"$b":"Yg=="}}],"m":{"$d":[["$b","not bytes"]]},"t":{"$d":[[{"$t":[1,2]},"x"]]}},"encoding":"utf-8",'
    '"flags":["f"],"cb_kwargs":{"n":null,"f":1.5},"dont_filter":true,"method":"POST","priority":-3}}'
)


#: the same request as this version writes it: the fields at Request's defaults left out
V2_COMPACT = (
    '{"v":2,"r":{"url":"http://a.test/x?q=1","headers":{"$d":[[{"$b":"UmVmZXJlcg=="},'
    '[{"$b":"aHR0cDovL2EudGVzdC8="}]]]},"body":{"$b":"AP8="},"meta":{"depth":2,"k":[1,{"$t":[2,3]},'
    '{"a":{"$b":"Yg=="}}],"m":{"$d":[["$b","not bytes"]]},"t":{"$d":[[{"$t":[1,2]},"x"]]}},'
    '"flags":["f"],"cb_kwargs":{"n":null,"f":1.5},"dont_filter":true,"method":"POST","priority":-3}}'
)


def test_codec_format_1_is_stable() -> None:
    """Records stored in format 1 read back exactly as before (a user dict that looks like
    a format 2 tag stays a dict there); new records are written in format 2, without the
    fields at their default; records of every field (the previous version's) read back."""
    r = Request(
        "http://a.test/x?q=1",
        method="POST",
        body=b"\x00\xff",
        headers={"Referer": "http://a.test/"},
        meta={"depth": 2, "k": [1, (2, 3), {"a": b"b"}], "m": {"$b": "not bytes"}, "t": {(1, 2): "x"}},
        cb_kwargs={"n": None, "f": 1.5},
        priority=-3,
        dont_filter=True,
        flags=["f"],
    )
    assert codec.encode(r) == V2_COMPACT
    for written in (V2_COMPACT, V2_RECORD):
        assert codec.decode(written).to_dict() == r.to_dict()
    # a request that differs from the defaults only in its URL is stored as its URL alone
    assert codec.encode(Request("http://a.test/only")) == '"http://a.test/only"'
    assert codec.decode('"http://a.test/only"').to_dict() == Request("http://a.test/only").to_dict()
    with pytest.raises(codec.CodecError, match="scheme"):
        codec.decode('"file:///etc/hostname"')
    assert codec.decode('{"v":1,"r":{"url":"http://a.test/","meta":{"x":{"$t":[1]},"y":{"$dec":"1"}}}}').meta == {
        "x": {"$t": [1]},
        "y": {"$dec": "1"},
    }
    back = codec.decode(V1_RECORD)
    assert back.meta == {"depth": 2, "k": [1, [2, 3], {"a": b"b"}], "m": {"$b": "not bytes"}, "t": {(1, 2): "x"}}
    assert (back.url, back.method, back.body, back.priority, back.dont_filter, back.flags) == (
        r.url,
        "POST",
        b"\x00\xff",
        -3,
        True,
        ["f"],
    )
    assert back.headers.getlist("Referer") == [b"http://a.test/"] and back.cb_kwargs == {"n": None, "f": 1.5}
    assert codec.decode(V1_RECORD.encode()).meta == back.meta  # a store that hands back bytes
    for bad, why in (
        ('{"v":1,"r":{"url":"http://a.test/","body":{"$b":1}}}', "bytes marker"),
        ('{"v":1,"r":{"url":"http://a.test/","headers":{"$d":[[1]]}}}', "cannot rebuild"),
        ('{"v":1,"r":{"url":"http://a.test/","body":{"$b":"A"}}}', "cannot rebuild"),
        ('{"$b":"AA=="}', "no 'r' field"),
        ("null", "no 'r' field"),
    ):
        with pytest.raises(codec.CodecError, match=why):
            codec.decode(bad)


# ---- bad records ---------------------------------------------------------------------


COLUMNS = {"a": "attempts", "el": "eligible_at", "enq": "enqueued_at", "t": "token"}


def _corrupt(store: FrontierStore, fingerprint: str, field: str, value: str) -> None:
    """Garble one field of a stored record, as a bad write or a hand edit would."""
    if hasattr(store, "path"):
        column = COLUMNS[field]
        db = sqlite3.connect(store.path)
        db.execute(f"UPDATE requests SET {column}=? WHERE fp=?", (value, fingerprint))  # noqa: S608
        db.commit()
        db.close()
    else:
        for part in range(store.parts):  # type: ignore[attr-defined]
            key = f"{store.run_prefix(part)}:r:{fingerprint}"  # type: ignore[attr-defined]
            if store.r.exists(key):  # type: ignore[attr-defined]
                store.r.hset(key, field, value)  # type: ignore[attr-defined]
                return
        raise AssertionError(f"no record {fingerprint} in any partition")


@pytest.mark.parametrize("field", ["a", "el", "t"])
def test_a_record_that_cannot_be_read_is_dead_lettered_alone(store: FrontierStore, field: str) -> None:
    # before: int('x') (Redis) / 'x' + 1 (SQLite) failed the whole lease, every sync, forever,
    # and the valid seed leased in the same batch stayed stuck
    store.enqueue([req("http://a.test/bad"), req("http://a.test/ok"), req("http://b.test/ok")])
    _corrupt(store, fp("http://a.test/bad"), field, "x")
    got = store.lease(W, 10, LEASE)
    ok = sorted(x.fingerprint for x in got if x.error is None)
    assert ok == sorted([fp("http://a.test/ok"), fp("http://b.test/ok")])
    (bad,) = [x for x in got if x.error is not None]
    assert bad.fingerprint == fp("http://a.test/bad") and bad.error.startswith("unreadable record: field ")
    assert f"field {field}=" in bad.error or f"field {COLUMNS[field]}=" in bad.error, bad.error
    (d,) = store.dead_letters()
    assert d.fingerprint == bad.fingerprint and d.reason == bad.error
    assert store.counts() == {"pending": 0, "delayed": 0, "leased": 2, "done": 0, "failed": 0}
    assert store.lease(W, 10, LEASE) == []
    assert store.ack(W, [(x.fingerprint, x.token) for x in got if x.error is None]) == 2
    assert store.drained()


# ---- heartbeats -----------------------------------------------------------------------------


def test_heartbeats_say_which_workers_are_alive_and_a_new_run_or_reset_forgets_them(
    make_store, clock: FakeClock
) -> None:
    store = make_store()
    run = store.begin_run()
    st = store.status()
    assert st.workers == {} and st.live_workers(clock.now) == [] and st.last_seen() == run.started_at
    clock.advance(1)
    store.heartbeat("a/0", clock.now + 10)
    store.heartbeat("b/0", clock.now + 10)
    clock.advance(2)
    store.heartbeat("b/0", clock.now)  # b closed cleanly: gone now
    st = store.status()
    assert st.workers == {"a/0": (clock.now - 2, clock.now + 8), "b/0": (clock.now, clock.now)}
    assert st.live_workers(clock.now) == ["a/0", "b/0"]  # "until" is inclusive
    clock.advance(0.5)
    assert store.status().live_workers(clock.now) == ["a/0"]
    clock.advance(10)  # a was killed: its beat ran out
    st = store.status()
    assert st.live_workers(clock.now) == [] and st.last_seen() == clock.now - 10.5
    assert make_store("other-job").status().workers == {}  # per job
    store.reset()
    assert store.status().workers == {}
    store.begin_run()
    store.heartbeat("a/0", clock.now + 10)
    store.enqueue([req("http://a.test/1")])
    x = store.lease("a/0", 1, LEASE)[0]
    store.ack("a/0", [(x.fingerprint, x.token)])
    assert store.finish_run() is not None
    store.begin_run()  # a new run starts without the old run's workers
    assert store.status().workers == {}


def _garble(path: Path, pages: tuple[int, ...] = (5, 11, 17), size: int = 3072) -> None:
    """Overwrite ``size`` bytes in each of the given pages with noise, as a bad disk would."""
    import random

    rnd = random.Random(9)
    with open(path, "r+b") as f:
        for page in pages:
            f.seek(page * 4096)
            f.write(bytes(rnd.randrange(256) for _ in range(size)))


def _filled_sqlite_frontier(path: Path, job: str = "job", n: int = 2000) -> None:
    s = open_store(f"sqlite:///{path}", job)
    s.begin_run()
    s.enqueue([req(f"http://d{i % 7}.test/{i}") for i in range(n)])
    s.close()  # the last connection checkpoints the WAL into the file


def test_a_corrupt_sqlite_frontier_is_refused_at_open_naming_the_file(tmp_path: Path) -> None:
    # before: the resume crawled what it could, then 'Crawled 432 pages (at 0 pages/min)' forever
    path = tmp_path / "f.db"
    _filled_sqlite_frontier(path)
    assert (path.stat().st_size // 4096) > 20 and not Path(f"{path}-wal").exists()
    _garble(path)
    with pytest.raises(FrontierError) as e:
        open_store(f"sqlite:///{path}", "job")
    msg = str(e.value)
    assert f"the SQLite frontier '{path}' is corrupt" in msg and "PRAGMA integrity_check" in msg, msg
    assert "move it away to start the job over" in msg


def test_an_inconsistent_sqlite_frontier_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    _filled_sqlite_frontier(path, n=10)
    db = sqlite3.connect(path)
    db.execute("UPDATE counts SET n = n + 5 WHERE state = 0")  # counters that promise work that is not there
    db.commit()
    db.close()
    with pytest.raises(FrontierError, match="is corrupt \\(inconsistent: the counters say"):
        open_store(f"sqlite:///{path}", "job")


def corruption_error(tmp_path: Path) -> sqlite3.DatabaseError:
    """The real error SQLite raises when a query reaches a garbled page (while the crawl runs)."""
    path = tmp_path / "live.db"
    _filled_sqlite_frontier(path)
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA quick_check").fetchall()  # intact: the corruption comes later
        _garble(path, pages=tuple(range(2, path.stat().st_size // 4096)))
        db.close()
        db = sqlite3.connect(path)
        with pytest.raises(sqlite3.DatabaseError) as e:
            db.execute("SELECT COUNT(*), MAX(data) FROM requests").fetchall()
        return e.value
    finally:
        db.close()


def test_sqlite_corruption_during_the_crawl_is_fatal_not_retried(tmp_path: Path) -> None:
    s = open_store(f"sqlite:///{tmp_path / 'f.db'}", "job")
    try:
        fatal = s.fatal_error(corruption_error(tmp_path))
        assert fatal is not None and str(tmp_path / "f.db") in fatal and "is corrupt" in fatal, fatal
        assert s.fatal_error(sqlite3.OperationalError("database or disk is full")) is None
        assert s.fatal_error(sqlite3.OperationalError("database is locked")) is None
    finally:
        s.close()


class CodecItem(scrapy.Item):
    name = scrapy.Field()
    price = scrapy.Field()


@dataclasses.dataclass
class CodecListing:
    url: str
    page: int = 1


class CodecSpider(scrapy.Spider):
    name = "codec"


def test_codec_format_2_round_trips_items_and_the_usual_values() -> None:
    """An Item (or a dataclass) in cb_kwargs/meta, and datetime, Decimal, set, tuple, bytes,
    round-trip as data: before, such a request could not be stored at all."""
    spider = CodecSpider()
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    values = {
        "when": when,
        "day": when.date(),
        "t": when.timetz(),
        "dt": datetime.timedelta(days=1, seconds=2),
        "price": decimal.Decimal("10.10"),
        "tags": {"a", "b"},
        "frozen": frozenset({1}),
        "pair": (1, (2, b"x")),
        "raw": b"\x00\xff",
        "looks_tagged": {"$t": [1], "$item": 2},
    }
    r = Request(
        "http://a.test/p",
        cb_kwargs={
            "item": CodecItem(name="n", price=decimal.Decimal("1.5")),
            "listing": CodecListing("http://a.test/", 3),
        },
        meta=values,
    )
    data = codec.encode(r, spider)
    assert "pickle" not in data and data.startswith('{"v":2,')
    back = codec.decode(data, spider)
    assert back.meta == values and type(back.meta["pair"]) is tuple and type(back.meta["tags"]) is set
    item = back.cb_kwargs["item"]
    assert isinstance(item, CodecItem) and dict(item) == {"name": "n", "price": decimal.Decimal("1.5")}
    assert back.cb_kwargs["listing"] == CodecListing("http://a.test/", 3)
    # what still cannot be stored names its type
    with pytest.raises(codec.NotStorable) as e:
        codec.encode(Request("http://a.test/", meta={"f": open}), spider)
    assert e.value.type_name == "builtin_function_or_method"


def test_codec_re_creates_only_allowed_item_classes_and_never_imports_a_record_path() -> None:
    """A record's item class must be an Item/dataclass/attrs class of the spider's own
    package (or listed in SCALE_FRONTIER_REQUEST_CLASSES): checked on the path before any
    import, so a record naming another module does not import it."""
    import sys

    spider = CodecSpider()  # defined in tests.crawl.test_frontier_store: package "tests"
    ok = '{"v":2,"r":{"url":"http://a.test/","cb_kwargs":{"i":{"$item":["%s",{"name":"n"}]}}}}'
    assert isinstance(codec.decode(ok % "tests.crawl.test_frontier_store.CodecItem", spider).cb_kwargs["i"], CodecItem)
    assert "antigravity" not in sys.modules
    for path, why in (
        ("antigravity.Thing", "does not allow"),
        ("os.path.join", "does not allow"),
        ("tests.crawl.test_frontier_store.CodecSpider", "not a scrapy.Item/dataclass/attrs"),
        ("tests.crawl.test_frontier_store.codec", "not a scrapy.Item/dataclass/attrs"),
    ):
        with pytest.raises(codec.CodecError, match=why):
            codec.decode(ok % path, spider)
    assert "antigravity" not in sys.modules
    # an item of a class no record could re-create is not stored in the first place
    with pytest.raises(codec.NotStorable, match="does not allow"):
        codec.encode(Request("http://a.test/", cb_kwargs={"i": CodecItem(name="n")}), scrapy.Spider("other"))
    # the record of a request that was kept in memory only says so
    with pytest.raises(codec.CodecError, match="kept in memory only"):
        codec.decode(codec.memory_marker("CodecItem"), spider)


# ---- a Redis that lost the job's state --------------------------------------------------------


@pytest.mark.parametrize("loss", ["flushed", "older snapshot"])
def test_a_redis_that_lost_the_jobs_state_is_fatal_not_finished(redis_url: str, redis_prefix: str, loss: str) -> None:
    import redis as redis_lib

    from scrapy_scale.frontier.store import FrontierFatal

    s = open_store(redis_url, redis_prefix)
    r = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    try:
        s.begin_run()
        s.enqueue([req(f"http://a.test/{i}") for i in range(3)])
        assert s.counts()["pending"] == 3
        if loss == "flushed":  # what a restart without persistence leaves: none of the job's keys
            for k in r.scan_iter(match=f"scale:{{{redis_prefix}}}*"):
                r.delete(k)
        else:  # the run marker is there, but fewer records than this worker saw
            prefix = f"scale:{{{redis_prefix}}}:{r.hget(f'scale:{{{redis_prefix}}}:run', 'id')}"
            r.hincrby(f"{prefix}:cnt", "pending", -2)
        with pytest.raises(FrontierFatal, match="stops instead of declaring the run finished"):
            s.counts()
        assert s.fatal_error(FrontierFatal("x")) == "x"
    finally:
        s.close()
        r.close()


def test_a_store_of_another_process_checks_nothing(redis_url: str, redis_prefix: str) -> None:
    # `scrapy scale status` and friends open the job without beginning a run: no false alarm
    s = open_store(redis_url, redis_prefix)
    try:
        assert s.counts() == {"pending": 0, "delayed": 0, "leased": 0, "done": 0, "failed": 0}
    finally:
        s.close()


def test_beats_read_back_every_workers_heartbeat_as_stored_a_bad_one_included(
    store: FrontierStore, clock: FakeClock
) -> None:
    """What the fair lease share counts live workers from (frontier/scheduling/fair_share.py checks
    the values: this read passes a corrupt one on, unchecked, instead of failing)."""
    store.heartbeat("a/0", clock.now + 30)
    store.heartbeat("b/0", clock.now)
    beats = store.beats()
    assert {w: tuple(float(x) for x in v) for w, v in beats.items()} == {
        "a/0": (clock.now, clock.now + 30),
        "b/0": (clock.now, clock.now),
    }
    if store.feed_key is not None:  # Redis: the alive hash holds "last_beat until"
        store.r.hset(f"{store.key}:alive", "bad/0", "x")  # type: ignore[attr-defined]
    else:
        with store.db:  # type: ignore[attr-defined]
            store.db.execute(  # type: ignore[attr-defined]
                "INSERT INTO beats (job, worker, at, until) VALUES (?, 'bad/0', 'x', 'y')", (store.job,)
            )
    assert "x" in store.beats()["bad/0"]
    store.reset()
    assert store.beats() == {}
