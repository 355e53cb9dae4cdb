"""Grants of the shared limiter: a grant is used by the pass it woke, however small the
spacing or late the reactor; a grant left unused is dropped."""

from __future__ import annotations

import pytest

from scrapy_scale.clock import FakeClock
from scrapy_scale.throttle.permits import PERMIT_TTL, WAKE_GRACE, Permits

pytestmark = pytest.mark.pure

SITE = "shop1.example.test"


def test_a_grant_is_used_by_the_pass_it_woke_when_the_spacing_is_tiny() -> None:
    # a site paced by its routes learns its own delay down to a fraction of a millisecond:
    # the old rule (half the spacing) made every grant stale before the engine asked, so
    # the worker asked the limiter again and again and handed nothing out
    clock = FakeClock(100.0)
    permits = Permits(clock)
    interval = 0.00014
    granted_at = clock()
    clock.advance(0.002)  # the answer reaches the reactor (thread hop)
    permits.granted(SITE, granted_at)
    clock.advance(0.003)  # the engine pass the answer woke
    assert permits.usable(SITE, interval) is True
    assert permits.late_used == 1  # the wake pass path ran (older than its TTL)
    permits.used(SITE)
    assert permits.usable(SITE, interval) is None


def test_a_loaded_reactor_still_uses_the_grant_at_the_pass_it_woke() -> None:
    clock = FakeClock(100.0)
    permits = Permits(clock)
    granted_at = clock()
    clock.advance(PERMIT_TTL * 4)  # a slow reactor: the grant is past its TTL when it arrives
    permits.granted(SITE, granted_at)
    clock.advance(WAKE_GRACE / 2)
    assert permits.usable(SITE, 1.0) is True
    assert permits.late_used == 1


def test_a_fresh_grant_is_used_whichever_ask() -> None:
    clock = FakeClock(100.0)
    permits = Permits(clock)
    permits.granted(SITE, clock())
    assert permits.usable(SITE, 1.0) is True
    clock.advance(PERMIT_TTL / 2)
    assert permits.usable(SITE, 1.0) is True
    assert permits.late_used == 0


def test_a_grant_not_used_at_the_pass_it_woke_is_dropped_once_stale() -> None:
    # the pass it woke took another site's request; later, the grant is old: asked again
    clock = FakeClock(100.0)
    permits = Permits(clock)
    permits.granted(SITE, clock())
    assert permits.usable(SITE, 0.01) is True  # the wake pass (fresh)
    clock.advance(0.01)
    assert permits.usable(SITE, 0.01) is False  # stale, not the first ask: dropped
    assert SITE not in permits
    assert permits.usable(SITE, 0.01) is None


def test_a_grant_first_asked_long_after_it_arrived_is_dropped() -> None:
    # the engine did not ask for a while (its downloader was full): sent now it would
    # crowd the next worker's turn
    clock = FakeClock(100.0)
    permits = Permits(clock)
    permits.granted(SITE, clock())
    clock.advance(WAKE_GRACE * 2)
    assert permits.usable(SITE, 1.0) is False
    assert permits.late_used == 0
