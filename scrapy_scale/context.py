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
What one component offers another is a typed field whose type is a Protocol below (what
the readers may use, no more); an object one package shares among its own components
is reached by its class through :meth:`ScaleContext.shared`. Nothing is found by a
string key, and this is the one per-crawler registry: what a component keeps per crawler
lives here (the outcome wiring ``OutcomeCore`` as a shared object, the crawl's exit
status request as a field), not in a map of its own.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from scrapy import Request

T = TypeVar("T")


class Pacer(Protocol):
    """Per-site pacing (the throttle), asked by the frontier scheduler before it hands out
    a request; the progress line reads :meth:`paused`."""

    def hold_until(self, domain: str) -> float:
        """0.0: a request to ``domain`` may be handed out now; else the epoch time it
        may (``math.inf``: unknown yet; the pacer wakes the engine when it may)."""

    def spacing(self, domain: str) -> float:
        """Seconds between two requests to ``domain`` as paced now."""

    def handed_out(self, request: Request, domain: str, fingerprint: str | None) -> None:
        """``request`` to ``domain`` is being handed to the engine."""

    def paused(self) -> list[tuple[str, float]]:
        """The sites paused now and until when (epoch seconds)."""


class EgressPoolView(Protocol):
    """The egress pool, as the metrics and the run summary see it."""

    def pool_sizes(self) -> dict[str, int]:
        """Egresses by state (``healthy``, ``quarantined``, ``probing``)."""

    def snapshot(self, top: int = 10) -> list[dict[str, Any]]:
        """The status rows of the ``top`` busiest egresses (docs/egress.md)."""


class BrowserView(Protocol):
    """A browser integration's live counts, read by the metrics: ints, or zero-argument
    callables returning one. It may also offer ``settled()``, a Deferred fired once its
    contexts are closed at spider close (the metrics await it before their final read)."""

    @property
    def contexts(self) -> int | Callable[[], int]: ...

    @property
    def processes(self) -> int | Callable[[], int]: ...


class StoreView(Protocol):
    """The store pipeline, as the quality report sees it."""

    @property
    def duplicates_in_run(self) -> int:
        """Items whose key was already written in this run."""


class SnapshotIndex(Protocol):
    """The raw snapshots kept this run, as the quality report sees them."""

    def index(self) -> dict[str, str]:
        """URL -> snapshot path."""


class QualityFigures(Protocol):
    """The run's validation figures, as the metrics see them."""

    @property
    def validated(self) -> int: ...

    @property
    def quarantined(self) -> int: ...


class QualityReportView(Protocol):
    """The quality report extension, as the metrics see it."""

    @property
    def failing(self) -> list[str] | None:
        """The checks failing at the last periodic run (None before the first)."""


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
    #: the frontier closed with the job's run finished or drained (nothing pending, delayed
    #: or leased): the run is over, whatever the close reason (a fleet held open for seeds)
    run_drained: bool = False
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
    #: per-site pacing (the throttle), when on
    pacer: Pacer | None = None
    #: the egress pool (the egress middleware), when on
    egress_pool: EgressPoolView | None = None
    #: a browser integration's live contexts and processes (the egress middleware, or the
    #: project's own integration)
    browser: BrowserView | None = None
    #: the store pipeline, when on
    store: StoreView | None = None
    #: the raw snapshots of this run (the quality snapshot keeper), when on
    snapshot_index: SnapshotIndex | None = None
    #: the run's validation figures (the quality layer), once counted
    quality_figures: QualityFigures | None = None
    #: the quality report extension, when on
    quality_report: QualityReportView | None = None
    #: the highest (exit status, why) requested for this crawl (:mod:`scrapy_scale.exitcode`)
    exit_request: tuple[int, str] | None = None
    #: objects a package shares among its own components, one per class (:meth:`shared`)
    _shared: dict[type, Any] = field(default_factory=dict, repr=False)

    _contexts: ClassVar[weakref.WeakKeyDictionary[Any, ScaleContext]] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, crawler: Any) -> ScaleContext:
        """The crawler's context (created on first use)."""
        ctx = cls._contexts.get(crawler)
        if ctx is None:
            ctx = cls._contexts[crawler] = cls()
        return ctx

    def shared(self, kind: type[T], make: Callable[[], T]) -> T:
        """The crawler's one ``kind`` (made by ``make`` on first use): for an object a
        package shares among its own components (the monitor's ``CrawlMetrics``, ...)."""
        inst = self._shared.get(kind)
        if inst is None:
            inst = self._shared[kind] = make()
        return inst  # type: ignore[no-any-return]
