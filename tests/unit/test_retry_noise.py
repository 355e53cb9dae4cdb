"""Noise is not pressure, for retries: a failure at a site that answers well otherwise is
retried soon (the class's ``calm`` window), a site whose failures rise backs off as
before (plain Python, fake clock, seeded randomness)."""

from __future__ import annotations

import random

import pytest
from scrapy import Request

from scrapy_scale import meta_keys
from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.late import LatePolicy
from scrapy_scale.outcomes.model import FailureClass as C
from scrapy_scale.outcomes.noise import MIN_ANSWERS, PAGES_KEPT, SiteNoise
from scrapy_scale.outcomes.policy import RetryPolicy, build_policies, parse_policy_overrides
from scrapy_scale.outcomes.retry import RetryDecider

pytestmark = pytest.mark.pure

NOW = 1_700_000_000.0
SITE = "shop1.example.test"


def answers(noise: SiteNoise, n: int, failure_share: float, seed: int = 1, cls: C = C.TRANSIENT) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        noise.note(SITE, cls if rng.random() < failure_share else C.OK)


def test_random_failures_among_good_answers_are_noise_a_rising_share_is_not() -> None:
    noise = SiteNoise()
    answers(noise, 200, 0.05)
    assert noise.calm(SITE)
    answers(noise, 60, 0.5, seed=2)  # an outage begins: half of the answers fail
    assert not noise.calm(SITE)
    answers(noise, 200, 0.0, seed=3)
    assert noise.calm(SITE)


def test_a_site_is_not_calm_before_it_answered_enough_nor_when_its_first_answers_fail() -> None:
    noise = SiteNoise()
    assert not noise.calm(SITE)
    answers(noise, MIN_ANSWERS - 1, 0.0)
    assert not noise.calm(SITE)
    noise.note(SITE, C.OK)
    assert noise.calm(SITE)
    burst = SiteNoise()  # an entry page that fails for a few seconds: every answer failed
    for _ in range(3 * MIN_ANSWERS):
        burst.note(SITE, C.TRANSIENT)
    assert not burst.calm(SITE)
    first_bad = SiteNoise()  # the first answers are a mean, not a share that starts at zero
    for k in range(MIN_ANSWERS):
        first_bad.note(SITE, C.RATE_LIMITED if k % 3 == 0 else C.OK)
    assert not first_bad.calm(SITE)


def test_egress_failures_say_nothing_about_the_site_and_memory_is_bounded() -> None:
    noise = SiteNoise(max_sites=3)
    answers(noise, 20, 0.0)
    for _ in range(50):
        noise.note(SITE, C.EGRESS_FAILED)
        noise.note(SITE, C.FATAL)
    assert noise.calm(SITE) and noise.share(SITE) == 0.0
    for k in range(3):
        noise.note(f"other{k}.test", C.OK)
    assert noise.share(SITE) is None  # the least recently answered was forgotten


def test_a_calm_site_bounds_the_quick_retry_window_not_retry_after() -> None:
    p = RetryPolicy(clock=FakeClock(NOW), rng=Randomness(5), late=LatePolicy())
    for attempt in (1, 2):
        calm = [p.decide(C.TRANSIENT, attempt, calm=True) for _ in range(200)]
        assert all(d.retry and d.calm and 0.0 <= d.delay <= 0.5 for d in calm)
        assert max(d.delay for d in calm) > 0.4  # the window is used, not a fixed delay
        usual = [p.decide(C.TRANSIENT, attempt) for _ in range(200)]
        assert not any(d.calm for d in usual)
        assert max(d.delay for d in usual) > 0.8 * p.window(C.TRANSIENT, attempt)
    limited = [p.decide(C.RATE_LIMITED, 1, retry_after=1.0, calm=True) for _ in range(200)]
    assert all(1.0 <= d.delay <= 1.5 and d.calm for d in limited)  # the Retry-After still holds
    late = p.decide(C.TRANSIENT, 3)  # the quick budget (2) is spent: a late retry
    assert late.late and not late.calm and late.delay >= p.late.window(1) / 2


def test_late_retries_at_a_calm_site_double_from_the_calm_bound() -> None:
    """A page whose quick retries met noise at a site that answers well otherwise came back
    5-10 s after the rest of its site had ended (the chaos benchmark's last page)."""
    p = RetryPolicy(clock=FakeClock(NOW), rng=Randomness(5), late=LatePolicy())
    for k in range(5):  # late retry k+1: window calm * 2^k, jittered between half and all
        ds = [p.decide(C.TRANSIENT, 3, late_done=k, calm=True) for _ in range(100)]
        w = 0.5 * 2**k
        assert all(d.retry and d.late and d.calm and w / 2 <= d.delay <= w for d in ds), k
        assert max(d.delay for d in ds) > 0.9 * w
    # never longer than the usual late window (a late base below the calm bound keeps its own)
    small = RetryPolicy(clock=FakeClock(NOW), rng=Randomness(5), late=LatePolicy(base=0.2, cap=0.2))
    ds = [small.decide(C.TRANSIENT, 3, late_done=3, calm=True) for _ in range(50)]
    assert all(d.late and not d.calm and d.delay <= 0.2 for d in ds)
    # the count, the deadline and a Retry-After are unchanged
    assert not p.decide(C.TRANSIENT, 3, late_done=LatePolicy().retries, calm=True).retry
    assert p.decide(C.TRANSIENT, 3, retry_after=30.0, calm=True).delay >= 30.0
    gone = p.decide(C.TRANSIENT, 3, late_done=1, calm=True, first_failed=NOW - 3600.0)
    assert not gone.retry and gone.why == "deadline"


def test_calm_0_or_a_projects_own_window_keeps_the_class_window() -> None:
    for override in ({"transient": {"calm": 0}}, {"transient": {"base": 2}}, {"transient": {"cap": 10}}):
        pol = build_policies(parse_policy_overrides(override))
        p = RetryPolicy(pol, clock=FakeClock(NOW), rng=Randomness(5))
        ds = [p.decide(C.TRANSIENT, 1, calm=True) for _ in range(200)]
        assert not any(d.calm for d in ds) and max(d.delay for d in ds) > 0.8, override
    pol = build_policies(parse_policy_overrides({"transient": {"base": 2, "calm": 0.2}}))
    assert pol[C.TRANSIENT].calm == 0.2  # unless it sets calm too
    with pytest.raises(ValueError, match=r"transient\.calm"):
        parse_policy_overrides({"transient": {"calm": -1}})


def calm_decider(paced: bool) -> RetryDecider:
    d = RetryDecider(RetryPolicy(clock=FakeClock(NOW), rng=Randomness(7)))
    d.paced = lambda: paced
    for k in range(30):
        d.observe_ok(Request(f"http://{SITE}/item/{k}"), C.OK)
    return d


def test_the_decider_retries_a_stray_503_soon_and_a_failing_site_as_before() -> None:
    d = calm_decider(paced=False)
    page = Request(f"http://{SITE}/list/5")
    got = d.decide(page, Verdict(C.TRANSIENT, "http_503"))
    assert got.retry and got.calm and got.delay <= 0.5
    entry = Request("http://shop4.example.test/")
    got = d.decide(entry, Verdict(C.TRANSIENT, "http_503"))  # a host that answered nothing well
    assert got.retry and not got.calm
    for _ in range(10):  # the decider counts the failures it decides: the host stops being calm
        d.decide(page, Verdict(C.TRANSIENT, "http_503"))
    assert not d.noise.calm(SITE)


def test_a_refusal_is_retried_sooner_only_when_a_pacer_spaces_the_requests() -> None:
    limited = Verdict(C.RATE_LIMITED, "http_429")
    unpaced = calm_decider(paced=False).decide(Request(f"http://{SITE}/item/99"), limited)
    assert unpaced.retry and not unpaced.calm  # nothing else would space it: the class's window
    paced = calm_decider(paced=True).decide(Request(f"http://{SITE}/item/99"), limited)
    assert paced.retry and paced.calm and paced.delay <= 0.5


def test_an_unproven_egresss_failure_is_not_counted_against_the_host() -> None:
    d = calm_decider(paced=False)
    before = d.noise.share(SITE)
    for k in range(20):  # no answer through an egress that had not proved itself
        r = Request(f"http://{SITE}/item/{k}", meta={meta_keys.EGRESS: "p1", meta_keys.EGRESS_PROBE: True})
        got = d.decide(r, Verdict(C.TRANSIENT, "timeout"), answered=False)
        assert got.as_egress_failure
    assert d.noise.share(SITE) == before and d.noise.calm(SITE)


def test_refusals_a_pacer_spaces_do_not_take_a_site_out_of_calm() -> None:
    limited = Verdict(C.RATE_LIMITED, "http_429")
    paced = calm_decider(paced=True)
    before = paced.noise.share(SITE)
    for k in range(20):  # each route refused while it learns its limit
        assert paced.decide(Request(f"http://{SITE}/item/{k}"), limited).calm
    assert paced.noise.share(SITE) == before and paced.noise.calm(SITE)
    got = paced.decide(Request(f"http://{SITE}/item/5"), Verdict(C.TRANSIENT, "http_503"))
    assert got.calm and got.delay <= 0.5  # a stray 503 among them is still noise
    unpaced = calm_decider(paced=False)
    for k in range(20):  # nothing spaces the requests: refusals are the site's failures
        unpaced.decide(Request(f"http://{SITE}/item/{k}"), limited)
    assert not unpaced.noise.calm(SITE)


def test_a_page_fails_alone_while_its_sites_other_pages_answer_well() -> None:
    noise = SiteNoise()
    broken = ("/item/7", "/item/8", "/item/9")
    for k in range(30):
        noise.note(SITE, C.OK, f"/item/{100 + k}")
        if k < 3:
            noise.note(SITE, C.TRANSIENT, broken[k])
    for _ in range(3):  # their quick retries, once the good pages are done: no other answer left
        for page in broken:
            noise.note(SITE, C.TRANSIENT, page)
    assert not noise.calm(SITE)  # the moving share of answers is full of their own retries
    assert all(noise.alone(SITE, page) for page in broken)  # by page: 2 of the 20 others failed


def test_an_entry_page_or_a_page_whose_site_fails_too_does_not_fail_alone() -> None:
    entry = SiteNoise()
    for _ in range(10):
        entry.note(SITE, C.TRANSIENT, "/")
    assert not entry.alone(SITE, "/")  # no other answers yet
    few = SiteNoise()
    for k in range(MIN_ANSWERS - 1):
        few.note(SITE, C.OK, f"/item/{k}")
    assert not few.alone(SITE, "/list/2")
    outage = SiteNoise()
    for k in range(PAGES_KEPT):
        outage.note(SITE, C.OK, f"/item/{k}")
    for k in range(PAGES_KEPT // 5):  # a fifth of the recently answered pages fail now
        outage.note(SITE, C.TRANSIENT, f"/item/{PAGES_KEPT + k}")
    assert not outage.alone(SITE, "/list/2")
    outage.note(SITE, C.OK, f"/item/{PAGES_KEPT}")  # one of them recovers: its latest answer counts
    assert outage.alone(SITE, "/list/2")


def test_egress_failures_do_not_count_for_pages_and_pages_kept_are_bounded() -> None:
    noise = SiteNoise(max_sites=2)
    for k in range(3 * PAGES_KEPT):
        noise.note(SITE, C.TRANSIENT if k < PAGES_KEPT else C.OK, f"/item/{k}")
        noise.note(SITE, C.EGRESS_FAILED, f"/other/{k}")
    assert noise.alone(SITE, "/list/2")  # the failed pages were forgotten, egress failures never kept
    assert len(noise.pages(SITE)) == PAGES_KEPT + 1
    noise.note("a.test", C.OK, "/")
    noise.note("b.test", C.OK, "/")
    assert SITE not in noise.page_sites  # the least recently answered site forgotten
