"""The compact record layout, on every backend (the conformance suite's fixtures): a done
URL keeps only what dedup and status need, records of the previous layout still read back,
and hostile values in the new keys are skipped, never a stall or a crash."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy import Request

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.store import EnqueueResult, FrontierStore, NewRequest, State
from tests.crawl import test_frontier_store as conformance

# the conformance suite's fixtures: every backend (SQLite, Redis, Redis Cluster)
backend, clock, make_store = conformance.backend, conformance.clock, conformance.make_store
redis_cluster_url, store = conformance.redis_cluster_url, conformance.store

pytestmark = pytest.mark.crawl

W = "host/0"
LEASE = 60.0
#: a record as the previous version wrote it: every field of Request.to_dict
OLD_DATA = (
    '{"v":2,"r":{"url":"http://old.test/p","callback":null,"errback":null,"headers":{},"body":{"$b":""},'
    '"cookies":{},"meta":{"k":1},"encoding":"utf-8","flags":[],"cb_kwargs":{},"dont_filter":false,'
    '"method":"GET","priority":0}}'
)


def seed(url: str) -> NewRequest:
    return codec.new_request(Request(url))


def lease_one(store: FrontierStore) -> Any:
    (x,) = store.lease(W, 1, LEASE)
    return x


def test_a_done_url_keeps_only_its_fingerprint_and_still_dedups(store: FrontierStore) -> None:
    store.enqueue([seed("http://a.test/1")])
    x = lease_one(store)
    assert codec.decode(x.data).url == "http://a.test/1"
    assert x.data == '"http://a.test/1"'  # only its URL differs from Scrapy's defaults
    assert store.ack(W, [(x.fingerprint, x.token)]) == 1
    assert store.ack(W, [(x.fingerprint, x.token)]) == 0  # a repeated ack is harmless
    got = store.get(x.fingerprint)
    assert got is not None and got["state"] is State.DONE and got["data"] == ""
    assert store.enqueue([seed("http://a.test/1")]) == [EnqueueResult.DUPLICATE]
    assert store.counts()["done"] == 1
    if hasattr(store, "run_prefix"):  # Redis: no key of its own once done
        assert not store.r.exists(f"{store.run_prefix()}:r:{x.fingerprint}")


def test_a_done_url_fetched_again_gets_a_record_and_old_tokens_stay_stale(store: FrontierStore) -> None:
    store.enqueue([seed("http://a.test/1")])
    x = lease_one(store)
    store.ack(W, [(x.fingerprint, x.token)])
    again = codec.new_request(Request("http://a.test/1", dont_filter=True))
    import dataclasses

    assert store.enqueue([dataclasses.replace(again, reopen=True)]) == [EnqueueResult.REOPENED]
    assert store.counts()["done"] == 0 and store.counts()["pending"] == 1
    assert store.ack(W, [(x.fingerprint, x.token)]) == 0  # the old lease's ack stays stale
    y = lease_one(store)
    assert y.fingerprint == x.fingerprint and y.token != x.token
    assert store.ack(W, [(y.fingerprint, y.token)]) == 1
    # a retry of a done URL (update) makes it pending again too, then done again
    retry = dataclasses.replace(seed("http://a.test/1"), update=True, attempts=1)
    assert store.enqueue([retry]) == [EnqueueResult.UPDATED]
    z = lease_one(store)
    assert z.attempts == 1 and store.ack(W, [(z.fingerprint, z.token)]) == 1
    assert store.counts()["done"] == 1


def test_failed_records_keep_what_requeue_needs_and_resolve_makes_them_done(store: FrontierStore) -> None:
    store.enqueue([seed("http://a.test/1"), seed("http://a.test/2")])
    a, b = store.lease(W, 2, LEASE)
    store.fail(W, [(a.fingerprint, a.token, "fatal", "boom"), (b.fingerprint, b.token, "blocked", "403")])
    assert store.requeue("fatal") == 1
    back = lease_one(store)
    assert back.fingerprint == a.fingerprint and back.last_failure == ("fatal", "boom")
    assert codec.decode(back.data).url == codec.decode(a.data).url
    assert store.resolve([b.fingerprint]) == 1
    assert store.enqueue([seed(codec.decode(b.data).url)]) == [EnqueueResult.DUPLICATE]
    assert store.counts()["done"] == 1 and store.counts()["failed"] == 0


def _write_old_layout(store: FrontierStore, clock: FakeClock) -> tuple[str, str]:
    """A pending and a done record as the previous version wrote them; their fingerprints."""
    pending_fp = codec.default_fingerprint(Request("http://old.test/p"))
    done_fp = codec.default_fingerprint(Request("http://old.test/done"))
    now = clock()
    if hasattr(store, "run_prefix"):
        p, r = store.run_prefix(), store.r
        r.hset(
            f"{p}:r:{pending_fp}",
            mapping={"d": OLD_DATA, "dom": "old.test", "p": 0, "a": 0, "el": now, "enq": now, "t": 0, "st": 0},
        )
        r.rpush(f"{p}:q:0:old.test", pending_fp)  # a queue entry as hex text
        r.zadd(f"{p}:dq:0", {"old.test": 0})
        r.zadd(f"{p}:prios", {"0": 0})
        r.hset(f"{p}:r:{done_fp}", mapping={"dom": "old.test", "p": 0, "a": 0, "el": now, "enq": now, "t": 1, "st": 3})
        r.hincrby(f"{p}:cnt", "pending", 1)
        r.hincrby(f"{p}:cnt", "done", 1)
    else:
        db = store.db  # type: ignore[attr-defined]
        for fp, state, data, seq in ((pending_fp, 0, OLD_DATA, 1), (done_fp, 3, OLD_DATA, 2)):
            db.execute(
                "INSERT INTO requests (job, fp, state, data, domain, priority, attempts, eligible_at, enqueued_at, "
                "token, seq) VALUES (?, ?, ?, ?, 'old.test', 0, 0, ?, ?, 1, ?)",
                (store.job, fp, state, data, now, now, seq),
            )
    return pending_fp, done_fp


#: backends whose job is split into several partitions (SCALE_FRONTIER_PARTITIONS): the keys
#: these tests write by hand are partition 0's, where a site hashed to another partition is
#: not looked for; the previous layout had one partition, and each partition runs the same
#: scripts (their spread: tests/crawl/test_redis_store_partitions.py)
PARTITIONED = {"redis-s3", "redis-cluster"}


def test_records_of_the_previous_layout_read_back(store: FrontierStore, clock: FakeClock, backend: str) -> None:
    if backend in PARTITIONED:
        pytest.skip("the previous layout had one partition")
    pending_fp, done_fp = _write_old_layout(store, clock)
    clock.advance(1)
    assert store.counts()["pending"] == 1 and store.counts()["done"] == 1
    x = lease_one(store)
    assert x.fingerprint == pending_fp and x.error is None
    r = codec.decode(x.data)
    assert (r.url, r.meta, r.method) == ("http://old.test/p", {"k": 1}, "GET")
    assert store.ack(W, [(x.fingerprint, x.token)]) == 1
    # an old done record deduplicates, and both kinds of done records count
    assert store.enqueue([seed("http://old.test/done"), seed("http://old.test/p")]) == [EnqueueResult.DUPLICATE] * 2
    assert store.counts()["done"] == 2
    st = store.get(done_fp)
    assert st is not None and st["state"] is State.DONE


def test_a_record_whose_data_is_not_a_request_is_refused_when_read(store: FrontierStore) -> None:
    """The compact forms are untrusted too: a JSON string that is no allowed URL, a number."""
    for i, data in enumerate(('"file:///etc/hostname"', '"not a url"', "5", '{"v":2,"r":"x"}')):
        store.enqueue([NewRequest(f"{i:040x}", data, "a.test")])
    for x in store.lease(W, 10, LEASE):
        with pytest.raises(codec.CodecError):
            codec.decode(x.data)
        store.dead_letter(x.fingerprint, "bad")
    assert store.counts()["pending"] == 0 and store.status().dead_letters == 4


@pytest.fixture
def redis_store(make_store, backend: str) -> FrontierStore:
    if backend == "sqlite":
        pytest.skip("Redis keys")
    if backend in PARTITIONED:
        pytest.skip("keys written by hand into partition 0")
    s = make_store()
    s.begin_run()
    return s


def test_hostile_keys_in_redis_are_skipped_with_one_warning(redis_store: Any, caplog) -> None:
    s = redis_store
    p = s.run_prefix()
    fps = [codec.default_fingerprint(Request(f"http://a.test/{i}")) for i in range(3)]
    # every done-set bucket a fingerprint may land in holds a string instead of a hash
    for fp in fps:
        for n in range(3, 8):
            s.r.set(f"{p}:d:{fp[:n]}", "garbage")
    # garbage in a ready queue: entries no record answers to
    s.r.rpush(f"{p}:q:0:a.test", b"\xff" * 20, "not-a-fingerprint")
    s.r.zadd(f"{p}:dq:0", {"a.test": 0})
    s.r.zadd(f"{p}:prios", {"0": 0})
    assert s.enqueue([seed(f"http://a.test/{i}") for i in range(3)]) == [EnqueueResult.ADDED] * 3
    leased = s.lease(W, 10, LEASE)
    assert sorted(x.fingerprint for x in leased) == sorted(fps)
    with caplog.at_level(logging.WARNING, "scrapy_scale"):
        assert s.ack(W, [(x.fingerprint, x.token) for x in leased]) == 3
        s.counts()
        s.counts()
    warned = [r for r in caplog.records if "done set" in r.getMessage()]
    assert len(warned) == 1
    assert s.enqueue([seed("http://a.test/0")]) == [EnqueueResult.DUPLICATE]  # the bucket was replaced
    assert s.counts()["done"] == 3 and s.status().counts["pending"] == 0


def _packed(hexes: str) -> bytes:
    even = len(hexes) // 2 * 2
    return bytes.fromhex(hexes[:even]) + hexes[even:].encode()


@pytest.mark.parametrize(("done_before", "level"), [(0, 3), (300_000, 4), (4_500_000, 5)])
def test_the_worker_packs_fingerprints_as_the_scripts_did_at_every_done_level(
    redis_store: Any, done_before: int, level: int
) -> None:
    """The worker sends each fingerprint's hex packed to bytes (store.packs) and the scripts
    key the ready queue and the done set with it; a call that sends none (isdone, from
    get) packs in Lua: the same keys and members, so records of either way read back."""
    import redis

    from scrapy_scale.frontier.backends.redis.store import packs

    s = redis_store
    p = s.run_prefix()
    s.r.hset(f"{p}:cnt", "dn", done_before)  # the done set's level follows its count
    reqs = [seed(f"http://a.test/{i}") for i in range(3)]
    assert s.enqueue(reqs) == [EnqueueResult.ADDED] * 3
    raw = redis.Redis.from_url(s.url)
    try:
        queued = raw.lrange(f"{p}:q:0:a.test", 0, -1)
        assert sorted(queued) == sorted(bytes.fromhex(r.fingerprint) for r in reqs)
        leased = s.lease(W, 10, LEASE)
        assert s.ack(W, [(x.fingerprint, x.token) for x in leased]) == 3
        for r in reqs:
            fp = r.fingerprint
            assert packs(fp) == (bytes.fromhex(fp), _packed(fp[1:]))  # what the worker sent
            assert raw.hexists(f"{p}:d:{fp[:level]}", _packed(fp[level:])), (fp, level)
            got = s.get(fp)  # isdone: packed in Lua
            assert got is not None and got["state"] is State.DONE
    finally:
        raw.close()
    assert s.enqueue(reqs) == [EnqueueResult.DUPLICATE] * 3
    # a fingerprint of another form is not packed: it keys the done set as it is
    other = NewRequest("not-hex-fingerprint", '"http://a.test/x"', "a.test")
    assert s.enqueue([other]) == [EnqueueResult.ADDED]
    (x,) = s.lease(W, 10, LEASE)
    assert s.ack(W, [(x.fingerprint, x.token)]) == 1
    assert packs(other.fingerprint) == (b"", b"")
    assert s.r.hexists(f"{p}:d:{other.fingerprint[:level]}", other.fingerprint[level:])
    assert s.enqueue([other]) == [EnqueueResult.DUPLICATE]
