"""What waits on its way to the lease buffer: plain Python, no I/O, no reactor.

The outbox (ordered writes for the next sync), the outbox a running sync took (its
enqueues still count as waiting), the best eligible priority a sync wrote but did not
lease (it holds the buffer back until leased, docs/frontier.md "Priorities"), and the
store's record counts as of the last sync.
"""

from __future__ import annotations

import time
from typing import Any

from scrapy_scale.frontier.scheduling.local import Outbox, holds_back, lease_wanted, max_opt

#: with a pacer, the buffer holds at most this many batches (requests it holds included)
HELD_CAP = 4


class Waiting:
    def __init__(self, outbox: Outbox):
        self.outbox = outbox
        #: the outbox a running sync took (None: no sync writes now)
        self.writing: Outbox | None = None
        #: an eligible priority written by a sync that leased nothing, above the buffer's best
        self.pending_top: int | None = None
        #: the job's records by state, as of the last sync
        self.remote: dict[str, int] = {"pending": 0, "delayed": 0, "leased": 0, "done": 0, "failed": 0}

    # ---- a sync's outbox -------------------------------------------------------------------

    def take(self) -> Outbox:
        """The outbox, for a sync to write (it counts as waiting until :meth:`written`)."""
        self.writing = self.outbox.take()
        return self.writing

    def written(self) -> Outbox | None:
        """The sync ended: what it wrote."""
        written, self.writing = self.writing, None
        return written

    def put_back(self) -> None:
        """The sync failed: its writes go back ahead of the newer ones."""
        if self.writing is not None:
            self.outbox.put_back(self.writing)
            self.writing = None

    def flushed(self, ops: Outbox) -> None:
        """``ops`` were written outside a sync (a flush): their best priority waits to be leased."""
        self.pending_top = max_opt(self.pending_top, ops.top)

    def carry(self, leased: bool, written: Outbox | None, buffer_top: int | None) -> None:
        """After a sync: one that ``leased`` got the store's best; one that did not may have
        written a priority above the buffer's best: the next sync leases it."""
        carried = None if leased else max_opt(self.pending_top, written.top if written else None)
        self.pending_top = carried if holds_back(carried, buffer_top) else None

    # ---- what waits ------------------------------------------------------------------------

    def _writing_enqueues(self) -> int:
        return self.writing.enqueues if self.writing is not None else 0

    def top(self) -> int | None:
        """The highest eligible priority written to the store by no lease of ours yet."""
        top = max_opt(self.outbox.top, self.pending_top)
        return max_opt(top, self.writing.top) if self.writing is not None else top

    def any_write(self) -> bool:
        """Ops in the outbox, or enqueues a sync is writing."""
        return bool(self.outbox) or bool(self._writing_enqueues())

    def in_store(self) -> bool:
        r = self.remote
        return bool(r["pending"] or r["delayed"] or r["leased"])

    def queued(self) -> int:
        """Requests waiting: enqueues in the outbox or being written, pending or delayed in the store."""
        return self.outbox.enqueues + self._writing_enqueues() + self.remote["pending"] + self.remote["delayed"]

    def for_this_worker(self) -> bool:
        """Anything this worker could lease at its next sync (being written, or eligible)?"""
        if self.outbox.enqueues or self.pending_top is not None or self._writing_enqueues():
            return True
        return bool(self.remote["pending"])

    def lease_want(
        self, ops: list[tuple[str, Any]], buffer_top: int | None, ready: int, buffered: int, batch: int
    ) -> int:
        """How many records the sync writing ``ops`` leases."""
        # enqueues that outrank the whole buffer: lease them now even with a full buffer
        wall = time.time()
        higher = sum(
            1
            for kind, nr in ops
            if kind == "enq" and nr.not_before <= wall and (buffer_top is None or nr.priority > buffer_top)
        )
        if holds_back(self.pending_top, buffer_top):
            higher = batch
        want = lease_wanted(ready, batch, higher)
        # requests held by the pacer do not count, but the buffer stays bounded, except for
        # the ones that outrank it all: the engine waits for them (next_request holds back),
        # so a buffer the pacer filled must not keep them out
        return max(0, min(want, HELD_CAP * batch - buffered), min(batch, higher))
