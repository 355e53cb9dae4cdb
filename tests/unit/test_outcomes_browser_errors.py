"""Playwright page-load errors are classified: a failing proxy is egress_failed, an empty,
malformed or cut answer and a timeout are transient; other exceptions are untouched."""

from __future__ import annotations

import pytest
from scrapy import Request

from scrapy_scale.outcomes.classify import Classifier, parse_rules
from scrapy_scale.outcomes.model import FailureClass as C

pw = pytest.importorskip("playwright.async_api")

pytestmark = pytest.mark.pure

URL = "http://shop1.example.test/item/1"


def _req(proxy: bool = True) -> Request:
    return Request(URL, meta={"playwright": True, **({"proxy": "http://127.0.0.1:9"} if proxy else {})})


@pytest.mark.parametrize(
    ("message", "cls", "reason"),
    [
        ("net::ERR_PROXY_CONNECTION_FAILED at " + URL, C.EGRESS_FAILED, "browser ERR_PROXY_CONNECTION_FAILED"),
        ("net::ERR_TUNNEL_CONNECTION_FAILED at " + URL, C.EGRESS_FAILED, "browser ERR_TUNNEL_CONNECTION_FAILED"),
        ("net::ERR_EMPTY_RESPONSE at " + URL, C.TRANSIENT, "browser ERR_EMPTY_RESPONSE"),
        ("net::ERR_INVALID_HTTP_RESPONSE at " + URL, C.TRANSIENT, "browser ERR_INVALID_HTTP_RESPONSE"),
        ("net::ERR_CONTENT_LENGTH_MISMATCH at " + URL, C.TRANSIENT, "browser ERR_CONTENT_LENGTH_MISMATCH"),
        ("net::ERR_CONNECTION_RESET at " + URL, C.TRANSIENT, "browser ERR_CONNECTION_RESET"),
    ],
)
def test_page_load_errors(message, cls, reason):
    v = Classifier().classify_exception(pw.Error(message), _req())
    assert (v.cls, v.reason) == (cls, reason)


def test_a_browser_timeout_is_transient():
    v = Classifier().classify_exception(pw.TimeoutError("Timeout 30000ms exceeded."), _req())
    assert (v.cls, v.reason) == (C.TRANSIENT, "browser timeout")


def test_other_browser_errors_keep_their_default_class():
    v = Classifier().classify_exception(pw.Error("Target page, context or browser has been closed"), _req())
    assert v.cls is C.FATAL and not v.expected  # a surprise: its traceback is kept
    v = Classifier().classify_exception(pw.Error("net::ERR_CERT_AUTHORITY_INVALID at " + URL), _req())
    assert v.cls is C.FATAL


def test_user_rules_come_first():
    rules = parse_rules([{"class": "fatal", "exception": "playwright.async_api.Error", "reason": "mine"}])
    v = Classifier(rules).classify_exception(pw.Error("net::ERR_PROXY_CONNECTION_FAILED at " + URL), _req())
    assert (v.cls, v.reason) == (C.FATAL, "mine")
