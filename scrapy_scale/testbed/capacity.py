"""Testbed hosts of known capacity, for ``scrapy scale probe`` and its tests.

``Testbed(capacity={host: Capacity(...)})`` gives a host a capacity model (a host not
listed serves as usual, as fast as it can):

- ``Capacity("knee", concurrency=C, latency=L)``: each answer takes ``L`` seconds while
  at most ``C`` requests are being served; past that it slows down steeply
  (``L * (n / C) ** exponent`` for ``n`` requests in service, counting the new one), so
  goodput peaks at ``C`` in flight and falls beyond;
- ``Capacity("bucket", rate=R, burst=B, latency=L)``: a token bucket of ``B`` tokens
  refilled at ``R``/s for the whole host (every client together); a request without a
  token gets ``429`` with ``Retry-After: 1`` at once (kind ``rate_limited``);
- ``Capacity("unlimited", latency=L)``: every answer takes ``L`` seconds however many
  come at once: the site is never the limit, the client is.

robots.txt is never shaped. The model keeps its own count of requests in service (their
answer times), so it needs no hook on the answer being written.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("knee", "bucket", "unlimited")


@dataclass(frozen=True)
class Capacity:
    kind: str
    #: knee: requests served at full speed at once
    concurrency: int = 8
    #: seconds an answer takes (below the knee)
    latency: float = 0.05
    #: knee: how steeply answers slow down past it
    exponent: float = 3.0
    #: bucket: requests per second
    rate: float = 10.0
    #: bucket: tokens of burst
    burst: float = 10.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"capacity kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        for name in ("latency", "exponent", "rate", "burst"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"capacity {name} must be a finite number >= 0, not {v!r}")
        if self.concurrency < 1 or self.rate <= 0 or self.burst < 1:
            raise ValueError("capacity: concurrency >= 1, rate > 0 and burst >= 1 are needed")


class _HostModel:
    def __init__(self, cap: Capacity):
        self.cap = cap
        self.ends: list[float] = []  # answer times of the requests in service (a heap)
        self.tokens = cap.burst
        self.last = -1.0

    def admit(self, now: float) -> tuple[bool, float]:
        """(refused, delay) for a request arriving at ``now``."""
        c = self.cap
        if c.kind == "bucket":
            if self.last >= 0:
                self.tokens = min(c.burst, self.tokens + (now - self.last) * c.rate)
            self.last = now
            if self.tokens < 1:
                return True, 0.0
            self.tokens -= 1
            return False, c.latency
        if c.kind == "unlimited":
            return False, c.latency
        while self.ends and self.ends[0] <= now:
            heapq.heappop(self.ends)
        n = len(self.ends) + 1
        delay = c.latency * max(1.0, n / c.concurrency) ** c.exponent
        heapq.heappush(self.ends, now + delay)
        return False, delay


class CapacityPlan:
    """The capacity models of a testbed's hosts (``host_no`` resolves a name or number)."""

    def __init__(self, spec: Mapping[str | int, Capacity], host_no: Callable[[str | int], int]):
        self._models = {host_no(h): _HostModel(c) for h, c in spec.items()}
        self._lock = threading.Lock()

    def shape(self, answer: Any, host_no: int, path: str, now: float) -> Any:
        """The testbed's answer as the host's capacity makes it: slower, or a 429 instead."""
        model = self._models.get(host_no)
        if model is None or path == "/robots.txt" or answer.status is None:
            return answer
        with self._lock:
            refused, delay = model.admit(now)
        if refused:
            return type(answer)(
                429, "rate_limited", b"<html><body>Too many requests</body></html>", [("Retry-After", "1")]
            )
        answer.delay = max(answer.delay, delay)
        return answer
