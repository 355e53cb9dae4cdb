"""The first-byte timeout of attempts through an egress (``SCALE_EGRESS_FIRST_BYTE_TIMEOUT``).

A proxy that accepts the connection and never answers holds each attempt for Scrapy's
whole-answer ``DOWNLOAD_TIMEOUT`` (180 s by default). Scrapy has no timeout for the
first byte, so this wraps the downloader's download handlers (the one object every
download goes through, after the download slot's pacing): an attempt through an
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

from scrapy_scale import meta

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

    def install(self) -> None:
        """Wrap the downloader's handlers (once the engine exists: at spider_opened)."""
        if self.installed or self.seconds <= 0:
            return
        from scrapy.utils.reactor import is_asyncio_reactor_installed

        handlers = getattr(getattr(self.crawler.engine, "downloader", None), "handlers", None)
        inner = getattr(handlers, "download_request_async", None)
        if handlers is None or inner is None or not is_asyncio_reactor_installed():
            logger.warning(
                "egress: SCALE_EGRESS_FIRST_BYTE_TIMEOUT needs the asyncio reactor and Scrapy's "
                "download handlers; attempts through egresses are bound by DOWNLOAD_TIMEOUT only"
            )
            return
        handlers.download_request_async = self.wrap(inner)
        self.crawler.signals.connect(self.on_headers, signal=signals.headers_received)
        self.installed = True

    def wrap(self, inner: Download) -> Download:
        async def download(request: Any) -> Any:
            m = request.meta
            if not m.get(meta.EGRESS) or m.get("playwright"):
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
