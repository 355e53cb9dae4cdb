"""scrapy_scale.transit: the one rule for requests handed out and not yet where a
component counts them (the frontier's download slots, the throttle's route holds)."""

from __future__ import annotations

import gc

import pytest
from scrapy import Request

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.scheduling.slot_transit import SlotTransit
from scrapy_scale.transit import TTL, Transit

pytestmark = pytest.mark.pure


def test_a_request_counts_under_its_key_until_it_arrives_and_only_its_own_arrival_ends_it() -> None:
    downloader: set[Request] = set()
    w = Transit(in_downloader=lambda: downloader)
    a, b = Request("http://a.test/1"), Request("http://b.test/1")
    w.sent(a, "site-a")
    w.sent(b, "site-a")
    downloader.update((a, b))
    assert w.pending("site-a") == 2 and w.pending("site-b") == 0
    w.arrived(Request("http://a.test/robots.txt"))  # another download: frees nothing
    w.arrived(a.copy())  # a copy of it (a retry): frees nothing
    assert w.pending("site-a") == 2
    w.sent(b, "site-b")  # handed out again under another key: counted once, there
    assert w.pending("site-a") == 1 and w.pending("site-b") == 1
    w.sent(a, None)  # handed out again, counted under no key: its count ends
    assert w.pending("site-a") == 0 and set(w.counted_keys) == {"site-b"}
    w.arrived(b, spider=None)  # as a signal handler: keyword arguments are ignored
    assert w.pending("site-b") == 0 and not w.counted_keys  # an empty key is deleted
    assert w.left_downloader == 0 and w.expired == 0  # every count ended by its arrival


def test_a_request_the_downloader_no_longer_has_stops_counting_at_once() -> None:
    clock = FakeClock(100.0)
    downloader: set[Request] = set()
    w = Transit(in_downloader=lambda: downloader, clock=clock)
    answered, waiting = Request("http://a.test/1"), Request("http://a.test/2")
    for r in (answered, waiting):
        w.sent(r, "a")
        downloader.add(r)
    clock.advance(3600)  # with the downloader's view, time does not end a count
    assert w.pending("a") == 2
    downloader.discard(answered)  # a middleware answered it (a cache hit)
    assert w.pending("a") == 1 and w.left_downloader == 1 and w.expired == 0
    w.arrived(answered)  # a late arrival of a request no longer counted changes nothing
    assert w.pending("a") == 1


def test_without_the_downloaders_view_a_count_ends_after_the_grace_or_a_clock_step_back() -> None:
    clock = FakeClock(100.0)
    w = Transit(in_downloader=lambda: None, clock=clock)  # the engine has no such set
    r = Request("http://a.test/1")
    w.sent(r, "a")
    clock.advance(TTL - 0.01)
    assert w.pending("a") == 1
    clock.advance(0.02)
    assert w.pending("a") == 0 and w.expired == 1 and not w.counted_keys
    w.sent(r, "a")
    clock.now -= TTL + 0.01  # the clock stepped back: a count from "the future" ends
    assert w.pending("a") == 0 and w.expired == 2
    w.sent(r, "a")
    w.clear()  # the worker stops
    assert w.pending("a") == 0 and not w.counted_keys
    w.arrived(r)  # forgotten by clear(): nothing left to end


def test_a_request_collected_as_garbage_is_forgotten_without_being_asked_about() -> None:
    w = Transit()
    r = Request("http://a.test/1")
    w.sent(r, "a")
    assert w.counted_keys
    del r
    gc.collect()
    assert not w.counted_keys


def test_the_frontiers_slot_transit_keys_by_host_unless_the_request_names_its_slot() -> None:
    t = SlotTransit(in_downloader=lambda: None, clock=FakeClock(100.0))
    kept = [  # referenced here: a request collected as garbage is forgotten
        Request("http://a.test/1"),
        Request("http://a.test/2", meta={"download_slot": "a.test"}),  # its host's slot
        Request("http://a.test/3", meta={"download_slot": "pool"}),  # another slot: not counted
    ]
    for r in kept:
        t.sent(r)
    assert t.pending("a.test") == 2 and set(t.counted_keys) == {"a.test"}
    t.sent(kept[0], "elsewhere")  # a key given is used as it is
    assert t.pending("a.test") == 1 and t.pending("elsewhere") == 1
