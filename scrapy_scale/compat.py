"""Every use of Scrapy's private API, in one place (tests/test_compat.py checks each).

Scrapy gives a scheduler no public way to know whether the engine still holds a
request, nor to wake the engine after the scheduler got new work (the engine polls
an idle scheduler every 5 s). These helpers read ``ExecutionEngine._slot``; if a
Scrapy release changes it, the tests of this module fail first, and each helper
degrades to "unknown" rather than breaking a crawl.
"""

from __future__ import annotations

from typing import Any


def engine_of(crawler: Any) -> Any:
    """The crawler's engine, or None before it exists."""
    try:
        return crawler.engine
    except (AttributeError, RuntimeError):  # not crawling (tools, tests) / not set yet
        return None


def _slot(crawler: Any) -> Any:
    return getattr(engine_of(crawler), "_slot", None)


def engine_requests_in_progress(crawler: Any) -> set[Any] | None:
    """The requests the engine holds (downloading, or their output being processed);
    None when that cannot be known."""
    inprogress = getattr(_slot(crawler), "inprogress", None)
    return inprogress if isinstance(inprogress, set) else None


def wake_engine(crawler: Any) -> bool:
    """Make the engine ask the scheduler for requests at once. False when it could not."""
    nextcall = getattr(_slot(crawler), "nextcall", None)
    schedule = getattr(nextcall, "schedule", None)
    if schedule is None:
        return False
    schedule()
    return True


def engine_scheduler(crawler: Any) -> Any:
    """The running engine's scheduler, or None before it is open."""
    engine = engine_of(crawler)
    if engine is None:
        return None
    sched = getattr(engine, "scheduler", None)  # a public property in Scrapy 2.19
    if sched is None:
        sched = getattr(_slot(crawler), "scheduler", None)
    return sched
