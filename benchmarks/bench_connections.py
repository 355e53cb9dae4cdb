"""Benchmark (not a test): connections the testbed's hosts accepted per crawl, by variant.

    python -m benchmarks.bench_connections                        # plain,frontier,addon; 3,000 pages on 4 hosts
    python -m benchmarks.bench_connections --variants plain,frontier --pages 6000

Each variant of ``benchmarks/bench_suite.py`` crawls a testbed process of its own (so
its count is its own), with the suite's settings (``CONCURRENT_REQUESTS=32``, 8 per
domain). A client that reuses its keep-alive connections opens about as many as its
download slots allow at once (hosts x 8 here); one that starts a request before the
previous one's connection is back in Twisted's pool opens new ones and closes old ones.
One crawl per variant: pages/s and CPU are printed for orientation only
(``bench_suite`` compares those, interleaved over rounds).
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import bench_suite
from benchmarks.harness import TestbedProcess, run_variant


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="plain,frontier,addon", help="bench_suite variant names")
    ap.add_argument("--pages", type=int, default=3000, help="detail pages in all")
    ap.add_argument("--hosts", type=int, default=4)
    a = ap.parse_args(argv)
    print("| variant | pages | connections | per 1k pages | pages/s | CPU s / 1k pages |")
    print("|---|---:|---:|---:|---:|---:|")
    for v in bench_suite.variants(a.variants.split(","), None):
        with TestbedProcess(a.hosts, a.pages) as tb:
            m = run_variant(v.name, v.settings, a.pages, a.hosts, testbed=tb)
        conns = int(tb.served().get("connections", 0))
        print(
            f"| {v.name} | {m.pages} | {conns} | {1000 * conns / m.pages:.1f} | {m.pages_per_s:.0f} | {m.cpu_per_1k:.2f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
