"""Grants of the shared limiter waiting to be used: when one may still be sent on.

Plain Python with an injectable (monotonic) clock. A grant of the shared limiter
(:mod:`scrapy_scale.throttle.shared`) is this worker's turn for a site, timed in the thread
that got it. Used late, it would crowd the next worker's turn, so a grant is good for
:data:`PERMIT_TTL` seconds (half the site's spacing at most), after which the worker asks
the limiter again. But the answer reaches the reactor, and the engine pass that answer wakes
asks for the site, some time after the grant: with a spacing of a fraction of a millisecond
(a site paced by its routes learns its own delay down to almost nothing) or a loaded
machine, every grant was already stale at that pass, so the worker asked again, forever,
and handed nothing out. So the first ask after the answer arrived (within
:data:`WAKE_GRACE` of it) may always use the grant: that is the pass the answer woke.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from scrapy_scale.clock import Clock

#: a grant unused for this long is dropped (it would be sent late), at most half the spacing
PERMIT_TTL = 0.03
#: the first ask after a grant reached the reactor may use it if it comes this soon after
#: (the engine pass the grant woke, however loaded the reactor is)
WAKE_GRACE = 0.25


@dataclass
class _Grant:
    granted: float  # when the limiter granted it (the thread's clock)
    arrived: float  # when the answer reached the reactor
    asked: bool = False  # whether a pass asked since it arrived


class Permits:
    """site key -> the grant it may send on (monotonic seconds)."""

    def __init__(self, clock: Clock = time.monotonic):
        self.clock = clock
        self._grants: dict[str, _Grant] = {}
        #: grants used at the first ask after they arrived although older than their TTL
        self.late_used = 0

    def __contains__(self, key: str) -> bool:
        return key in self._grants

    def granted(self, key: str, granted_at: float) -> None:
        """The limiter granted ``key`` a turn at ``granted_at``; its answer arrives now."""
        self._grants[key] = _Grant(granted_at, self.clock())

    def usable(self, key: str, interval: float) -> bool | None:
        """True: a request to ``key`` may go now on its grant; False: its grant was stale
        (dropped: ask the limiter again); None: there is no grant."""
        g = self._grants.get(key)
        if g is None:
            return None
        now = self.clock()
        first, g.asked = not g.asked, True
        if now - g.granted <= min(PERMIT_TTL, interval / 2):
            return True
        if first and now - g.arrived <= WAKE_GRACE:
            self.late_used += 1
            return True
        del self._grants[key]  # unused too long: sending it now could crowd the next worker
        return False

    def used(self, key: str) -> None:
        """A request to ``key`` was handed out (or its site paused): the grant is spent."""
        self._grants.pop(key, None)
