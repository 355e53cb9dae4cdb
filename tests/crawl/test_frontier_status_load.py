"""`scrapy scale status` on a Redis frontier with 100,000 domains must not stall the
workers: the old status was one Lua script walking every domain queue (2 s, during which
a PING from another client waited 1.8 s). The state is built directly (store.enqueue, one
request per domain) in a private Redis; a second client PINGs in a loop while status runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.backends.redis import RedisStore
from scrapy_scale.frontier.backends.redis import status as redis_status
from scrapy_scale.frontier.store import NewRequest
from tests.support import services

pytestmark = [pytest.mark.crawl, pytest.mark.serial]

DOMAINS = 100_000  # ten times what status looks at (redis_status.STATUS_DOMAINS)
DATA = '{"v":1,"r":{"url":"http://d.example/"}}'


def _max_ping_latency_during(url: str, work) -> tuple[float, int, object]:
    """Run ``work()`` while another client PINGs in a loop; the slowest PING, how many,
    and what ``work()`` returned. A PING refused (BUSY) fails the test."""
    client = redis.Redis.from_url(url, socket_timeout=30)
    client.ping()
    stop = threading.Event()
    lat: list[float] = []
    errors: list[str] = []

    def pinger() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                client.ping()
            except redis.RedisError as e:  # BUSY: a script has held the server for seconds
                errors.append(f"{type(e).__name__}: {e}")
            lat.append(time.perf_counter() - t0)

    t = threading.Thread(target=pinger, daemon=True)
    t.start()
    try:
        while not lat:  # the pinger is running before status starts
            time.sleep(0.001)
        result = work()
    finally:
        stop.set()
        t.join(30)
        client.close()
    assert not errors, f"PINGs failed while status ran: {errors[:3]}"
    return max(lat), len(lat), result


@pytest.mark.timeout(600)
def test_status_with_100000_domains_never_stalls_redis(tmp_path: Path) -> None:
    server = services.private_redis(tmp_path / "redis", appendonly=False)
    url = f"redis://127.0.0.1:{server.port}/0"
    clock = FakeClock()
    store = RedisStore(url, "big", clock=clock)
    try:
        store.open()
        store.begin_run()
        batch = 500
        for start in range(0, DOMAINS, batch):
            store.enqueue(
                [NewRequest(f"fp{i}", DATA, f"d{i}.example", priority=i % 2) for i in range(start, start + batch)]
            )
            clock.advance(0.001)  # d0 is the oldest
        clock.advance(10)
        store.heartbeat("w/0", clock.now + 30)

        worst, pings, st = _max_ping_latency_during(url, store.status)
        assert pings > 10
        assert worst < 0.2, f"a PING waited {worst:.3f} s while status ran"
        assert st.counts == {"pending": DOMAINS, "delayed": 0, "leased": 0, "done": 0, "failed": 0}
        assert st.oldest_pending_age is not None
        # more domains than status looks at: the age is a lower bound, and says so
        assert st.oldest_pending_exact is False
        assert 10 <= st.oldest_pending_age <= 10 + DOMAINS / batch * 0.001 + 0.001
        assert st.live_workers(clock.now) == ["w/0"] and st.dead_letters == 0
    finally:
        store.close()
        server.kill()


def test_status_is_exact_when_it_sees_every_domain(tmp_path: Path, redis_url: str, redis_prefix: str) -> None:
    """Below the bound, the oldest pending is exact, across priorities and chunks."""
    clock = FakeClock()
    store = RedisStore(redis_url, redis_prefix, clock=clock)
    store.open()
    try:
        store.begin_run()
        n = redis_status.CHUNK * 2 + 7  # three chunks for priority 0
        store.enqueue([NewRequest(f"fp{i}", DATA, f"d{i}.example", priority=0) for i in range(n)])
        clock.advance(5)
        store.enqueue([NewRequest("late", DATA, "late.example", priority=3)])
        clock.advance(5)
        st = store.status()
        assert st.oldest_pending_exact is True
        assert st.oldest_pending_age == pytest.approx(10.0)
        (x,) = store.lease("w/0", 1, 60)  # priority 3 first: its domain leaves the ready set
        leased = store.lease("w/0", n, 60)
        assert len(leased) == n and x.fingerprint == "late"
        st = store.status()
        assert st.oldest_pending_age is None and st.counts["leased"] == n + 1
        assert st.leases_by_worker == {"w/0": n + 1}
    finally:
        store.close()
