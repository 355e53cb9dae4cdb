"""The pool's shared state on real Redis and on SQLite: batched sync, a newer state
change is never overwritten by another worker's older record, restart keeps state."""

from __future__ import annotations

import pytest
import redis

from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.egress.health import HEALTHY, QUARANTINED
from scrapy_scale.egress.identity import parse_egresses
from scrapy_scale.egress.pool import EgressPool
from scrapy_scale.egress.shared import RedisState, SqliteState
from tests.unit.test_egress_policy import POLICY

URLS = ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
A = "127.0.0.1:8001"


def pool(clock):
    return EgressPool(parse_egresses(URLS), POLICY, clock=clock, rng=Randomness(1))


@pytest.fixture(params=["redis", "sqlite"])
def stores(request, tmp_path):
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        job = request.getfixturevalue("redis_prefix")
        made = [RedisState(url, job), RedisState(url, job)]
    else:
        made = [SqliteState(str(tmp_path / "egress.db"), "job"), SqliteState(str(tmp_path / "egress.db"), "job")]
    yield made
    for s in made:
        s.close()


@pytest.mark.crawl
def test_a_quarantine_reaches_a_worker_that_keeps_failing_through_that_egress(stores):
    clock = FakeClock()
    s0, s1 = stores
    w0, w1 = pool(clock), pool(clock)
    for _ in range(3):
        w0.observe(A, "d", "egress_failed", "egress", False)
    w1.observe(A, "d", "egress_failed", "egress", False)  # w1 has evidence of its own, not enough
    records, _ = s0.sync("w0", w0.take_dirty(), w0.counters(), clock.now)
    assert records[A]["u"] > clock.now
    # w1's older record must not overwrite w0's quarantine; w1 takes it at this sync
    records, live = s1.sync("w1", w1.take_dirty(), w1.counters(), clock.now)
    assert records[A]["u"] > clock.now and set(live) == {"w0", "w1"}
    w1.observe(A, "d", "egress_failed", "egress", False)  # more of its own while the sync ran: dirty again
    ev = w1.merge(records)
    assert [(e.kind, e.detail) for e in ev] == [("adopted", "quarantined")]
    assert w1.state(A) == QUARANTINED and {w1.choose("d").egress.id for _ in range(10)} == {"127.0.0.1:8002"}
    # a restart (a new pool on the same state) starts quarantined
    w2 = pool(clock)
    w2.merge(s1.load())
    assert w2.state(A) == QUARANTINED
    # the restore made later by w1 wins over w0's quarantine
    clock.now = w1.health[A].until + 1
    w1.choose("d")
    w1.observe(A, "d", "ok", "none", True)
    s1.sync("w1", w1.take_dirty(), w1.counters(), clock.now)
    records, _ = s0.sync("w0", w0.take_dirty(), w0.counters(), clock.now)
    w0.merge(records)
    assert w0.state(A) == HEALTHY
    state = s0.read_all()
    assert set(state["counts"]) == {"w0", "w1"}


@pytest.mark.crawl
def test_one_sync_is_a_handful_of_redis_commands_whatever_the_traffic(redis_server):
    url = f"redis://127.0.0.1:{redis_server.port}/0"  # a private server: its command counts are ours
    clock = FakeClock()
    s = RedisState(url, "job")
    p = pool(clock)
    s.sync("w", p.take_dirty(), p.counters(), clock.now)  # the first loads the script
    for i in range(5000):
        p.choose(f"d{i % 50}")
        p.observe(A if i % 2 else "127.0.0.1:8002", f"d{i % 50}", "blocked", "egress_domain", True)
    r = redis.Redis.from_url(url)

    def calls() -> int:
        return sum(v["calls"] for k, v in r.info("commandstats").items() if k != "cmdstat_info")

    n0 = calls()
    s.sync("w", p.take_dirty(), p.counters(), clock.now)
    # 5000 outcomes over 100 keys: one script call (its HGET/HSET inside count too), 2 HSET, 2 HGETALL
    assert calls() - n0 <= 5 + 2 * 100
    assert 1 <= r.info("commandstats")["cmdstat_evalsha"]["calls"] <= 2  # (+ one after a script load)
    s.close()
    r.close()


NOW = 1_700_000_000.0


@pytest.mark.crawl
@pytest.mark.parametrize(
    "bad",
    [{"c": NOW + 1e6}, {"c": "1e12"}, {"c": NOW + 5, "u": "x"}, {"c": NOW + 5, "r": NOW + 1e6}],
    ids=["far_future_c", "numeric_string_c", "bad_field", "far_future_r"],
)
def test_a_stored_record_that_does_not_decode_is_overwritten_by_a_newer_one(stores, bad):
    """A stored record with a finite far-future or a numeric-string ``c`` was kept against
    every newer record (the pool's merge rejects it), so that egress's state stopped being
    shared. It now holds nothing, as in the merge, on SQLite and in the Redis script."""
    s0, s1 = stores
    s0.longest = s1.longest = 3600.0
    s0.sync("someone", {A: {"g": 0, "b": 0, "u": 0, "l": 0, **bad}}, {}, NOW)  # nothing stored: written
    good = {"g": 0.0, "b": 0.0, "at": NOW, "u": NOW + 30, "l": 1, "c": NOW, "r": 0.0}
    records, _ = s1.sync("w1", {A: good}, {}, NOW)
    assert records[A] == good
    w = pool(FakeClock(NOW))
    assert [e.kind for e in w.merge(s0.load())] == ["adopted"] and w.state(A) == QUARANTINED
    # a valid newer state change is still kept against an older record
    s0.sync("w0", {A: {**good, "u": 0.0, "c": NOW + 10}}, {}, NOW + 10)
    records, _ = s1.sync("w1", {A: good}, {}, NOW + 10)
    assert records[A]["c"] == NOW + 10
