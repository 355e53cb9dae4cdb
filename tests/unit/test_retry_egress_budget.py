"""Attempts that failed at the egress (a dead proxy) never reached the site: they count in
the egress_failed budget only. Two dead proxies in a row used to spend the transient
budget of a site's entry page, whose one reset through a third proxy then gave the page
up, and the whole site behind it was lost (seen in tests/crawl/test_egress_crawl.py)."""

from __future__ import annotations

import pytest
from scrapy import Request

from scrapy_scale import meta_keys
from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.model import FailureClass as C
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.outcomes.policy import RetryPolicy
from scrapy_scale.outcomes.retry import RetryDecider, retry_request

pytestmark = pytest.mark.pure

NOW = 1_700_000_000.0


def decider() -> RetryDecider:
    return RetryDecider(RetryPolicy(clock=FakeClock(NOW), rng=Randomness(3)))


def fail(request: Request, cls: C) -> tuple[Request | None, bool]:
    """One failed attempt of ``request`` with ``cls``: (the retry or None, given up)."""
    attempt = meta_keys.attempt_of(request.meta)
    d = decider().decide(request, Verdict(cls, cls.value))
    if not d.retry:
        return None, d.gave_up
    o = Outcome("fp", request.url, "a.test", cls, attempt=attempt)
    return retry_request(request, o, not_before=d.not_before), False


def test_two_dead_proxies_then_a_reset_leave_the_transient_budget_whole():
    r: Request | None = Request("http://a.test/")
    for cls in (C.EGRESS_FAILED, C.EGRESS_FAILED):
        r, _ = fail(r, cls)
        assert r is not None
    assert r.meta[meta_keys.CLASS_FAILURES] == {"egress_failed": 2} and meta_keys.attempt_of(r.meta) == 3
    # the transient class's 2 retries are its own: attempts 3, 4 and 5 may be transient
    for _ in range(2):
        r, _ = fail(r, C.TRANSIENT)
        assert r is not None
        assert r.meta[meta_keys.CLASS_FAILURES]["egress_failed"] == 2  # only egress failures count here
    gone, gave_up = fail(r, C.TRANSIENT)
    assert gone is None and gave_up  # the third transient failure spends it


def test_the_egress_failed_budget_counts_egress_failures_only():
    r: Request | None = Request("http://a.test/")
    r, _ = fail(r, C.TRANSIENT)
    for _ in range(3):  # egress_failed: 3 retries of its own after a transient failure
        r, _ = fail(r, C.EGRESS_FAILED)
        assert r is not None
    gone, gave_up = fail(r, C.EGRESS_FAILED)
    assert gone is None and gave_up


def test_a_block_does_not_spend_the_transient_budget():
    r: Request | None = Request("http://a.test/")
    r, _ = fail(r, C.BLOCKED)
    r, _ = fail(r, C.TRANSIENT)
    assert r is not None and r.meta[meta_keys.CLASS_FAILURES] == {"blocked": 1, "transient": 1}
    r, _ = fail(r, C.TRANSIENT)  # the transient class's second retry: its own budget
    assert r is not None
    gone, gave_up = fail(r, C.TRANSIENT)
    assert gone is None and gave_up


def test_scrapy_own_downloads_count_their_egress_failures_too():
    """robots.txt through dead proxies: its immediate retries (a plain copy, count_attempt)
    count egress failures too, or it was retried for ever and a closing spider never closed
    (tests/crawl/test_egress_crawl.py::test_exhausted_close_... hung on it)."""
    from scrapy_scale.outcomes.retry import count_attempt

    r = Request("http://a.test/robots.txt")
    tries = 0
    while tries < 10:
        tries += 1
        attempt = meta_keys.attempt_of(r.meta)
        d = decider().decide(r, Verdict(C.EGRESS_FAILED, "proxy unreachable"), late_ok=False)
        if not d.retry:
            break
        new = r.copy()
        count_attempt(new, r, Outcome("fp", r.url, "a.test", C.EGRESS_FAILED, attempt=attempt))
        r = new
    assert tries == 4 and d.gave_up  # the first attempt and egress_failed's 3 retries


def test_no_answer_through_an_unproven_egress_is_retried_as_an_egress_failure():
    """The chaos benchmark's host 4: its entry page, past its transient budget, got its late
    retry through an egress back from quarantine (a re-probe), which closed mid-answer; that
    cost a second late retry (37 s) before any of its 120 pages was reached."""
    r = Request("http://a.test/", meta={meta_keys.ATTEMPT: 3, meta_keys.EGRESS_PROBE: True, "proxy": "http://p:1"})
    v = Verdict(C.TRANSIENT, "ResponseDataLossError")
    d = decider().decide(r, v, answered=False)
    assert d.retry and d.not_before is not None and d.not_before <= NOW  # at once
    assert d.as_egress_failure  # what the middleware counts (scale/retry/as_egress_failure)
    o = Outcome("fp", r.url, "a.test", C.TRANSIENT, attempt=3, egress="p:1")
    again = retry_request(r, o, not_before=d.not_before)
    assert again.meta[meta_keys.CLASS_FAILURES] == {"egress_failed": 1}  # the egress budget, not the transient one
    # an answer through it (a 503) is the site's: the transient budget, spent here
    assert not decider().decide(r, v, answered=True).retry
    # through an egress that had answered before: the site's too
    proven = Request("http://a.test/", meta={meta_keys.ATTEMPT: 3, "proxy": "http://p:1"})
    assert not decider().decide(proven, v, answered=False).retry
    early = Request("http://a.test/", meta={meta_keys.ATTEMPT: 1, "proxy": "http://p:1"})
    assert not decider().decide(early, v, answered=False).as_egress_failure
    # only True counts (the key is one attempt's; what the frontier hands back is untrusted)
    odd = Request("http://a.test/", meta={meta_keys.ATTEMPT: 3, meta_keys.EGRESS_PROBE: "yes"})
    assert not decider().decide(odd, v, answered=False).retry
