"""How one job's Redis frontier is split into partitions, in plain Python.

A job's frontier is S partitions, by site: a request's partition is a stable hash of its
domain (the frontier's fairness unit, ``NewRequest.domain``), so a URL's dedup, its site's
queue and its records live in one partition. Each partition has its own hash tag, so on a
Redis Cluster the partitions spread over the slots (and the shards), while every key one
Lua script touches stays in one slot:

- partition 0 is ``scale:{JOB}``: today's key names exactly; the run-level keys (the run
  record, its history, the workers, the heartbeats, the seed feed) live there only;
- partition i > 0 is ``scale:{JOB/pi}`` (``/`` is never in a job name, so no job's keys
  are another's partition), holding the records of its sites and a copy of the run id.

S is fixed for a job's life: the first start stores it in the run record
(``scale:{JOB}:run`` field ``parts``); a job started before partitions existed has no such
field and is S = 1. Nothing here talks to Redis.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")

#: the most partitions a job may have (a stored value beyond it is refused as hostile)
MAX_PARTITIONS = 1024
#: partitions per Cluster primary when SCALE_FRONTIER_PARTITIONS is not set: several per
#: shard, so that a job's sites spread evenly and a reshard can move a part of a job
PER_PRIMARY = 4
#: the field of the run record (``scale:{JOB}:run``) that keeps S
FIELD = "parts"


def key_of(job: str, i: int) -> str:
    """The key prefix (with its hash tag) of partition ``i`` of ``job``."""
    return f"scale:{{{job}}}" if i == 0 else f"scale:{{{job}/p{i}}}"


def partition_of(domain: str, parts: int) -> int:
    """The partition of a site: CRC-32 of its domain, stable across processes and versions."""
    if parts <= 1:
        return 0
    return zlib.crc32(domain.encode("utf-8", "surrogatepass")) % parts


def default_parts(primaries: int | None) -> int:
    """S when the setting is not given: 1 on a single node, PER_PRIMARY per Cluster primary."""
    if not primaries:
        return 1
    return max(1, min(MAX_PARTITIONS, PER_PRIMARY * primaries))


def stored_parts(raw: object) -> int:
    """The S a run record holds, checked (raises ValueError with why: the value is not a
    whole number from 1 to MAX_PARTITIONS)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"{raw[:20]!r} is not a whole number") from None
    text = str(raw).strip()
    if not text.isdigit() or len(text) > 5:
        raise ValueError(f"{text[:20]!r} is not a whole number from 1 to {MAX_PARTITIONS}")
    n = int(text)
    if not 1 <= n <= MAX_PARTITIONS:
        raise ValueError(f"{n} is not from 1 to {MAX_PARTITIONS}")
    return n


def group(items: Sequence[T], part: Callable[[T], int]) -> dict[int, list[int]]:
    """The indexes of ``items`` by partition, each list in the items' order."""
    out: dict[int, list[int]] = {}
    for n, item in enumerate(items):
        out.setdefault(part(item), []).append(n)
    return out


class LeasePlan:
    """Which partitions a lease call asks, and for how many, so that every partition is
    served and no worker is pinned to one.

    Each call starts one partition after the first that gave records in the last call (a
    worker's calls go round the partitions) and splits the batch: a partition is first asked for its even share of
    what is still wanted; what the others could not give is then split, the same way, among
    the partitions that filled their share (and so on while some are short). A hot partition so gets its share of
    every batch, never all of it while others wait, and an empty one costs one short call
    (a batch smaller than the partitions asks the first few of this call's order).
    """

    def __init__(self, parts: int, start: int = 0) -> None:
        self.parts = parts
        self.next_start = start % max(1, parts)

    def order(self) -> list[int]:
        """The partitions of the next call, in the order they are asked."""
        s = self.parts
        return [(self.next_start + j) % s for j in range(s)]

    def run(self, n: int, ask: Callable[[int, int], int]) -> None:
        """Lease ``n``: ``ask(partition, want)`` leases up to ``want`` there and returns how
        many it got. The next call starts after the first partition that gave any (an empty
        partition does not make the one after it serve twice in a row)."""
        order = self.order()
        self.next_start = (order[0] + 1) % self.parts
        first = True
        left = n
        while order and left > 0:
            # the next round asks the partitions that filled their share (they may have
            # more) and those this one did not ask (a batch smaller than the partitions)
            again: list[int] = []
            share, extra = divmod(left, len(order))
            for j, i in enumerate(order):
                want = share + (j < extra)
                if want <= 0 or left <= 0:
                    again.append(i)
                    continue
                got = ask(i, want)
                left -= got
                if got and first:
                    self.next_start, first = (i + 1) % self.parts, False
                if got >= want:
                    again.append(i)
            order = again


class _Row(Protocol):
    @property
    def priority(self) -> int: ...
    @property
    def domain(self) -> str: ...
    @property
    def error(self) -> str | None: ...


R = TypeVar("R", bound=_Row)


def merge(batches: list[list[R]]) -> list[R]:
    """One lease batch from the partitions' batches, ordered as one partition orders its
    own: the highest priority first, and within a priority the sites in turn (every site's
    first record, then every site's second...), the partitions taken in turn; records that
    could not be read (``error``) last."""
    rows: list[R] = []
    for k in range(max((len(b) for b in batches), default=0)):
        rows += [b[k] for b in batches if k < len(b) and not b[k].error]
    seen: dict[tuple[int, str], int] = {}
    rank: list[int] = []
    for x in rows:
        key = (x.priority, x.domain)
        rank.append(seen.get(key, 0))
        seen[key] = rank[-1] + 1
    order = sorted(range(len(rows)), key=lambda i: (-rows[i].priority, rank[i], i))
    return [rows[i] for i in order] + [x for b in batches for x in b if x.error]
