"""Issue 33 item 4, fewer refusals while routes learn a per-address limit (plain Python, an
injected clock): a page refused through one route is not retried at once through a sibling
route at the pace that was refused (it waits for a sibling with room, or for the refused
route's own pace), and a route slowed by nginx's limit 503s (no Retry-After) brings its
siblings that learned nothing to its pace, as a 429 does. The retry's meta says which egress
refused it (``meta_keys.REFUSED_VIA``, set by ``retry_request``, read back untrusted)."""

from __future__ import annotations

import logging

import pytest
from scrapy import Request

from scrapy_scale import meta_keys
from scrapy_scale.egress.routes import RouteLimiter
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.outcomes.retry import retry_request
from scrapy_scale.throttle.routing import WINDOW, RouteLearner
from tests.unit.test_throttle_routes_policy import EGRESSES, HOST, LATENCY, setup

pytestmark = pytest.mark.pure

E1, E2, E3, E4 = EGRESSES


def at_pace(learner: RouteLearner, egress: str, delay: float) -> None:
    """The route learned a limit of its own and sends at ``delay``."""
    r = learner.route(HOST, egress)
    r.delay, r.too_fast, r.too_fast_at = delay, delay / 1.1, learner.clock()
    learner.settled(egress, True)  # it has answered: no probe hold


def send(learner: RouteLearner, clock, egress: str) -> None:  # type: ignore[no-untyped-def]
    learner.taken(HOST, egress)
    clock.advance(LATENCY)


def test_a_refused_page_waits_for_a_sibling_with_room_or_the_refused_routes_own_pace() -> None:
    site, learner, clock = setup({"default": {"start_delay": 0.1}})
    for e, d in ((E1, 0.1), (E2, 0.1), (E3, 0.3)):
        at_pace(learner, e, d)
    for e in (E1, E2, E3):
        send(learner, clock, e)
    clock.advance(0.3)  # every route is due
    send(learner, clock, E2)  # e2 goes on at its pace (0.1 s), e3 at its slower one
    send(learner, clock, E1)
    learner.on_rate_limited(HOST, E1, LATENCY, None)  # e1 refused at 0.1 s: it slows down
    own = learner.route_free_at(HOST, E1)
    assert own > clock()  # the refused route's own (slower) pace
    clock.advance(0.1)
    assert not learner.route_free_at(HOST, E2)  # due for any other page
    # the refused page's retry: not through e2, at the refused pace, till e1's own pace
    assert learner.route_free_at(HOST, E2, refused_via=E1) == pytest.approx(own)
    assert learner.retries_held == 1  # the hold ran
    # e3 sends slower than the refused pace (room), e4 has sent nothing (room): at once
    assert not learner.route_free_at(HOST, E3, refused_via=E1)
    assert not learner.route_free_at(HOST, E4, refused_via=E1)
    clock.now = own
    assert not learner.route_free_at(HOST, E2, refused_via=E1)  # the refused route's pace came
    # another route's refusal, or one older than the window, holds nothing
    assert not learner.route_free_at(HOST, E2, refused_via=E4)
    send(learner, clock, E2)
    clock.advance(WINDOW)
    send(learner, clock, E2)
    clock.advance(0.1)
    assert not learner.route_free_at(HOST, E2, refused_via=E1)
    assert learner.retries_held == 1


def test_the_egress_pool_waits_for_the_refused_routes_pace_when_every_sibling_is_at_it() -> None:
    site, learner, clock = setup({"default": {"start_delay": 0.1}})
    limiter = RouteLimiter()
    limiter.attach(learner)
    for e in (E1, E2):
        at_pace(learner, e, 0.1)
        send(learner, clock, e)
    clock.advance(0.2)
    send(learner, clock, E2)
    send(learner, clock, E1)
    learner.on_overloaded(HOST, E1, LATENCY)  # nginx's limit 503 (no Retry-After) ...
    learner.on_rate_limited(HOST, E1, LATENCY, None)  # ... and a 429: e1 slowed down
    clock.advance(0.1)
    own = learner.route_free_at(HOST, E1)
    assert limiter.free_at(E2, HOST) == 0.0
    assert limiter.full(E2, HOST, clock(), refused_via=E1)
    assert limiter.free_at(E2, HOST, refused_via=E1) == pytest.approx(own)


def test_a_route_slowed_by_limit_503s_brings_its_siblings_that_learned_nothing_to_its_pace() -> None:
    site, learner, clock = setup({"default": {"start_delay": 0.1}})
    for e in EGRESSES:
        send(learner, clock, e)
        learner.on_success(HOST, e, LATENCY)
    e1 = learner.route(HOST, E1)
    slowed_at = e1.slowed_at
    for _ in range(20):  # 503s without Retry-After through e1 until they are pressure
        clock.advance(0.1)
        send(learner, clock, E1)
        learner.on_overloaded(HOST, E1, LATENCY)
        if e1.slowed_at != slowed_at:
            break
    assert e1.slowed_at != slowed_at and e1.delay > 0.1  # e1 stepped down on its 503s
    for e in (E2, E3, E4):  # they had learned no limit: they take e1's pace, not above it
        r = learner.route(HOST, e)
        assert r.delay == pytest.approx(e1.delay)
        assert learner.routes.too_fast(r) == pytest.approx(learner.routes.too_fast(e1), rel=1e-3)


@pytest.fixture
def fresh_warnings():
    meta_keys._warned_keys.clear()
    yield
    meta_keys._warned_keys.clear()


@pytest.mark.parametrize(
    ("cls", "status", "slow_down", "via"),
    [
        (FailureClass.RATE_LIMITED, 429, False, E1),
        (FailureClass.RATE_LIMITED, 503, False, E1),  # a 503 with Retry-After
        (FailureClass.TRANSIENT, 503, True, E1),  # nginx's limit_req 503, no Retry-After
        (FailureClass.TRANSIENT, 502, False, None),
        (FailureClass.BLOCKED, 403, False, None),
    ],
)
def test_a_retry_carries_the_egress_it_was_refused_through_for_the_rate(cls, status, slow_down, via) -> None:
    refused = Outcome("fp", "http://a.test/", "a.test", FailureClass.RATE_LIMITED, status=429, egress=E2, attempt=1)
    first = retry_request(Request("http://a.test/"), refused, not_before=None)
    assert meta_keys.refused_via(first.meta) == E2  # the chain keeps it (EGRESS is one attempt's)
    o = Outcome("fp", "http://a.test/", "a.test", cls, status=status, egress=E1, slow_down=slow_down, attempt=2)
    new = retry_request(first, o, not_before=None)
    assert meta_keys.refused_via(new.meta) == via
    assert meta_keys.REFUSED_VIA in meta_keys.CHAIN_KEYS


@pytest.mark.parametrize("bad", [7, "", ["e1:8080"], {"e": 1}, True])
def test_a_hostile_refused_via_in_a_retrys_meta_is_dropped_with_one_warning(bad, fresh_warnings, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.meta_keys"):
        for _ in range(2):
            m = {meta_keys.REFUSED_VIA: bad}
            assert meta_keys.refused_via(m) is None
            assert meta_keys.REFUSED_VIA not in m
    assert len(caplog.records) == 1, caplog.text
    assert "warned once" in caplog.text
    m = {meta_keys.REFUSED_VIA: bad}
    meta_keys.check_stored(m)  # read back from the frontier's record: checked there too
    assert meta_keys.REFUSED_VIA not in m
