"""Routes of a site learn from their siblings (plain Python, an injected clock): a route
that learned no limit of its own starts at the best sibling's learned rate, not above it,
so a site that limits each client address refuses fewer requests while the routes learn."""

from __future__ import annotations

import pytest

from tests.unit.test_throttle_routes_policy import EGRESSES, HOST, LATENCY, per_route_limit, play, setup

pytestmark = pytest.mark.pure


def refuse(learner, clock, egress: str, times: int = 1) -> None:  # type: ignore[no-untyped-def]
    for _ in range(times):
        learner.taken(HOST, egress)
        clock.advance(0.05)
        learner.on_rate_limited(HOST, egress, LATENCY, None)
        clock.advance(0.5)


def test_a_new_route_starts_at_the_best_siblings_learned_rate_not_above_it() -> None:
    site, learner, clock = setup({"default": {"start_delay": 0.1}})
    refuse(learner, clock, "e1:8080")
    refuse(learner, clock, "e2:8080", times=3)  # learned a slower pace
    e1, e2 = learner.route(HOST, "e1:8080"), learner.route(HOST, "e2:8080")
    assert e1.delay < e2.delay
    new = learner.route(HOST, "e9:8080")  # an egress the site was not used through yet
    assert new.delay == pytest.approx(e1.delay)  # the best (fastest) learned, not the start delay
    assert learner.routes.too_fast(new) == pytest.approx(learner.routes.too_fast(e1))  # recovery stays above it
    # another site's routes learn nothing from these
    assert learner.route("other.example.test", "e9:8080").delay == pytest.approx(0.1)


def test_a_refusal_brings_the_siblings_that_learned_nothing_to_its_pace_not_the_others() -> None:
    site, learner, clock = setup({"default": {"start_delay": 0.1}})
    for e in EGRESSES:
        learner.taken(HOST, e)
        learner.on_success(HOST, e, LATENCY)
    e4 = learner.route(HOST, "e4:8080")
    e4.too_fast, e4.too_fast_at, e4.delay = 0.04, clock(), 0.05  # e4 learned a limit of its own
    clock.advance(0.1)  # every route is due again, at the pace e1 is about to be refused at
    assert all(not learner.route_free_at(HOST, e) for e in EGRESSES)
    learner.on_rate_limited(HOST, "e1:8080", LATENCY, None)
    slowed = learner.route(HOST, "e1:8080").delay
    assert slowed > 0.1
    # e2 and e3 take the best pace learned (e4's, faster than the one e1 was refused at),
    # not above it: its memory of the spacing that was too fast
    for e in ("e2:8080", "e3:8080"):
        assert learner.route(HOST, e).delay >= 0.05
        assert learner.routes.too_fast(learner.route(HOST, e)) == pytest.approx(0.04, rel=1e-3)  # faded 0.1 s
    assert e4.delay == 0.05  # keeps what it learned itself
    # once e4 learned a slower pace than e1's, e1's is the best: a refusal there brings the
    # siblings that learned nothing to it, and the page is not retried at once through them
    e4.delay = 1.0
    for e in ("e2:8080", "e3:8080"):
        r = learner.route(HOST, e)
        r.too_fast, r.delay = 0.0, 0.1  # as they were
    clock.advance(5.0)
    learner.on_rate_limited(HOST, "e1:8080", LATENCY, None)
    slowed = learner.route(HOST, "e1:8080").delay
    for e in ("e2:8080", "e3:8080"):
        assert learner.route(HOST, e).delay == pytest.approx(slowed) and slowed > 0.1


def test_four_routes_started_together_learn_a_per_address_limit_with_fewer_refusals() -> None:
    # the chaos benchmark's 6/s host: four routes started at the profile's pace were all
    # refused within 0.3 s (35 429s in the first 16 s of this plan, 240 requests, before)
    site, learner, clock = setup()
    got, sent = play(site, learner, clock, per_route_limit(6), 16.0, EGRESSES)
    assert got["429"] <= 0.08 * len(sent), (got, len(sent))
    assert len(sent) >= 240, len(sent)  # no slower for it
