"""Benchmark of scrapy_scale.outcomes (not a test): CPU cost of classification + retry policy.

The bench crawl: `scrapy crawl catalog` of a testbed (default 4 hosts x 500 pages) with
a seeded fault plan (3% of requests answer 500, 1% of detail pages are gone for good),
so both retry implementations send exactly the same requests. Variants, alternated
round by round, CPU seconds of the crawl process (user + sys) compared in one run:

1. Scrapy's RetryMiddleware (plain Scrapy, no add-on);
2. scrapy_scale's outcome middlewares instead (classifier, policy, outcome signal,
   parse checks, stats), RetryMiddleware disabled;
3. as 2, plus a css block-page rule and SCALE_CRITICAL_FIELDS (the predicate path).

Before the crawls, an in-process measurement of the same code per request (no network,
no reactor): the middlewares' hooks on 20,000 ready 200 responses, each callback
yielding one item, with the request fingerprint and parsed URL already cached as the
dupefilter and the downloader leave them in a crawl.

    python -m benchmarks.bench_retry                      # 4 hosts x 500 pages, 3 rounds
    python -m benchmarks.bench_retry --hosts 4 --pages 1000 --rounds 5
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
from pathlib import Path
from typing import Any

FAULTS = "500:/item/*,p=0.03;404:/item/*,p=0.01,sticky=1"
OURS = "scrapy_scale/outcomes/"


class Profile:
    """Extension for the attribution crawl: cProfile from engine start to stop, saved to
    the ``BENCH_PROFILE_OUT`` setting (start-up and imports are not in it)."""

    def __init__(self, path: str):
        import cProfile

        self.path = path
        self.prof = cProfile.Profile()

    @classmethod
    def from_crawler(cls, crawler: Any) -> Profile:
        from scrapy import signals

        ext = cls(crawler.settings.get("BENCH_PROFILE_OUT"))
        crawler.signals.connect(ext.start, signal=signals.engine_started)
        crawler.signals.connect(ext.stop, signal=signals.engine_stopped)
        return ext

    def start(self) -> None:
        self.prof.enable()

    def stop(self) -> None:
        self.prof.disable()
        self.prof.dump_stats(self.path)


def attribution(path: str) -> tuple[float, float]:
    """Seconds of the profiled crawl spent in the outcome middlewares' hooks and signal
    handlers (cumulative: with the stats, signal and weakref calls they make), and the total."""
    import pstats

    p = pstats.Stats(path)
    entry = {
        "process_request",
        "process_response",
        "process_exception",
        "process_spider_exception",
        "finish_parse",
        "parse_state",
        "request_scheduled",
        "spider_idle",
        "request_dropped",
    }
    ours = 0.0
    for (file, _line, name), (_cc, _nc, tt, ct, _callers) in p.stats.items():  # type: ignore[attr-defined]
        if OURS in file:
            if name in entry:
                ours += ct
            elif name == "process_spider_output":  # its own time only: below it runs the callback
                ours += tt
    return ours, p.total_tt  # type: ignore[attr-defined]


def crawl(args: Any, tmp: Path, settings: dict[str, Any]) -> dict[str, float]:
    from scrapy_scale.testbed import Testbed
    from tests.support.crawling import run_crawl

    # a fresh testbed per crawl: fault plans count requests per path, so every variant
    # meets exactly the same faults
    with Testbed(hosts=args.hosts, pages=args.pages, seed=11, faults=FAULTS, keep_log=False) as tb:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = run_crawl(tb, settings, tmp, timeout=900)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"crawl failed:\n{res.tail()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    st = res.stats
    return {
        "wall": res.duration,
        "cpu": cpu,
        "requests": st.get("downloader/request_count", 0),
        "items": st.get("item_scraped_count", 0),
    }


def crawl_pair(args: Any, tmp: Path, first: dict[str, Any], second: dict[str, Any]) -> list[float]:
    """Both crawls at the same time (each against its own fresh testbed): whatever else
    loads the machine loads both alike. Returns the CPU seconds of each crawl process."""
    import os

    from scrapy_scale.testbed import Testbed
    from tests.support.crawling import start_crawl

    kw = {"hosts": args.hosts, "pages": args.pages, "seed": 11, "faults": FAULTS, "keep_log": False}
    with Testbed(**kw) as tb1, Testbed(**kw) as tb2:
        procs = [start_crawl(tb1, first, tmp / "a"), start_crawl(tb2, second, tmp / "b")]
        cpus = []
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            res = proc.result()
            if proc.returncode != 0 or res.stats.get("downloader/request_count", 0) < args.hosts * args.pages:
                raise SystemExit(f"crawl failed:\n{res.tail()}")
            cpus.append(usage.ru_utime + usage.ru_stime)
    return cpus


def per_request_us(n: int = 20000) -> tuple[float, float]:
    """CPU microseconds per 200 response: Scrapy's RetryMiddleware vs the outcome middlewares."""
    import asyncio
    import time

    from scrapy import Request, Spider
    from scrapy.downloadermiddlewares.retry import RetryMiddleware
    from scrapy.http import HtmlResponse
    from scrapy.utils.httpobj import urlparse_cached
    from scrapy.utils.test import get_crawler

    from scrapy_scale.outcomes import OutcomeDownloaderMiddleware, OutcomeSpiderMiddleware

    class Bench(Spider):
        name = "bench"

    # (RetryMiddleware is built by hand below; listing it as off keeps the hub's warning quiet)
    off = {"scrapy.downloadermiddlewares.retry.RetryMiddleware": None}
    crawler = get_crawler(Bench, {"LOG_LEVEL": "ERROR", "DOWNLOADER_MIDDLEWARES": off})
    crawler.spider = Bench.from_crawler(crawler)
    crawler.stats.open_spider()
    body = b"<html><body>" + b"<p>text</p>" * 300 + b"</body></html>"

    def batch() -> list[tuple[Request, HtmlResponse]]:
        out = []
        for i in range(n):
            req = Request(f"http://shop1.example.test/item/{i}")
            crawler.request_fingerprinter.fingerprint(req)  # as the dupefilter did
            urlparse_cached(req)  # as the downloader's slot lookup did
            out.append((req, HtmlResponse(req.url, body=body, request=req)))
        return out

    async def one_item() -> Any:
        yield {"sku": "S1", "price": 1.0}

    retry = RetryMiddleware.from_crawler(crawler)
    dl = OutcomeDownloaderMiddleware.from_crawler(crawler)
    sp = OutcomeSpiderMiddleware.from_crawler(crawler)

    async def scrapy_side(pairs: list[tuple[Request, HtmlResponse]]) -> None:
        for req, resp in pairs:
            retry.process_response(req, resp)
            async for _ in one_item():
                pass

    async def ours(pairs: list[tuple[Request, HtmlResponse]]) -> None:
        for req, resp in pairs:
            dl.process_request(req)
            r = dl.process_response(req, resp)
            async for _ in sp.process_spider_output(r, one_item()):
                pass

    results = []
    for fn in (scrapy_side, ours):
        best = float("inf")
        for _ in range(3):
            pairs = batch()
            t = time.process_time()
            asyncio.run(fn(pairs))
            best = min(best, time.process_time() - t)
        results.append(best / n * 1e6)
    return results[0], results[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--pages", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled attribution crawl")
    ap.add_argument("--pairs", type=int, default=7, help="rounds of the two crawls run side by side (0: skip)")
    args = ap.parse_args()

    base: dict[str, Any] = {
        "ADDONS": {},
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 32,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "ROBOTSTXT_OBEY": True,
    }
    ours = {
        "DOWNLOADER_MIDDLEWARES": {
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
            "scrapy_scale.outcomes.OutcomeDownloaderMiddleware": 550,
        },
        "SPIDER_MIDDLEWARES": {"scrapy_scale.outcomes.OutcomeSpiderMiddleware": 45},
        # the same budget as Scrapy's RETRY_TIMES = 2, so both send the same requests, and a
        # short backoff, so both crawls last about as long (CPU of idle time is not the subject)
        "SCALE_RETRY_POLICY": {"transient": {"retries": 2, "base": 0.05, "cap": 0.2}},
    }
    variants = {
        "Scrapy RetryMiddleware": dict(base),
        "scrapy_scale outcomes": {**base, **ours},
        "scrapy_scale outcomes + css rule + critical fields": {
            **base,
            **ours,
            "SCALE_FAILURE_RULES": [{"css": "#challenge-form", "class": "blocked"}],
            "SCALE_CRITICAL_FIELDS": ["sku", "price"],
        },
    }
    base_us, ours_us = per_request_us()
    print("## 1. Per request, in process (CPU microseconds per 200 response with one item)\n")
    print("| Scrapy RetryMiddleware | scrapy_scale outcomes | extra per request |")
    print("|---|---|---|")
    print(f"| {base_us:.1f} us | {ours_us:.1f} us | {ours_us - base_us:.1f} us |\n")

    tmp = Path(tempfile.mkdtemp(prefix="bench_retry_"))
    results: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    crawl(args, tmp / "warmup", base)  # imports and disk caches warm for every variant
    for r in range(args.rounds):
        order = list(variants.items())
        if r % 2:
            order.reverse()
        for i, (name, settings) in enumerate(order):
            results[name].append(crawl(args, tmp / f"r{r}_{i}", settings))
    print(
        f"## 2. CPU of the bench crawl ({args.hosts} hosts x {args.pages} pages, "
        f"faults {FAULTS!r}, median of {args.rounds} rounds)\n"
    )
    print(
        "| variant | requests | items | wall s | CPU s (median) | CPU s (best) "
        "| CPU ms / request (best) | CPU ratio (median) | CPU ratio (best) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ref_med = ref_best = None
    for name, rs in results.items():
        cpu = statistics.median(x["cpu"] for x in rs)
        best = min(x["cpu"] for x in rs)
        wall = statistics.median(x["wall"] for x in rs)
        req = statistics.median(x["requests"] for x in rs)
        items = statistics.median(x["items"] for x in rs)
        ref_med = ref_med or cpu
        ref_best = ref_best or best
        print(
            f"| {name} | {req:,.0f} | {items:,.0f} | {wall:.1f} | {cpu:.2f} | {best:.2f} | "
            f"{1000 * best / req:.3f} | {cpu / ref_med:.3f} | {best / ref_best:.3f} |"
        )
    pairs = zip(results["Scrapy RetryMiddleware"], results["scrapy_scale outcomes"], strict=True)
    per_round = [o["cpu"] / s["cpu"] for s, o in pairs]
    # each round ran the variants back to back under about the same load: the median of the
    # per-round ratios is the steadiest figure on a shared machine
    print(f"\nper-round CPU ratio (outcomes / RetryMiddleware): {', '.join(f'{x:.3f}' for x in per_round)}")
    print(f"median of the per-round ratios: {statistics.median(per_round):.3f}")
    if args.pairs:
        a, b = variants["Scrapy RetryMiddleware"], variants["scrapy_scale outcomes"]
        paired = []
        for r in range(args.pairs):
            x, y = (a, b) if r % 2 == 0 else (b, a)
            cx, cy = crawl_pair(args, tmp / f"pair{r}", x, y)
            paired.append(cy / cx if r % 2 == 0 else cx / cy)
        print(
            f"\n## 2b. The same two crawls side by side, {args.pairs} pairs (both under the same load)\n\n"
            f"CPU ratio outcomes / RetryMiddleware per pair: {', '.join(f'{x:.3f}' for x in paired)}\n"
            f"median {statistics.median(paired):.3f}, mean {statistics.mean(paired):.3f}"
        )
    if not args.no_profile:
        out = str(tmp / "outcomes.prof")
        prof = {
            **variants["scrapy_scale outcomes"],
            "EXTENSIONS": {"benchmarks.bench_retry.Profile": 0},
        }
        crawl(args, tmp / "profiled", {**prof, "BENCH_PROFILE_OUT": out})
        ours_s, total_s = attribution(out)
        print(
            f"\n## 3. Attribution (one crawl of the outcomes variant under cProfile)\n\n"
            f"outcome hooks and handlers: {ours_s:.3f} s of {total_s:.2f} s profiled = {100 * ours_s / total_s:.2f}%"
        )
    scrapy_runs = results["Scrapy RetryMiddleware"]
    per_req_ms = min(x["cpu"] * 1000 / x["requests"] for x in scrapy_runs)
    print(
        f"in-process extra {ours_us - base_us:.1f} us per request = "
        f"{100 * (ours_us - base_us) / 1000 / per_req_ms:.2f}% of the crawl's {per_req_ms:.2f} ms CPU per request"
    )


if __name__ == "__main__":
    main()
