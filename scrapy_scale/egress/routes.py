"""Route capacity: how fast each (egress, domain) may be used.

Adding workers without adding route diversity raises block rates: what a site sees is
the rate per route. Two limits combine, and a route is ready only when both say so:

- ``SCALE_EGRESS_ROUTE_RATE`` (static, optional): a token bucket of one token refilled at
  ``rate`` per second (``rate / workers`` in each of ``workers`` live workers), a cap the
  user sets and nothing learns;
- the **learned capacity** of the route (the throttle's per-route pacing, a
  :class:`RouteGate` the throttle gives the egress pool when both are on): its adaptive
  delay from the answers that came through it (a 429 through one egress slows that route,
  not the site), and a ``Retry-After`` it was told. The larger spacing of the two wins.

When every route to a domain is at its cap, that domain's requests wait for the first
route to be free. The limiter also keeps the pressure per route (requests sent, times a
request found it full) for stats and status.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from scrapy import Request


class RouteGate(Protocol):
    """Learned route capacity (implemented by the throttle, :mod:`scrapy_scale.throttle.routing`)."""

    #: live workers of the job (each enforces its share of a route's learned rate)
    workers: int
    #: times a sibling route at a refused pace was held for the refused page's retry
    retries_held: int

    def route_free_at(self, host: str, egress: str, refused_via: str | None = None) -> float:
        """0.0 when the route may carry a request now, else when it may (epoch s);
        ``refused_via``: for the retry of a page refused through that egress's route."""
        ...

    def taken(self, host: str, egress: str) -> None:
        """A request to ``host`` goes out through ``egress`` now."""
        ...

    def release(self, request: Request) -> None:
        """``request`` reached the pool: if it held one of its site's free routes since it
        was handed out, that route is free for the count again."""
        ...


class RouteLimiter:
    def __init__(self, rate: float = 0.0):
        #: requests per second per (egress, domain) over all workers; 0 = no cap
        self.rate = rate
        self._workers = 1
        #: the learned capacity of each route, when the throttle paces routes
        self.gate: RouteGate | None = None
        self._next: dict[tuple[str, str], float] = {}
        self.sent: Counter[tuple[str, str]] = Counter()
        self.capped: Counter[tuple[str, str]] = Counter()

    @property
    def workers(self) -> int:
        return self._workers

    @workers.setter
    def workers(self, n: int) -> None:
        self._workers = n
        if self.gate is not None:
            self.gate.workers = n

    def attach(self, gate: RouteGate) -> None:
        self.gate = gate
        gate.workers = self._workers

    @property
    def interval(self) -> float:
        return self._workers / self.rate if self.rate > 0 else 0.0

    def free_at(self, egress: str, domain: str, refused_via: str | None = None) -> float:
        """When the route can take its next request (0.0 = now); ``refused_via``: the request
        retries a page refused through that egress (the gate holds siblings at its pace)."""
        static = self._next.get((egress, domain), 0.0) if self.rate > 0 else 0.0
        learned = self.gate.route_free_at(domain, egress, refused_via) if self.gate is not None else 0.0
        return max(static, learned)

    def full(self, egress: str, domain: str, now: float, refused_via: str | None = None) -> bool:
        if self.free_at(egress, domain, refused_via) <= now:
            return False
        self.capped[(egress, domain)] += 1
        return True

    def take(self, egress: str, domain: str, now: float) -> None:
        key = (egress, domain)
        self.sent[key] += 1
        if self.rate > 0:
            self._next[key] = max(now, self._next.get(key, 0.0)) + self.interval
        if self.gate is not None:
            self.gate.taken(domain, egress)

    def release(self, request: Request) -> None:
        """A request handed out reached the pool: the route it held for it is free again
        for the throttle's count (it takes one now, or waits)."""
        if self.gate is not None:
            self.gate.release(request)

    def pressure(self, top: int = 10) -> list[dict[str, object]]:
        """The busiest routes: requests sent, times found at the cap."""
        keys = sorted(set(self.sent) | set(self.capped), key=lambda k: (-self.capped[k], -self.sent[k], k))[:top]
        return [{"egress": e, "domain": d, "sent": self.sent[(e, d)], "capped": self.capped[(e, d)]} for e, d in keys]
