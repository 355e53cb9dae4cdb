"""Pacing that starts from a probe: the profile file ``scrapy scale probe --save FILE`` writes.

``SCALE_PROBE_PROFILES = "FILE"`` makes the throttle read it at start: each probed host
becomes an exact-host profile (``concurrency``, ``max_rate``) under the project's own
``SCALE_DOMAIN_PROFILES``, and never paces a host faster than the project's own profiles
would: each probed field is capped by the project's value for that host (its own pattern,
a wildcard, its site or ``default``; a field the project sets for that same pattern wins),
and a host the project paces as part of a wider unit (``*.example.com``, ``example.com``)
is not split from it. The file is input, not truth: an entry that is not a usable profile (unknown field, a rate that is
not a finite number > 0, a pattern that is not a host) is skipped with one warning; a file
that cannot be read is ignored with one warning. Plain Python, no Scrapy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from scrapy_scale.throttle.profiles import DEFAULT, Profile, ProfileError, Profiles, make_profile, parse_pattern

logger = logging.getLogger(__name__)

#: the fields a probed entry may set
PROBED_FIELDS = ("concurrency", "max_rate")


def read(path: str, problems: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The usable entries of a probe profile file ({host: {concurrency, max_rate}})."""
    bad = problems if problems is not None else []
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
        bad.append(f"{path}: not read ({type(e).__name__}: {e})")
        return {}
    raw = doc.get("profiles") if isinstance(doc, Mapping) else None
    if not isinstance(raw, Mapping):
        bad.append(f"{path}: no 'profiles' object")
        return {}
    out: dict[str, dict[str, Any]] = {}
    for host, entry in raw.items():
        if not isinstance(entry, Mapping):
            bad.append(f"{host!r}: not an object")
            continue
        fields = {k: v for k, v in entry.items() if k in PROBED_FIELDS}
        try:
            pattern = parse_pattern(host)
            if pattern.kind not in ("host", "site"):
                raise ProfileError(f"{host!r} is not a host")
            make_profile(fields, where=repr(host))
        except (ProfileError, ValueError, TypeError) as e:
            bad.append(str(e))
            continue
        if fields:
            out[pattern.text] = fields
    return out


def capped(fields: Mapping[str, Any], project: Profile) -> dict[str, Any]:
    """The probed ``fields``, none above the project's own value for that host."""
    out = dict(fields)
    for name in PROBED_FIELDS:
        mine = getattr(project, name)
        if name in out and mine is not None and out[name] > mine:
            out[name] = mine
    return out


def merged(user: Mapping[str, Any], path: str | None) -> dict[str, Any]:
    """The project's ``SCALE_DOMAIN_PROFILES`` with the probed hosts of ``path`` under it."""
    out = dict(user)
    if not path:
        return out
    problems: list[str] = []
    entries = read(path, problems)
    project = Profiles.parse(user)
    keys = {parse_pattern(k).text: k for k in user}  # the project's spelling of each pattern
    for host, fields in entries.items():
        m = project.match(host)
        if m.pattern not in (host, DEFAULT):
            problems.append(f"{host!r}: paced with the project's {m.pattern!r} profile, not split from it")
            continue
        fields = capped(fields, m.profile)
        key = keys.get(host, host)
        mine = out.get(key)
        out[key] = {**fields, **mine} if isinstance(mine, Mapping) else fields
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        logger.warning("throttle: probe profiles skipped from %s: %s%s", path, "; ".join(problems[:3]), more)
    return out
