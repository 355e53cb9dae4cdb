"""Fair leases among many workers (scrapy_scale/frontier/scheduling/fair_share.py): the sizing rule
with an injectable clock, the heartbeats it believes, and the store sync that asks it
after its writes (a real SQLite store)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.scheduling.fair_share import MAX_WORKERS, REFRESH, FairShare
from scrapy_scale.frontier.scheduling.sync import StoreSync, SyncPlan

pytestmark = pytest.mark.pure


def live(clock: FakeClock, n: int) -> dict[str, tuple[Any, Any]]:
    """``n`` workers that beat just now."""
    return {f"w{i}": (clock.now, clock.now + 30) for i in range(n)}


def test_alone_a_worker_leases_what_it_asks_for() -> None:
    clock = FakeClock()
    fair = FairShare("w0", floor=16, clock=clock)
    assert fair.count(live(clock, 1)) == 1
    assert fair.cap(64, pending=10_000, leased=0, held=0) == 64
    assert fair.cap(256, pending=3, leased=500, held=500) == 256  # no share to keep alone


def test_with_three_workers_a_worker_leases_up_to_its_share_of_the_job() -> None:
    clock = FakeClock()
    fair = FairShare("w0", floor=16, clock=clock)
    assert fair.count(live(clock, 3)) == 3
    # the worker just wrote 300 children of its pages: a third of them, not a batch of 256
    assert fair.cap(256, pending=300, leased=4, held=4) == 98  # ceil(304 / 3) - 4
    # it holds its share already: nothing more while the others have less
    assert fair.cap(64, pending=100, leased=200, held=101) == 0
    # below its concurrency it may always lease (an idle worker is never kept idle)
    assert fair.cap(64, pending=6, leased=0, held=0) == 16  # share 2; the store has 6 of them
    assert fair.cap(64, pending=6, leased=10, held=10) == 6
    # the store's leased count lags this worker's own: what it holds counts
    assert fair.cap(64, pending=90, leased=0, held=30) == 10  # ceil(120 / 3) - 30


def test_three_workers_leasing_in_turn_each_get_a_third_of_what_one_wrote() -> None:
    clock = FakeClock()
    workers = {w: FairShare(w, floor=16, clock=clock) for w in ("w0", "w1", "w2")}
    for f in workers.values():
        f.count(live(clock, 3))
    pending, held = 420, dict.fromkeys(workers, 0)
    for _ in range(3):  # each syncs in turn with a batch of 64, HELD_CAP x 64 allowed
        for w, f in workers.items():
            n = min(pending, f.cap(256, pending=pending, leased=sum(held.values()), held=held[w]))
            pending -= n
            held[w] += n
    assert pending == 0 and held == {"w0": 140, "w1": 140, "w2": 140}


def test_live_workers_come_from_fresh_heartbeats_and_this_worker_always_counts() -> None:
    clock = FakeClock()
    fair = FairShare("me", floor=1, clock=clock)
    beats = {
        "a": (clock.now - 5, clock.now + 25),
        "stopped": (clock.now - 1, clock.now - 1),  # closed cleanly: until = its last beat
        "expired": (clock.now - 40, clock.now - 10),
    }
    assert fair.count(beats) == 2 and fair.workers == 2  # a and me
    assert fair.count({}) == 1
    assert not fair.read_due()
    clock.advance(REFRESH)
    assert fair.read_due()


@pytest.mark.parametrize(
    "beat",
    [
        ("x", "1e9"),  # not a number
        (None, None),
        (math.nan, math.inf),  # not finite
        ("1e400", "1e400"),  # overflows to inf
        ("only one",),
    ],
)
def test_a_heartbeat_that_is_not_two_finite_numbers_is_skipped_with_one_warning(
    beat: tuple[Any, ...], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    fair = FairShare("me", clock=clock)
    with caplog.at_level(logging.WARNING, "scrapy_scale.frontier.scheduling.fair_share"):
        assert fair.count({"bad": beat, "good": (clock.now, clock.now + 30)}) == 2
        assert fair.count({"bad": beat, "bad2": beat}) == 1
    assert len([r for r in caplog.records if "not two numbers" in r.getMessage()]) == 1


def test_far_future_heartbeats_do_not_keep_a_worker_counted(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    fair = FairShare("me", clock=clock)
    with caplog.at_level(logging.WARNING, "scrapy_scale.frontier.scheduling.fair_share"):
        # a beat from the far future: skipped, one warning
        assert fair.count({"f": (clock.now + 1e9, clock.now + 1e9), "g": (clock.now + 1e6, 2e9)}) == 1
        # an `until` far past its beat: clamped to the longest a beat holds, so a dead
        # worker stops counting once that passed
        forged = {"dead": (clock.now, 1e18)}
        assert fair.count(forged) == 2
        clock.advance(200)
        assert fair.count(forged) == 1
    assert len([r for r in caplog.records if "in the future" in r.getMessage()]) == 1


def test_a_huge_worker_count_is_clamped_and_negative_counts_read_as_zero(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    fair = FairShare("me", floor=16, clock=clock)
    with caplog.at_level(logging.WARNING, "scrapy_scale.frontier.scheduling.fair_share"):
        assert fair.count(live(clock, MAX_WORKERS + 500)) == MAX_WORKERS
        fair.count(live(clock, MAX_WORKERS + 500))
        # a share of ~0 still leaves the worker its concurrency: the crawl goes on
        assert fair.cap(64, pending=10, leased=0, held=0) == 16
        fair.count(live(clock, 3))
        assert fair.cap(64, pending=-5, leased=-7, held=2) == 14  # the floor, less what it holds
        assert fair.cap(64, pending=-5, leased=-7, held=2) == 14
    msgs = [r.getMessage() for r in caplog.records]
    assert len([m for m in msgs if "live workers in the heartbeats" in m]) == 1
    assert len([m for m in msgs if "read as 0" in m]) == 1


# ---- the store sync asks it after its writes ---------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(now=2_000_000_000.0)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Any:
    s = open_store(f"sqlite:///{tmp_path / 'f.db'}", "fair", clock=clock)
    s.begin_run()
    yield s
    s.close()


def children(n: int) -> list[tuple[str, Any]]:
    return [("enq", codec.new_request(Request(f"http://h{i % 3}.test/item/{i}"))) for i in range(n)]


def test_a_sync_alone_leases_its_whole_batch(store: Any, clock: FakeClock) -> None:
    sync = StoreSync(store, lease_seconds=60.0, error_deadline=600.0, floor=16)
    sync.worker = "w0"
    sync.beat()
    res = sync.run(SyncPlan(children(300), want=256))
    assert len(res.leased) == 256 and sync.fair.workers == 1


def test_a_sync_with_three_live_workers_leases_its_share_of_what_it_wrote(store: Any, clock: FakeClock) -> None:
    """The issue: one worker held 163 leases while another got nothing. Its children
    count in the share, as they are written in the same sync."""
    for w in ("w1", "w2"):
        store.heartbeat(w, clock.now + 30)
    sync = StoreSync(store, lease_seconds=60.0, error_deadline=600.0, floor=16)
    sync.worker = "w0"
    sync.beat()
    res = sync.run(SyncPlan(children(300), want=256, held=4))
    assert sync.fair.workers == 3
    assert len(res.leased) == 98  # ceil((300 pending + 4 held) / 3) - 4
    res = sync.flush(children(0), lease=64, held=102)
    assert res.leased == []  # at its share: the rest is for the others
    # another worker leases its share at its next sync
    other = StoreSync(store, lease_seconds=60.0, error_deadline=600.0, floor=16)
    other.worker = "w1"
    res = other.run(SyncPlan(want=256))
    assert len(res.leased) == 100  # ceil((202 pending + 98 leased) / 3), it holds none


def test_a_round_with_a_share_reads_the_counts_once_and_they_are_the_stores(store: Any, clock: FakeClock) -> None:
    """The counts read for the share (after the writes) serve after the lease too, the
    leased records moved from pending to leased: one read a round (on Redis one script
    call per partition), and the same figures as a second read."""
    for w in ("w1", "w2"):
        store.heartbeat(w, clock.now + 30)
    sync = StoreSync(store, lease_seconds=60.0, error_deadline=600.0, floor=16)
    sync.worker = "w0"
    sync.beat()
    reads = []
    real = store.counts

    def counts() -> dict[str, int]:
        reads.append(1)
        return real()

    store.counts = counts
    res = sync.run(SyncPlan(children(300), want=256, held=4))
    assert len(res.leased) == 98 and len(reads) == 1
    assert res.counts == real() and res.counts["leased"] == 98 and res.counts["pending"] == 202
    # nothing to lease (at its share): the same one read
    reads.clear()
    res = sync.flush(children(0), lease=64, held=102)
    assert res.leased == [] and len(reads) == 1 and res.counts == real()
    # alone, no read for a share: the counts are read after the lease
    store.heartbeat("w1", clock.now - 100)
    store.heartbeat("w2", clock.now - 100)
    clock.advance(2)
    reads.clear()
    res = sync.run(SyncPlan(want=10))
    assert sync.fair.workers == 1 and len(res.leased) == 10 and len(reads) == 1
    assert res.counts == real() and res.counts["leased"] == 108
