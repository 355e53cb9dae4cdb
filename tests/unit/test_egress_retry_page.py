"""A retry is a copy of the failed attempt's request: the page that attempt kept
(``playwright_include_page``; scrapy-playwright puts it in the request's meta before the page
loads) must not travel into it. scrapy-playwright loads a request whose meta holds an open
page in that page, so the retry went out in the failed attempt's context (the egress it had
to avoid) and the frontier could not store it."""

from __future__ import annotations

import asyncio

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale.egress.middleware import EgressMiddleware
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.outcomes.retry import retry_request

pytestmark = pytest.mark.pure

PAGE = "playwright_page"  # scrapy-playwright's meta key of a kept page


class Page:
    """The two methods of a Playwright page the pool calls (is_closed, close)."""

    def __init__(self) -> None:
        self.closed = 0

    def is_closed(self) -> bool:
        return self.closed > 0

    async def close(self) -> None:
        self.closed += 1


def _outcome(final: bool) -> Outcome:
    return Outcome(
        fingerprint="f" * 40,
        url="http://shop.test/a",
        domain="shop.test",
        cls=FailureClass.EGRESS_FAILED,
        reason="browser ERR_PROXY_CONNECTION_FAILED",
        egress="127.0.0.1:9",
        attempt=1,
        final=final,
        fallback=True,  # no health evidence: this test is about the page
    )


def test_a_retry_goes_to_the_scheduler_without_the_failed_attempts_page_which_is_closed():
    async def run() -> tuple[Page, Request]:
        mw = EgressMiddleware.from_crawler(get_crawler(settings_dict={"SCALE_EGRESSES": ["http://127.0.0.1:9"]}))
        page = Page()
        attempt = Request(
            "http://shop.test/a",
            meta={"playwright": True, "playwright_include_page": True, meta_keys.EGRESS: "127.0.0.1:9", PAGE: page},
        )
        o = _outcome(final=False)
        retry = retry_request(attempt, o, not_before=None, avoid=("127.0.0.1:9",))
        assert retry.meta[PAGE] is page  # the copy carries it (the path under test ran)
        mw.on_outcome(o, attempt)  # the failed attempt's outcome, sent after the copy was made
        mw.on_scheduled(retry)  # the retry goes back to the scheduler
        await asyncio.sleep(0)
        return page, retry

    page, retry = asyncio.run(run())
    assert PAGE not in retry.meta  # scrapy-playwright opens a page of the assigned context
    assert retry.meta["playwright_include_page"] is True  # the callback still gets its page
    assert page.closed == 1  # the failed attempt's page: closed once, at its outcome


def test_a_final_outcome_closes_the_kept_page_once():
    async def run() -> Page:
        mw = EgressMiddleware.from_crawler(get_crawler(settings_dict={"SCALE_EGRESSES": ["http://127.0.0.1:9"]}))
        page = Page()
        request = Request("http://shop.test/a", meta={meta_keys.EGRESS: "127.0.0.1:9", PAGE: page})
        mw.on_outcome(_outcome(final=True), request)
        await asyncio.sleep(0)
        mw.on_outcome(_outcome(final=True), request)  # closed already: not again
        await asyncio.sleep(0)
        return page

    assert asyncio.run(run()).closed == 1


def test_a_request_going_back_to_the_scheduler_names_no_earlier_egress():
    """The pool assigns an egress at every attempt; a retry (a copy of the failed attempt)
    that carried the old egress and proxy would have an outcome emitted before the egress
    middleware runs again blamed on that egress."""
    from scrapy_scale.outcomes.emit import egress_id

    mw = EgressMiddleware.from_crawler(get_crawler(settings_dict={"SCALE_EGRESSES": ["http://127.0.0.1:9"]}))
    attempt = Request("http://shop.test/a", meta={meta_keys.EGRESS: "127.0.0.1:9", "proxy": "http://127.0.0.1:9"})
    retry = retry_request(attempt, _outcome(final=False), not_before=None, avoid=("127.0.0.1:9",))
    assert egress_id(retry) == "127.0.0.1:9"  # the copy carries it (the path under test ran)
    mw.on_scheduled(retry)
    assert egress_id(retry) is None and "proxy" not in retry.meta
    assert retry.meta[meta_keys.AVOID_EGRESS] == ["127.0.0.1:9"]  # what the retry must avoid stays
    own = Request("http://shop.test/b", meta={"proxy": "http://127.0.0.1:3128"})  # the project's own proxy
    mw.on_scheduled(own)
    assert own.meta["proxy"] == "http://127.0.0.1:3128"
