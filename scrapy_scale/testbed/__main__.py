"""Run the testbed in the foreground: ``python -m scrapy_scale.testbed --hosts 50 --pages 10000``.

Prints the start URLs, proxy URLs and the Scrapy settings that make the host names
resolve (optionally also into ``--state-file`` as JSON), then serves until Ctrl-C
(SIGINT) or SIGTERM, and prints what it served.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from scrapy_scale.testbed.faults import parse_faults, parse_proxy
from scrapy_scale.testbed.server import Testbed


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scrapy_scale.testbed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--hosts", type=int, default=3, help="number of target hosts (default 3)")
    p.add_argument("--pages", type=int, default=100, help="detail pages PER HOST (default 100)")
    p.add_argument("--per-page", type=int, default=20, help="detail links per listing page (default 20)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--faults",
        action="append",
        default=[],
        metavar="SPEC",
        help="fault rules, e.g. '429:/item/*,p=0.1,retry_after=2;reset,p=0.01' (repeatable)",
    )
    p.add_argument(
        "--proxy",
        action="append",
        default=[],
        metavar="SPEC",
        help="a proxy egress, e.g. 'p1', 'p2:flaky,p=0.3', 'p3:auth', 'p4:healthy,banned_by=1+2'",
    )
    p.add_argument(
        "--rate-limit", type=float, default=None, metavar="R", help="answer 429 beyond R requests/s per (host, client)"
    )
    p.add_argument("--robots-disallow", action="append", default=[], metavar="PATH")
    p.add_argument("--port", type=int, default=0, help="port of every host (default: a free one)")
    p.add_argument("--state-file", type=Path, help="write URLs and settings here as JSON (removed on exit)")
    p.add_argument("--summary-file", type=Path, help="write request counts here as JSON on exit")
    p.add_argument("--log-file", type=Path, help="write the request log here as JSON lines on exit")
    p.add_argument("--tls", action="store_true", help="hosts serve HTTPS (self-signed certificate)")
    p.add_argument("--no-log", action="store_true", help="keep counters only, no per-request log (long runs)")
    return p


def state(tb: Testbed) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "port": tb.port,
        "hosts": tb.hosts,
        "addresses": tb.addresses,
        "start_urls": tb.start_urls,
        "proxy_urls": tb.proxy_urls,
        "settings": tb.scrapy_settings(),
        "pages_per_host": tb.pages,
        "per_page": tb.catalog.per_page,
        "seed": tb.seed,
        "tls": tb.tls,
    }


def summary(tb: Testbed) -> dict[str, Any]:
    counters = tb.counters
    kinds: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    for (_host, key), n in counters.items():
        if isinstance(key, str):
            kinds[key] += n
        else:
            statuses[str(key)] += n
    return {
        "requests": sum(kinds.values()),
        "kinds": dict(kinds),
        "statuses": dict(statuses),
        "connections": tb.connections,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        faults = parse_faults(";".join(args.faults))
        proxies = [parse_proxy(s) for s in args.proxy]
        tb = Testbed(
            hosts=args.hosts,
            pages=args.pages,
            seed=args.seed,
            faults=faults,
            proxies=proxies,
            rate_limit=args.rate_limit,
            per_page=args.per_page,
            port=args.port,
            robots_disallow=args.robots_disallow,
            keep_log=not args.no_log,
            tls=args.tls,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    tb.start()
    info = state(tb)
    shown = tb.start_urls[:5] + ([f"... ({len(tb.hosts) - 5} more)"] if len(tb.hosts) > 5 else [])
    print(f"testbed: {len(tb.hosts)} hosts x {tb.pages} pages, seed {tb.seed}, port {tb.port}")
    print("start URLs:\n  " + "\n  ".join(shown))
    if tb.proxy_urls:
        print(
            "proxies:\n  "
            + "\n  ".join(f"{p.id} ({p.mode}): {u}" for p, u in zip(tb.proxy_specs, tb.proxy_urls, strict=True))
        )
    print("scrapy settings:\n  " + json.dumps(info["settings"]))
    if len(tb.hosts) <= 5:
        cmd = ["scrapy", "crawl", "catalog", "-a", "start_urls=" + ",".join(tb.start_urls)]
        for k, v in info["settings"].items():
            cmd += ["-s", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
        print("crawl it with:\n  " + shlex.join(cmd))
    if args.state_file:
        tmp = args.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=1))
        os.replace(tmp, args.state_file)
        print(f"state written to {args.state_file}")
    print("serving; Ctrl-C to stop", flush=True)
    try:
        stop.wait()
    finally:
        tb.stop()
        if args.state_file:
            args.state_file.unlink(missing_ok=True)
        s = summary(tb)
        if args.summary_file:
            args.summary_file.write_text(json.dumps(s, indent=1))
        if args.log_file:
            with open(args.log_file, "w") as f:
                for rec in tb.log:
                    f.write(json.dumps(rec.as_dict()) + "\n")
        print(
            f"served {s['requests']} requests: " + ", ".join(f"{k} {n}" for k, n in sorted(s["kinds"].items())),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
