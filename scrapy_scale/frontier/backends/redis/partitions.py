"""How one job's Redis frontier is split into partitions, in plain Python.

A job's frontier is S partitions, by site: a request's partition is a stable hash of its
domain (the frontier's fairness unit, ``NewRequest.domain``), so a URL's dedup, its site's
queue and its records live in one partition. Each partition has its own hash tag, so on a
Redis Cluster the partitions spread over the slots (and the shards), while every key one
Lua script touches stays in one slot:

- partition 0 is ``scale:{JOB}``: today's key names exactly; the run-level keys (the run
  record, its history, the workers, the heartbeats, the seed feed) live there only;
- partition i > 0 is ``scale:{JOB/pi.N}`` (``/`` is never in a job name, so no job's keys
  are another's partition), holding the records of its sites and a copy of the run id.
  ``N`` is the least number whose tag's slot (CRC16 of the tag, as Redis Cluster hashes
  it) falls in window ``(w0 + i) % S`` of the S equal windows of the slot space, ``w0``
  being partition 0's window: every window holds one partition, so on a Cluster whose
  slots are split evenly (``redis-cli --cluster create`` does) and S a multiple of the
  primaries, each primary holds S / primaries partitions. The first partitioned jobs
  named partition i ``scale:{JOB/pi}`` (a slot at random: 12 partitions were 4/4/4 on 3
  primaries for 8% of job names, 3/4/5 or worse for the rest); such a job keeps those names
  for its life.

S and the naming are fixed for a job's life: the first start stores them in the run record
(``scale:{JOB}:run`` field ``parts``: ``12/slot``; ``12`` alone is a job of the first
naming, ``1`` a job of one partition, whose only tag is ``{JOB}`` either way); a job started
before partitions existed has no such field and is S = 1. Nothing here talks to Redis.
"""

from __future__ import annotations

import binascii
import functools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")

#: the most partitions a job may have (a stored value beyond it is refused as hostile)
MAX_PARTITIONS = 1024
#: partitions per Cluster primary when SCALE_FRONTIER_PARTITIONS is not set: several per
#: shard, so that a job's sites spread evenly and a reshard can move a part of a job
PER_PRIMARY = 4
#: the field of the run record (``scale:{JOB}:run``) that keeps S and the naming
FIELD = "parts"
#: the naming of a job's partitions that the run record stores after the count (``12/slot``):
#: hash tags chosen by slot; a count alone is the first naming, ``{JOB/pi}``
BY_SLOT = "slot"
#: Redis Cluster's hash slots
SLOTS = 16384
#: the most tag numbers tried for one partition (a window of 16 slots, S = 1024, takes
#: about 1,024 tries on average)
SEARCH = 1 << 20


def slot_of(tag: str) -> int:
    """The Redis Cluster slot of a hash tag: CRC16 (XMODEM) of its bytes, modulo 16384."""
    return binascii.crc_hqx(tag.encode("utf-8", "surrogatepass"), 0) % SLOTS


def window_start(k: int, parts: int) -> int:
    """The first slot of window ``k`` of ``parts`` equal windows of the slot space (k * 16384
    / parts, rounded half up as ``redis-cli --cluster create`` rounds a primary's first slot)."""
    return (2 * k * SLOTS + parts) // (2 * parts)


def window_of(slot: int, parts: int) -> int:
    """The window (of ``parts``) that holds ``slot``."""
    k = slot * parts // SLOTS
    while k + 1 < parts and window_start(k + 1, parts) <= slot:
        k += 1
    while k > 0 and window_start(k, parts) > slot:
        k -= 1
    return k


def tag_of(job: str, i: int, parts: int, by_slot: bool = True) -> str:
    """The hash tag of partition ``i`` of ``parts``: the job's name for partition 0, else
    ``JOB/pi.N`` with the least N whose slot is in window ``(w0 + i) % parts`` (``w0``:
    partition 0's window), or ``JOB/pi`` in the first naming (``by_slot`` False)."""
    if i == 0:
        return job
    if not by_slot:
        return f"{job}/p{i}"
    k = (window_of(slot_of(job), parts) + i) % parts
    lo, hi = window_start(k, parts), window_start(k + 1, parts)
    prefix = f"{job}/p{i}."
    crc = binascii.crc_hqx(prefix.encode("utf-8", "surrogatepass"), 0)
    for n in range(SEARCH):
        if lo <= binascii.crc_hqx(str(n).encode(), crc) % SLOTS < hi:
            return f"{prefix}{n}"
    raise ValueError(f"no tag of partition {i} of {parts} falls in slots {lo}..{hi - 1}")  # pragma: no cover


@functools.lru_cache(maxsize=64)
def keys_of(job: str, parts: int, by_slot: bool = True) -> tuple[str, ...]:
    """The key prefix (with its hash tag) of each partition of ``job``, partition 0 first."""
    return tuple(f"scale:{{{tag_of(job, i, parts, by_slot)}}}" for i in range(parts))


def key_of(job: str, i: int, parts: int, by_slot: bool = True) -> str:
    """The key prefix (with its hash tag) of partition ``i`` of ``job``."""
    return keys_of(job, parts, by_slot)[i]


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


@dataclass(frozen=True)
class Layout:
    """A job's partitions: their count and naming (hash tags chosen by slot, or the first
    naming, ``{JOB/pi}``, that the first partitioned jobs keep)."""

    parts: int = 1
    by_slot: bool = True

    def stored(self) -> str:
        """What the run record's ``parts`` field holds for it."""
        return f"{self.parts}/{BY_SLOT}" if self.by_slot and self.parts > 1 else str(self.parts)

    def keys(self, job: str) -> list[str]:
        """The key prefix of each partition, partition 0 first."""
        return list(keys_of(job, self.parts, self.by_slot))


def stored_layout(raw: object) -> Layout:
    """The layout a run record's ``parts`` field holds, checked: ``S`` (the first naming) or
    ``S/slot``; raises ValueError with why (no whole number from 1 to MAX_PARTITIONS, or a
    naming this version does not know)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"{raw[:20]!r} is not a whole number") from None
    count, sep, naming = str(raw).strip().partition("/")
    if not (count.isascii() and count.isdigit()) or len(count) > 5:
        raise ValueError(f"{count[:20]!r} is not a whole number from 1 to {MAX_PARTITIONS}")
    n = int(count)
    if not 1 <= n <= MAX_PARTITIONS:
        raise ValueError(f"{n} is not from 1 to {MAX_PARTITIONS}")
    if sep and naming != BY_SLOT:
        raise ValueError(f"{naming[:20]!r} after the count is no naming this version knows ({BY_SLOT!r})")
    return Layout(n, bool(sep))


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
        many it got (:meth:`run_batched`, one partition at a time)."""
        self.run_batched(n, lambda asks: [ask(i, want) for i, want in asks])

    def run_batched(self, n: int, ask_all: Callable[[list[tuple[int, int]]], list[int]]) -> None:
        """Lease ``n``: ``ask_all([(partition, want), ...])`` leases up to each ``want``
        at each partition (at once: one pipeline) and returns how many each gave. A round's
        asks are known before any answers (each partition's share of what is left), so
        they go together; a partition short of its share sends what it lacks to the next
        round. The next call starts after the first partition that gave any (an empty
        partition does not make the one after it serve twice in a row)."""
        order = self.order()
        self.next_start = (order[0] + 1) % self.parts
        first = True
        left = n
        while order and left > 0:
            share, extra = divmod(left, len(order))
            wants = [share + (j < extra) for j in range(len(order))]
            asks = [(i, w) for i, w in zip(order, wants, strict=True) if w > 0]
            gots = dict(zip((i for i, _ in asks), ask_all(asks), strict=True))
            # the next round asks the partitions that filled their share (they may have
            # more) and those this one did not ask (a batch smaller than the partitions)
            again: list[int] = []
            for i, want in zip(order, wants, strict=True):
                got = gots.get(i, 0)
                left -= got
                if got and first:
                    self.next_start, first = (i + 1) % self.parts, False
                if want <= 0 or got >= want:
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
