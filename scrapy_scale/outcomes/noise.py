"""Whether a site answers well apart from one failure: noise, not pressure, for retries.

A stray 503 among good answers, or a 429 through one route of a site that limits each
client address, says little about the site: the quick retry's backoff (seconds,
doubling) then only idles the page, and when that page is a listing, the site's next
pages wait behind it (the chaos benchmark's trace: a site idle for 2 s while its next
listing page waited out a 429's backoff and a 503's). So each worker keeps, per site, a
moving share of the failures among its recent answers; while it is under
:data:`CALM_SHARE` (after :data:`MIN_ANSWERS` answers), the site is *calm* and a quick
retry's backoff window is bounded by the class's ``calm`` (see
:class:`~scrapy_scale.outcomes.policy.ClassPolicy`). A Retry-After, the per-site pacing
and late retries are unchanged; a site whose failures rise (an outage, a limit that
bites on every route) is not calm and backs off as before.

Plain Python, no clock: the share moves with answers, not time.
"""

from __future__ import annotations

from collections import OrderedDict

from scrapy_scale.outcomes.model import FailureClass

C = FailureClass

#: weight of the newest answer in a site's moving share of failures (about the last 20)
WEIGHT = 1 / 20
#: answers a site must have given before it can be calm
MIN_ANSWERS = 10
#: a site is calm while failures are under this share of its recent answers
CALM_SHARE = 0.2
#: sites remembered; the one answered least recently is forgotten first
MAX_SITES = 50_000

#: the site's failures: it answered, and not well
BAD = frozenset({C.TRANSIENT, C.RATE_LIMITED, C.BLOCKED})
#: the site answered (a 404 and a page the callback could not parse are answers)
GOOD = frozenset({C.OK, C.NOT_FOUND, C.PARSE_FAILED})


class SiteNoise:
    """Per site: answers seen and the moving share of failures among them."""

    def __init__(self, max_sites: int = MAX_SITES):
        self.max_sites = max_sites
        self._sites: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def note(self, site: str, cls: FailureClass) -> None:
        """An attempt to ``site`` ended with ``cls`` (an egress's failure or a fatal one
        says nothing about the site and is not counted)."""
        if cls in GOOD:
            bad = 0.0
        elif cls in BAD:
            bad = 1.0
        else:
            return
        n, share = self._sites.pop(site, (0, 0.0))
        # the mean of the first answers, then a moving average over about the last 1/WEIGHT
        w = max(WEIGHT, 1 / (n + 1))
        self._sites[site] = (n + 1, w * bad + (1 - w) * share)
        if len(self._sites) > self.max_sites:
            self._sites.popitem(last=False)

    def calm(self, site: str) -> bool:
        """The site answered well apart from a few failures: :data:`MIN_ANSWERS` answers at
        least, failures under :data:`CALM_SHARE` of the recent ones."""
        n, share = self._sites.get(site, (0, 1.0))
        return n >= MIN_ANSWERS and share < CALM_SHARE

    def share(self, site: str) -> float | None:
        """The moving share of failures (None: no answer seen)."""
        got = self._sites.get(site)
        return None if got is None else got[1]
