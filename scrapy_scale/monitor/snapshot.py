"""The worker snapshot: the record each worker publishes for ``scrapy scale watch`` /
``status`` (:mod:`scrapy_scale.monitor.worker_status` writes and reads it), its one
encoder and its one decoder.

It goes over the wire as JSON (a Redis hash field, or a file next to ``frontier.db``), so
it is a :class:`~typing.TypedDict`. Another process (or a person with the Redis password)
may have written what is read back: :func:`decode` checks every field on
:mod:`scrapy_scale.shared_values` (counts whole and >= 0, rates finite, ``until`` a finite
time that holds at most :data:`HOLDS_AT_MOST` ahead) and raises :class:`Refused` saying
why. A field missing from a snapshot (written by an older version) reads as its default.

Plain Python, no Scrapy.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

from scrapy_scale.shared_values import Refused, finite, loads, whole

#: seconds a snapshot may hold from now, at most (a worker writes 3 intervals ahead)
HOLDS_AT_MOST = 86_400.0
#: the largest count read back
MAX_COUNT = 10**15


class DomainCounts(TypedDict):
    """One named domain's numbers in a snapshot."""

    attempts: int
    blocked: int
    rate_limited: int


class WorkerSnapshot(TypedDict):
    """What one worker publishes every ``SCALE_WATCH_INTERVAL`` seconds."""

    worker: str
    job: str
    host: str
    pid: int
    #: when it was written, and until when it holds (3 intervals later), epoch seconds
    at: float
    until: float
    started: float | None
    #: final requests and retries by failure class
    requests: dict[str, int]
    retries: dict[str, int]
    done: int
    items_stored: int
    items_dead_lettered: int
    #: recent rates (None until the worker has two samples)
    pages_per_min: float | None
    items_per_min: float | None
    finished_per_min: float | None
    domains: dict[str, DomainCounts]
    #: egresses by state
    egress_pool: dict[str, int]
    browser_contexts: int
    download_slots: int


RATES = ("pages_per_min", "items_per_min", "finished_per_min")
COUNTS = ("done", "items_stored", "items_dead_lettered", "browser_contexts", "download_slots")
BY_NAME = ("requests", "retries", "egress_pool")


def encode(doc: WorkerSnapshot) -> str:
    """The snapshot as it is stored (the one encoder: both sinks write this)."""
    return json.dumps(doc)


def decode(raw: Any, now: float) -> WorkerSnapshot:
    """A snapshot read back (JSON text or bytes, or already decoded JSON), checked;
    :class:`Refused` with why when a field is not what a worker writes."""
    d = loads(raw) if isinstance(raw, str | bytes | bytearray) else raw
    if not isinstance(d, dict):
        raise Refused(f"not a record: {str(d)[:30]!r}")
    until = finite(d.get("until"))
    if until is None or until > now + HOLDS_AT_MOST:
        raise Refused(f"until {str(d.get('until'))[:30]!r}")
    rates = {k: _rate(d, k) for k in RATES}
    counts = {k: _count(d.get(k, 0) or 0, k) for k in COUNTS}
    by_name = {k: _counts(d.get(k) or {}, k) for k in BY_NAME}
    domains = d.get("domains") or {}
    if not isinstance(domains, dict):
        raise Refused("domains is not a record")
    return WorkerSnapshot(
        worker=str(d.get("worker", "?")),
        job=str(d.get("job", "")),
        host=str(d.get("host", "")),
        pid=whole(d.get("pid", 0), 0, 2**63) or 0,
        at=finite(d.get("at"), 0.0) or 0.0,
        until=until,
        started=finite(d.get("started"), 0.0),
        requests=by_name["requests"],
        retries=by_name["retries"],
        done=counts["done"],
        items_stored=counts["items_stored"],
        items_dead_lettered=counts["items_dead_lettered"],
        pages_per_min=rates["pages_per_min"],
        items_per_min=rates["items_per_min"],
        finished_per_min=rates["finished_per_min"],
        domains={str(name): _domain(v, str(name)) for name, v in domains.items()},
        egress_pool=by_name["egress_pool"],
        browser_contexts=counts["browser_contexts"],
        download_slots=counts["download_slots"],
    )


def _count(v: Any, what: str) -> int:
    n = whole(v, 0, MAX_COUNT)
    if n is None:
        raise Refused(f"{what} {str(v)[:20]!r} is not a count")
    return n


def _counts(v: Any, what: str) -> dict[str, int]:
    if not isinstance(v, dict):
        raise Refused(f"{what} is not a record")
    return {str(k): _count(n, f"{what}[{str(k)[:20]!r}]") for k, n in v.items()}


def _rate(d: dict[str, Any], k: str) -> float | None:
    if d.get(k) is None:
        return None
    x = finite(d[k], 0.0)
    if x is None:
        raise Refused(f"{k} {str(d[k])[:20]!r} is not a rate")
    return x


def _domain(v: Any, name: str) -> DomainCounts:
    c = _counts(v, f"domains[{name[:20]!r}]")
    return DomainCounts(
        attempts=c.get("attempts", 0), blocked=c.get("blocked", 0), rate_limited=c.get("rate_limited", 0)
    )
