"""Per-site pacing in ``scrapy scale status JOB`` (the learned delays, read from where the
workers persist them: Redis or ``throttle.db``) and ``scrapy scale reset JOB`` (forgets them)."""

from __future__ import annotations

import os
import time
from typing import Any

from scrapy_scale.throttle.policy import check_learned
from scrapy_scale.throttle.settings import throttle_url
from scrapy_scale.throttle.shared import open_shared, sqlite_path

#: sites listed in the text (the slowest first); --json lists every one
SHOWN = 20


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
        if v is not None:
            rows.append({"site": site, "delay": v["delay"], "learned_at": v["at"]})
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
