"""Failing store syncs (disk full, I/O errors): when to try again, what to log, when to
give up. Plain Python; the store sync (:mod:`.sync`) asks it."""

from __future__ import annotations


class SyncTrouble:
    """What to do about failing syncs (disk full, I/O errors): back off, log at a bounded
    rate, give up past a deadline. Plain Python; ``now`` is any monotonic clock.

    After the n-th failure in a row the next sync waits ``min(cap, base * 2**(n-1))``
    seconds. The first failure is logged at once, then at most one line per
    ``log_every`` seconds, with how many failures it covers. Once failing for longer
    than ``deadline`` seconds (0: never), :meth:`failed` says give up."""

    def __init__(self, deadline: float, log_every: float = 30.0, base: float = 0.25, cap: float = 5.0):
        self.deadline, self.log_every, self.base, self.cap = deadline, log_every, base, cap
        self.since: float | None = None
        self.failures = 0
        self._unlogged = 0
        self._logged_at = 0.0
        self.retry_at = 0.0

    def may_sync(self, now: float) -> bool:
        return now >= self.retry_at

    def failed(self, now: float, error: str) -> tuple[str | None, bool]:
        """Record a failure: (the line to log now or None, give up?)."""
        if self.since is None:
            self.since = now
        self.failures += 1
        self._unlogged += 1
        self.retry_at = now + min(self.cap, self.base * 2 ** min(self.failures - 1, 30))
        failing = now - self.since
        if self.deadline and failing > self.deadline:
            return (
                f"frontier writes failing for {failing:.0f} s ({self.failures} attempts), past the "
                f"deadline of {self.deadline:g} s: {error}",
                True,
            )
        if self.failures == 1:
            line = f"frontier sync failed (will retry with backoff): {error}"
        elif now - self._logged_at < self.log_every:
            return None, False
        else:
            limit = f" (gives up after {self.deadline:g} s)" if self.deadline else ""
            line = (
                f"frontier sync still failing: {self._unlogged} failures in the last "
                f"{now - self._logged_at:.0f} s, failing for {failing:.0f} s{limit}: {error}"
            )
        self._logged_at = now
        self._unlogged = 0
        return line, False

    def succeeded(self, now: float) -> str | None:
        """Record a sync that worked: the recovery line to log, if it had been failing."""
        if self.since is None:
            return None
        line = f"frontier sync works again after {self.failures} failures over {now - self.since:.0f} s"
        self.since, self.failures, self._unlogged, self.retry_at = None, 0, 0, 0.0
        return line
