"""Capacity per route and noise that is not pressure (plain Python, an injected clock).

Plans of answers are played against the policy: a server that allows so many requests
per second per client address (per egress), random noise, a limit that moves, a site-wide
outage. A request goes out whenever the site and one of its routes are due; its answer
comes back ``LATENCY`` later.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, deque
from collections.abc import Callable

import pytest
from scrapy import Request

from scrapy_scale.clock import FakeClock
from scrapy_scale.egress.routes import RouteLimiter
from scrapy_scale.throttle.pacing import Pacing
from scrapy_scale.throttle.profiles import Profiles
from scrapy_scale.throttle.routing import BLOCKED_PAUSE, RouteLearner, RoutePacing, route_key, split_route
from tests.crawl.test_throttle_crawl import max_in_window

pytestmark = pytest.mark.pure

HOST = "shop1.example.test"
EGRESSES = ["e1:8080", "e2:8080", "e3:8080", "e4:8080"]
LATENCY = 0.02

Answer = Callable[[str, float], str]


class Limit:
    """Allows ``rate`` requests in any 1 s window (per client: one per egress), 429 beyond."""

    def __init__(self, rate: float):
        self.rate = rate
        self.seen: deque[float] = deque()

    def __call__(self, now: float) -> str:
        while self.seen and self.seen[0] <= now - 1.0:
            self.seen.popleft()
        self.seen.append(now)
        return "ok" if len(self.seen) <= self.rate else "429"


def setup(profiles: dict | None = None) -> tuple[Pacing, RouteLearner, FakeClock]:
    clock = FakeClock(1000.0)
    p = Profiles.parse(profiles or {})
    site = Pacing(p, clock)
    return site, RouteLearner(site, RoutePacing(p, clock)), clock


def play(
    site: Pacing, learner: RouteLearner, clock: FakeClock, answer: Answer, seconds: float, egresses: list[str]
) -> tuple[Counter[str], list[float]]:
    """Send whenever the site and a route are due, for ``seconds``; the answers by kind and
    the send times."""
    got: Counter[str] = Counter()
    sent: list[float] = []
    pending: list[tuple[float, str, str]] = []
    end = clock() + seconds
    turn = 0
    while clock() < end:
        while pending and pending[0][0] <= clock():  # a heap: the earliest answer first
            _, e, a = heapq.heappop(pending)
            site.ended(HOST)
            got[a] += 1
            if a == "ok":
                learner.on_success(HOST, e, LATENCY)
            elif a == "429":
                learner.on_rate_limited(HOST, e, LATENCY, None)
            elif a == "503":
                learner.on_overloaded(HOST, e, LATENCY)
            elif a == "blocked":
                learner.on_blocked(HOST, e)
        t = site.hold_until(HOST) or learner.hold_until(HOST, egresses)
        if t:
            nxt = min(t, end, pending[0][0]) if pending else min(t, end)
            clock.now = max(clock() + 0.0005, nxt) if math.isfinite(nxt) else clock() + 0.01
            continue
        free = [e for e in egresses if not learner.route_free_at(HOST, e)]
        e = free[turn % len(free)]
        turn += 1
        site.handed_out(HOST)
        learner.taken(HOST, e)
        sent.append(clock())
        heapq.heappush(pending, (clock() + LATENCY, e, answer(e, clock())))
        clock.advance(0.0005)
    return got, sent


def per_route_limit(rate: float) -> Answer:
    limits = {e: Limit(rate) for e in EGRESSES}
    return lambda e, now: limits[e](now)


# ---- capacity per route ------------------------------------------------------------------


def test_four_routes_to_a_site_that_limits_each_client_reach_near_four_times_its_limit() -> None:
    site, learner, clock = setup()
    answer = per_route_limit(5)
    play(site, learner, clock, answer, 60.0, EGRESSES)  # the first minute learns
    got, sent = play(site, learner, clock, answer, 60.0, EGRESSES)
    rate = len(sent) / 60.0
    assert rate >= 0.7 * 4 * 5, (rate, got)  # far above one route's 5/s
    assert got["429"] <= 0.03 * sum(got.values()), got
    for e in EGRESSES:  # each route learned about its own limit
        assert 0.15 <= learner.route(HOST, e).delay <= 0.4


def test_a_429_through_one_egress_slows_that_route_not_the_site_nor_the_others() -> None:
    site, learner, clock = setup()
    for e in EGRESSES:
        learner.taken(HOST, e)
        learner.on_success(HOST, e, LATENCY)
        learner.route(HOST, e).too_fast = 0.01  # each learned a limit of its own (tests below: not)
    clock.advance(1.0)  # every route is due again
    before = {e: learner.route(HOST, e).delay for e in EGRESSES}
    site_before = site.interval(site.site(HOST))
    learner.on_rate_limited(HOST, "e1:8080", LATENCY, 2.0)
    assert learner.route(HOST, "e1:8080").delay > before["e1:8080"]
    assert learner.route(HOST, "e1:8080").paused_until == pytest.approx(clock() + 2.0)
    assert learner.route_free_at(HOST, "e1:8080") == pytest.approx(clock() + 2.0)
    assert all(learner.route(HOST, e).delay == before[e] for e in EGRESSES[1:])
    assert site.interval(site.site(HOST)) == site_before and site.site(HOST).paused_until == 0.0
    # the site is still due: another route is ready
    assert learner.hold_until(HOST, EGRESSES) == 0.0
    assert learner.hold_until(HOST, ["e1:8080"]) == pytest.approx(clock() + 2.0)


def test_refusals_on_most_routes_at_once_slow_and_pause_the_site() -> None:
    site, learner, clock = setup()
    for e in EGRESSES:
        learner.taken(HOST, e)
        learner.on_success(HOST, e, LATENCY)
    # each route's first refusal is its own limit's, as far as it knows: routes that started
    # together meet a per-address limit together (the chaos benchmark's host 4)
    first = [learner.on_rate_limited(HOST, e, LATENCY, 3.0) for e in EGRESSES]
    assert first == [0.0] * 4 and site.site(HOST).paused_until == 0.0
    assert all(learner.route(HOST, e).paused_until == pytest.approx(clock() + 3.0) for e in EGRESSES)
    clock.advance(3.5)  # refused again, each at the slower pace it backed off to: the site's
    pauses = [learner.on_rate_limited(HOST, e, LATENCY, 3.0) for e in EGRESSES[:3]]
    assert pauses[:2] == [0.0, 0.0] and pauses[2] == 3.0  # the third of four: site-wide
    assert site.site(HOST).paused_until == pytest.approx(clock() + 3.0)
    assert site.hold_until(HOST) == pytest.approx(clock() + 3.0)
    # refused at the same pace as before: still the route's (one route's refusals never are)
    site2, learner2, clock2 = setup()
    for e in EGRESSES:
        learner2.taken(HOST, e)
        learner2.on_success(HOST, e, LATENCY)
        learner2.on_rate_limited(HOST, e, LATENCY, None)
    for e in EGRESSES:  # the same spacing: each route recovered to where it was refused
        learner2.route(HOST, e).delay = learner2.route(HOST, e).delay / 1.5
    assert [learner2.on_rate_limited(HOST, e, LATENCY, None) for e in EGRESSES] == [0.0] * 4


def test_a_limit_of_the_whole_site_shared_by_every_route_is_learned_by_the_site() -> None:
    """A site that allows 6 requests/s whoever sends them: the routes' first refusals look
    like their own limits, the next ones, at the slower paces they backed off to, do not."""
    site, learner, clock = setup()
    shared = Limit(6)
    answer: Answer = lambda e, now: shared(now)  # noqa: E731
    play(site, learner, clock, answer, 60.0, EGRESSES)  # the first minute learns
    got, sent = play(site, learner, clock, answer, 60.0, EGRESSES)
    rate = len(sent) / 60.0
    assert got["429"] <= 0.05 * sum(got.values()), got
    assert 0.6 * 6 <= rate <= 6.5, (rate, got)


def test_a_site_blocked_on_every_route_it_was_tried_through_waits() -> None:
    site, learner, clock = setup()
    for e in EGRESSES[:2]:
        learner.taken(HOST, e)
    assert learner.on_blocked(HOST, EGRESSES[0]) == 0.0  # one route: try another
    assert learner.on_blocked(HOST, EGRESSES[1]) == BLOCKED_PAUSE  # every route tried: wait
    assert site.hold_until(HOST) == pytest.approx(clock() + BLOCKED_PAUSE)
    clock.advance(BLOCKED_PAUSE)
    for e in EGRESSES[2:]:
        learner.taken(HOST, e)
        learner.on_blocked(HOST, e)
    assert site.hold_until(HOST) == pytest.approx(clock() + 2 * BLOCKED_PAUSE)  # doubled
    clock.advance(2 * BLOCKED_PAUSE)
    learner.on_success(HOST, EGRESSES[0], LATENCY)  # a good answer: the count starts again
    learner.on_blocked(HOST, EGRESSES[1])
    assert site.hold_until(HOST) == 0.0


@pytest.mark.parametrize("limit", [{"max_rate": 3.0}, {"min_delay": 0.5}])
def test_the_total_over_all_routes_never_exceeds_the_sites_profile(limit: dict) -> None:
    site, learner, clock = setup({HOST: limit})
    got, sent = play(site, learner, clock, lambda e, now: "ok", 60.0, EGRESSES)
    rate = 3.0 if "max_rate" in limit else 2.0
    assert max_in_window(sent, 2.0) <= 2 * rate + 1, got
    assert len(sent) / 60.0 >= 0.9 * rate


def test_a_crawl_delay_bounds_the_total_over_all_routes() -> None:
    site, learner, clock = setup()
    site.set_crawl_delay(HOST, 1.0)
    _, sent = play(site, learner, clock, lambda e, now: "ok", 30.0, EGRESSES)
    assert min(b - a for a, b in zip(sent, sent[1:], strict=False)) >= 1.0 - 1e-6


def test_a_route_limit_that_moves_is_followed_and_a_raised_one_found_again() -> None:
    site, learner, clock = setup()
    limits = {e: Limit(5) for e in EGRESSES}
    answer: Answer = lambda e, now: limits[e](now)  # noqa: E731
    play(site, learner, clock, answer, 60.0, EGRESSES)
    for lim in limits.values():
        lim.rate = 2
    play(site, learner, clock, answer, 60.0, EGRESSES)  # following it down
    got, sent = play(site, learner, clock, answer, 60.0, EGRESSES)
    assert got["429"] <= 0.05 * sum(got.values()), got
    assert 0.6 * 8 <= len(sent) / 60.0 <= 8 * 1.05
    for lim in limits.values():
        lim.rate = 5
    for _ in range(10):  # the memory of the refused pace fades: the higher limit is found again
        got, sent = play(site, learner, clock, answer, 60.0, EGRESSES)
    assert len(sent) / 60.0 >= 0.6 * 20, got


# ---- noise is not pressure -------------------------------------------------------------------


def test_random_503s_at_a_stable_latency_do_not_slow_the_site() -> None:
    site, learner, clock = setup()
    rng = random.Random(7)
    answer = per_route_limit(1000)
    noisy: Answer = lambda e, now: "503" if rng.random() < 0.05 else answer(e, now)  # noqa: E731
    got, sent = play(site, learner, clock, noisy, 120.0, EGRESSES)
    clean_site, clean_learner, clean_clock = setup()
    _, clean_sent = play(clean_site, clean_learner, clean_clock, answer, 120.0, EGRESSES)
    assert got["503"] > 100
    assert len(sent) >= 0.8 * len(clean_sent), (len(sent), len(clean_sent))


def test_503s_that_rise_with_the_rate_slow_the_route_down() -> None:
    site, learner, clock = setup()
    limits = {e: Limit(5) for e in EGRESSES}
    overloaded: Answer = lambda e, now: "ok" if limits[e](now) == "ok" else "503"  # noqa: E731
    play(site, learner, clock, overloaded, 60.0, EGRESSES)
    got, sent = play(site, learner, clock, overloaded, 60.0, EGRESSES)
    assert got["503"] <= 0.15 * sum(got.values()), got
    assert len(sent) / 60.0 >= 0.6 * 20


def test_a_site_wide_outage_slows_every_route_and_it_comes_back_after() -> None:
    site, learner, clock = setup()
    answer = per_route_limit(1000)
    play(site, learner, clock, answer, 30.0, EGRESSES)
    got, sent = play(site, learner, clock, lambda e, now: "503", 30.0, EGRESSES)
    last = [t for t in sent if t >= clock() - 10.0]
    assert len(last) / 10.0 <= 4.0, got  # polite to a failing site: about one request/s per route
    assert site.site(HOST).delay > 0.2  # every route overloaded: the site slowed down too
    play(site, learner, clock, answer, 120.0, EGRESSES)
    _, sent = play(site, learner, clock, answer, 30.0, EGRESSES)
    assert len(sent) / 30.0 >= 100, "the routes recover once the outage is over"


def test_without_egresses_a_site_with_random_503s_keeps_its_pace() -> None:
    clock = FakeClock(1000.0)
    pacing = Pacing(Profiles.parse({}), clock)
    rng = random.Random(3)
    for _ in range(2000):
        t = pacing.hold_until(HOST)
        clock.now = max(clock.now, t)
        pacing.handed_out(HOST)
        clock.advance(LATENCY)
        pacing.ended(HOST)
        if rng.random() < 0.05:
            pacing.on_overloaded(HOST, LATENCY)
        else:
            pacing.on_success(HOST, LATENCY)
    assert pacing.site(HOST).delay <= 2 * LATENCY


# ---- learned route state: persisted, shared, checked -------------------------------------------


def test_route_state_is_exported_and_restored_with_its_own_key() -> None:
    site, learner, clock = setup()
    learner.taken(HOST, "e1:8080")
    learner.on_rate_limited(HOST, "e1:8080", LATENCY, None)
    saved = learner.routes.export()
    key = route_key(HOST, "e1:8080")
    assert list(saved) == [key] and split_route(key) == (HOST, "e1:8080") and split_route(HOST) is None
    fresh = RoutePacing(Profiles.parse({}), clock)
    assert fresh.restore(saved) == 1
    assert fresh.site(key).delay == learner.route(HOST, "e1:8080").delay


@pytest.mark.parametrize(
    "raw,why",
    [
        ({"delay": "nan", "at": 1000.0}, "not a finite number"),
        ({"delay": -1.0, "at": 1000.0}, "not a finite number"),
        ({"delay": 0.5, "at": 1e18}, "in the future"),
        ({"delay": 0.5, "at": 1000.0, "too_fast": 1e9}, "above max_delay"),
        ("garbage", "not a record"),
    ],
)
def test_hostile_route_state_read_back_is_skipped_or_repaired(raw: object, why: str) -> None:
    clock = FakeClock(1000.0)
    routes = RoutePacing(Profiles.parse({}), clock)
    key = route_key(HOST, "e1:8080")
    routes.restore({key: raw})  # type: ignore[dict-item]
    assert routes.rejected and why in routes.rejected[0][1]
    s = routes.site(key)
    assert math.isfinite(s.delay) and 0 <= s.delay <= s.profile.max_delay
    assert s.too_fast <= s.profile.max_delay
    assert learned_again(routes, key)


def learned_again(routes: RoutePacing, key: str) -> bool:
    """Sane state is written over the bad one at the next save."""
    return key in routes.export()


# ---- the egress pool's seam ------------------------------------------------------------------


def test_the_pool_picks_no_route_that_is_not_due_and_the_static_cap_still_bounds() -> None:
    site, learner, clock = setup()
    limiter = RouteLimiter(rate=2.0)  # SCALE_EGRESS_ROUTE_RATE: 0.5 s per route at least
    limiter.attach(learner)
    limiter.workers = 2  # two live workers: each takes half of every route's rate
    assert learner.workers == 2
    learner.settled("e1:8080", True)  # e1 has answered (else it carries one request at a time)
    limiter.take("e1:8080", HOST, clock())
    assert limiter.full("e1:8080", HOST, clock()) and not limiter.full("e2:8080", HOST, clock())
    assert limiter.free_at("e1:8080", HOST) == pytest.approx(clock() + 1.0)  # the static cap, x 2 workers
    learner.on_rate_limited(HOST, "e2:8080", LATENCY, 30.0)  # learned: e2 paused by its Retry-After
    assert limiter.full("e2:8080", HOST, clock())
    assert limiter.free_at("e2:8080", HOST) == pytest.approx(clock() + 30.0)


def test_status_shows_routes_at_their_learned_capacity_in_a_few_lines() -> None:
    from scrapy_scale.throttle import status

    rows = [{"site": "shop2.example.test", "delay": 0.5, "learned_at": 990.0}]
    for i in range(7):
        rows.append(
            {
                "site": route_key(HOST, f"e{i}:8080"),
                "delay": 0.2 + i / 100,
                "learned_at": 990.0,
                "route": {"site": HOST, "egress": f"e{i}:8080"},
            }
        )
    text = status.format_text(rows, now=1000.0)
    lines = text.strip().splitlines()
    assert "shop2.example.test: 0.500 s between requests" in text
    assert lines[-2] == "routes (learned capacity per egress, 7 route(s)):"
    assert (
        lines[-1].startswith(f"  {HOST}: 7 route(s), ")
        and "e6:8080 3.8, " in lines[-1]
        and lines[-1].endswith(", ...)")
    )
    # a route's own pause is no pause of the site
    rows[1]["paused_until"] = 2000.0
    assert status.PausedSites().at(rows, 1000.0) == []


def test_slow_refusals_of_a_rerun_confirm_no_higher_limit() -> None:
    """Reruns of the demo got slower and slower (55 s, 71 s, 136 s): each started from the
    learned delay, and its planned 429s at that slower pace confirmed a higher limit."""
    clock = FakeClock(1000.0)
    profiles = Profiles.parse({"default": {"min_delay": 0.2, "start_delay": 0.25}})
    saved = {
        HOST: {"delay": 1.0, "at": 999.0, "too_fast": 0.5, "too_fast_at": 999.0, "settled": 0.4, "fastest_ok": 0.2}
    }
    rerun = Pacing(profiles, clock)
    assert rerun.restore(saved) == 1
    s = rerun.site(HOST)
    assert s.delay == 1.0 and s.settled == 0.4 and s.fastest_ok == 0.2
    for i in range(80):  # a planned 429 every 6th answer at first, at the slow pace
        clock.advance(rerun.interval(s))
        rerun.handed_out(HOST)
        rerun.ended(HOST)
        if i % 6 == 5 and i < 30:
            rerun.on_rate_limited(HOST, 0.01, 1.0)
        else:
            rerun.on_success(HOST, 0.01)
    assert s.settled <= 0.4 and s.delay <= 0.6, (s.settled, s.delay)  # nothing higher confirmed


def test_a_limit_that_drops_far_below_the_fastest_pace_taken_is_still_followed() -> None:
    """The fastest pace taken well is no excuse for frequent refusals: it is dropped."""
    clock = FakeClock(1000.0)
    pacing = Pacing(Profiles.parse({}), clock)
    s = pacing.site(HOST)
    s.fastest_ok = 0.05
    limit = Limit(1)
    refused = 0
    for _ in range(400):
        clock.now = max(clock.now, pacing.hold_until(HOST))
        pacing.handed_out(HOST)
        clock.advance(0.01)
        pacing.ended(HOST)
        if limit(clock.now) == "ok":
            pacing.on_success(HOST, 0.01)
        else:
            refused += 1
            pacing.on_rate_limited(HOST, 0.01, None)
    assert pacing.interval(s) >= 0.8 and s.fastest_ok == 0.0 or s.fastest_ok >= 0.8, (pacing.interval(s), s.fastest_ok)


def test_an_egress_that_has_not_answered_yet_carries_one_request_at_a_time() -> None:
    """A blackhole (accepts, never answers) held one download slot per request sent through
    it until the download timeout: with 16 slots the crawl stalled for 10 s at its start.
    Until an egress answers, its next request waits for the first one's outcome (across
    every site: the egress is what is unknown), PROBE_HOLD seconds at most."""
    from scrapy_scale.throttle.routing import PROBE_HOLD

    site, learner, clock = setup()
    other = "shop2.example.test"
    learner.taken(HOST, "e1:8080")
    assert learner.route_free_at(HOST, "e1:8080") == pytest.approx(clock() + PROBE_HOLD)
    assert learner.route_free_at(other, "e1:8080") == pytest.approx(clock() + PROBE_HOLD)  # the egress
    assert learner.route_free_at(HOST, "e2:8080") == 0.0  # the others are free
    clock.advance(10.0)
    learner.settled("e1:8080", False)  # timed out: no answer, the next one may go
    assert learner.route_free_at(other, "e1:8080") == 0.0
    learner.taken(other, "e1:8080")
    assert learner.route_free_at(HOST, "e1:8080") > clock()
    clock.advance(PROBE_HOLD)  # no outcome came at all (a request dropped): the hold ends
    assert learner.route_free_at(HOST, "e1:8080") == 0.0
    learner.taken(HOST, "e2:8080")
    clock.advance(LATENCY)
    learner.on_success(HOST, "e2:8080", LATENCY)  # answered: paced by its learned delay only
    learner.taken(HOST, "e2:8080")
    learner.taken(other, "e2:8080")
    assert learner.route_free_at(other, "e3:8080") == 0.0
    assert learner.route_free_at(HOST, "e2:8080") <= clock() + learner.route(HOST, "e2:8080").delay


def test_a_request_handed_out_holds_a_free_route_until_the_pool_gives_it_one() -> None:
    """Between the scheduler handing a request out and the egress pool choosing its route,
    other middlewares run (robots.txt's awaits); the scheduler asked again meanwhile and
    handed out a request per free route check, and the pool sent the extra ones back (174
    "route_cap" waits for 269 requests in tests/crawl/test_throttle_routes.py). The hold
    is the request object's own: another download the pool routes (robots.txt) does not
    free it, nor does a copy of it; without the downloader's view, one that never reaches
    the pool stops holding after the grace (transit.TTL)."""
    from scrapy_scale.throttle.routing import RESERVED_RECHECK
    from scrapy_scale.transit import TTL

    site, learner, clock = setup()
    two = EGRESSES[:2]
    for e in two:  # both answered once: paced by their learned delay, no probe hold
        learner.taken(HOST, e)
        learner.on_success(HOST, e, LATENCY)
    clock.advance(0.5)
    assert learner.hold_until(HOST, two) == 0.0
    a, b = Request(f"http://{HOST}/a"), Request(f"http://{HOST}/b")
    learner.reserve(a, HOST)
    assert learner.hold_until(HOST, two) == 0.0  # one route left for the next request
    learner.reserve(b, HOST)
    assert learner.hold_until(HOST, two) == pytest.approx(clock() + RESERVED_RECHECK)
    learner.release(Request(f"http://{HOST}/robots.txt"))  # robots.txt reached the pool ...
    learner.taken(HOST, two[0])  # ... and went out through one: no hold is freed by it
    learner.release(a.copy())  # a copy of a (a retry) holds nothing, frees nothing
    clock.advance(0.4)
    assert learner.hold_until(HOST, two) == pytest.approx(clock() + RESERVED_RECHECK)
    learner.release(a)  # the first reached the pool and took the other route
    learner.taken(HOST, two[1])
    assert learner.hold_until(HOST, two) > clock()  # both routes busy now, or spoken for (b)
    learner.release(b)
    learner.release(b)  # twice: no other hold is freed
    clock.advance(1.0)
    assert learner.hold_until(HOST, two) == 0.0
    assert learner.holds.expired == 0 and not learner.holds.counted_keys  # nothing kept per site
    c, d = Request(f"http://{HOST}/c"), Request(f"http://{HOST}/d")
    learner.reserve(c, HOST)
    learner.reserve(d, HOST)  # neither reaches the pool, and the downloader's view is unknown
    assert learner.hold_until(HOST, two) > clock()
    clock.advance(TTL + 0.01)
    assert learner.hold_until(HOST, two) == 0.0  # no route stays spoken for
    assert learner.holds.expired == 2 and not learner.holds.counted_keys
    learner.reserve(c, HOST)
    learner.reserve(d, HOST)
    clock.now -= 3600  # the clock stepped back: holds from "the future" are dropped
    assert learner.holds.pending(site.site(HOST).key) == 0
    assert learner.holds.expired == 4 and not learner.holds.counted_keys  # nothing kept per site


def test_a_request_a_middleware_answered_or_dropped_holds_no_route_at_once() -> None:
    """With the downloader's view (``Downloader.active``), a request handed out holds a
    route only while the downloader has it: one a middleware answered (an HTTP cache hit)
    or dropped (a robots.txt disallow, offsite) lets its route go at once, not a grace
    later (it held one of its site's free routes for up to a second, and the site's next
    request waited). The clock does not move here: the old grace would still hold."""
    site, learner, clock = setup()
    downloader: set[Request] = set()
    learner.holds.in_downloader = lambda: downloader
    one = EGRESSES[:1]
    learner.taken(HOST, one[0])
    learner.on_success(HOST, one[0], LATENCY)
    clock.advance(0.5)
    assert learner.hold_until(HOST, one) == 0.0
    cached, disallowed = Request(f"http://{HOST}/cached"), Request(f"http://{HOST}/disallowed")
    learner.reserve(cached, HOST)
    downloader.add(cached)  # the engine's fetch, right after the hand-out
    assert learner.hold_until(HOST, one) > clock()  # its one free route is spoken for
    downloader.discard(cached)  # a middleware answered it: it never reaches the pool
    assert learner.hold_until(HOST, one) == 0.0
    assert learner.holds.left_downloader == 1 and learner.holds.expired == 0  # the path ran
    learner.reserve(disallowed, HOST)
    downloader.add(disallowed)
    assert learner.hold_until(HOST, one) > clock()
    downloader.discard(disallowed)  # robots.txt disallowed it
    assert learner.hold_until(HOST, one) == 0.0
    assert learner.holds.left_downloader == 2 and not learner.holds.counted_keys
