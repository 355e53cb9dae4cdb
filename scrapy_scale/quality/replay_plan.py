"""Which snapshots a replay runs, and with which judging settings (plain Python, no reactor).

Snapshot files are read back from disk: untrusted. One that cannot be read or lacks what a
replay needs is skipped (and kept) with one warning for all of them. Each readable snapshot
is judged with the settings recorded with it (:mod:`scrapy_scale.quality.judged`), except
those the user gave with ``-s``; one whose record is missing or bad is judged with this
command's settings, said once. A replay runs one set of settings: the snapshots whose
settings differ from the oldest one's are left for another replay, and the report says so.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.quality import judged
from scrapy_scale.quality.raw_pages import SnapshotDir

logger = logging.getLogger(__name__)


@dataclass
class Plan:
    #: file name -> snapshot, the ones this replay runs (oldest first)
    loaded: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the judging settings to set for the replay (recorded, and not given with -s)
    settings: dict[str, Any] = field(default_factory=dict)
    #: what the user is told about the settings and the snapshots left out
    notes: list[str] = field(default_factory=list)
    #: file name -> why it was skipped (the file is kept)
    unreadable: dict[str, str] = field(default_factory=dict)
    #: readable snapshots judged by other settings, left for another replay
    left: list[str] = field(default_factory=list)


def check_snapshot(snap: Any) -> None:
    """ValueError unless ``snap`` has what a replay reads."""
    if not isinstance(snap, Mapping):
        raise ValueError("not a JSON object")
    for key, kind in (("url", str), ("fingerprint", str), ("body", str), ("headers", Mapping), ("request", Mapping)):
        if not isinstance(snap.get(key), kind):
            raise ValueError(f"no usable {key}")
    status = snap.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999:
        raise ValueError(f"bad status {str(status)[:40]!r}")
    if not 0 < len(snap["fingerprint"]) <= 128:
        raise ValueError("bad fingerprint")
    if not isinstance(snap["request"].get("url"), str):
        raise ValueError("the request has no URL")
    rcls = snap["request"].get("_class")
    if rcls is not None and (not isinstance(rcls, str) or not rcls.startswith("scrapy.")):
        # checked on the dotted path, before anything is imported: a file names no code to load
        raise ValueError(f"the request names a class outside Scrapy: {str(rcls)[:80]!r}")
    for k, vs in snap["headers"].items():
        if not isinstance(vs, list) or not all(isinstance(v, str) for v in vs):
            raise ValueError(f"bad header {str(k)[:40]!r}")
    try:
        base64.b64decode(snap["body"], validate=True)
        base64.b64decode(snap["request"].get("body") or "", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("body is not base64") from None


def _load(snaps: SnapshotDir, names: list[str], plan: Plan) -> dict[str, dict[str, Any]]:
    out = {}
    for n in names:
        try:
            snap = snaps.read(n)
            check_snapshot(snap)
        except (OSError, EOFError, zlib.error, ValueError, TypeError, RecursionError) as e:
            plan.unreadable[n] = str(e)[:200] or type(e).__name__
            continue
        out[n] = snap
    if plan.unreadable:
        first, why = next(iter(plan.unreadable.items()))
        msg = (
            f"{len(plan.unreadable)} snapshot file(s) cannot be replayed and are kept as they are "
            f"(first: {first}: {why})"
        )
        logger.warning("replay: %s", msg)
        plan.notes.append(msg)
    return out


def plan(snaps: SnapshotDir, cls: str, settings: Any) -> Plan:
    """The snapshots of class ``cls`` to replay and the judging settings to replay them with."""
    p = Plan()
    readable = _load(snaps, snaps.entries(cls), p)
    if not readable:
        return p
    over = judged.overridden(settings)
    now = judged.record(settings)
    bad: dict[str, str] = {}
    recorded: dict[str, dict[str, Any]] = {}
    effective: dict[str, str] = {}
    for n, snap in readable.items():
        raw = snap.get(judged.FIELD)
        rec: dict[str, Any] = {}
        if raw is None:
            bad[n] = "no record of them (kept before they were recorded)"
        else:
            try:
                rec = judged.read(raw)
            except ValueError as e:
                bad[n] = f"a bad record: {e}"
        recorded[n] = rec
        used = {**now, **{k: v for k, v in rec.items() if k not in over}}
        effective[n] = json.dumps(used, sort_keys=True)
    first = next(iter(readable))
    chosen = effective[first]
    p.loaded = {n: s for n, s in readable.items() if effective[n] == chosen}
    p.left = [n for n in readable if effective[n] != chosen]
    p.settings = {k: v for k, v in recorded[first].items() if k not in over}
    _explain(p, bad, recorded, over, now)
    return p


def _explain(
    p: Plan, bad: dict[str, str], recorded: dict[str, dict[str, Any]], over: set[str], now: dict[str, Any]
) -> None:
    fallback = [n for n in p.loaded if n in bad]
    if fallback:
        msg = (
            f"{len(fallback)} snapshot(s) carry no usable record of the settings that judged them "
            f"(first: {fallback[0]}: {bad[fallback[0]]}); they are judged with this command's settings"
        )
        logger.warning("replay: %s", msg)
        p.notes.append(msg)
    differ = {k: v for k, v in p.settings.items() if v != now.get(k)}
    if differ:
        p.notes.append(f"judged with the settings recorded by the crawl: {judged.describe(differ)}")
    for name in sorted(over):
        theirs = next((r[name] for n, r in recorded.items() if n in p.loaded and name in r), None)
        if theirs is not None and theirs != now[name]:
            p.notes.append(
                f"{name} given on the command line is used: {judged.describe({name: now[name]})} "
                f"(the crawl recorded {json.dumps(theirs, sort_keys=True)[:120]})"
            )
    if p.left:
        p.notes.append(
            f"{len(p.left)} snapshot(s) judged by other settings are left for another replay "
            "(give the settings with -s to replay them all with those)"
        )
