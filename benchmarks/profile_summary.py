"""Where the time goes in a py-spy raw (collapsed) profile, per component.

    python -m benchmarks.profile_summary profile-addon.txt            # the table
    python -m benchmarks.profile_summary profile-addon.txt --top 30   # and the hottest functions

``bench_suite --profile VARIANT`` writes such a file (py-spy ``--gil --threads``: only the
samples of the thread holding the GIL, so every sample is CPU spent in the process's Python).
Each sample is charged to the innermost frame that belongs to an *owner*: a module of
scrapy_scale (by sub-package, ``scrapy_scale/frontier/records/codec.py`` -> ``frontier.records.codec``),
the example project's spider, Scrapy, Twisted, parsel/lxml-wrapping libraries, asyncio. Frames
of the standard library and C extensions count for the owner that called them, so ``json``
work called from the frontier codec is the codec's. Inclusive shares are also given for a
few entry points (a middleware's wrapper, the scheduler's hooks): everything under them.
"""

from __future__ import annotations

import argparse
import collections
import re
from collections.abc import Iterable

#: (owner name, regex on a frame's file) in order of precedence: the innermost match wins
OWNERS: list[tuple[str, re.Pattern[str]]] = [
    ("scrapy_scale", re.compile(r"scrapy_scale/")),
    ("spider (example_project)", re.compile(r"example_project/")),
    ("scrapy", re.compile(r"(^|/)scrapy/")),
    ("twisted", re.compile(r"(^|/)twisted/")),
    ("parsel/w3lib/tldextract", re.compile(r"(^|/)(parsel|w3lib|tldextract|cssselect)/")),
    ("asyncio", re.compile(r"(^|/)asyncio/")),
]
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?):(?P<line>\d+)\)$")

#: inclusive entry points: (label, regex on "func (file")
INCLUSIVE = [
    ("outcome spider middleware (all it wraps)", r"^OutcomeSpiderMiddleware\.|outcomes/parse_tracker\.py"),
    ("store spider middleware (all it wraps)", r"^StoreSpiderMiddleware\."),
    ("store pipeline process_item", r"^StorePipeline\.process_item"),
    ("frontier enqueue_request", r"^Scheduler\.enqueue_request \(scrapy_scale"),
    ("frontier next_request", r"^Scheduler\.next_request \(scrapy_scale"),
    ("frontier codec", r"scrapy_scale/frontier/records/codec\.py"),
    ("outcome signal send", r"^OutcomeEmitter\.|outcomes/emit\.py"),
    ("outcome downloader middleware", r"^OutcomeDownloaderMiddleware\."),
    ("spider callbacks", r"example_project/"),
    ("scrapy spider-middleware chain", r"scrapy/core/spidermw\.py"),
    ("JSON-lines feed export", r"scrapy/extensions/feedexport\.py|scrapy/exporters\.py"),
    ("sqlite3 calls", r"sqlite3|\(sqlite\.py|backends\.py"),
]


def owner(file: str) -> str | None:
    for name, rx in OWNERS:
        if rx.search(file):
            if name == "scrapy_scale":
                m = re.search(r"scrapy_scale/(.+?)\.py", file)
                return "scrapy_scale." + (m.group(1).replace("/", ".") if m else "?")
            return name
    return None


def parse(lines: Iterable[str]) -> Iterable[tuple[str, list[tuple[str, str]], int]]:
    """(thread name, [(func, file)...] outermost first, samples) per line."""
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        parts = stack.split(";")
        head = parts[0]
        thread = head.split(": ", 1)[1] if ": " in head else head
        frames = []
        for p in parts[1:]:
            m = FRAME.match(p)
            frames.append((m.group("func"), m.group("file")) if m else (p, ""))
        yield thread, frames, int(n)


def summarize(path: str, top: int = 0) -> str:
    with open(path) as f:
        rows = list(parse(f))
    total = sum(n for _, _, n in rows) or 1
    threads: collections.Counter[str] = collections.Counter()
    owners: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    funcs: collections.Counter[str] = collections.Counter()
    compiled = [(label, re.compile(rx)) for label, rx in INCLUSIVE]
    for thread, frames, n in rows:
        threads[re.sub(r"-\d+$", "", thread)] += n
        own = "other (start-up, stdlib at top level)"
        for func, file in reversed(frames):
            o = owner(file)
            if o is not None:
                own = o if not thread.startswith(("PoolThread", "scrapy-scale")) else f"{o} [{thread}]"
                funcs[f"{func} ({file})"] += n
                break
        owners[own] += n
        keys = {f"{func} ({file}" for func, file in frames}
        for label, rx in compiled:
            if any(rx.search(k) for k in keys):
                incl[label] += n
    out = [f"{total} samples holding the GIL", "", "| thread | share |", "|---|---:|"]
    out += [f"| {t} | {100 * n / total:.1f}% |" for t, n in threads.most_common()]
    out += ["", "| charged to (innermost owner frame) | share |", "|---|---:|"]
    out += [f"| {o} | {100 * n / total:.1f}% |" for o, n in owners.most_common() if n / total >= 0.002]
    out += ["", "| inclusive (everything under it) | share |", "|---|---:|"]
    out += [f"| {label} | {100 * incl[label] / total:.1f}% |" for label, _ in INCLUSIVE]
    if top:
        out += ["", f"| top {top} innermost owner functions | share |", "|---|---:|"]
        out += [f"| {fn} | {100 * n / total:.1f}% |" for fn, n in funcs.most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile")
    p.add_argument("--top", type=int, default=0)
    args = p.parse_args(argv)
    print(summarize(args.profile, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
