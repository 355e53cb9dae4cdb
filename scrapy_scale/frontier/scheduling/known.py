"""The fingerprints a worker knows its job's frontier holds, so a known link costs no store call.

A page's links repeat: the same menu, pager and related links on every page of a site.
Each one is a request the store answers "duplicate" (a record exists, in any state, or
the URL is done). This worker remembers the fingerprints the store answered for (added,
reopened, updated or duplicate) and those it leased; a plain request for one of them
(not a retry or redirect, not ``dont_filter``) is then counted as the duplicate the
store would have said, without encoding it or asking the store
(``scale/frontier/deduplicated`` and ``scale/frontier/deduplicated_in_worker``).

Within a run, records are only added and done ones are kept, so a fingerprint the store
had stays there: the answer cannot change, with two exceptions. A record dead-lettered
since (unreadable) is in the dead letters, where ``scrapy scale requeue`` finds it; and
a Redis that lost its last writes (a failover to a replica that had not caught up, a
restart from an older file) may have lost the record. After a store call that failed
the worker forgets everything it knew, so what it learns again comes from the store
as it is now. A run that changed under the worker stops it (``check_intact``).

Bounded (``SCALE_FRONTIER_KNOWN``, 0 = off): the oldest learned is forgotten first; one
forgotten costs one store answer, which teaches it again. Plain Python, no reactor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any

from scrapy_scale.frontier.store import EnqueueResult


class KnownFingerprints:
    def __init__(self, capacity: int):
        self.capacity = capacity
        #: insertion-ordered: the first key is the oldest learned
        self._fps: dict[str, None] = {}
        #: requests answered here, not by the store
        self.hits = 0

    def __len__(self) -> int:
        return len(self._fps)

    def __contains__(self, fp: str) -> bool:
        return fp in self._fps

    def answered(self, fp: str) -> bool:
        """True (and counted) when ``fp`` is known: the store would answer duplicate."""
        if fp in self._fps:
            self.hits += 1
            return True
        return False

    def learn(self, fps: Iterable[str]) -> None:
        if not self.capacity:
            return
        known = self._fps
        for fp in fps:
            if fp not in known:
                known[fp] = None
        over = len(known) - self.capacity
        if over > 0:
            for fp in list(islice(known, over)):
                del known[fp]

    def learn_written(self, ops: Sequence[tuple[str, Any]], results: Sequence[EnqueueResult]) -> None:
        """The store answered a write's enqueues (``ops`` in order, as sent): each
        fingerprint it answered for, except a refused one (stale), is in the store."""
        if not self.capacity:
            return
        enq = [nr for kind, nr in ops if kind == "enq"]
        self.learn(nr.fingerprint for nr, r in zip(enq, results, strict=False) if r is not EnqueueResult.STALE)

    def learn_leased(self, leased: Iterable[Any]) -> None:
        """Records leased to this worker (those that could be read) are in the store."""
        self.learn(lz.fingerprint for lz in leased if lz.error is None)

    def forget(self) -> None:
        """A store call failed: what the store holds may have changed (a failover)."""
        self._fps.clear()
