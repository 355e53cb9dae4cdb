"""Per-site pacing in ``scrapy scale status JOB`` (the learned delays, read from where the
workers persist them: Redis or ``throttle.db``) and ``scrapy scale reset JOB`` (forgets them)."""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

from scrapy_scale.outcomes import settings as outcomes_settings
from scrapy_scale.throttle.learned import check_learned
from scrapy_scale.throttle.routing import split_route
from scrapy_scale.throttle.settings import throttle_url
from scrapy_scale.throttle.shared import open_shared, sqlite_path

logger = logging.getLogger(__name__)

#: sites listed in the text (the slowest first); --json lists every one
SHOWN = 20
#: sites whose routes are listed in the text (the most routes first), and routes named per site
ROUTE_SITES = 5
ROUTES_NAMED = 4
#: the longest pause shown when the settings do not say (SCALE_RETRY_AFTER_MAX's default)
PAUSE_MAX = float(outcomes_settings.RETRY_AFTER_MAX.default)


def read(settings: Any, job: str) -> list[dict[str, Any]]:
    """The learned pacing of every site of ``job``, slowest first; [] when none or unreadable."""
    url = throttle_url(settings)
    if url.startswith("sqlite:") and not os.path.exists(sqlite_path(url)):
        return []  # status only reads: no file is created
    try:
        shared = open_shared(url, job)
    except Exception:  # noqa: BLE001 - status shows what it can
        return []
    try:
        learned = shared.load(repair=False)  # status only reads
    except Exception:  # noqa: BLE001
        learned = {}
    finally:
        shared.close()
    rows = []
    now = time.time()
    for site, raw in learned.items():
        v, _ = check_learned(raw, now)  # what a worker would not use is not shown
        if v is None:
            continue
        row: dict[str, Any] = {"site": site, "delay": v["delay"], "learned_at": v["at"]}
        route = split_route(site)
        if route is not None:  # a route's own capacity (site via egress)
            row["route"] = {"site": route[0], "egress": route[1]}
        # not a finite time (an int of 400 digits, text): paused() skips it, with a warning
        row["paused_until"] = math.nan if v["paused_until"] is None else v["paused_until"]
        rows.append(row)
    return sorted(rows, key=lambda r: (-r["delay"], r["site"]))


def format_text(rows: list[dict[str, Any]], now: float | None = None) -> str:
    routes = format_routes(rows)
    rows = [r for r in rows if "route" not in r]
    if not rows:
        return routes
    now = time.time() if now is None else now
    lines = [f"pacing (learned, {len(rows)} site(s), slowest first):"]
    for r in rows[:SHOWN]:
        ago = max(0.0, now - r["learned_at"])
        lines.append(f"  {r['site']}: {r['delay']:.3f} s between requests ({ago:.0f} s ago)")
    if len(rows) > SHOWN:
        lines.append(f"  ... and {len(rows) - SHOWN} more (--json lists all)")
    return "\n" + "\n".join(lines) + routes


def format_routes(rows: list[dict[str, Any]]) -> str:
    """The routes at their learned capacity, one line per site (those with the most routes
    first): ``shop1.example.test: 4 routes, 19.2 requests/s together (e1:8080 5.1, ...)``;
    "" when no route was learned (no egresses)."""
    by_site: dict[str, list[tuple[str, float]]] = {}
    for r in rows:
        if "route" in r:
            rate = 1.0 / r["delay"] if r["delay"] > 0 else math.inf
            by_site.setdefault(r["route"]["site"], []).append((r["route"]["egress"], rate))
    if not by_site:
        return ""
    n = sum(len(v) for v in by_site.values())
    lines = [f"routes (learned capacity per egress, {n} route(s)):"]
    for site, routes in sorted(by_site.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:ROUTE_SITES]:
        routes.sort(key=lambda er: er[1])
        total = sum(rate for _, rate in routes)
        named = ", ".join(f"{e} {rate:.1f}" for e, rate in routes[:ROUTES_NAMED])
        more = ", ..." if len(routes) > ROUTES_NAMED else ""
        lines.append(f"  {site}: {len(routes)} route(s), {total:.1f} requests/s together ({named}{more})")
    if len(by_site) > ROUTE_SITES:
        lines.append(f"  ... and {len(by_site) - ROUTE_SITES} more site(s) (--json lists all)")
    return "\n" + "\n".join(lines)


class PausedSites:
    """The paused sites one reader shows: one ``scrapy scale status``, or one ``watch``
    over all its frames. The pause times come from shared state: a value that is not a
    finite number is skipped, one more than ``longest`` seconds ahead (no pause is longer)
    is shown clamped; either is warned about once per site in the reader's lifetime (a
    new reader warns again: the warn-once state is not the module's)."""

    def __init__(self, longest: float = PAUSE_MAX):
        self.longest = longest
        #: the sites whose pause time this reader warned about
        self.warned: set[str] = set()

    def at(self, rows: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """The sites of ``rows`` (:func:`read`) paused at ``now`` (by ``Retry-After``) and
        until when, soonest first."""
        out = []
        for r in rows:
            if "route" in r:
                continue  # a route's Retry-After pauses that route only; the site goes on
            until = r.get("paused_until", 0.0)
            if not isinstance(until, int | float) or not math.isfinite(until):
                self._warn_once(
                    r["site"],
                    f"throttle: {r['site']} has an unreadable pause time {until!r} in the shared state; ignored",
                )
                continue
            if until <= now:
                continue
            clamped = until > now + self.longest
            if clamped:
                self._warn_once(
                    r["site"],
                    f"throttle: {r['site']} is paused until {until:.0f}, more than {self.longest:.0f} s ahead "
                    "(SCALE_RETRY_AFTER_MAX); shown as that long",
                )
                until = now + self.longest
            out.append({"site": r["site"], "until": until, "clamped": clamped})
        return sorted(out, key=lambda p: (p["until"], p["site"]))

    def _warn_once(self, site: str, message: str) -> None:
        if site not in self.warned:
            self.warned.add(site)
            logger.warning("%s", message)


def format_paused(pauses: list[dict[str, Any]], now: float) -> str:
    """``paused (Retry-After): shop1 until 12:00:05 UTC (in 12 s), ...``; "" when none."""
    if not pauses:
        return ""
    shown = [
        f"{p['site']} until {time.strftime('%H:%M:%S', time.gmtime(p['until']))} UTC "
        f"(in {max(0.0, p['until'] - now):.0f} s{', clamped' if p.get('clamped') else ''})"
        for p in pauses[:SHOWN]
    ]
    more = f", and {len(pauses) - SHOWN} more" if len(pauses) > SHOWN else ""
    return f"paused sites (Retry-After): {', '.join(shown)}{more}"


def forget(settings: Any, job: str) -> None:
    """Forget ``job``'s learned pacing (and, on Redis, its limiter keys); nothing to do without any."""
    url = throttle_url(settings)
    if url.startswith("sqlite:") and not os.path.exists(sqlite_path(url)):
        return
    shared = open_shared(url, job)
    try:
        shared.reset()
    finally:
        shared.close()
