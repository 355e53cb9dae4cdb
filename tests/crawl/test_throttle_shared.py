"""The shared limiter (GCRA in Lua on the Redis clock) and the learned-delay stores, against
the real Redis and a real SQLite file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_scale.throttle.shared import RedisShared, SqliteShared, open_shared

pytestmark = pytest.mark.crawl


def test_gcra_grants_then_says_how_long_to_wait(redis_url: str, redis_prefix: str) -> None:
    sh = RedisShared(redis_url, redis_prefix)
    assert sh.acquire("a.com", 0.5) == 0.0
    wait = sh.acquire("a.com", 0.5)
    assert 0.3 < wait <= 0.5  # the next allowed time, on the server's clock
    assert sh.acquire("b.com", 0.5) == 0.0  # another site: its own key
    time.sleep(wait + 0.02)
    assert sh.acquire("a.com", 0.5) == 0.0
    sh.close()


@pytest.mark.serial
def test_many_workers_together_never_beat_the_interval(redis_url: str, redis_prefix: str) -> None:
    """Four clients racing for one site: grants are at least the interval apart (Redis clock)."""
    import threading

    grants: list[float] = []
    lock = threading.Lock()
    r = redis.Redis.from_url(redis_url)

    def worker() -> None:
        sh = RedisShared(redis_url, redis_prefix)
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            wait = sh.acquire("site", 0.1)
            if wait == 0.0:
                sec, usec = r.time()
                with lock:
                    grants.append(sec + usec / 1e6)
            else:
                time.sleep(wait)
        sh.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grants.sort()
    assert len(grants) >= 8
    # grant times are read after the script returned, so allow the round trip between two reads
    assert min(b - a for a, b in zip(grants, grants[1:], strict=False)) > 0.1 - 0.03


def test_pause_holds_every_worker_and_one_key_per_site(redis_url: str, redis_prefix: str) -> None:
    a, b = RedisShared(redis_url, redis_prefix), RedisShared(redis_url, redis_prefix)
    t0 = time.monotonic()
    assert a.pause("slow.com", 5.0) == pytest.approx(5.0, abs=0.05)

    def left() -> float:  # of the pause, as the clock runs (CI, loaded: b's first call 0.27 s later)
        return 5.0 - (time.monotonic() - t0)

    assert left() - 0.1 <= b.acquire("slow.com", 0.1) <= 5.0 + 0.05
    assert left() - 0.1 <= a.pause("slow.com", 1.0) <= 5.0 + 0.05  # a shorter pause does not shorten it
    r = redis.Redis.from_url(redis_url)
    keys = list(r.scan_iter(match=f"*{redis_prefix}*rate*"))
    assert len(keys) == 1 and 0 < r.pttl(keys[0]) <= 66_000  # expires when the site goes quiet
    a.close()
    b.close()


def test_learned_delays_round_trip(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    state = {"a.com": {"delay": 0.5, "too_fast": 0.4, "too_fast_at": 10.0, "at": 11.0}}
    for sh in (open_shared(redis_url, redis_prefix), open_shared(f"sqlite:///{tmp_path}/t/throttle.db", "job")):
        assert sh.load() == {}
        sh.save(state)
        assert sh.load() == state
        sh.close()
    other = SqliteShared(str(tmp_path / "t" / "throttle.db"), "other-job")
    assert other.load() == {}  # per job
    other.close()


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "abc", "1e400"])
def test_a_limiter_key_that_is_not_a_finite_number_counts_as_none(redis_url: str, redis_prefix: str, bad: str) -> None:
    """Issue 19 item 4: a NaN time compares false with everything, which granted every request."""
    sh = RedisShared(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    r.set(sh.rate_key("a.com"), bad)
    assert sh.acquire("a.com", 0.5) == 0.0
    assert 0.3 < sh.acquire("a.com", 0.5) <= 0.5  # paced again from a sane key
    r.set(sh.rate_key("a.com"), bad)
    assert sh.pause("a.com", 2.0) == pytest.approx(2.0, abs=0.05)
    sh.close()


def test_a_limiter_key_far_ahead_is_brought_back_to_the_longest_wait(redis_url: str, redis_prefix: str) -> None:
    """Issue 19 item 5: the wait found is returned (the caller caps it and says so) and the
    key is brought back to now + max_wait, so the next caller is not held for centuries."""
    sh = RedisShared(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    r.set(sh.rate_key("a.com"), "99999999999")
    assert sh.acquire("a.com", 0.5, max_wait=3.0) > 9e10
    assert sh.acquire("a.com", 0.5, max_wait=3.0) == pytest.approx(3.0, abs=0.1)
    sh.close()


def shared_throttle(redis_url: str, job: str) -> object:
    from scrapy.utils.test import get_crawler

    from scrapy_scale.throttle import Throttle

    crawler = get_crawler(settings_dict={"SCALE_THROTTLE_URL": redis_url, "SCALE_JOB": job})
    th = Throttle.from_crawler(crawler)
    th.upkeep.load_learned()  # what spider_opened does first: open the shared state (no reactor here)
    assert th.shared is not None
    return th


def test_a_limiter_key_of_another_type_is_replaced_and_the_other_sites_stay_shared(
    redis_url: str, redis_prefix: str
) -> None:
    """Review of issue 19 item 4: a `rate:<site>` key that is a hash made GET fail with
    WRONGTYPE in the script, and the error turned the shared limiter off for every site
    (5 s per worker, again and again). The key is deleted and counts as none."""
    sh = RedisShared(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    r.hset(sh.rate_key("a.com"), "x", "1")
    assert sh.acquire("a.com", 0.5) == 0.0  # no WRONGTYPE
    assert r.type(sh.rate_key("a.com")) == b"string"
    r.delete(sh.rate_key("a.com"))
    r.hset(sh.rate_key("a.com"), "x", "1")
    assert sh.pause("a.com", 2.0) == pytest.approx(2.0, abs=0.05)
    # through the throttle: the bad key costs nothing, b.com still asks the limiter
    r.delete(sh.rate_key("a.com"))
    r.hset(sh.rate_key("a.com"), "x", "1")
    th: Any = shared_throttle(redis_url, redis_prefix)
    th.hold_until("a.com")
    th.hold_until("b.com")
    assert th.stats.get_value("scale/throttle/shared_errors") is None
    assert r.exists(sh.rate_key("b.com"))  # the limiter was asked for b.com


def test_a_failed_limiter_call_backs_off_that_site_only(redis_url: str, redis_prefix: str) -> None:
    from twisted.python.failure import Failure

    sh = RedisShared(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    th: Any = shared_throttle(redis_url, redis_prefix)
    th.calls.failed(Failure(RuntimeError("boom")), "c.com")
    assert th.stats.get_value("scale/throttle/shared_errors") == 1  # the failure path ran
    assert th.hold_until("c.com") == 0.0 and not r.exists(sh.rate_key("c.com"))  # paced alone
    th.hold_until("d.com")
    assert r.exists(sh.rate_key("d.com"))  # the other sites keep the shared limiter


@pytest.mark.serial
def test_the_shared_limiter_opens_while_redis_is_down_and_paces_once_it_is_back(redis_server: Any) -> None:
    """Opening asks the node whether it is a Cluster: done when the spider opened, a Redis
    down at that moment left the worker pacing alone for the whole crawl. The client is
    opened at its first use, and each limiter call tries again."""
    redis_server.kill()
    sh = RedisShared(f"redis://127.0.0.1:{redis_server.port}/0", "down-at-open")  # no error: nothing asked yet
    with pytest.raises(redis.ConnectionError):  # the path that failed: the first use opens the client
        sh.acquire("a.com", 0.5)
    sh.close()  # nothing opened: nothing to close
    redis_server.start()
    assert sh.acquire("a.com", 0.5) == 0.0 and sh.acquire("a.com", 0.5) > 0.0  # the limiter spaces the next
    sh.close()
