"""The real plan of bench_chaos (``python -m benchmarks.bench_chaos --plan real``):
third-party servers on loopback instead of the testbed, so the answers are nginx's,
tinyproxy's and Squid's, not ours (tests/support/real_servers.py starts them, each
from a config in a temporary folder, on free ports, for every crawl afresh).

nginx 1.22 serves four static sites, each on its own loopback address, ``--pages`` detail
pages each (host d ``--cd-pages``), listings of 25 links:

- a: ``limit_req`` 3/s per client address, refused with 429 and ``Retry-After: 1``;
- b: 6/s, refused with nginx's default 503 (no ``Retry-After``);
- c: 6/s, refused with 429 without ``Retry-After``; 5% of its requests answered nginx's
  own 503 at random (before the rate limit); it ``deny``s the second Squid's address (403);
- d: no rate limit, ``Crawl-delay: 1`` (``--crawl-delay``) in robots.txt.

Eight egresses: two tinyproxy and two Squid (each binding its own outgoing 127.0.2.x, so
nginx limits each on its own), a tinyproxy and a Squid whose upstream is dead (they
answer every request themselves: tinyproxy's ``502 Unable to connect to upstream
proxy``, Squid's ``ERR_CONNECT_FAIL`` page), a blackhole (accepts, never answers) and a
dead port. The plan's limit: per host, its per-address limit x the healthy egresses not
denied there, host d capped at 1 / Crawl-delay.

Stacks, each in its own ``scrapy crawl catalog`` process with ``CONCURRENT_REQUESTS`` 16
and the deadline ``CLOSESPIDER_TIMEOUT`` = ``--max-seconds``: Scrapy + AutoThrottle +
scrapy-rotating-proxies and Scrapy + RetryMiddleware + rotating proxies, each twice: on
Scrapy's defaults (``DOWNLOAD_TIMEOUT`` 180 s, robots.txt obeyed) and in their strongest
configuration here (``DOWNLOAD_TIMEOUT`` 10 s, robots.txt off: nothing waits on a
blackhole for 3 minutes, no Crawl-delay to keep); then the add-on on its defaults with
``SCALE_EGRESSES`` and ``DOWNLOAD_TIMEOUT`` = ``--timeout``. The ratio is against the
strongest Scrapy stack by pages/min.

Measured at the site, from nginx's access log (client address, ``$msec``): requests,
429s and rate refusals, the ok answers a second while each host had work (from its first
request to its last ok answer, robots.txt aside) as a share of its limit over that
time, the Crawl-delay host's closest two requests. From the crawl: the pages whose item
was scraped, pages/min over ``elapsed_time_seconds``, all attempts (through dead
egresses too), attempts per egress at order 950 against the quarantine bound of
bench_chaos (``CountProxies``). Goals and how they are judged: benchmarks/chaos_goals.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.chaos_goals import Goal, HostPlan, goals, median, site_figures
from tests.support.crawling import start_crawl
from tests.support.real_servers import Blackhole, RealSites, Site, Squid, Tinyproxy
from tests.support.services import LOOPBACK, free_port

MIN_FAILURES = 3  # SCALE_EGRESS_MIN_FAILURES' default
REPROBE_EVERY = 15.0  # the shortest first quarantine (SCALE_EGRESS_QUARANTINE 30 s, jittered to half)
#: healthy egresses: (id, kind, outgoing address)
HEALTHY: tuple[tuple[str, str, str], ...] = (
    ("tp1", "tinyproxy", "127.0.2.1"),
    ("tp2", "tinyproxy", "127.0.2.2"),
    ("sq1", "squid", "127.0.2.3"),
    ("sq2", "squid", "127.0.2.4"),
)
DENIED = "127.0.2.4"  # sq2's address, denied by site c
#: egresses whose upstream is dead: they answer every request themselves
SELF_ANSWERING = (("tp-dead", "tinyproxy", "127.0.2.5"), ("sq-dead", "squid", "127.0.2.6"))
PER_PAGE = 25


@dataclass
class RealPlan:
    pages: int
    cd_pages: int
    crawl_delay: float
    noise: float

    def sites(self) -> list[Site]:
        p = self.pages
        return [
            Site("a", "127.0.1.1", pages=p, per_page=PER_PAGE, rate=3, retry_after=1),
            Site("b", "127.0.1.2", pages=p, per_page=PER_PAGE, rate=6, limit_status=503),
            Site("c", "127.0.1.3", pages=p, per_page=PER_PAGE, rate=6, noise=self.noise, deny=(DENIED,)),
            Site("d", "127.0.1.4", pages=self.cd_pages, per_page=PER_PAGE, crawl_delay=self.crawl_delay),
        ]

    def hosts(self) -> list[HostPlan]:
        out = []
        for s in self.sites():
            routes = sum(1 for _, _, addr in HEALTHY if addr not in s.deny)
            limit = s.rate * routes if s.rate is not None else math.inf
            if s.crawl_delay:
                limit = min(limit, 1 / s.crawl_delay)
            out.append(HostPlan(s.addr, limit, s.crawl_delay, s.limit_status if s.rate is not None else None))
        return out

    def limit(self) -> float:
        return sum(h.limit for h in self.hosts())


STACKS = (
    "Scrapy + AutoThrottle + rotating-proxies, defaults",
    "Scrapy + AutoThrottle + rotating-proxies, timeout 10 s, robots.txt off",
    "Scrapy + RetryMiddleware + rotating-proxies, defaults",
    "Scrapy + RetryMiddleware + rotating-proxies, timeout 10 s, robots.txt off",
    "scrapy-scale add-on + SCALE_EGRESSES",
)


def stack_settings(name: str, egresses: list[str], timeout: float) -> dict[str, Any]:
    if name.startswith("scrapy-scale"):
        return {
            "SCALE_EGRESSES": egresses,
            "SCALE_RETRY_LATE": None,  # the add-on on its defaults (the test runner turns late retries off)
            "DOWNLOAD_TIMEOUT": timeout,
            "DOWNLOADER_MIDDLEWARES": {"benchmarks.bench_chaos.CountProxies": 950},
        }
    tuned = name.endswith("robots.txt off")
    return {
        "ADDONS": {},
        "ROBOTSTXT_OBEY": not tuned,
        "DOWNLOAD_TIMEOUT": 10 if tuned else 180,
        "AUTOTHROTTLE_ENABLED": "AutoThrottle" in name,
        "ROTATING_PROXY_LIST": [u.removeprefix("http://") for u in egresses],
        "DOWNLOADER_MIDDLEWARES": {
            "rotating_proxies.middlewares.RotatingProxyMiddleware": 610,
            "rotating_proxies.middlewares.BanDetectionMiddleware": 620,
            "benchmarks.bench_chaos.CountProxies": 950,
        },
    }


def crawl(name: str, plan: RealPlan, a: argparse.Namespace, work: Path, round_no: int) -> dict[str, Any]:
    """One crawl of ``name`` through fresh servers of ``plan``; what it measured."""
    work.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        web = stack.enter_context(RealSites(work / "nginx", plan.sites()))
        kinds = {"tinyproxy": Tinyproxy, "squid": Squid}
        healthy = [stack.enter_context(kinds[k](work / pid, out=addr)) for pid, k, addr in HEALTHY]
        dead = {
            pid: stack.enter_context(kinds[k](work / pid, out=addr, dead_upstream=True))
            for pid, k, addr in SELF_ANSWERING
        }
        hole = stack.enter_context(Blackhole())
        dead_port = f"http://{LOOPBACK}:{free_port()}"
        egresses = [p.url for p in healthy] + [p.url for p in dead.values()] + [hole.url, dead_port]
        eid = {pid: p.url.removeprefix("http://") for pid, p in dead.items()}
        eid.update(blackhole=hole.url.removeprefix("http://"), dead_port=dead_port.removeprefix("http://"))
        counts = work / "proxies.json"
        settings = stack_settings(name, egresses, a.timeout)
        settings.update(
            BENCH_PROXY_COUNTS=str(counts),
            BENCH_SELF_ANSWERING=[eid[pid] for pid in dead],
            CONCURRENT_REQUESTS=16,
            CLOSESPIDER_TIMEOUT=a.max_seconds,
            LOG_LEVEL="INFO",
        )
        proc = start_crawl(None, settings, work, start_urls=web.start_urls)
        res = proc.finish(a.max_seconds + float(settings["DOWNLOAD_TIMEOUT"]) + 120)
        served = web.requests()
        details = web.detail_urls()
    if res.returncode != 0:
        raise RuntimeError(f"{name}: exit {res.returncode}\n{res.tail(3000)}")
    proxies = json.loads(counts.read_text())
    elapsed = float(res.stats.get("elapsed_time_seconds", 0)) or 1e-9
    got = {i["url"] for i in res.items} & details
    row: dict[str, Any] = {
        "stack": name,
        "round": round_no,
        "pages": len(got),
        "share": len(got) / len(details),
        "per_min": 60 * len(got) / elapsed,
        "req_per_page": int(res.stats.get("downloader/request_count", 0)) / max(1, len(got)),
        "elapsed": elapsed,
        "finish_reason": res.stats.get("finish_reason"),
        **site_figures(served, plan.hosts()),
    }

    def attempts(pid: str) -> tuple[int, int | None]:
        n = int(proxies["sent"].get(eid[pid], 0))
        ev = proxies["evictable"].get(eid[pid])
        if ev is None:
            return n, None
        return n, ev[0] + math.ceil(max(0.0, proxies["elapsed"] - ev[1]) / REPROBE_EVERY)

    row["self_answering"] = {pid: attempts(pid) for pid in dead}
    row["blackhole"], row["dead_port"] = attempts("blackhole"), attempts("dead_port")
    return row


def _bound(nb: tuple[int, int | None]) -> str:
    n, bound = nb
    return f"{n} (<= {bound})" if bound is not None else f"{n} (never {MIN_FAILURES} failures)"


def report(rows: list[dict[str, Any]], plan: RealPlan, cmd: str) -> str:
    names = list(dict.fromkeys(r["stack"] for r in rows))
    rounds = len({r["round"] for r in rows})

    def med(stack: str, key: str) -> float:
        return median(r[key] for r in rows if r["stack"] == stack)

    def per_page(stack: str, key: str) -> float:
        return median(r[key] / max(1, r["pages"]) for r in rows if r["stack"] == stack)

    limits = ", ".join(f"{h.addr} {h.limit:g}/s" for h in plan.hosts())
    lines = [
        f"`{cmd}`: the real plan, limit {plan.limit():g} requests/s ({limits}); "
        f"{3 * plan.pages + plan.cd_pages} detail pages; medians of {rounds} round(s), "
        "proxy attempts from the last round",
        "",
        "| stack | pages crawled (worst run) | pages/min | requests a page at nginx | attempts a page | "
        "429s a page | rate refusals a page | ok/s while hosts have work, share of the limit | "
        "Crawl-delay host, closest requests (s) | tinyproxy dead upstream | Squid dead upstream | "
        "blackhole | dead port |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        mine = [r for r in rows if r["stack"] == n]
        last = mine[-1]
        gaps = [r["cd_min_gap"] for r in mine if r["cd_min_gap"] is not None]
        worst = min(mine, key=lambda r: r["share"])
        lines.append(
            f"| {n} | {worst['pages']} ({100 * worst['share']:.1f}%) | {med(n, 'per_min'):.0f} | "
            f"{per_page(n, 'site_requests'):.2f} | {med(n, 'req_per_page'):.2f} | {per_page(n, 'site_429s'):.3f} | "
            f"{per_page(n, 'site_refusals'):.3f} | {100 * med(n, 'busy_share'):.0f}% | "
            f"{min(gaps) if gaps else float('nan'):.3f} | {_bound(last['self_answering']['tp-dead'])} | "
            f"{_bound(last['self_answering']['sq-dead'])} | {_bound(last['blackhole'])} | {_bound(last['dead_port'])} |"
        )
    me = [n for n in names if n.startswith("scrapy-scale")]
    scrapy = [n for n in names if not n.startswith("scrapy-scale")]
    if me:
        names_by_addr = {s.addr: s.name for s in plan.sites()}
        per_round = []
        for r in (r for r in rows if r["stack"] == me[0]):
            hosts = ", ".join(f"{names_by_addr.get(a, a)} {n}" for a, n in r.get("site_429s_by_host", {}).items() if n)
            per_round.append(f"{r['site_429s']} ({hosts or 'none'})")
        lines += ["", f"The add-on's 429s at nginx, round by round (by host): {'; '.join(per_round)}"]
    if not me or not scrapy:
        return "\n".join(lines)
    table: list[Goal] = goals(rows, me[0], scrapy, plan.crawl_delay, MIN_FAILURES)
    lines += ["", "| goal (the add-on) | value | bound | held | by |", "|---|---:|---|---|---:|"]
    lines += [f"| {g.name} | {g.value} | {g.bound} | {'held' if g.held else 'MISSED'} | {g.margin} |" for g in table]
    return "\n".join(lines)
