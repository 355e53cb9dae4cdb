"""Benchmark of scrapy_scale.throttle vs Scrapy's AutoThrottle (not a test).

One plan for every variant: `scrapy crawl catalog` of one testbed host that allows
``--rate`` requests/s per client (a token bucket, 429 + Retry-After: 1 beyond), with the
add-on (frontier, outcomes, retries of 429s) in every variant; only the pacing differs:

1. AutoThrottle (``AUTOTHROTTLE_ENABLED``, its defaults: start 5 s, target concurrency 1),
   ``SCALE_THROTTLE_ENABLED = False``;
2. no pacing at all (neither), for scale;
3. scrapy-scale's throttle (the add-on's default), no profile.

Measured from the testbed's request log: 429s received (= requests over the site's
limit: the bucket refused them), pages/s (ok detail and listing pages over the crawl's
span), time to steady state (from the first request to the earliest one after which
under 2% of all later requests are 429s), and the ok pages/s from then on.

    python -m benchmarks.bench_throttle --rate 5 --pages 400
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

VARIANTS: dict[str, dict[str, Any]] = {
    "AutoThrottle": {"AUTOTHROTTLE_ENABLED": True, "SCALE_THROTTLE_ENABLED": False},
    "no pacing": {"SCALE_THROTTLE_ENABLED": False},
    "scrapy-scale throttle": {},
}


def steady_from(log: list[Any], share: float = 0.02) -> float | None:
    """Seconds from the first request to the earliest one after which under ``share`` of
    all later requests are 429s (None: never)."""
    t0 = log[0].time
    later_429 = sum(r.kind == "rate_limited" for r in log)
    for i, r in enumerate(log):
        if later_429 / (len(log) - i) < share:
            return r.time - t0
        later_429 -= r.kind == "rate_limited"
    return None


def measure(name: str, settings: dict[str, Any], rate: float, pages: int, workdir: Path) -> dict[str, Any]:
    from scrapy_scale.testbed import Testbed
    from tests.support.crawling import run_crawl

    with Testbed(hosts=1, pages=pages, per_page=20, rate_limit=rate, seed=11) as tb:
        res = run_crawl(tb, {**settings, "LOG_LEVEL": "INFO"}, workdir / name.replace(" ", "_"), timeout=3600)
        log = [r for r in tb.log if r.kind != "robots"]
    if res.returncode != 0:
        raise SystemExit(f"{name}: crawl failed\n{res.tail()}")
    t0, t1 = log[0].time, log[-1].time
    ok = sum(r.kind == "ok" for r in log)
    limited = sum(r.kind == "rate_limited" for r in log)
    steady = steady_from(log)
    after = [r for r in log if steady is not None and r.time >= t0 + steady]
    steady_rate = sum(r.kind == "ok" for r in after) / max(1e-9, after[-1].time - after[0].time) if after else 0
    return {
        "variant": name,
        "items": len(res.items),
        "requests": len(log),
        "429s": limited,
        "pages_per_s": ok / (t1 - t0),
        "seconds": t1 - t0,
        "steady_s": steady,
        "steady_rate": steady_rate,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=5.0)
    ap.add_argument("--pages", type=int, default=400)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-throttle-") as tmp:
        for name, settings in VARIANTS.items():
            rows.append(measure(name, settings, args.rate, args.pages, Path(tmp)))
            print(rows[-1], flush=True)
    print(f"\nhost limit {args.rate:g} requests/s, {args.pages} detail pages\n")
    print(
        "| variant | requests | 429s (over the limit) | pages/s | share of the limit | time to steady state | rate once steady |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        steady = f"{r['steady_s']:.0f} s" if r["steady_s"] is not None else "never"
        print(
            f"| {r['variant']} | {r['requests']} | {r['429s']} | {r['pages_per_s']:.2f} | "
            f"{r['pages_per_s'] / args.rate:.0%} | {steady} | {r['steady_rate']:.2f} |"
        )


if __name__ == "__main__":
    main()
