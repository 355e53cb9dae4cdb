"""A request handed out that goes back to the scheduler without an outcome of its attempt
(Scrapy's redirect, the egress pool's wait for an egress, the not-before guard) is not in
flight any more: a site with a ``concurrency`` profile kept it counted, was held at its
concurrency for good, and the request (the only one that could end it) never went out."""

from __future__ import annotations

import math

import pytest
from scrapy import Request, signals
from scrapy.utils.test import get_crawler

from scrapy_scale import meta
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.throttle.pacer import Throttle

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


def test_a_request_sent_back_to_the_scheduler_frees_its_sites_concurrency(tmp_path):
    t = _throttle(tmp_path)
    first = Request("http://shop.test/a", meta={meta.FINGERPRINT: FP})
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
    parent = Request("http://shop.test/a", meta={meta.FINGERPRINT: FP})
    other = Request("http://shop.test/c", meta={meta.FINGERPRINT: "c" * 40})
    t.handed_out(parent, "shop.test", FP)
    t.handed_out(other, "shop.test", "c" * 40)  # (handed out past the hold: two in flight)
    assert t.pacing.site("shop.test").inflight == 2
    # the callback yields two requests that copied response.meta (the parent's fingerprint),
    # then the parent's final outcome comes
    _schedule(t, Request("http://shop.test/x", meta=dict(parent.meta)))
    _schedule(t, Request("http://shop.test/y", meta=dict(parent.meta)))
    o = Outcome(fingerprint=FP, url=parent.url, domain="shop.test", cls=FailureClass.OK)
    t._on_outcome(o, parent)
    assert t.pacing.site("shop.test").inflight == 1  # `other` is still in flight


def test_a_route_held_by_a_request_is_let_go_when_it_goes_back_or_ends(tmp_path):
    """With routes paced (SCALE_EGRESSES), a request handed out holds one of its site's free
    routes (meta.ROUTE_HOLD) until the egress pool sees it; going back to the scheduler or
    ending before the pool saw it lets it go. A request with the project's own proxy is
    not the pool's: it holds none (it held one for the whole grace, and a site whose
    requests all had their own proxy was paced at a request per free route per second)."""
    t = _throttle(tmp_path)
    learner = t.use_routes(lambda domain: iter(["e1:8080", "e2:8080"]))
    a = Request("http://other.test/a", meta={meta.FINGERPRINT: FP})
    t.handed_out(a, "other.test", FP)
    assert isinstance(a.meta.get(meta.ROUTE_HOLD), int) and learner._pending("other.test") == 1
    _schedule(t, a)  # the egress pool's wait, a redirect: back to the scheduler
    assert meta.ROUTE_HOLD not in a.meta and learner._pending("other.test") == 0
    b = Request("http://other.test/b", meta={meta.FINGERPRINT: "b" * 40})
    t.handed_out(b, "other.test", "b" * 40)
    assert learner._pending("other.test") == 1
    o = Outcome(fingerprint="b" * 40, url=b.url, domain="other.test", cls=FailureClass.FATAL)
    t._on_outcome(o, b)  # dropped before the egress pool saw it (an exception, a disallow)
    assert learner._pending("other.test") == 0
    own = Request("http://other.test/c", meta={"proxy": "http://127.0.0.1:3128"})
    t.handed_out(own, "other.test", None)
    assert meta.ROUTE_HOLD not in own.meta and learner._pending("other.test") == 0
