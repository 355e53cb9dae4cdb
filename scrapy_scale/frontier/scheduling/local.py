"""What one worker holds in memory between syncs: plain Python, no I/O, no reactor.

- :class:`LocalQueue`: requests ready for the engine -- leased records and
  memory-only requests -- served by priority, FIFO within one priority (the
  order the store leased them in, which is round-robin across domains).
- :class:`Outbox`: the ordered writes waiting for the next sync, with what the
  scheduler needs to know about the enqueues among them: how many (they count
  in ``len(scheduler)``) and the highest priority eligible now (a late request
  of higher priority than everything buffered holds the buffer back until a
  sync has written and leased it; see docs/frontier.md, "Priorities").
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LocalQueue(Generic[T]):
    """Entries served highest priority first, FIFO within one priority."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, T]] = []
        self._seq = itertools.count()

    def push(self, priority: int, entry: T) -> None:
        heapq.heappush(self._heap, (-priority, next(self._seq), entry))

    def pop(self) -> T:
        return heapq.heappop(self._heap)[2]

    def take_first(self, judge: Callable[[T], str]) -> T | None:
        """Remove and return the first entry in serving order that ``judge`` calls
        ``"take"`` (None: none). Entries judged ``"keep"`` stay in their place, those
        judged ``"drop"`` are removed (the judge has dealt with them)."""
        kept = []
        found = None
        while self._heap:
            item = heapq.heappop(self._heap)
            verdict = judge(item[2])
            if verdict == "take":
                found = item[2]
                break
            if verdict == "keep":
                kept.append(item)
        for item in kept:
            heapq.heappush(self._heap, item)
        return found

    def any(self, pred: Callable[[T], bool]) -> bool:
        """Does any entry satisfy ``pred`` (in no particular order)?"""
        return any(pred(e) for _, _, e in self._heap)

    def top_priority(self) -> int | None:
        return -self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[T]:
        """In serving order."""
        return (e for _, _, e in sorted(self._heap, key=lambda x: (x[0], x[1])))


@dataclass
class Outbox:
    """Writes in order: ``(kind, payload)`` ops; ``enq`` ops counted apart."""

    ops: list[tuple[str, Any]] = field(default_factory=list)
    #: enqueue ops among ``ops``
    enqueues: int = 0
    #: highest priority among enqueues eligible now (None: none)
    top: int | None = None

    def append(self, op: tuple[str, Any], priority: int | None = None) -> None:
        """Add one op; an enqueue passes its ``priority`` when it is eligible now."""
        self.ops.append(op)
        if op[0] == "enq":
            self.enqueues += 1
            if priority is not None and (self.top is None or priority > self.top):
                self.top = priority

    def take(self) -> Outbox:
        """Everything, emptying this one."""
        taken = Outbox(self.ops, self.enqueues, self.top)
        self.ops, self.enqueues, self.top = [], 0, None
        return taken

    def put_back(self, older: Outbox) -> None:
        """``older`` (a sync's ops that failed) goes back ahead of the newer ops."""
        self.ops = older.ops + self.ops
        self.enqueues += older.enqueues
        self.top = max_opt(self.top, older.top)

    def __len__(self) -> int:
        return len(self.ops)


def max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def holds_back(waiting_top: int | None, buffered_top: int | None) -> bool:
    """Should the engine wait for a sync rather than take the best buffered request?

    Yes when a request not yet leased (written by no sync yet) has a higher priority
    than everything buffered: handing out the buffer first would serve lower
    priorities ahead of it. Ties do not wait (FIFO within a priority)."""
    return waiting_top is not None and (buffered_top is None or waiting_top > buffered_top)


def lease_wanted(buffered: int, batch: int, higher_waiting: int) -> int:
    """How many records the next sync leases: refill to ``batch`` once the buffer
    is down to half, and always enough for the ``higher_waiting`` enqueues that
    outrank the buffer (the buffer may then exceed ``batch`` by that many)."""
    refill = batch - buffered if buffered <= batch // 2 else 0
    return max(refill, min(batch, higher_waiting))
