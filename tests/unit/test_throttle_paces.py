"""Answers by pace: refusals that fall when the pace slows are the rate's; others are not."""

from __future__ import annotations

import math
import random

import pytest

from scrapy_scale.clock import FakeClock
from scrapy_scale.throttle import paces
from scrapy_scale.throttle.pacing import Pacing
from scrapy_scale.throttle.profiles import Profiles
from tests.support.demo_plan import demo_plan_run

pytestmark = pytest.mark.pure


def histogram(answers: list[tuple[float, int, int]]) -> paces.Paces:
    """(spacing, good, refused) answers, the refused ones last at each pace."""
    p: paces.Paces = {}
    for spacing, good, refused in answers:
        for _ in range(good):
            paces.record(p, spacing, refused=False)
        for _ in range(refused):
            paces.record(p, spacing, refused=True)
    return p


def test_refusals_that_fall_when_the_pace_slows_are_the_rates() -> None:
    limit = histogram([(0.1, 10, 10), (0.15, 15, 5), (0.3, 40, 0)])
    assert paces.rate_tied(limit, 0.15) is True
    assert paces.rate_tied(limit, 0.15, at_slower=True) is True
    assert paces.rate_tied(limit, 0.3, at_slower=True, strict=True) is True


def test_refusals_at_any_pace_are_not_the_rates() -> None:
    anywhere = histogram([(0.1, 16, 4), (0.2, 16, 4), (0.4, 16, 4), (0.8, 16, 4)])
    assert paces.rate_tied(anywhere, 0.2) is False
    assert paces.rate_tied(anywhere, 0.4, at_slower=True, strict=True) is False
    more_when_slower = histogram([(0.2, 30, 2), (0.4, 5, 5)])
    assert paces.rate_tied(more_when_slower, 0.4, at_slower=True, strict=True) is False


def test_too_few_answers_on_a_side_tell_nothing() -> None:
    assert paces.rate_tied({}, 0.2) is None
    assert paces.rate_tied(histogram([(0.1, 5, 5), (0.4, 2, 0)]), 0.1) is None  # 2 slower
    assert paces.rate_tied(histogram([(0.4, 9, 1)]), 0.1) is None  # none at or faster


def test_old_answers_fade() -> None:
    p = histogram([(0.1, 0, 1)])
    for _ in range(int(paces.HALF_LIFE)):
        paces.record(p, 1.0, refused=False)
    assert p[paces.bucket(0.1)][1] == pytest.approx(0.5)
    for _ in range(int(paces.HALF_LIFE) * 8):
        paces.record(p, 1.0, refused=False)
    assert list(p) == [paces.bucket(1.0)]  # faded out: forgotten


@pytest.mark.parametrize(
    ("raw", "kept", "words"),
    [
        ("junk", {}, "not a record"),
        ({"x": [1, 2]}, {}, "unusable"),
        ({"-8": [1]}, {}, "unusable"),
        ({"-8": "ab"}, {}, "unusable"),
        ({"-8": [math.nan, 1]}, {}, "unusable"),
        ({"-8": [1, math.inf]}, {}, "unusable"),
        ({"-8": [-1, 2]}, {}, "negative"),
        ({"999": [1, 2]}, {}, "unusable"),
        ({"-8": [1e300, 2], "-4": [3, 0]}, {-8: [paces.COUNT_CAP, 2.0], -4: [3.0, 0.0]}, "capped"),
        ({str(k): [1, 0] for k in range(-40, 69)} | {"x" * 5: [1, 0]}, None, "unusable"),
    ],
)
def test_hostile_answers_by_pace_are_dropped_or_capped_with_one_warning(
    raw: object, kept: dict | None, words: str
) -> None:
    clk = FakeClock(1000.0)
    pc = Pacing(Profiles.parse({"default": {"min_delay": 0.2}}), clk)
    assert pc.restore({"h": {"delay": 0.3, "at": 999.0, "paces": raw}}) == 1
    assert len(pc.rejected) == 1 and words in pc.rejected[0][1], pc.rejected
    s = pc.site("h")
    if kept is not None:
        assert s.paces == kept
    assert s.delay == 0.3  # the rest of the record is used
    assert all(paces.LOWEST <= b <= paces.HIGHEST and all(math.isfinite(c) for c in v) for b, v in s.paces.items())
    pc.on_success("h", 0.01)  # and it is usable
    pc.on_rate_limited("h", 0.01, None)


def test_a_flood_of_buckets_read_back_is_cut() -> None:
    raw = {f"{k}.0": [1, 0] for k in range(10_000)}
    v, why = paces.check_paces(raw)
    assert len(v) <= paces.MAX_BUCKETS and why is not None


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_demos_path_tied_refusals_do_not_ratchet_the_delay_over_reruns(seed: int) -> None:
    """The demo rerun on one state dir got slower every run (45.7 s, 64.6 s, 95.3 s): each
    run's refusals (tied to paths, at any pace) confirmed a slower pace, saved and restored
    as the start of the next run. Without the answers by pace this plan climbs (seed 0: 0.41 s,
    0.76 s, 1.09 s after runs 1-3; every seed here fails then)."""
    clk = FakeClock(1000.0)
    rng = random.Random(seed)
    learned: dict = {}
    took, delays, refused_slower = [], [], []
    for _ in range(3):
        pc = Pacing(Profiles.parse({"default": {"min_delay": 0.2, "start_delay": 0.2}}), clk)
        pc.restore(learned)
        took.append(demo_plan_run(pc, clk, rng=rng, conc=8, latency=0.03))
        s = pc.site("h")
        delays.append(s.delay)
        refused_slower.append(sum(r for b, (_, r) in s.paces.items() if b > paces.bucket(0.25)))
        learned = pc.export()
        clk.advance(5.0)
    assert all(refused_slower), refused_slower  # refusals came at slow paces (the path ran)
    assert delays[2] <= delays[0] * 1.3, delays
    assert took[2] <= took[0] * 1.3, took


def test_a_restart_keeps_a_real_limit_backed_by_the_answers_by_pace() -> None:
    """A worker restarted against a site refusing beyond 5/s starts at the learned delay (no
    burst into the limit): its answers by pace back the learned spacing."""
    clk = FakeClock(1000.0)
    pc = Pacing(Profiles.parse({"default": {"min_delay": 0.05, "start_delay": 0.05}}), clk)
    tokens, last = 5.0, clk.now
    for _ in range(600):
        while (hold := pc.hold_until("h")) != 0.0:
            clk.now = hold
        pc.handed_out("h")
        tokens, last = min(5.0, tokens + (clk.now - last) * 5.0), clk.now
        clk.advance(0.01)
        pc.ended("h")
        if tokens >= 1:
            tokens -= 1
            pc.on_success("h", 0.01)
        else:
            pc.on_rate_limited("h", 0.01, None)
    learned = pc.export()
    assert learned["h"]["settled"] >= 0.15, learned
    again = Pacing(Profiles.parse({"default": {"min_delay": 0.05, "start_delay": 0.05}}), clk)
    again.restore(learned)
    s = again.site("h")
    assert s.delay == pytest.approx(learned["h"]["delay"]) and s.settled == pytest.approx(learned["h"]["settled"])
