"""Per-site pacing decisions: the adaptive delay, Retry-After pauses, the local gate.

Plain Python with an injectable clock (epoch seconds); no reactor, no Scrapy. The
Scrapy glue (:mod:`scrapy_scale.throttle.pacer`) feeds it outcomes and asks it, for
each request the scheduler is about to hand out, whether the request's site is due.

The delay of a site (seconds between two requests to it):

- **latency** (as AutoThrottle): the goal is ``latency / target_concurrency``; a
  slower answer raises the delay to it at once;
- **rate limited** (``rate_limited`` outcomes, fast 429s included): the delay is
  multiplied by ``slowdown`` (from at least the spacing the site just complained
  about), at most once per burst (answers to requests sent before the last
  slow-down do not slow it down again); the spacing that was too fast is
  remembered;
- **recovery**: each success moves the delay ``recovery`` of the way down to its
  goal, which stays :data:`MARGIN` above the remembered too-fast spacing. That
  memory halves every :data:`MEMORY_HALF_LIFE` seconds and every
  :data:`SUCCESS_HALF_LIFE` good answers, so a site that raised its limit is found
  again, one rate-limited answer at a time, and stray ones do not keep it slow;
- **stray refusals**: a rate-limited answer at the pace learned to be safe is one
  small step; at a pace proven by :data:`PROVEN_AFTER_GOOD` good answers in a row,
  at most one per :data:`STEP_AFTER_GOOD` good answers; none for the first request
  after a Retry-After pause. So planned or stray 429s do not ratchet the learned
  delay up run after run;
- **bounds**: never below ``min_delay`` (or the robots.txt Crawl-delay, unless the
  profile sets ``min_delay``), never above ``max_delay``.

The spacing actually enforced is the larger of the delay and ``1 / max_rate``.
A ``Retry-After`` (when the profile honours it) pauses the whole site until then,
capped by ``SCALE_RETRY_AFTER_MAX``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scrapy_scale import clock as clock_mod
from scrapy_scale.throttle.profiles import Match, Profiles

#: the delay settles this fraction above the spacing a site said was too fast
MARGIN = 0.1
#: seconds for the memory of a too-fast spacing to halve
MEMORY_HALF_LIFE = 300.0
#: good answers in a row that prove a pace
PROVEN_AFTER_GOOD = 5
#: good answers at the safe pace before a rate-limited answer there raises the delay again
STEP_AFTER_GOOD = 20
#: good answers for the memory of a too-fast spacing to halve (besides the time)
SUCCESS_HALF_LIFE = 1000.0
#: what each good answer leaves of that memory
SUCCESS_FADE = 0.5 ** (1 / SUCCESS_HALF_LIFE)
#: weight of the newest gap in the moving average of the spacing actually sent
GAP_WEIGHT = 0.2
#: seconds a time read back from shared state may be ahead of ours (clocks of workers differ)
FUTURE_SLACK = 60.0


@dataclass
class SiteState:
    """What is known about one site (one pacing key)."""

    key: str
    match: Match
    delay: float
    #: the largest spacing the site said was too fast (0: none), as of ``too_fast_at``
    too_fast: float = 0.0
    too_fast_at: float = 0.0
    #: the last slow-down (answers to requests sent before it do not slow down again)
    slowed_at: float = -math.inf
    #: good answers since the last slow-down, and since the last pause began
    good_since_slowed: int = 0
    good_since_pause: int = 0
    #: the spacing of the last run of PROVEN_AFTER_GOOD good answers since a slow-down (0: none)
    proven: float = 0.0
    paused_until: float = 0.0
    #: when ``paused_until`` last moved (exported for `scrapy scale status`)
    paused_at: float = 0.0
    last_sent: float = -math.inf
    #: moving average of the spacing between requests handed out
    gap: float | None = None
    inflight: int = 0
    #: robots.txt Crawl-delay (seconds), when known
    crawl_delay: float | None = None
    #: the largest ``DOWNLOAD_SLOTS`` delay of the site's hosts seen (0: none): a floor
    slot_delay: float = 0.0
    #: the delay was learned (changed by an answer, or restored), not the start delay
    learned: bool = False
    #: last time the learned state changed (for sharing: newest wins)
    changed_at: float = 0.0
    # counters (stats)
    sent: int = 0
    rate_limited: int = 0
    paused_seconds: float = 0.0

    @property
    def profile(self) -> Any:
        return self.match.profile


class Pacing:
    """The pacing state of every site seen, and the decisions on it."""

    def __init__(
        self,
        profiles: Profiles,
        clock: clock_mod.Clock = clock_mod.wall,
        *,
        retry_after_cap: float = 3600.0,
        slot_delays: dict[str, float] | None = None,
    ):
        self.profiles = profiles
        #: ``DOWNLOAD_SLOTS`` delays by host: floors of the pacing, not added to it
        self.slot_delays = dict(slot_delays or {})
        self.clock = clock
        self.retry_after_cap = retry_after_cap
        self.sites: dict[str, SiteState] = {}
        #: Retry-After values above the cap seen (the glue warns once)
        self.capped: list[tuple[str, float]] = []
        #: (site, what was wrong) for learned state read back that was unusable or repaired
        self.rejected: list[tuple[str, str]] = []

    # ---- sites ----------------------------------------------------------------------

    def site(self, host: str) -> SiteState:
        m = self.profiles.match(host)
        s = self.sites.get(m.key)
        if s is None:
            p = m.profile
            s = self.sites[m.key] = SiteState(m.key, m, delay=min(max(p.start_delay, p.min_delay), p.max_delay))
        if self.slot_delays and self.slot_delays.get(host, 0.0) > s.slot_delay:
            s.slot_delay = self.slot_delays[host]
        return s

    def floor(self, s: SiteState) -> float:
        """The delay no decision undercuts: min_delay, or a Crawl-delay the profile does not
        override; and a ``DOWNLOAD_SLOTS`` delay the user set for one of the site's hosts."""
        p = s.profile
        if s.crawl_delay is not None and "min_delay" not in s.match.explicit:
            return max(min(max(p.min_delay, s.crawl_delay), p.max_delay), s.slot_delay)
        return max(p.min_delay, s.slot_delay)

    def wait_cap(self, s: SiteState) -> float:
        """The longest wait shared state (another worker, a file, Redis) may impose on the
        site: the larger of its ``max_delay`` and the Retry-After cap."""
        return max(s.profile.max_delay, self.retry_after_cap)

    def interval(self, s: SiteState) -> float:
        """Seconds between two requests to the site, as enforced."""
        return max(s.delay, self.floor(s), s.profile.interval)

    def too_fast(self, s: SiteState, now: float | None = None) -> float:
        """The remembered too-fast spacing, decayed to ``now``."""
        if not s.too_fast:
            return 0.0
        now = self.clock() if now is None else now
        return s.too_fast * 0.5 ** (max(0.0, now - s.too_fast_at) / MEMORY_HALF_LIFE)

    # ---- the gate ---------------------------------------------------------------------

    def hold_until(self, host: str) -> float:
        """0.0 when a request to ``host`` may be handed out now; else when it may
        (``math.inf``: when one of the site's requests in flight ends)."""
        s = self.site(host)
        conc = s.profile.concurrency
        if conc is not None and s.inflight >= conc:
            return math.inf
        t = max(s.paused_until, s.last_sent + self.interval(s))
        return t if t > self.clock() else 0.0

    def handed_out(self, host: str) -> SiteState:
        """A request to ``host`` was handed out now."""
        s = self.site(host)
        now = self.clock()
        if s.last_sent > -math.inf and s.paused_until <= s.last_sent:  # a pause is no spacing
            g = now - s.last_sent
            s.gap = g if s.gap is None else GAP_WEIGHT * g + (1 - GAP_WEIGHT) * s.gap
        s.last_sent = now
        s.sent += 1
        s.inflight += 1
        return s

    def touch(self, host: str) -> None:
        """A request to ``host`` went out that nobody handed out (robots.txt): it counts
        for the spacing of the next one."""
        s = self.site(host)
        s.last_sent = max(s.last_sent, self.clock())

    def ended(self, host: str) -> None:
        """A request to ``host`` that was handed out has its answer (or was dropped)."""
        s = self.site(host)
        s.inflight = max(0, s.inflight - 1)

    # ---- learning -----------------------------------------------------------------------

    def _bound(self, s: SiteState, d: float) -> float:
        return min(max(d, self.floor(s)), s.profile.max_delay)

    def on_success(self, host: str, latency: float | None) -> SiteState:
        """A usable answer: follow the latency up at once, recover down gradually."""
        s = self.site(host)
        p = s.profile
        now = self.clock()
        goal = (latency or 0.0) / p.target_concurrency
        tf = self.too_fast(s, now)
        if tf:
            # a good answer is evidence the site takes more than the memory says: the memory
            # fades with good answers too, so the delay comes back down towards the site's
            # real capacity (one rate-limited answer at a time), instead of only growing
            tf *= SUCCESS_FADE
            s.too_fast, s.too_fast_at = tf, now
            goal = max(goal, tf * (1 + MARGIN))
        goal = self._bound(s, goal)
        old = s.delay
        s.good_since_slowed += 1
        s.good_since_pause += 1
        s.delay = goal if goal >= s.delay else s.delay - (s.delay - goal) * p.recovery
        if s.good_since_slowed % PROVEN_AFTER_GOOD == 0:
            s.proven = self.interval(s)  # a run of good answers at (about) this pace
        self._changed(s, old, now)
        return s

    def on_error(self, host: str, latency: float | None) -> SiteState:
        """An answer that is neither usable nor a rate limit (5xx, timeout): as
        AutoThrottle, its latency may raise the delay, never lower it."""
        s = self.site(host)
        if latency:
            old = s.delay
            s.delay = max(s.delay, self._bound(s, latency / s.profile.target_concurrency))
            self._changed(s, old, self.clock())
        return s

    def on_rate_limited(self, host: str, latency: float | None, retry_after: float | None) -> float:
        """The site said slow down. Returns the pause it asked for (seconds, 0: none)."""
        s = self.site(host)
        p = s.profile
        now = self.clock()
        s.rate_limited += 1
        sent_at = now - (latency or 0.0)
        if sent_at >= s.slowed_at:
            spacing = max(s.delay, s.gap or 0.0, self.interval(s))
            tf = self.too_fast(s, now)
            old = s.delay
            if tf and spacing >= tf * (1 + MARGIN) * 0.99:
                # refused at the pace learned to be safe: the limit tightened a little, or a
                # stray 429 (a fault, not the rate): one small step, so stray ones cannot
                # ratchet the delay up by ``slowdown`` each. At a pace the site has proven
                # (a run of good answers there), no second step before a few good answers
                # again: a cluster of stray ones is one step, not one each
                proven = s.proven and spacing >= s.proven * (1 - MARGIN)
                if proven and s.good_since_slowed < STEP_AFTER_GOOD:
                    return self._pause_for(s, now, retry_after)
                if s.good_since_pause == 0 and s.paused_until > 0:
                    # refused the first thing after a Retry-After pause, however rested:
                    # not the rate's doing (that refuses once the rested site had its fill)
                    return self._pause_for(s, now, retry_after)
                s.too_fast = spacing
                s.delay = self._bound(s, max(s.delay, spacing * (1 + MARGIN)))
            else:
                s.too_fast = max(tf, spacing)
                s.delay = self._bound(s, max(spacing, 0.05) * p.slowdown)
            s.too_fast_at = now
            s.slowed_at = now
            s.good_since_slowed = 0
            self._changed(s, old, now, force=True)
        return self._pause_for(s, now, retry_after)

    def _pause_for(self, s: SiteState, now: float, retry_after: float | None) -> float:
        """Pause the site for a Retry-After (capped); returns the pause (seconds, 0: none)."""
        if retry_after is None or retry_after <= 0 or not s.profile.retry_after:
            return 0.0
        if retry_after > self.retry_after_cap:
            self.capped.append((s.key, retry_after))
            retry_after = self.retry_after_cap
        self.pause(s, now + retry_after)
        return retry_after

    def pause(self, s: SiteState, until: float) -> None:
        now = self.clock()
        if until > s.paused_until:
            s.paused_seconds += until - max(now, s.paused_until)
            s.paused_until = until
            s.paused_at = now
            s.good_since_pause = 0

    def set_crawl_delay(self, host: str, seconds: float | None) -> None:
        s = self.site(host)
        s.crawl_delay = seconds
        s.delay = self._bound(s, s.delay)

    def _changed(self, s: SiteState, old: float, now: float, force: bool = False) -> None:
        if force or abs(s.delay - old) > 1e-9:
            s.learned = True
            s.changed_at = now

    # ---- persistence and sharing ----------------------------------------------------------

    def export(self, since: float = 0.0) -> dict[str, dict[str, float]]:
        """The learned state of sites changed after ``since``, as plain data."""
        return {
            k: {
                "delay": s.delay,
                "too_fast": s.too_fast,
                "too_fast_at": s.too_fast_at,
                "proven": s.proven,
                "at": s.changed_at,
                # for `scrapy scale status` / `watch` (which sites are paused, until when);
                # restore() does not adopt it: a pause is shared by the limiter, if at all
                "paused_until": s.paused_until,
            }
            for k, s in self.sites.items()
            if (s.learned and s.changed_at > since) or s.paused_at > since
        }

    def restore(self, learned: dict[str, dict[str, float]]) -> int:
        """Adopt learned state that is newer than ours (a restart, another worker). Returns how many.

        What is read back is checked first (:func:`check_learned`); a site whose state is
        unusable keeps its profile's pacing and is marked changed, so that the next save
        writes sane state over the bad one. Each problem is added to :attr:`rejected`."""
        n = 0
        now = self.clock()
        for key, raw in learned.items():
            v, why = check_learned(raw, now)
            if why is not None:
                self.rejected.append((key, why))
            s = self.site(key)
            if s.key != key:
                continue
            if v is None:
                s.learned, s.changed_at = True, max(s.changed_at, now)
                continue
            if v["at"] <= s.changed_at:
                continue
            s.delay = self._bound(s, v["delay"])
            s.too_fast, s.too_fast_at, s.proven = v["too_fast"], v["too_fast_at"], v["proven"]
            s.learned, s.changed_at = True, v["at"]
            n += 1
        return n


#: seconds between two INFO lines about one site's Retry-After pauses
PAUSE_LOG_EVERY = 60.0


class PauseNotes:
    """Which Retry-After pauses are worth an INFO line: a site's first one, then at most one
    per :data:`PAUSE_LOG_EVERY` seconds, which tells how many went to DEBUG since the last.
    A site that answers 429 to a burst would otherwise fill the log with one line per answer."""

    def __init__(self, clock: clock_mod.Clock = clock_mod.wall, every: float = PAUSE_LOG_EVERY):
        self.clock = clock
        self.every = every
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def note(self, site: str) -> int | None:
        """None: log this pause at DEBUG only; else log it at INFO, saying how many pauses
        of the site went unlogged at INFO since the site's last INFO line (the returned int)."""
        now = self.clock()
        last = self._last.get(site)
        if last is not None and 0 <= now - last < self.every:
            self._quiet[site] = self._quiet.get(site, 0) + 1
            return None
        self._last[site] = now
        return self._quiet.pop(site, 0)


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def check_learned(raw: Any, now: float) -> tuple[dict[str, float] | None, str | None]:
    """A site's learned state as read back from shared state (a file, Redis), checked.

    Returns ``(state, None)`` when usable; ``(state, why)`` when something was repaired
    (a time in the future is brought back to ``now``, an unusable too-fast spacing is
    dropped); ``(None, why)`` when the delay or its time is missing, not a number,
    infinite, NaN or negative: the state is not used at all."""
    if not isinstance(raw, dict):
        return None, f"not a record: {str(raw)[:40]!r}; not used"
    delay, at = _finite(raw.get("delay")), _finite(raw.get("at"))
    if delay is None or delay < 0:
        return None, f"delay {raw.get('delay')!r} is not a finite number of seconds; not used"
    if at is None:
        return None, f"time {raw.get('at')!r} is not a finite time; not used"
    why = None
    if at > now + FUTURE_SLACK:
        why, at = f"time {at:.0f} is in the future; taken as now", now
    tf, tf_at = _finite(raw.get("too_fast", 0.0)), _finite(raw.get("too_fast_at", at))
    if tf is None or tf < 0 or tf_at is None:
        why, tf, tf_at = why or f"too-fast spacing {raw.get('too_fast')!r} is unusable; dropped", 0.0, 0.0
    elif tf_at > now:
        tf_at = now  # its memory would never fade
    proven = _finite(raw.get("proven", 0.0))
    if proven is None or proven < 0:
        why, proven = why or f"proven spacing {raw.get('proven')!r} is unusable; dropped", 0.0
    return {"delay": delay, "at": at, "too_fast": tf, "too_fast_at": tf_at, "proven": proven}, why
