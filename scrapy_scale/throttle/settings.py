"""SCALE_THROTTLE_* and SCALE_DOMAIN_PROFILES settings (declared in the registry, see scrapy_scale.config)."""

from __future__ import annotations

import math
from typing import Any

from scrapy_scale import config
from scrapy_scale.config import (
    as_bool,
    as_dict,
    as_int,
    as_str,
    as_url,
    core_settings,  # noqa: F401 - declares SCALE_STATE_DIR (used alone, without the add-on)
    declare,
)
from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.throttle import probed
from scrapy_scale.throttle.profiles import Profiles

COMPONENT = "throttle"


def as_profiles(v: Any) -> Profiles:
    return Profiles.parse(as_dict(v))


ENABLED = declare(
    "SCALE_THROTTLE_ENABLED",
    True,
    as_bool,
    "Pace requests per site (adaptive delay, Retry-After pauses, max_rate, robots.txt Crawl-delay). "
    "On by default with the add-on; replaces AutoThrottle.",
    COMPONENT,
)
PROFILES = declare(
    "SCALE_DOMAIN_PROFILES",
    {},
    as_profiles,
    'Pacing profiles by pattern: `{"default": {...}, "example.com": {"max_rate": 5}, "*.cdn.com": {...}}`; '
    "fields concurrency, min_delay, start_delay, max_delay, target_concurrency, max_rate, retry_after, "
    "slowdown, recovery. See docs/throttle.md.",
    COMPONENT,
)
PROBE_PROFILES = declare(
    "SCALE_PROBE_PROFILES",
    None,
    as_str,
    "A profile file written by `scrapy scale probe --save FILE`: its hosts' `concurrency` and `max_rate` "
    "are used as exact-host profiles under `SCALE_DOMAIN_PROFILES` (whose own fields win). Default: none. "
    "See docs/throttle.md.",
    COMPONENT,
)
URL = declare(
    "SCALE_THROTTLE_URL",
    None,
    as_url("sqlite", "redis", "rediss"),
    "Where learned delays (and, with Redis, the shared per-site rate limiter) live. Default: the frontier's "
    "Redis when `SCALE_FRONTIER_URL` is Redis, else `throttle.db` under `JOBDIR` or `SCALE_STATE_DIR`.",
    COMPONENT,
)
STATS_TOP = declare(
    "SCALE_THROTTLE_STATS_TOP",
    20,
    as_int(0, 1000),
    "Sites with their own pacing stats (the most requested); the rest are summed under `other`.",
    COMPONENT,
)


def profiles(settings: Any) -> Profiles:
    """``SCALE_DOMAIN_PROFILES`` with the probed hosts of ``SCALE_PROBE_PROFILES`` under it."""
    user: Profiles = PROFILES.get(settings)
    path = PROBE_PROFILES.get(settings)
    if not path:
        return user
    return Profiles.parse(probed.merged(user.raw, path))


def throttle_url(settings: Any) -> str:
    """SCALE_THROTTLE_URL, else the frontier's Redis, else a SQLite file in the state folder."""
    url = URL.get(settings)
    if url:
        return str(url)
    front = frontier_settings.URL.get(settings) if "SCALE_FRONTIER_URL" in config.REGISTRY else None
    if isinstance(front, str) and front.split("://", 1)[0] in ("redis", "rediss"):
        return front
    return core_settings.state_file_url(settings, "throttle.db")


def slot_delays(settings: Any) -> dict[str, float]:
    """The ``delay`` of each ``DOWNLOAD_SLOTS`` entry the user set (finite, > 0)."""
    out = {}
    for key, conf in (settings.getdict("DOWNLOAD_SLOTS") or {}).items():
        try:
            d = float(conf.get("delay", 0.0))
        except (AttributeError, TypeError, ValueError):
            continue
        if math.isfinite(d) and d > 0:
            out[str(key)] = d
    return out
