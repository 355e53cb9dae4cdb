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

An attempt through an egress that has not proved itself is bound by what its site (or,
until the site has answered a few times, every site) showed through the others
(:mod:`scrapy_scale.egress.header_times`): the times to the headers are measured here, on
every attempt through an egress. Not proved itself: a re-probe or an egress no answer came
through yet while others answered, as the pool said when it assigned the egress
(``meta_keys.EGRESS_PROBE``), or an egress no headers came through yet in this crawl. The bound
of such an attempt is looked at again every second, since the evidence grows while it waits
(a crawl's first requests go out before anything answered: a blackhole drawn by a site's
robots.txt held the whole site for the download timeout). An attempt cut so is marked
``meta_keys.EGRESS_PROBE``: its retry is the egress's failure, through another egress.

The time from the headers to the whole answer is measured here too, and a body far slower
than the site's bodies through other egresses marks the attempt (``SLOW_BODY``), which the
egress pool counts against the egress (:mod:`scrapy_scale.egress.body_times`).
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

from scrapy_scale import compat, meta_keys
from scrapy_scale.egress.body_times import BodyTimes
from scrapy_scale.egress.header_times import HeaderTimes

logger = logging.getLogger(__name__)

#: seconds between two looks at an unproven attempt's bound
RECHECK = 1.0
#: meta key: the seconds an attempt's body took, set when that is slow against its site's
#: other routes (internal: read by the egress middleware at the attempt's outcome)
SLOW_BODY = "_scale_egress_slow_body"

Download = Callable[[Any], Awaitable[Any]]


class FirstByteTimeout:
    def __init__(self, crawler: Any, seconds: float, answered: set[str] | None = None, bodies: BodyTimes | None = None):
        self.crawler = crawler
        self.seconds = seconds
        self.installed = False
        self.expired = 0  # attempts cancelled for want of a first byte
        self.expired_unproven = 0  # of those, under an unproven egress's shorter bound
        self.times = HeaderTimes()
        self._timers: dict[int, asyncio.TimerHandle] = {}  # id(request) -> its clock
        self._started: dict[int, tuple[str, float]] = {}  # id(request) -> (site, monotonic start)
        self._late: set[int] = set()
        self._headers_at: dict[int, float] = {}  # id(request) -> monotonic time of its headers
        #: the bodies' times per route (the egress pool's), measured here
        self.bodies = bodies
        #: egresses an answer came through, this crawl: the egress pool's own set (its
        #: outcomes add to it, headers here), so both call the same egresses unproven
        self.answered: set[str] = set() if answered is None else answered
        self._undo: Callable[[], bool] | None = None
        self.closed = False

    @property
    def clocks(self) -> int:
        """First-byte clocks running now (one per attempt waiting for its headers)."""
        return len(self._timers)

    @property
    def waiting(self) -> int:
        """Attempts started and not yet answered or ended."""
        return len(self._started)

    @property
    def cutting(self) -> int:
        """Attempts cut for want of a first byte whose download has not ended yet."""
        return len(self._late)

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
            if self.closed or not m.get(meta_keys.EGRESS) or m.get("playwright"):
                return await inner(request)
            key = id(request)
            site = urlparse_cached(request).hostname or ""
            egress = str(m.get(meta_keys.EGRESS))
            probe = m.get(meta_keys.EGRESS_PROBE) is True
            t0 = time.monotonic()
            task = asyncio.ensure_future(inner(request))
            self._started[key] = (site, t0)
            cut = _Cut(key, task, site, egress, probe, t0)
            self._arm(cut, min(self.seconds, self.times.floor) if self._unproven(cut) else self.seconds)
            try:
                response = await task
                self._body_done(key, request, site, egress)
                return response
            except asyncio.CancelledError:
                if key not in self._late:
                    raise  # cancelled from outside (the spider closes)
                if cut.bound < self.seconds:
                    m[meta_keys.EGRESS_PROBE] = True  # its retry: the egress's failure (outcomes/retry.py)
                    why = f"an egress not proven yet: {self.times.factor:g}x the 95th percentile time to the headers"
                else:
                    why = "SCALE_EGRESS_FIRST_BYTE_TIMEOUT"
                raise DownloadTimeoutError(
                    f"no answer from {request.url} through egress {egress} within {cut.bound:.3g} s ({why})"
                ) from None
            finally:
                timer = self._timers.pop(key, None)
                if timer is not None:
                    timer.cancel()
                self._started.pop(key, None)
                self._headers_at.pop(key, None)
                self._late.discard(key)

        return download

    def _body_done(self, key: int, request: Any, site: str, egress: str) -> None:
        """The whole answer came: its body's time since the headers, against the site's
        other routes (:mod:`scrapy_scale.egress.body_times`); a slow one is marked for the
        egress pool, which counts it at the attempt's outcome."""
        at = self._headers_at.pop(key, None)
        if at is None or self.bodies is None:
            return
        seconds = time.monotonic() - at
        if self.bodies.observe(site, egress, seconds):
            request.meta[SLOW_BODY] = seconds

    def _unproven(self, cut: _Cut) -> bool:
        return cut.probe or cut.egress not in self.answered

    def _arm(self, cut: _Cut, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._timers[cut.key] = loop.call_later(max(0.0, delay), self._check, cut)

    def _check(self, cut: _Cut) -> None:
        """The attempt's clock ran out, or its bound is looked at again: cut it when it has
        waited longer than its bound now is; else look again (at most ``RECHECK`` later
        while its egress is unproven, since the bound only shrinks as evidence comes)."""
        if self._timers.pop(cut.key, None) is None or cut.task.done():
            return
        unproven = self._unproven(cut)
        cut.bound = self.times.bound(cut.site, self.seconds) if unproven else self.seconds
        waited = time.monotonic() - cut.t0
        if waited + 1e-3 < cut.bound:
            left = cut.bound - waited
            self._arm(cut, min(left, RECHECK) if unproven else left)
            return
        self._late.add(cut.key)
        self.expired += 1
        self.expired_unproven += cut.bound < self.seconds
        cut.task.cancel()

    def on_headers(self, headers: Any = None, body_length: Any = None, request: Any = None, **kw: Any) -> None:
        timer = self._timers.pop(id(request), None)
        if timer is not None:
            timer.cancel()
        started = self._started.pop(id(request), None)
        if started is not None:
            self._headers_at[id(request)] = time.monotonic()
            site, t0 = started
            self.times.observe(site, time.monotonic() - t0)
            self.answered.add(str(request.meta.get(meta_keys.EGRESS)))


class _Cut:
    """One attempt's clock: what its bound is decided from."""

    __slots__ = ("key", "task", "site", "egress", "probe", "t0", "bound")

    def __init__(self, key: int, task: asyncio.Future[Any], site: str, egress: str, probe: bool, t0: float):
        self.key, self.task, self.site, self.egress, self.probe, self.t0 = key, task, site, egress, probe, t0
        self.bound = float("inf")


def _asyncio_reactor() -> bool:
    from scrapy.utils.reactor import is_asyncio_reactor_installed

    try:
        return is_asyncio_reactor_installed()
    except RuntimeError:  # no reactor installed (outside a crawl)
        return False
