"""The throttle's wake timer: one reactor timer that wakes the engine at the earliest
time any part of the throttle asked for (a site due again, a pause's end, a grant)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any


class WakeTimer:
    """Wakes the engine (``wake``) at the earliest time asked; later asks are no-ops until
    it fires."""

    def __init__(self, wake: Callable[[], object]):
        self.wake = wake
        self._timer: Any = None
        #: when the timer fires (inf: not set)
        self.due = math.inf

    def at(self, t: float) -> None:
        if not math.isfinite(t) or t >= self.due - 0.001:
            return
        from twisted.internet import reactor

        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self.due = t
        self._timer = reactor.callLater(max(0.0, t - time.time()), self._fire)  # type: ignore[arg-type]

    def _fire(self) -> None:
        self._timer, self.due = None, math.inf
        self.wake()

    def cancel(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer, self.due = None, math.inf
