"""Route capacity: an optional maximum request rate per (egress, domain).

Adding workers without adding route diversity raises block rates: what a site sees is
the rate per route. Each route gets a token bucket of one token refilled at ``rate``
per second (``rate / workers`` in each of ``workers`` live workers), so a route never
carries more than its cap; when every route to a domain is at its cap, that domain's
requests wait for the first token. The limiter also keeps the pressure per route
(requests sent, times a request found it full) for stats and status.
"""

from __future__ import annotations

from collections import Counter


class RouteLimiter:
    def __init__(self, rate: float = 0.0):
        #: requests per second per (egress, domain) over all workers; 0 = no cap
        self.rate = rate
        self.workers = 1
        self._next: dict[tuple[str, str], float] = {}
        self.sent: Counter[tuple[str, str]] = Counter()
        self.capped: Counter[tuple[str, str]] = Counter()

    @property
    def interval(self) -> float:
        return self.workers / self.rate if self.rate > 0 else 0.0

    def free_at(self, egress: str, domain: str) -> float:
        """When the route can take its next request (0.0 = now, without a cap)."""
        return self._next.get((egress, domain), 0.0) if self.rate > 0 else 0.0

    def full(self, egress: str, domain: str, now: float) -> bool:
        if self.rate <= 0 or self.free_at(egress, domain) <= now:
            return False
        self.capped[(egress, domain)] += 1
        return True

    def take(self, egress: str, domain: str, now: float) -> None:
        key = (egress, domain)
        self.sent[key] += 1
        if self.rate > 0:
            self._next[key] = max(now, self._next.get(key, 0.0)) + self.interval

    def pressure(self, top: int = 10) -> list[dict[str, object]]:
        """The busiest routes: requests sent, times found at the cap."""
        keys = sorted(set(self.sent) | set(self.capped), key=lambda k: (-self.capped[k], -self.sent[k], k))[:top]
        return [{"egress": e, "domain": d, "sent": self.sent[(e, d)], "capped": self.capped[(e, d)]} for e, d in keys]
