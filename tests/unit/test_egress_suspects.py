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


def ok(p: EgressPool, e: str, d: str) -> list:
    return p.observe(e, d, "ok", "none", True)


def timeout(p: EgressPool, e: str, d: str) -> list:
    return p.observe(e, d, "transient", "none", False)


def test_a_blackhole_among_healthy_egresses_is_quarantined_for_the_site_after_min_failures():
    clock = FakeClock()
    p = pool(clock)
    for i in range(3):
        timeout(p, IA, "shop")
        clock.advance(1)
        events = ok(p, IB, "shop")  # the site answers through another egress afterwards
        assert (p.state(IA, "shop") == QUARANTINED) == (i == 2)
    assert [(e.kind, e.egress, e.domain) for e in events] == [("quarantined", IA, "shop")]
    assert p.state(IA) == HEALTHY  # one site only: not yet everywhere
    assert p.state(IB, "shop") == HEALTHY and p.counts["suspect_blamed"] == 3


def test_failures_on_several_sites_count_globally_including_the_earlier_ones():
    clock = FakeClock()
    p = pool(clock)
    timeout(p, IA, "s1")
    timeout(p, IA, "s1")
    ok(p, IB, "s1")
    assert p.state(IA) == HEALTHY  # blamed on one site: not globally
    timeout(p, IA, "s2")
    events = ok(p, IB, "s2")  # the second site: the three count globally
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
    for _ in range(3):
        timeout(p, IA, "shop")
    p.observe(IB, "shop", "rate_limited", "domain", True)
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


def test_pages_that_hang_on_every_egress_are_not_blamed_once_the_routes_have_a_record():
    """30 % of two sites' pages hang through every egress, the rest answer: each route fails
    as often as the others, so none is a witness against another. (Before the witness had
    to fail less often than the blamed route, every such failure was blamed and the healthy
    egresses were quarantined everywhere in turn.)"""
    import random

    clock = FakeClock()
    p = EgressPool(parse_egresses([A, B, C]), HealthPolicy(), PoolOptions(), clock, Randomness(1))
    rnd = random.Random(2)
    evicted, failures_after_warmup, blamed_at_warmup = [], 0, 0
    for i in range(3000):
        if i == 600:  # two minutes: every route has a record
            blamed_at_warmup = p.counts["suspect_blamed"]
        e, d = rnd.choice([IA, IB, IC]), f"s{i % 2}"
        if rnd.random() < 0.3:
            events = timeout(p, e, d)
            failures_after_warmup += i >= 600
        else:
            events = p.observe(e, d, "ok", "none", True)
        evicted += [ev for ev in events if ev.kind == "quarantined" and not ev.domain and i >= 600]
        clock.advance(0.2)
    assert failures_after_warmup > 500  # the forced path: many failures after the connection
    assert p.counts["suspect_blamed"] - blamed_at_warmup <= failures_after_warmup // 20
    assert not evicted


def test_an_answer_from_before_the_failures_blames_none():
    """The site's listing answered through A, then its detail pages (sent after it) hang
    through every egress: B's and C's timeouts are handled before A's. Only an answer after
    a failure is evidence against it (failed before: B and C were quarantined for the site,
    the race behind a flaky crawl test of pages that hang on the site's side)."""
    clock = FakeClock()
    p = pool(clock)
    ok(p, IA, "shop")
    clock.advance(1)
    events = [ev for e in (IB, IB, IB, IC, IC, IC, IA, IA, IA) for ev in timeout(p, e, "shop")]
    assert events == [] and p.counts["suspect_blamed"] == 0
    assert p.counts["suspect_failures"] == 9  # the path ran
    assert {p.state(e, "shop") for e in (IA, IB, IC)} == {HEALTHY}


def test_egresses_removed_from_the_pool_are_forgotten():
    """A source that rotates its egresses must not grow every site's record (failed before:
    the removed egresses' routes, pending failures and blamed failures stayed)."""
    clock = FakeClock()
    p = pool(clock)
    for d in ("s1", "s2"):
        timeout(p, IA, d)
        ok(p, IB, d)
        timeout(p, IA, d)  # pending: no answer after it yet
    assert IA in p.suspects.blamed and all(IA in seen for seen in p.suspects.routes.values())
    p.set_egresses(parse_egresses([B, C]))
    s = p.suspects
    assert IA not in s.blamed and not any(IA in seen for seen in s.routes.values())
    assert not any(e == IA for waiting in s.pending.values() for e, _ in waiting)
    assert all(IB in s.routes[d] for d in ("s1", "s2"))  # the others' records are kept


def proxy_answer(p: EgressPool, e: str, d: str) -> list:
    """A proxy's own error page (tinyproxy's 502, Squid's X-Squid-Error): egress_failed, blame egress_site."""
    return p.observe(e, d, "egress_failed", "egress_site", True)


def test_a_proxys_own_answers_quarantine_it_for_the_site_then_everywhere_on_a_second_site():
    """Counted like witnessed failures, with no witness needed: against (egress, site) at
    once, globally once on two sites. Before, the pool counted a responded egress_failed
    as the egress's good answer for the site (only 407 was blamed, globally)."""
    clock = FakeClock()
    p = pool(clock)
    for i in range(3):
        events = proxy_answer(p, IA, "s1")
        clock.advance(0.1)
        assert (p.state(IA, "s1") == QUARANTINED) == (i == 2)
    assert [(e.kind, e.domain) for e in events] == [("quarantined", "s1")]
    assert p.state(IA) == HEALTHY  # one site: maybe only that site is out of its reach
    assert p.counts["suspect_blamed"] == 0  # no witness was asked for
    events = proxy_answer(p, IA, "s2")  # a second site: the four count globally
    assert ("quarantined", "") in [(e.kind, e.domain) for e in events]
    assert p.state(IA) == QUARANTINED and p.choose("s3").egress.id != IA


def test_a_proxy_answer_on_two_sites_quarantines_the_egress_within_min_failures():
    clock = FakeClock()
    p = pool(clock)
    proxy_answer(p, IA, "s1")
    proxy_answer(p, IA, "s2")
    assert p.state(IA) == HEALTHY
    proxy_answer(p, IA, "s3")
    assert p.state(IA) == QUARANTINED  # the third (POLICY.min_failures) attempt


def test_a_proxy_answer_is_no_good_answer_of_the_egress():
    clock = FakeClock()
    p = pool(clock)
    proxy_answer(p, IA, "s1")
    h = p.health[IA] if IA in p.health else None
    assert h is None or h.good == 0  # the response that came back was the proxy's, not the site's


# ---- the comparison: a route's 5xx far above the other routes' at the same site ----------

#: an answer -> (class, blame, responded, slow_down), as the classifier sends them
ANSWERS = {
    "200": ("ok", "none", True, False),
    "502": ("transient", "none", True, False),  # a 5xx no signature names (the site's, or the route's)
    "503": ("transient", "none", True, True),  # 503 without Retry-After: the site is overloaded
    "429": ("rate_limited", "domain", True, False),
}


def play(p: EgressPool, clock: FakeClock, plan: str) -> list:
    """Run a plan of answers: ``"A s1 502, B s1 200, ..."`` (egress A/B/C, a site, an
    answer of ANSWERS), 0.1 s apart; returns every state change."""
    ids = {"A": IA, "B": IB, "C": IC}
    events = []
    for step in plan.split(","):
        e, site, answer = step.split()
        events += p.observe(ids[e], site, *ANSWERS[answer])
        clock.advance(0.1)
    return events


def test_a_route_whose_5xx_are_far_above_the_other_routes_at_the_site_is_blamed():
    """Before, a 5xx answer was the egress's good answer: a proxy making its own 502s that
    no signature names was never quarantined."""
    clock = FakeClock()
    p = pool(clock)
    play(p, clock, "A s1 502, B s1 200, C s1 200, A s1 502, B s1 200, A s1 502, C s1 200")
    assert p.state(IA, "s1") == QUARANTINED and p.state(IA) == HEALTHY
    assert p.state(IB, "s1") == HEALTHY and p.state(IC, "s1") == HEALTHY
    play(p, clock, "A s2 502, B s2 200")  # a second site: globally
    assert p.state(IA) == QUARANTINED


def test_a_site_wide_5xx_stays_the_sites():
    clock = FakeClock()
    p = pool(clock)
    play(p, clock, ", ".join(f"{e} s1 502" for _ in range(6) for e in "ABC"))
    play(p, clock, ", ".join(f"{e} s2 200" for _ in range(3) for e in "ABC"))  # other sites answer
    assert all(p.state(e, "s1") == HEALTHY and p.state(e) == HEALTHY for e in (IA, IB, IC))
    assert p.counts["suspect_blamed"] == 0


def test_a_site_with_random_5xx_on_every_route_blames_none():
    """5% random 502s on one host (every route alike), the others' answers alike."""
    clock = FakeClock()
    p = pool(clock)
    steps = [f"{'ABC'[i % 3]} s1 {'502' if i % 20 == 7 else '200'}" for i in range(300)]
    play(p, clock, ", ".join(steps))
    assert all(p.state(e, "s1") == HEALTHY and p.state(e) == HEALTHY for e in (IA, IB, IC))
    assert p.counts["suspect_blamed"] == 0


def test_a_503_saying_the_site_is_overloaded_on_one_route_is_never_the_egresss():
    """nginx's limit_req per client address refuses with 503 the route sent most: the
    site's pressure on that route (the throttle's evidence), not the egress's failure."""
    clock = FakeClock()
    p = pool(clock)
    play(p, clock, ", ".join(["A s1 503, B s1 200, C s1 200"] * 6 + ["A s1 429, B s1 200"] * 3))
    assert p.state(IA, "s1") == HEALTHY and p.state(IA) == HEALTHY
    assert p.counts["suspect_failures"] == 0
