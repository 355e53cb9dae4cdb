"""Benchmark (not a test): Scrapy's stacks and the scrapy-scale add-on on one chaos plan.

    python -m benchmarks.bench_chaos                  # the plan below, the three stacks, one round
    python -m benchmarks.bench_chaos --rounds 2 --pages 200 --rate 4
    python -m benchmarks.bench_chaos --plan real     # nginx, tinyproxy, Squid: benchmarks/chaos_real.py

The plan (a fresh in-process testbed per crawl, same seed, so every stack meets the same
faults and full rate buckets): ``--hosts`` hosts (default 5) of ``--pages`` detail pages
each, every one allowing ``--rate`` requests/s per client address (so per egress); 5%
random 503s on every page; host 3 answers everything ``--slow`` s late; host 4 answers
503 to everything for ``--burst`` seconds from its first request (robots.txt aside: its
entry page fails, then recovers); host 5 announces ``Crawl-delay`` (``--crawl-delay``)
in robots.txt. Eight proxies: three healthy, one banned (403) by host 2, one dead
(refused), one blackhole (accepts, never answers), one garbage (non-HTTP bytes), one
midclose (closes mid-answer).

Stacks, each in its own ``scrapy crawl catalog`` process, with the same
``CONCURRENT_REQUESTS`` (16, Scrapy's default), ``DOWNLOAD_TIMEOUT`` (``--timeout``,
the same for all: Scrapy's 180 s would let one blackholed request hold a slot for
three minutes) and a deadline (``CLOSESPIDER_TIMEOUT`` = ``--max-seconds``: what a stack
has not crawled by then counts as not crawled):

1. Scrapy + AutoThrottle (its defaults) + scrapy-rotating-proxies as its README configures
   it (``ROTATING_PROXY_LIST`` and its two middlewares), robots.txt obeyed;
2. the same without AutoThrottle (Scrapy's RetryMiddleware retries);
3. the scrapy-scale add-on on its defaults with ``SCALE_EGRESSES`` = the eight proxies.

Measured (from the crawl's stats and items, a counting middleware at 950 and the
testbed's request log): detail pages whose item was scraped (share of all: every page
is reachable), their rate per minute over the crawl's ``elapsed_time_seconds``, download
attempts per such page, 429s the hosts sent, attempts through the dead and the blackhole
proxy against a bound (attempts sent before that proxy's ``SCALE_EGRESS_MIN_FAILURES``-th
failure came back, i.e. that many plus what was in flight, plus one re-probe per 15 s
after), the most requests the Crawl-delay host got in any 2 s window against what its
Crawl-delay allows, and the add-on's ok answers per second as a share of the plan's
physical limit: the sum over hosts of (per-address limit x egresses that may reach it),
capped by 1 / Crawl-delay. Then ratios against the best Scrapy stack (by pages/min) and
PASS/MISS per goal. ``pip install -e .[bench]`` for scrapy-rotating-proxies.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import chaos_real  # noqa: E402
from scrapy_scale.testbed import ProxySpec, Testbed  # noqa: E402
from tests.support.crawling import start_crawl  # noqa: E402

PROXIES = [
    ProxySpec("ok1"),
    ProxySpec("ok2"),
    ProxySpec("ok3"),
    ProxySpec("banned", banned_by=(2,)),
    ProxySpec("dead", mode="dead"),
    ProxySpec("blackhole", mode="blackhole"),
    ProxySpec("garbage", mode="garbage"),
    ProxySpec("midclose", mode="midclose"),
]
#: proxies that may reach a host: the healthy ones, and the banned one except at its banning hosts
HEALTHY = ("ok1", "ok2", "ok3")
MIN_FAILURES = 3  # SCALE_EGRESS_MIN_FAILURES' default
REPROBE_EVERY = 15.0  # the shortest first quarantine (SCALE_EGRESS_QUARANTINE 30 s, jittered to half)
WINDOW = 2.0  # seconds of the window the Crawl-delay host's rate is measured over


class CountProxies:
    """Downloader middleware (order 950, next to the downloader): per proxy, attempts sent,
    and how many had been sent when its MIN_FAILURES-th failure (an exception, or any
    answer of a proxy in BENCH_SELF_ANSWERING: one that answers every request itself) came
    back; written as JSON to BENCH_PROXY_COUNTS when the spider closes."""

    def __init__(self, path: str, self_answering: list[str] | tuple[str, ...] = ()):
        self.path, self.t0 = path, time.monotonic()
        self.self_answering = set(self_answering)
        self.sent: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.evictable: dict[str, tuple[int, float]] = {}  # proxy -> (sent then, seconds into the crawl)

    @classmethod
    def from_crawler(cls, crawler: Any) -> CountProxies:
        from scrapy import signals

        mw = cls(crawler.settings.get("BENCH_PROXY_COUNTS"), crawler.settings.getlist("BENCH_SELF_ANSWERING"))
        crawler.signals.connect(mw.closed, signal=signals.spider_closed)
        return mw

    @staticmethod
    def key(request: Any) -> str:
        proxy = request.meta.get("proxy") or "direct"
        return proxy.split("@")[-1].replace("http://", "")

    def process_request(self, request: Any, spider: Any = None) -> None:
        self.sent[self.key(request)] += 1

    def process_response(self, request: Any, response: Any, spider: Any = None) -> Any:
        if self.key(request) in self.self_answering:
            self.failure(request)
        return response

    def process_exception(self, request: Any, exception: BaseException, spider: Any = None) -> None:
        self.failure(request)

    def failure(self, request: Any) -> None:
        k = self.key(request)
        self.failed[k] += 1
        if self.failed[k] == MIN_FAILURES:
            self.evictable[k] = (self.sent[k], time.monotonic() - self.t0)

    def closed(self, spider: Any) -> None:
        out = {"sent": self.sent, "evictable": self.evictable, "elapsed": time.monotonic() - self.t0}
        Path(self.path).write_text(json.dumps(out))


@dataclass
class Plan:
    hosts: int
    pages: int
    rate: float
    slow: float
    burst: float
    crawl_delay: float
    noise: float
    seed: int

    def faults(self) -> str:
        # host 4's burst first (the first rule that fires answers), then the noise, then the slow host
        return f"503@4,until={self.burst};503,p={self.noise};slow@3,delay={self.slow}"

    def testbed(self) -> Testbed:
        tb = Testbed(
            hosts=self.hosts,
            pages=self.pages,
            seed=self.seed,
            faults=self.faults(),
            proxies=PROXIES,
            rate_limit=self.rate,
            robots_crawl_delay={5: self.crawl_delay},
            keep_log=True,
        )
        return tb

    def routes(self, host_no: int) -> int:
        banned = next(p for p in PROXIES if p.id == "banned")
        return len(HEALTHY) + (0 if host_no in banned.banned_by else 1)

    def host_limit(self, host_no: int) -> float:
        lim = self.rate * self.routes(host_no)
        return min(lim, 1 / self.crawl_delay) if host_no == 5 else lim

    def limit(self) -> float:
        return sum(self.host_limit(n) for n in range(1, self.hosts + 1))


STACKS = (
    "Scrapy + AutoThrottle + rotating-proxies",
    "Scrapy + RetryMiddleware + rotating-proxies",
    "scrapy-scale add-on + SCALE_EGRESSES",
)


def stacks(tb: Testbed) -> dict[str, dict[str, Any]]:
    hostports = [u.split("//")[1] for u in tb.proxy_urls]
    rotating = {
        "ADDONS": {},
        "ROBOTSTXT_OBEY": True,
        "ROTATING_PROXY_LIST": hostports,
        "DOWNLOADER_MIDDLEWARES": {
            "rotating_proxies.middlewares.RotatingProxyMiddleware": 610,
            "rotating_proxies.middlewares.BanDetectionMiddleware": 620,
            "benchmarks.bench_chaos.CountProxies": 950,
        },
    }
    return {
        STACKS[0]: {**rotating, "AUTOTHROTTLE_ENABLED": True},
        STACKS[1]: rotating,
        STACKS[2]: {
            "SCALE_EGRESSES": tb.proxy_urls,
            # the add-on on its defaults: the test runner's "no late retries" is taken off again
            "SCALE_RETRY_LATE": None,
            "DOWNLOADER_MIDDLEWARES": {"benchmarks.bench_chaos.CountProxies": 950},
        },
    }


def crawl(name: str, plan: Plan, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One crawl of ``name`` against a fresh testbed of ``plan``; what it measured."""
    with plan.testbed() as tb:
        settings = dict(stacks(tb)[name])
        counts = work / "proxies.json"
        settings.update(
            BENCH_PROXY_COUNTS=str(counts),
            CONCURRENT_REQUESTS=16,
            DOWNLOAD_TIMEOUT=a.timeout,
            CLOSESPIDER_TIMEOUT=a.max_seconds,
            LOG_LEVEL="INFO",
        )
        res = start_crawl(tb, settings, work).finish(a.max_seconds + 120)
        log = tb.log
        if a.keep:  # the testbed's request log beside the crawl's, for a trace
            with open(work / "testbed-log.jsonl", "w") as f:
                for rec in log:
                    f.write(json.dumps(rec.as_dict()) + "\n")
        port = {pid: f"127.0.0.1:{p}" for pid, p in tb.proxy_ports.items()}
        details = tb.detail_urls()
        host5 = tb.hosts[4] if len(tb.hosts) >= 5 else None
        host4 = tb.hosts[3] if len(tb.hosts) >= 4 else None
    if res.returncode != 0:
        raise RuntimeError(f"{name}: exit {res.returncode}\n{res.tail(3000)}")
    proxies = json.loads(counts.read_text())
    elapsed = float(res.stats.get("elapsed_time_seconds", 0)) or 1e-9
    got = {i["url"] for i in res.items} & details
    sent = int(res.stats.get("downloader/request_count", 0))
    ok = sum(1 for r in log if r.kind in ("ok", "slow") and r.status == 200)
    out: dict[str, Any] = {
        "stack": name,
        "pages": len(got),
        "share": len(got) / len(details),
        "per_min": 60 * len(got) / elapsed,
        "req_per_page": sent / max(1, len(got)),
        "429s": sum(1 for r in log if r.status == 429),
        "ok_per_s": ok / elapsed,
        "busy_share": busy_share(log, host4, plan),
        "elapsed": elapsed,
        "finish_reason": res.stats.get("finish_reason"),
    }
    for pid in ("dead", "blackhole"):
        n = int(proxies["sent"].get(port[pid], 0))
        ev = proxies["evictable"].get(port[pid])
        bound = None if ev is None else ev[0] + math.ceil(max(0.0, proxies["elapsed"] - ev[1]) / REPROBE_EVERY)
        out[pid], out[f"{pid}_bound"] = n, bound
    times = sorted(r.time for r in log if r.host == host5)
    most, j = 0, 0
    for i, t in enumerate(times):  # the most arrivals in any WINDOW-second window
        while times[j] < t - WINDOW:
            j += 1
        most = max(most, i - j + 1)
    out["cd_rate"] = most / WINDOW
    return out


def busy_share(log: list[Any], burst_host: str | None, plan: Plan) -> float:
    """Ok answers/s of the hosts other than the burst host (whose subtree waits for a late
    retry by design) from their first to their last ok answer, as a share of those hosts'
    physical limit: the rate while the crawl had work it could do."""
    times = sorted(r.time for r in log if r.status == 200 and r.kind in ("ok", "slow") and r.host != burst_host)
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    limit = plan.limit() - (plan.host_limit(4) if burst_host else 0.0)
    return (len(times) / (times[-1] - times[0])) / limit


def fmt_bound(n: int, bound: int | None) -> str:
    return f"{n} (<= {bound})" if bound is not None else f"{n} (never {MIN_FAILURES} failures)"


def report(rows: list[dict[str, Any]], plan: Plan, cmd: str) -> str:
    def med(stack: str, k: str) -> float:
        vals = sorted(float(x[k]) for x in rows if x["stack"] == stack and x[k] is not None)
        return vals[len(vals) // 2] if vals else float("nan")

    names = list(dict.fromkeys(x["stack"] for x in rows))
    allowed = 1 / plan.crawl_delay
    lines = [
        f"`{cmd}`: limit {plan.limit():.0f} requests/s (hosts x per-address {plan.rate:g}/s x egresses "
        f"that may reach them, host 5 capped at {allowed:g}/s by its Crawl-delay); "
        f"{plan.hosts} x {plan.pages} detail pages; medians of {len(rows) // max(1, len(names))} round(s)",
        "",
        "| stack | pages crawled | pages/min | requests per page | 429s | dead proxy | blackhole proxy "
        f"| max req/s to the Crawl-delay host ({WINDOW:g} s) | ok answers/s, share of the limit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        last = [x for x in rows if x["stack"] == n][-1]
        lines.append(
            f"| {n} | {med(n, 'pages'):.0f} ({100 * med(n, 'share'):.1f}%) | {med(n, 'per_min'):.0f} | "
            f"{med(n, 'req_per_page'):.2f} | {med(n, '429s'):.0f} | {fmt_bound(last['dead'], last['dead_bound'])} | "
            f"{fmt_bound(last['blackhole'], last['blackhole_bound'])} | {med(n, 'cd_rate'):.1f} (<= {allowed:g}) | "
            f"{med(n, 'ok_per_s'):.1f} ({100 * med(n, 'ok_per_s') / plan.limit():.0f}%) |"
        )
    scale = [n for n in names if n.startswith("scrapy-scale")]
    scrapy = [n for n in names if not n.startswith("scrapy-scale")]
    if not scale or not scrapy:
        return "\n".join(lines)
    me, best = scale[0], max(scrapy, key=lambda n: med(n, "per_min"))
    last = [x for x in rows if x["stack"] == me][-1]

    def within(pid: str) -> bool:
        return last[f"{pid}_bound"] is None or last[pid] <= last[f"{pid}_bound"]

    goals = [
        ("pages/min vs the best Scrapy stack", med(me, "per_min") / med(best, "per_min"), ">= 1.5", None),
        ("reachable pages crawled", med(me, "share"), ">= 0.99", None),
        ("ok answers/s, share of the physical limit", med(me, "ok_per_s") / plan.limit(), ">= 0.5", None),
        ("(same, the other hosts while they were crawled)", med(me, "busy_share"), ">= 0.5", None),
        ("requests per page", med(me, "req_per_page"), "<= 1.3", None),
        ("429s vs the best Scrapy stack", med(me, "429s") / max(1.0, med(best, "429s")), "<= 0.2", None),
        ("dead proxy attempts within the bound", float(last["dead"]), "", within("dead")),
        ("blackhole proxy attempts within the bound", float(last["blackhole"]), "", within("blackhole")),
        ("Crawl-delay host, max req/s", med(me, "cd_rate"), f"<= {allowed:g}", None),
    ]
    lines += ["", f"Against the best Scrapy stack ({best}):", "", "| goal | value | bound | |", "|---|---:|---|---|"]
    for goal, v, bound, ok in goals:
        if ok is None:
            op, b = bound.split()
            ok = v >= float(b) if op == ">=" else v <= float(b) + (1 / WINDOW if "Crawl" in goal else 0)
        lines.append(f"| {goal} | {v:.2f} | {bound} | {'PASS' if ok else 'MISS'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", choices=("testbed", "real"), default="testbed", help="real: benchmarks/chaos_real.py")
    ap.add_argument("--hosts", type=int, default=5, help="at least 5 (host 5 has the Crawl-delay)")
    ap.add_argument("--pages", type=int, help="detail pages per host (testbed 120, real 200 on each limited host)")
    ap.add_argument("--cd-pages", type=int, default=25, help="real plan: detail pages of the Crawl-delay host")
    ap.add_argument("--rate", type=float, default=4.0, help="requests/s each host allows per client address")
    ap.add_argument("--slow", type=float, default=0.3, help="host 3's latency, seconds")
    ap.add_argument("--burst", type=float, default=6.0, help="seconds host 4 fails from its first request")
    ap.add_argument("--crawl-delay", type=float, help="the Crawl-delay host's robots.txt (testbed 0.1, real 1)")
    ap.add_argument("--noise", type=float, default=0.05, help="share of random 503s")
    ap.add_argument("--timeout", type=float, default=10.0, help="DOWNLOAD_TIMEOUT of every stack (real: the add-on's)")
    ap.add_argument("--max-seconds", type=float, help="CLOSESPIDER_TIMEOUT of every stack (testbed 90, real 120)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--stacks", help="which stacks, by number (testbed 1,2,3; real 1,2,3,4,5)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument(
        "--keep", metavar="DIR", help="keep every crawl's folder (log, stats, the testbed's request log) under DIR"
    )
    a = ap.parse_args(argv)
    real = a.plan == "real"
    if a.hosts < 5:
        ap.error("--hosts must be at least 5")
    if a.pages is None:
        a.pages = 200 if real else 120
    if a.crawl_delay is None:
        a.crawl_delay = 1.0 if real else 0.1
    if a.max_seconds is None:
        a.max_seconds = 120.0 if real else 90.0
    names = list(chaos_real.STACKS if real else STACKS)
    chosen = [
        names[int(i) - 1] for i in (a.stacks or ",".join(str(i + 1) for i in range(len(names)))).split(",") if i.strip()
    ]
    cmd = "python -m benchmarks.bench_chaos " + " ".join(sys.argv[1:] if argv is None else argv)
    plan = Plan(a.hosts, a.pages, a.rate, a.slow, a.burst, a.crawl_delay, a.noise, a.seed)
    real_plan = chaos_real.RealPlan(a.pages, a.cd_pages, a.crawl_delay, a.noise)
    rows, t0, load0 = [], time.monotonic(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-chaos-") as tmp_dir:
        tmp = a.keep or tmp_dir
        for r in range(a.rounds):
            order = chosen if r % 2 == 0 else list(reversed(chosen))
            for name in order:
                work = Path(tmp) / f"r{r}-{names.index(name) + 1}"
                rows.append(chaos_real.crawl(name, real_plan, a, work, r) if real else crawl(name, plan, a, work))
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n{time.monotonic() - t0:.0f} s in all; load average {load0:.1f} -> {os.getloadavg()[0]:.1f}\n")
    print(chaos_real.report(rows, real_plan, cmd.strip()) if real else report(rows, plan, cmd.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
