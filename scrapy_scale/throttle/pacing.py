"""Per-site pacing: :class:`Pacing`, the pacing state of every site seen and the decisions
on it (the adaptive delay, Retry-After pauses, overloaded answers, the local gate).

Plain Python with an injectable clock (epoch seconds). Its rules, their constants and
reasons are in :mod:`scrapy_scale.throttle.policy`.
"""

from __future__ import annotations

import math
from typing import Any

from scrapy_scale import clock as clock_mod
from scrapy_scale.throttle import paces
from scrapy_scale.throttle.learned import LearnedRecord, export_state, restore_state
from scrapy_scale.throttle.policy import (
    BEAT,
    CRAWL_DELAY_MARGIN,
    CYCLE_CAP,
    GAP_WEIGHT,
    IDLE_GAP,
    MARGIN,
    NOT_THE_RATE,
    ONE_AT_A_TIME_RATE,
    OVERLOAD_SHARE,
    PROVEN_AFTER_GOOD,
    SHARE_WEIGHT,
    STALE_SHARE,
    STEP_AFTER_GOOD,
    changed,
    count_good,
    fade,
    fade_on_success,
    pause_site,
    remember,
    stray,
)
from scrapy_scale.throttle.profiles import Profiles
from scrapy_scale.throttle.state import FORGIVE_EVERY, SiteState


class Pacing:
    """The pacing state of every site seen, and the decisions on it."""

    #: a refusal that repeats the cycle before it is a bucket's beat (routes: see policy)
    LEARNS_BEAT = False

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
        #: seconds a request in flight to a site kept one at a time holds it at most (its end
        #: was lost: a leak must not stall the site); the glue sets it from DOWNLOAD_TIMEOUT
        self.answer_wait = 190.0
        self.sites: dict[str, SiteState] = {}
        #: Retry-After values above the cap seen (the glue warns once)
        self.capped: list[tuple[str, float]] = []
        #: (site, what was wrong) for learned state read back that was unusable or repaired
        self.rejected: list[tuple[str, str]] = []
        #: steps taken from a bucket's beat (LEARNS_BEAT)
        self.beats = 0

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
            kept = s.crawl_delay * (1 + CRAWL_DELAY_MARGIN)
            return max(min(max(p.min_delay, kept), p.max_delay), s.slot_delay)
        return max(p.min_delay, s.slot_delay)

    def one_at_a_time(self, s: SiteState) -> bool:
        """A robots.txt Crawl-delay in force (no profile ``min_delay`` overriding it), or a
        ``max_rate`` of :data:`ONE_AT_A_TIME_RATE` or less: the site gets one request in flight
        from this worker, each spaced from the previous one's answer (as Nutch and StormCrawler
        do), so the spacing holds where the site sees it whatever the path adds to one send."""
        if s.crawl_delay and "min_delay" not in s.match.explicit:
            return True
        rate = s.profile.max_rate
        return bool(rate) and rate <= ONE_AT_A_TIME_RATE

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
        return s.too_fast * fade(s, now)

    # ---- the gate ---------------------------------------------------------------------

    def hold_until(self, host: str) -> float:
        """0.0 when a request to ``host`` may be handed out now; else when it may
        (``math.inf``: when one of the site's requests in flight ends)."""
        s = self.site(host)
        conc = s.profile.concurrency
        if conc is not None and s.inflight >= conc:
            return math.inf
        now = self.clock()
        iv = self.interval(s)
        t = max(s.paused_until, s.last_sent + iv)
        if self.one_at_a_time(s):
            if s.inflight and now < s.last_sent + self.answer_wait:
                return math.inf  # the answer ends the hold (the glue wakes the engine then)
            t = max(t, s.last_answer + iv)
        return t if t > now else 0.0

    def handed_out(self, host: str) -> SiteState:
        """A request to ``host`` was handed out now."""
        s = self.site(host)
        now = self.clock()
        if s.last_sent > -math.inf:
            g = now - s.last_sent
            iv = self.interval(s)
            if s.paused_until <= s.last_sent:  # a pause is no spacing
                # nor is an idle spell (the site had nothing to send): a gap counts as IDLE_GAP
                # times the pace sent so far at most, or the burst after one (a site whose
                # pages waited for a late retry) is taken for a slow pace when refused, and
                # the route or site learns a limit of one request in seconds
                ref = max(iv, s.gap or 0.0)
                sample = min(g, IDLE_GAP * ref) if ref > 0 else g
                s.gap = sample if s.gap is None else GAP_WEIGHT * sample + (1 - GAP_WEIGHT) * s.gap
                g = min(g, IDLE_GAP * iv)  # the site had nothing to send
            s.cycle_time += g
            s.cycle_sent += 1
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
        s.last_answer = self.clock()

    # ---- learning -----------------------------------------------------------------------

    def _bound(self, s: SiteState, d: float) -> float:
        return min(max(d, self.floor(s)), s.profile.max_delay)

    def _spacing(self, s: SiteState) -> float:
        """The spacing requests go out at now."""
        return max(s.delay, s.gap or 0.0, self.interval(s))

    def spacing(self, host: str) -> float:
        """The spacing requests to ``host`` go out at now."""
        return self._spacing(self.site(host))

    def sent_spacing(self, host: str, latency: float | None) -> float:
        """The spacing the request to ``host`` answered now (``latency`` after it went out)
        was sent at."""
        return self._sent_at_spacing(self.site(host), latency, self.clock())

    def _sent_at_spacing(self, s: SiteState, latency: float | None, now: float) -> float:
        """The spacing the request just answered was sent at: an answer to a request sent
        before the last slow-down counts at the pace of then, not at the slower one."""
        if now - (latency or 0.0) < s.slowed_at and s.slowed_spacing:
            return s.slowed_spacing
        return self._spacing(s)

    def on_success(self, host: str, latency: float | None) -> SiteState:
        """A usable answer: follow the latency up at once, recover down gradually."""
        s = self.site(host)
        p = s.profile
        now = self.clock()
        goal = (latency or 0.0) / p.target_concurrency
        paces.record(s.paces, self._sent_at_spacing(s, latency, now), refused=False)
        tf = self.too_fast(s, now)
        if tf:
            goal = max(goal, fade_on_success(s, now, tf) * (1 + MARGIN))
        goal = self._bound(s, goal)
        old = s.delay
        count_good(s)
        if goal >= s.delay:
            s.delay = goal
        elif s.refused_share <= 0.5:
            # no recovery while recent refusals outnumber good answers: a rare answer that
            # got through a site refusing nearly everything is no sign it takes more
            s.delay -= (s.delay - goal) * p.recovery
        if s.good_since_slowed % PROVEN_AFTER_GOOD == 0:
            s.proven = self.interval(s)  # a run of good answers at (about) this pace
        if s.good_since_slowed % STEP_AFTER_GOOD == 0:  # a long run (no burst a bucket let by)
            s.fastest_ok = min(s.fastest_ok or math.inf, max(self.interval(s), s.gap or 0.0))
        changed(s, old, now)
        return s

    def on_error(self, host: str, latency: float | None) -> SiteState:
        """An answer that is neither usable nor a rate limit (5xx, timeout): as
        AutoThrottle, its latency may raise the delay, never lower it."""
        s = self.site(host)
        if latency:
            old = s.delay
            s.delay = max(s.delay, self._bound(s, latency / s.profile.target_concurrency))
            changed(s, old, self.clock())
        return s

    def on_overloaded(self, host: str, latency: float | None) -> bool:
        """The site answered "overloaded" without saying for how long (a 503 without
        Retry-After). Noise is not pressure: one is an error (its latency may raise the
        delay, as any 5xx). Only when they are :data:`OVERLOAD_SHARE` of the recent answers
        (they rise with the rate sent) is it a rate-limited answer (:meth:`on_rate_limited`),
        then again each time as many more come. Returns whether it slowed down."""
        s = self.on_error(host, latency)
        s.overload_share = SHARE_WEIGHT + (1 - SHARE_WEIGHT) * s.overload_share
        if s.overload_share < OVERLOAD_SHARE:
            return False
        s.overload_share = 0.0  # new evidence is needed for the next step
        self.on_rate_limited(host, latency, None)
        return True

    def on_rate_limited(self, host: str, latency: float | None, retry_after: float | None) -> float:
        """The site said slow down. Returns the pause it asked for (seconds, 0: none)."""
        s = self.site(host)
        p = s.profile
        now = self.clock()
        first = s.rate_limited == 0  # the first this process sees: isolated, as far as it knows
        s.rate_limited += 1
        share = s.refused_share
        long_run = s.good_since_refused >= STEP_AFTER_GOOD
        isolated = (long_run or first) and s.good_since_forgiven >= FORGIVE_EVERY
        not_cluster = s.good_since_refused >= PROVEN_AFTER_GOOD
        s.refused_share = SHARE_WEIGHT + (1 - SHARE_WEIGHT) * share
        spacing_now = self._spacing(s)
        paces.record(s.paces, self._sent_at_spacing(s, latency, now), refused=True)
        slower = bool(s.fastest_ok) and spacing_now >= NOT_THE_RATE * s.fastest_ok
        if slower and s.refused_share >= STALE_SHARE:
            s.fastest_ok = 0.0  # refused often, far slower than it once took: the limit dropped
        # refused far slower than a pace the site took well, and not often: not the rate's
        # doing (planned faults, a stray 429). It slows down all the same (the site said so),
        # but confirms no limit: the steps fade once good answers come in a row again
        # and refusals that did not fall when the pace slowed (answers by pace) are not the
        # rate's either, however often they come: none of their steps is confirmed
        tied = paces.rate_tied(s.paces, spacing_now)
        noise = (slower and bool(s.fastest_ok)) or tied is False
        s.good_since_refused = 0
        # the spacing sent since the last refusal (pauses included), and whether it repeats
        # the cycle before: a bucket's beat (routes only, see LEARNS_BEAT)
        this_cycle = s.cycle_time / s.cycle_sent if not_cluster and s.cycle_sent else 0.0
        beat = (
            self.LEARNS_BEAT
            and bool(this_cycle and s.last_cycle)
            and abs(this_cycle - s.last_cycle) <= BEAT * s.last_cycle
            and this_cycle > spacing_now * (1 + MARGIN)
            and not noise
        )
        s.last_cycle = this_cycle
        by_rate = long_run or (not_cluster and tied is True) or beat
        cycle = this_cycle if by_rate else 0.0
        s.cycle_time, s.cycle_sent = 0.0, 0
        sent_at = now - (latency or 0.0)
        if sent_at >= s.slowed_at:
            spacing = spacing_now
            tf = self.too_fast(s, now)
            f = fade(s, now)
            settled, peak = s.settled * f, s.peak * f
            old = s.delay
            # after a run: the spacing sent since the last refusal (what a bucket took)
            cap = p.slowdown if beat else CYCLE_CAP
            took = max(spacing, min(cycle, spacing * cap)) if not noise else spacing
            self.beats += beat
            if tf and spacing >= tf * (1 + MARGIN) * 0.99:
                # refused at the pace learned to be safe: the limit tightened a little, or a
                # stray 429 (a fault, not the rate)
                if settled < peak * 0.99 and spacing < peak * (1 + MARGIN) and not_cluster and not noise:
                    # refused again, after good answers, below the pace it was stepped up to:
                    # the steps were right (the limit did drop). Back to that pace, confirmed
                    tf = settled = peak = max(peak, took)
                    s.delay = self._bound(s, max(s.delay, tf * (1 + MARGIN)))
                    remember(s, now, tf, settled, peak)
                elif stray(s, spacing, isolated and tied is not True, share):
                    # forgiven: no step, but no faster than this either (the memory holds it)
                    held = max(tf, spacing / (1 + MARGIN))
                    remember(s, now, held, settled, peak)
                    s.good_since_forgiven = 0
                    return self._pause_for(s, now, retry_after)
                else:
                    # one small step (so stray ones cannot ratchet it by ``slowdown`` each).
                    # After a long run of good answers it is confirmed at once (the memory
                    # had faded below the limit); in a cluster not until refused again below
                    # it: good answers in a row undo it fast
                    spacing = took
                    s.delay = self._bound(s, max(s.delay, spacing * (1 + MARGIN)))
                    confirmed = spacing if (long_run or beat) and not noise else settled
                    remember(s, now, spacing, confirmed, peak)
            else:
                tf = max(tf, spacing)
                s.delay = self._bound(s, max(spacing, 0.05) * p.slowdown)
                remember(s, now, tf, settled, tf)
            s.slowed_at, s.slowed_spacing = now, spacing
            s.good_since_slowed = 0
            s.proven = 0.0  # the pace it proved was just refused: prove the new one
            changed(s, old, now, force=True)
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
        pause_site(s, self.clock(), until)

    def set_crawl_delay(self, host: str, seconds: float | None) -> None:
        s = self.site(host)
        s.crawl_delay = seconds
        s.delay = self._bound(s, s.delay)

    # ---- persistence and sharing ----------------------------------------------------------

    def export(self, since: float = 0.0) -> dict[str, LearnedRecord]:
        """The learned state of sites changed after ``since``, as stored."""
        return export_state(self, since)

    def restore(self, learned: dict[str, dict[str, Any]]) -> int:
        """Adopt learned state that is newer than ours (a restart, another worker); checked
        first (:func:`~scrapy_scale.throttle.learned.restore_state`). Returns how many."""
        return restore_state(self, learned)
