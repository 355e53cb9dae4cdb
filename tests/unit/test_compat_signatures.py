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
    assert compat.engine_closing(crawler) is None
    assert compat.engine_scheduler(crawler) is None
    assert compat.slot_full_check(crawler) is None
    assert compat.feeds_accepting(None, {}) == 0
    assert compat.feed_exporter(crawler) is None  # in a crawl: test_private_engine_api_as_compat_uses_it
    assert compat.drop_slot_delay(crawler, "shop1.example.test") is False
    assert compat.wrap_downloads(crawler, lambda inner: inner) is None


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


def test_downloader_calls_its_handlers_download_request_async_as_compat_wraps_it() -> None:
    """compat.wrap_downloads: Downloader._download awaits
    ``self.handlers.download_request_async(request)`` (an instance attribute of that name
    replaces it), and undo gives the method back, or says no when wrapped over since. The
    first-byte timeout crawls (tests/crawl/test_egress_after_connect.py) use it for real."""
    import inspect
    from types import SimpleNamespace

    from scrapy.core.downloader import Downloader
    from scrapy.core.downloader.handlers import DownloadHandlers

    assert "self.handlers.download_request_async(" in inspect.getsource(Downloader._download)
    assert inspect.iscoroutinefunction(DownloadHandlers.download_request_async)
    crawler = get_crawler()
    handlers = DownloadHandlers(crawler)
    crawler.engine = SimpleNamespace(downloader=SimpleNamespace(handlers=handlers))
    seen = []
    undo = compat.wrap_downloads(crawler, lambda inner: seen.append(inner) or "wrapped")
    assert undo is not None and handlers.download_request_async == "wrapped"
    assert seen[0].__func__ is DownloadHandlers.download_request_async  # inner: Scrapy's own
    assert undo() is True and "download_request_async" not in vars(handlers)
    undo = compat.wrap_downloads(crawler, lambda inner: "mine")
    assert undo is not None
    handlers.download_request_async = "over it"  # something wrapped it since
    assert undo() is False and handlers.download_request_async == "over it"


def test_only_compat_touches_the_downloaders_handlers() -> None:
    """The project rule: Scrapy internals are used in compat.py only. (first_byte.py replaced
    ``handlers.download_request_async`` itself before.)"""
    from pathlib import Path

    import scrapy_scale

    root = Path(scrapy_scale.__file__).parent
    users = sorted(
        str(f.relative_to(root))
        for f in root.rglob("*.py")
        if f.name != "compat.py" and "download_request_async" in f.read_text()
    )
    assert users == []


def test_local_file_feeds_are_built_by_the_journaled_storage_and_items_routed_through_us() -> None:
    """compat.journal_local_feeds (FeedExporter.storages, read by its _get_storage) and
    compat.route_feed_items (its item_scraped handler swapped for ours); the crash tests in
    tests/crawl/test_feed_exactly_once.py use both for real."""
    from scrapy import signals
    from scrapy.extensions.feedexport import FeedExporter

    from scrapy_scale.storage.feed_files import storage_for

    crawler = get_crawler(settings_dict={"FEEDS": {"/tmp/x.jsonl": {"format": "jsonlines"}}})
    exporter = FeedExporter.from_crawler(crawler)
    cls = storage_for(lambda feed: None)
    assert compat.journal_local_feeds(exporter, cls) == 2  # "" and "file"
    assert type(exporter._get_storage("/tmp/x.jsonl", exporter.feeds["/tmp/x.jsonl"])) is cls
    assert compat.journal_local_feeds(exporter, storage_for(lambda feed: None)) == 0  # not Scrapy's own now
    seen: list[object] = []

    def handler(item: object, spider: object) -> None:
        seen.append(item)

    compat.route_feed_items(crawler, exporter, handler)
    exporter.slots = [object()]  # the FeedExporter's own handler would fail on it
    results = crawler.signals.send_catch_log(signals.item_scraped, item={"a": 1}, response=None, spider=None)
    assert seen == [{"a": 1}] and all(r is None for _, r in results)  # no failure: not the exporter's
    assert handler in [h for h, _ in results] and exporter.item_scraped not in [h for h, _ in results]
