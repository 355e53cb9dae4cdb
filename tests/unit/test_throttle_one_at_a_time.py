"""A site with a Crawl-delay (or a max_rate of 1 request/s or less) is kept one request in
flight, each spaced from the previous one's answer: the spacing holds where the site sees
it, whatever the path adds to one send (no reactor)."""

from __future__ import annotations

import math

import pytest

from scrapy_scale.clock import FakeClock
from scrapy_scale.throttle.pacing import Pacing
from scrapy_scale.throttle.policy import CRAWL_DELAY_MARGIN
from scrapy_scale.throttle.profiles import Profiles

pytestmark = pytest.mark.pure


def pacing(profiles: dict | None = None) -> tuple[Pacing, FakeClock]:
    clk = FakeClock(1000.0)
    return Pacing(Profiles.parse(profiles or {"default": {"start_delay": 0.0}}), clk), clk


def test_a_crawl_delay_keeps_one_in_flight_and_spaces_the_next_from_the_answer() -> None:
    pc, clk = pacing()
    pc.set_crawl_delay("c.org", 1.0)
    s = pc.site("c.org")
    assert pc.one_at_a_time(s)
    kept = 1.0 * (1 + CRAWL_DELAY_MARGIN)
    assert pc.hold_until("c.org") == 0.0
    pc.handed_out("c.org")
    clk.advance(5.0)  # a slow path: the spacing from the send has long passed
    assert pc.hold_until("c.org") == math.inf  # the answer is not in
    clk.advance(0.7)
    pc.ended("c.org")  # the answer, 5.7 s after the send
    assert pc.hold_until("c.org") == pytest.approx(clk.now + kept)  # the spacing from the answer
    clk.advance(kept)
    assert pc.hold_until("c.org") == 0.0


def test_without_a_crawl_delay_the_spacing_counts_from_the_send() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.0, "min_delay": 1.0}})
    s = pc.site("m.org")
    assert not pc.one_at_a_time(s)
    pc.handed_out("m.org")
    clk.advance(1.0)
    assert pc.hold_until("m.org") == 0.0  # in flight, but due: several at once as before


def test_a_profiles_min_delay_overrides_the_crawl_delay_and_its_rule() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.0}, "fixed.com": {"min_delay": 0.5}})
    pc.set_crawl_delay("fixed.com", 2.0)
    assert not pc.one_at_a_time(pc.site("fixed.com"))
    pc.set_crawl_delay("zero.com", 0.0)  # Crawl-delay: 0 asks nothing
    assert not pc.one_at_a_time(pc.site("zero.com"))


def test_a_max_rate_of_one_a_second_or_less_is_kept_one_at_a_time() -> None:
    pc, clk = pacing({"default": {"start_delay": 0.0}, "slow.com": {"max_rate": 0.5}, "fast.com": {"max_rate": 4.0}})
    assert pc.one_at_a_time(pc.site("slow.com"))
    assert not pc.one_at_a_time(pc.site("fast.com"))
    pc.handed_out("slow.com")
    clk.advance(3.0)
    assert pc.hold_until("slow.com") == math.inf
    pc.ended("slow.com")
    assert pc.hold_until("slow.com") == pytest.approx(clk.now + 2.0)


def test_an_answer_that_never_comes_holds_the_site_answer_wait_at_most() -> None:
    pc, clk = pacing()
    pc.answer_wait = 30.0
    pc.set_crawl_delay("c.org", 1.0)
    pc.handed_out("c.org")
    clk.advance(29.0)
    assert pc.hold_until("c.org") == math.inf
    clk.advance(1.0)  # its end was lost (a leak): the site goes on, no stall
    assert pc.hold_until("c.org") == 0.0
