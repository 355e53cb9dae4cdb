"""Bodies slower through one egress than through the site's other routes.

A proxy that sends a response's headers at once and then trickles its body passes the
first-byte timeout, and every attempt through it ends ``ok``: nothing counted against it,
and a crawl with one such proxy among healthy ones took 164 s instead of 20.5 s. The time
from the headers to the end of the body is measured on every attempt through an egress
(:mod:`scrapy_scale.egress.first_byte`) and compared with the same site's bodies through
its other egresses: a body that took longer than ``factor`` times their 95th percentile
(their last ``window`` times, at least ``min_samples`` of them), and longer than
``floor`` seconds, is slow. The egress pool counts a slow body as a failure of the route
(egress, site) instead of a good answer, and of the egress everywhere once it was slow
so on ``GLOBAL_SITES`` sites within a half-life (:meth:`spread`; as failures after the
connection are, :mod:`scrapy_scale.egress.suspects`).

Plain Python, no clock: the glue measures.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

from scrapy_scale.egress.header_times import SiteTimes

#: body times kept per route (egress, site)
WINDOW = 20
#: the other routes' times needed before a body can be called slow
MIN_SAMPLES = 5
#: slow: more than this many times the other routes' 95th percentile...
FACTOR = 4.0
#: ...and more than this many seconds (a loaded machine may add a second)
FLOOR = 1.0
#: distinct sites an egress must have been slow on before its slow bodies count globally
GLOBAL_SITES = 2


class BodyTimes(SiteTimes):
    WINDOW, MIN_SAMPLES, FACTOR, FLOOR = WINDOW, MIN_SAMPLES, FACTOR, FLOOR

    def __init__(self, **tuning: Any):
        super().__init__(**tuning)
        self._slow: dict[str, dict[str, float]] = {}  # egress -> site -> when it was last slow there

    def observe(self, site: str, egress: str, seconds: float) -> bool:
        """The body of an attempt to ``site`` through ``egress`` took ``seconds`` after its
        headers. Returns True when that is slow against the site's other routes."""
        if not site or not egress or not math.isfinite(seconds) or seconds < 0:
            return False
        routes: dict[str, deque[float]] = self._site(site, dict)
        others = [t for e, times in routes.items() if e != egress for t in times]
        p95 = self._p95(others)
        slow = p95 is not None and seconds > self.floor and seconds > self.factor * p95
        routes.setdefault(egress, deque(maxlen=self.window)).append(seconds)
        return slow

    def spread(self, egress: str, site: str, now: float, window: float) -> bool:
        """``egress`` was just slow on ``site``: True when it was slow on ``GLOBAL_SITES``
        different sites within ``window`` seconds (the egress's fault, not one site's)."""
        sites = self._slow.setdefault(egress, {})
        sites[site] = now
        for s in [s for s, at in sites.items() if now - at > window]:
            del sites[s]
        while len(sites) > self.max_sites:
            del sites[next(iter(sites))]
        return len(sites) >= GLOBAL_SITES

    def forget(self, egresses: Iterable[str]) -> None:
        """Egresses no longer in the pool."""
        gone = set(egresses)
        for routes in self._sites.values():
            for e in gone:
                routes.pop(e, None)
        for e in gone:
            self._slow.pop(e, None)
