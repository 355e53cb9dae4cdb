"""The downloader middleware on a real (not started) Scrapy crawler: Scrapy's RETRY_* settings
and meta keys, the retry request's meta contract, giving up. No reactor, no network."""

from __future__ import annotations

import time

import pytest
from scrapy import Spider
from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest
from scrapy.http import HtmlResponse, Request
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale.config import ScaleSettingError
from scrapy_scale.outcomes import GaveUpError, OutcomeDownloaderMiddleware
from scrapy_scale.outcomes.model import FailureClass as C

pytestmark = pytest.mark.pure

URL = "http://shop1.example.test/item/1"


class _Spider(Spider):
    name = "compat"


def make(settings=None):
    s = {"DOWNLOADER_MIDDLEWARES": {"scrapy.downloadermiddlewares.retry.RetryMiddleware": None}}
    s.update(settings or {})
    crawler = get_crawler(_Spider, s)
    crawler.spider = _Spider.from_crawler(crawler)
    crawler.stats.open_spider()
    outcomes = []
    crawler.signals.connect(lambda outcome, **kw: outcomes.append(outcome), signal=scale_signals.outcome, weak=False)
    return OutcomeDownloaderMiddleware.from_crawler(crawler), outcomes, crawler.stats


def respond(mw, request, status, headers=None):
    mw.process_request(request)
    return mw.process_response(
        request, HtmlResponse(request.url, status=status, headers=headers or {}, request=request)
    )


def test_retry_request_carries_the_contract_meta_keys():
    mw, outcomes, stats = make()
    req = Request(URL, priority=5, meta={"proxy": "http://user:pw@10.1.2.3:3128"})
    before = time.time()
    new = respond(mw, req, 403)
    assert isinstance(new, Request) and new is not req
    m = new.meta
    assert m[meta_keys.ATTEMPT] == 2 and m["retry_times"] == 1
    assert m[meta_keys.NOT_BEFORE] >= before
    assert m[meta_keys.AVOID_EGRESS] == ["10.1.2.3:3128"]  # blocked: try another egress; no credentials
    assert m[meta_keys.LAST_FAILURE] == ["blocked", "HTTP 403"]
    assert m[meta_keys.FINGERPRINT] == req.meta[meta_keys.FINGERPRINT]
    assert new.dont_filter and new.priority == 4  # RETRY_PRIORITY_ADJUST = -1
    (o,) = outcomes
    assert (o.cls, o.final, o.attempt, o.egress, o.avoid_egress) == (
        C.BLOCKED,
        False,
        1,
        "10.1.2.3:3128",
        ("10.1.2.3:3128",),
    )
    assert o.retry_at == m[meta_keys.NOT_BEFORE]
    assert stats.get_value("scale/retry/blocked") == 1


def test_transient_retry_does_not_add_an_egress_to_avoid():
    mw, _, _ = make()
    new = respond(mw, Request(URL, meta={"scale_egress": "p7", meta_keys.AVOID_EGRESS: ["p1"]}), 500)
    assert new.meta[meta_keys.AVOID_EGRESS] == ["p1"]


def test_retry_enabled_false_classifies_but_never_retries():
    mw, outcomes, stats = make({"RETRY_ENABLED": False})
    resp = respond(mw, Request(URL), 503)
    assert isinstance(resp, HtmlResponse)
    # without the spider middleware the downloader middleware sends the final outcome itself
    assert [(o.cls, o.final) for o in outcomes] == [(C.TRANSIENT, True)]
    assert stats.get_value("scale/gave_up/transient") == 1


def test_retry_times_set_by_the_project_is_the_budget():
    mw, _, _ = make({"RETRY_TIMES": 4})
    req = Request(URL)
    for attempt in range(1, 6):
        out = respond(mw, req, 500)
        if attempt <= 4:
            assert isinstance(out, Request) and out.meta[meta_keys.ATTEMPT] == attempt + 1
            req = out
        else:
            assert isinstance(out, HtmlResponse)


def test_retry_http_codes_set_by_the_project():
    mw, _, _ = make({"RETRY_HTTP_CODES": [500, 400]})
    assert isinstance(respond(mw, Request(URL), 500), Request)
    assert isinstance(respond(mw, Request(URL), 400), Request)  # listed: fatal becomes transient
    assert isinstance(respond(mw, Request(URL), 503), HtmlResponse)  # not listed: not retried
    assert isinstance(respond(mw, Request(URL), 429), HtmlResponse)
    assert isinstance(respond(mw, Request(URL), 403), Request)  # blocked: another egress, not gated


class _FlakyClientError(Exception):
    """An exception of the project's own download handler, listed in RETRY_EXCEPTIONS."""


def test_retry_exceptions_set_by_the_project_are_transient():
    mw, outcomes, _ = make(
        {"RETRY_EXCEPTIONS": ["tests.unit.test_outcomes_compat._FlakyClientError", ZeroDivisionError]}
    )
    for exc in (_FlakyClientError("boom"), ZeroDivisionError()):  # unknown to the rules table: fatal without it
        retry = mw.process_exception(Request(URL), exc)
        assert isinstance(retry, Request), exc
        assert (outcomes[-1].cls, outcomes[-1].final, outcomes[-1].reason) == (C.TRANSIENT, False, type(exc).__name__)
    # what the defaults classify already keeps its class; a decision like robots.txt's is never retried
    assert isinstance(mw.process_exception(Request(URL), DownloadTimeoutError("x")), Request)
    assert mw.process_exception(Request(URL), IgnoreRequest("robots.txt")) is None
    assert outcomes[-1].cls is C.FATAL
    # the project's own rules still come first
    mw, outcomes, _ = make(
        {
            "RETRY_EXCEPTIONS": [ZeroDivisionError],
            "SCALE_FAILURE_RULES": [{"class": "fatal", "exception": "builtins.ZeroDivisionError", "reason": "a bug"}],
        }
    )
    with pytest.raises(GaveUpError):  # an expected fatal: no retry, no traceback
        mw.process_exception(Request(URL), ZeroDivisionError())
    assert (outcomes[-1].cls, outcomes[-1].reason) == (C.FATAL, "a bug")


def test_retry_exceptions_default_and_bad_values():
    from scrapy.settings import default_settings

    assert default_settings.RETRY_EXCEPTIONS  # Scrapy's own list: not read, the rules table stays
    mw, outcomes, _ = make()
    assert mw.process_exception(Request(URL), _FlakyClientError()) is None
    assert outcomes[-1].cls is C.FATAL
    with pytest.raises(ScaleSettingError, match="^RETRY_EXCEPTIONS: cannot import 'no_such.Error'"):
        make({"RETRY_EXCEPTIONS": ["no_such.Error"]})
    with pytest.raises(ScaleSettingError, match="^RETRY_EXCEPTIONS: 'builtins.len' is not an exception class"):
        make({"RETRY_EXCEPTIONS": ["builtins.len"]})


def test_meta_keys_dont_retry_max_retry_times_priority_adjust():
    mw, _, _ = make({"RETRY_PRIORITY_ADJUST": -3})
    assert isinstance(respond(mw, Request(URL, meta={"dont_retry": True}), 500), HtmlResponse)
    assert isinstance(respond(mw, Request(URL, meta={"max_retry_times": 0}), 500), HtmlResponse)
    assert respond(mw, Request(URL), 500).priority == -3
    assert respond(mw, Request(URL, meta={"priority_adjust": 2}), 500).priority == 2
    assert isinstance(respond(mw, Request(URL, meta={"max_retry_times": 7, meta_keys.ATTEMPT: 7}), 500), Request)


def test_retry_after_is_a_floor_of_the_not_before_time():
    mw, outcomes, _ = make()
    before = time.time()
    new = respond(mw, Request(URL), 429, headers={"Retry-After": "30"})
    assert new.meta[meta_keys.NOT_BEFORE] >= before + 30
    assert outcomes[0].cls is C.RATE_LIMITED


def test_download_exception_given_up_raises_quietly_without_errback():
    mw, outcomes, stats = make({"SCALE_RETRY_POLICY": {"transient": {"retries": 1, "base": 0}}, "SCALE_RETRY_LATE": 0})
    req = Request(URL)
    mw.process_request(req)
    retry = mw.process_exception(req, DownloadTimeoutError("took too long"))
    assert isinstance(retry, Request)
    mw.process_request(retry)
    with pytest.raises(GaveUpError) as e:
        mw.process_exception(retry, DownloadTimeoutError("took too long"))
    assert isinstance(e.value, IgnoreRequest) and isinstance(e.value.original, DownloadTimeoutError)
    final = outcomes[-1]
    assert (final.cls, final.final, final.attempt, final.exception) == (
        C.TRANSIENT,
        True,
        2,
        "scrapy.exceptions.DownloadTimeoutError",
    )
    assert final.latency is not None
    assert stats.get_value("scale/gave_up/transient") == 1
    # with an errback, the errback gets the original exception (the middleware returns None)
    with_eb = Request(URL, errback=lambda f: None, meta={meta_keys.ATTEMPT: 2})
    assert mw.process_exception(with_eb, DownloadTimeoutError("x")) is None


def test_unknown_exception_is_fatal_and_left_to_scrapy():
    mw, outcomes, _ = make()
    assert mw.process_exception(Request(URL), ZeroDivisionError()) is None  # Scrapy logs its traceback
    assert (outcomes[-1].cls, outcomes[-1].final) == (C.FATAL, True)


def test_a_request_with_a_future_not_before_is_sent_back_not_downloaded():
    mw, _, stats = make()
    req = Request(URL, meta={meta_keys.NOT_BEFORE: time.time() + 60})
    again = mw.process_request(req)
    assert isinstance(again, Request) and again.dont_filter
    assert stats.get_value("scale/retry/not_before_guard") == 1
    assert mw.process_request(Request(URL, meta={meta_keys.NOT_BEFORE: time.time() - 1})) is None


def test_retry_times_zero_gives_up_logged_at_the_give_up_level_and_counted(caplog):
    """RETRY_TIMES = 0 set by the project: every retryable failure is a give-up, logged at
    RETRY_GIVE_UP_LOG_LEVEL and counted (before: neither); the request's give_up_log_level
    meta key wins, as in Scrapy's RetryMiddleware."""
    import logging

    mw, outcomes, stats = make({"RETRY_TIMES": 0, "RETRY_GIVE_UP_LOG_LEVEL": "ERROR"})
    with caplog.at_level(logging.DEBUG, logger="scrapy_scale.outcomes"):
        assert isinstance(respond(mw, Request(URL), 500), HtmlResponse)
        assert isinstance(respond(mw, Request(URL + "?b", meta={"give_up_log_level": "INFO"}), 503), HtmlResponse)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "Gave up" in r.getMessage()]
    assert [lv for lv, _ in lines] == ["ERROR", "INFO"], lines
    # Scrapy's wording, which users grep for: "Gave up retrying %(request)s (failed %(retry_times)d times): %(reason)s"
    assert lines[0][1] == f"Gave up retrying <GET {URL}> (failed 1 times): transient (HTTP 500)", lines
    assert stats.get_value("scale/gave_up/transient") == 2
    assert stats.get_value("retry/max_reached") == 2
    assert not [o for o in outcomes if not o.final]


def test_scrapy_own_download_retried_after_a_silent_egress_avoids_that_egress():
    """robots.txt (callback NO_CALLBACK) is retried at once by the engine: its retry avoided
    nothing, so a robots.txt cut at a blackhole's first-byte bound drew the same egress again
    and its site waited twice that bound (the chaos benchmark's host 1 started at 4 s)."""
    from scrapy.http.request import NO_CALLBACK

    mw, outcomes, _ = make()
    req = Request(
        "http://shop1.example.test/robots.txt",
        callback=NO_CALLBACK,
        meta={
            meta_keys.EGRESS: "p7",
            meta_keys.EGRESS_PROBE: True,
            meta_keys.AVOID_EGRESS: ["p1"],
            "proxy": "http://p7:1",
        },
    )
    mw.process_request(req)
    new = mw.process_exception(req, DownloadTimeoutError("no answer through egress p7"))
    assert isinstance(new, Request) and new.callback is NO_CALLBACK
    assert new.meta[meta_keys.AVOID_EGRESS] == ["p1", "p7"]
    (o,) = outcomes
    assert o.internal and not o.final and o.avoid_egress == ("p1", "p7")  # the internal path ran
    # an answer through it (a 500) is the site's: nothing more to avoid (a 503 without
    # Retry-After is a refusal of the route, avoided: tests/unit/test_retry_class_budgets.py)
    outcomes.clear()
    again = Request("http://shop1.example.test/robots.txt", callback=NO_CALLBACK, meta={meta_keys.EGRESS: "p8"})
    new = respond(mw, again, 500)
    assert isinstance(new, Request) and meta_keys.AVOID_EGRESS not in new.meta
    assert outcomes[0].internal
