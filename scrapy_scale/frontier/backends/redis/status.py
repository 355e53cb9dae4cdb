"""``RedisStore.status()``: what ``scrapy scale status`` reads from Redis, cheaply.

Status runs every few seconds while workers crawl, so it must never hold the Redis
server for long: a Lua script blocks every other client while it runs. With 300,000
domains the old single script walked every domain queue (2 s, a PING from a worker
waited 1.8 s). Now:

- counts, failure classes, waits and dead letters are counters the scripts keep
  (``HGETALL`` of one small hash, ``HLEN``);
- leases per worker walk only the leased records (bounded by the workers' batches);
- the oldest pending request is looked for in the domain queues (a short queue read whole,
  a long one at both ends: its newest requests are at the head, seeds at the tail), in
  chunks of :data:`CHUNK` domains per script call (each call is short; other clients
  are served between them), and over at most :data:`STATUS_DOMAINS` domains in all,
  the least recently served first. Beyond that, or with a long queue, the age reported
  is a lower bound (``Status.oldest_pending_exact`` is False).

Worker heartbeats live in ``scale:{JOB}:alive`` (worker -> "last_beat until"). A job split
into partitions (:mod:`.partitions`) is read partition by partition (one call of each script
per partition) and summed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.records.workers_read import beats, split_beat
from scrapy_scale.frontier.store import COUNT_KEYS, DELAYED_SAMPLE, RunInfo, Status
from scrapy_scale.shared_values import Refused, decode_hash, loads, whole

T = TypeVar("T")


class RedisStore(Protocol):
    """The public methods of the Redis store that status reads go through."""

    job: str

    @property
    def parts(self) -> int: ...

    @property
    def alive_key(self) -> str: ...

    @property
    def r(self) -> Any: ...

    def clock(self) -> float: ...

    def call_at_bytes(self, part: int, script: str, *args: Any) -> Any: ...

    def retrying(self, fn: Callable[[], T]) -> T: ...

    def current_run(self) -> RunInfo | None: ...

    def run_prefix(self, part: int = 0) -> str: ...


#: domains whose queue heads one script call looks at
CHUNK = 500
#: domains status looks at in all (over every priority) for the oldest pending request
STATUS_DOMAINS = 10_000


def read_status(store: RedisStore) -> Status:
    """The status, every value read back checked (read_back): a count that is no count, a
    time that is not finite, a field name that is not UTF-8 is skipped with one warning.
    Summed over the job's partitions."""
    now = store.clock()
    cnt: dict[str, float] = {}
    leases: dict[str, int] = {}
    dead = 0
    oldest: float | None = None
    exact = True
    retries, last = 0, None
    for part in range(store.parts):
        # bytes: the reply carries the counts hash's field names as another program wrote them
        doc = _script_json(store, store.call_at_bytes(part, "status", now))
        flat: list[Any] = doc["cnt"] if isinstance(doc.get("cnt"), list) else []
        raw = {_raw(flat[i]): _raw(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        for k, v in read_back.counts(store.job, raw, floats=("wait_sum",)).items():
            cnt[k] = cnt.get(k, 0) + v
        prios = doc["prios"] if isinstance(doc.get("prios"), list) else []
        got, got_exact = _oldest_pending(store, part, prios, now)
        if got is not None and (oldest is None or got < oldest):
            oldest = got
        exact = exact and got_exact
        by_worker: dict[Any, Any] = doc["leases"] if isinstance(doc.get("leases"), dict) else {}
        for k, v in read_back.counts(store.job, {_raw(w): n for w, n in by_worker.items()}).items():
            leases[k] = leases.get(k, 0) + int(v)
        dead += read_back.count(store.job, "dead", doc.get("dead"))
        d = _delayed(store, part, now)
        retries += d["delayed_retries"]
        if d["last_eligible_at"] is not None and (last is None or d["last_eligible_at"] > last):
            last = d["last_eligible_at"]
    wait_n = int(cnt.get("wait_n", 0))
    return Status(
        job=store.job,
        run=store.current_run(),
        counts={k: int(cnt.get(k, 0)) for k in COUNT_KEYS},
        failed_by_class={k[5:]: int(v) for k, v in cnt.items() if k.startswith("fail:") and int(v) > 0},
        oldest_pending_age=None if oldest is None else max(0.0, now - oldest),
        average_wait=cnt.get("wait_sum", 0.0) / wait_n if wait_n else None,
        leases_by_worker=leases,
        dead_letters=dead,
        workers=read_beats(store),
        oldest_pending_exact=exact,
        delayed_retries=retries,
        last_eligible_at=last,
    )


def _raw(v: Any) -> Any:
    """A string of the script's JSON reply back to the bytes Redis held (see _script_json)."""
    return v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v


def _script_json(store: RedisStore, reply: Any) -> dict[str, Any]:
    """A status script's JSON reply, read as bytes: bytes that are not UTF-8 (a field name
    another program wrote, passed through by cjson) are kept as surrogates for
    :func:`_raw`, so that the decoder refuses that field alone, not the whole reply."""
    try:
        doc = loads(bytes(reply).decode("utf-8", "surrogateescape"))
    except Refused:
        doc = None
    return doc if isinstance(doc, dict) else {}


def _delayed(store: RedisStore, part: int, now: float) -> dict[str, Any]:
    """How many delayed records are retries (an estimate from the first DELAYED_SAMPLE by
    eligible time when there are more), and the latest eligible time, in one partition."""
    p = store.run_prefix(part)
    key = f"{p}:delayed"

    def read() -> tuple[int, list[str], list[Any], list[tuple[str, float]]]:
        pipe = store.r.pipeline(transaction=False)
        pipe.zcard(key)
        pipe.zrange(key, 0, DELAYED_SAMPLE - 1)
        pipe.zrange(key, -1, -1, withscores=True)
        total, fps, last = pipe.execute()
        attempts = store.r.pipeline(transaction=False)
        for fp in fps:
            attempts.hget(f"{p}:r:{fp}", "a")
        return int(total), list(fps), attempts.execute() if fps else [], last

    total, fps, attempts, last = store.retrying(read)
    # a record gone meanwhile (leased), or garbled: not counted
    tried = sum(1 for a in attempts if (whole(a, 0, read_back.MAX_COUNT) or 0) > 0)
    retries = round(tried * total / len(fps)) if fps else 0
    return {
        "delayed_retries": retries,
        "last_eligible_at": read_back.eligible_time(store.job, last[0][1], now) if last else None,
    }


def _oldest_pending(store: RedisStore, part: int, prios: list[Any], now: float) -> tuple[float | None, bool]:
    """The oldest eligible time among the ready records, looking at no more than
    STATUS_DOMAINS domains, CHUNK per script call (a domain's queue read whole when short,
    at both ends when long); and whether that is exact (every domain, every record seen).
    A record's eligible time that is not a finite time >= 0 is skipped by the script, and
    counted: one warning."""
    oldest: float | None = None
    exact = True
    budget = STATUS_DOMAINS
    for pair in prios:
        p, ndom = (
            (pair[0], whole(pair[1], 0, read_back.MAX_COUNT) or 0)
            if isinstance(pair, list) and len(pair) == 2
            else ("", 0)
        )
        start = 0
        while start < ndom:
            if budget <= 0:
                return oldest, False
            n = min(CHUNK, budget)
            got = _script_json(store, store.call_at_bytes(part, "heads", str(p), start, n))
            if got.get("bad"):
                read_back.eligible_time(store.job, f"{got['bad']} record(s) not finite or < 0", now)
            at = None if got.get("oldest") is False else read_back.eligible_time(store.job, got.get("oldest"), now)
            if at is not None and (oldest is None or at < oldest):
                oldest = at
            exact = exact and got.get("exact") is not False
            seen = whole(got.get("n"), 0, n) or 0
            if not seen:
                break
            start += seen
            budget -= seen
    return oldest, exact


def read_beats(store: RedisStore) -> dict[str, tuple[float, float]]:
    raw = store.retrying(lambda: store.r.execute_command("HGETALL", store.alive_key, NEVER_DECODE=True))
    good, _ = decode_hash(raw or {}, as_json=False)  # a name or value not UTF-8 is no worker's
    return beats(((w, *split_beat(v)) for w, v in good.items()), store.clock())
