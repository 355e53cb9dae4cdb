"""Per-site pacing in ``scrapy scale status JOB`` (the learned delays, read from where the
workers persist them: Redis or ``throttle.db``) and ``scrapy scale reset JOB`` (forgets them)."""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

from scrapy_scale.outcomes import settings as outcomes_settings
from scrapy_scale.throttle.learned import check_learned
from scrapy_scale.throttle.settings import throttle_url
from scrapy_scale.throttle.shared import open_shared, sqlite_path

logger = logging.getLogger(__name__)

#: sites listed in the text (the slowest first); --json lists every one
SHOWN = 20
#: the longest pause shown when the settings do not say (SCALE_RETRY_AFTER_MAX's default)
PAUSE_MAX = float(outcomes_settings.RETRY_AFTER_MAX.default)
_warned: set[str] = set()


def read(settings: Any, job: str) -> list[dict[str, Any]]:
    """The learned pacing of every site of ``job``, slowest first; [] when none or unreadable."""
    url = throttle_url(settings)
    if url.startswith("sqlite:") and not os.path.exists(sqlite_path(url)):
        return []  # status only reads: no file is created
    try:
        shared = open_shared(url, job)
    except Exception:  # noqa: BLE001 - status shows what it can
        return []
    try:
        learned = shared.load()
    except Exception:  # noqa: BLE001
        learned = {}
    finally:
        shared.close()
    rows = []
    now = time.time()
    for site, raw in learned.items():
        v, _ = check_learned(raw, now)  # what a worker would not use is not shown
        if v is None:
            continue
        row = {"site": site, "delay": v["delay"], "learned_at": v["at"]}
        try:
            row["paused_until"] = float(raw.get("paused_until", 0.0))
        except (TypeError, ValueError, OverflowError):  # an int of 400 digits: OverflowError
            row["paused_until"] = math.nan  # paused() skips it, with a warning
        rows.append(row)
    return sorted(rows, key=lambda r: (-r["delay"], r["site"]))


def format_text(rows: list[dict[str, Any]], now: float | None = None) -> str:
    if not rows:
        return ""
    now = time.time() if now is None else now
    lines = [f"pacing (learned, {len(rows)} site(s), slowest first):"]
    for r in rows[:SHOWN]:
        ago = max(0.0, now - r["learned_at"])
        lines.append(f"  {r['site']}: {r['delay']:.3f} s between requests ({ago:.0f} s ago)")
    if len(rows) > SHOWN:
        lines.append(f"  ... and {len(rows) - SHOWN} more (--json lists all)")
    return "\n" + "\n".join(lines)


def paused(rows: list[dict[str, Any]], now: float, longest: float = PAUSE_MAX) -> list[dict[str, Any]]:
    """The sites paused at ``now`` (by ``Retry-After``) and until when, soonest first. The
    times come from shared state: a value that is not a finite number is skipped, one more
    than ``longest`` seconds ahead (no pause is longer) is shown clamped (``clamped``);
    either is warned about once per site."""
    out = []
    for r in rows:
        until = r.get("paused_until", 0.0)
        if not isinstance(until, int | float) or not math.isfinite(until):
            _warn_once(
                r["site"], f"throttle: {r['site']} has an unreadable pause time {until!r} in the shared state; ignored"
            )
            continue
        if until <= now:
            continue
        clamped = until > now + longest
        if clamped:
            _warn_once(
                r["site"],
                f"throttle: {r['site']} is paused until {until:.0f}, more than {longest:.0f} s ahead "
                "(SCALE_RETRY_AFTER_MAX); shown as that long",
            )
            until = now + longest
        out.append({"site": r["site"], "until": until, "clamped": clamped})
    return sorted(out, key=lambda p: (p["until"], p["site"]))


def _warn_once(site: str, message: str) -> None:
    if site not in _warned:
        _warned.add(site)
        logger.warning("%s", message)


def format_paused(pauses: list[dict[str, Any]], now: float) -> str:
    """``paused (Retry-After): shop1 until 12:00:05 UTC (in 12 s), ...``; "" when none."""
    if not pauses:
        return ""
    shown = [
        f"{p['site']} until {time.strftime('%H:%M:%S', time.gmtime(p['until']))} UTC "
        f"(in {max(0.0, p['until'] - now):.0f} s{', clamped' if p.get('clamped') else ''})"
        for p in pauses[:SHOWN]
    ]
    more = f", and {len(pauses) - SHOWN} more" if len(pauses) > SHOWN else ""
    return f"paused sites (Retry-After): {', '.join(shown)}{more}"


def forget(settings: Any, job: str) -> None:
    """Forget ``job``'s learned pacing (and, on Redis, its limiter keys); nothing to do without any."""
    url = throttle_url(settings)
    if url.startswith("sqlite:") and not os.path.exists(sqlite_path(url)):
        return
    shared = open_shared(url, job)
    try:
        shared.reset()
    finally:
        shared.close()
