"""Which Retry-After pauses are worth an INFO line (plain Python, injectable clock)."""

from __future__ import annotations

from scrapy_scale import clock as clock_mod

#: seconds between two INFO lines about one site's Retry-After pauses
PAUSE_LOG_EVERY = 60.0


class PauseNotes:
    """Which Retry-After pauses are worth an INFO line: a site's first one, then at most one
    per :data:`PAUSE_LOG_EVERY` seconds, which tells how many went to DEBUG since the last.
    A site that answers 429 to a burst would otherwise fill the log with one line per answer."""

    def __init__(self, clock: clock_mod.Clock = clock_mod.wall, every: float = PAUSE_LOG_EVERY):
        self.clock = clock
        self.every = every
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def note(self, site: str) -> int | None:
        """None: log this pause at DEBUG only; else log it at INFO, saying how many pauses
        of the site went unlogged at INFO since the site's last INFO line (the returned int)."""
        now = self.clock()
        last = self._last.get(site)
        if last is not None and 0 <= now - last < self.every:
            self._quiet[site] = self._quiet.get(site, 0) + 1
            return None
        self._last[site] = now
        return self._quiet.pop(site, 0)
