"""The Redis frontier's run record and workers (:class:`RedisRuns`): the run's transitions
(begin, finish, reopen, reset: the ``run`` script on partition 0, followed by the other
partitions), its history, the lost-state check of the counts, the workers' pids and
heartbeats (run-level keys, partition 0)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.redis import partitions as parts_mod
from scrapy_scale.frontier.backends.redis.connection import RedisConnection
from scrapy_scale.frontier.store import FrontierError, FrontierFatal, RunChange, RunInfo, WorkerTable
from scrapy_scale.redact import redact_url
from scrapy_scale.shared_values import decode_hash


class RedisRuns:
    """The runs and workers of one job."""

    def __init__(self, conn: RedisConnection):
        self.conn = conn
        self.job = conn.job
        #: the run this store began and the most records (+ dead letters) it has seen in
        #: it, per partition: a Redis that lost the job's state is caught by the counts
        self.watched: str | None = None
        self.highs: dict[int, int] = {}

    def change(self, change: RunChange) -> RunInfo | None:
        if change is RunChange.BEGIN:
            return self._begin()
        if change is RunChange.FINISH:
            return self._finish()
        if change is RunChange.REOPEN:
            self._reopen()
        else:
            self._reset()
        return None

    def _begin(self) -> RunInfo:
        # as bytes: the marker's id is read back, and another program may have made it no text
        reply = self.conn.call_script_bytes("run", "begin", self.conn.clock(), self.conn.layout.stored())
        kind, rid, started, old = (bytes(x).decode("utf-8", "replace") for x in reply[:4])
        info = read_back.run_kept(self.job, rid, started, None, self.conn.clock())
        if info is None:
            raise self._bad_marker(rid)
        if len(reply) > 4 and reply[4]:
            read_back.warnings.warn(
                self.job,
                "runseq",
                "frontier: job %r's run sequence %s:meta runseq was no whole number (another program "
                "wrote it); run %s follows the highest run recorded",
                self.job,
                self.conn.key,
                rid,
            )
        stored = bytes(reply[5]).decode("utf-8", "replace") if len(reply) > 5 else ""
        if stored != self.conn.layout.stored():  # another worker stored other partitions meanwhile
            raise FrontierError(
                f"job {self.job!r} was started with partitions {stored[:20]!r} (run field {parts_mod.FIELD}) and "
                f"this worker has {self.conn.layout.stored()!r}: the partitions are fixed for a job's life"
            )
        for i in range(1, self.conn.parts):  # every partition's scripts find the run in their own slot
            before = str(self.conn.call_at(i, "run", "follow", self.conn.clock(), rid))
            if before and before not in (str(rid), str(old)):
                self.conn.unlink_run(before, i)  # a start that stopped half way
        if kind == "new":
            self.conn.unlink_run(old)
        self.watched, self.highs = str(rid), {}
        return RunInfo(info.run_id, info.started_at, None, kind == "resumed", {})

    def open_counts(self, part: int) -> dict[str, int] | None:
        """The counts of one partition (None: it has no run)."""
        run, *vals = self.conn.call_at_bytes(part, "counts")
        if not run:
            return None
        names = ("pending", "delayed", "leased", "done", "failed")
        got = read_back.counts(self.job, dict(zip(names, vals, strict=False)))  # checked: a bad count is 0
        return {k: int(got.get(k, 0)) for k in names}

    def _others_open(self) -> dict[str, int] | None:
        """The summed counts of partitions 1..S-1, or None when one has work left."""
        total = {"pending": 0, "delayed": 0, "leased": 0, "done": 0, "failed": 0}
        for i in range(1, self.conn.parts):
            c = self.open_counts(i) or {}
            if c.get("pending") or c.get("delayed") or c.get("leased"):
                return None
            for k in total:
                total[k] += c.get(k, 0)
        return total

    def _finish(self) -> RunInfo | None:
        others = self._others_open()
        if others is None:
            return None
        res = self.conn.call_script(
            "run", "finish", self.conn.clock(), json.dumps(others) if self.conn.parts > 1 else ""
        )
        if not res:
            return None
        if self.conn.parts > 1 and len(res) > 4 and self._others_open() is None:
            # a request written to another partition while partition 0 was finishing (its
            # parent acked there after): the run goes on
            self.change(RunChange.REOPEN)
            return None
        self.watched = None  # ended: a later run of the job is no loss of state
        info = read_back.run_kept(self.job, res[1], res[2], res[3], self.conn.clock())
        if info is None:  # no run number: nothing this worker can have finished
            return None
        if len(res) > 4:  # the counts this call wrote (the script's own JSON)
            counts = read_back.counts(self.job, read_back.run_counts(self.job, res[4], res[1]) or {})
            return RunInfo(info.run_id, info.started_at, info.ended_at, False, {k: int(v) for k, v in counts.items()})
        return self.run_info(str(res[1])) or info

    def run_info(self, rid: str) -> RunInfo | None:
        """Run ``rid``'s document read back, checked (None: none, or unreadable)."""
        raw = self.conn.hget_bytes(f"{self.conn.key}:runs", rid)
        return None if raw is None else read_back.run_doc(self.job, raw, self.conn.clock())

    def runs(self) -> list[RunInfo]:
        raw = self.conn.retrying(
            lambda: self.conn.r.execute_command("HVALS", f"{self.conn.key}:runs", NEVER_DECODE=True)
        )
        out = [x for x in (read_back.run_doc(self.job, doc, self.conn.clock()) for doc in raw or []) if x is not None]
        return sorted(out, key=lambda r: r.run_id)

    def _reopen(self) -> None:
        rid = self.conn.call_script("run", "reopen", self.conn.clock(), self.conn.layout.stored())
        for i in range(1, self.conn.parts):  # a seed before any start: the partitions take the run
            self.conn.call_at(i, "run", "follow", self.conn.clock(), rid)

    def _reset(self) -> None:
        self.watched = None
        old = self.conn.call_script("run", "reset", self.conn.clock())
        self.conn.unlink_run(str(old))
        for key in self.conn.keys[1:]:  # the next start may choose another partition count
            self.conn.retrying(partial(self.conn.r.delete, f"{key}:run"))

    def current_run(self) -> RunInfo | None:
        raw = self.conn.hget_bytes(f"{self.conn.key}:run", "id")  # read back: bytes (see run_prefix)
        return self.run_info(bytes(raw).decode("utf-8", "replace")) if raw else None

    def check_intact(self, run: str, total: int, part: int = 0) -> None:
        """Within a run, records are only added (a dead letter moves one): a run marker that
        vanished or changed, or fewer records than seen before, means the state is gone
        (checked per partition: a Cluster shard may lose its part alone)."""
        where = f"Redis at {redact_url(self.conn.url)}"
        if part:
            where += f" (partition {part} of {self.conn.parts})"
        if run != self.watched:
            now = f"run {run} is current" if run else f"the run marker {self.conn.keys[part]}:run is gone"
            raise FrontierFatal(
                f"{where} no longer has job {self.job!r}'s run {self.watched} ({now}): the server lost "
                "the job's state (restarted without persistence, flushed, or failed over to a replica "
                "that had not caught up), or the job was reset or finished and started again meanwhile. Requests that were only in "
                "Redis are lost, so this worker stops instead of declaring the run finished. Run Redis "
                "with `appendonly yes`, then start the job again"
            )
        high = self.highs.get(part, 0)
        if total < high:
            raise FrontierFatal(
                f"{where}: job {self.job!r} run {run} has {total} records (with dead letters), fewer than the "
                f"{high} seen before: the server lost writes (restarted from an older snapshot, or "
                "failed over to a replica that had not caught up). Requests that were only in Redis are "
                "lost, so this worker stops instead of declaring the run finished. Run Redis with "
                "`appendonly yes`, then start the job again"
            )
        self.highs[part] = total

    def _bad_marker(self, rid: Any) -> FrontierFatal:
        return FrontierFatal(
            f"job {self.job!r}'s run marker {self.conn.key}:run names run {str(rid)[:30]!r}, which is no run "
            "number a worker writes (another program wrote it): no run can be joined. Reset the job "
            "(`scrapy scale reset`) to start it over"
        )

    # ---- workers ---------------------------------------------------------------------

    @property
    def alive_key(self) -> str:
        return f"{self.conn.key}:alive"

    def read_workers(self, table: WorkerTable) -> dict[str, Any]:
        key = f"{self.conn.key}:workers" if table is WorkerTable.PIDS else self.alive_key
        # read as bytes: a field or value that is not UTF-8 must not fail the read (the pids
        # are compared byte for byte by the claim script, checked by workers_read; a bad
        # heartbeat is skipped with one warning, not a UnicodeDecodeError at every sync)
        raw = self.conn.retrying(lambda: self.conn.r.execute_command("HGETALL", key, NEVER_DECODE=True))
        if table is WorkerTable.PIDS:
            return {bytes(k).decode("utf-8", "replace"): v for k, v in (raw or {}).items()}
        good, bad = decode_hash(raw or {}, as_json=False)
        read_back.warnings.refused(self.alive_key, bad, "frontier: heartbeats")
        out: dict[str, Any] = {}
        for worker, value in good.items():
            parts = value.split()
            out[worker] = (parts[0], parts[1]) if len(parts) == 2 else (value, None)
        return out

    def write_worker(self, table: WorkerTable, worker: str, value: float, seen: Any = None) -> bool:
        if table is WorkerTable.PIDS:
            return bool(self.conn.call_script("claim", worker, seen or b"", str(int(value))))
        now = self.conn.clock()
        self.conn.retrying(lambda: self.conn.r.hset(self.alive_key, worker, f"{now!r} {value!r}"))
        return True
