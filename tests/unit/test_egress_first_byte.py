"""The first-byte timeout through egresses, on a plain asyncio loop with stand-in downloads."""

from __future__ import annotations

import asyncio
import logging

import pytest
from scrapy import Request
from scrapy.exceptions import DownloadTimeoutError

from scrapy_scale import meta
from scrapy_scale.egress.first_byte import FirstByteTimeout

pytestmark = pytest.mark.pure


def _req(egress: str | None = "127.0.0.1:9", **m) -> Request:
    return Request("http://shop.test/", meta={meta.EGRESS: egress, **m} if egress else m)


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
    assert not fb._timers and not fb._late


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
    assert fb.expired == 0 and not fb._timers


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
