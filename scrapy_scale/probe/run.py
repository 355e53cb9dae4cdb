"""Run a probe: per site (host) of the given URLs, robots.txt first, then the policy's steps.

Glue between :mod:`scrapy_scale.probe.policy` (what to run) and
:mod:`scrapy_scale.probe.load` (running it). Only the given URLs are requested (no
redirect is followed, no link), so only the given hosts see a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from protego import Protego

from scrapy_scale.errors import ScaleError
from scrapy_scale.outcomes.classify import Classifier
from scrapy_scale.probe import load
from scrapy_scale.probe.policy import Limits, Plan, Result, wait_after

logger = logging.getLogger(__name__)

#: redirects of robots.txt followed (RFC 9309: at least five), on the same host only
ROBOTS_REDIRECTS = 5


class ProbeError(ScaleError):
    """The probe cannot run (bad URL, robots.txt says no...)."""


@dataclass
class SiteProbe:
    host: str
    urls: list[str]
    result: Result = field(default_factory=Result)
    #: robots.txt said: "" (allowed), or why the site was not probed
    skipped: str = ""
    #: URLs robots.txt disallows (not requested)
    disallowed: list[str] = field(default_factory=list)

    def recommendation(self, margin: float) -> dict[str, dict[str, Any]] | None:
        """The profile to pace the site with; None when it was not probed, had no good step,
        or the probe ended client-bound (its last good step is this machine's limit, not the
        site's knee)."""
        if self.skipped or self.result.client_bound:
            return None
        return self.result.recommendation(self.host, margin)


def group_by_host(urls: Sequence[str]) -> dict[str, list[str]]:
    """The URLs by host name (a URL that is not http(s) with a host is an error)."""
    out: dict[str, list[str]] = {}
    for u in urls:
        try:
            parts = urlsplit(u)
            parts.port  # noqa: B018 - raises ValueError on a port that is not 0-65535
        except ValueError as e:
            raise ProbeError(f"not a URL: {u!r} ({e})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProbeError(f"not an http(s) URL with a host: {u!r}")
        out.setdefault(parts.hostname, []).append(u)
    return out


async def _robots(sess: Any, url: str, user_agent: str) -> tuple[Protego | None, str]:
    """(parser, "") or (None, why not allowed). A missing robots.txt (4xx) allows all; one
    that cannot be read (5xx, no answer) disallows all, as RFC 9309 says. Its redirects
    are followed (up to five) only on the same host: the probe requests no other host."""
    parts = urlsplit(url)
    robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
    try:
        for _ in range(1 + ROBOTS_REDIRECTS):
            async with sess.get(robots_url, allow_redirects=False) as r:
                if r.status in (301, 302, 303, 307, 308):
                    target = urlsplit(urljoin(robots_url, r.headers.get("Location", "")))
                    if target.scheme not in ("http", "https") or target.hostname != parts.hostname:
                        where = target.hostname or target.geturl() or "nowhere"
                        return None, f"robots.txt redirects to another host ({where}): not probed"
                    robots_url = target.geturl()
                    continue
                if 400 <= r.status < 500:
                    return Protego.parse(""), ""
                if r.status >= 300:
                    return None, f"robots.txt answered {r.status}: not probed"
                text = (await r.read()).decode("utf-8", "replace")
                break
        else:
            return None, f"robots.txt redirects more than {ROBOTS_REDIRECTS} times: not probed"
    except Exception as e:  # noqa: BLE001 - said in the report
        return None, f"robots.txt unreachable ({type(e).__name__}: {e}): not probed"
    return Protego.parse(text), ""


async def probe_site(
    site: SiteProbe,
    lim: Limits,
    classifier: Classifier,
    names: Mapping[str, str],
    user_agent: str,
    timeout: float,
    requests_left: Callable[[], int],
    say: Callable[[str], None],
) -> SiteProbe:
    async with load.session(names, timeout, user_agent) as sess:
        parser, why = await _robots(sess, site.urls[0], user_agent)
        if parser is None:
            site.skipped = why
            return site
        allowed = [u for u in site.urls if parser.can_fetch(u, user_agent)]
        site.disallowed = [u for u in site.urls if u not in allowed]
        delay = parser.crawl_delay(user_agent)
        if not allowed:
            site.skipped = "robots.txt disallows every URL given: not probed"
            return site
        if delay:
            site.skipped = (
                f"robots.txt asks for Crawl-delay {delay:g} s between requests: not probed, since a probe "
                "cannot keep it (a crawl with the throttle paces this site at that delay)"
            )
            return site
        plan = Plan(lim)
        while (step := plan.next_step()) is not None:
            c, phase, max_rate = step
            # a step takes at most an eighth of the budget, so a fast site leaves room for the next
            budget = min(requests_left(), lim.max_requests - plan.requests, step_budget(lim))
            if budget <= 0:
                plan.end("budget (max requests) used up")
                break
            good = plan.last_good
            stagger = min(good.p50, lim.warmup) if good is not None else 0.0
            deadline = time.monotonic() + plan.time_left()  # max time bounds the step too
            fig = await load.run_step(
                sess, allowed, c, phase, max_rate, lim, classifier, budget, stagger, deadline=deadline
            )
            plan.record(fig)
            say(step_line(site.host, fig))
            rest = min(wait_after(fig), plan.time_left())
            if rest > 0 and plan.next_step() is not None:
                await asyncio.sleep(rest)
        site.result = plan.result
    return site


def step_budget(lim: Limits) -> int:
    return max(lim.max_requests // 8, 2 * lim.min_answers)


def step_line(host: str, fig: Any) -> str:
    why = f" ({'; '.join(fig.reasons)})" if fig.reasons else ""
    return (
        f"{host}: {fig.phase} c={fig.concurrency}: {fig.goodput:.1f}/s, success {fig.success:.1%}, "
        f"p95 {fig.p95 * 1000:.0f} ms -> {fig.verdict}{why}"
    )


def run(
    urls: Sequence[str],
    lim: Limits,
    classifier: Classifier,
    *,
    names: Mapping[str, str] | None = None,
    user_agent: str = "scrapy-scale-probe",
    timeout: float = 10.0,
    say: Callable[[str], None] = lambda s: None,
) -> list[SiteProbe]:
    """Probe each host of ``urls`` in turn (sharing the request budget); blocking."""
    sites = [SiteProbe(h, us) for h, us in group_by_host(urls).items()]
    used = [0]

    def left() -> int:
        return lim.max_requests - used[0]

    async def main() -> None:
        for s in sites:
            await probe_site(s, lim, classifier, names or {}, user_agent, timeout, left, say)
            used[0] += sum(f.requests for f in s.result.steps)

    asyncio.run(main())
    return sites
