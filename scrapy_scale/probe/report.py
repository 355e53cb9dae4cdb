"""What a probe shows: the table, the recommended profile, the JSON, the PNG, the saved file."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import textwrap
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scrapy_scale.errors import ScaleError
from scrapy_scale.probe.figures import GOOD
from scrapy_scale.probe.policy import CLIENT_BOUND, RATE, Limits
from scrapy_scale.probe.run import SiteProbe

#: plot colours (the tests look for them in the decoded PNG)
GOODPUT_COLOR = "#1f77b4"
LATENCY_COLOR = "#ff7f0e"
KNEE_COLOR = "#d62728"
CLIENT_BOUND_COLOR = "#9467bd"
CLASS_COLORS = {
    "rate_limited": "#e377c2",
    "blocked": "#8c564b",
    "transient": "#bcbd22",
    "fatal": "#7f7f7f",
    "egress_failed": "#17becf",
    "parse_failed": "#2ca02c",
}


class PlotUnavailable(ScaleError):
    """matplotlib is not installed."""


def table(site: SiteProbe) -> str:
    head = (
        f"{'step':>6} {'conc':>5} {'in flight':>9} {'sent/s':>8} {'goodput/s':>10} {'success':>8} "
        f"{'p50 ms':>7} {'p95 ms':>7}  verdict"
    )
    lines = [f"{site.host}", head]
    for f in site.result.steps:
        fails = ", ".join(f"{c} {n}" for c, n in f.classes.items() if c not in GOOD)
        why = "; ".join(f.reasons)
        lines.append(
            f"{f.phase:>6} {f.concurrency:>5} {f.in_flight:>9.1f} {f.offered:>8.1f} {f.goodput:>10.1f} {f.success:>8.1%} "
            f"{f.p50 * 1000:>7.0f} {f.p95 * 1000:>7.0f}  {f.verdict}"
            + (f" ({why})" if why else "")
            + (f" [{fails}]" if fails else "")
        )
    return "\n".join(lines)


def summary(site: SiteProbe, lim: Limits) -> str:
    if site.skipped:
        return f"{site.host}: {site.skipped}"
    r = site.result
    out = [f"{site.host}: {r.ended}"]
    rec = site.recommendation(lim.margin)
    if r.client_bound:
        took = f"concurrency {r.knee.concurrency} ({r.knee.goodput:.1f}/s)" if r.knee else "what was sent"
        out.append(
            f"{site.host}: CLIENT-BOUND: this machine, not the site, was the limit: the site took {took} "
            "without a sign of strain, and its knee is above what this probe could send"
        )
        out.append(
            f"{site.host}: no recommendation: a profile from this probe would pace the site at this machine's "
            "limit, not at the site's. To find its knee, probe again from a bigger machine (a CPU free of other "
            "work) or from several at once; until then crawl it on the throttle's adaptive defaults, or set "
            f"SCALE_DOMAIN_PROFILES by hand at no more than {took}"
        )
    elif rec is None:
        out.append(f"{site.host}: no recommendation (no good step)")
    else:
        out.append(f"recommended (knee x {lim.margin:g}): SCALE_DOMAIN_PROFILES = {json.dumps(rec)}")
    if site.disallowed:
        out.append(f"{site.host}: {len(site.disallowed)} URL(s) skipped, disallowed by robots.txt")
    return "\n".join(out)


def as_json(site: SiteProbe, lim: Limits) -> dict[str, Any]:
    return {
        "host": site.host,
        "urls": site.urls,
        "skipped": site.skipped or None,
        "disallowed": site.disallowed,
        "limits": dict(vars(lim)),
        "result": site.result.as_dict(),
        "recommendation": site.recommendation(lim.margin),
        "time": time.time(),
    }


def file_stem(host: str) -> str:
    return "probe-" + re.sub(r"[^A-Za-z0-9._-]", "_", host)


def write_json(site: SiteProbe, lim: Limits, folder: str) -> str:
    path = os.path.join(folder, file_stem(site.host) + ".json")
    with open(path, "w") as f:
        json.dump(as_json(site, lim), f, indent=2, sort_keys=True)
    return path


#: characters per line of the plot's title (at its font size, the width of the plot)
TITLE_WIDTH = 90


def plot_title(site: SiteProbe) -> str:
    """The plot's title: the host and why the probe ended, whole, wrapped to the plot's width
    (cut at 110 characters it read "...at 4 at th")."""
    return textwrap.fill(f"{site.host}: {site.result.ended}", TITLE_WIDTH)


def plot(site: SiteProbe, folder: str) -> str:
    """The PNG: goodput and p95 latency against concurrency (client-bound steps marked),
    the knee marked, and the failure shares per step."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("the plot needs matplotlib: pip install 'scrapy-scale[probe]'") from None
    # x: the concurrency; for a probe that went below one request at a time, the rate sent
    by_rate = any(f.phase == RATE for f in site.result.steps)

    def x_of(f: Any) -> float:
        if not by_rate:
            return float(f.concurrency)
        return round(f.rate_ceiling if f.phase == RATE and f.rate_ceiling else f.offered, 3)

    by_c: dict[float, Any] = {}
    for f in site.result.steps:  # one point per x: the last run of it
        by_c[x_of(f)] = f
    xs = sorted(by_c)
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]})
    try:
        ax.plot(xs, [by_c[c].goodput for c in xs], "o-", color=GOODPUT_COLOR, lw=2.5, label="goodput (answers/s)")
        ax.set_ylabel("goodput (good answers/s)", color=GOODPUT_COLOR)
        ax.set_xscale("log", base=2)
        lx = ax.twinx()
        lx.plot(xs, [by_c[c].p95 * 1000 for c in xs], "s--", color=LATENCY_COLOR, lw=2.5, label="p95 latency (ms)")
        lx.plot(xs, [by_c[c].p50 * 1000 for c in xs], ":", color=LATENCY_COLOR, lw=1.5, label="p50 latency (ms)")
        lx.set_ylabel("latency (ms)", color=LATENCY_COLOR)
        bound = [c for c in xs if by_c[c].verdict == CLIENT_BOUND]
        if bound:
            ax.scatter(
                bound,
                [by_c[c].goodput for c in bound],
                s=220,
                marker="X",
                color=CLIENT_BOUND_COLOR,
                zorder=5,
                label="client-bound (the probe was the limit)",
            )
            for c in bound:
                ax.axvspan(c / 1.15, c * 1.15, color=CLIENT_BOUND_COLOR, alpha=0.25)
        knee = site.result.knee
        if knee is not None and not site.result.client_bound:
            label = f"knee: {x_of(knee):.3g}/s" if by_rate else f"knee: {knee.concurrency}"
            ax.axvline(x_of(knee), color=KNEE_COLOR, lw=3, label=label)
        ax.set_title(plot_title(site), fontsize=9)
        handles = ax.get_legend_handles_labels()
        more = lx.get_legend_handles_labels()
        ax.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left", fontsize=8)
        ax.grid(True, alpha=0.3)
        bottom = [0.0] * len(xs)
        classes = sorted({c for f in by_c.values() for c in f.classes if c not in GOOD})
        for cls in classes:
            shares = [by_c[c].share(cls) * 100 for c in xs]
            bx.bar(
                xs,
                shares,
                width=[c * (0.06 if by_rate else 0.25) for c in xs],
                bottom=bottom,
                label=cls,
                color=CLASS_COLORS.get(cls, "#444444"),
            )
            bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
        bx.set_ylabel("failures (% of answers)")
        bx.set_xlabel("requests sent per second (one at a time)" if by_rate else "concurrency (requests in flight)")
        bx.set_ylim(0, max(5.0, math.ceil(max(bottom, default=0) * 1.2)))
        if classes:
            bx.legend(fontsize=8, loc="upper left")
        bx.grid(True, alpha=0.3)
        path = os.path.join(folder, file_stem(site.host) + ".png")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def saved_profiles(path: str) -> dict[str, Any]:
    """The entries of the profile file at ``path`` as they are ({} when it does not exist);
    ValueError when it is not one (checked before a probe runs, so no probe is lost)."""
    try:
        with open(path) as f:
            old = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise ValueError(f"cannot be read as a probe profile file ({e}); give another file") from None
    raw = old.get("profiles") if isinstance(old, Mapping) else None
    if not isinstance(raw, Mapping):
        raise ValueError("not a probe profile file (no 'profiles' object); give another file")
    return dict(raw)


def save_profiles(path: str, sites: Sequence[SiteProbe], margin: float) -> dict[str, dict[str, Any]]:
    """Merge the sites' recommendations into the profile file ``path`` (the file
    ``SCALE_PROBE_PROFILES`` names; the throttle reads it at start). Written atomically."""
    profiles = saved_profiles(path)
    added = {}
    for s in sites:
        rec = s.recommendation(margin)
        if rec is not None and not s.result.client_bound:
            for host, entry in rec.items():
                added[host] = dict(entry, probed_at=round(time.time(), 3))
    profiles.update(added)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".probe-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"format": 1, "profiles": profiles}, f, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return added
