"""The throttle's calls to its shared state: one thread, one connection.

:class:`SharedCalls` owns the shared state (the GCRA limiter and the learned delays on
Redis or SQLite, :mod:`scrapy_scale.throttle.shared`, opened by the upkeep when the spider
opens), the throttle's thread that talks to it, and the limiter's answers: the grants not
used yet (:class:`~scrapy_scale.throttle.permits.Permits`), the sites waiting for a turn,
and the sites whose limiter call failed, which pace on this worker alone for a while.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import threads

from scrapy_scale import stats_keys as keys
from scrapy_scale.daemon_pool import DaemonThreadPool
from scrapy_scale.throttle.permits import Permits

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from scrapy_scale.throttle.pacing import Pacing
    from scrapy_scale.throttle.state import SiteState

logger = logging.getLogger("scrapy_scale.throttle")

#: how early a grant may come (seconds, at most a quarter of the spacing): a worker late on
#: one turn (its timer, the round trip) does not lower the site's average rate
TOLERANCE = 0.03
#: seconds a Redis error makes the worker pace on its own before it tries the limiter again
SHARED_BACKOFF = 5.0


class SharedCalls:
    def __init__(self, pacing: Pacing, stats: Any, wake_at: Callable[[float], None], wake: Callable[[], object]):
        self.pacing = pacing
        self.stats = stats
        self.wake_at = wake_at
        self.wake = wake
        #: the shared state (None: not open, or it could not be opened)
        self.shared: Any = None
        self.permits = Permits()  # grants of the shared limiter not used yet
        self._next: dict[str, float] = {}
        self._acquiring: set[str] = set()
        #: sites whose shared limiter call failed, until when they pace on this worker alone
        self._down: dict[str, float] = {}
        self._warned_until = 0.0
        self._warned_far: set[str] = set()
        self._pool: DaemonThreadPool | None = None

    @property
    def limiter_on(self) -> bool:
        return self.shared is not None and bool(self.shared.shared_limiter)

    def start(self) -> None:
        self._pool = DaemonThreadPool(1, 1, name="scale-throttle")
        self._pool.start()

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.stop()

    def in_thread(self, fn: Any, *args: Any) -> Deferred[Any]:
        """``fn(*args)`` in the throttle's thread, after whatever it runs now."""
        from twisted.internet import defer, reactor

        if self._pool is None:  # not open yet (tests): run it here
            return defer.maybeDeferred(fn, *args)
        return threads.deferToThreadPool(reactor, self._pool, fn, *args)  # type: ignore[arg-type]

    def hold_until(self, s: SiteState, interval: float) -> float:
        """The site ``s``, due locally, as the shared limiter paces it (``interval`` apart
        across the workers): 0.0 now, a time to ask again, or inf while its turn is asked."""
        if not self.limiter_on or self._down.get(s.key, 0.0) > time.time() or interval <= 0:
            return 0.0
        if self.permits.usable(s.key, interval):
            return 0.0
        nxt = self._next.get(s.key, 0.0)
        if nxt > time.time():
            self.wake_at(nxt)
            return nxt
        if s.key not in self._acquiring:
            self._acquiring.add(s.key)
            d = self.in_thread(self._acquire, s.key, interval, self.pacing.wait_cap(s))
            d.addCallbacks(self.acquired, self.failed, callbackArgs=(s.key,), errbackArgs=(s.key,))
        return math.inf

    def _acquire(self, key: str, interval: float, cap: float) -> tuple[float, float, float]:
        """In the throttle's thread: ask the limiter; the answer is timed here, since the
        reactor may take a while to read it (a grant read late must not be used late)."""
        wait = self.shared.acquire(key, interval, min(TOLERANCE, interval / 4), max_wait=cap)
        return wait, time.monotonic(), time.time()

    def acquired(self, answer: tuple[float, float, float], key: str) -> None:
        """The limiter's answer for the site ``key`` (reactor thread)."""
        wait, granted_mono, granted_wall = answer
        self._acquiring.discard(key)
        self._down.pop(key, None)
        if not math.isfinite(wait) or wait > (cap := self.pacing.wait_cap(self.pacing.site(key))):
            # the limiter's key held a time too far ahead (the script brought it back): a
            # wait from shared state never exceeds the cap, nor reaches the frontier's records
            if key not in self._warned_far:
                self._warned_far.add(key)
                logger.warning(
                    "throttle: the shared limiter of %s said to wait %s s; waiting %.0f s at most "
                    "(the larger of its max_delay and SCALE_RETRY_AFTER_MAX)",
                    key,
                    f"{wait:.0f}" if math.isfinite(wait) else wait,
                    cap,
                )
            self.stats.inc_value(keys.THROTTLE_WAIT_CAPPED)
            wait = cap
        if wait <= 0:
            self.permits.granted(key, granted_mono)
            self.wake()
        else:
            at = granted_wall + wait
            self._next[key] = at
            self.wake_at(at)

    def failed(self, failure: Any, key: str) -> None:
        """A call of the shared limiter for the site ``key`` failed: that site paces on this
        worker alone for a while (the others keep the limiter: one bad key is not all)."""
        self._acquiring.discard(key)
        now = time.time()
        if now >= self._warned_until:  # one line per SHARED_BACKOFF, whatever the sites
            self._warned_until = now + SHARED_BACKOFF
            logger.warning(
                "throttle: the shared limiter failed for %s (%s); pacing it on this worker alone for %.0f s",
                key,
                failure.getErrorMessage(),
                SHARED_BACKOFF,
            )
        self._down[key] = now + SHARED_BACKOFF
        self.stats.inc_value(keys.THROTTLE_SHARED_ERRORS)
        self.wake()

    def pause(self, key: str, seconds: float) -> None:
        """Share a pause of the site ``key`` with the other workers."""
        if self.limiter_on:
            self.in_thread(self.shared.pause, key, seconds).addErrback(self.failed, key)
