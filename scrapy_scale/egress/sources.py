"""Where the pool's egresses come from, refreshed while the crawl runs.

- ``static``: the list (or groups) in ``SCALE_EGRESSES``, never refreshed;
- ``file``: re-read when its modification time or size changes (checked every
  ``SCALE_EGRESS_REFRESH`` seconds); a file that cannot be read or parsed keeps the
  last good set, with one log line per problem;
- ``provider``: ``fetch()`` called off the reactor (a thread) every refresh period; it
  returns what ``SCALE_EGRESSES`` takes as a list or dict. A provider that raises is
  retried with exponential backoff (1 s doubling up to the refresh period), logged at
  WARNING once per refresh period (the rest at DEBUG). One call at a time: a ``fetch()``
  that hangs is reported at WARNING once it has run ``SCALE_EGRESS_PROVIDER_TIMEOUT``
  seconds, and the crawl's start waits for the first call no longer than that (it starts
  with an empty pool, whose requests wait; the call's result is taken when it returns).
  A pool that is still empty ``GIVE_UP_AFTER`` timeouts after the first call started
  (with ``SCALE_EGRESS_EXHAUSTED = close``: one timeout) ends the crawl with an error
  (:meth:`Refresher.give_up`): no request can go out without an egress.

The :class:`Refresher` decides (plain Python, clock injected); the glue runs it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.egress.identity import Egress, EgressURLError, parse_egresses
from scrapy_scale.egress.settings import Source, read_egress_file
from scrapy_scale.redact import redact_text

#: an empty pool (its provider never gave an egress) ends the crawl this many
#: SCALE_EGRESS_PROVIDER_TIMEOUTs after the first provider call started
GIVE_UP_AFTER = 10


@dataclass
class Refresher:
    source: Source
    period: float
    clock: Callable[[], float]
    provider: Any = None
    next_at: float = 0.0
    failures: int = 0
    last_warned: float = field(default=-1e18)
    #: when the provider call in flight started (None: none is); no second call starts
    #: while one has not returned, so a fetch() that hangs never piles up threads
    calling: float | None = None
    #: a call in flight longer than this is reported (once per call)
    timeout: float = 30.0
    hung_warned: bool = False
    #: when the first provider call started (None: not yet)
    first_call: float | None = None
    #: the last provider failure, redacted (for the error when the crawl gives up)
    last_error: str = ""
    _stamp: tuple[float, int] | None = None

    def due(self) -> bool:
        return self.source.kind != "static" and self.clock() >= self.next_at

    def stamp(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.source.path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def read_file(self) -> list[Egress] | None:
        """The file's egresses if it changed since the last read, else None. Raises
        ValueError (redacted) when it changed and cannot be used."""
        self.next_at = self.clock() + self.period
        stamp = self.stamp()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        return read_egress_file(self.source.path)

    def fetch(self) -> list[Egress]:
        """Call the provider (run this in a thread); raises what it raises, or ValueError."""
        value = self.provider.fetch()
        try:
            egresses = parse_egresses(value)
        except EgressURLError as e:
            raise ValueError(f"the provider returned {e}") from None
        if not egresses:
            raise ValueError("the provider returned no egress")
        return egresses

    def start_call(self) -> None:
        self.calling, self.hung_warned = self.clock(), False
        if self.first_call is None:
            self.first_call = self.calling

    def give_up(self, pool_empty: bool, close: bool) -> str | None:
        """Why the crawl must end now for want of any egress, or None. Only a provider's
        pool is ever empty (it had no egress yet): after ``GIVE_UP_AFTER`` timeouts since
        the first call started, or one timeout with ``close`` (SCALE_EGRESS_EXHAUSTED)."""
        if self.source.kind != "provider" or not pool_empty or self.first_call is None:
            return None
        now = self.clock()
        waited = now - self.first_call
        bound = self.timeout * (1 if close else GIVE_UP_AFTER)
        if waited < bound:
            return None
        if self.calling is not None:
            cause = f"the provider's fetch() has not returned for {now - self.calling:.0f} s"
        elif self.last_error:
            cause = f"the provider's fetch() failed {self.failures} time(s) in a row, last: {self.last_error}"
        else:
            cause = "the provider gave no egress"
        rule = (
            "SCALE_EGRESS_EXHAUSTED = close"
            if close
            else f"{GIVE_UP_AFTER} x SCALE_EGRESS_PROVIDER_TIMEOUT ({self.timeout:g} s)"
        )
        return f"the egress pool has had no egress for {waited:.1f} s ({rule}): {cause}"

    def end_call(self) -> None:
        self.calling = None

    def hung(self) -> float | None:
        """Seconds the call in flight has run, the first time it is past ``timeout``; else None."""
        if self.calling is None or self.hung_warned:
            return None
        ran = self.clock() - self.calling
        if ran < self.timeout:
            return None
        self.hung_warned = True
        return ran

    def fetched(self) -> None:
        self.failures = 0
        self.next_at = self.clock() + self.period

    def failed(self, error: BaseException) -> tuple[bool, str]:
        """A provider call failed: schedule the retry; (warn now?, message)."""
        now = self.clock()
        self.failures += 1
        delay = min(self.period, 2.0 ** (self.failures - 1))
        self.next_at = now + delay
        warn = now - self.last_warned >= self.period
        if warn:
            self.last_warned = now
        msg = redact_text(f"{type(error).__name__}: {error}")
        self.last_error = msg[:200]
        return warn, f"egress provider failed ({self.failures} in a row, next try in {delay:.0f} s): {msg}"
