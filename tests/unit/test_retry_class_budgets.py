"""Each failure class's budget counts its own attempts (meta ``scale_class_failures``).

The real plan of the chaos benchmark lost a listing page and its 175-page subtree: two
random nginx 503s, a 403 through the Squid its site ``deny``s and a dead proxy, then
``Gave up retrying <GET .../list/2.html> (failed 4 times): blocked (HTTP 403)``: the
blocked class's budget had been spent by the attempts of every class in the chain. Plans
of answers, a fake clock, no network.
"""

from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.exceptions import DownloadTimeoutError

from scrapy_scale import meta_keys
from scrapy_scale import stats_keys as K
from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.model import FailureClass as C
from scrapy_scale.outcomes.plan import Attempt, RetryPlan, Step
from scrapy_scale.outcomes.policy import RetryPolicy
from scrapy_scale.outcomes.retry import RetryDecider
from tests.support.said import listening

pytestmark = pytest.mark.pure

NOW = 1_700_000_000.0
SITE = "c.test"
LISTING = f"http://{SITE}/list/2.html"
DENIED = "sq-deny"  # the Squid whose address the site denies


def decider() -> RetryDecider:
    return RetryDecider(RetryPolicy(clock=FakeClock(NOW), rng=Randomness(7)))


def answer(status: int, cls: C) -> Attempt:
    return Attempt(Verdict(cls, f"HTTP {status}"), status=status)


DEAD_PROXY = Attempt(Verdict(C.EGRESS_FAILED, "proxy connection refused"), exception=ConnectionRefusedError())


def through(request: Request, egress: str) -> Request:
    request.meta[meta_keys.EGRESS] = egress
    return request


def run(d: RetryDecider, request: Request, steps: list[tuple[str, Attempt]]) -> list[RetryPlan]:
    """The plans of ``request``'s chain, one attempt a step through the step's egress, until
    one is not retried."""
    plans = []
    for egress, attempt in steps:
        p = d.plan(through(request, egress), attempt)
        plans.append(p)
        if p.retry is None:
            break
        request = p.retry
    return plans


@pytest.mark.parametrize(
    "chain",
    [
        # the order of the benchmark's log line ("failed 4 times: blocked")
        [("tp1", answer(503, C.TRANSIENT)), ("tp2", answer(503, C.TRANSIENT)), ("tp-dead", DEAD_PROXY)],
        # the order the lead read it in: the 403 third, the dead proxy after it
        [("tp1", answer(503, C.TRANSIENT)), ("tp2", answer(503, C.TRANSIENT))],
    ],
)
def test_mixed_failure_classes_do_not_spend_each_others_budgets(chain):
    """Failed before the fix: the 403 was decided as the chain's 3rd or 4th attempt against
    the blocked budget of 2 retries, and the listing was given up."""
    d = decider()
    steps = [*chain, (DENIED, answer(403, C.BLOCKED))]
    if len(chain) == 2:
        steps.append(("tp-dead", DEAD_PROXY))
    steps += [("tp3", answer(403, C.BLOCKED)), ("sq1", answer(200, C.OK))]
    plans = run(d, Request(LISTING), steps)
    assert [p.step for p in plans] == [Step.RETRY_LATER] * 5 + [Step.DONE]
    last = plans[-2].retry
    assert last is not None
    assert last.meta[meta_keys.CLASS_FAILURES] == {"transient": 2, "blocked": 2, "egress_failed": 1}
    assert meta_keys.attempt_of(last.meta) == 6


def test_a_block_only_one_route_gets_is_the_egress_failure_retried_at_once():
    """The site denies one proxy: its latest answer there (another page's) was a 403 too
    while another route's was good. The block is retried at once through another egress,
    in the egress_failed budget; the page's blocked budget stays whole."""
    d = decider()
    d.plan(through(Request(f"http://{SITE}/list/1.html"), DENIED), answer(403, C.BLOCKED))
    d.plan(through(Request(f"http://{SITE}/item/1.html"), "tp1"), answer(200, C.OK))
    p = d.plan(through(Request(LISTING), DENIED), answer(403, C.BLOCKED))
    assert p.step is Step.RETRY_LATER and K.RETRY_AS_EGRESS_FAILURE in p.stats  # the path ran
    assert p.at == NOW and p.avoid == (DENIED,)
    assert p.outcome is not None and p.outcome.cls is C.BLOCKED  # the egress is blamed at the site
    assert p.retry is not None and p.retry.meta[meta_keys.CLASS_FAILURES] == {"egress_failed": 1}
    # then the page's own blocked budget, whole: 3 more blocks through routes that answer well
    plans = run(d, p.retry, [(e, answer(403, C.BLOCKED)) for e in ("tp1", "tp2", "sq1")])
    assert [x.step for x in plans] == [Step.RETRY_LATER, Step.RETRY_LATER, Step.GIVE_UP]
    assert plans[-1].why == "budget"


def test_a_block_is_the_pages_when_no_other_route_answers_well_or_the_route_had_answered():
    d = decider()
    d.plan(through(Request(f"http://{SITE}/list/1.html"), DENIED), answer(403, C.BLOCKED))
    # no other route's answer yet: the site may refuse every route
    p = d.plan(through(Request(LISTING), DENIED), answer(403, C.BLOCKED))
    assert K.RETRY_AS_EGRESS_FAILURE not in p.stats
    assert p.retry is not None and p.retry.meta[meta_keys.CLASS_FAILURES] == {"blocked": 1}
    # a route whose latest answer was good: a page it refuses is the page's block
    d.plan(through(Request(f"http://{SITE}/item/1.html"), "tp1"), answer(200, C.OK))
    p = d.plan(through(Request(f"http://{SITE}/item/2.html"), "tp1"), answer(403, C.BLOCKED))
    assert K.RETRY_AS_EGRESS_FAILURE not in p.stats


def test_a_page_every_route_refuses_is_given_up_within_four_attempts():
    """'A broken page is never retried ten times': a page refused through every egress, the
    denied one among them, costs at most its blocked budget and the one route's block."""
    d = decider()
    for k, e in enumerate(("tp1", "tp2", "tp3", "sq1")):
        d.plan(through(Request(f"http://{SITE}/item/{k}.html"), e), answer(200, C.OK))
    d.plan(through(Request(f"http://{SITE}/list/1.html"), DENIED), answer(403, C.BLOCKED))
    routes = (DENIED, "tp1", "tp2", "tp3", "sq1", "tp4")
    plans = run(d, Request(f"http://{SITE}/secret.html"), [(e, answer(403, C.BLOCKED)) for e in routes])
    assert len(plans) == 4 and plans[-1].step is Step.GIVE_UP and plans[-1].why == "budget"


def test_a_page_whose_answers_alternate_classes_is_given_up_in_under_ten_attempts():
    d = decider()
    steps = [(f"tp{k}", answer(503, C.TRANSIENT) if k % 2 else answer(403, C.BLOCKED)) for k in range(12)]
    plans = run(d, Request(LISTING), steps)
    assert plans[-1].step is Step.GIVE_UP and len(plans) < 10


def test_an_egress_timeout_through_an_unproven_egress_is_counted_as_the_egress():
    d = decider()
    req = Request(LISTING, meta={meta_keys.EGRESS_PROBE: True})
    cut = Attempt(Verdict(C.TRANSIENT, "timeout"), exception=DownloadTimeoutError("t"))
    p = d.plan(through(req, "bh"), cut)
    assert p.retry is not None and p.retry.meta[meta_keys.CLASS_FAILURES] == {"egress_failed": 1}


@pytest.mark.parametrize(
    ("stored", "counted"),
    [
        ({"transient": -3}, {"transient": 0}),  # negative: 0
        ({"transient": 10**9}, {"transient": 2}),  # huge: the chain's earlier attempts
        ({"transient": "2"}, {}),  # not an integer: skipped
        ({"transient": True}, {}),
        ({"transient": 1.0, "blocked": 1}, {"blocked": 1}),
        ({"nonsense": 1, "transient": 1}, {"transient": 1}),  # not a class
        ({("x",): 1}, {}),
        ([1, 2], None),  # not a dict: every earlier attempt counted, the stricter reading
        ("transient", None),
        ({f"k{i}": 1 for i in range(10_000)}, {}),  # a huge dict is not read through
    ],
)
def test_a_stored_count_that_cannot_be_true_is_clamped_with_one_warning(stored, counted, monkeypatch):
    """The meta comes back from the frontier's store: untrusted. Never a crash, never a
    budget for ever: each bad count clamped, one warning per process."""
    monkeypatch.setattr(meta_keys, "_warned_keys", set())
    d = decider()
    req = Request(LISTING, meta={meta_keys.ATTEMPT: 3, meta_keys.CLASS_FAILURES: stored})
    with listening("scrapy_scale.meta_keys") as said:
        p = d.plan(through(req, "tp1"), answer(503, C.TRANSIENT))
        d.plan(through(req, "tp2"), answer(503, C.TRANSIENT))
    assert len([x for x in said.lines if meta_keys.CLASS_FAILURES in x]) == 1
    assert len(said.lines[0]) < 400  # the stored value is not logged whole
    spent = 2 if counted is None else counted.get("transient", 0)
    assert p.retried is (spent < 2)  # transient: 2 retries of its own
    if p.retry is not None:
        assert p.retry.meta[meta_keys.CLASS_FAILURES] == {**(counted or {}), "transient": spent + 1}
    assert meta_keys.CLASS_FAILURES in meta_keys.CHAIN_KEYS  # a copied chain starts without it


def test_a_requests_own_max_retry_times_caps_the_whole_chain_as_in_scrapy():
    d = decider()
    steps = [("tp1", answer(503, C.TRANSIENT)), ("tp2", answer(403, C.BLOCKED)), ("tp3", answer(200, C.OK))]
    plans = run(d, Request(LISTING, meta={"max_retry_times": 1}), steps)
    assert [p.step for p in plans] == [Step.RETRY_LATER, Step.GIVE_UP]  # 1 retry in all
    plans = run(decider(), Request(LISTING), steps)
    assert [p.step for p in plans] == [Step.RETRY_LATER, Step.RETRY_LATER, Step.DONE]  # per class


def test_a_page_refused_with_an_overloaded_503_is_retried_through_another_route():
    """nginx's limit_req refuses with a 503 without Retry-After (classed transient, slow
    down): the real plan's host b refused a page 4 times within 3.3 s, 3 of them through the
    same proxy at its limit, and the page was given up as broken."""
    d = decider()
    overloaded = Attempt(Verdict(C.TRANSIENT, "HTTP 503", slow_down=True), status=503)
    plans = run(d, Request(LISTING), [("tp1", overloaded), ("tp2", overloaded), ("sq1", answer(200, C.OK))])
    assert [p.avoid for p in plans[:2]] == [("tp1",), ("tp1", "tp2")]
    assert plans[-1].step is Step.DONE
    plain = d.plan(through(Request(f"http://{SITE}/item/5.html"), "tp1"), answer(500, C.TRANSIENT))
    assert plain.avoid == ()  # a 500: the site's, whichever route
