"""Thin glue between the frontier scheduler and Scrapy's engine and reactor.

- :class:`EmptySignalGate`: Scrapy's engine sends ``scheduler_empty`` each time
  ``next_request()`` returns None. The frontier returns None also while a request
  is on its way (in the outbox, or being written and leased by the store thread),
  so the signal would say "empty" while work is pending, and a spider that
  schedules lazily on it (Scrapy's lazy-start pattern) would be told to add more
  too early. The gate drops the signal while the scheduler still has work for
  this worker; the scheduler wakes the engine after the sync, and the engine's
  next None sends it for real.
- :func:`install_backout`: the engine's ``needs_backout()`` says whether it can send
  more now; Scrapy's lazy start pattern asks it before yielding the next start
  request (and waits for ``scheduler_empty`` when True). With Scrapy's scheduler a
  request just scheduled goes to the downloader at once, so the answer turns True
  as soon as the downloader is full. The frontier's request first waits in the
  outbox for a sync, the downloader stays empty, and ``start()`` ran ahead. So
  ``needs_backout()`` also answers True while the engine waits for a sync that
  brings it work (see ``Scheduler.engine_backs_out``).
- :func:`stop_crawl`: the frontier cannot go on: the spider closes (``frontier_failed``)
  and the process exits 1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import signals

from scrapy_scale import compat, exitcode
from scrapy_scale import stats_keys as keys
from scrapy_scale.frontier.scheduling.stats import FrontierStats

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class EmptySignalGate:
    """Stands in for the engine's ``signals`` (a SignalManager); forwards everything
    except ``scheduler_empty`` while ``has_work()`` is True."""

    def __init__(self, inner: Any, has_work: Callable[[], bool]):
        self._inner = inner
        self._has_work = has_work

    def send_catch_log(self, signal: Any = None, **kwargs: Any) -> list[Any]:
        if signal is signals.scheduler_empty and self._has_work():
            return []
        return self._inner.send_catch_log(signal, **kwargs)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install_empty_gate(engine: Any, has_work: Callable[[], bool]) -> Callable[[], None]:
    """Put the gate in front of ``engine.signals``; returns what takes it out again."""
    inner = getattr(engine, "signals", None)
    if engine is None or inner is None:
        return lambda: None
    engine.signals = EmptySignalGate(inner, has_work)

    def remove() -> None:
        if isinstance(engine.signals, EmptySignalGate):
            engine.signals = inner

    return remove


def install_backout(engine: Any, backs_out: Callable[[], bool]) -> Callable[[], None]:
    """Make ``engine.needs_backout()`` also True while ``backs_out()``; returns what
    puts the engine's own method back."""
    own = getattr(engine, "needs_backout", None)
    if engine is None or own is None:
        return lambda: None

    def needs_backout() -> bool:
        return bool(own()) or backs_out()

    engine.needs_backout = needs_backout

    def remove() -> None:
        if engine.__dict__.get("needs_backout") is needs_backout:
            del engine.needs_backout

    return remove


def stop_crawl(crawler: Crawler, stats: FrontierStats, message: str) -> None:
    """The frontier cannot go on: say why, close the spider (frontier_failed), exit 1."""
    logger.error("frontier: the crawl cannot go on, stopping it: %s", message)
    stats.set(keys.FRONTIER_ERROR, message[:500])
    exitcode.request(1, f"the frontier stopped the crawl: {message[:200]}", crawler)
    engine = compat.engine_of(crawler)
    if engine is not None and getattr(engine, "spider", None) is not None:
        from scrapy.utils.defer import deferred_from_coro

        deferred_from_coro(engine.close_spider_async(reason="frontier_failed"))
