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

A page that fails alone is told from a site that fails as a whole the same way, by pages
rather than answers: each worker keeps, per site, the latest answer of its
:data:`PAGES_KEPT` most recently answered pages. While at least :data:`MIN_ANSWERS` *other*
pages are kept and fewer than :data:`CALM_SHARE` of them failed their latest answer, a page
that keeps failing fails *alone* (:meth:`SiteNoise.alone`): a broken page, given up after
its quick retries instead of late retries (see
:meth:`~scrapy_scale.outcomes.policy.RetryPolicy.decide`). By page, not by answer: a
broken page's own retries (or those of two other broken pages) would otherwise fill the
moving share once the site's good pages were done, and hold the crawl open with late
retries for minutes. A site with no other answers yet (its entry page) or whose other
pages fail too keeps its late retries.

Plain Python, no clock: the shares move with answers, not time.
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
#: pages per site whose latest answer is kept (besides the page being decided)
PAGES_KEPT = 20

#: the site's failures: it answered, and not well
BAD = frozenset({C.TRANSIENT, C.RATE_LIMITED, C.BLOCKED})
#: the site answered (a 404 and a page the callback could not parse are answers)
GOOD = frozenset({C.OK, C.NOT_FOUND, C.PARSE_FAILED})


class SiteNoise:
    """Per site: answers seen and the moving share of failures among them."""

    def __init__(self, max_sites: int = MAX_SITES):
        self.max_sites = max_sites
        self._sites: OrderedDict[str, tuple[int, float]] = OrderedDict()
        #: per site, page -> whether its latest answer failed, least recently answered first
        self._pages: OrderedDict[str, OrderedDict[str, bool]] = OrderedDict()

    def note(self, site: str, cls: FailureClass, page: str | None = None) -> None:
        """An attempt to ``site`` (of ``page``, any key of the page: its fingerprint) ended
        with ``cls`` (an egress's failure or a fatal one says nothing about the site and is
        not counted)."""
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
        if page is not None:
            pages = self._pages.pop(site, None) or OrderedDict()
            pages.pop(page, None)
            pages[page] = bad > 0
            if len(pages) > PAGES_KEPT + 1:  # + 1: the page being decided is not counted
                pages.popitem(last=False)
            self._pages[site] = pages
            if len(self._pages) > self.max_sites:
                self._pages.popitem(last=False)

    def pages(self, site: str) -> list[str]:
        """The pages of ``site`` kept, least recently answered first (none: site forgotten)."""
        return list(self._pages.get(site, ()))

    @property
    def page_sites(self) -> list[str]:
        """The sites whose pages are kept, least recently answered first."""
        return list(self._pages)

    def alone(self, site: str, page: str) -> bool:
        """``page`` fails alone: :data:`MIN_ANSWERS` other pages of ``site`` at least among
        the :data:`PAGES_KEPT` answered last, and fewer than :data:`CALM_SHARE` of them failed
        their latest answer."""
        pages = self._pages.get(site)
        if not pages:
            return False
        others = [bad for p, bad in pages.items() if p != page][-PAGES_KEPT:]
        return len(others) >= MIN_ANSWERS and sum(others) < CALM_SHARE * len(others)

    def calm(self, site: str) -> bool:
        """The site answered well apart from a few failures: :data:`MIN_ANSWERS` answers at
        least, failures under :data:`CALM_SHARE` of the recent ones."""
        n, share = self._sites.get(site, (0, 1.0))
        return n >= MIN_ANSWERS and share < CALM_SHARE

    def share(self, site: str) -> float | None:
        """The moving share of failures (None: no answer seen)."""
        got = self._sites.get(site)
        return None if got is None else got[1]


class RouteBlocks:
    """Per site, each egress's latest answer there: whether it was a block, and of which page.

    A block (``blocked``: 403, a block page) only one route gets is the route's, not the
    page's: a site that ``deny``s one proxy's address refuses every page through it and
    serves them through the others. Such a block spends the egress's budget (retried at once
    through another egress), not the page's ``blocked`` budget, which is kept for a page or
    a site that refuses every route. Told by comparison, with no list: the egress's latest
    answer at the site (of another page) was a block too, while another egress's latest
    answer there was not. A page that every route refuses is blocked through egresses whose
    latest answers there were good: its own budget, as before. Plain Python, no clock.
    """

    def __init__(self, max_sites: int = MAX_SITES):
        self.max_sites = max_sites
        #: per site, egress -> (page of its latest answer there, whether that was a block)
        self._sites: OrderedDict[str, dict[str, tuple[str, bool]]] = OrderedDict()

    def note(self, site: str, egress: str | None, page: str, blocked: bool) -> None:
        """An answer from ``site`` to ``page`` through ``egress`` (None: direct, not kept)."""
        if egress is None:
            return
        routes = self._sites.pop(site, None) or {}
        routes[egress] = (page, blocked)
        self._sites[site] = routes
        if len(self._sites) > self.max_sites:
            self._sites.popitem(last=False)

    def only(self, site: str, egress: str | None, page: str) -> bool:
        """A block of ``page`` through ``egress`` is the route's: the egress's latest answer
        at ``site`` was a block of another page, and another egress's latest was not a block."""
        routes = self._sites.get(site)
        if egress is None or not routes or egress not in routes:
            return False
        last_page, last_blocked = routes[egress]
        return last_blocked and last_page != page and any(not b for e, (_, b) in routes.items() if e != egress)
