"""A body slower through one egress than through the site's other routes (issue 35: a
proxy that trickles the body after sending the headers at once was never penalised)."""

from __future__ import annotations

import math

import pytest

from scrapy_scale.egress.body_times import BodyTimes

pytestmark = pytest.mark.pure


def test_a_body_slower_than_the_sites_other_routes_is_slow():
    b = BodyTimes()
    for _ in range(5):
        assert not b.observe("shop", "good", 0.02)
    assert b.observe("shop", "trickle", 3.0)  # 150x the others, over the floor
    assert not b.observe("shop", "good", 0.03)  # the trickling route's times do not make others slow
    assert not b.observe("other", "trickle", 3.0)  # another site: no other route known there yet


def test_no_verdict_without_enough_of_the_other_routes_times():
    b = BodyTimes(min_samples=5)
    for _ in range(4):
        b.observe("shop", "good", 0.02)
    assert not b.observe("shop", "trickle", 30.0)
    # its own times never count as "the others"
    for _ in range(10):
        b.observe("solo", "only", 0.02)
    assert not b.observe("solo", "only", 30.0)


def test_the_floor_and_the_factor():
    b = BodyTimes(floor=1.0, factor=4.0)
    for _ in range(5):
        b.observe("shop", "good", 0.1)
    assert not b.observe("shop", "x", 0.9)  # 9x, under the floor: noise on a loaded machine
    for _ in range(5):
        b.observe("big", "good", 2.0)  # a site of large pages
    assert not b.observe("big", "x", 7.9)  # under 4x its p95
    assert b.observe("big", "x", 8.1)


def test_bad_values_and_the_site_bound():
    b = BodyTimes(max_sites=2)
    assert not b.observe("shop", "e", math.nan) and not b.observe("shop", "e", -1.0) and not b.observe("", "e", 1.0)
    for site in ("a", "b", "c"):
        b.observe(site, "e", 0.1)
    assert b.sites == ["b", "c"]


def test_the_pool_counts_slow_bodies_against_the_route_then_the_egress():
    from tests.unit.test_egress_policy import IA, IB, A, B, pool

    p = pool([A, B])
    for _ in range(3):  # slow bodies through A on one site: a failure of (A, shop1) each, not an answer
        events = p.observe(IA, "shop1", "ok", "none", True, slow=4.0)
    assert [(e.kind, e.egress, e.domain) for e in events] == [("quarantined", IA, "shop1")]
    assert p.counts["slow_bodies"] == 3
    assert p.choose("shop1").egress.id == IB  # shop1 goes through B now
    assert p.choose("shop2").egress is not None  # A still serves other sites
    # slow on a second site within a half-life: its slow bodies count against A everywhere too
    kinds = [e.kind for _ in range(3) for e in p.observe(IA, "shop2", "ok", "none", True, slow=4.0)]
    assert "quarantined" in kinds and p.state(IA) != "healthy"
    # a body that is not slow is an answer as before
    assert p.observe(IB, "shop1", "ok", "none", True) == []
