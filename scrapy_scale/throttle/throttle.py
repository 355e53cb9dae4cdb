"""``scrapy_scale.throttle.Throttle``: the Scrapy glue of per-site pacing.

An extension and a subscriber of :data:`scrapy_scale.signals.outcome`: latency and
success feed each site's adaptive delay, ``rate_limited`` outcomes slow the site down
and their ``Retry-After`` pauses it. It registers itself as the *pacer*
(``ScaleContext.of(crawler).pacer``) that the frontier scheduler asks, for each
buffered request, whether its site is due (:class:`scrapy_scale.context.Pacer`).
Nothing waits in a download slot: a request whose site is not due stays in the
scheduler, other sites' requests go on, and the engine is woken the moment a held site
becomes due.

The throttle coordinates units that each own their state: the sites' pacing
(:class:`~scrapy_scale.throttle.pacing.Pacing`, the decisions), the routes' learning
(:mod:`~scrapy_scale.throttle.route_learning`), the shared limiter's calls in the
throttle's thread (:mod:`~scrapy_scale.throttle.limiter_calls`), robots.txt Crawl-delays
(:mod:`~scrapy_scale.throttle.crawl_delay`), the wake timer
(:mod:`~scrapy_scale.throttle.wake`) and the upkeep: open, close, stats, learned state
saved and read back (:mod:`~scrapy_scale.throttle.upkeep`).

With a Redis frontier, every worker of the job shares one limiter per site (GCRA on the
Redis clock, :mod:`scrapy_scale.throttle.shared`) and the learned delays; with SQLite
the learned delays persist in ``throttle.db``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import NotConfigured

from scrapy_scale import compat, meta_keys, startup
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as keys
from scrapy_scale.context import ScaleContext
from scrapy_scale.outcomes import settings as outcomes_settings
from scrapy_scale.throttle import settings as throttle_settings
from scrapy_scale.throttle.crawl_delay import CrawlDelays
from scrapy_scale.throttle.limiter_calls import SharedCalls
from scrapy_scale.throttle.notes import PauseNotes
from scrapy_scale.throttle.pacing import Pacing
from scrapy_scale.throttle.policy import CRAWL_DELAY_MARGIN
from scrapy_scale.throttle.profiles import BUILTIN, Profiles
from scrapy_scale.throttle.route_learning import RouteLearning
from scrapy_scale.throttle.routing import RouteLearner
from scrapy_scale.throttle.state import SiteState
from scrapy_scale.throttle.upkeep import Upkeep
from scrapy_scale.throttle.wake import WakeTimer

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_scale.outcomes.model import Outcome

#: the throttle's glue logs under one name (users filter on it)
logger = logging.getLogger("scrapy_scale.throttle")

#: max_rate is enforced this much below the rate, so send jitter never pushes a window over it
#: (the same jitter, and margin, as a robots.txt Crawl-delay's)
RATE_MARGIN = CRAWL_DELAY_MARGIN
#: a site kept one request at a time waits for its answer DOWNLOAD_TIMEOUT + this at most
ANSWER_GRACE = 10.0


class Throttle:
    """Per-site pacing; see docs/throttle.md."""

    def __init__(self, crawler: Crawler, pacing: Pacing, *, top: int):
        self.crawler = crawler
        self.stats = crawler.stats
        self.pacing = pacing
        self.wake = WakeTimer(lambda: compat.wake_engine(crawler))
        self.calls = SharedCalls(pacing, self.stats, self.wake.at, lambda: compat.wake_engine(crawler))
        self.routes = RouteLearning(pacing, self.stats, self._paused, self.wake.at)
        self.crawl_delays = CrawlDelays(pacing, crawler.settings)
        self.upkeep = Upkeep(crawler, pacing, self.routes, self.calls, top=top)
        self.pause_notes = PauseNotes()  # INFO lines about Retry-After pauses: one per site per minute
        #: the site each request handed out went to, by fingerprint, until its attempt ends
        self._flying: dict[str, str] = {}
        #: the engine's scheduler asks this pacer (the frontier): only then does the pacing
        #: space a host by its DOWNLOAD_SLOTS delay, and the slot need not wait it again
        self.consulted = False

    @property
    def shared(self) -> Any:
        """The shared state (limiter and learned delays); None until the spider opened."""
        return self.calls.shared

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> Throttle:
        s = crawler.settings
        if not throttle_settings.ENABLED.get(s):
            raise NotConfigured("SCALE_THROTTLE_ENABLED is off")
        profiles: Profiles = throttle_settings.profiles(s)  # with SCALE_PROBE_PROFILES
        dd = s.getfloat("DOWNLOAD_DELAY")
        if dd > 0 and "min_delay" not in profiles.default_explicit:
            # DOWNLOAD_DELAY is the floor of every site no profile gives a min_delay
            profiles = profiles.with_base(
                replace(
                    BUILTIN,
                    min_delay=dd,
                    start_delay=max(dd, BUILTIN.start_delay),
                    max_delay=max(dd, BUILTIN.max_delay),
                )
            )
        cap = float(outcomes_settings.RETRY_AFTER_MAX.get(s))
        pacing = Pacing(profiles, time.time, retry_after_cap=cap, slot_delays=throttle_settings.slot_delays(s))
        pacing.answer_wait = s.getfloat("DOWNLOAD_TIMEOUT") + ANSWER_GRACE
        ext = cls(crawler, pacing, top=throttle_settings.STATS_TOP.get(s))
        if s.getbool("AUTOTHROTTLE_ENABLED"):
            logger.warning(
                "throttle: AUTOTHROTTLE_ENABLED is on as well; scrapy-scale's per-site pacing "
                "replaces it (set AUTOTHROTTLE_ENABLED = False, or SCALE_THROTTLE_ENABLED = False "
                "to keep AutoThrottle alone)"
            )
        ScaleContext.of(crawler).pacer = ext
        sig = crawler.signals
        sig.connect(ext.on_outcome, signal=scale_signals.outcome)
        sig.connect(ext._on_scheduled, signal=signals.request_scheduled)
        sig.connect(ext.crawl_delays.on_robots, signal=signals.robots_parsed)
        if pacing.slot_delays:
            sig.connect(ext._reached_downloader, signal=signals.request_reached_downloader)
        sig.connect(ext._open, signal=signals.spider_opened)
        sig.connect(ext._close, signal=signals.spider_closed)
        return ext

    def _open(self, spider: Any = None) -> None:
        self.upkeep.open()

    async def _close(self, spider: Any = None, reason: str = "") -> None:
        self.wake.cancel()
        await self.upkeep.close()

    # ---- the Pacer interface (asked by the frontier scheduler) ---------------------------

    def paused(self) -> list[tuple[str, float]]:
        """The sites paused now (by ``Retry-After``) and until when (epoch s): the progress
        line reads them (``ScaleContext.pacer``)."""
        now = time.time()
        return sorted((s.key, s.paused_until) for s in self.pacing.sites.values() if s.paused_until > now)

    def hold_until(self, domain: str) -> float:
        """0.0: a request to ``domain`` may be handed out now; else the epoch time to ask
        again (``math.inf``: this pacer wakes the engine when it may)."""
        self.consulted = True
        t = self.pacing.hold_until(domain)
        if t == math.inf and self.pacing.one_at_a_time(s := self.pacing.site(domain)):
            self.wake.at(s.last_sent + self.pacing.answer_wait)  # its end was lost: no stall
        if not t:
            t = self.routes.hold_until(domain)  # the site is due: is one of its routes?
        if t:
            self.wake.at(t)
            return t
        if not self.calls.limiter_on:
            return 0.0
        s = self.pacing.site(domain)
        return self.calls.hold_until(s, self.shared_interval(s))

    def use_routes(self, usable: Callable[[str], Iterable[str]]) -> RouteLearner:
        """Called by the egress pool: pace each route (site via egress) on its own learned
        capacity from now on, and hold a site while none of its ``usable(host)`` egresses'
        routes is ready. Returns the gate the pool asks before it picks a route."""
        # a request holds a route while the downloader has it (or a grace, unknown)
        return self.routes.use(usable, compat.downloader_active(self.crawler))

    def one_at_a_time(self, domain: str) -> bool:
        """``domain`` gets one request in flight, spaced from the previous one's answer (a
        Crawl-delay, a low ``max_rate``): the egress pool spends no probe on its one slot."""
        return self.pacing.one_at_a_time(self.pacing.site(domain))

    def spacing(self, domain: str) -> float:
        """Seconds between two requests to ``domain`` as paced now."""
        return self.pacing.interval(self.pacing.site(domain))

    def handed_out(self, request: Request, domain: str, fingerprint: str | None) -> None:
        s = self.pacing.handed_out(domain)
        self.calls.permits.used(s.key)
        self.routes.handed_out(request, domain)
        if fingerprint:
            old = self._flying.get(fingerprint)
            if old is not None:
                self.pacing.ended(old)
            self._flying[fingerprint] = s.key

    def shared_interval(self, s: SiteState) -> float:
        p = s.profile
        rate_gap = 1.0 / p.max_rate * (1 + RATE_MARGIN) if p.max_rate else 0.0
        return max(s.delay, self.pacing.floor(s), rate_gap)

    # ---- outcomes ---------------------------------------------------------------------------

    def on_outcome(self, outcome: Outcome, request: Request | None = None, **kw: Any) -> None:
        """The outcome signal's receiver: pacing learns from every attempt."""
        # ended before the egress pool saw it: no route held; robots.txt's too
        self.routes.settled(outcome, request)
        if outcome.internal or not outcome.domain:
            return
        key = self._flying.pop(outcome.fingerprint, None)
        if key is not None:
            self._ended(key)
        if self.routes.on and outcome.egress is not None:
            self.routes.learn(outcome)
        elif outcome.cls == "rate_limited":
            self._rate_limited(outcome)
        elif outcome.slow_down:
            # overloaded, without a Retry-After (so classed transient): pressure when such
            # answers are frequent and rise with the rate, noise when isolated
            self.pacing.on_overloaded(outcome.domain, outcome.latency)
        elif outcome.responded and outcome.done:
            self.pacing.on_success(outcome.domain, outcome.latency)
        elif outcome.latency:
            self.pacing.on_error(outcome.domain, outcome.latency)

    def _on_scheduled(self, request: Request, **kw: Any) -> None:
        """A request handed out that goes back to the scheduler without an outcome of its
        attempt (a redirect, the egress pool's wait, the not-before guard) is not in flight
        any more: kept counted, a site at its ``concurrency`` was held for good. Popped, so a
        copy of its meta (a retry, ``meta=response.meta``) ends the attempt once at most."""
        self.routes.release(request)  # a route held by the attempt that went back
        fp = request.meta.get(meta_keys.FINGERPRINT)
        key = self._flying.pop(fp, None) if isinstance(fp, str) else None
        if key is not None:
            self._ended(key)

    def _ended(self, key: str) -> None:
        """A request handed out to the site ``key`` ended: wake the engine when that frees
        the site (its ``concurrency``; a site kept one at a time is due a spacing after now)."""
        self.pacing.ended(key)
        s = self.pacing.site(key)
        if self.pacing.one_at_a_time(s):
            self.wake.at(s.last_answer + self.pacing.interval(s))
        elif s.profile.concurrency is not None:
            compat.wake_engine(self.crawler)

    def _rate_limited(self, outcome: Outcome) -> None:
        self.stats.inc_value(keys.THROTTLE_RATE_LIMITED)
        pause = self.pacing.on_rate_limited(outcome.domain, outcome.latency, outcome.retry_after)
        # outcome.retry_after is clamped to SCALE_RETRY_AFTER_MAX where it was made (warned there)
        self.pacing.capped.clear()
        if pause > 0:
            self._paused(outcome.domain, pause, "Retry-After")

    def _paused(self, domain: str, pause: float, why: str) -> None:
        """The site was paused: say so (once a minute per site at INFO), wake the engine when
        it ends, and share the pause with the other workers."""
        s = self.pacing.site(domain)
        self.calls.permits.used(s.key)
        quiet = self.pause_notes.note(s.key)
        if quiet is None:
            logger.debug("throttle: %s paused %.1f s (%s)", s.key, pause, why)
        elif quiet:
            logger.info(
                "throttle: %s paused %.1f s (%s); %d more pauses since its last line (at DEBUG)",
                s.key,
                pause,
                why,
                quiet,
            )
        else:
            logger.info("throttle: %s paused %.1f s (%s)", s.key, pause, why)
        self.wake.at(s.paused_until)
        self.calls.pause(s.key, pause)

    def _reached_downloader(self, request: Request, **kw: Any) -> None:
        """A request whose download slot is its host, with a ``DOWNLOAD_SLOTS`` delay: the
        pacing already spaces the host by at least that delay (a floor), so the slot must not
        wait it again. A slot named otherwise (``download_slot`` meta) keeps its delay, and so
        does every slot when no scheduler asks the pacer (Scrapy's own, scrapy-redis...):
        then nothing else spaces the host."""
        if not self.consulted:
            return
        key = request.meta.get("download_slot")
        if key in self.pacing.slot_delays and key == urlsplit(request.url).hostname:
            compat.drop_slot_delay(self.crawler, key)
