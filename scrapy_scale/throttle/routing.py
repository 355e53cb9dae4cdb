"""Capacity per route: pacing learned per (site, egress), and what slows the whole site.

Plain Python with an injectable clock, as :mod:`scrapy_scale.throttle.policy`. A site that
limits each client address allows (egresses x its limit): learning one delay per site
from every answer, whichever egress carried it, keeps the site at one route's rate. So,
when requests go through egresses (``SCALE_EGRESSES``):

- each **route** (a site through one egress) has its own adaptive delay
  (:class:`RoutePacing`, the same decisions as a site's: latency, rate-limited answers,
  ``Retry-After`` pausing the route, recovery), keyed ``"<site> via <egress>"``; a route
  that learned no limit of its own goes no faster than the best pace a sibling route
  learned (:meth:`RoutePacing.adopt`), from its start or from a sibling's refusal (a 429,
  or 503s without Retry-After once they step the route down);
- a page **refused** through a route is not retried at once through a sibling that sent at
  the pace refused (:meth:`RouteLearner.crowded`): the retry waits for a sibling with room
  or for the refused route's own pace;
- the **site** (:class:`~scrapy_scale.throttle.pacing.Pacing`) keeps what bounds all its
  routes together: ``max_rate``, ``min_delay``, robots.txt ``Crawl-delay``, its
  concurrency, and learns only from site-wide evidence (:class:`RouteLearner`): refusals
  (429, ``Retry-After``) from most of the routes used recently, at once, slow the site
  and a ``Retry-After`` then pauses it; latency that rises on every route slows every
  route, hence the site; a site that answers ``blocked`` on every route it was tried
  through waits (:data:`BLOCKED_PAUSE`, doubling) instead of being tried through more;
- an **egress that has not answered yet** carries one request at a time
  (:data:`PROBE_HOLD`): a blackhole holds one download slot, not one per request;
- a request **handed out** for a site counts against the site's free routes until the
  egress pool sees it (:meth:`RouteLearner.reserve`): between the two, other downloader
  middlewares run (robots.txt's awaits), and the scheduler would hand out a request per
  check while one route is free; the pool then found every route taken and sent the rest
  back (375 round trips and as many warnings in a 20 s chaos crawl). It counts only while
  the downloader still has it, as a request on its way to its download slot does
  (:class:`scrapy_scale.transit.Transit`, keyed here by site): one a middleware
  answered or dropped holds no route.

Without egresses nothing here is used: the site learns from every answer, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scrapy_scale import clock as clock_mod
from scrapy_scale.throttle.pacing import Pacing
from scrapy_scale.throttle.policy import fade, remember
from scrapy_scale.throttle.profiles import Profiles
from scrapy_scale.throttle.state import SiteState
from scrapy_scale.transit import InDownloader, Transit

if TYPE_CHECKING:
    from scrapy import Request

#: between the site and the egress in a route's key (a site key holds no space)
SEP = " via "
#: seconds within which refusals from several routes count as one site-wide event
WINDOW = 10.0
#: a route refused at a spacing this much slower than at its last refusal is not refused by
#: its own limit (it had backed off from there): evidence about the site
SLOWER = 0.05
#: a route that carried a request within this many seconds is one the site is used through
ACTIVE = 60.0
#: the share of the active routes (two at least) that must refuse within WINDOW for the site
#: to slow down: routes learning their own limits at once refuse close together too
SITE_SHARE = 0.75
#: the first wait of a site that answered ``blocked`` on every route it was tried through
BLOCKED_PAUSE = 30.0
#: an egress that has not answered yet carries one request at a time (a blackhole holds one
#: download slot till its timeout, not one per request sent): the next waits for the first
#: one's outcome, this many seconds at most
PROBE_HOLD = 15.0
#: when every free route of a site is spoken for, the scheduler asks again this soon
RESERVED_RECHECK = 0.05


def route_key(site: str, egress: str) -> str:
    return f"{site}{SEP}{egress}"


def split_route(key: str) -> tuple[str, str] | None:
    """(site, egress) of a route key; None for a site key."""
    site, sep, egress = key.partition(SEP)
    return (site, egress) if sep and site and egress else None


class RoutePacing(Pacing):
    """The adaptive delay of every route (site via egress). A route's delay is its own
    capacity only: ``max_rate``, ``min_delay``, Crawl-delay and concurrency bound the site,
    all its routes together, and are enforced by the site's :class:`Pacing`. A route
    learns from a bucket's beat (:data:`~scrapy_scale.throttle.policy.BEAT`): a limit per
    client address is what a route is paced for."""

    LEARNS_BEAT = True

    def __init__(self, profiles: Profiles, clock: clock_mod.Clock = clock_mod.wall, *, retry_after_cap: float = 3600.0):
        super().__init__(profiles, clock, retry_after_cap=retry_after_cap)

    def site(self, host: str) -> SiteState:
        """The state of a route, by its key (``"<site or host> via <egress>"``)."""
        s = self.sites.get(host)
        if s is not None:
            return s
        parts = split_route(host)
        name, egress = parts if parts else (host, "")
        m = self.profiles.match(name)
        key = route_key(m.key, egress)
        s = self.sites.get(key)
        if s is None:
            p = m.profile
            s = self.sites[key] = SiteState(key, m, delay=min(p.start_delay, p.max_delay))
            best = self.best_sibling(s)
            if best is not None:  # start at the best sibling's learned rate, not above it
                s.delay = best.delay
                self.adopt(s, best)
        return s

    def siblings(self, s: SiteState) -> list[SiteState]:
        """The other routes of the route ``s``'s site (the same site through other egresses)."""
        parts = split_route(s.key)
        if parts is None:
            return []
        prefix = parts[0] + SEP
        return [r for k, r in self.sites.items() if k.startswith(prefix) and r is not s]

    @staticmethod
    def knows_a_limit(s: SiteState) -> bool:
        """The route learned a limit of its own (it was refused, or a remembered too-fast
        spacing was restored or adopted)."""
        return s.rate_limited > 0 or s.too_fast > 0

    def best_sibling(self, s: SiteState) -> SiteState | None:
        """Of the routes of ``s``'s site that learned a limit, the fastest (None: none did)."""
        learned = [r for r in self.siblings(s) if self.knows_a_limit(r)]
        return min(learned, key=lambda r: r.delay) if learned else None

    def adopt(self, s: SiteState, best: SiteState) -> None:
        """The route ``s``, which learned no limit of its own, takes the pace ``best`` (a
        sibling) learned: no faster than it, and its memory of the spacing that was too fast,
        so recovery stays above it (the memory fades as its own would)."""
        now = self.clock()
        s.delay = min(max(s.delay, best.delay), s.profile.max_delay)
        tf = self.too_fast(best, now)
        if tf > self.too_fast(s, now):
            f = fade(best, now)
            remember(s, now, tf, best.settled * f, best.peak * f)

    def floor(self, s: SiteState) -> float:
        return 0.0

    def interval(self, s: SiteState) -> float:
        return s.delay

    def hold_until(self, host: str) -> float:
        s = self.site(host)
        t = max(s.paused_until, s.last_sent + s.delay)
        return t if t > self.clock() else 0.0

    def set_crawl_delay(self, host: str, seconds: float | None) -> None:  # pragma: no cover - the site's
        raise NotImplementedError("a Crawl-delay bounds the site, not a route")


@dataclass
class _Seen:
    """Recent evidence about one site's routes (egress -> when)."""

    used: dict[str, float] = field(default_factory=dict)
    refused: dict[str, float] = field(default_factory=dict)
    blocked: dict[str, float] = field(default_factory=dict)
    overloaded: dict[str, float] = field(default_factory=dict)
    #: the spacing each route was last refused at (its own limit, as far as it knows)
    refused_spacing: dict[str, float] = field(default_factory=dict)
    #: each route's latest refusal of a page (a 429, or a 503 without Retry-After): when, and
    #: the spacing it was sent at (:meth:`RouteLearner.crowded`)
    last_refusal: dict[str, tuple[float, float]] = field(default_factory=dict)
    ok_at: float = -math.inf
    blocked_pauses: int = 0


class RouteLearner:
    """Routes an outcome's evidence to the route and, when it is site-wide, to the site."""

    def __init__(self, site: Pacing, routes: RoutePacing, in_downloader: InDownloader | None = None):
        self.site = site
        self.routes = routes
        self.clock = site.clock
        self._seen: dict[str, _Seen] = {}
        #: the egresses requests may go through (a route not used yet is ready)
        self.egresses: tuple[str, ...] = ()
        #: live workers of the job: each enforces its share of a route's learned spacing
        self.workers = 1
        #: the egresses that may carry a request to a host now (the egress pool's health)
        self.candidates: Callable[[str], Iterable[str]] | None = None
        #: egresses that answered (an HTTP answer came through them), and when the request in
        #: flight through each of the others went out
        self._answered: set[str] = set()
        self._probing: dict[str, float] = {}
        #: per site: the requests handed out and not at the egress pool yet, while the
        #: downloader has them (``in_downloader``: its requests; None: a grace instead)
        self.holds = Transit(in_downloader, self.clock)
        #: times a sibling route at a refused pace was held for a refused page's retry
        self.retries_held = 0

    def _of(self, host: str) -> tuple[SiteState, _Seen]:
        s = self.site.site(host)
        return s, self._seen.setdefault(s.key, _Seen())

    def route(self, host: str, egress: str) -> SiteState:
        return self.routes.site(route_key(self.site.site(host).key, egress))

    # ---- the gate ----------------------------------------------------------------------

    def route_free_at(self, host: str, egress: str, refused_via: str | None = None) -> float:
        """0.0 when the route may carry a request now, else when it may (epoch s). Each of
        the ``workers`` live workers sends at most its share of the route's rate.
        ``refused_via``: the request is the retry of a page that egress's route refused; a
        sibling route at the pace that was refused (:meth:`crowded`) takes it no sooner than
        the refused route's own pace lets that route send again."""
        r = self.route(host, egress)
        t = max(r.paused_until, r.last_sent + r.delay * max(1, self.workers))
        if egress not in self._answered and egress in self._probing:
            t = max(t, self._probing[egress] + PROBE_HOLD)
        if refused_via is not None and refused_via != egress and self.crowded(host, egress, refused_via):
            own = self.route_free_at(host, refused_via)
            if own > t:
                self.retries_held += 1
                t = own
        return t if t > self.clock() else 0.0

    def crowded(self, host: str, egress: str, refused_via: str) -> bool:
        """``egress``'s route sent at the pace ``refused_via``'s route was refused at within
        :data:`WINDOW` (its moving spacing not slower by :data:`SLOWER`; a delay it just took
        from a sibling does not empty the site's bucket for its address) and sent within twice
        that spacing: a site that limits each client address refuses it as it refused the
        other (the issue-33 trace: a page refused via p2 was retried at once via p4, refused,
        then via p3). A sibling slower than that, or idle, has room."""
        _, seen = self._of(host)
        got = seen.last_refusal.get(refused_via)
        now = self.clock()
        if got is None or not now - WINDOW <= got[0] <= now:
            return False
        x = got[1]
        r = self.route(host, egress)
        pace = r.delay if r.gap is None else r.gap  # as sent: a delay just raised left no room yet
        return pace <= x * (1 + SLOWER) and now - r.last_sent < 2 * x

    def hold_until(self, host: str, egresses: Iterable[str] | None = None) -> float:
        """0.0 when one of the site's routes is ready and not spoken for by a request handed
        out before (:meth:`reserve`), else the earliest time one may be."""
        if egresses is None:
            egresses = self.candidates(host) if self.candidates is not None else self.egresses
        pending = self.holds.pending(self.site.site(host).key)
        best, free = math.inf, 0
        for e in egresses:
            t = self.route_free_at(host, e)
            if not t:
                free += 1
                if free > pending:
                    return 0.0
            else:
                best = min(best, t)
        if free:  # every free route is spoken for: asked again once those requests took them
            return min(best, self.clock() + RESERVED_RECHECK)
        return 0.0 if best == math.inf else best  # no usable egress: the pool says why

    def reserve(self, request: Request, host: str) -> None:
        """``request`` to ``host`` was handed out: it holds one of the site's free routes
        until the egress pool sees it (:meth:`release`), while the downloader has it."""
        self.holds.sent(request, self.site.site(host).key)

    def release(self, request: Request) -> None:
        """``request`` reached the pool (or went back, or ended): the route it held is free
        for the count again. Another request (robots.txt's, a copy) frees nothing."""
        self.holds.arrived(request)

    def taken(self, host: str, egress: str) -> None:
        """A request to ``host`` goes out through ``egress`` now."""
        self.routes.handed_out(route_key(self.site.site(host).key, egress))
        self.routes.ended(route_key(self.site.site(host).key, egress))  # in flight is the site's
        _, seen = self._of(host)
        seen.used[egress] = self.clock()
        if egress not in self._answered:
            self._probing.setdefault(egress, self.clock())

    def settled(self, egress: str, answered: bool) -> None:
        """An attempt through ``egress`` ended (``answered``: with an HTTP answer, whatever it
        said): an egress not known to answer may carry its next request."""
        self._probing.pop(egress, None)
        if answered:
            self._answered.add(egress)

    # ---- evidence ----------------------------------------------------------------------

    def on_success(self, host: str, egress: str, latency: float | None) -> None:
        self.settled(egress, True)
        self.routes.on_success(self.route(host, egress).key, latency)
        self.site.on_success(host, None)  # latency is the route's: the site only recovers
        s, seen = self._of(host)
        seen.ok_at = self.clock()
        seen.blocked.clear()
        seen.blocked_pauses = 0

    def on_error(self, host: str, egress: str, latency: float | None) -> None:
        self.settled(egress, False)
        self.routes.on_error(self.route(host, egress).key, latency)

    def on_overloaded(self, host: str, egress: str, latency: float | None) -> None:
        """A 503 without Retry-After through the route: pressure only when such answers
        rise with the rate (:meth:`Pacing.on_overloaded`); never site-wide by itself."""
        self.settled(egress, True)
        r = self.route(host, egress)
        now = self.clock()
        s, seen = self._of(host)
        seen.last_refusal[egress] = (now, self.routes.sent_spacing(r.key, latency))
        slowed_at = r.slowed_at
        if not self.routes.on_overloaded(r.key, latency):
            return
        if r.slowed_at != slowed_at:  # as a 429's step: the siblings that learned nothing take it
            self._tell_siblings(r)
        seen.overloaded[egress] = now
        if self._most(seen.overloaded, seen, now):  # every route overloaded: the site is
            seen.overloaded.clear()
            self.site.on_rate_limited(host, latency, None)

    def on_rate_limited(self, host: str, egress: str, latency: float | None, retry_after: float | None) -> float:
        """The route was refused. Returns the pause of the *site* (seconds, 0: none): only
        when most of its active routes refused within :data:`WINDOW` at a pace slower than
        the one each was refused at before (:data:`SLOWER`): what its own limit does not
        explain. A route's first refusal, or one at its old pace, is the route's (a site that
        limits each client address refused all four routes of the chaos benchmark's host 4
        in one second, since they had started together, and the site paused and slowed to
        three quarters of its limit). A site used through one route slows at once."""
        self.settled(egress, True)
        r = self.route(host, egress)
        key = r.key
        spacing = self.routes.sent_spacing(key, latency)
        slowed_at = r.slowed_at
        self.routes.on_rate_limited(key, latency, retry_after)
        now = self.clock()
        if r.slowed_at != slowed_at:  # it stepped or slowed down (not a forgiven stray)
            self._tell_siblings(r)
        s, seen = self._of(host)
        before = seen.refused_spacing.get(egress)
        seen.refused_spacing[egress] = spacing
        seen.last_refusal[egress] = (now, spacing)
        active = {e for e, t in seen.used.items() if now - t <= ACTIVE} | {egress}
        if len(active) > 1 and (before is None or spacing <= before * (1 + SLOWER)):
            # refused at about the pace it was refused at before, or for the first time: the
            # route's own limit explains it (routes started together meet theirs together)
            return 0.0
        seen.refused[egress] = now
        if self._most(seen.refused, seen, now):
            seen.refused.clear()
            return self.site.on_rate_limited(host, latency, retry_after)
        return 0.0

    def _tell_siblings(self, r: SiteState) -> None:
        """The route ``r`` was refused and slowed down. Its siblings that learned no limit of
        their own take the best learned sibling's pace, not above it (routes started together
        at the profile's pace were all refused within 0.3 s, at 8-10/s each against a 6/s
        limit per address: the chaos benchmark), so the page just refused is not retried at
        once through a sibling at the pace that was refused. A sibling that learned its own
        limit keeps it: skipping its turn distorts the spacing it learns from (more refusals
        when a limit drops, tests/unit/test_throttle_routes_policy.py)."""
        sibs = self.routes.siblings(r)
        best = min((x for x in [r, *sibs] if self.routes.knows_a_limit(x)), key=lambda x: x.delay)
        for sib in sibs:
            if not self.routes.knows_a_limit(sib):
                self.routes.adopt(sib, best)

    def on_blocked(self, host: str, egress: str) -> float:
        """The site answered ``blocked`` through ``egress``. When every route it was tried
        through recently answered so (two at least) and none answered well since, the site
        waits (:data:`BLOCKED_PAUSE`, doubling each time, at most the Retry-After cap)
        instead of being tried through more routes. Returns that wait (0: none)."""
        self.settled(egress, True)
        now = self.clock()
        s, seen = self._of(host)
        seen.blocked[egress] = now
        used = {e for e, t in seen.used.items() if now - t <= ACTIVE} | {egress}
        recent = {e for e, t in seen.blocked.items() if t > seen.ok_at and now - t <= ACTIVE}
        if len(recent) < 2 or not used <= recent:
            return 0.0
        wait = min(BLOCKED_PAUSE * 2**seen.blocked_pauses, self.site.retry_after_cap)
        seen.blocked_pauses += 1
        seen.blocked.clear()
        seen.used.clear()  # after the wait, the routes it is tried through count anew
        self.site.pause(s, now + wait)
        return wait

    def _most(self, hits: dict[str, float], seen: _Seen, now: float) -> bool:
        active = {e for e, t in seen.used.items() if now - t <= ACTIVE} | set(hits)
        recent = [e for e, t in hits.items() if now - t <= WINDOW]
        return len(recent) >= max(2, math.ceil(SITE_SHARE * len(active))) or (len(active) == 1 and bool(recent))
