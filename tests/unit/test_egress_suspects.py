"""Failures after the connection (timeouts, answers that are not HTTP, connections closed
mid-answer) count against an egress only with evidence: the same site answers through
another egress. Pure: the pool with a fake clock."""

from __future__ import annotations

import pytest

from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.egress.health import HEALTHY, QUARANTINED, HealthPolicy
from scrapy_scale.egress.identity import parse_egresses
from scrapy_scale.egress.pool import EgressPool, PoolOptions
from scrapy_scale.egress.suspects import Blame, Suspects

pytestmark = pytest.mark.pure

POLICY = HealthPolicy(min_failures=3, threshold=0.5, half_life=60, base=10, max_quarantine=80, probes=1)
A, B, C = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"
IA, IB, IC = "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"


def pool(clock: FakeClock) -> EgressPool:
    return EgressPool(parse_egresses([A, B, C]), POLICY, PoolOptions(), clock, Randomness(1))


def ok(p: EgressPool, e: str, d: str) -> None:
    p.observe(e, d, "ok", "none", True)


def timeout(p: EgressPool, e: str, d: str) -> list:
    return p.observe(e, d, "transient", "none", False)


def test_a_blackhole_among_healthy_egresses_is_quarantined_for_the_site_after_min_failures():
    clock = FakeClock()
    p = pool(clock)
    for i in range(3):
        ok(p, IB, "shop")
        clock.advance(1)
        events = timeout(p, IA, "shop")
        assert (p.state(IA, "shop") == QUARANTINED) == (i == 2)
    assert [(e.kind, e.egress, e.domain) for e in events] == [("quarantined", IA, "shop")]
    assert p.state(IA) == HEALTHY  # one site only: not yet everywhere
    assert p.state(IB, "shop") == HEALTHY and p.counts["suspect_blamed"] == 3


def test_failures_on_several_sites_count_globally_including_the_earlier_ones():
    clock = FakeClock()
    p = pool(clock)
    for d in ("s1", "s2"):
        ok(p, IB, d)
    timeout(p, IA, "s1")
    timeout(p, IA, "s1")
    assert p.state(IA) == HEALTHY  # blamed on one site: not globally
    events = timeout(p, IA, "s2")  # the second site: the three count globally
    assert ("quarantined", IA, "") in [(e.kind, e.egress, e.domain) for e in events]
    assert p.state(IA) == QUARANTINED
    assert p.choose("s3").egress.id != IA  # every site avoids it now


def test_a_site_that_times_out_on_every_egress_evicts_none():
    clock = FakeClock()
    p = pool(clock)
    for _ in range(10):
        for e in (IA, IB, IC):
            timeout(p, e, "down")
            clock.advance(0.5)
    assert {p.state(e) for e in (IA, IB, IC)} == {HEALTHY}
    assert {p.state(e, "down") for e in (IA, IB, IC)} == {HEALTHY}
    assert p.counts["suspect_failures"] == 30 and p.counts["suspect_blamed"] == 0


def test_evidence_that_comes_after_the_failures_blames_them():
    """The blackhole's attempts time out before the site answered through another egress
    (the start of a crawl): the first answer through another egress blames them."""
    clock = FakeClock()
    p = pool(clock)
    for _ in range(3):
        timeout(p, IA, "shop")
    assert p.state(IA, "shop") == HEALTHY
    clock.advance(5)
    ok(p, IB, "shop")
    assert p.state(IA, "shop") == QUARANTINED


def test_old_evidence_does_not_blame():
    clock = FakeClock()
    p = pool(clock)
    ok(p, IB, "shop")
    clock.advance(61)  # past the window (the half-life)
    for _ in range(5):
        timeout(p, IA, "shop")
    assert p.state(IA, "shop") == HEALTHY
    clock.advance(61)
    ok(p, IB, "shop")  # the pending failures are too old now
    assert p.state(IA, "shop") == HEALTHY


def test_random_noise_on_a_healthy_egress_does_not_evict_it():
    """A site that resets 1 request in 10 on every egress: an egress is blamed for its
    share, but its answers keep its score up."""
    clock = FakeClock()
    p = pool(clock)
    for i in range(300):
        e = (IA, IB, IC)[i % 3]
        if i % 10 == 0:
            timeout(p, e, "noisy")
        else:
            ok(p, e, "noisy")
        clock.advance(0.2)
    assert {p.state(e) for e in (IA, IB, IC)} == {HEALTHY}
    assert {p.state(e, "noisy") for e in (IA, IB, IC)} == {HEALTHY}
    assert p.counts["suspect_blamed"] > 0  # the path ran


def test_rate_limited_answers_are_evidence_that_the_site_works():
    clock = FakeClock()
    p = pool(clock)
    p.observe(IB, "shop", "rate_limited", "domain", True)
    for _ in range(3):
        timeout(p, IA, "shop")
    assert p.state(IA, "shop") == QUARANTINED


def test_suspects_alone_bounded_memory():
    s = Suspects(window=60)
    for i in range(200):
        assert s.failed("a", "d", float(i) / 100) == []
    assert len(s.pending["d"]) == 64
    assert s.answered("b", "d", 3.0) == [Blame("a", "d")] * 64  # one site: not globally
    assert "d" not in s.pending
    assert s.failed("a", "e", 3.5) == [] and s.answered("c", "e", 4.0) == [Blame("a", "e", 65)]
    for _ in range(1000):
        s.failed("a", "e", 4.0)
    assert len(s.blamed["a"]) <= 256


def test_pages_that_hang_on_every_egress_blame_none_though_other_pages_answer():
    """Listings answer, most detail pages hang on the site's side: every egress fails
    more than it answers there, so none is evidence against another."""
    clock = FakeClock()
    p = pool(clock)
    for i in range(60):
        e = (IA, IB, IC)[i % 3]
        if i % 4 == 0:
            ok(p, e, "shop")  # a listing
        else:
            timeout(p, e, "shop")  # a detail page that hangs
        clock.advance(0.5)
    assert {p.state(e, "shop") for e in (IA, IB, IC)} == {HEALTHY}
    assert {p.state(e) for e in (IA, IB, IC)} == {HEALTHY}
    # the first failures, before the answers were outnumbered, were blamed; no later one
    assert p.counts["suspect_failures"] == 45 and p.counts["suspect_blamed"] <= 6, p.counts
