"""Progress of a long run: rates from recent samples, an ETA, and one line for humans.

:class:`RateWindow` and :func:`progress_line` are plain Python (an injectable clock: the
caller passes the times), shared by the periodic log line (:class:`ProgressLog`), the
live view (``scrapy scale watch``) and ``scrapy scale status``.

``ProgressLog`` (enabled by the add-on; ``SCALE_PROGRESS_INTERVAL = 0`` turns it off)
logs every ``SCALE_PROGRESS_INTERVAL`` seconds::

    progress: 1,234 done, 5 failed, 7,878 pending, 12 delayed, 64 leased; 310 pages/min, 280 items/min; ETA 25 min

done / failed / pending / delayed / leased are the frontier's states, as ``scrapy scale
status`` counts them (pending: eligible now; delayed and leased shown when not zero), the job's (every worker's, from the frontier); pages/min and
items/min are this process's final outcomes and stored items over the last minutes (as
the one :class:`~.metrics.CrawlMetrics` of the crawler counts them);
the ETA divides what is left (pending, delayed, leased) by the job's recent rate of
finished requests (done + failed), and is no sooner than the latest delayed request may
go or the last paused site's pause ends (:func:`waiting`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import defer, task

from scrapy_scale.config import core_settings
from scrapy_scale.monitor import settings as S
from scrapy_scale.outcomes.model import DONE_CLASSES

logger = logging.getLogger(__name__)

#: seconds of samples a rate is computed over (at least two samples)
WINDOW = 300.0
DONE_VALUES = frozenset(c.value for c in DONE_CLASSES)


class RateWindow:
    """Per-second rate of a growing count over the last ``window`` seconds."""

    def __init__(self, window: float = WINDOW):
        self.window = window
        self.samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> None:
        self.samples.append((t, value))
        while len(self.samples) > 2 and self.samples[1][0] <= t - self.window:
            self.samples.popleft()

    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, v0), (t1, v1) = self.samples[0], self.samples[-1]
        if t1 <= t0:
            return None
        return max(0.0, (v1 - v0) / (t1 - t0))


#: the longest wait an ETA counts (a next-eligible or pause time further ahead is clamped)
WAIT_MAX = 7 * 86_400.0
_warned_wait = False


def eta_seconds(remaining: int, rate: float | None, wait: float = 0.0) -> float | None:
    """Seconds until ``remaining`` requests are finished at ``rate`` per second, and no
    sooner than ``wait`` (:func:`waiting`: the last delayed request, the last paused site);
    0 when nothing is left, None (unknown) when the rate is unknown or zero: a wait says
    when work may go again, not when it is done."""
    if remaining <= 0:
        return 0.0
    if not rate:
        return None
    return max(remaining / rate, wait)


def waiting(status: Mapping[str, Any] | None, paused_until: list[float], now: float) -> float:
    """Seconds until the job's waiting work may go: its latest delayed request (a retry's
    backoff, a request the pacer put back) and its paused sites. The times are read from
    shared state: one that is not a finite number is skipped, one more than
    :data:`WAIT_MAX` ahead is clamped (one warning per process)."""
    times = list(paused_until)
    last = (status or {}).get("last_eligible_at")
    if last is not None:
        times.append(last)
    wait = 0.0
    for t in times:
        try:
            t = float(t)
        except (TypeError, ValueError, OverflowError):
            t = math.nan
        if not math.isfinite(t) or t - now > WAIT_MAX:
            _warn_wait(t)
            if not math.isfinite(t):
                continue
            t = now + WAIT_MAX
        wait = max(wait, t - now)
    return wait


def _warn_wait(t: float) -> None:
    global _warned_wait
    if not _warned_wait:
        _warned_wait = True
        logger.warning("progress: a wait time %r in the shared state is not usable; the ETA skips or clamps it", t)


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 60:
        return f"{max(1.0, seconds):.0f} s" if seconds else "0 s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86_400 * 2:
        h, m = divmod(int(seconds // 60), 60)
        return f"{h} h {m} min"
    return f"{seconds / 86_400:.1f} days"


def _per_min(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 60:,.0f}"


def progress_line(
    counts: Mapping[str, int] | None,
    pages_rate: float | None,
    items_rate: float | None,
    eta: float | None,
    done: int = 0,
    failed: int = 0,
    retries: int | None = None,
    paused: int = 0,
) -> str:
    """One line: the job's counts (or this process's ``done``/``failed`` when ``counts`` is
    None: no frontier), rates per minute and the ETA. ``retries``: how many of the delayed
    are retries (the rest are held by pacing; None: not known); ``paused``: sites paused."""
    if counts is not None:
        c = {k: int(counts.get(k, 0)) for k in ("done", "failed", "pending", "delayed", "leased")}
        # the frontier's states, each word meaning what it means in `status` (pending: eligible
        # now; delayed: not before a later time; leased: handed to a worker)
        text = f"{c['done']:,} done, {c['failed']:,} failed, {c['pending']:,} pending"
        if c["delayed"]:
            text += f", {delayed_text(c['delayed'], retries)}"
        if c["leased"]:
            text += f", {c['leased']:,} leased"
        if paused:
            text += f", {paused} site{'s' if paused > 1 else ''} paused"
    else:
        text = f"{done:,} done, {failed:,} failed"
    text += f"; {_per_min(pages_rate)} pages/min, {_per_min(items_rate)} items/min"
    if counts is not None:
        text += f"; ETA {format_eta(eta)}"
    return text


def delayed_text(delayed: int, retries: int | None) -> str:
    """``12 delayed`` or, when known, ``12 delayed (8 retry backoff, 4 held by pacing)``."""
    if retries is None or not delayed:
        return f"{delayed:,} delayed"
    retries = min(max(0, retries), delayed)
    return f"{delayed:,} delayed ({retries:,} retry backoff, {delayed - retries:,} held by pacing)"


def remaining(counts: Mapping[str, int]) -> int:
    return sum(int(counts.get(k, 0)) for k in ("pending", "delayed", "leased"))


class ProgressLog:
    """Extension: the progress line every ``SCALE_PROGRESS_INTERVAL`` seconds."""

    def __init__(self, crawler: Any, interval: float):
        from scrapy_scale.monitor import live_metrics

        self.crawler = crawler
        self.interval = interval
        #: the counts the metrics and ``scrapy scale watch`` show too (one subscriber)
        self.metrics = live_metrics.crawl_metrics(crawler)
        self.pages = RateWindow(max(WINDOW, 5 * interval))
        self.item_rate = RateWindow(max(WINDOW, 5 * interval))
        self.finished = RateWindow(max(WINDOW, 5 * interval))  # the job's done + failed
        self._loop: task.LoopingCall | None = None
        self._poller: Any = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> ProgressLog:
        interval = S.PROGRESS_INTERVAL.get(crawler.settings)
        if not interval:
            raise NotConfigured("SCALE_PROGRESS_INTERVAL = 0")
        ext = cls(crawler, interval)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def counts(self) -> tuple[int, int, int]:
        """This process's (done, failed, items stored)."""
        s = self.metrics.snapshot()
        done = sum(n for c, n in s["requests"].items() if c in DONE_VALUES)
        return done, sum(s["requests"].values()) - done, int(s["items_stored"])

    def spider_opened(self, spider: Any) -> None:
        from scrapy_scale.monitor.frontier_poller import FrontierPoller

        job = core_settings.JOB.get(self.crawler.settings) or spider.name
        self._poller = FrontierPoller.install(self.crawler, job)
        self.sample(time.monotonic(), None)
        self._loop = task.LoopingCall(self.tick)
        self._loop.start(self.interval, now=False).addErrback(
            lambda f: logger.error("progress line failed: %s", f.getErrorMessage())
        )

    def spider_closed(self, spider: Any, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def tick(self) -> defer.Deferred[None]:
        return deferred_from_coro(self._tick())  # type: ignore[no-any-return]

    async def _tick(self) -> None:
        status = None
        if self._poller is not None:
            status = await maybe_deferred_to_future(self._poller.refresh())
        logger.info("progress: %s", self.sample(time.monotonic(), status))

    def sample(self, now: float, status: Mapping[str, Any] | None) -> str:
        """Add a sample at ``now`` and return the line."""
        done, failed, items = self.counts()
        self.pages.add(now, done + failed)
        self.item_rate.add(now, items)
        counts = status.get("counts") if status else None
        pauses = self.pauses()
        if counts is not None:
            self.finished.add(now, int(counts.get("done", 0)) + int(counts.get("failed", 0)))
            wait = waiting(status, [until for _, until in pauses], time.time())
            eta = eta_seconds(remaining(counts), self.finished.rate(), wait)
        else:
            eta = None
        retries = status.get("delayed_retries") if status else None
        line = progress_line(counts, self.pages.rate(), self.item_rate.rate(), eta, done, failed, retries, len(pauses))
        if pauses:
            line += "; paused: " + ", ".join(f"{site} for {max(0.0, u - time.time()):.0f} s" for site, u in pauses[:5])
        return line

    def pauses(self) -> list[tuple[str, float]]:
        """The sites this process's throttle has paused now, and until when."""
        from scrapy_scale.context import ScaleContext

        pacer = ScaleContext.of(self.crawler).pacer
        return list(pacer.paused()) if pacer is not None else []
