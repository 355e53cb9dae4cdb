"""The order in which the backends hand out records, shared by them (plain Python, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def fair_shares(available: Sequence[int], n: int) -> list[int]:
    """How many to take from each queue so that ``n`` are taken round-robin:
    one from each queue in turn (in the given order) until ``n`` are taken or
    every queue is empty. ``fair_shares([5, 1, 5], 6) == [3, 1, 2]``."""
    take = [0] * len(available)
    left = n
    while left > 0:
        progressed = False
        for i, avail in enumerate(available):
            if left <= 0:
                break
            if take[i] < avail:
                take[i] += 1
                left -= 1
                progressed = True
        if not progressed:
            break
    return take


def interleave(groups: Sequence[Sequence[T]]) -> list[T]:
    """Round-robin merge: first of each group, then second of each, ..."""
    out: list[T] = []
    longest = max((len(g) for g in groups), default=0)
    for i in range(longest):
        for g in groups:
            if i < len(g):
                out.append(g[i])
    return out
