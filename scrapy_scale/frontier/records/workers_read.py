"""The workers hash and the heartbeats read back from the frontier's store: checked; and
the slot a worker claims (:func:`free_slot`, shared by every backend).

Both are shared state another process wrote (contract 5, docs/architecture.md): a pid
that is not a whole number a process can have (``"notapid"``, 20 digits) names no live
process, so its slot may be claimed; a heartbeat that is not a finite time, or that holds
further ahead than a worker ever writes one (``1e300``), is skipped: it would show a ghost
live worker and a run "running" for ever. One warning per worker and kind.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scrapy_scale.pids import PID_MAX
from scrapy_scale.shared_values import Warnings, finite, whole

logger = logging.getLogger("scrapy_scale.frontier")
warnings = Warnings(logger)

#: seconds a heartbeat's own time may be ahead of ours (clocks of hosts differ)
CLOCK_SKEW = 3600.0
#: seconds a heartbeat may hold past its own time, at most (a worker writes its lease,
#: at most HEARTBEAT_WINDOW = 30 s, scrapy_scale/frontier/scheduling/sync.py: the margin is wide)
BEAT_HOLDS = 3600.0


def pid_of(worker: str, raw: Any) -> int | None:
    """The pid stored for ``worker``, or None (with one warning) when it is no pid."""
    pid = whole(raw, 1, PID_MAX)
    if pid is None:
        warnings.warn(
            worker,
            "pid",
            "frontier: worker %s's pid %r in the shared workers table is not a pid; its slot is taken as free",
            worker,
            str(raw)[:30],
        )
    return pid


def free_slot(prefix: str, known: Mapping[str, Any], pid: int, is_alive: Callable[[int], bool]) -> tuple[str, Any]:
    """The worker id ``f"{prefix}/{slot}"`` of the lowest slot that is free for ``pid`` (no pid
    stored, its own pid, one that is no pid, or one no longer alive), and the value stored
    for it as ``known`` holds it (None: none), for the store's compare-and-set."""
    slot = 0
    while True:
        wid = f"{prefix}/{slot}"
        old = known.get(wid)
        if old is None:
            return wid, None
        old_pid = pid_of(wid, old)
        if old_pid is None or old_pid == pid or not is_alive(old_pid):
            return wid, old
        slot += 1


def beats(rows: Iterable[tuple[str, Any, Any]], now: float) -> dict[str, tuple[float, float]]:
    """Heartbeats ``(worker, at, until)`` read back, as ``worker -> (at, until)``; one that
    is not two finite times, or holds too far ahead of ``now``, is skipped with one warning."""
    out: dict[str, tuple[float, float]] = {}
    for worker, at_raw, until_raw in rows:
        at, until = finite(at_raw), finite(until_raw)
        if at is None or until is None or at > now + CLOCK_SKEW or until > max(at, now) + BEAT_HOLDS:
            warnings.warn(
                str(worker),
                "beat",
                "frontier: skipping worker %s's heartbeat (%r, %r): not a time a worker writes",
                worker,
                str(at_raw)[:30],
                str(until_raw)[:30],
            )
            continue
        out[str(worker)] = (at, until)
    return out


def split_beat(value: Any) -> tuple[Any, Any]:
    """A Redis heartbeat value ``"<at> <until>"`` as its two parts (NaN when not two)."""
    parts = str(value).split()
    return (parts[0], parts[1]) if len(parts) == 2 else (math.nan, math.nan)
