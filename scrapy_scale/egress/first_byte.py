"""The first-byte timeout of attempts through an egress (``SCALE_EGRESS_FIRST_BYTE_TIMEOUT``).

A proxy that accepts the connection and never answers holds each attempt for Scrapy's
whole-answer ``DOWNLOAD_TIMEOUT`` (180 s by default). Scrapy has no timeout for the
first byte, so this wraps the downloader's download handlers (the one object every
download goes through, after the download slot's pacing; through
:func:`scrapy_scale.compat.wrap_downloads`, given back at spider close): an attempt through an
egress that has no response headers after the timeout is cancelled and fails with
``DownloadTimeoutError`` (a ``transient`` outcome without a response: the egress pool
blames the egress when the site answers through another one). The headers' arrival
(Scrapy's ``headers_received`` signal) stops the clock: ``DOWNLOAD_TIMEOUT`` stays the
bound of the whole answer. Browser requests (scrapy-playwright) keep the browser's
navigation timeout; without the asyncio reactor nothing is wrapped (one WARNING).

An attempt through an egress that has not proved itself (``meta.EGRESS_PROBE``) is bound
by what its site showed through the others (:mod:`scrapy_scale.egress.header_times`): the
times to the headers are measured here, on every attempt through an egress.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from scrapy import signals
from scrapy.exceptions import DownloadTimeoutError
from scrapy.utils.httpobj import urlparse_cached

from scrapy_scale import compat, meta
from scrapy_scale.egress.header_times import HeaderTimes

logger = logging.getLogger(__name__)

Download = Callable[[Any], Awaitable[Any]]


class FirstByteTimeout:
    def __init__(self, crawler: Any, seconds: float):
        self.crawler = crawler
        self.seconds = seconds
        self.installed = False
        self.expired = 0  # attempts cancelled for want of a first byte
        self.expired_unproven = 0  # of those, under an unproven egress's shorter bound
        self.times = HeaderTimes()
        self._timers: dict[int, asyncio.TimerHandle] = {}  # id(request) -> its clock
        self._started: dict[int, tuple[str, float]] = {}  # id(request) -> (site, monotonic start)
        self._late: set[int] = set()
        self._undo: Callable[[], bool] | None = None
        self.closed = False

    def install(self) -> None:
        """Wrap the downloader's handlers (once the engine exists: at spider_opened), through
        :func:`scrapy_scale.compat.wrap_downloads`; :meth:`uninstall` at spider_closed."""
        if self.installed or self.seconds <= 0:
            return
        undo = compat.wrap_downloads(self.crawler, self.wrap) if _asyncio_reactor() else None
        if undo is None:
            logger.warning(
                "egress: SCALE_EGRESS_FIRST_BYTE_TIMEOUT needs the asyncio reactor and Scrapy's "
                "download handlers; attempts through egresses are bound by DOWNLOAD_TIMEOUT only"
            )
            return
        self._undo = undo
        self.crawler.signals.connect(self.on_headers, signal=signals.headers_received)
        self.installed = True

    def uninstall(self) -> None:
        """Give the downloader its handlers back and stop every clock (the spider closed)."""
        if not self.installed:
            return
        self.installed = False
        self.closed = True  # a wrapper that stays (wrapped over since) passes through
        if self._undo is not None:
            self._undo()
            self._undo = None
        self.crawler.signals.disconnect(self.on_headers, signal=signals.headers_received)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def wrap(self, inner: Download) -> Download:
        async def download(request: Any) -> Any:
            m = request.meta
            if self.closed or not m.get(meta.EGRESS) or m.get("playwright"):
                return await inner(request)
            key = id(request)
            site = urlparse_cached(request).hostname or ""
            unproven = m.get(meta.EGRESS_PROBE) is True
            seconds = self.times.bound(site, self.seconds) if unproven else self.seconds
            loop = asyncio.get_running_loop()
            task = asyncio.ensure_future(inner(request))
            self._started[key] = (site, time.monotonic())
            self._timers[key] = loop.call_later(seconds, self._expire, key, task, seconds < self.seconds)
            try:
                return await task
            except asyncio.CancelledError:
                if key not in self._late:
                    raise  # cancelled from outside (the spider closes)
                why = (
                    f"an egress not proven yet: {self.times.factor:g}x the site's 95th percentile time to the headers"
                    if seconds < self.seconds
                    else "SCALE_EGRESS_FIRST_BYTE_TIMEOUT"
                )
                raise DownloadTimeoutError(
                    f"no answer from {request.url} through egress {m.get(meta.EGRESS)} within {seconds:g} s ({why})"
                ) from None
            finally:
                timer = self._timers.pop(key, None)
                if timer is not None:
                    timer.cancel()
                self._started.pop(key, None)
                self._late.discard(key)

        return download

    def _expire(self, key: int, task: asyncio.Future[Any], shorter: bool) -> None:
        if self._timers.pop(key, None) is None or task.done():
            return
        self._late.add(key)
        self.expired += 1
        self.expired_unproven += shorter
        task.cancel()

    def on_headers(self, headers: Any = None, body_length: Any = None, request: Any = None, **kw: Any) -> None:
        timer = self._timers.pop(id(request), None)
        if timer is not None:
            timer.cancel()
        started = self._started.pop(id(request), None)
        if started is not None:
            site, t0 = started
            self.times.observe(site, time.monotonic() - t0)


def _asyncio_reactor() -> bool:
    from scrapy.utils.reactor import is_asyncio_reactor_installed

    try:
        return is_asyncio_reactor_installed()
    except RuntimeError:  # no reactor installed (outside a crawl)
        return False
