"""scrapy_scale.compat: every use of Scrapy's private API, checked in a real crawl, so a
Scrapy release that changes them fails here first (and not silently in a crawl)."""

from __future__ import annotations

import pytest
from scrapy.utils.test import get_crawler

from scrapy_scale import compat

pytestmark = pytest.mark.pure


def test_outside_a_crawl_every_helper_says_unknown() -> None:
    crawler = get_crawler()
    assert compat.engine_of(crawler) is None
    assert compat.engine_requests_in_progress(crawler) is None
    assert compat.wake_engine(crawler) is False
    assert compat.engine_scheduler(crawler) is None
    assert compat.slot_full_check(crawler) is None
    assert compat.feeds_accepting(None, {}) == 0
    assert compat.feed_exporter(crawler) is None  # in a crawl: test_private_engine_api_as_compat_uses_it
    assert compat.drop_slot_delay(crawler, "shop1.example.test") is False


def test_scrapy_playwright_private_api_as_compat_uses_it() -> None:
    """compat.playwright_*: the handler's context_wrappers, context_launch_lock,
    _create_browser_context(name=, context_kwargs=, spider=) and browser; and Scrapy's
    DownloadHandlers._get_handler (compat.download_handler). The egress browser crawls
    (tests/crawl/test_egress_browser.py) use them for real."""
    import inspect

    pytest.importorskip("scrapy_playwright")
    from scrapy.core.downloader.handlers import DownloadHandlers
    from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler as H

    assert callable(getattr(DownloadHandlers, "_get_handler", None))
    params = inspect.signature(H._create_browser_context).parameters
    assert {"name", "context_kwargs", "spider"} <= set(params)
    assert inspect.iscoroutinefunction(H._create_browser_context)
    src = inspect.getsource(H.__init__) + inspect.getsource(H._maybe_launch_browser)
    for attr in ("self.context_wrappers", "self.context_launch_lock", "self.browser"):
        assert attr in src, attr
    assert compat.playwright_contexts(object()) == {} and compat.playwright_browsers(object()) == 0
