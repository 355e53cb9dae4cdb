"""The scheduler's side of per-site pacing: which buffered request may be handed out now.

A *pacer* (the throttle, ``ScaleContext.of(crawler).pacer``, typed by
:class:`scrapy_scale.context.Pacer`) answers, per
domain, whether a request to it may go now and, if not, when. The scheduler hands out
the first buffered request (in priority order) whose domain is due and leaves the others
in the buffer; requests of a held domain that would only be due more than
:data:`DEFER_AFTER` seconds from now go back to the store, delayed until their turn, so
a paused or slow site never fills the buffer and starves the others. Nothing is held
in a download slot.

With or without a pacer, the pick also skips the requests of a site whose download slot
is full (``busy``): handed out, they would only queue in the slot, and each would start the
moment the one before it finished, before its connection was back in the pool, so the
pool opened a new connection and closed an old one (a lease batch of one site opened
three times the connections plain Scrapy does). They stay buffered, in their place, and
go when the slot has room; a request handed out counts against its slot until it gets
there (:mod:`.transit`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import Request

from scrapy_scale.context import Pacer
from scrapy_scale.frontier.store import Leased, domain_of

if TYPE_CHECKING:
    from scrapy_scale.frontier.scheduling.local import LocalQueue

#: a held request whose turn is further than this (seconds) goes back to the store, delayed
DEFER_AFTER = 1.0


@dataclass
class Pick:
    #: the entry to hand out (None: nothing is due)
    due: Any = None
    #: leased entries taken out of the buffer, to be stored again as delayed until the time given
    defer: list[tuple[Leased, float]] = field(default_factory=list)
    #: entries left in the buffer because their domain is not due
    held: int = 0
    #: entries left in the buffer because their site's download slot is full
    busy: int = 0


def entry_domain(entry: Leased | Request) -> str:
    return domain_of(entry.url) if isinstance(entry, Request) else entry.domain


def take_due(
    buffer: LocalQueue[Any], pacer: Pacer | None, now: float, busy: Callable[[str], bool] | None = None
) -> Pick:
    """Remove from ``buffer`` and return the first entry (in serving order) whose domain
    is due and whose download slot is not ``busy``, and the held entries to defer. The
    pacer and ``busy`` are asked once per domain (a busy domain's pacer is not asked)."""
    pick = Pick()
    seen: dict[str, tuple[float, float, int]] = {}
    hold: dict[str, float] = {}
    full: dict[str, bool] = {}

    def is_busy(domain: str) -> bool:
        if busy is None:
            return False
        b = full.get(domain)
        if b is None:
            b = full[domain] = busy(domain)
        return b

    def hold_of(domain: str) -> float:
        if pacer is None:
            return 0.0
        if domain not in hold:
            hold[domain] = pacer.hold_until(domain)
        return hold[domain]

    def judge_retry(entry: Leased | Request) -> str:
        ok = (
            isinstance(entry, Leased)
            and entry.attempts > 0
            and not is_busy(entry.domain)
            and hold_of(entry.domain) == 0.0
        )
        return "take" if ok else "keep"

    # a retry whose time has come goes before fresh requests of its site (it waited already)
    if buffer.any(lambda e: isinstance(e, Leased) and e.attempts > 0 and e.error is None):
        pick.due = buffer.take_first(judge_retry)
        if pick.due is not None:
            return pick

    def judge(entry: Leased | Request) -> str:
        if isinstance(entry, Leased) and entry.error is not None:
            return "take"  # unreadable: the scheduler dead-letters it, no pacing
        domain = entry_domain(entry)
        if is_busy(domain):
            pick.busy += 1
            return "keep"
        st = seen.get(domain)
        if st is None:
            t = hold_of(domain)
            if t == 0.0:
                return "take"
            assert pacer is not None  # without one every domain is due
            st = (t, pacer.spacing(domain), 0)
        t, gap, k = st
        seen[domain] = (t, gap, k + 1)
        turn = (t if math.isfinite(t) else now) + k * gap
        if isinstance(entry, Leased) and turn - now > DEFER_AFTER:
            pick.defer.append((entry, turn))
            return "drop"
        pick.held += 1
        return "keep"

    pick.due = buffer.take_first(judge)
    return pick
