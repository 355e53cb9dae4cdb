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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from scrapy import signals
from scrapy.exceptions import DownloadTimeoutError

from scrapy_scale import compat, meta

logger = logging.getLogger(__name__)

Download = Callable[[Any], Awaitable[Any]]


class FirstByteTimeout:
    def __init__(self, crawler: Any, seconds: float):
        self.crawler = crawler
        self.seconds = seconds
        self.installed = False
        self.expired = 0  # attempts cancelled for want of a first byte
        self._timers: dict[int, asyncio.TimerHandle] = {}  # id(request) -> its clock
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
            task = asyncio.ensure_future(inner(request))
            self._timers[key] = asyncio.get_running_loop().call_later(self.seconds, self._expire, key, task)
            try:
                return await task
            except asyncio.CancelledError:
                if key not in self._late:
                    raise  # cancelled from outside (the spider closes)
                raise DownloadTimeoutError(
                    f"no answer from {request.url} through egress {m.get(meta.EGRESS)} within "
                    f"{self.seconds:g} s (SCALE_EGRESS_FIRST_BYTE_TIMEOUT)"
                ) from None
            finally:
                timer = self._timers.pop(key, None)
                if timer is not None:
                    timer.cancel()
                self._late.discard(key)

        return download

    def _expire(self, key: int, task: asyncio.Future[Any]) -> None:
        if self._timers.pop(key, None) is None or task.done():
            return
        self._late.add(key)
        self.expired += 1
        task.cancel()

    def on_headers(self, headers: Any = None, body_length: Any = None, request: Any = None, **kw: Any) -> None:
        timer = self._timers.pop(id(request), None)
        if timer is not None:
            timer.cancel()


def _asyncio_reactor() -> bool:
    from scrapy.utils.reactor import is_asyncio_reactor_installed

    try:
        return is_asyncio_reactor_installed()
    except RuntimeError:  # no reactor installed (outside a crawl)
        return False
