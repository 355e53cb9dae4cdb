"""Late retries (SCALE_RETRY_LATE): after the quick retries, the request comes back minutes
later, a few times, before it is given up. Plain Python: fake clock, seeded randomness."""

from __future__ import annotations

import math

import pytest
from scrapy import Request
from scrapy.settings import Settings

from scrapy_scale import config, meta_keys
from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.late import NO_LATE, LatePolicy, parse_late
from scrapy_scale.outcomes.model import FailureClass as C
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.outcomes.policy import RetryPolicy
from scrapy_scale.outcomes.retry import RetryDecider, retry_request
from scrapy_scale.outcomes.settings import RETRY_LATE

pytestmark = pytest.mark.pure

NOW = 1_700_000_000.0
LATE = LatePolicy(retries=3, base=60, cap=600, deadline=3600)


def policy(late: LatePolicy = LATE, seed: int = 1) -> tuple[RetryPolicy, FakeClock, list]:
    clock = FakeClock(NOW)
    warned: list = []
    p = RetryPolicy(
        clock=clock, rng=Randomness(seed), warn=lambda kind, msg, *a: warned.append((kind, msg % a)), late=late
    )
    return p, clock, warned


def test_after_the_quick_budget_the_retries_come_back_minutes_later_doubling_with_jitter():
    p, _clock, _ = policy()
    quick = p.decide(C.TRANSIENT, 1)
    assert quick.retry and not quick.late and quick.delay <= 1.0
    assert p.decide(C.TRANSIENT, 2).retry  # transient: 2 quick retries
    delays = []
    for k in range(3):
        d = p.decide(C.TRANSIENT, 3 + k, late_done=k, first_failed=NOW)
        assert d.retry and d.late
        window = min(600, 60 * 2**k)
        assert window / 2 <= d.delay <= window  # never sooner than half the window: minutes
        assert d.not_before == NOW + d.delay
        delays.append(d.delay)
    assert delays[0] < delays[2]
    done = p.decide(C.TRANSIENT, 6, late_done=3, first_failed=NOW)
    assert not done.retry and done.gave_up and done.why == "budget"


def test_jitter_spreads_pages_that_failed_together():
    spread = set()
    for seed in range(50):
        p, _, _ = policy(seed=seed)
        spread.add(round(p.decide(C.TRANSIENT, 3, first_failed=NOW).delay))
    assert len(spread) > 15 and min(spread) >= 30 and max(spread) <= 60


def test_the_deadline_counts_from_the_chains_first_failure():
    p, clock, _ = policy(LatePolicy(retries=10, base=60, cap=600, deadline=900))
    clock.advance(800)
    d = p.decide(C.TRANSIENT, 3, late_done=2, first_failed=NOW)  # window 240 s: 800 + >=120 > 900
    assert not d.retry and d.gave_up and d.why == "deadline"
    assert p.decide(C.TRANSIENT, 3, late_done=0, first_failed=NOW + 700).retry  # its own deadline is later
    no_deadline, clock2, _ = policy(LatePolicy(retries=10, base=60, cap=600, deadline=0))
    clock2.advance(1e6)
    assert no_deadline.decide(C.TRANSIENT, 3, late_done=5, first_failed=NOW).retry


def test_retry_after_is_a_floor_of_a_late_retry():
    p, _, _ = policy()
    d = p.decide(C.RATE_LIMITED, 6, retry_after=500, first_failed=NOW)  # rate_limited is not late by default
    assert not d.retry and d.why == "budget"
    p2, _, _ = policy(LatePolicy(classes=frozenset({C.RATE_LIMITED})))
    d = p2.decide(C.RATE_LIMITED, 6, retry_after=500, first_failed=NOW)
    assert d.retry and d.late and d.delay == 500


@pytest.mark.parametrize("cls", [C.NOT_FOUND, C.PARSE_FAILED, C.FATAL, C.OK])
def test_classes_that_are_never_retried_stay_never_retried(cls):
    p, _, _ = policy(LatePolicy(classes=frozenset({C.TRANSIENT, C.EGRESS_FAILED, C.BLOCKED, C.RATE_LIMITED})))
    for attempt in (1, 5, 50):
        assert not p.decide(cls, attempt).retry


def test_what_the_user_said_stops_late_retries():
    p, _, _ = policy()
    assert not p.decide(C.TRANSIENT, 3, dont_retry=True).retry
    assert not p.decide(C.TRANSIENT, 3, enabled=False).retry
    assert not p.decide(C.TRANSIENT, 3, max_retries=2).retry  # the request's own budget
    assert not p.decide(C.TRANSIENT, 3, late_ok=False).retry  # Scrapy's own downloads
    off, _, _ = policy(NO_LATE)
    assert not off.decide(C.TRANSIENT, 3).retry
    assert off.decide(C.TRANSIENT, 3).why == "budget"


def test_the_setting_and_its_errors():
    assert parse_late({}) == LatePolicy()
    assert parse_late(0) == NO_LATE and parse_late(False) == NO_LATE
    # as the command line gives it (-s SCALE_RETRY_LATE=0): failed before ("expected a dict")
    for off in ("0", "false", "off", " None "):
        assert parse_late(off) == NO_LATE, off
    assert RETRY_LATE.get(Settings({"SCALE_RETRY_LATE": "0"})) == NO_LATE
    assert parse_late({"retries": 5, "classes": ["transient"]}) == LatePolicy(
        retries=5, classes=frozenset({C.TRANSIENT})
    )
    assert parse_late('{"base": 30, "cap": 60}') == LatePolicy(base=30.0, cap=60.0)
    assert config.get(Settings({}), "SCALE_RETRY_LATE") == LatePolicy()
    assert RETRY_LATE.get(Settings({"SCALE_RETRY_LATE": {"deadline": 0}})).deadline == 0
    for bad, msg in [
        ({"retries": -1}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"base": "soon"}, "base"),
        ({"cap": math.inf}, "cap"),
        ({"deadline": -5}, "deadline"),
        ({"classes": ["not_found"]}, "cannot be retried late"),
        ({"classes": ["fatal"]}, "cannot be retried late"),
        ({"classes": ["transiant"]}, "unknown failure class"),
        ({"retry": 3}, "unknown key"),
        ({"base": 0}, "need a wait"),
        ({"base": 100, "cap": 10}, "below base"),
        ({"cap": 1e308}, "at most"),  # with deadline 0, a retry held as good as forever
        ({"deadline": 1e12}, "at most"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_late(bad)
    with pytest.raises(ValueError, match="SCALE_RETRY_LATE"):
        RETRY_LATE.get(Settings({"SCALE_RETRY_LATE": {"retries": -1}}))


# ---- the chain's meta: written by retry_request, read back (untrusted) by the decider ----


def _outcome(attempt: int) -> Outcome:
    return Outcome("fp", "http://a.test/", "a.test", C.TRANSIENT, attempt=attempt)


def test_the_chain_carries_its_late_count_and_first_failure():
    r = Request("http://a.test/")
    r1 = retry_request(r, _outcome(1), not_before=NOW, failed_at=NOW)
    assert r1.meta[meta_keys.LATE] == 0 and r1.meta[meta_keys.FIRST_FAILED] == NOW
    r2 = retry_request(r1, _outcome(2), not_before=NOW + 99, late=True, failed_at=NOW + 50)
    assert r2.meta[meta_keys.LATE] == 1 and r2.meta[meta_keys.FIRST_FAILED] == NOW  # the first failure is kept
    assert meta_keys.LATE in meta_keys.CHAIN_KEYS and meta_keys.FIRST_FAILED in meta_keys.CHAIN_KEYS


@pytest.mark.parametrize(
    ("late", "first"),
    [("x", NOW), (-3, NOW), (True, NOW), (1.5, NOW), (0, math.nan), (0, math.inf), (0, NOW + 1e9), (0, "yesterday")],
)
def test_hostile_stored_chain_values_are_ignored_with_one_warning(late, first):
    """The meta comes back from the frontier's store: a bad count or time neither crashes
    nor stalls; the count is taken as 0, the time as this failure's."""
    p, clock, warned = policy()
    decider = RetryDecider(p)
    r = Request("http://a.test/", meta={meta_keys.ATTEMPT: 3, meta_keys.LATE: late, meta_keys.FIRST_FAILED: first})
    d = decider.decide(r, Verdict(C.TRANSIENT, "HTTP 503"))
    assert d.retry and d.late  # a late retry, its deadline from now
    assert len(warned) == 1 and warned[0][0] == "retry/late_bad_meta", warned
    new = retry_request(r, _outcome(3), not_before=d.not_before, late=True, failed_at=clock())
    assert new.meta[meta_keys.LATE] == 1  # a bad count was taken as 0
    assert isinstance(new.meta[meta_keys.FIRST_FAILED], float) and new.meta[meta_keys.FIRST_FAILED] <= clock() + 300


def test_retry_times_set_by_the_project_is_the_whole_budget_unless_late_retries_are_set_too():
    from scrapy.utils.test import get_crawler

    from scrapy_scale.outcomes.core import OutcomeCore

    def late_of(settings):
        return OutcomeCore(get_crawler(settings_dict=settings)).policy.late

    assert late_of({}) == LatePolicy()
    assert late_of({"RETRY_TIMES": 4}) == NO_LATE
    assert late_of({"RETRY_TIMES": 4, "SCALE_RETRY_LATE": {"retries": 1}}).retries == 1
    assert late_of({"SCALE_RETRY_LATE": 0}) == NO_LATE


SHOP = "shop1.example.test"


def site_with_good_pages(n: int = 30) -> RetryDecider:
    p, _, _ = policy(late=LatePolicy())
    d = RetryDecider(p)
    for k in range(n):
        d.observe_ok(Request(f"http://{SHOP}/item/{k}", meta={meta_keys.FINGERPRINT: f"fp{k}"}), C.OK)
    return d


def chain(d: RetryDecider, url: str, verdict: Verdict, answered: bool = True) -> list:
    """Attempts of one page until the decider stops retrying it (at most 12)."""
    decisions = []
    for attempt in range(1, 13):
        late = sum(x.late for x in decisions)
        m = {meta_keys.FINGERPRINT: url, meta_keys.ATTEMPT: attempt, meta_keys.LATE: late, meta_keys.FIRST_FAILED: NOW}
        decisions.append(d.decide(Request(url, meta=m), verdict, answered=answered))
        if not decisions[-1].retry:
            break
    return decisions


def test_a_503_page_of_a_site_that_answers_well_gives_up_after_its_quick_retries():
    d = site_with_good_pages()
    got = chain(d, f"http://{SHOP}/item/broken", Verdict(C.TRANSIENT, "http_503"))
    # 4 requests: 3 quick, one late (three tries may all have met noise), not 10
    assert len(got) == 4 and [x.late for x in got] == [False, False, True, False]
    assert got[-1].gave_up and got[-1].why == "broken_page"


def test_a_page_the_site_refused_as_overloaded_gets_one_late_retry_more_outside_the_calm_bound():
    """nginx's limit_req answers 503 without Retry-After: the real plan's host b refused a
    page through each of its 4 routes within 1.5-2.7 s while every route was at its limit,
    and the page was given up as broken after 4 requests."""
    d = site_with_good_pages()
    got = chain(d, f"http://{SHOP}/item/refused", Verdict(C.TRANSIENT, "HTTP 503", slow_down=True))
    # 5 requests: 3 quick, two late, still not 10
    assert [x.late for x in got] == [False, False, True, True, False] and got[-1].why == "broken_page"
    # the late windows are the late policy's (1.25-2.5 s, then 2.5-5 s), not the calm 0.5 s
    assert 1.25 <= got[2].delay <= 2.5 and 2.5 <= got[3].delay <= 5.0
    assert not got[2].calm


def test_an_entry_page_keeps_its_late_retries_then_gives_up_as_broken_once_its_site_answers():
    d = site_with_good_pages(0)
    entry = f"http://{SHOP}/"
    m = {meta_keys.FINGERPRINT: entry, meta_keys.ATTEMPT: 3, meta_keys.FIRST_FAILED: NOW}
    assert d.decide(Request(entry, meta=m), Verdict(C.TRANSIENT, "http_503")).late  # no other answers yet
    for k in range(30):  # then the rest of its site answers well and it still fails
        d.observe_ok(Request(f"http://{SHOP}/item/{k}"), C.OK)
    m = {**m, meta_keys.ATTEMPT: 4, meta_keys.LATE: 1}
    last = d.decide(Request(entry, meta=m), Verdict(C.TRANSIENT, "http_503"))
    assert not last.retry and last.why == "broken_page"  # 4 requests in all


def test_no_answer_or_a_site_that_fails_too_keeps_late_retries():
    d = site_with_good_pages()
    timeouts = chain(d, f"http://{SHOP}/item/slow", Verdict(C.TRANSIENT, "timeout"), answered=False)
    assert timeouts[2].late  # maybe the route's fault, not the page's
    for k in range(10):  # the site's other pages fail too: an outage
        r = Request(f"http://{SHOP}/item/{k}", meta={meta_keys.FINGERPRINT: f"fp{k}"})
        d.decide(r, Verdict(C.TRANSIENT, "http_503"))
    outage = chain(d, f"http://{SHOP}/item/x", Verdict(C.TRANSIENT, "http_503"))
    assert outage[2].late and len(outage) > 4
