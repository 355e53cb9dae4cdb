"""Fair leases among many workers: how many records one sync may lease.

Plain Python with an injectable clock; the store sync (:mod:`.sync`) asks it in the store
thread, after its writes and before its lease, so the records a worker has just written
(the children of its pages) count in the job it shares with the others.

The rule: with ``workers`` live workers, this worker's share is the job's outstanding
work (pending records, and leased ones, its own included) over the live workers,
rounded up; a sync leases at most what takes it to that share, or to ``floor`` (its
concurrency: a worker may always hold enough to fill its downloader). Alone, a worker
leases what it asks for (the batch, as without this rule). So a worker that writes a
few hundred children leases its share of them and leaves the rest to the others' next
syncs, instead of buffering every one of them while another worker gets nothing
(docs/distributed.md, "How work is shared").

Whoever holds less than its share can always lease, so some worker always can while
anything is pending: the rule never stalls a job, it only bounds what each buffers.

What it reads back from the store is untrusted: heartbeats that are not numbers, not
finite, or from the far future are skipped, a worker count past :data:`MAX_WORKERS`
and negative record counts are clamped, each with one warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from scrapy_scale.clock import Clock, wall
from scrapy_scale.shared_values import finite as as_finite

logger = logging.getLogger(__name__)

#: seconds between two reads of the workers' heartbeats
REFRESH = 1.0
#: at most this many live workers are believed (a larger count is clamped)
MAX_WORKERS = 1_000
#: a heartbeat holds at most this long past its beat (a worker writes ``until`` at most
#: 30 s after it, sync.HEARTBEAT_WINDOW), plus clock skew between machines
MAX_BEAT_HOLD = 30.0
#: clock skew between machines that is believed: a beat later than now + this is not
SKEW = 60.0


class FairShare:
    def __init__(self, worker: str = "", floor: int = 1, clock: Clock = wall):
        #: this worker's id (always counted live)
        self.worker = worker
        #: a sync may always lease up to this many held requests (the worker's concurrency)
        self.floor = max(1, floor)
        self.clock = clock
        #: live workers of the job at the last read (this one included)
        self.workers = 1
        self._read_at = -math.inf
        self._warned: set[str] = set()

    # ---- the live workers ----------------------------------------------------------------

    def read_due(self) -> bool:
        """Is it time to read the heartbeats again?"""
        return self.clock() - self._read_at >= REFRESH

    def count(self, beats: Mapping[str, tuple[Any, Any]]) -> int:
        """Count the live workers from the stored heartbeats (worker id -> (last beat,
        alive until), as read back); this worker is always one. Sets :attr:`workers`."""
        now = self._read_at = self.clock()
        live = {self.worker}
        for worker, beat in beats.items():
            at, until = (as_finite(x) for x in beat) if len(beat) == 2 else (None, None)
            if at is None or until is None:
                self._warn(
                    "bad", "frontier: worker %r has a heartbeat that is not two numbers (%r): skipped", worker, beat
                )
                continue
            if at > now + SKEW:
                self._warn(
                    "future", "frontier: worker %r has a heartbeat %.0f s in the future: skipped", worker, at - now
                )
                continue
            # an `until` far past its beat is clamped: a forged or corrupt one must not
            # keep a dead worker counted for ever
            if min(until, at + MAX_BEAT_HOLD + SKEW) >= now:
                live.add(str(worker))
        n = len(live)
        if n > MAX_WORKERS:
            self._warn("many", "frontier: %d live workers in the heartbeats; counting %d", n, MAX_WORKERS)
            n = MAX_WORKERS
        self.workers = n
        return n

    # ---- the lease -----------------------------------------------------------------------

    def cap(self, want: int, *, pending: int, leased: int, held: int) -> int:
        """How many of the ``want`` records a sync leases, with ``pending`` eligible and
        ``leased`` leased records in the job (as the store counts them, after this sync's
        writes) and ``held`` of them leased to this worker (buffered or in flight)."""
        if want <= 0 or self.workers <= 1:
            return want
        if pending < 0 or leased < 0:
            self._warn("counts", "frontier: the store counts %d pending, %d leased: read as 0", pending, leased)
        outstanding = max(0, pending) + max(0, leased, held)
        share = -(-outstanding // self.workers)
        return max(0, min(want, max(share, self.floor) - held))

    def _warn(self, kind: str, msg: str, *args: Any) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(msg, *args)
