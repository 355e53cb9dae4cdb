"""The probe's stops: a Retry-After longer than it waits ends the site's probe (not
resumed after a capped rest), the time left bounds a step, a URL that does not parse is
a probe error (a usage error, not a traceback)."""

from __future__ import annotations

import math

import pytest

from scrapy_scale.clock import FakeClock
from scrapy_scale.probe.figures import Answer, StepFigures, refusal, summarise
from scrapy_scale.probe.policy import BAD, MAX_WAIT, Limits, Plan
from scrapy_scale.probe.run import ProbeError, group_by_host

pytestmark = pytest.mark.pure


def answered(c: int, retry_after: float = 0.0, limited: bool = False) -> StepFigures:
    answers = [Answer(0.1 * i, 0.1 * i + 0.05, "ok", 200, False) for i in range(60)]
    if limited:
        answers.append(Answer(6.0, 6.05, "rate_limited", 429, True))
    return summarise(
        answers,
        concurrency=c,
        phase="ramp",
        start=0.0,
        end=6.1,
        warmup=0.5,
        requests=len(answers),
        in_flight=c,
        busy=0.1,
        retry_after=retry_after,
    )


def ramped_to_8() -> Plan:
    """A plan whose steps 1, 2 and 4 were good; its next step is 8."""
    plan = Plan(Limits())
    for c in (1, 2, 4):
        nxt = plan.next_step()
        assert nxt is not None and nxt[0] == c
        plan.record(answered(c))
    nxt = plan.next_step()
    assert nxt is not None and nxt[0] == 8
    return plan


@pytest.mark.parametrize("seconds", [MAX_WAIT + 1, 3600.0, math.inf, math.nan])
def test_a_retry_after_longer_than_the_probe_waits_ends_it(seconds: float) -> None:
    plan = ramped_to_8()
    plan.record(answered(8, retry_after=seconds, limited=True))
    assert plan.next_step() is None  # not resumed after a 60 s rest
    assert "Retry-After" in plan.result.ended and "not resumed" in plan.result.ended


def test_a_short_retry_after_is_waited_out_and_the_probe_goes_on() -> None:
    plan = ramped_to_8()
    plan.record(answered(8, retry_after=MAX_WAIT, limited=True))
    assert plan.next_step() == (6, "bisect", 2 * plan.result.steps[2].goodput)  # bisection goes on
    assert not plan.result.ended


def test_time_left_counts_down_to_zero() -> None:
    clock = FakeClock()
    plan = Plan(Limits(max_time=10.0), clock=clock)
    assert plan.time_left() == 10.0
    clock.advance(4.0)
    assert plan.time_left() == 6.0
    clock.advance(100.0)
    assert plan.time_left() == 0.0 and plan.next_step() is None


@pytest.mark.parametrize(
    "url,message",
    [
        ("http://[::1", "not a URL: 'http://[::1' (Invalid IPv6 URL)"),
        ("http://a.test:99999/x", "not a URL: 'http://a.test:99999/x' (Port out of range 0-65535)"),
        ("http://a.test:port/x", "not a URL: 'http://a.test:port/x'"),
    ],
)
def test_a_url_that_does_not_parse_is_a_probe_error(url: str, message: str) -> None:
    with pytest.raises(ProbeError) as e:
        group_by_host([url])
    assert message in str(e.value)


def unanswered(c: int) -> StepFigures:
    """A step whose requests were all still in flight when it ended (a site that hangs)."""
    return summarise([], concurrency=c, phase="ramp", start=0.0, end=15.0, warmup=0.5, requests=c, in_flight=c)


def test_a_step_without_an_answer_is_not_good_and_the_ramp_does_not_climb_on_it() -> None:
    plan = Plan(Limits())
    assert plan.next_step() == (1, "ramp", None)
    plan.record(unanswered(1))
    assert plan.result.steps[0].verdict == BAD and "no answer" in plan.result.steps[0].reasons[0]
    assert plan.next_step() is None and plan.result.knee is None  # nothing to recommend
    # above a good step: the first bad one, the knee stays below it
    plan = ramped_to_8()
    plan.record(unanswered(8))
    nxt = plan.next_step()
    assert nxt is not None and nxt[0] == 6 and plan.result.knee is not None and plan.result.knee.concurrency == 4


def test_only_a_refusal_status_with_retry_after_is_a_refusal() -> None:
    """Some servers add Retry-After to every answer: a 200 that carries one is a good answer
    (the probe read it as a refusal: "the site refuses even 0.0889 request/s", exit 1, with
    every answer a 200)."""
    assert not refusal("ok", 200, True) and not refusal("not_found", 404, True)
    assert refusal("transient", 503, True) and refusal("ok", 429, False) and refusal("rate_limited", 503, True)
    assert not refusal("transient", 503, False)  # a 503 alone is a failure, not a refusal
    ok_with_ra = [Answer(0.1 * i, 0.1 * i + 0.05, "ok", 200, True) for i in range(60)]
    fig = summarise(ok_with_ra, concurrency=1, phase="ramp", start=0.0, end=6.1, warmup=0.5, requests=60, in_flight=1)
    assert not fig.rate_limited
    plan = Plan(Limits())
    assert plan.record(fig).verdict != BAD and plan.result.knee is fig
    refused = [*ok_with_ra, Answer(6.0, 6.05, "rate_limited", 503, True)]
    assert summarise(refused, concurrency=1, phase="ramp", start=0.0, end=6.1, warmup=0.5, requests=61).rate_limited
