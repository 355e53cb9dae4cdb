"""The first-byte timeout through egresses, on a plain asyncio loop with stand-in downloads."""

from __future__ import annotations

import asyncio
import logging

import pytest
from scrapy import Request
from scrapy.exceptions import DownloadTimeoutError

from scrapy_scale import meta_keys
from scrapy_scale.egress.first_byte import FirstByteTimeout

pytestmark = pytest.mark.pure


def _req(egress: str | None = "127.0.0.1:9", **m) -> Request:
    return Request("http://shop.test/", meta={meta_keys.EGRESS: egress, **m} if egress else m)


def test_an_attempt_without_headers_in_time_is_cancelled_as_a_download_timeout():
    fb = FirstByteTimeout(crawler=None, seconds=0.05)
    cancelled = []

    async def never(request):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(request)
            raise

    with pytest.raises(DownloadTimeoutError, match="SCALE_EGRESS_FIRST_BYTE_TIMEOUT"):
        asyncio.run(fb.wrap(never)(_req()))
    assert len(cancelled) == 1 and fb.expired == 1  # the download itself was cancelled
    assert not fb.clocks and not fb.cutting


def test_headers_stop_the_clock_and_direct_or_browser_requests_are_left_alone():
    fb = FirstByteTimeout(crawler=None, seconds=0.05)

    async def slow_body(request):
        fb.on_headers(headers={}, body_length=0, request=request)  # headers came at once
        await asyncio.sleep(0.2)  # the body takes longer than the first-byte timeout
        return "response"

    assert asyncio.run(fb.wrap(slow_body)(_req())) == "response"

    async def slow(request):
        await asyncio.sleep(0.2)
        return "direct"

    assert asyncio.run(fb.wrap(slow)(_req(None))) == "direct"  # no egress: not timed here
    assert asyncio.run(fb.wrap(slow)(_req(playwright=True))) == "direct"  # the browser's own timeout
    assert fb.expired == 0


def test_a_cancel_from_outside_stays_a_cancel():
    fb = FirstByteTimeout(crawler=None, seconds=60)

    async def main():
        t = asyncio.ensure_future(fb.wrap(lambda r: asyncio.sleep(3600))(_req()))
        await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    assert fb.expired == 0 and not fb.clocks


def test_install_without_an_engine_warns_and_leaves_downloads_alone(caplog):
    class NoEngine:
        engine = None

    fb = FirstByteTimeout(NoEngine(), seconds=5)
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.egress.first_byte"):
        fb.install()
    assert not fb.installed and "DOWNLOAD_TIMEOUT only" in caplog.text
    off = FirstByteTimeout(NoEngine(), seconds=0)
    off.install()  # 0 = off: nothing to install, nothing said
    assert not off.installed


def _crawler_with_handlers():
    from types import SimpleNamespace

    from scrapy.core.downloader.handlers import DownloadHandlers
    from scrapy.utils.test import get_crawler

    crawler = get_crawler()
    handlers = DownloadHandlers(crawler)
    crawler.engine = SimpleNamespace(downloader=SimpleNamespace(handlers=handlers))
    return crawler, handlers


def test_install_wraps_each_crawlers_handlers_and_close_gives_them_back(monkeypatch):
    """Through compat.wrap_downloads; uninstall (the spider closed) restores Scrapy's method,
    stops the clocks and leaves another crawler's wrapper alone. Failed before: there was
    no uninstall (the wrapper and its timers outlived the spider)."""
    from scrapy_scale.egress import first_byte

    monkeypatch.setattr(first_byte, "_asyncio_reactor", lambda: True)  # no reactor in a pure test
    (c1, h1), (c2, h2) = _crawler_with_handlers(), _crawler_with_handlers()
    fb1, fb2 = FirstByteTimeout(c1, seconds=60), FirstByteTimeout(c2, seconds=60)
    fb1.install()
    fb2.install()
    assert fb1.installed and fb2.installed  # the forced path ran
    assert "download_request_async" in vars(h1) and "download_request_async" in vars(h2)

    async def main():
        started = asyncio.Event()

        async def hang(request):
            started.set()
            await asyncio.sleep(3600)

        t = asyncio.ensure_future(fb1.wrap(hang)(_req()))
        await started.wait()
        assert fb1.clocks == 1  # a clock runs for the pending attempt
        fb1.uninstall()
        assert not fb1.clocks  # stopped, not left to fire after the close
        t.cancel()

    asyncio.run(main())
    assert "download_request_async" not in vars(h1)  # Scrapy's own method again
    assert "download_request_async" in vars(h2) and fb2.installed  # the other crawler keeps its own
    assert not fb1.installed and fb1.closed
    fb2.uninstall()
    assert "download_request_async" not in vars(h2)


def test_an_unproven_egress_is_bound_by_what_its_site_showed_through_the_others():
    """A blackholed proxy's re-probe held its page for the whole timeout (the chaos bench's
    10 s DOWNLOAD_TIMEOUT; 30 s by default): once the site answered through the others, an
    attempt through an egress that has not proved itself is cut at 4x their 95th percentile
    (at least 2 s; the test scales the floor down)."""
    fb = FirstByteTimeout(crawler=None, seconds=60)
    fb.times.floor = 0.05

    async def quick(request):
        fb.on_headers(headers={}, body_length=0, request=request)
        return "response"

    async def never(request):
        await asyncio.sleep(3600)

    # before the site has 5 times to the headers, an unproven egress gets the configured bound
    assert fb.times.bound("shop.test", 60) == 60
    for _ in range(5):
        assert asyncio.run(fb.wrap(quick)(_req())) == "response"
    # 4x the site's p95, at least the floor (a loaded machine made the stand-in answers take
    # 20 ms: 4 x 20 ms is over the 0.05 s floor), well under the configured 60 s
    p95 = fb.times.p95("shop.test")
    assert p95 is not None and fb.times.bound("shop.test", 60) == max(0.05, 4 * p95) < 1
    with pytest.raises(DownloadTimeoutError, match="not proven yet"):
        asyncio.run(fb.wrap(never)(_req(**{meta_keys.EGRESS_PROBE: True})))
    assert fb.expired == fb.expired_unproven == 1 and not fb.waiting
    # a proven egress keeps the configured bound (it would wait 60 s here: cancelled from outside)

    async def proven():
        t = asyncio.ensure_future(fb.wrap(never)(_req()))
        await asyncio.sleep(0.2)
        assert not t.done()
        t.cancel()

    asyncio.run(proven())
    assert fb.expired == 1


def test_header_times_policy():
    from scrapy_scale.egress.header_times import HeaderTimes

    h = HeaderTimes(min_samples=3, window=4, max_sites=2)
    for s in (0.1, 0.2, 0.3):
        h.observe("a", s)
    assert h.p95("a") == 0.3 and h.bound("a", 30) == 2.0  # 4 x 0.3 under the 2 s floor
    for s in (1.0, 1.0, 1.0, 1.0):  # the window keeps the last 4
        h.observe("a", s)
    assert h.bound("a", 30) == 4.0 and h.bound("a", 3.0) == 3.0  # never over the configured
    for bad in (float("nan"), float("inf"), -1.0):  # not a time: ignored
        h.observe("a", bad)
    assert h.bound("a", 30) == 4.0
    h.observe("", 1.0)
    assert h.p95("") is None
    h.observe("b", 0.1)
    h.observe("c", 0.1)  # a third site drops the least recently seen ("a")
    assert h.p95("a") is None
    # a site without its own times takes every site's last 4 (1.0, 1.0, 0.1, 0.1): 4 x 1.0
    assert h.p95_any() == 1.0 and h.bound("a", 30) == 4.0
    fresh = HeaderTimes(min_samples=3)
    fresh.observe("b", 0.1)
    assert fresh.p95("a") is None and fresh.p95_any() is None and fresh.bound("a", 30) == 30  # no evidence yet


def test_an_attempt_sent_before_anything_answered_is_cut_once_others_answer(monkeypatch):
    """The chaos bench's host 1: its robots.txt, the crawl's first request to it, drew the
    blackholed proxy before any egress had answered, and the whole site waited the 10 s
    download timeout. An attempt through an egress no headers came through yet has its bound
    looked at again while it waits: once others answered (any site), it is cut at the
    shorter bound and marked as an unproven egress's attempt (its retry is the egress's
    failure); the configured bound holds while nothing answered."""
    from scrapy_scale.egress import first_byte

    monkeypatch.setattr(first_byte, "RECHECK", 0.02)
    fb = FirstByteTimeout(crawler=None, seconds=60)
    fb.times.floor = 0.05
    looks = []
    check = fb._check
    monkeypatch.setattr(fb, "_check", lambda cut: (looks.append(cut.bound), check(cut)))

    async def quick(request):
        fb.on_headers(headers={}, body_length=0, request=request)
        return "response"

    async def never(request):
        await asyncio.sleep(3600)

    async def main():
        first = _req("127.0.0.1:66")  # the blackhole, drawn first: nothing has answered yet
        t = asyncio.ensure_future(fb.wrap(never)(first))
        await asyncio.sleep(0.2)
        # looked at (at least once, however loaded the machine), no evidence yet: 60 s
        assert not t.done() and looks and set(looks[1:]) <= {60}
        for _ in range(5):  # another site answers through another egress
            assert (
                await fb.wrap(quick)(Request("http://other.test/", meta={meta_keys.EGRESS: "127.0.0.1:9"}))
                == "response"
            )
        with pytest.raises(DownloadTimeoutError, match="not proven yet"):
            await asyncio.wait_for(t, 5)  # (before: it waited its 60 s)
        assert first.meta[meta_keys.EGRESS_PROBE] is True  # retried as the egress's failure
        # an egress headers came through keeps the configured bound, looked at once
        n = len(looks)
        t2 = asyncio.ensure_future(fb.wrap(never)(_req("127.0.0.1:9")))
        await asyncio.sleep(0.2)
        assert not t2.done() and len(looks) == n
        t2.cancel()

    asyncio.run(main())
    assert fb.expired == fb.expired_unproven == 1 and "127.0.0.1:66" not in fb.answered
