"""A route learns a bucket's rate from the beat of its refusals (plain Python, a fake clock).

nginx's ``limit_req`` (a leaky bucket of ``rate`` a second and ``burst`` in excess, 429 and
``Retry-After: 1`` beyond) lets a pace faster than its rate through until the burst is
spent, so a route is refused at spacings far faster than the limit (0.2-0.28 s against
3/s in the real plan) and, stepping 10% from there, was refused 3-4 times a route. The
spacing sent from one refusal to the next, the pause included, was the limit to 3% every
time: two such cycles in a row that agree are a bucket's beat, and the route takes it.
"""

from __future__ import annotations

import random

import pytest

from scrapy_scale.clock import FakeClock
from scrapy_scale.throttle.pacing import Pacing
from scrapy_scale.throttle.profiles import Profiles
from scrapy_scale.throttle.routing import RoutePacing

pytestmark = pytest.mark.pure

KEY = "a.example via p1:3128"


def crawl_nginx(
    pc: Pacing, clk: FakeClock, seconds: float, seed: int, rate: float = 3.0, burst: int = 2
) -> list[float]:
    """Requests to one key as fast as its pacing lets them (handed out up to 10 ms after it
    is due, 0-20 ms on the way, answers 3-10 ms later) against nginx's ``limit_req`` with
    ``burst`` nodelay; returns when each refused request went out (seconds from the start)."""
    rnd = random.Random(seed)
    start = clk.now
    excess, last = 0.0, None
    refused: list[float] = []
    flying: list[tuple[float, bool, float]] = []
    due_at: float | None = None
    while clk.now < start + seconds:
        for item in sorted(x for x in flying if x[0] <= clk.now):
            flying.remove(item)
            pc.ended(KEY)
            if item[1]:
                pc.on_success(KEY, item[2])
            else:
                pc.on_rate_limited(KEY, item[2], 1.0)
        if pc.hold_until(KEY) == 0.0:
            due_at = clk.now + rnd.uniform(0, 0.01) if due_at is None else due_at
            if clk.now >= due_at:
                due_at = None
                pc.handed_out(KEY)
                arrive = clk.now + rnd.uniform(0.0, 0.02)
                ex = 0.0 if last is None else max(0.0, excess - rate * (arrive - last))
                ok = ex + 1 <= burst + 1
                if ok:
                    excess, last = ex + 1, arrive
                else:
                    refused.append(clk.now - start)
                lat = rnd.uniform(0.003, 0.01)
                flying.append((arrive + lat, ok, arrive + lat - clk.now))
        clk.advance(0.001)
    return refused


@pytest.mark.parametrize("seed", range(6))
def test_a_route_at_nginx_s_limit_takes_the_beat_of_its_refusals(seed: int) -> None:
    clk = FakeClock(1000.0)
    pc = RoutePacing(Profiles.parse({}), clk)
    refused = crawl_nginx(pc, clk, 25.0, seed)
    assert pc.beats >= 1, refused  # the beat was taken
    # refused at its start, on the first cycle and on the second (the beat); then nothing
    # for 20 s. Without the beat: 6-7 refusals in 40 s, at 7-8 s and 11-12 s again
    assert len(refused) <= 3 and not [t for t in refused if t >= 6.0], refused
    assert pc.site(KEY).delay >= 0.3  # about the bucket's 0.333 s, not the 0.2-0.28 s refused
    refused += [25.0 + t for t in crawl_nginx(pc, clk, 15.0, seed + 100)]
    assert len(refused) <= 5, refused


def test_a_site_s_own_pacing_does_not_take_a_beat() -> None:
    """Without egresses the site learns as before (the demo's planned 429s come at random,
    and long cycles agree by chance): the same bucket, no step from a beat."""
    clk = FakeClock(1000.0)
    pc = Pacing(Profiles.parse({}), clk)
    refused = crawl_nginx(pc, clk, 40.0, 0)
    assert pc.beats == 0 and len(refused) >= 5, refused
