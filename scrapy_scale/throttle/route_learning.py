"""The throttle's route learning: each route (site via egress) paced on its own capacity.

:class:`RouteLearning` owns the routes' pacing and, once the egress pool asked for it
(:meth:`use`), the :class:`~scrapy_scale.throttle.routing.RouteLearner` the pool asks
before it picks a route. It learns from every outcome through an egress; what it tells the
site (a pause when most routes are refused or every route blocks) goes back through the
callbacks the throttle gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from scrapy_scale import meta_keys
from scrapy_scale import stats_keys as keys
from scrapy_scale.throttle.routing import RouteLearner, RoutePacing

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_scale.outcomes.model import Outcome
    from scrapy_scale.throttle.pacing import Pacing


class RouteLearning:
    def __init__(
        self,
        pacing: Pacing,
        stats: Any,
        paused: Callable[[str, float, str], None],
        wake_at: Callable[[float], None],
    ):
        self.pacing = pacing
        self.stats = stats
        #: the throttle's: the site was paused (domain, seconds, why)
        self.paused = paused
        self.wake_at = wake_at
        #: each route's own capacity (site via egress); used once the egress pool asks for it
        self.route_pacing = RoutePacing(pacing.profiles, pacing.clock, retry_after_cap=pacing.retry_after_cap)
        self.learner: RouteLearner | None = None

    @property
    def on(self) -> bool:
        """The egress pool asked for routes: outcomes through an egress are the routes'."""
        return self.learner is not None

    def use(self, usable: Callable[[str], Iterable[str]], active: Any) -> RouteLearner:
        """Pace each route on its own learned capacity from now on, and hold a site while none
        of its ``usable(host)`` egresses' routes is ready (``active``: the requests the
        downloader holds, a route held while it has one)."""
        if self.learner is None:
            self.learner = RouteLearner(self.pacing, self.route_pacing, active)
        self.learner.candidates = usable
        return self.learner

    def hold_until(self, domain: str) -> float:
        """The site is due: is one of its routes? (0.0 when routes are not paced)"""
        return self.learner.hold_until(domain) if self.learner is not None else 0.0

    def handed_out(self, request: Request, domain: str) -> None:
        m = request.meta
        if self.learner is not None and not ("proxy" in m and meta_keys.EGRESS not in m):
            # the egress pool will route it (a project's own proxy is not the pool's)
            self.learner.reserve(request, domain)

    def release(self, request: Request) -> None:
        """``request`` went back or ended before the egress pool saw it: no route held."""
        if self.learner is not None:
            self.learner.release(request)

    def settled(self, outcome: Outcome, request: Request | None) -> None:
        """Every outcome (robots.txt's too): the request's route hold and in-flight slot end."""
        if self.learner is None:
            return
        if request is not None:
            self.learner.release(request)
        if outcome.egress is not None:
            self.learner.settled(str(outcome.egress), outcome.responded)

    def learn(self, outcome: Outcome) -> None:
        """An outcome through an egress: the route learns from it; the site from site-wide
        evidence only (the learner's pauses)."""
        learner = self.learner
        assert learner is not None
        host, egress, latency = outcome.domain, str(outcome.egress), outcome.latency
        if outcome.cls == "rate_limited":
            self.stats.inc_value(keys.THROTTLE_RATE_LIMITED)
            pause = learner.on_rate_limited(host, egress, latency, outcome.retry_after)
            self.route_pacing.capped.clear()
            if pause > 0:
                self.paused(outcome.domain, pause, "Retry-After on most of its routes")
            else:
                self.wake_at(learner.route(host, egress).paused_until)
        elif outcome.slow_down:
            learner.on_overloaded(host, egress, latency)
        elif outcome.cls == "blocked":
            wait = learner.on_blocked(host, egress)
            if wait > 0:
                self.stats.inc_value(keys.THROTTLE_BLOCKED_WAITS)
                self.paused(outcome.domain, wait, "blocked on every route it was tried through")
        elif outcome.responded and outcome.done:
            learner.on_success(host, egress, latency)
        elif latency:
            learner.on_error(host, egress, latency)
