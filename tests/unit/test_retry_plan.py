"""One plan per attempt: ``RetryDecider.plan`` takes the request and the attempt and returns
the whole answer (done, retry now, retry later at T avoiding egresses, give up at level L,
the stats to count). Plain Python with a fake clock and seeded randomness; each test is a
chain of attempts and the plans they get."""

from __future__ import annotations

import logging

import pytest
from scrapy import Request
from scrapy.exceptions import DownloadTimeoutError
from scrapy.http.request import NO_CALLBACK

from scrapy_scale import meta_keys
from scrapy_scale import stats_keys as K
from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.late import LatePolicy
from scrapy_scale.outcomes.model import FailureClass as C
from scrapy_scale.outcomes.plan import Attempt, RetryPlan, Step
from scrapy_scale.outcomes.policy import RetryPolicy
from scrapy_scale.outcomes.retry import RetryDecider

pytestmark = pytest.mark.pure

NOW = 1_700_000_000.0
URL = "http://shop.test/item/1"


def decider(**kw) -> tuple[RetryDecider, FakeClock]:
    clock = FakeClock(NOW)
    return RetryDecider(RetryPolicy(clock=clock, rng=Randomness(5), **kw)), clock


def answer(status: int, cls: C, **kw) -> Attempt:
    return Attempt(Verdict(cls, f"HTTP {status}"), status=status, **kw)


def chain(d: RetryDecider, request: Request, attempt: Attempt) -> list[RetryPlan]:
    """Plans of the same failure until the chain stops being retried (at most 12)."""
    plans = []
    for _ in range(12):
        p = d.plan(request, attempt)
        plans.append(p)
        if p.retry is None:
            break
        request = p.retry
    return plans


def test_a_good_answer_is_done_with_nothing_to_send_before_its_callback():
    d, _ = decider()
    assert not d.noise.calm("shop.test")
    for k in range(10):
        p = d.plan(Request(f"{URL}?k={k}"), answer(200, C.OK))
        assert (p.step, p.outcome, p.retry, p.stats) == (Step.DONE, None, None, ())
    # each good answer was counted for its site's noise: 10 of them make the site calm
    assert d.noise.calm("shop.test")


def test_a_blocked_page_is_retried_later_through_another_egress_then_given_up_at_the_class_level():
    d, _ = decider()
    req = Request(URL, meta={meta_keys.EGRESS: "p1", meta_keys.FINGERPRINT: "fp1"})
    plans = chain(d, req, answer(403, C.BLOCKED))
    steps = [p.step for p in plans]
    assert steps == [Step.RETRY_LATER, Step.RETRY_LATER, Step.GIVE_UP]  # blocked: 2 retries
    first = plans[0]
    assert first.at is not None and NOW <= first.at <= NOW + 0.5  # blocked: window 0.5 s
    assert first.avoid == ("p1",) and first.retry is not None
    assert first.retry.meta[meta_keys.AVOID_EGRESS] == ["p1"] and first.retry.meta[meta_keys.NOT_BEFORE] == first.at
    o = first.outcome
    assert o is not None and not o.final and o.retry_at == first.at and o.avoid_egress == ("p1",)
    last = plans[-1]
    assert last.why == "budget" and last.level == logging.WARNING
    assert last.outcome is not None and last.outcome.gave_up and last.outcome.attempt == 3


def test_dont_retry_gives_up_at_debug():
    d, _ = decider()
    p = d.plan(Request(URL, meta={"dont_retry": True}), answer(500, C.TRANSIENT))
    assert (p.step, p.why, p.level, p.retry) == (Step.GIVE_UP, "dont_retry", logging.DEBUG, None)


def test_a_class_never_retried_is_done_and_an_exception_gets_its_final_outcome_now():
    d, _ = decider()
    assert d.plan(Request(URL), answer(404, C.NOT_FOUND)).step is Step.DONE
    p = d.plan(Request(URL), Attempt(Verdict(C.FATAL, "bad"), exception=ValueError("x")))
    assert p.step is Step.DONE and p.outcome is not None and p.outcome.final and not p.outcome.gave_up
    assert p.outcome.exception == "builtins.ValueError"


def test_no_answer_through_an_unproven_egress_is_retried_as_its_failure_and_counted():
    d, _ = decider()
    req = Request(URL, meta={meta_keys.EGRESS: "p3", meta_keys.EGRESS_PROBE: True})
    p = d.plan(req, Attempt(Verdict(C.TRANSIENT, "timeout"), exception=DownloadTimeoutError("t"), latency=3.0))
    assert p.step is Step.RETRY_LATER and p.stats == (K.RETRY_AS_EGRESS_FAILURE,)
    assert p.avoid == ("p3",) and p.retry is not None and p.retry.meta[meta_keys.CLASS_FAILURES] == {"egress_failed": 1}
    assert p.outcome is not None and p.outcome.latency == 3.0


def test_a_late_retry_is_counted_as_late():
    d, _ = decider(late=LatePolicy(retries=1, base=60.0, cap=60.0, deadline=3600.0))
    plans = chain(d, Request(URL), answer(500, C.TRANSIENT))
    assert [p.step for p in plans] == [Step.RETRY_LATER] * 3 + [Step.GIVE_UP]
    assert [K.RETRY_LATE in p.stats for p in plans] == [False, False, True, False]
    assert plans[2].retry is not None and plans[2].retry.meta[meta_keys.LATE] == 1


def test_scrapy_own_download_is_retried_now_avoiding_the_silent_egress_and_given_up_without_a_line():
    d, clock = decider()
    req = Request(
        "http://shop.test/robots.txt",
        callback=NO_CALLBACK,
        meta={meta_keys.EGRESS: "p7", meta_keys.AVOID_EGRESS: ["p1"]},
    )
    timeout = Attempt(Verdict(C.TRANSIENT, "timeout"), exception=DownloadTimeoutError("t"), internal=True)
    plans = chain(d, req, timeout)
    assert [p.step for p in plans] == [Step.RETRY_NOW, Step.RETRY_NOW, Step.GIVE_UP]
    first = plans[0]
    assert first.at == clock() and first.avoid == ("p1", "p7") and first.retry is not None
    assert first.retry.meta[meta_keys.AVOID_EGRESS] == ["p1", "p7"] and meta_keys.NOT_BEFORE not in first.retry.meta
    assert first.outcome is not None and first.outcome.internal and not first.outcome.final
    last = plans[-1]
    assert last.level is None and last.why == "budget" and last.outcome is not None and last.outcome.internal
    ok = d.plan(req, Attempt(Verdict(C.OK, ""), status=200, internal=True))
    assert ok.step is Step.DONE and ok.outcome is not None and ok.outcome.internal and ok.outcome.final
