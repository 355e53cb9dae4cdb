"""The retry policy and Retry-After parsing: plain Python, fake clock, seeded randomness."""

from __future__ import annotations

import logging
import statistics
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from scrapy.settings import Settings

from scrapy_scale import config
from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.outcomes.late import NO_LATE, LatePolicy
from scrapy_scale.outcomes.model import FailureClass as C
from scrapy_scale.outcomes.policy import (
    BROKEN_PAGE,
    DEFAULT_POLICIES,
    ClassPolicy,
    RetryPolicy,
    build_policies,
    parse_policy_overrides,
)
from scrapy_scale.outcomes.retry_after import parse_retry_after

pytestmark = pytest.mark.pure

NOW = 1_700_000_000.0


def policy(seed: int = 1, **kw) -> tuple[RetryPolicy, FakeClock, list]:
    clock = FakeClock(NOW)
    warned: list = []
    p = RetryPolicy(
        kw.pop("policies", None),
        clock=clock,
        rng=Randomness(seed),
        warn=lambda kind, msg, *a: warned.append((kind, msg % a)),
        **kw,
    )
    return p, clock, warned


# ---- Retry-After ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,expected",
    [
        ("3", 3.0),
        (b"120", 120.0),
        (" 7 ", 7.0),
        ("2.5", 2.5),
        ("-5", -5.0),
        ("0", 0.0),
    ],
)
def test_retry_after_delta_seconds(value, expected):
    assert parse_retry_after(value, NOW) == expected


def test_retry_after_http_date_all_three_forms():
    when = datetime.fromtimestamp(NOW + 30, tz=UTC)
    imf = format_datetime(when, usegmt=True)  # Sun, 06 Nov 1994 08:49:37 GMT
    rfc850 = when.strftime("%A, %d-%b-%y %H:%M:%S GMT")
    asctime = when.strftime("%a %b %d %H:%M:%S %Y")
    for text in (imf, rfc850, asctime):
        assert parse_retry_after(text, NOW) == pytest.approx(30.0), text


def test_retry_after_date_in_the_past_is_negative():
    when = datetime.fromtimestamp(NOW - 60, tz=UTC)
    assert parse_retry_after(format_datetime(when, usegmt=True), NOW) == pytest.approx(-60.0)


@pytest.mark.parametrize("value", ["", "soon", "3 seconds", "Tue, 99 Foo 2024 99:99:99 GMT", None, "1e9999x"])
def test_unparseable_retry_after_is_absent_with_debug_log(value, caplog):
    caplog.set_level(logging.DEBUG, logger="scrapy_scale.outcomes.retry_after")
    assert parse_retry_after(value, NOW) is None
    if value:
        assert any("ignored" in r.getMessage() for r in caplog.records)


# ---- backoff ----------------------------------------------------------------------


def test_full_jitter_windows_grow_exponentially_to_the_cap():
    p, _, _ = policy(policies={C.TRANSIENT: ClassPolicy(retries=10, base=1.0, cap=8.0)})
    assert [p.window(C.TRANSIENT, n) for n in range(1, 7)] == [1, 2, 4, 8, 8, 8]
    assert p.window(C.TRANSIENT, 500) == 8  # no overflow for absurd attempt numbers


def test_full_jitter_spreads_over_the_whole_window():
    p, _, _ = policy(seed=7, policies={C.RATE_LIMITED: ClassPolicy(retries=5, base=2.0, cap=60.0)})
    delays = [p.backoff(C.RATE_LIMITED, 1) for _ in range(2000)]
    assert min(delays) >= 0 and max(delays) <= 2.0
    assert min(delays) < 0.05 and max(delays) > 1.95  # full jitter: from 0, not from base/2
    assert statistics.pstdev(delays) == pytest.approx(2.0 / 12**0.5, rel=0.1)  # uniform(0, 2)


def test_same_seed_same_delays_other_seed_other_delays():
    a = [policy(seed=3)[0].backoff(C.TRANSIENT, 2) for _ in range(1)]
    b = [policy(seed=3)[0].backoff(C.TRANSIENT, 2) for _ in range(1)]
    c = [policy(seed=4)[0].backoff(C.TRANSIENT, 2) for _ in range(1)]
    assert a == b != c


def test_zero_base_means_at_once():
    p, _, _ = policy()
    d = p.decide(C.EGRESS_FAILED, 1)
    assert d.retry and d.delay == 0 and d.not_before == NOW


# ---- decisions --------------------------------------------------------------------


def test_budget_per_class_then_give_up():
    p, clock, _ = policy()
    budget = DEFAULT_POLICIES[C.TRANSIENT].retries
    for attempt in range(1, budget + 1):
        d = p.decide(C.TRANSIENT, attempt)
        assert d.retry and 0 <= d.delay <= p.window(C.TRANSIENT, attempt)
        assert d.not_before == pytest.approx(clock() + d.delay)
    d = p.decide(C.TRANSIENT, budget + 1)
    assert not d.retry and d.gave_up and d.why == "budget"


@pytest.mark.parametrize("cls", [C.OK, C.NOT_FOUND, C.PARSE_FAILED, C.FATAL])
def test_never_retried_classes(cls):
    p, _, _ = policy()
    d = p.decide(cls, 1, max_retries=5)
    assert not d.retry and not d.gave_up


def test_max_retry_times_meta_replaces_the_budget():
    p, _, _ = policy()
    assert p.decide(C.TRANSIENT, 5, max_retries=5).retry
    assert not p.decide(C.TRANSIENT, 6, max_retries=5).retry
    assert not p.decide(C.RATE_LIMITED, 1, max_retries=0).retry


def test_dont_retry_and_disabled():
    p, _, _ = policy()
    assert p.decide(C.TRANSIENT, 1, dont_retry=True).why == "dont_retry"
    assert p.decide(C.TRANSIENT, 1, enabled=False).why == "disabled"


def test_retry_after_is_a_floor_plus_jitter():
    p, clock, warned = policy(seed=2)
    delays = [p.decide(C.RATE_LIMITED, 1, retry_after=3.0).delay for _ in range(500)]
    window = p.window(C.RATE_LIMITED, 1)
    assert min(delays) >= 3.0 and max(delays) <= 3.0 + window
    assert statistics.pstdev(delays) > window / 5  # not all at exactly 3 s
    assert not warned


def test_negative_retry_after_is_clamped_with_a_warning():
    p, _, warned = policy()
    d = p.decide(C.RATE_LIMITED, 1, retry_after=-30.0, where="shop1")
    assert d.retry and d.delay <= p.window(C.RATE_LIMITED, 1)
    assert warned and warned[0][0] == "retry_after_negative" and "shop1" in warned[0][1]


def test_huge_retry_after_is_capped_by_the_setting_with_a_warning():
    p, _, warned = policy(retry_after_max=60.0)
    d = p.decide(C.RATE_LIMITED, 1, retry_after=86400.0)
    assert 60.0 <= d.delay <= 60.0 + p.window(C.RATE_LIMITED, 1)
    assert warned[0][0] == "retry_after_huge"


# ---- settings -------------------------------------------------------------------


def test_policy_overrides_and_scrapy_retry_times():
    pol = build_policies(parse_policy_overrides({"rate_limited": {"retries": 1, "cap": 5}}), retry_times=4)
    # a project that sets its own window gets it, whatever the site's noise (calm 0)
    assert pol[C.RATE_LIMITED] == ClassPolicy(retries=1, base=2.0, cap=5.0, calm=0.0)
    assert pol[C.TRANSIENT].retries == 4  # RETRY_TIMES set by the project
    assert pol[C.FATAL].retries == 0 and pol[C.NOT_FOUND].retries == 0


@pytest.mark.parametrize(
    "value,problem",
    [
        ({"transiant": {"retries": 1}}, "unknown failure class 'transiant'"),
        ({"transient": {"retry": 1}}, "unknown key"),
        ({"transient": {"retries": -1}}, "retries"),
        ({"transient": {"base": "x"}}, "base"),
        ({"not_found": {"retries": 2}}, "never retried"),
        ({"transient": 3}, "expected a dict"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_retry_policy_fails_with_the_setting_name(value, problem):
    with pytest.raises(config.ScaleSettingError, match=r"^SCALE_RETRY_POLICY: .*" + problem.replace("(", r"\(")):
        config.get(Settings({"SCALE_RETRY_POLICY": value}), "SCALE_RETRY_POLICY")


def test_policy_json_from_command_line():
    v = config.get(Settings({"SCALE_RETRY_POLICY": '{"blocked": {"retries": 0}}'}), "SCALE_RETRY_POLICY")
    assert v == {C.BLOCKED: {"retries": 0}}


def test_a_budget_of_zero_is_a_give_up():
    """RETRY_TIMES = 0 (or retries 0 for a class): Scrapy's get_retry_request logs and counts
    the give-up; so does the policy (it returned gave_up=False before, so nothing was
    logged or counted, and RETRY_GIVE_UP_LOG_LEVEL had no effect)."""
    p = RetryPolicy(build_policies(retry_times=0))
    d = p.decide(C.TRANSIENT, 1)
    assert not d.retry and d.gave_up and d.why == "budget"


ALL_LATE = LatePolicy(classes=frozenset({C.TRANSIENT, C.RATE_LIMITED, C.BLOCKED, C.EGRESS_FAILED}))


def test_a_page_that_fails_alone_gives_up_after_its_quick_retries_a_site_that_fails_keeps_late_ones():
    p, _, _ = policy(late=ALL_LATE)
    # within the quick budget a broken page is still retried (it may be a stray 503)
    assert p.decide(C.TRANSIENT, 1, alone=True).retry and p.decide(C.TRANSIENT, 2, alone=True).retry
    # quick budget (2) spent, its site answers well: one late retry (three tries may all
    # have met noise), then no more: 4 requests in all
    once = p.decide(C.TRANSIENT, 3, alone=True)
    assert once.retry and once.late
    broken = p.decide(C.TRANSIENT, 4, late_done=1, first_failed=NOW, alone=True)
    assert not broken.retry and broken.gave_up and broken.why == BROKEN_PAGE
    # an entry page after a late retry (its site had no other answers yet, then answered
    # well): no more either
    assert p.decide(C.TRANSIENT, 4, late_done=1, first_failed=NOW).late  # not alone: late retries go on
    assert p.decide(C.TRANSIENT, 5, late_done=2, first_failed=NOW, alone=True).why == BROKEN_PAGE
    outage = p.decide(C.TRANSIENT, 3)  # its site fails as a whole, or has no other answers yet
    assert outage.retry and outage.late


def test_a_refusal_a_block_or_an_egress_failure_is_not_a_broken_page():
    p, _, _ = policy(late=ALL_LATE)
    for cls in (C.RATE_LIMITED, C.BLOCKED, C.EGRESS_FAILED):
        quick = p.policies[cls].retries
        d = p.decide(cls, quick + 2, late_done=1, first_failed=NOW, alone=True)
        assert d.retry and d.late, cls  # pacing's or the route's business: late retries kept


def test_without_late_retries_a_broken_page_gives_up_on_its_budget_as_before():
    p, _, _ = policy(late=NO_LATE)
    d = p.decide(C.TRANSIENT, 3, alone=True)
    assert not d.retry and d.why == "budget"  # late retries off: given up on the budget
    own, _, _ = policy(late=ALL_LATE)  # a request with its own budget gets no late retry anyway
    assert own.decide(C.TRANSIENT, 2, max_retries=1, alone=True).why == "budget"
