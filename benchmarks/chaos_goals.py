"""What the real plan of bench_chaos measures at the site: figures from nginx's access log
(one dict per request: client address, ``t`` = $msec, host, status, path; as
tests/support/real_servers.py's ``RealSites.requests()`` parses it) and the goals of
issue 33, each held or missed. Plain functions, no servers: benchmarks/chaos_real.py
runs the crawls and calls them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ROBOTS = "/robots.txt"


@dataclass(frozen=True)
class HostPlan:
    """One site of the plan as the figures need it: its address (nginx's $host), the
    requests a second it allows all the egresses that may reach it together (per-address
    limit x those egresses, capped by 1 / Crawl-delay), its Crawl-delay, and the status
    its rate limit refuses with."""

    addr: str
    limit: float
    crawl_delay: float | None = None
    limit_status: int | None = None


def site_figures(served: Iterable[dict[str, Any]], hosts: list[HostPlan]) -> dict[str, Any]:
    """Requests, refusals, the ok rate while each host had work, and the Crawl-delay
    host's closest two requests, all as nginx logged them."""
    served = list(served)
    by_host = {h.addr: sorted((r for r in served if r["host"] == h.addr), key=lambda r: r["t"]) for h in hosts}
    ok_sum, limit_time = 0, 0.0
    per_host: dict[str, float] = {}
    min_gap: float | None = None
    refusals = 0
    for h in hosts:
        reqs = [r for r in by_host[h.addr] if r["path"] != ROBOTS]
        oks = [r["t"] for r in reqs if r["status"] == 200]
        if h.limit_status is not None:
            refusals += sum(1 for r in reqs if r["status"] == h.limit_status)
        if oks:
            # the host has work from its first request (robots.txt aside) to its last page,
            # which takes 1 / limit of it (n requests at the limit span n / limit seconds)
            window = oks[-1] - reqs[0]["t"] + 1.0 / h.limit
            ok_sum += len(oks)
            limit_time += h.limit * window
            per_host[h.addr] = len(oks) / (h.limit * window)
        if h.crawl_delay is not None:
            times = [r["t"] for r in reqs]
            gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
            if gaps:
                min_gap = min(gaps) if min_gap is None else min(min_gap, min(gaps))
    return {
        "site_requests": len(served),
        "site_429s": sum(1 for r in served if r["status"] == 429),
        # by host: the 429 count swings 13-31 a round (mostly host a's), read it by host
        "site_429s_by_host": {h.addr: sum(1 for r in by_host[h.addr] if r["status"] == 429) for h in hosts},
        "site_refusals": refusals,
        "site_503s": sum(1 for r in served if r["status"] == 503),
        "busy_share": ok_sum / limit_time if limit_time else 0.0,
        "busy_share_by_host": per_host,
        "cd_min_gap": min_gap,
    }


def median(values: Iterable[float | None]) -> float:
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))
    if not vals:
        return float("nan")
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


@dataclass(frozen=True)
class Goal:
    name: str
    value: str
    bound: str
    held: bool
    margin: str


def _by(value: float, bound: float, higher: bool) -> str:
    """How far ``value`` is from ``bound`` on its good side (+) or bad side (-), in % of the bound."""
    diff = (value - bound) if higher else (bound - value)
    return f"{100 * diff / bound:+.0f}%"


def goals(rows: list[dict[str, Any]], me: str, scrapy: list[str], crawl_delay: float, min_failures: int) -> list[Goal]:
    """Issue 33's goals for the stack ``me`` against the strongest of ``scrapy`` (by median
    pages/min). "Every run" goals take the worst round; the others the median."""
    mine = [r for r in rows if r["stack"] == me]
    best = max(scrapy, key=lambda n: median(r["per_min"] for r in rows if r["stack"] == n))
    out = []
    share = min(r["share"] for r in mine)
    out.append(Goal("pages crawled, every run", f"{100 * share:.1f}%", ">= 99%", share >= 0.99, _by(share, 0.99, True)))
    ratio = median(r["per_min"] for r in mine) / max(1e-9, median(r["per_min"] for r in rows if r["stack"] == best))
    out.append(
        Goal(
            f"pages/min vs the strongest Scrapy stack ({best})",
            f"{ratio:.2f}x",
            ">= 1.5x",
            ratio >= 1.5,
            _by(ratio, 1.5, True),
        )
    )
    site = median(r["site_requests"] / max(1, r["pages"]) for r in mine)
    sent = median(r["req_per_page"] for r in mine)
    worst = max(site, sent)
    out.append(
        Goal(
            "requests a page (at nginx / all attempts)",
            f"{site:.2f} / {sent:.2f}",
            "<= 1.3",
            worst <= 1.3,
            _by(worst, 1.3, False),
        )
    )
    r429 = median(r["site_429s"] / max(1, r["pages"]) for r in mine)
    out.append(Goal("429s a page (at nginx)", f"{r429:.3f}", "<= 0.03", r429 <= 0.03, _by(r429, 0.03, False)))
    busy = median(r["busy_share"] for r in mine)
    out.append(
        Goal(
            "ok answers/s while hosts have work, share of the plan's limit",
            f"{100 * busy:.0f}%",
            ">= 75%",
            busy >= 0.75,
            _by(busy, 0.75, True),
        )
    )
    gaps = [r["cd_min_gap"] for r in mine if r["cd_min_gap"] is not None]
    gap = min(gaps) if gaps else float("nan")
    out.append(
        Goal(
            "Crawl-delay host, closest two requests at nginx, every run",
            f"{gap:.3f} s",
            f">= {crawl_delay:g} s",
            bool(gaps) and gap >= crawl_delay,
            _by(gap, crawl_delay, True),
        )
    )
    for r in mine:
        for pid, (n, bound) in r["self_answering"].items():
            held = n <= bound if bound is not None else n < min_failures
            out.append(
                Goal(
                    f"proxy that answers for itself ({pid}) quarantined, round {r['round'] + 1}",
                    f"{n} attempts",
                    f"<= {bound}" if bound is not None else f"never {min_failures} failures",
                    held,
                    "" if bound is None else f"{bound - n:+d}",
                )
            )
    return out
