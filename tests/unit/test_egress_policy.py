"""The egress pool's policy without a reactor: identity, scores, quarantine, probes,
groups, selection, stickiness, route caps, shared-state merge."""

from __future__ import annotations

from collections import Counter

import pytest

from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.egress.health import HEALTHY, PROBING, QUARANTINED, HealthPolicy
from scrapy_scale.egress.identity import (
    EgressURLError,
    egress_id,
    parse_egress,
    parse_egresses,
    parse_lines,
)
from scrapy_scale.egress.pool import PROBE_WAIT, EgressPool, PoolOptions

pytestmark = pytest.mark.pure

POLICY = HealthPolicy(min_failures=3, threshold=0.5, half_life=60, base=10, max_quarantine=80, probes=1)


def pool(urls, clock=None, seed=1, **opts) -> EgressPool:
    return EgressPool(parse_egresses(urls), POLICY, PoolOptions(**opts), clock or FakeClock(), Randomness(seed))


A, B, C = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"
IA, IB, IC = "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"


# ---- identity ----------------------------------------------------------------


def test_identity_keeps_credentials_apart_and_never_shows_them():
    a = parse_egress("http://user-session1:pw@gw.example:8000")
    b = parse_egress("http://user-session2:pw@gw.example:8000")
    plain = parse_egress("http://gw.example:8000")
    assert plain.id == "gw.example:8000"
    assert a.id != b.id and a.id.startswith("gw.example:8000~") and len(a.id) == len("gw.example:8000~") + 8
    assert a.id == egress_id("http://user-session1:pw@gw.example:8000")  # stable
    assert "pw" not in repr(a) and "session1" not in a.id
    assert a.proxy_url == "http://gw.example:8000" and a.credentials == ("user-session1", "pw")
    assert parse_egress("direct").direct and parse_egress("https://h:3128").id == "https://h:3128"
    assert len(parse_egresses([A, A, B])) == 2


@pytest.mark.parametrize(
    "bad",
    [
        "127.0.0.1:8000",
        "ftp://u:hunter2@h:21",
        "socks5://u:hunter2@h:1080",
        "http://u:hunter2@h",
        "http://u:hunter2@h:80/path",
        "http://u:hunter2@h:99999",
        "",
    ],
)
def test_malformed_urls_fail_without_the_password(bad):
    with pytest.raises(EgressURLError) as e:
        parse_egress(bad)
    assert "hunter2" not in str(e.value)


def test_groups_and_files():
    eg = parse_egresses({"dc": [A, B], "res": [C]})
    assert [(e.id, e.group) for e in eg] == [(IA, "dc"), (IB, "dc"), (IC, "res")]
    with pytest.raises(EgressURLError, match="group 'x' is empty"):
        parse_egresses({"x": []})
    assert [e.id for e in parse_lines(f"# mine\n{A}\n\n {B} \n")] == [IA, IB]
    with pytest.raises(EgressURLError, match="line 2"):
        parse_lines(f"{A}\nnot a url\n")


# ---- health from blame ---------------------------------------------------------


def test_egress_failures_quarantine_globally_after_min_failures():
    clock = FakeClock()
    p = pool([A, B], clock)
    assert p.observe(IA, "d1", "egress_failed", "egress", False) == []
    assert p.observe(IA, "d1", "egress_failed", "egress", False) == []
    ev = p.observe(IA, "d2", "egress_failed", "egress", False)
    assert [e.kind for e in ev] == ["quarantined"]
    assert p.state(IA) == QUARANTINED and 5 <= ev[0].until - clock.now <= 10  # base 10, jittered
    assert all(p.choose("d3").egress.id == IB for _ in range(20))  # every domain avoids it


def test_min_failures_in_a_row_quarantine_even_spread_over_seconds():
    """Three blocks 4 s apart decay to 2.9 failures (half-life 60 s): the route still goes,
    as the documented bound says (it stayed healthy, avoided only by its score, before)."""
    clock = FakeClock()
    p = pool([A, B], clock)
    assert p.observe(IA, "shop2", "blocked", "egress_domain", True) == []
    clock.advance(4)
    assert p.observe(IA, "shop2", "blocked", "egress_domain", True) == []
    clock.advance(4)
    assert [e.kind for e in p.observe(IA, "shop2", "blocked", "egress_domain", True)] == ["quarantined"]
    assert p.state(IA, "shop2") == QUARANTINED


def test_a_success_between_failures_starts_the_row_over():
    clock = FakeClock()
    p = pool([A, B], clock)
    for good in (False, False, True, False):
        clock.advance(4)
        p.observe(IA, "shop2", "ok" if good else "blocked", "none" if good else "egress_domain", True)
    assert p.state(IA, "shop2") == HEALTHY  # 2.8 decayed failures and a row of one
    clock.advance(4)
    p.observe(IA, "shop2", "blocked", "egress_domain", True)
    assert p.state(IA, "shop2") == QUARANTINED  # 3.6 decayed failures


def test_blocks_hurt_only_that_domain():
    p = pool([A, B])
    for _ in range(3):
        p.observe(IA, "shop2", "blocked", "egress_domain", True)
    assert p.state(IA, "shop2") == QUARANTINED and p.state(IA) == HEALTHY
    assert {p.choose("shop2").egress.id for _ in range(20)} == {IB}
    assert {p.choose("shop1").egress.id for _ in range(40)} == {IA, IB}
    assert p.bans[f"{IA}|shop2"] == 3


@pytest.mark.parametrize(
    "cls,blame,responded",
    [
        ("rate_limited", "domain", True),
        ("not_found", "none", True),
        ("parse_failed", "none", True),
        ("transient", "none", True),
        ("transient", "none", False),
        ("fatal", "none", False),
    ],
)
def test_classes_that_never_blame_the_egress(cls, blame, responded):
    p = pool([A])
    for _ in range(50):
        assert p.observe(IA, "d", cls, blame, responded) == []
    assert p.state(IA) == HEALTHY and p.state(IA, "d") == HEALTHY and p.score(IA) == 1.0


def test_scores_decay_so_old_failures_fade():
    clock = FakeClock()
    p = pool([A], clock)
    p.observe(IA, "d", "egress_failed", "egress", False)
    p.observe(IA, "d", "egress_failed", "egress", False)
    low = p.score(IA)
    clock.advance(600)  # ten half-lives
    assert p.score(IA) > 0.99 > low
    assert p.observe(IA, "d", "egress_failed", "egress", False) == []  # the two old ones no longer count


def test_successes_outweigh_occasional_failures():
    p = pool([A])
    for i in range(100):
        p.observe(IA, "d", "ok", "none", True)
        if i % 10 == 0:
            p.observe(IA, "d", "egress_failed", "egress", False)
    assert p.state(IA) == HEALTHY and p.score(IA) > 0.8


# ---- quarantine, probe, backoff --------------------------------------------------


def _kill(p, e, n=3, domain="d"):
    for _ in range(n):
        p.observe(e, domain, "egress_failed", "egress", False)


def test_probe_after_quarantine_restores_on_success_and_doubles_on_failure():
    clock = FakeClock()
    p = pool([A, B], clock, seed=3)
    _kill(p, IA)
    first = p.health[IA].until - clock.now
    clock.now = p.health[IA].until + 0.01
    assert p.state(IA) == PROBING
    c = p.choose("d")
    assert c.egress.id == IA and c.probe  # a probing egress gets the next request
    assert p.choose("d").egress.id == IB  # one probe at a time
    assert p.observe(IA, "d", "egress_failed", "egress", False)[0].kind == "requarantined"
    second = p.health[IA].until - clock.now
    assert p.health[IA].level == 2 and 10 <= second <= 20 and first <= 10
    clock.now = p.health[IA].until + 0.01
    assert p.choose("d").probe
    assert p.observe(IA, "d", "ok", "none", True)[0].kind == "restored"
    assert p.state(IA) == HEALTHY and p.counts["reprobes"] == 2 and p.counts["restored"] == 1


def test_a_retry_is_not_spent_on_a_reprobe_while_another_egress_is_free():
    """A page whose quick retries went on 503 noise took its late retry through the re-probes
    of two bad proxies (the chaos benchmark's last page, 12 s after the others)."""
    clock = FakeClock()
    p = pool([A, B], clock, seed=3)
    _kill(p, IA)
    clock.now = p.health[IA].until + 0.01
    assert p.state(IA) == PROBING
    c = p.choose("d", retry=True)
    assert c.egress.id == IB and not c.probe and p.counts["reprobe/spared_retry"] == 1
    c = p.choose("d")  # a first attempt carries the re-probe
    assert c.egress.id == IA and c.probe
    # the only free egress is the probing one: the retry takes it rather than wait
    p = pool([A], clock, seed=3)
    _kill(p, IA)
    clock.now = p.health[IA].until + 0.01
    c = p.choose("d", retry=True)
    assert c.egress.id == IA and c.probe


def test_an_egress_is_unproven_until_an_answer_comes_through_it_while_others_answered():
    clock = FakeClock()
    p = pool([A, B], clock, seed=3)
    # no egress answered yet: a site that never answers must not look like each egress's fault
    assert not any(p.choose("d").unproven for _ in range(4))
    p.observe(IA, "d", "transient", "none", True)  # any answer (a 503 too) proves the egress
    picks = [p.choose("d") for _ in range(20)]
    assert {c.egress.id for c in picks} == {IA, IB}
    assert all(c.unproven == (c.egress.id == IB) for c in picks)
    p.observe(IB, "e", "not_found", "none", True)
    assert not any(p.choose("d").unproven for _ in range(8))
    # a re-probe out of quarantine is unproven again
    _kill(p, IA)
    clock.now = p.health[IA].until + 0.01
    c = p.choose("d")
    assert c.egress.id == IA and c.probe and c.unproven


def test_backoff_is_capped_and_starts_over_after_a_long_healthy_spell():
    clock = FakeClock()
    p = pool([A, B], clock)
    for _ in range(6):
        _kill(p, IA, 1 if p.state(IA) == PROBING else 3)
        assert p.health[IA].until - clock.now <= 80
        clock.now = p.health[IA].until + 0.01
    assert p.health[IA].level == 6
    p.choose("d")
    p.observe(IA, "d", "ok", "none", True)
    clock.advance(1000)
    _kill(p, IA)
    assert p.health[IA].level == 1


def test_a_lost_probe_frees_its_slot_after_the_probe_timeout():
    clock = FakeClock()
    p = pool([A, B], clock)
    _kill(p, IA)
    clock.now = p.health[IA].until + 0.01
    assert p.choose("d").egress.id == IA
    clock.advance(POLICY.probe_timeout + 1)
    assert p.choose("d").egress.id == IA


def test_every_egress_quarantined_for_a_domain_means_that_domain_waits():
    clock = FakeClock()
    p = pool([A, B], clock)
    for e in (IA, IB):
        _kill(p, e, domain="x")
        for _ in range(3):
            p.observe(e, "shop1", "blocked", "egress_domain", True)
    c = p.choose("shop1")
    assert c.egress is None and c.reason == "quarantined"
    # an egress is free again when both its quarantines are over; the domain waits for the first one
    assert c.wait_until == min(max(p.health[e].until, p.health[f"{e}|shop1"].until) for e in (IA, IB))


def test_domain_waits_but_others_go_on():
    clock = FakeClock()
    p = pool([A, B], clock)
    for e in (IA, IB):
        for _ in range(3):
            p.observe(e, "shop1", "blocked", "egress_domain", True)
    c = p.choose("shop1")
    assert c.egress is None and c.reason == "quarantined"
    assert c.wait_until == min(p.health[f"{e}|shop1"].until for e in (IA, IB))
    assert p.choose("shop2").egress is not None


# ---- groups ----------------------------------------------------------------------


def test_a_group_that_degrades_together_is_retired():
    p = pool({"dc": [A, B, "http://127.0.0.1:8004", "http://127.0.0.1:8005"], "res": [C]})
    _kill(p, IA)
    assert p.state(IB) == HEALTHY
    ev = p.observe(IB, "d", "egress_failed", "egress", False) + p.observe(IB, "d", "egress_failed", "egress", False)
    ev += p.observe(IB, "d", "egress_failed", "egress", False)
    assert [e.kind for e in ev] == ["quarantined", "group_retired"]
    assert ev[-1].egress == "dc" and ev[-1].detail == "2 of 4 members failed"
    assert all(p.state(e.id) == QUARANTINED for e in p.egresses.values() if e.group == "dc")
    assert p.state(IC) == HEALTHY and {p.choose("d").egress.id for _ in range(10)} == {IC}


def test_one_member_failing_alone_does_not_retire_its_group():
    p = pool({"pair": [A, B], "trio": [C, "http://127.0.0.1:8004", "http://127.0.0.1:8005"]})
    _kill(p, IA)
    _kill(p, IC)
    assert p.state(IB) == HEALTHY and p.state("127.0.0.1:8004") == HEALTHY
    assert p.counts["groups_retired"] == 0


# ---- selection -----------------------------------------------------------------------


def test_selection_spreads_load_and_follows_scores():
    p = pool([A, B, C], seed=5)
    n = Counter(p.choose("d").egress.id for _ in range(300))
    assert all(v > 50 for v in n.values())  # in flight counts spread them
    q = pool([A, B], seed=5)
    q.observe(IA, "d", "egress_failed", "egress", False)
    q.observe(IA, "d", "egress_failed", "egress", False)  # score 1/3, still healthy
    m = Counter()
    for _ in range(300):
        c = q.choose("d")
        m[c.egress.id] += 1
        q.release(c.egress.id)
    assert m[IB] > 2 * m[IA] > 0


def test_a_retry_avoids_the_egresses_that_failed_it_while_others_are_available():
    p = pool([A, B, C])
    assert all(p.choose("d", avoid=[IA, IB]).egress.id == IC for _ in range(10))
    assert p.choose("d", avoid=[IA, IB, IC]).egress is not None  # nothing else: still sent


def test_a_retry_waits_for_an_egress_it_does_not_avoid_rather_than_go_back_through_one():
    """A browser page went three times through the same dead proxy, its egress_failed
    budget spent, while the healthy one held its first page load (one request at a time
    until an egress answers) or was at its route's pace."""
    clock = FakeClock()
    p = pool([A, B], clock, route_rate=1.0)  # one request a second per route
    assert p.choose("d", avoid=[IB]).egress.id == IA  # A's route is now busy for 1 s
    c = p.choose("d", avoid=[IB])  # only B, which failed this request, is free
    assert c.egress is None and c.reason == "avoided" and c.wait_until == pytest.approx(clock.now + 1.0)
    assert p.counts["wait/avoided"] == 1
    assert p.choose("d").egress.id == IB  # a request that avoids nothing takes B meanwhile
    clock.advance(1.0)
    assert p.choose("d", avoid=[IB]).egress.id == IA
    # a route free in 10 s: asked again within PROBE_WAIT (a first request's hold ends when it answers)
    slow = pool([A, B], clock, route_rate=0.1)
    slow.choose("d", avoid=[IB])
    c = slow.choose("d", avoid=[IB])
    assert c.egress is None and c.wait_until == pytest.approx(clock.now + PROBE_WAIT)
    # the other one quarantined: back through the avoided one, rather than nothing
    q = pool([A, B], clock)
    _kill(q, IA)
    assert q.choose("d", avoid=[IB]).egress.id == IB and not q.counts["wait/avoided"]


def test_stickiness_with_a_use_limit_and_a_maximum_age():
    clock = FakeClock()
    p = pool([A, B, C], clock, sticky_uses=5, sticky_age=30)
    picks = [p.choose("d").egress.id for _ in range(5)]
    assert len(set(picks)) == 1
    sixth = p.choose("d").egress.id  # the use limit ends the stickiness: a new pick (maybe the same)
    assert p.sticky("d").uses == 1 and p.sticky("d").egress == sixth
    clock.advance(31)
    p.choose("d")
    assert p.sticky("d").since == clock.now  # too old: a new pick
    stuck = p.sticky("d").egress
    assert p.choose("d", avoid=[stuck]).egress.id != stuck  # a retry leaves the sticky egress


def test_route_caps_make_the_domain_wait_rather_than_overuse_a_route():
    clock = FakeClock()
    p = pool([A, B], clock, route_rate=2.0)  # 2 requests/s per (egress, domain)
    got = [p.choose("d") for _ in range(3)]
    assert sorted(c.egress.id for c in got[:2]) == [IA, IB]
    assert got[2].egress is None and got[2].reason == "route_cap"
    assert got[2].wait_until == pytest.approx(clock.now + 0.5)
    assert p.choose("other").egress is not None  # another domain's routes are free
    clock.advance(0.5)
    assert p.choose("d").egress is not None
    # the 2nd request found the 1st route full, the 3rd found both full
    assert sum(r["capped"] for r in p.routes.pressure()) == 3
    p.routes.workers = 2  # two live workers share the cap: each gets half
    assert p.routes.interval == 1.0


# ---- shared state ----------------------------------------------------------------------


def test_merge_takes_newer_state_changes_from_other_workers():
    clock = FakeClock()
    one, two = pool([A, B], clock), pool([A, B], clock)
    _kill(one, IA)
    recs = one.take_dirty()
    assert set(recs) == {IA} and one.take_dirty() == {}
    ev = two.merge(recs)
    assert [(e.kind, e.egress, e.detail) for e in ev] == [("adopted", IA, "quarantined")]
    assert two.state(IA) == QUARANTINED and {two.choose("d").egress.id for _ in range(10)} == {IB}
    clock.now = two.health[IA].until + 1
    two.choose("d")
    two.observe(IA, "d", "ok", "none", True)
    one.merge(two.take_dirty())
    assert one.state(IA) == HEALTHY
    assert one.merge({IA: one.health[IA].to_record()}) == []  # not newer: nothing
