"""Periodic, non-blocking reads of the job's frontier status for the metrics and the progress line.

The frontier's own ``status()`` (the store API ``scrapy scale status`` uses: counts by
state, oldest pending age, average wait, dead letters; job-wide, every worker's), read
through a store connection of our own in a thread of our own, so the reactor never
waits and the scheduler's store is never shared between threads. One poller per crawler
(``ScaleContext.shared(FrontierPoller, ...)``), shared by every reader.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import defer, threads
from twisted.python.threadpool import ThreadPool

from scrapy_scale.context import ScaleContext
from scrapy_scale.daemon_pool import DaemonThreadPool

logger = logging.getLogger(__name__)


class FrontierPoller:
    def __init__(self, settings: Any, job: str, min_age: float = 1.0):
        self.settings = settings
        self.job = job
        self.min_age = min_age
        #: the last status read (``scrapy_scale.frontier.ops.status.status_of`` data), None before the first
        self.latest: dict[str, Any] | None = None
        self.latest_at = 0.0
        self._pool: ThreadPool | None = None
        self._reader: Any = None
        self._running: defer.Deferred[Any] | None = None
        self._warned = False
        self._closed = False

    @classmethod
    def install(cls, crawler: Any, job: str) -> FrontierPoller | None:
        """The crawler's poller, None when the frontier is not the scheduler."""
        ctx = ScaleContext.of(crawler)
        if not ctx.frontier_on:
            return None

        def make() -> FrontierPoller:
            inst = cls(crawler.settings, ctx.job or job)
            # after every spider_closed reader took its final read
            crawler.signals.connect(inst.close, signal=signals.engine_stopped)
            return inst

        return ctx.shared(FrontierPoller, make)

    def refresh(self, fresh: bool = False) -> defer.Deferred[dict[str, Any] | None]:
        """Read the status again, unless a read is running (its result is the answer) or the
        last one is younger than ``min_age`` (and not ``fresh``)."""
        if self._closed:
            return defer.succeed(self.latest)
        if self._running is not None:
            return self._wait_running()
        if not fresh and self.latest is not None and time.monotonic() - self.latest_at < self.min_age:
            return defer.succeed(self.latest)
        from twisted.internet import reactor

        if self._pool is None:
            self._pool = DaemonThreadPool(1, 1, name="scale-monitor")
            self._pool.start()
        d = threads.deferToThreadPool(reactor, self._pool, self._read)  # type: ignore[arg-type]
        self._running = d
        d.addBoth(self._done)
        return self._wait_running()

    def _wait_running(self) -> defer.Deferred[dict[str, Any] | None]:
        out: defer.Deferred[dict[str, Any] | None] = defer.Deferred()
        assert self._running is not None

        def fire(result: Any) -> Any:
            out.callback(self.latest)
            return result

        self._running.addBoth(fire)
        return out

    def _done(self, result: Any) -> None:
        self._running = None
        if isinstance(result, dict):
            self.latest = result
            self.latest_at = time.monotonic()

    def _read(self) -> dict[str, Any] | None:
        """In the poller's thread: the status, or None (logged once) when it cannot be read."""
        try:
            if self._reader is None:
                from scrapy_scale.frontier.ops.status import StatusReader

                self._reader = StatusReader(self.settings, self.job)
            return self._reader.read()  # type: ignore[no-any-return]
        except Exception as e:  # noqa: BLE001 - a monitor never breaks a crawl
            if not self._warned:
                self._warned = True
                logger.warning("metrics: cannot read the frontier's status (will keep trying): %s", e)
            self._close_store()
            return None

    def _close_store(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception:  # noqa: BLE001
                logger.debug("metrics: closing the frontier reader failed", exc_info=True)

    async def close(self) -> None:
        """Wait for a running read, close the store connection and the thread."""
        self._closed = True
        if self._running is not None:
            await maybe_deferred_to_future(self._wait_running())
        pool, self._pool = self._pool, None
        if pool is not None:
            from twisted.internet import reactor

            await maybe_deferred_to_future(threads.deferToThreadPool(reactor, pool, self._close_store))  # type: ignore[arg-type]
            pool.stop()
