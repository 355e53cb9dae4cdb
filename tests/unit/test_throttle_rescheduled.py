"""A request handed out that goes back to the scheduler without an outcome of its attempt
(Scrapy's redirect, the egress pool's wait for an egress, the not-before guard) is not in
flight any more: a site with a ``concurrency`` profile kept it counted, was held at its
concurrency for good, and the request (the only one that could end it) never went out."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from scrapy import Request, signals
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale.egress.routes import RouteLimiter
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.throttle.routing import RouteLearner
from scrapy_scale.throttle.throttle import Throttle

pytestmark = pytest.mark.pure

FP = "a" * 40


def _throttle(tmp_path) -> Throttle:
    crawler = get_crawler(
        settings_dict={
            "SCALE_DOMAIN_PROFILES": {"shop.test": {"concurrency": 1, "start_delay": 0.0, "min_delay": 0.0}},
            "SCALE_THROTTLE_URL": f"sqlite:///{tmp_path}/throttle.db",
        }
    )
    return Throttle.from_crawler(crawler)


def _schedule(t: Throttle, request: Request) -> None:
    t.crawler.signals.send_catch_log(signals.request_scheduled, request=request, spider=None)


def _outcome(t: Throttle, outcome: Outcome, request: Request) -> None:
    t.crawler.signals.send_catch_log(scale_signals.outcome, outcome=outcome, request=request)


def test_a_request_sent_back_to_the_scheduler_frees_its_sites_concurrency(tmp_path):
    t = _throttle(tmp_path)
    first = Request("http://shop.test/a", meta={meta_keys.FINGERPRINT: FP})
    t.handed_out(first, "shop.test", FP)
    assert t.hold_until("shop.test") == math.inf  # at its concurrency: the path under test
    redirect = first.replace(url="http://shop.test/b")  # a redirect: no outcome of `first`
    redirect.meta["redirect_urls"] = [first.url]
    _schedule(t, redirect)
    assert t.pacing.site("shop.test").inflight == 0
    assert t.hold_until("shop.test") == 0.0  # the redirect may go out
    t.handed_out(redirect, "shop.test", FP)
    assert t.pacing.site("shop.test").inflight == 1


def test_an_attempt_is_ended_once_however_many_copies_go_to_the_scheduler(tmp_path):
    t = _throttle(tmp_path)
    parent = Request("http://shop.test/a", meta={meta_keys.FINGERPRINT: FP})
    other = Request("http://shop.test/c", meta={meta_keys.FINGERPRINT: "c" * 40})
    t.handed_out(parent, "shop.test", FP)
    t.handed_out(other, "shop.test", "c" * 40)  # (handed out past the hold: two in flight)
    assert t.pacing.site("shop.test").inflight == 2
    # the callback yields two requests that copied response.meta (the parent's fingerprint),
    # then the parent's final outcome comes
    _schedule(t, Request("http://shop.test/x", meta=dict(parent.meta)))
    _schedule(t, Request("http://shop.test/y", meta=dict(parent.meta)))
    o = Outcome(fingerprint=FP, url=parent.url, domain="shop.test", cls=FailureClass.OK)
    _outcome(t, o, parent)
    assert t.pacing.site("shop.test").inflight == 1  # `other` is still in flight


def _held(learner: RouteLearner, t: Throttle, domain: str) -> int:
    return learner.holds.pending(t.pacing.site(domain).key)


def test_a_route_held_by_a_request_is_let_go_when_it_goes_back_or_ends(tmp_path):
    """With routes paced (SCALE_EGRESSES), a request handed out holds one of its site's free
    routes until the egress pool sees it; going back to the scheduler or ending before the
    pool saw it lets it go. The hold is kept by the request object: nothing is written into
    its meta (a copy of it, a retry, holds nothing). A request with the project's own proxy
    is not the pool's: it holds none (it held one for the whole grace, and a site whose
    requests all had their own proxy was paced at a request per free route per second)."""
    t = _throttle(tmp_path)
    learner = t.use_routes(lambda domain: iter(["e1:8080", "e2:8080"]))
    a = Request("http://other.test/a", meta={meta_keys.FINGERPRINT: FP})
    t.handed_out(a, "other.test", FP)
    assert set(a.meta) == {meta_keys.FINGERPRINT} and _held(learner, t, "other.test") == 1
    t.handed_out(a, "other.test", FP)  # handed out again (the same object): held once
    assert _held(learner, t, "other.test") == 1
    _schedule(t, a.copy())  # a copy of it goes to the scheduler: the hold is a's own
    assert _held(learner, t, "other.test") == 1
    _schedule(t, a)  # the egress pool's wait, a redirect: back to the scheduler
    assert _held(learner, t, "other.test") == 0
    b = Request("http://other.test/b", meta={meta_keys.FINGERPRINT: "b" * 40})
    t.handed_out(b, "other.test", "b" * 40)
    assert _held(learner, t, "other.test") == 1
    o = Outcome(fingerprint="b" * 40, url=b.url, domain="other.test", cls=FailureClass.FATAL)
    _outcome(t, o, b)  # dropped before the egress pool saw it (an exception, a disallow)
    assert _held(learner, t, "other.test") == 0
    own = Request("http://other.test/c", meta={"proxy": "http://127.0.0.1:3128"})
    t.handed_out(own, "other.test", None)
    assert set(own.meta) == {"proxy"} and _held(learner, t, "other.test") == 0
    assert not learner.holds.counted_keys  # nothing kept per site


def test_a_route_is_held_while_the_downloader_has_the_request_and_until_the_pool_sees_it(tmp_path):
    """The throttle reads the downloader's requests (``Downloader.active``, through
    scrapy_scale.compat): a request a middleware answered (an HTTP cache hit) or dropped (a
    robots.txt disallow) lets its site's route go at once, where a grace of a second held
    it; one that reaches the egress pool lets it go there, and robots.txt's own download
    reaching the pool frees no other request's hold."""
    t = _throttle(tmp_path)
    active: set[Request] = set()
    t.crawler.engine = SimpleNamespace(downloader=SimpleNamespace(active=active))
    learner = t.use_routes(lambda domain: iter(["e1:8080"]))
    limiter = RouteLimiter()
    limiter.attach(learner)  # what the egress middleware does with the throttle's gate
    cached = Request("http://other.test/cached", meta={meta_keys.FINGERPRINT: FP})
    t.handed_out(cached, "other.test", FP)
    active.add(cached)  # the engine's Downloader.fetch, right after the hand-out
    assert _held(learner, t, "other.test") == 1
    active.discard(cached)  # a middleware answered it: it never reaches the pool
    assert _held(learner, t, "other.test") == 0  # at once: no clock moved
    assert learner.holds.left_downloader == 1 and learner.holds.expired == 0  # the path ran
    routed = Request("http://other.test/routed", meta={meta_keys.FINGERPRINT: "b" * 40})
    t.handed_out(routed, "other.test", "b" * 40)
    active.add(routed)
    limiter.release(Request("http://other.test/robots.txt"))  # robots.txt reached the pool
    assert _held(learner, t, "other.test") == 1
    limiter.release(routed)  # the egress middleware's process_request: it takes its route
    assert _held(learner, t, "other.test") == 0 and learner.holds.left_downloader == 1
    assert not learner.holds.counted_keys
