"""The classifier: default table, user rules, predicates, detectors, and rule validation."""

from __future__ import annotations

import pytest
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    IgnoreRequest,
    UnsupportedURLSchemeError,
)
from scrapy.http import HtmlResponse, Request, Response
from scrapy.settings import Settings
from twisted.internet import error as txerr

from scrapy_scale import config
from scrapy_scale.addon import Addon
from scrapy_scale.outcomes.classify import (
    BlockPageDetector,
    Classifier,
    SignatureBlockDetector,
    parse_rules,
)
from scrapy_scale.outcomes.model import FailureClass as C

pytestmark = pytest.mark.pure

URL = "http://shop1.example.test/item/1"
CHALLENGE = b'<html><body><div id="challenge-form">Checking your browser</div></body></html>'
PRODUCT = b'<html><body><h1 class="title">Lamp</h1><span class="sku">S1</span></body></html>'


def resp(status=200, body=PRODUCT, headers=None, url=URL, proxy=None):
    req = Request(url, meta={"proxy": proxy} if proxy else {})
    return HtmlResponse(url, status=status, body=body, headers=headers or {}, request=req), req


@pytest.mark.parametrize(
    "status,cls",
    [
        (200, C.OK),
        (204, C.OK),
        (301, C.OK),
        (304, C.OK),
        (404, C.NOT_FOUND),
        (410, C.NOT_FOUND),
        (500, C.TRANSIENT),
        (502, C.TRANSIENT),
        (504, C.TRANSIENT),
        (408, C.TRANSIENT),
        (522, C.TRANSIENT),
        (503, C.TRANSIENT),
        (429, C.RATE_LIMITED),
        (401, C.BLOCKED),
        (403, C.BLOCKED),
        (407, C.EGRESS_FAILED),
        (400, C.FATAL),
        (405, C.FATAL),
        (501, C.FATAL),
        (599, C.TRANSIENT),
    ],
)
def test_default_status_table(status, cls):
    r, req = resp(status)
    assert Classifier().classify_response(r, req).cls is cls


def test_503_with_retry_after_is_rate_limited():
    r, req = resp(503, headers={"Retry-After": "3"})
    v = Classifier().classify_response(r, req)
    assert v.cls is C.RATE_LIMITED


def test_of_several_retry_after_headers_the_largest_wait_is_used():
    """Issue 19 item 16: a response that repeats Retry-After used to give the last one."""
    now = 1_700_000_000.0
    soon, later = "Tue, 14 Nov 2023 22:13:27 GMT", "Tue, 14 Nov 2023 22:13:40 GMT"  # now + 7 s, + 20 s
    headers = [
        (b"Retry-After", b"30"),
        (b"Retry-After", soon.encode()),
        (b"Retry-After", b"junk"),
        (b"Retry-After", b"5"),
    ]
    r, req = resp(429, headers=headers)
    assert r.headers.getlist(b"Retry-After")[-1] == b"5"  # the last one is the smallest
    v = Classifier(clock=lambda: now).classify_response(r, req)
    assert (v.retry_after, v.retry_after_raw) == (30.0, "30")
    r, req = resp(503, headers=[(b"Retry-After", b"2"), (b"Retry-After", later.encode())])
    v = Classifier(clock=lambda: now).classify_response(r, req)
    assert v.cls is C.RATE_LIMITED and v.retry_after == pytest.approx(20.0) and v.retry_after_raw == later


@pytest.mark.parametrize(
    "exc,proxy,cls",
    [
        (DownloadTimeoutError("t"), None, C.TRANSIENT),
        (txerr.TimeoutError(), None, C.TRANSIENT),
        (DownloadConnectionRefusedError(), None, C.TRANSIENT),
        (txerr.ConnectionRefusedError(), None, C.TRANSIENT),
        (txerr.ConnectionLost(), None, C.TRANSIENT),
        (CannotResolveHostError(), None, C.TRANSIENT),
        (DownloadConnectionRefusedError(), "http://u:p@127.0.0.1:3128", C.EGRESS_FAILED),
        (txerr.TCPTimedOutError(), "http://127.0.0.1:3128", C.EGRESS_FAILED),
        (DownloadTimeoutError("t"), "http://127.0.0.1:3128", C.TRANSIENT),
        (TunnelError("x"), "http://127.0.0.1:3128", C.EGRESS_FAILED),
        (IgnoreRequest(), None, C.FATAL),
        (UnsupportedURLSchemeError(), None, C.FATAL),
    ],
)
def test_default_exception_table(exc, proxy, cls):
    req = Request(URL, meta={"proxy": proxy} if proxy else {})
    v = Classifier().classify_exception(exc, req)
    assert v.cls is cls and v.expected


def test_unknown_exception_is_fatal_and_unexpected():
    v = Classifier().classify_exception(ZeroDivisionError(), Request(URL))
    assert v.cls is C.FATAL and not v.expected and v.reason == "ZeroDivisionError"


def test_user_rules_first_match_wins_over_defaults():
    rules = parse_rules(
        [
            {"status": 403, "domain": "shop1.example.test", "class": "rate_limited", "reason": "403 means slow down"},
            {"status": ["4xx"], "class": "fatal"},
        ]
    )
    c = Classifier(rules)
    r, req = resp(403)
    assert c.classify_response(r, req).cls is C.RATE_LIMITED
    r2, req2 = resp(403, url="http://shop2.example.test/x")
    assert c.classify_response(r2, req2).cls is C.FATAL  # the domain override does not apply
    r3, req3 = resp(404)
    assert c.classify_response(r3, req3).cls is C.FATAL  # user rule before the default 404


def test_domain_rule_matches_subdomains_only():
    (rule,) = parse_rules([{"status": 500, "domain": "example.test", "class": "fatal"}])
    c = Classifier([rule])
    assert c.classify_response(*resp(500, url="http://example.test/")).cls is C.FATAL
    assert c.classify_response(*resp(500, url="http://shop1.example.test/")).cls is C.FATAL
    assert c.classify_response(*resp(500, url="http://notexample.test/")).cls is C.TRANSIENT


@pytest.mark.parametrize(
    "rule",
    [
        {"css": "#challenge-form", "class": "blocked"},
        {"xpath": "//div[@id='challenge-form']", "class": "blocked"},
        {"regex": "(?i)checking your browser", "class": "blocked"},
        {"css": "div#challenge-form", "regex": "browser", "status": "2xx", "class": "blocked"},
    ],
)
def test_block_page_predicates(rule):
    c = Classifier(parse_rules([rule]))
    blocked = c.classify_response(*resp(200, CHALLENGE))
    assert blocked.cls is C.BLOCKED and blocked.reason.startswith("rule 0")
    assert c.classify_response(*resp(200, PRODUCT)).cls is C.OK


def test_predicate_ignores_binary_responses():
    c = Classifier(parse_rules([{"regex": "x", "class": "blocked"}]))
    r = Response(URL, body=b"x" * 10, request=Request(URL))
    assert c.classify_response(r, r.request).cls is C.OK


def test_exception_rule_by_dotted_path_and_proxy_condition():
    rules = parse_rules(
        [{"exception": "scrapy.exceptions.DownloadTimeoutError", "proxy": True, "class": "egress_failed"}]
    )
    c = Classifier(rules)
    assert (
        c.classify_exception(DownloadTimeoutError(), Request(URL, meta={"proxy": "http://p:1"})).cls is C.EGRESS_FAILED
    )
    assert c.classify_exception(DownloadTimeoutError(), Request(URL)).cls is C.TRANSIENT


def test_retry_http_codes_promotes_fatal_statuses():
    c = Classifier(retry_http_codes=[500, 400])
    assert c.classify_response(*resp(400)).cls is C.TRANSIENT
    assert Classifier().classify_response(*resp(400)).cls is C.FATAL


def test_pluggable_detectors():
    class Empty(BlockPageDetector):
        def detect(self, response, request):
            return "empty page" if not response.body.strip() else None

    c = Classifier(detectors=[Empty(), SignatureBlockDetector()])
    assert c.classify_response(*resp(200, b"  ")).reason == "block page: empty page"
    assert c.classify_response(*resp(200, b'<div class="g-recaptcha"></div>')).reason == "block page: captcha"
    assert c.classify_response(*resp(200, PRODUCT)).cls is C.OK
    assert c.classify_response(*resp(404, b"")).cls is C.NOT_FOUND  # detectors see 2xx only


@pytest.mark.parametrize(
    "rules,problem",
    [
        ([{"status": 500, "class": "transiant"}], "rule 0: unknown failure class 'transiant'"),
        ([{"status": 500}], "rule 0: missing 'class'"),
        ([{"domain": "x.com", "class": "fatal"}], "needs at least one of"),
        ([{"status": 500, "class": "fatal"}, {"status": "5x", "class": "fatal"}], "rule 1: bad status"),
        ([{"status": 700, "class": "fatal"}], "not an HTTP status"),
        ([{"css": "div[", "class": "blocked"}], "bad css"),
        ([{"xpath": "//div[", "class": "blocked"}], "bad xpath"),
        ([{"regex": "(", "class": "blocked"}], "bad regex"),
        ([{"exception": "no.such.Error", "class": "fatal"}], "cannot import exception"),
        ([{"exception": "scrapy.Request", "class": "fatal"}], "is not an exception class"),
        ([{"exception": "builtins.ValueError", "status": 500, "class": "fatal"}], "cannot also have"),
        ([{"status": 500, "class": "fatal", "colour": "red"}], "unknown key"),
        ([{"status": 500, "class": "fatal", "proxy": "yes"}], "'proxy' must be True or False"),
        (["status=500"], "expected a dict"),
        ("{bad json", "not valid JSON"),
    ],
)
def test_bad_rules_fail_at_startup_naming_the_setting(rules, problem):
    settings = Settings({"SCALE_FAILURE_RULES": rules})
    with pytest.raises(config.ScaleSettingError) as e:
        Addon().update_settings(settings)
    assert e.value.setting == "SCALE_FAILURE_RULES"
    assert problem in str(e.value), str(e.value)


def test_rules_as_json_string_from_the_command_line():
    rules = config.get(
        Settings({"SCALE_FAILURE_RULES": '[{"status": "500-504", "class": "fatal"}]'}), "SCALE_FAILURE_RULES"
    )
    assert rules[0].statuses == frozenset(range(500, 505))


def test_bad_critical_fields_and_detectors_name_their_setting():
    with pytest.raises(config.ScaleSettingError, match="^SCALE_CRITICAL_FIELDS: "):
        config.get(Settings({"SCALE_CRITICAL_FIELDS": {"Product": [1]}}), "SCALE_CRITICAL_FIELDS")
    with pytest.raises(config.ScaleSettingError, match="^SCALE_BLOCK_DETECTORS: "):
        config.get(Settings({"SCALE_BLOCK_DETECTORS": [3]}), "SCALE_BLOCK_DETECTORS")


@pytest.mark.parametrize(
    "path,problem",
    [("no.such.Detector", "cannot import 'no.such.Detector'"), ("scrapy.Request", "has no detect(response, request)")],
)
def test_bad_detector_fails_when_the_middleware_starts(path, problem):
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from scrapy_scale.outcomes import OutcomeDownloaderMiddleware

    crawler = get_crawler(Spider, {"SCALE_BLOCK_DETECTORS": [path]})
    with pytest.raises(config.ScaleSettingError) as e:
        OutcomeDownloaderMiddleware.from_crawler(crawler)
    assert e.value.setting == "SCALE_BLOCK_DETECTORS" and problem in str(e.value)
