"""How long each site takes to send its response headers, and the first-byte bound of an
attempt through an egress that has not proved itself.

A proxy that accepts and never answers (a blackhole) held each of its attempts for the
whole first-byte timeout (``SCALE_EGRESS_FIRST_BYTE_TIMEOUT``, 30 s; or ``DOWNLOAD_TIMEOUT``
when lower): each re-probe out of quarantine held one page that long, and the last pages
of a site waited for it. An attempt through an egress that has not proved itself (a
re-probe, or no answer through it yet while others answered) is bound by what the site
showed through the others instead: ``factor`` times the 95th percentile of its last
``window`` times to the headers, never under ``floor`` nor over the configured timeout.
Until a site has ``min_samples`` such times, the last ``window`` times of every site
together stand in (a blackhole drawn by a site's first request, its robots.txt, held the
whole site for the download timeout); until those are ``min_samples`` too, the configured
timeout holds. Plain Python, no clock: the glue measures and reports
(:mod:`scrapy_scale.egress.first_byte`).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from typing import Any

#: a site's times kept for its percentile
WINDOW = 50
#: times needed before a site's bound is shorter than the configured timeout
MIN_SAMPLES = 5
#: the bound, in multiples of the site's 95th percentile
FACTOR = 4.0
#: never shorter than this (seconds): a loaded machine or a congested link may add a second
FLOOR = 2.0
#: sites remembered (least recently seen dropped first)
MAX_SITES = 10_000


class SiteTimes:
    """Recent times per site, the least recently seen site dropped first, and their 95th
    percentile: what :class:`HeaderTimes` and ``body_times.BodyTimes`` share. A subclass
    sets its defaults as the class attributes below."""

    WINDOW, MIN_SAMPLES, FACTOR, FLOOR = WINDOW, MIN_SAMPLES, FACTOR, FLOOR

    def __init__(
        self,
        *,
        window: int | None = None,
        min_samples: int | None = None,
        factor: float | None = None,
        floor: float | None = None,
        max_sites: int = MAX_SITES,
    ):
        self.window = self.WINDOW if window is None else window
        self.min_samples = self.MIN_SAMPLES if min_samples is None else min_samples
        self.factor = self.FACTOR if factor is None else factor
        self.floor = self.FLOOR if floor is None else floor
        self.max_sites = max_sites
        self._sites: OrderedDict[str, Any] = OrderedDict()

    @property
    def sites(self) -> list[str]:
        """The sites kept, least recently observed first (the next one dropped past ``max_sites``)."""
        return list(self._sites)

    def _site(self, site: str, new: Callable[[], Any]) -> Any:
        """What is kept for ``site`` (``new()`` the first time), now the most recently seen."""
        kept = self._sites.get(site)
        if kept is None:
            kept = self._sites[site] = new()
            while len(self._sites) > self.max_sites:
                self._sites.popitem(last=False)
        else:
            self._sites.move_to_end(site)
        return kept

    def _p95(self, times: Collection[float] | None) -> float | None:
        """The 95th percentile of ``times``, or None below ``min_samples`` of them."""
        if times is None or len(times) < self.min_samples:
            return None
        ordered = sorted(times)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


class HeaderTimes(SiteTimes):
    def __init__(self, **tuning: Any):
        super().__init__(**tuning)
        self._all: deque[float] = deque(maxlen=self.window)  # every site's, the stand-in

    def observe(self, site: str, seconds: float) -> None:
        """``site``'s headers came ``seconds`` after the attempt started (any egress)."""
        if not site or not math.isfinite(seconds) or seconds < 0:
            return
        self._site(site, lambda: deque(maxlen=self.window)).append(seconds)
        self._all.append(seconds)

    def p95(self, site: str) -> float | None:
        """The site's 95th percentile time to the headers, or None below ``min_samples``."""
        return self._p95(self._sites.get(site))

    def p95_any(self) -> float | None:
        """The 95th percentile of every site's last times together, or None below
        ``min_samples``."""
        return self._p95(self._all)

    def bound(self, site: str, configured: float) -> float:
        """The first-byte bound of an unproven egress's attempt to ``site``: at most
        ``configured`` (the configured timeout), at least ``floor``; from the site's own
        times, else every site's, else ``configured``."""
        p = self.p95(site)
        if p is None:
            p = self.p95_any()
        if p is None:
            return configured
        return min(configured, max(self.floor, self.factor * p))
