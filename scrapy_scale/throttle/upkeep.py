"""The throttle's upkeep: open and close, stats, and saving/reading learned pacing.

:class:`Upkeep` owns the periodic tick, what was saved when, and the learned state read
back (checked, with one warning per site); the shared state it saves to and the thread
that talks to it are :class:`~scrapy_scale.throttle.limiter_calls.SharedCalls`'.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task

from scrapy_scale import stats_keys as keys
from scrapy_scale.config import core_settings
from scrapy_scale.redact import redact_url
from scrapy_scale.throttle import settings as throttle_settings
from scrapy_scale.throttle.learned import LearnedRecord
from scrapy_scale.throttle.routing import split_route
from scrapy_scale.throttle.shared import open_shared

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_scale.throttle.limiter_calls import SharedCalls
    from scrapy_scale.throttle.pacing import Pacing
    from scrapy_scale.throttle.route_learning import RouteLearning

logger = logging.getLogger("scrapy_scale.throttle")

#: seconds between stats updates and learned-state saves (and, with Redis, reads)
TICK = 5.0


class Upkeep:
    """Lifecycle, stats and persistence of the throttle."""

    def __init__(self, crawler: Crawler, pacing: Pacing, routes: RouteLearning, calls: SharedCalls, *, top: int):
        self.crawler = crawler
        self.stats = crawler.stats
        self.pacing = pacing
        self.routes = routes
        self.calls = calls
        self.top = top
        #: sites whose learned state read back was refused (warned once each)
        self._warned_bad: set[str] = set()
        self._loop: task.LoopingCall | None = None
        self._saved_at = 0.0
        #: sites whose learned delay was adopted when the spider opened
        self.restored = 0

    def load_learned(self) -> None:
        """Open the shared state and adopt the learned delays, when the spider opens: after
        the frontier opened its store, so a frontier URL that cannot be reached stops the
        start with its one line, not this warning before it."""
        s = self.crawler.settings
        job = core_settings.JOB.get(s) or getattr(self.crawler.spidercls, "name", None) or "default"
        url = throttle_settings.throttle_url(s)
        calls = self.calls
        calls.shared, learned = None, {}
        try:
            calls.shared = open_shared(url, job)
            learned = calls.shared.load()
        except Exception as e:  # noqa: BLE001 - pacing works without it, starting from scratch
            # what the learned state holds never turns the shared limiter off (issue 35 item
            # 2): the limiter stays on, and a failed limiter call backs off its site alone
            logger.warning(
                "throttle: learned delays at %s cannot be read (%s); starting from the profiles%s",
                redact_url(url),
                e,
                "; the shared limiter stays on" if calls.limiter_on else "",
            )
        self.restored = self._restore(learned)

    def open(self) -> None:
        self.load_learned()
        if self.restored:
            logger.info("throttle: started from %d learned site delay(s)", self.restored)
        self.calls.start()
        self._loop = task.LoopingCall(self._tick)
        self._loop.start(TICK, now=False)

    async def close(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._write_stats()
        shared, learned = self.calls.shared, self._export()

        def final() -> None:
            if shared is None:
                return
            try:
                shared.save(learned)
            except Exception as e:  # noqa: BLE001 - closing must not raise
                logger.warning("throttle: learned delays not saved: %s", e)
            shared.close()

        # in the throttle's thread, after whatever it runs now (one connection, one thread)
        try:
            await maybe_deferred_to_future(self.calls.in_thread(final))
        finally:
            self.calls.stop()

    def _tick(self) -> None:
        self._write_stats()
        shared = self.calls.shared
        if shared is None:
            return
        since, self._saved_at = self._saved_at, time.time()
        changed = self._export(since)

        def sync() -> dict[str, dict[str, float]]:
            shared.save(changed)
            return shared.load() if shared.shared_limiter else {}

        self.calls.in_thread(sync).addCallbacks(self._restore, lambda f: None)

    def _restore(self, learned: dict[str, dict[str, float]]) -> int:
        """Adopt learned state read back; warn once per site about state that was unusable."""
        sites = {k: v for k, v in learned.items() if split_route(k) is None}
        routes = {k: v for k, v in learned.items() if split_route(k) is not None}
        n = self.pacing.restore(sites)
        self.routes.route_pacing.restore(routes)
        for pacing in (self.pacing, self.routes.route_pacing):
            for site, why in pacing.rejected:
                if site not in self._warned_bad:
                    self._warned_bad.add(site)
                    logger.warning("throttle: learned pacing of %s read back: %s", site, why)
                self.stats.inc_value(keys.THROTTLE_LEARNED_REJECTED)
            pacing.rejected.clear()
        return n

    def _export(self, since: float = 0.0) -> dict[str, LearnedRecord]:
        """Learned state to save: the sites', and the routes' (keyed ``"<site> via <egress>"``)."""
        return {**self.pacing.export(since), **self.routes.route_pacing.export(since)}

    def _write_stats(self) -> None:
        sites = sorted(self.pacing.sites.values(), key=lambda s: -s.sent)
        shown, rest = sites[: self.top], sites[self.top :]
        set_value = self.stats.set_value
        for s in shown:
            set_value(keys.throttle_site(s.key, "delay"), round(self.pacing.interval(s), 3))
            set_value(keys.throttle_site(s.key, "requests"), s.sent)
            set_value(keys.throttle_site(s.key, "rate"), round(1.0 / s.gap, 3) if s.gap else 0.0)
            if s.rate_limited:
                set_value(keys.throttle_site(s.key, "rate_limited"), s.rate_limited)
            if s.paused_seconds:
                set_value(keys.throttle_site(s.key, "paused_seconds"), round(s.paused_seconds, 1))
        if rest:
            set_value(keys.throttle_site(keys.THROTTLE_OTHER, "requests"), sum(s.sent for s in rest))
            set_value(keys.throttle_site(keys.THROTTLE_OTHER, "rate_limited"), sum(s.rate_limited for s in rest))
            set_value(
                keys.throttle_site(keys.THROTTLE_OTHER, "paused_seconds"), round(sum(s.paused_seconds for s in rest), 1)
            )
        set_value(keys.THROTTLE_SITES, len(sites))
        if self.routes.on:
            set_value(keys.THROTTLE_ROUTES, len(self.routes.route_pacing.sites))
            if self.routes.route_pacing.beats:
                set_value(keys.THROTTLE_ROUTE_BEATS, self.routes.route_pacing.beats)
        if self.calls.permits.late_used:
            set_value(keys.THROTTLE_GRANTS_LATE, self.calls.permits.late_used)
        set_value(keys.THROTTLE_PAUSED_SECONDS, round(sum(s.paused_seconds for s in sites), 1))
