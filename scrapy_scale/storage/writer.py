"""The batch writer: one dedicated thread that owns the store connection.

Items are submitted from the reactor thread; the writer thread writes them in
batches of up to ``batch_size``, as soon as a batch is full or its oldest item
has waited ``max_latency`` seconds (or at once when closing). Each submission's
``done`` callback is called (on the writer thread) only after its batch was
committed by the store, or after the item went to the dead letter.

While the store is unavailable the same batch is tried again with capped,
jittered exponential backoff, for as long as it takes: nothing is dropped. A batch
the store refuses for another reason is split and written row by row, so one bad
row cannot block the others; rows refused for good go to the dead letter.

When the store is broken for good (:class:`StoreBroken`: schema mismatch, corrupt file)
or refuses the dead-letter write itself, nothing more can be written: the writer stops,
sets ``fatal`` and hands every unwritten submission to ``on_fatal`` (the pipeline fails
them and closes the spider) instead of looping.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.clock import Randomness
from scrapy_scale.storage.backends.base import (
    DeadRow,
    Row,
    Store,
    StoreBroken,
    StoreUnavailable,
    WriteResult,
)

logger = logging.getLogger(__name__)


@dataclass
class Stored:
    key: str
    inserted: bool


@dataclass
class DeadLettered:
    key: str | None
    reason: str


Result = Stored | DeadLettered


@dataclass
class Submission:
    """One item on its way to the store: an upsert ``row``, or a ``dead`` record."""

    #: called on the writer thread with the result (unless the writer has ``on_batch``)
    done: Callable[[Result], None] | None = None
    row: Row | None = None
    dead: DeadRow | None = None
    #: reason when ``dead`` is set
    reason: str = ""
    #: builds the dead-letter record if the store refuses ``row`` for good
    on_refused: Callable[[str], DeadRow] | None = None
    #: dotted path of the item's class (None for a dict), for the feed journal
    item_class: str | None = None
    t: float = field(default=0.0)


@dataclass
class BatchReport:
    items: int
    inserted: int
    updated: int
    dead: int
    retries: int
    write_seconds: float
    #: the oldest item's wait, from submission to commit
    max_item_latency: float


class _Abandoned(Exception):
    """abandon() was called while the store was unavailable."""


class Backoff:
    def __init__(self, base: float, cap: float, rng: Randomness | None = None):
        self.base, self.cap = base, cap
        self.rng = rng or Randomness()

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failure (1-based): full jitter in [d/2, d]."""
        d = min(self.cap, self.base * 2 ** (attempt - 1))
        return self.rng.uniform(d / 2, d)


class BatchWriter:
    def __init__(
        self,
        store: Store,
        batch_size: int = 100,
        max_latency: float = 0.2,
        retry_max_delay: float = 10.0,
        report: Callable[[BatchReport], None] | None = None,
        on_unavailable: Callable[[str, int, float], None] | None = None,
        on_batch: Callable[[BatchReport, list[tuple[Submission, Result]]], None] | None = None,
        on_fatal: Callable[[str, list[Submission]], None] | None = None,
        on_abandoned: Callable[[list[Submission]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rng: Randomness | None = None,
    ):
        self.store = store
        self.batch_size = batch_size
        self.max_latency = max_latency
        self.backoff = Backoff(min(0.25, retry_max_delay), retry_max_delay, rng)
        self.report = report
        self.on_unavailable = on_unavailable
        self.on_batch = on_batch
        self.on_fatal = on_fatal
        self.on_abandoned = on_abandoned
        #: why the writer stopped for good (the store cannot take writes), else None
        self.fatal: str | None = None
        self.clock = clock
        self.wall = wall
        self._queue: deque[Submission] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._stop_retrying = threading.Event()
        self.error: BaseException | None = None

    # ---- reactor side ----------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scrapy-scale-store-writer", daemon=True)
        self._thread.start()

    def submit(self, s: Submission) -> None:
        s.t = self.clock()
        with self._cond:
            if self.fatal is not None:
                raise StoreBroken(self.fatal)
            if self._closing:
                raise RuntimeError("the store writer is closed")
            self._queue.append(s)
            if len(self._queue) >= self.batch_size or self.max_latency == 0:
                self._cond.notify()
            elif len(self._queue) == 1:
                self._cond.notify()  # wake to arm the latency timer

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def close(self, timeout: float | None = None) -> bool:
        """Write everything pending, then stop. Blocking; True when all was written."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def abandon(self) -> None:
        """Stop retrying an unavailable store (shutdown that cannot wait any longer): the
        writer stops and hands everything unwritten to ``on_abandoned``."""
        with self._cond:
            self._stop_retrying.set()
            self._cond.notify()

    # ---- writer thread ---------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            failures = 0
            while True:
                try:
                    self._write_batch(batch)
                    break
                except _Abandoned:
                    self._give_back(batch)
                    return
                except StoreBroken as e:
                    self._fail(batch, f"{self.store.describe()}: {e}", e)
                    return
                except Exception as e:  # noqa: BLE001 - never lose the batch: log, wait, again
                    failures += 1
                    self.error = e
                    logger.exception(
                        "store writer: a batch of %d failed (attempt %d); trying again", len(batch), failures
                    )
                    if self._stop_retrying.wait(self.backoff.delay(failures)):
                        self._give_back(batch)
                        return

    def _give_back(self, batch: list[Submission]) -> None:
        """Abandoned: stop taking items and hand back everything not written."""
        with self._cond:
            self._closing = True
            rest = batch + list(self._queue)
            self._queue.clear()
        logger.error("store writer: abandoned while the store is unavailable; %d items not stored", len(rest))
        if self.on_abandoned is not None:
            self.on_abandoned(rest)

    def _fail(self, batch: list[Submission], message: str, e: BaseException) -> None:
        """The store cannot take writes: stop, and hand back everything not written."""
        with self._cond:
            self.fatal = message
            rest = batch + list(self._queue)
            self._queue.clear()
        self.error = e
        logger.error(
            "store writer: the store cannot be written, stopping (%d items not stored): %s", len(rest), message
        )
        if self.on_fatal is not None:
            self.on_fatal(message, rest)

    def _next_batch(self) -> list[Submission] | None:
        with self._cond:
            while True:
                if self._queue:
                    age = self.clock() - self._queue[0].t
                    if self._closing or len(self._queue) >= self.batch_size or age >= self.max_latency:
                        n = min(self.batch_size, len(self._queue))
                        return [self._queue.popleft() for _ in range(n)]
                    self._cond.wait(self.max_latency - age)
                elif self._closing:
                    return None
                else:
                    self._cond.wait()

    def _retrying(self, what: str, fn: Callable[[], Any]) -> tuple[Any, int]:
        """Call ``fn`` until the store answers; returns (result, retries)."""
        attempt = 0
        while True:
            try:
                return fn(), attempt
            except StoreUnavailable as e:
                attempt += 1
                delay = self.backoff.delay(attempt)
                if self.on_unavailable:
                    self.on_unavailable(str(e), attempt, delay)
                if self._stop_retrying.wait(delay):
                    raise _Abandoned() from e

    def _write_batch(self, batch: list[Submission]) -> None:
        t0 = self.clock()
        # one upsert per key: later items of the same key win, field by field
        rows: dict[str, Row] = {}
        for s in batch:
            if s.row is not None:
                r = rows.get(s.row.key)
                if r is None:
                    rows[s.row.key] = Row(s.row.key, dict(s.row.doc))
                else:
                    r.doc.update(s.row.doc)
        inserted: set[str] = set()
        failed: dict[str, str] = {}
        retries = 0
        todo = list(rows.values())
        while todo:
            res, n = self._retrying("write", functools.partial(self._write_isolating, todo))
            retries += n
            inserted.update(res.inserted)
            failed.update(res.failed)
            if res.retry:
                retries += 1
                delay = self.backoff.delay(1)
                if self._stop_retrying.wait(delay):
                    raise _Abandoned()
            todo = res.retry
        dead: list[DeadRow] = []
        results: list[tuple[Submission, Result]] = []
        for s in batch:
            if s.row is not None and s.row.key not in failed:
                results.append((s, Stored(s.row.key, s.row.key in inserted)))
                inserted.discard(s.row.key)  # a second item of the key is an update
                continue
            if s.row is not None:
                reason = failed[s.row.key]
                assert s.on_refused is not None
                dead.append(s.on_refused(reason))
                results.append((s, DeadLettered(s.row.key, reason)))
            else:
                assert s.dead is not None
                dead.append(s.dead)
                results.append((s, DeadLettered(s.dead.doc.get("key"), s.reason)))
        if dead:
            try:
                _, n = self._retrying("dead letter", lambda: self.store.dead_letter(dead, self.wall()))
            except (_Abandoned, StoreBroken):
                raise
            except Exception as e:  # noqa: BLE001 - refused for good: items would be lost silently
                raise StoreBroken(
                    f"the dead letter {self.store.dead_collection!r} refused "
                    f"{len(dead)} record(s): {type(e).__name__}: {str(e)[:300]}"
                ) from e
            retries += n
        t1 = self.clock()
        n_ins = sum(1 for _, res_ in results if isinstance(res_, Stored) and res_.inserted)
        n_stored = sum(1 for _, res_ in results if isinstance(res_, Stored))
        report = BatchReport(
            items=len(batch),
            inserted=n_ins,
            updated=n_stored - n_ins,
            dead=len(dead),
            retries=retries,
            write_seconds=t1 - t0,
            max_item_latency=t1 - min(s.t for s in batch),
        )
        if self.on_batch is not None:
            # one hand-over per batch (one reactor wake-up, not one per item)
            self.on_batch(report, results)
            return
        if self.report:
            self.report(report)
        for s, outcome in results:
            try:
                if s.done is not None:
                    s.done(outcome)
            except Exception:  # noqa: BLE001
                logger.exception("store writer: completion callback failed")

    def _write_isolating(self, rows: list[Row]) -> WriteResult:
        """Write ``rows``; if the store rejects the batch as a whole (not an outage),
        write them one by one and report the rows it rejects as failed."""
        now = self.wall()
        try:
            return self.store.write(rows, now)
        except (StoreUnavailable, StoreBroken):
            raise
        except Exception as e:  # noqa: BLE001
            if len(rows) == 1:
                return WriteResult(failed={rows[0].key: f"store refused the item: {type(e).__name__}: {e}"[:1000]})
            logger.warning(
                "store refused a batch of %d (%s: %s); writing its rows one by one", len(rows), type(e).__name__, e
            )
        out = WriteResult()
        for r in rows:
            res = self._write_isolating([r])
            out.inserted += res.inserted
            out.updated += res.updated
            out.failed.update(res.failed)
            out.retry += res.retry
        return out
