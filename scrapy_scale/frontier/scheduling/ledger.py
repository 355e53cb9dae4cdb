"""The in-flight ledger: requests handed to the engine and how each one settles.

A request is acked when its final outcome (the ``scrapy_scale.signals.outcome`` signal)
is done-class and ``outcome.items`` item signals (item_scraped/dropped/error) were seen
for it; a terminal failure is recorded with its class and reason. Without the outcome
middlewares (plain Scrapy), a request is acked when the engine has finished with it (its
response went through the callback and the item pipelines). The ack/fail goes into the
ordered outbox only once the engine lets go of the request, so it always comes after
the children the callback yielded (see docs/architecture.md, "The ack contract").

Plain Python: the engine's in-progress set and the outcome package's fallback are
callables given at construction; the ledger writes only to the outbox and the stats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request

from scrapy_scale import meta_keys
from scrapy_scale import stats_keys as keys
from scrapy_scale.errors import ItemDeadLettered, ItemNotStored
from scrapy_scale.frontier.scheduling.local import Outbox
from scrapy_scale.frontier.scheduling.stats import FrontierStats
from scrapy_scale.redact import redact_text

if TYPE_CHECKING:
    from scrapy_scale.outcomes.model import Outcome

logger = logging.getLogger(__name__)

#: seconds after the engine finished a request with no final outcome before the
#: ledger sends the fallback outcome itself (signal mode; a missing one must not hang a job)
OUTCOME_GRACE = 10.0

#: seconds past DOWNLOAD_TIMEOUT after which a request still in flight is named (warn_overdue)
OVERDUE_SLACK = 60.0

#: the requests the engine holds now (None: unknown, e.g. no engine)
InProgress = Callable[[], "set[Any] | None"]
#: send the fallback outcome of (request, responded, items seen)
Fallback = Callable[[Request, bool, int], None]


@dataclass
class InFlight:
    token: int
    url: str
    attempts: int
    request: Request | None = None
    items_expected: int | None = None
    items_seen: int = 0
    responded: bool = False
    #: monotonic time the engine was first seen done with the request
    left_at: float | None = None
    #: the ack/fail to write once the engine lets go of the request (see settle)
    settled: tuple[str, Any] | None = None
    #: an item of it could not be stored (ItemNotStored): never ack; released at close
    unstored: bool = False
    #: why an item of it went to the dead letter (ItemDeadLettered): failed, not acked
    item_failure: str | None = None
    #: monotonic time it was handed to the engine (None: not known)
    handed_at: float | None = None
    #: already reported as overdue (see InFlightLedger.overdue)
    overdue: bool = False


class InFlightLedger:
    """fingerprint -> :class:`InFlight`, for the requests this worker handed out."""

    def __init__(self, outbox: Outbox, stats: FrontierStats, in_progress: InProgress, fallback: Fallback):
        self.outbox = outbox
        self.stats = stats
        self.in_progress = in_progress
        self.fallback = fallback
        #: ack by outcomes (the outcome middlewares are on), else when the engine is done
        self.signal_mode = False
        self._entries: dict[str, InFlight] = {}

    # ---- the table -------------------------------------------------------------------

    def add(self, fp: str, entry: InFlight) -> None:
        self._entries[fp] = entry

    def pop(self, fp: str) -> InFlight | None:
        return self._entries.pop(fp, None)

    def warn_overdue(self, now: float, download_timeout: float) -> int:
        """Name (one WARNING each, once) the entries handed to the engine more than
        ``download_timeout`` + OVERDUE_SLACK seconds before ``now`` (monotonic) and not
        settled: their leases are renewed while the engine holds them, so a download or a
        callback that never ends would keep the crawl open with nothing said. Returns how
        many were named."""
        after = max(0.0, download_timeout) + OVERDUE_SLACK
        late = [
            e
            for e in self._entries.values()
            if not e.overdue and e.settled is None and e.handed_at is not None and now - e.handed_at > after
        ]
        for e in late:
            e.overdue = True
            self.stats.inc(keys.FRONTIER_OVERDUE)
            logger.warning(
                "frontier: %s was handed to the engine %.0f s ago and is not finished (longer than "
                "DOWNLOAD_TIMEOUT + %g s): a download or a callback that never ends holds its lease "
                "and keeps the crawl open",
                redact_text(e.url),
                now - (e.handed_at or now),
                OVERDUE_SLACK,
            )
        return len(late)

    def url_of(self, fp: str) -> str | None:
        entry = self._entries.get(fp)
        return entry.url if entry is not None else None

    def clear(self) -> None:
        self._entries.clear()

    def __contains__(self, fp: object) -> bool:
        return fp in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    # ---- signal handlers ---------------------------------------------------------------

    def on_outcome(self, outcome: Outcome, request: Request | None = None, spider: Any = None, **kw: Any) -> None:
        if not outcome.final:
            return
        entry = self._entries.get(outcome.fingerprint)
        if entry is None:
            return
        if outcome.done:
            entry.items_expected = outcome.items
            self._maybe_ack(outcome.fingerprint, entry)
        else:
            self.settle(
                outcome.fingerprint,
                entry,
                ("fail", (outcome.fingerprint, entry.token, str(outcome.cls), outcome.reason)),
            )

    def on_item(self, item: Any = None, response: Any = None, spider: Any = None, **kw: Any) -> None:
        req = getattr(response, "request", None)
        fp = req.meta.get(meta_keys.FINGERPRINT) if req is not None else None
        entry = self._entries.get(fp) if fp else None
        if entry is not None:
            failure = kw.get("failure")
            error = getattr(failure, "value", None) if failure is not None else kw.get("exception")
            if isinstance(error, ItemNotStored):
                entry.unstored = True  # kept leased, released at close: fetched again on resume
                return
            if isinstance(error, ItemDeadLettered) and entry.item_failure is None:
                entry.item_failure = f"{error.label}: {error.reason or error}"[:500]
            entry.items_seen += 1
            self._maybe_ack(fp, entry)  # type: ignore[arg-type]

    def on_response(self, response: Any = None, request: Request | None = None, **kw: Any) -> None:
        fp = request.meta.get(meta_keys.FINGERPRINT) if request is not None else None
        entry = self._entries.get(fp) if fp else None
        if entry is not None:
            entry.responded = True

    # ---- settling ------------------------------------------------------------------------

    def _maybe_ack(self, fp: str, entry: InFlight) -> None:
        if entry.items_expected is not None and entry.items_seen >= entry.items_expected:
            self.settle(fp, entry, done_op(fp, entry))

    # The ack contract (docs/architecture.md): Scrapy's scraper drains a callback's output
    # into a queue and enqueues the requests in it afterwards, so the final outcome (sent
    # when the output iterator ends) can come BEFORE the children reach enqueue_request.
    # Acking then put the parent's ack ahead of its children in the outbox, and a kill -9
    # between two syncs lost the children for good (seen in tests/crawl/test_frontier_crash.py).
    # The engine holds the request in its in-progress set until the scraper has processed
    # all of that output, so the ack/fail waits for that.
    def settle(self, fp: str, entry: InFlight, op: tuple[str, Any]) -> None:
        """Write ``op`` (the ack or fail of ``fp``) now, or once the engine lets go of it."""
        if entry.unstored and op[0] == "ack":
            return
        if self._engine_holds(entry.request):
            entry.settled = op  # written by settle_finished on a later tick
            return
        del self._entries[fp]
        self.outbox.append(op)

    def _engine_holds(self, request: Request | None) -> bool:
        inprogress = self.in_progress()
        return bool(request is not None and inprogress is not None and request in inprogress)

    def settle_finished(self, closing: bool = False) -> None:
        """A request the engine is done with but no final outcome covered (every request
        without the outcome middlewares; after OUTCOME_GRACE with them) gets the outcome
        package's documented fallback outcome, sent on the bus like any other: this
        ledger then acks or fails it in ``on_outcome``, and every subscriber sees it.
        The frontier never decides a class of its own.

        ``closing`` (a clean stop, or the reactor stopping): write every settled
        ack/fail the engine let go of (they used to wait for the next tick and
        were released at close instead, so the resumed crawl fetched them again),
        and ack what plain Scrapy finished with a response; the rest stays held
        and is released (fetched again on resume)."""
        found = self.in_progress()
        if found is None and not closing:
            return
        inprogress: set[Any] = found if found is not None else set()
        now = time.monotonic()
        for fp, entry in list(self._entries.items()):
            if entry.request is None or entry.request in inprogress or entry.unstored:
                continue
            if entry.settled is not None:
                self.settle(fp, entry, entry.settled)
                continue
            if closing and (self.signal_mode or not entry.responded):
                continue
            if entry.left_at is None:
                entry.left_at = now
            if self.signal_mode and now - entry.left_at < OUTCOME_GRACE:
                continue
            if self.signal_mode:
                self.stats.inc(keys.FRONTIER_ACKED_WITHOUT_OUTCOME)
            self.fallback(entry.request, entry.responded, entry.items_seen)
            if self._entries.get(fp) is entry:  # no receiver settled it
                del self._entries[fp]
                self.outbox.append(
                    ("ack", (fp, entry.token))
                    if entry.responded
                    else ("fail", (fp, entry.token, "fatal", "no response"))
                )


def done_op(fp: str, entry: InFlight) -> tuple[str, Any]:
    """The ack of a request the engine is done with; a fail when one of its items
    went to the dead letter (its output is not all stored)."""
    if entry.item_failure is not None:
        return ("fail", (fp, entry.token, "parse_failed", entry.item_failure))
    return ("ack", (fp, entry.token))
