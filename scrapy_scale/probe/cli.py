"""``scrapy scale probe URL [URL...]``: options, and the run printed (glue)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from scrapy.utils.misc import load_object

from scrapy_scale.errors import ScaleError
from scrapy_scale.outcomes import settings as oset
from scrapy_scale.outcomes.classify import BlockPageDetector, Classifier, SignatureBlockDetector
from scrapy_scale.probe.policy import Limits


class ProbeUsage(ScaleError):
    """A bad option or argument of ``probe`` (said with exit code 2)."""


def add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("probe")
    g.add_argument("--cap", type=int, default=64, help="probe: highest concurrency tried (default 64)")
    g.add_argument("--max-requests", type=int, default=5000, help="probe: requests at most, all sites (default 5000)")
    g.add_argument("--max-time", type=float, default=300.0, help="probe: seconds at most per site (default 300)")
    g.add_argument("--min-answers", type=int, default=40, help="probe: answers a step needs after its warm-up (40)")
    g.add_argument("--step-seconds", type=float, default=3.0, help="probe: seconds a step lasts at least (default 3)")
    g.add_argument("--warmup", type=float, default=0.5, help="probe: seconds of a step's start not judged (0.5)")
    g.add_argument("--margin", type=float, default=0.8, help="probe: recommendation = knee x margin (default 0.8)")
    g.add_argument("--timeout", type=float, default=10.0, help="probe: seconds a request may take (default 10)")
    g.add_argument("--out", default=".", metavar="DIR", help="probe: folder of probe-HOST.json/.png (default .)")
    g.add_argument("--no-plot", action="store_true", help="probe: no PNG (matplotlib not needed)")
    g.add_argument(
        "--save",
        metavar="FILE",
        help="probe: merge the recommendations into FILE, a profile file the throttle reads at start "
        "with SCALE_PROBE_PROFILES=FILE",
    )


def limits(opts: argparse.Namespace) -> Limits:
    try:
        return Limits(
            cap=opts.cap,
            max_requests=opts.max_requests,
            max_time=opts.max_time,
            min_answers=opts.min_answers,
            min_seconds=opts.step_seconds,
            max_seconds=max(15.0, 5 * opts.step_seconds),
            warmup=opts.warmup,
            margin=opts.margin,
        )
    except ValueError as e:
        raise ProbeUsage(str(e)) from None


def classifier(settings: Any) -> Classifier:
    """The crawl's classifier: SCALE_FAILURE_RULES, SCALE_BLOCK_DETECTORS (default: the
    well-known bot-wall signatures, since a probe must notice a wall)."""
    detectors: list[BlockPageDetector] = []
    for path in oset.BLOCK_DETECTORS.get(settings):
        detectors.append(load_object(path)())
    return Classifier(oset.FAILURE_RULES.get(settings), detectors or [SignatureBlockDetector()])


def names(settings: Any) -> dict[str, str]:
    """Host names resolved without DNS: ``TESTBED_HOSTS`` (a dict or its JSON)."""
    raw = settings.get("TESTBED_HOSTS") or {}
    if isinstance(raw, str):
        raw = json.loads(raw)
    return {str(k): str(v) for k, v in dict(raw).items()}


def main(settings: Any, urls: list[str], opts: argparse.Namespace) -> int:
    """Run the probe and print it; the exit code (0: done, 1: a site not probed or no knee)."""
    # here, not at the top: every `scrapy scale` subcommand loads this module for its options
    from scrapy_scale.probe import report
    from scrapy_scale.probe.run import ProbeError, run

    if not urls:
        raise ProbeUsage("probe: give at least one URL")
    lim = limits(opts)
    if not opts.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ProbeUsage(
                "probe: the plot needs matplotlib: pip install 'scrapy-scale[probe]' (or --no-plot)"
            ) from None
    if not opts.timeout > 0:
        raise ProbeUsage(f"probe: --timeout must be above 0, not {opts.timeout}")
    if opts.save:
        try:
            report.saved_profiles(opts.save)
        except ValueError as e:
            raise ProbeUsage(f"probe: --save {opts.save}: {e}") from None
    try:
        resolved, clf = names(settings), classifier(settings)
    except (ValueError, TypeError, ImportError, AttributeError, NameError) as e:
        raise ProbeUsage(f"probe: {type(e).__name__}: {e}") from None
    os.makedirs(opts.out, exist_ok=True)
    ua = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "scrapy-scale-probe"
    try:
        sites = run(
            urls,
            lim,
            clf,
            names=resolved,
            user_agent=ua,
            timeout=opts.timeout,
            say=lambda s: print(s, flush=True),
        )
    except ProbeError as e:
        raise ProbeUsage(f"probe: {e}") from None
    except KeyboardInterrupt:
        print("scrapy scale probe: interrupted; nothing written", file=sys.stderr)
        return 1
    code = 0
    for s in sites:
        print()
        if s.result.steps:
            print(report.table(s))
        print(report.summary(s, lim))
        print(f"figures: {report.write_json(s, lim, opts.out)}")
        if s.result.steps and not opts.no_plot:
            print(f"plot: {report.plot(s, opts.out)}")
        if s.skipped or s.result.knee is None:
            code = 1
    if opts.save:
        try:
            added = report.save_profiles(opts.save, sites, lim.margin)
        except (OSError, ValueError) as e:
            print(f"scrapy scale probe: error: --save {opts.save}: {e}", file=sys.stderr)
            return 1
        print(f"saved {len(added)} profile(s) to {opts.save} (crawl with -s SCALE_PROBE_PROFILES={opts.save})")
        for site in sites:
            if site.host not in added:
                why = site.skipped or (
                    "client-bound: no knee of the site" if site.result.client_bound else "no good step"
                )
                print(f"not saved: {site.host} ({why})")
    sys.stdout.flush()
    return code
