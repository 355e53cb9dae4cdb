"""The scheduler's side of pacing (scrapy_scale.frontier.scheduling.pacing): plain Python, a fake pacer."""

from __future__ import annotations

import math

import pytest

from scrapy_scale.frontier.scheduling.local import LocalQueue
from scrapy_scale.frontier.scheduling.pacing import DEFER_AFTER, take_due
from scrapy_scale.frontier.store import Leased

pytestmark = pytest.mark.pure

NOW = 1000.0


class FakePacer:
    def __init__(self, holds: dict[str, float], spacing: float = 0.5):
        self.holds = holds
        self.gap = spacing
        self.asked: list[str] = []

    def hold_until(self, domain: str) -> float:
        self.asked.append(domain)
        return self.holds.get(domain, 0.0)

    def spacing(self, domain: str) -> float:
        return self.gap

    def handed_out(self, request, domain, fingerprint) -> None:  # pragma: no cover - unused here
        pass


def leased(fp: str, domain: str, priority: int = 0, attempts: int = 0) -> Leased:
    return Leased(fp, "{}", domain, priority, attempts, NOW, NOW, 1)


def queue(*entries: Leased) -> LocalQueue:
    q: LocalQueue = LocalQueue()
    for e in entries:
        q.push(e.priority, e)
    return q


def test_the_first_entry_of_a_due_domain_is_taken_and_held_ones_stay_in_order() -> None:
    q = queue(leased("a1", "a"), leased("a2", "a"), leased("b1", "b"), leased("a3", "a"))
    pacer = FakePacer({"a": NOW + 0.3})
    pick = take_due(q, pacer, NOW)
    assert pick.due.fingerprint == "b1"
    assert pick.held == 2 and [x.fingerprint for x, _ in pick.defer] == []
    assert [e.fingerprint for e in q] == ["a1", "a2", "a3"]
    assert pacer.asked.count("a") == 1  # asked once per domain


def test_held_entries_due_much_later_go_back_to_the_store_staggered() -> None:
    q = queue(*(leased(f"a{i}", "a") for i in range(5)))
    pick = take_due(q, FakePacer({"a": NOW + 10.0}, spacing=0.5), NOW)
    assert pick.due is None and pick.held == 0
    assert [(x.fingerprint, t) for x, t in pick.defer] == [(f"a{i}", NOW + 10.0 + 0.5 * i) for i in range(5)]
    assert len(q) == 0


def test_only_the_turns_past_defer_after_are_deferred() -> None:
    q = queue(*(leased(f"a{i}", "a") for i in range(6)))
    pick = take_due(q, FakePacer({"a": NOW + 0.2}, spacing=0.4), NOW)
    turns = [NOW + 0.2 + 0.4 * i for i in range(6)]
    assert pick.held == sum(1 for t in turns if t - NOW <= DEFER_AFTER)
    assert [t for _, t in pick.defer] == pytest.approx([t for t in turns if t - NOW > DEFER_AFTER])


def test_a_domain_waiting_on_the_shared_limiter_is_kept() -> None:
    q = queue(leased("a1", "a"), leased("a2", "a"))
    pick = take_due(q, FakePacer({"a": math.inf}, spacing=0.0), NOW)
    assert pick.due is None and pick.held == 2 and not pick.defer


def test_a_due_retry_goes_before_fresh_requests_of_its_site() -> None:
    q = queue(leased("a1", "a", priority=0), leased("a2", "a", priority=0), leased("r", "a", priority=-1, attempts=1))
    assert take_due(q, FakePacer({}), NOW).due.fingerprint == "r"
    assert take_due(q, FakePacer({}), NOW).due.fingerprint == "a1"


def test_an_unreadable_record_is_taken_whatever_its_domain() -> None:
    bad = Leased("x", "", "a", 0, 0, NOW, NOW, 1, error="unreadable record")
    q = queue(bad)
    assert take_due(q, FakePacer({"a": NOW + 50}), NOW).due is bad


def test_a_site_whose_download_slot_is_full_waits_in_the_buffer_in_its_place() -> None:
    q = queue(leased("a1", "a"), leased("a2", "a"), leased("b1", "b"), leased("a3", "a"), leased("b2", "b"))
    asked: list[str] = []

    def busy(domain: str) -> bool:
        asked.append(domain)
        return domain == "a"

    pacer = FakePacer({})
    pick = take_due(q, pacer, NOW, busy)
    assert pick.due.fingerprint == "b1"
    assert pick.busy == 2 and pick.held == 0 and pick.defer == []
    assert pacer.asked == ["b"], "the pacer is not asked about a busy site"
    assert asked == ["a", "b"], "busy is asked once per domain and pick"
    assert [e.fingerprint for e in q] == ["a1", "a2", "a3", "b2"]
    # no pacer at all: the same
    pick = take_due(q, None, NOW, busy)
    assert pick.due.fingerprint == "b2" and pick.busy == 3
    # every buffered site busy: nothing now, nothing lost
    pick = take_due(q, None, NOW, busy)
    assert pick.due is None and pick.busy == 3 and len(q) == 3
    # the slot has room again: its requests go in their order
    assert take_due(q, None, NOW, lambda d: False).due.fingerprint == "a1"


def test_a_due_retry_of_a_busy_site_waits_too() -> None:
    q = queue(leased("a1", "a"), leased("r", "a", attempts=1), leased("b1", "b"))
    pick = take_due(q, None, NOW, lambda d: d == "a")
    assert pick.due.fingerprint == "b1"
    assert [e.fingerprint for e in q] == ["a1", "r"]


def test_requests_on_their_way_count_while_the_downloader_has_them_and_until_their_slot_does() -> None:
    import gc

    from scrapy import Request

    from scrapy_scale.frontier.scheduling.slot_transit import SlotTransit

    downloader: set[Request] = set()
    t = SlotTransit(in_downloader=lambda: downloader)
    a, b, c = Request("http://a.test/1"), Request("http://a.test/2"), Request("http://a.test/3")
    for r in (a, b, c):
        t.sent(r)
        downloader.add(r)  # the engine calls Downloader.fetch right after the hand-out
    t.sent(b)  # the same request handed out again: counted once
    assert t.pending("a.test") == 3 and t.pending("b.test") == 0
    t.arrived(a, spider=None)  # request_reached_downloader: its slot counts it now
    assert t.pending("a.test") == 2
    downloader.discard(b)  # answered by a middleware (a cache hit), dropped, or replaced
    assert t.pending("a.test") == 1
    downloader.discard(c)
    del c, r
    gc.collect()  # the request is gone: its entry too, though its host was not asked again
    assert not t.counted_keys
    other = Request("http://a.test/4", meta={"download_slot": "pool"})
    t.sent(other)  # its slot is not its host's: not counted against the host
    downloader.add(other)
    assert t.pending("a.test") == 0


def test_without_the_downloaders_view_a_request_counts_for_a_second_at_most() -> None:
    from scrapy import Request

    from scrapy_scale.frontier.scheduling.slot_transit import TTL, SlotTransit

    now = [NOW]
    t = SlotTransit(in_downloader=lambda: None, clock=lambda: now[0])
    r = Request("http://a.test/1")
    t.sent(r)
    assert t.pending("a.test") == 1
    now[0] += TTL + 0.01
    assert t.pending("a.test") == 0 and not t.counted_keys
