"""``scrapy_scale.throttle.Throttle``: the Scrapy glue of per-site pacing.

An extension and a subscriber of :data:`scrapy_scale.signals.outcome`: latency and
success feed each site's adaptive delay, ``rate_limited`` outcomes slow the site down
and their ``Retry-After`` pauses it. It registers itself as the *pacer*
(``ScaleContext.of(crawler).pacer``) that the frontier scheduler asks, for each
buffered request, whether its site is due (:class:`scrapy_scale.context.Pacer`).
Nothing waits in a download slot: a request whose site is not due stays in the
scheduler, other sites' requests go on, and the engine is woken the moment a held site
becomes due.

With a Redis frontier, every worker of the job shares one limiter per site (GCRA on the
Redis clock, :mod:`scrapy_scale.throttle.shared`) and the learned delays; with SQLite
the learned delays persist in ``throttle.db``. The decisions are in
:mod:`scrapy_scale.throttle.policy`.
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
from twisted.internet import task, threads
from twisted.python.threadpool import ThreadPool

from scrapy_scale import compat, meta, startup
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as keys
from scrapy_scale.context import ScaleContext
from scrapy_scale.outcomes import settings as outcomes_settings
from scrapy_scale.throttle import settings as throttle_settings
from scrapy_scale.throttle.notes import PauseNotes
from scrapy_scale.throttle.permits import Permits
from scrapy_scale.throttle.policy import CRAWL_DELAY_MARGIN, Pacing, SiteState
from scrapy_scale.throttle.profiles import BUILTIN, Profiles
from scrapy_scale.throttle.routing import RouteLearner, RoutePacing
from scrapy_scale.throttle.upkeep import PacerUpkeep

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from scrapy_scale.outcomes.model import Outcome

logger = logging.getLogger(__name__)

#: max_rate is enforced this much below the rate, so send jitter never pushes a window over it
#: (the same jitter, and margin, as a robots.txt Crawl-delay's)
RATE_MARGIN = CRAWL_DELAY_MARGIN
#: how early a grant may come (seconds, at most a quarter of the spacing): a worker late on
#: one turn (its timer, the round trip) does not lower the site's average rate
TOLERANCE = 0.03
#: a site kept one request at a time waits for its answer DOWNLOAD_TIMEOUT + this at most
ANSWER_GRACE = 10.0
#: seconds a Redis error makes the worker pace on its own before it tries the limiter again
SHARED_BACKOFF = 5.0


class Throttle(PacerUpkeep):
    """Per-site pacing; see docs/throttle.md."""

    def __init__(self, crawler: Crawler, pacing: Pacing, shared: Any, *, top: int):
        self.crawler = crawler
        self.stats = crawler.stats
        self.pacing = pacing
        #: each route's own capacity (site via egress); used once the egress pool asks for it
        self.route_pacing = RoutePacing(pacing.profiles, pacing.clock, retry_after_cap=pacing.retry_after_cap)
        self.learner: RouteLearner | None = None
        self.pause_notes = PauseNotes()  # INFO lines about Retry-After pauses: one per site per minute
        self.shared = shared
        self.top = top
        self._flying: dict[str, str] = {}
        self._permits = Permits()  # grants of the shared limiter not used yet
        self._shared_next: dict[str, float] = {}
        self._acquiring: set[str] = set()
        #: sites whose shared limiter call failed, until when they pace on this worker alone
        self._shared_down: dict[str, float] = {}
        self._shared_warned_until = 0.0
        #: the engine's scheduler asks this pacer (the frontier): only then does the pacing
        #: space a host by its DOWNLOAD_SLOTS delay, and the slot need not wait it again
        self.consulted = False
        self._timer: Any = None
        self._timer_at = math.inf
        self._pool: ThreadPool | None = None
        self._loop: task.LoopingCall | None = None
        self._saved_at = 0.0
        #: sites already warned about (bad learned state read back; a shared wait capped)
        self._warned_bad: set[str] = set()
        self._warned_far: set[str] = set()
        self.restored = 0

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
        ext = cls(crawler, pacing, None, top=throttle_settings.STATS_TOP.get(s))
        if s.getbool("AUTOTHROTTLE_ENABLED"):
            logger.warning(
                "throttle: AUTOTHROTTLE_ENABLED is on as well; scrapy-scale's per-site pacing "
                "replaces it (set AUTOTHROTTLE_ENABLED = False, or SCALE_THROTTLE_ENABLED = False "
                "to keep AutoThrottle alone)"
            )
        ScaleContext.of(crawler).pacer = ext
        sig = crawler.signals
        sig.connect(ext._on_outcome, signal=scale_signals.outcome)
        sig.connect(ext._on_scheduled, signal=signals.request_scheduled)
        sig.connect(ext._on_robots, signal=signals.robots_parsed)
        if pacing.slot_delays:
            sig.connect(ext._reached_downloader, signal=signals.request_reached_downloader)
        sig.connect(ext._open, signal=signals.spider_opened)
        sig.connect(ext._close, signal=signals.spider_closed)
        return ext

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
            self._wake_at(s.last_sent + self.pacing.answer_wait)  # its end was lost: no stall
        if not t and self.learner is not None:
            t = self.learner.hold_until(domain)  # the site is due: is one of its routes?
        if t:
            self._wake_at(t)
            return t
        if self.shared is None or not self.shared.shared_limiter:
            return 0.0
        s = self.pacing.site(domain)
        if self._shared_down.get(s.key, 0.0) > time.time():
            return 0.0
        interval = self.shared_interval(s)
        if interval <= 0:
            return 0.0
        if self._permits.usable(s.key, interval):
            return 0.0
        nxt = self._shared_next.get(s.key, 0.0)
        if nxt > time.time():
            self._wake_at(nxt)
            return nxt
        if s.key not in self._acquiring:
            self._acquiring.add(s.key)
            d = self._in_thread(self._acquire, s.key, interval, self.pacing.wait_cap(s))
            d.addCallbacks(self._acquired, self._shared_failed, callbackArgs=(s.key,), errbackArgs=(s.key,))
        return math.inf

    def use_routes(self, usable: Callable[[str], Iterable[str]]) -> RouteLearner:
        """Called by the egress pool: pace each route (site via egress) on its own learned
        capacity from now on, and hold a site while none of its ``usable(host)`` egresses'
        routes is ready. Returns the gate the pool asks before it picks a route."""
        if self.learner is None:
            # a request holds a route while the downloader has it (or a grace, unknown)
            self.learner = RouteLearner(self.pacing, self.route_pacing, compat.downloader_active(self.crawler))
        self.learner.candidates = usable
        return self.learner

    def spacing(self, domain: str) -> float:
        """Seconds between two requests to ``domain`` as paced now."""
        return self.pacing.interval(self.pacing.site(domain))

    def handed_out(self, request: Request, domain: str, fingerprint: str | None) -> None:
        s = self.pacing.handed_out(domain)
        self._permits.used(s.key)
        m = request.meta
        if self.learner is not None and not ("proxy" in m and meta.EGRESS not in m):
            # the egress pool will route it (a project's own proxy is not the pool's)
            self.learner.reserve(request, domain)
        if fingerprint:
            old = self._flying.get(fingerprint)
            if old is not None:
                self.pacing.ended(old)
            self._flying[fingerprint] = s.key

    def shared_interval(self, s: SiteState) -> float:
        p = s.profile
        rate_gap = 1.0 / p.max_rate * (1 + RATE_MARGIN) if p.max_rate else 0.0
        return max(s.delay, self.pacing.floor(s), rate_gap)

    # ---- the shared limiter's answers (reactor thread) -------------------------------------

    def _acquire(self, key: str, interval: float, cap: float) -> tuple[float, float, float]:
        """In the throttle's thread: ask the limiter; the answer is timed here, since the
        reactor may take a while to read it (a grant read late must not be used late)."""
        wait = self.shared.acquire(key, interval, min(TOLERANCE, interval / 4), max_wait=cap)
        return wait, time.monotonic(), time.time()

    def _acquired(self, answer: tuple[float, float, float], key: str) -> None:
        wait, granted_mono, granted_wall = answer
        self._acquiring.discard(key)
        self._shared_down.pop(key, None)
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
            self._permits.granted(key, granted_mono)
            compat.wake_engine(self.crawler)
        else:
            at = granted_wall + wait
            self._shared_next[key] = at
            self._wake_at(at)

    def _shared_failed(self, failure: Any, key: str) -> None:
        """A call of the shared limiter for the site ``key`` failed: that site paces on this
        worker alone for a while (the others keep the limiter: one bad key is not all)."""
        self._acquiring.discard(key)
        now = time.time()
        if now >= self._shared_warned_until:  # one line per SHARED_BACKOFF, whatever the sites
            self._shared_warned_until = now + SHARED_BACKOFF
            logger.warning(
                "throttle: the shared limiter failed for %s (%s); pacing it on this worker alone for %.0f s",
                key,
                failure.getErrorMessage(),
                SHARED_BACKOFF,
            )
        self._shared_down[key] = now + SHARED_BACKOFF
        self.stats.inc_value(keys.THROTTLE_SHARED_ERRORS)
        compat.wake_engine(self.crawler)

    # ---- outcomes ---------------------------------------------------------------------------

    def _on_outcome(self, outcome: Outcome, request: Request | None = None, **kw: Any) -> None:
        if self.learner is not None:
            if request is not None:  # ended before the egress pool saw it: no route held
                self.learner.release(request)
            if outcome.egress is not None:  # robots.txt's too
                self.learner.settled(str(outcome.egress), outcome.responded)
        if outcome.internal or not outcome.domain:
            return
        key = self._flying.pop(outcome.fingerprint, None)
        if key is not None:
            self._ended(key)
        if self.learner is not None and outcome.egress is not None:
            self._route_outcome(self.learner, outcome)
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
        if self.learner is not None:  # a route held by the attempt that went back
            self.learner.release(request)
        fp = request.meta.get(meta.FINGERPRINT)
        key = self._flying.pop(fp, None) if isinstance(fp, str) else None
        if key is not None:
            self._ended(key)

    def _ended(self, key: str) -> None:
        """A request handed out to the site ``key`` ended: wake the engine when that frees
        the site (its ``concurrency``; a site kept one at a time is due a spacing after now)."""
        self.pacing.ended(key)
        s = self.pacing.site(key)
        if self.pacing.one_at_a_time(s):
            self._wake_at(s.last_answer + self.pacing.interval(s))
        elif s.profile.concurrency is not None:
            compat.wake_engine(self.crawler)

    def _route_outcome(self, learner: RouteLearner, outcome: Outcome) -> None:
        """Through an egress: the route learns from it; the site from site-wide evidence only."""
        host, egress, latency = outcome.domain, str(outcome.egress), outcome.latency
        if outcome.cls == "rate_limited":
            self.stats.inc_value(keys.THROTTLE_RATE_LIMITED)
            pause = learner.on_rate_limited(host, egress, latency, outcome.retry_after)
            self.route_pacing.capped.clear()
            if pause > 0:
                self._paused(outcome.domain, pause, "Retry-After on most of its routes")
            else:
                self._wake_at(learner.route(host, egress).paused_until)
        elif outcome.slow_down:
            learner.on_overloaded(host, egress, latency)
        elif outcome.cls == "blocked":
            wait = learner.on_blocked(host, egress)
            if wait > 0:
                self.stats.inc_value(keys.THROTTLE_BLOCKED_WAITS)
                self._paused(outcome.domain, wait, "blocked on every route it was tried through")
        elif outcome.responded and outcome.done:
            learner.on_success(host, egress, latency)
        elif latency:
            learner.on_error(host, egress, latency)

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
        self._permits.used(s.key)
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
        self._wake_at(s.paused_until)
        if self.shared is not None and self.shared.shared_limiter:
            self._in_thread(self.shared.pause, s.key, pause).addErrback(self._shared_failed, s.key)

    def _on_robots(self, robotparser: Any = None, request: Request | None = None, **kw: Any) -> None:
        if robotparser is None or request is None or not hasattr(robotparser, "crawl_delay"):
            return
        s = self.crawler.settings
        ua = s.get("ROBOTSTXT_USER_AGENT") or s.get("USER_AGENT") or "*"
        try:
            delay = robotparser.crawl_delay(ua)
        except Exception:  # noqa: BLE001 - a parser without crawl-delay support
            return
        host = (urlsplit(request.url).hostname or "").lower()
        self.pacing.touch(host)  # robots.txt was a request to the site too
        if delay is not None and delay >= 0:
            self.pacing.set_crawl_delay(host, float(delay))
            logger.info("throttle: %s has robots.txt Crawl-delay %.3g s", host, float(delay))

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

    # ---- waking the engine -------------------------------------------------------------------

    def _wake_at(self, at: float) -> None:
        if not math.isfinite(at) or at >= self._timer_at - 0.001:
            return
        from twisted.internet import reactor

        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer_at = at
        self._timer = reactor.callLater(max(0.0, at - time.time()), self._fire)  # type: ignore[arg-type]

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        compat.wake_engine(self.crawler)

    def _in_thread(self, fn: Any, *args: Any) -> Any:
        from twisted.internet import reactor

        if self._pool is None:  # not open yet (tests): run it here
            from twisted.internet import defer

            return defer.maybeDeferred(fn, *args)
        return threads.deferToThreadPool(reactor, self._pool, fn, *args)  # type: ignore[arg-type]
