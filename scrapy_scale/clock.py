"""Injectable time and randomness for policy code (tests pass fakes)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]

#: wall clock, epoch seconds (used for persisted times such as next-eligible)
wall: Clock = time.time


@dataclass
class FakeClock:
    """A clock that only moves when told to."""

    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Randomness:
    """Seedable randomness; pass ``Randomness(seed)`` in tests."""

    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def uniform(self, a: float, b: float) -> float:
        return self._rng.uniform(a, b)

    def random(self) -> float:
        return self._rng.random()
