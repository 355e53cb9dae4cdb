"""Benchmark of scrapy_scale.egress vs scrapy-rotating-proxies on one chaos plan (not a test).

Counts, not speed: both crawls go through the same eight testbed proxies (two dead, one
slow, one flaky, one banned by host 2, three healthy) over hosts with a few real 404s and
a 429 burst, and we count what each sent:

- requests sent per page crawled (every download attempt, by the crawler's own count,
  over the detail pages that yielded their item);
- success rate (detail pages whose item was scraped, of the reachable ones: the catalog's
  minus the pages that always answer 404);
- requests through each dead proxy (attempts until eviction, plus re-tries after);
- requests through the banned route (banned proxy -> host 2, as the target saw them).

scrapy-rotating-proxies 0.6.2 runs as its README says (its two middlewares, plain Scrapy
otherwise: RetryMiddleware, no scrapy-scale add-on); scrapy-scale runs with its add-on and
``SCALE_EGRESSES`` (defaults otherwise). Each crawl is a subprocess; the testbed runs in
this process. ``pip install scrapy-rotating-proxies`` first (it is not a dependency).

    python -m benchmarks.bench_egress --hosts 3 --pages 300 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scrapy_scale.testbed import ProxySpec, Testbed  # noqa: E402
from tests.support.crawling import run_crawl  # noqa: E402

PROXIES = [
    ProxySpec("ok1"),
    ProxySpec("ok2"),
    ProxySpec("ok3"),
    ProxySpec("dead1", mode="dead"),
    ProxySpec("dead2", mode="dead"),
    ProxySpec("slow", mode="slow", delay=0.5),
    ProxySpec("flaky", mode="flaky", p=0.2),
    ProxySpec("banned", banned_by=(2,)),
]
FAULTS = "404:/item/*,p=0.03,sticky=1;429@1:/item/*,first=1,p=0.1,retry_after=1"


class CountProxies:
    """Downloader middleware (order 950, after every proxy middleware): counts each
    download attempt by the proxy it goes through, written to BENCH_PROXY_COUNTS at close."""

    def __init__(self, path: str):
        self.path, self.counts = path, Counter()

    @classmethod
    def from_crawler(cls, crawler: Any) -> CountProxies:
        from scrapy import signals

        mw = cls(crawler.settings.get("BENCH_PROXY_COUNTS"))
        crawler.signals.connect(mw.closed, signal=signals.spider_closed)
        return mw

    def process_request(self, request: Any, spider: Any = None) -> None:
        proxy = request.meta.get("proxy") or "direct"
        self.counts[proxy.split("@")[-1].replace("http://", "")] += 1

    def closed(self, spider: Any) -> None:
        Path(self.path).write_text(json.dumps(self.counts))


def variants(tb: Testbed) -> dict[str, dict[str, Any]]:
    hostports = [u.split("//")[1] for u in tb.proxy_urls]
    return {
        "scrapy-rotating-proxies": {
            "ADDONS": {},
            "DOWNLOADER_MIDDLEWARES": {
                "rotating_proxies.middlewares.RotatingProxyMiddleware": 610,
                "rotating_proxies.middlewares.BanDetectionMiddleware": 620,
                "benchmarks.bench_egress.CountProxies": 950,
            },
            "ROTATING_PROXY_LIST": hostports,
        },
        "scrapy-scale egress pool": {
            "SCALE_EGRESSES": tb.proxy_urls,
            "DOWNLOADER_MIDDLEWARES": {"benchmarks.bench_egress.CountProxies": 950},
        },
    }


def measure(name: str, settings: dict[str, Any], tb: Testbed, work: Path) -> dict[str, Any]:
    counts = work / f"{name.replace(' ', '_')}-proxies.json"
    s = dict(settings, BENCH_PROXY_COUNTS=str(counts), CONCURRENT_REQUESTS=16, LOG_LEVEL="INFO", ROBOTSTXT_OBEY=False)
    tb.clear_log()
    res = run_crawl(tb, s, work / name.replace(" ", "_"), timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{name}: exit {res.returncode}\n{res.tail(3000)}")
    per_proxy = Counter(json.loads(counts.read_text()))
    port = {pid: f"127.0.0.1:{p}" for pid, p in tb.proxy_ports.items()}
    gone = {f"http://{r.host}:{tb.port}{r.path}" for r in tb.log if r.kind == "404"}  # sticky: always 404
    expected = tb.detail_urls() - gone
    got = {i["url"] for i in res.items} & expected
    sent = int(res.stats.get("downloader/request_count", 0))
    return {
        "variant": name,
        "sent": sent,
        "pages": len(got),
        "expected": len(expected),
        "sent_per_page": sent / max(1, len(got)),
        "success": len(got) / len(expected),
        "dead1": per_proxy[port["dead1"]],
        "dead2": per_proxy[port["dead2"]],
        "banned_route": sum(1 for r in tb.log if r.egress == "banned" and r.host == "shop2.example.test"),
        "via_banned_other": sum(1 for r in tb.log if r.egress == "banned" and r.host != "shop2.example.test"),
        "elapsed": float(res.stats.get("elapsed_time_seconds", 0)),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--pages", type=int, default=300, help="detail pages per host")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=12)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-egress-") as tmp:
        with Testbed(hosts=a.hosts, pages=a.pages, seed=a.seed, faults=FAULTS, proxies=PROXIES, keep_log=True) as tb:
            vs = variants(tb)
            for r in range(a.rounds):
                order = list(vs) if r % 2 == 0 else list(reversed(vs))
                for name in order:
                    rows.append(measure(name, vs[name], tb, Path(tmp) / f"r{r}"))
                    print(json.dumps(rows[-1]), flush=True)
    print(
        "\n| variant | rounds | requests sent per page crawled | success rate | requests through dead1 / dead2 "
        "| requests through the banned route | banned proxy's requests to other hosts |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in vs:
        mine = [x for x in rows if x["variant"] == name]

        def med(k: str, mine: list[dict[str, Any]] = mine) -> float:
            vals = sorted(x[k] for x in mine)
            return vals[len(vals) // 2]

        print(
            f"| {name} | {len(mine)} | {med('sent_per_page'):.2f} | {100 * med('success'):.1f}% | "
            f"{med('dead1'):.0f} / {med('dead2'):.0f} | {med('banned_route'):.0f} | {med('via_banned_other'):.0f} |"
        )


if __name__ == "__main__":
    main()
