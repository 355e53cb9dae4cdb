"""The frontier's own shared state read back by both backends, checked (contract 5 of
docs/architecture.md): the status counts, the run documents and the eligible times that
`scrapy scale status` and the workers read.

Another program (or a person with the Redis password, or with the SQLite file) may have
written them: a count that is no whole number, a run document nested 100,000 deep or not
UTF-8, a start time of text, an eligible time of +inf. Each is skipped with ONE warning per
job and kind (:class:`scrapy_scale.shared_values.Warnings`), never a traceback of `status`
or of a worker. Plain Python on :mod:`scrapy_scale.shared_values`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from scrapy_scale.frontier.records.model import RunInfo, State
from scrapy_scale.shared_values import Refused, Warnings, decode_hash, finite, loads, whole

logger = logging.getLogger("scrapy_scale.frontier")
warnings = Warnings(logger)

#: the largest count read back as a count (a frontier of 10^15 records is no frontier)
MAX_COUNT = 10**15
#: seconds ahead of now a time read back may be (a Retry-After of days, a backoff: far less)
FAR_FUTURE = 10 * 365 * 86_400.0
#: the largest run number read back
MAX_RUN = 2**53


def counts(job: str, raw: Mapping[Any, Any], floats: Iterable[str] = ()) -> dict[str, float]:
    """A counts hash (field -> number) read back: its fields that are whole counts (or, for
    the fields named in ``floats``, finite sums >= 0); the others skipped with one warning."""
    good, bad = decode_hash(raw, as_json=False)
    sums = set(floats)
    out: dict[str, float] = {}
    for k, v in good.items():
        n = finite(v, 0.0, float(MAX_COUNT)) if k in sums else whole(v, 0, MAX_COUNT)
        if n is None:
            bad.append((k[:60], f"{str(v)[:20]!r} is not a count"))
        else:
            out[k] = n
    if bad:
        warnings.warn(
            job,
            "counts",
            "frontier: skipping unreadable counts of job %r (%s); shared state is untrusted",
            job,
            "; ".join(f"{k!r}: {why}" for k, why in bad[:3]),
        )
    return out


def count(job: str, name: str, raw: Any) -> int:
    """One count read back; 0 (with the counts' one warning) when it is no whole count."""
    return int(counts(job, {name: 0 if raw is None else raw}).get(name, 0))


def eligible_time(job: str, raw: Any, now: float) -> float | None:
    """An eligible time read back (epoch seconds); None with one warning when it is not a
    finite time from 1970 to :data:`FAR_FUTURE` ahead of ``now``."""
    if raw is None:
        return None
    t = finite(raw, 0.0, now + FAR_FUTURE)
    if t is None:
        warnings.warn(
            job,
            "eligible",
            "frontier: skipping an eligible time %r of job %r: not a time the frontier writes; "
            "shared state is untrusted",
            str(raw)[:30],
            job,
        )
    return t


def run_of(job: str, run_id: Any, started: Any, ended: Any, run_counts: Any, now: float) -> RunInfo | None:
    """One run's fields read back (a row, or a decoded document) as a :class:`RunInfo`;
    None with one warning when a field is not what the frontier writes."""
    rid = whole(run_id, 1, MAX_RUN)
    at = finite(started, 0.0, now + FAR_FUTURE)
    end = None if ended in (None, False, "") else finite(ended, 0.0, now + FAR_FUTURE)
    good: dict[str, int] | None = None
    if isinstance(run_counts, dict):
        good = {}
        for k, v in run_counts.items():
            n = whole(v, 0, MAX_COUNT)
            if n is None:
                good = None
                break
            good[str(k)] = n
    why = (
        "run_id"
        if rid is None
        else "started_at"
        if at is None
        else "ended_at"
        if end is None and ended not in (None, False, "")
        else "counts"
        if good is None
        else None
    )
    if why is not None or rid is None or at is None or good is None:
        shown = {"run_id": run_id, "started_at": started, "ended_at": ended, "counts": run_counts}[why or "run_id"]
        return _refused(job, run_id, f"{why} {str(shown)[:30]!r} is not what the frontier writes")
    return RunInfo(rid, at, end, False, good)


def run_kept(job: str, run_id: Any, started: Any, ended: Any, now: float) -> RunInfo | None:
    """A run a worker works on (the run marker's fields): a start or end time that is not
    a time is taken as ``now`` (with :func:`run_of`'s one warning) rather than failing
    the worker; None only when ``run_id`` is no run number (no run can be named by it)."""
    info = run_of(job, run_id, started, ended, {}, now)
    if info is not None:
        return info
    rid = whole(run_id, 1, MAX_RUN)
    if rid is None:
        return None
    at = finite(started, 0.0, now + FAR_FUTURE)
    end = None if ended in (None, False, "") else finite(ended, 0.0, now + FAR_FUTURE)
    return RunInfo(rid, now if at is None else at, None if ended in (None, False, "") else end or now)


def run_doc(job: str, raw: Any, now: float) -> RunInfo | None:
    """A run document of the Redis runs hash (JSON) read back; None with one warning."""
    try:
        d = loads(raw)
    except Refused as e:
        return _refused(job, "?", str(e))
    if not isinstance(d, dict):
        return _refused(job, "?", f"a JSON {type(d).__name__}, not an object")
    return run_of(job, d.get("run_id"), d.get("started_at"), d.get("ended_at"), d.get("counts") or {}, now)


def run_counts(job: str, raw: Any, run_id: Any) -> Any:
    """A SQLite run row's counts column (JSON) decoded; None with one warning."""
    try:
        return loads(raw)
    except Refused as e:
        return _refused(job, run_id, f"counts {e}")


def _refused(job: str, run_id: Any, why: str) -> RunInfo | None:
    """None, with the one warning about unreadable run documents of ``job``."""
    warnings.warn(
        job,
        "run",
        "frontier: skipping the run document %r of job %r (%s); shared state is untrusted",
        str(run_id)[:30],
        job,
        why,
    )
    return None


#: the Redis record's state field ("st") as the public state
REDIS_STATES = (State.PENDING, State.PENDING, State.LEASED, State.DONE, State.FAILED)


def redis_record(job: str, fingerprint: str, h: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Redis record hash read back (``RedisStore.get``, for `scrapy scale replay`); None
    with one warning when a field is not what the frontier writes."""
    st = whole(h.get("st"), 0, len(REDIS_STATES) - 1)
    p, a, t = whole(h.get("p"), -(2**63), 2**63), whole(h.get("a"), 0, MAX_COUNT), whole(h.get("t"), 0, 2**63)
    enq = finite(h.get("enq"))
    el = finite(h.get("el", h.get("enq")))
    le = finite(h["le"]) if h.get("le") else None
    if st is None or p is None or a is None or t is None or enq is None or el is None or (h.get("le") and le is None):
        unreadable_record(job, fingerprint, "a field is not what the frontier writes")
        return None
    return {
        "fingerprint": fingerprint,
        "state": REDIS_STATES[st],
        "data": str(h.get("d", "")),
        "domain": str(h.get("dom", "")),
        "priority": p,
        "attempts": a,
        "eligible_at": el,
        "enqueued_at": enq,
        "last_failure": (str(h["fc"]), str(h.get("fr", ""))) if h.get("fc") else None,
        "owner": h.get("o"),
        "lease_expires": le,
        "token": t,
    }


def unreadable_record(job: str, fingerprint: str, why: str) -> None:
    """One warning per job: a record that cannot be read back is not shown."""
    warnings.warn(
        job,
        "record",
        "frontier: skipping unreadable record %s of job %r (%s); shared state is untrusted",
        fingerprint[:40],
        job,
        why,
    )
