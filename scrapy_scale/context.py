"""One small shared context per crawler: what each component offers the others.

Components do not find each other by module paths or by reading each other's stats.
Each registers what it offers here when it is built, and the others read it when
they need it (at ``open``/first use, never at import time: Scrapy builds the
middlewares before the scheduler)::

    ctx = ScaleContext.of(crawler)
    ctx.outcomes_on = True          # the outcome middlewares send the outcome signal
    if ctx.scheduler_holds_retries: # the scheduler keeps a retry until its not-before time
        ...

The fields are the whole contract; docs/architecture.md lists who writes and who reads each.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class ScaleContext:
    #: the outcome downloader middleware is on: every crawl request gets outcomes
    outcomes_on: bool = False
    #: the outcome spider middleware is on: final outcomes of responses wait for the callback
    #: output and carry the item count
    parse_outcomes_on: bool = False
    #: the scheduler holds a request until its ``scale_not_before`` time (and keys requests by
    #: their real fingerprint at enqueue, so the middleware must not re-key them)
    scheduler_holds_retries: bool = False
    #: the scrapy-scale frontier is the scheduler (its state answers "what is left")
    frontier_on: bool = False
    #: the run id of the job's current run (the frontier's; else set by the store)
    run_id: int | str | None = None
    #: the job name in use
    job: str | None = None
    #: this process's worker id (the frontier's ``hostname/N``, at open)
    worker: str | None = None
    #: where items are stored, without credentials (the store pipeline)
    store_url: str | None = None
    #: per-callback item sources the store spider middleware records for the pipeline
    item_sources: Any = None
    #: anything else a component wants to publish, by a documented name
    extra: dict[str, Any] = field(default_factory=dict)

    _contexts: ClassVar[weakref.WeakKeyDictionary[Any, ScaleContext]] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, crawler: Any) -> ScaleContext:
        """The crawler's context (created on first use)."""
        ctx = cls._contexts.get(crawler)
        if ctx is None:
            ctx = cls._contexts[crawler] = cls()
        return ctx
