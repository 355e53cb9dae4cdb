"""Hostile egress state: what is read back from egress.db or the Redis hashes is
untrusted input. A bad value is skipped or clamped with one warning; the crawl goes on
and says why. Commands that only read state never open the egress source."""

from __future__ import annotations

import time

import pytest

from scrapy_scale.egress.health import Health, clamp_note
from scrapy_scale.egress.report import when
from scrapy_scale.egress.shared import clean_live

pytestmark = pytest.mark.pure


def test_times_are_shown_with_their_date_when_not_today_and_never_raise():
    now = time.time()
    assert when(now, now) == time.strftime("%H:%M:%S", time.localtime(now))
    assert when(9e10, now) == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(9e10))  # not with no date
    assert "epoch seconds" in when(1e18, now)  # time.localtime() raises OSError/OverflowError on it


def test_records_that_do_not_decode_raise_and_far_ends_are_clamped():
    now = 1_000_000.0
    for bad in ({"g": "x"}, {"u": float("nan")}, {"u": "inf"}, {"c": now + 1e9}, [1, 2], None, {"l": True}):
        try:
            Health.from_record(bad, now, 3600)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} decoded")
    h = Health.from_record({"u": 1e18, "c": now - 5, "l": 1e300}, now, 3600)
    assert h.until == now + 3600 and h.level == 64 and h.quarantine(now, _policy(), _rng()) <= now + 3600
    assert clamp_note({"u": 1e18}, now, 3600) and clamp_note({"u": now + 10}, now, 3600) is None
    live, bad = clean_live({"a": "12.5", "b": "x", "c": "inf", "d": str(now + 1e9), "e": None}, now)
    assert live == {"a": 12.5} and sorted(bad) == ["b", "c", "d", "e"]


def _policy():
    from scrapy_scale.egress.health import HealthPolicy

    return HealthPolicy(max_quarantine=3600)


def _rng():
    from scrapy_scale.clock import Randomness

    return Randomness(1)


def test_an_empty_pool_gives_up_after_its_bound_and_says_why():
    from scrapy_scale.clock import FakeClock
    from scrapy_scale.egress.settings import Source
    from scrapy_scale.egress.sources import GIVE_UP_AFTER, Refresher

    clock = FakeClock()
    r = Refresher(Source("provider", provider=object), 60.0, clock, timeout=30.0)
    assert r.give_up(True, close=True) is None  # no call yet
    r.start_call()
    clock.advance(29)
    assert r.give_up(True, close=True) is None and r.give_up(True, close=False) is None
    clock.advance(1)
    assert "SCALE_EGRESS_EXHAUSTED = close" in (r.give_up(True, close=True) or "")
    assert r.give_up(True, close=False) is None and r.give_up(False, close=True) is None
    clock.advance(GIVE_UP_AFTER * 30 - 30)
    why = r.give_up(True, close=False) or ""
    assert "no egress for 300.0 s" in why and "fetch() has not returned for 300 s" in why, why
    r.end_call()
    r.failed(ConnectionError("http://user:secret@api.example/ down"))
    why = r.give_up(True, close=False) or ""
    assert "failed 1 time(s) in a row" in why and "secret" not in why, why
    assert Refresher(Source("static"), 60.0, clock).give_up(True, close=True) is None
