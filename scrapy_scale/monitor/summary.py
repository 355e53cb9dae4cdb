"""A short, readable account of a run, logged when the crawl ends.

``RunSummary`` (enabled by the add-on; usable alone in ``EXTENSIONS``) logs at
INFO, as the very last thing a crawl prints, about ten lines a newcomer can
read: how long it ran, pages fetched, items stored and where, outcomes by
failure class, retries and give-ups, the frontier's state, and the one command
to look further. It is a subscriber of the outcome signal (requests, retries and
give-ups by class are what it counted itself, the same events the stats count)
and reads the crawl's stats for the rest, defensively: a component that is not
enabled simply leaves its line out.

The text is built by :func:`render`, a pure function of the stats and a few
facts, so it is testable without a reactor.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.spiders import Spider

from scrapy_scale import config, exitcode, meta, settings_core
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as K
from scrapy_scale.context import ScaleContext
from scrapy_scale.errors import ItemDeadLettered
from scrapy_scale.outcomes.model import CLASSES, FailureClass, Outcome
from scrapy_scale.redact import redact_url
from scrapy_scale.storage import settings as storage_settings

logger = logging.getLogger(__name__)

#: frontier states shown, in this order (leased and delayed only when not zero)
FRONTIER_STATES = ("done", "failed", "pending", "delayed", "leased")
_ALWAYS_SHOWN = ("done", "failed", "pending")
_CLASSES = tuple(c.value for c in FailureClass)
#: one line per failure class, for a reader who sees the class names for the first time
MEANING = {c.value: i.meaning for c, i in CLASSES.items() if c is not FailureClass.OK}
#: the classes whose line names another egress, for a run without an egress pool (the
#: retry then goes out the same way, after its backoff)
MEANING_WITHOUT_POOL = {
    FailureClass.BLOCKED.value: "403 or a block page: retried after a backoff (no egress pool: SCALE_EGRESSES)",
    FailureClass.EGRESS_FAILED.value: "the proxy failed: retried at once (no egress pool: SCALE_EGRESSES)",
}


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m} min {s} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def _num(stats: Mapping[str, Any], key: str) -> int:
    v = stats.get(key, 0)
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def by_class(stats: Mapping[str, Any], prefix: str) -> dict[str, int]:
    """``{class: count}`` from stats ``<prefix><class>`` (failure classes only), zeros left out."""
    return {c: _num(stats, prefix + c) for c in _CLASSES if _num(stats, prefix + c)}


def by_type(stats: Mapping[str, Any], prefix: str) -> dict[str, int]:
    """``prefix + NAME`` counters by NAME, largest first."""
    found = {k[len(prefix) :]: _num(stats, k) for k in stats if k.startswith(prefix)}
    return dict(sorted(((k, v) for k, v in found.items() if v), key=lambda kv: -kv[1]))


def _counts(d: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in d.items())


@dataclass
class RunFacts:
    """What the summary needs besides the stats."""

    job: str
    reason: str
    duration: float
    #: where items went (credentials removed); None when no scrapy-scale item store is enabled
    store_url: str | None = None
    #: frontier counts by state (done/failed/pending/...), None when no frontier is in use
    frontier: Mapping[str, int] | None = None
    #: terminal failures by class, from the frontier
    frontier_failed: Mapping[str, int] = field(default_factory=dict)
    status_command: str | None = None
    #: frontier records moved to the dead letters in this run (job-wide when known)
    frontier_dead: int = 0
    #: where dead-lettered items went (table / collection name)
    item_dead_letter: str | None = None
    #: (status, why) when the process will exit non-zero (scrapy_scale.exitcode)
    exit_status: tuple[int, str] | None = None

    #: final outcomes, retries and give-ups by class, as the summary's subscriber counted
    #: them; None: read them from the stats (``scale/outcome/<class>`` ...)
    outcomes: Mapping[str, int] | None = None
    retries: Mapping[str, int] | None = None
    gave_up: Mapping[str, int] | None = None
    #: an egress pool is in use (SCALE_EGRESSES): the retries of blocked and egress_failed
    #: requests go through another egress
    egress_pool: bool = True


def dead_letters(stats: Mapping[str, Any], facts: RunFacts) -> int:
    """Dead letters of the run: frontier records plus items (this process's)."""
    return facts.frontier_dead + _num(stats, "scale/store/dead_lettered")


class OutcomeTally:
    """Subscriber: final outcomes, retries and give-ups by class (crawl requests only).

    A request whose final outcome is done (``ok``, ``not_found``) but one of whose items
    went to the dead letter (``ItemDeadLettered``) counts as ``parse_failed``, as the
    frontier records it (its output is not all stored): the item's verdict can come before
    or after the outcome, so a request is followed from its first item or its final
    outcome until all the items its outcome announced are accounted for (in-flight
    requests only).
    """

    def __init__(self, fingerprint: Callable[[Any], str | None] | None = None) -> None:
        self.outcomes: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self.gave_up: Counter[str] = Counter()
        self.fingerprint = fingerprint or (lambda request: None)
        #: fingerprint -> [items seen, an item dead-lettered] before the final outcome
        self._early: dict[str, list[Any]] = {}
        #: fingerprint -> [items expected, items seen, class counted] after a done outcome
        self._waiting: dict[str, list[Any]] = {}

    def on_outcome(self, outcome: Outcome, **kwargs: Any) -> None:
        if outcome.internal:
            return
        cls = outcome.cls.value
        if outcome.final:
            early = self._early.pop(outcome.fingerprint, None)
            if outcome.done and early is not None and early[1]:
                cls = FailureClass.PARSE_FAILED.value
            elif outcome.done and outcome.items > (early[0] if early else 0):
                self._waiting[outcome.fingerprint] = [outcome.items, early[0] if early else 0, cls]
            self.outcomes[cls] += 1
            if outcome.gave_up:
                self.gave_up[cls] += 1
        else:
            self.retries[cls] += 1

    def on_item(self, item: Any = None, response: Any = None, **kwargs: Any) -> None:
        """``item_scraped`` / ``item_dropped`` / ``item_error`` of a crawled response's item."""
        request = getattr(response, "request", None)
        fp = self.fingerprint(request) if request is not None else None
        if not fp:
            return
        failure = kwargs.get("failure")
        error = getattr(failure, "value", None) if failure is not None else kwargs.get("exception")
        dead = isinstance(error, ItemDeadLettered)
        waiting = self._waiting.get(fp)
        if waiting is None:
            early = self._early.setdefault(fp, [0, False])
            early[0] += 1
            early[1] = early[1] or dead
            return
        waiting[1] += 1
        if dead and waiting[2] != FailureClass.PARSE_FAILED.value:
            self.outcomes[waiting[2]] -= 1
            self.outcomes[FailureClass.PARSE_FAILED.value] += 1
            waiting[2] = FailureClass.PARSE_FAILED.value
        if waiting[1] >= waiting[0]:
            del self._waiting[fp]

    def ordered(self, counter: Counter[str]) -> dict[str, int]:
        return {c: counter[c] for c in _CLASSES if counter[c]}


def render(stats: Mapping[str, Any], facts: RunFacts) -> list[str]:
    """The summary's lines (no trailing newlines)."""

    def row(label: str, text: str) -> str:
        return f"  {label:<14}{text}"

    reason = facts.reason
    how = "finished" if reason == "finished" else f"stopped early ({reason})"
    lines = [f"scrapy-scale summary: job '{facts.job}' {how} in {format_duration(facts.duration)}"]

    # every HTTP response, retried ones included (response_received_count counts only the last)
    pages = _num(stats, "downloader/response_count") or _num(stats, "response_received_count")
    rate = f" ({pages / facts.duration:.1f}/s)" if facts.duration > 0 and pages else ""
    fetched = f"{pages:,} responses{rate}"
    no_answer = _num(stats, "downloader/exception_count")
    if no_answer:
        fetched += f"; {no_answer:,} attempts got no response (refused, reset, timed out)"
    lines.append(row("pages", fetched))

    items = _num(stats, "item_scraped_count")
    if facts.store_url:
        item_text = f"{items:,} stored in {facts.store_url}"
        if "scale/store/written" in stats:  # upserts: new rows vs rows of an earlier run updated
            ins, upd = _num(stats, "scale/store/inserted"), _num(stats, "scale/store/updated")
            item_text += f" ({ins:,} new, {upd:,} updated)"
    else:
        item_text = f"{items:,} scraped (no scrapy-scale item store enabled)"
    dropped = _num(stats, "item_dropped_count")
    if dropped:
        item_text += f"; {dropped:,} dropped"
    lines.append(row("items", item_text))

    outcomes = dict(facts.outcomes) if facts.outcomes is not None else by_class(stats, K.OUTCOME)
    if outcomes:
        lines.append(row("requests", _counts(outcomes)))

    retries = dict(facts.retries) if facts.retries is not None else by_class(stats, K.RETRY)
    gave_up = dict(facts.gave_up) if facts.gave_up is not None else by_class(stats, K.GAVE_UP)
    if outcomes or retries or gave_up:
        text = f"{sum(retries.values()):,} retries" + (f" ({_counts(retries)})" if retries else "")
        text += f"; gave up on {sum(gave_up.values()):,} requests" + (f" ({_counts(gave_up)})" if gave_up else "")
        lines.append(row("retries", text))
    elif "retry/count" in stats or "retry/max_reached" in stats:  # Scrapy's own RetryMiddleware
        lines.append(
            row(
                "retries",
                f"{_num(stats, 'retry/count'):,} retries; gave up on {_num(stats, 'retry/max_reached'):,} requests",
            )
        )

    seen = [c for c in MEANING if outcomes.get(c) or retries.get(c) or gave_up.get(c)]
    for i, c in enumerate(seen):
        meaning = MEANING[c] if facts.egress_pool else MEANING_WITHOUT_POOL.get(c, MEANING[c])
        lines.append(row("" if i else "classes", f"{c + ':':<14}{meaning}"))

    if facts.frontier is not None:
        shown = {
            s: int(facts.frontier.get(s, 0)) for s in FRONTIER_STATES if s in _ALWAYS_SHOWN or facts.frontier.get(s)
        }
        text = ", ".join(f"{v:,} {s}" for s, v in shown.items())
        if facts.frontier_failed:
            text += f" (failed: {_counts(facts.frontier_failed)})"
        lines.append(row("frontier", text))
        if any(shown.get(s) for s in ("pending", "delayed", "leased")):
            lines.append(row("", "the same `scrapy crawl` again resumes the unfinished requests"))
    in_memory = by_type(stats, "scale/frontier/unserializable/")
    if in_memory:
        lines.append(
            row(
                "not stored",
                f"{sum(in_memory.values()):,} requests kept in memory only, "
                f"not resumable (values of type {_counts(in_memory)})",
            )
        )

    items_dead = _num(stats, "scale/store/dead_lettered")
    if facts.frontier_dead or items_dead:
        parts = []
        if facts.frontier_dead:
            parts.append(f"{facts.frontier_dead:,} frontier records could not be read and were not crawled")
        if items_dead:
            where = f" (in {facts.item_dead_letter})" if facts.item_dead_letter else ""
            parts.append(f"{items_dead:,} items could not be stored{where}")
        lines.append(row("dead letters", "; ".join(parts)))

    logged = _num(stats, "log_count/ERROR")
    if logged:
        lines.append(row("errors", f"{logged:,} ERROR lines in the log above"))

    if facts.status_command:
        lines.append(row("look further", facts.status_command))
    if facts.exit_status:
        lines.append(row("exit status", f"{facts.exit_status[0]}: {facts.exit_status[1]}"))
    return lines


def store_url(crawler: Crawler) -> str | None:
    """The item store's URL without credentials, when scrapy-scale's store pipeline is on
    (it registers the URL in the crawler's context when it is built)."""
    return ScaleContext.of(crawler).store_url


#: (counts by state, failed by class, dead letters)
FrontierCounts = tuple[dict[str, int], dict[str, int], int]


def read_frontier(crawler: Crawler, job: str) -> FrontierCounts | None:
    """(counts by state, failed by class, dead letters) of the job's frontier; None when it
    is not in use.

    Asks the frontier itself, as ``scrapy scale status`` does (its final numbers); falls
    back to the counts the scheduler last put in the stats.
    """
    if not ScaleContext.of(crawler).frontier_on:
        return None
    try:
        from scrapy_scale.frontier import status as frontier_status

        st = frontier_status.read_status(crawler.settings, job, must_exist=True)
        return (
            {str(k): int(v) for k, v in st["counts"].items()},
            {str(k): int(v) for k, v in st["failed_by_class"].items() if v},
            int(st["dead_letters"]),
        )
    except Exception:  # noqa: BLE001 - the summary must never break a crawl's end
        logger.debug("run summary: frontier status unavailable", exc_info=True)
    stats = crawler.stats.get_stats() if crawler.stats else {}
    prefix = "scale/frontier/state/"
    states = {k[len(prefix) :]: _num(stats, k) for k in stats if isinstance(k, str) and k.startswith(prefix)}
    dead = _num(stats, "scale/frontier/dead_letters") or _num(stats, "scale/frontier/dead_lettered")
    return (states, {}, dead) if states else None


def status_command(crawler: Crawler, job: str) -> str:
    """``scrapy scale status JOB``, with the settings needed to find a non-default frontier."""
    cmd = f"scrapy scale status {job}"
    for name in ("SCALE_FRONTIER_URL", "SCALE_STATE_DIR"):
        value = crawler.settings.get(name)
        declared = config.REGISTRY.get(name)
        if value and (declared is None or value != declared.default):
            cmd += f" -s {name}={redact_url(str(value)) if '://' in str(value) else value}"
    if not crawler.settings.get("SCALE_FRONTIER_URL") and crawler.settings.get("JOBDIR"):
        # under scrapyd (jobs_dir) or with -s JOBDIR: the state is not where a later command looks
        cmd += f" -s SCALE_FRONTIER_URL={settings_core.state_file_url(crawler.settings, 'frontier.db')}"
    return cmd


class RunSummary:
    """Extension: logs :func:`render`'s lines at INFO once the engine has stopped."""

    def __init__(
        self, crawler: Crawler, frontier_reader: Callable[[Crawler, str], FrontierCounts | None] = read_frontier
    ):
        self.crawler = crawler
        self.frontier_reader = frontier_reader
        self.started: float | None = None
        self.reason: str | None = None
        self.job: str | None = None
        self.done = False
        self.tally = OutcomeTally(self._fingerprint)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RunSummary:
        ext = cls(crawler)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        crawler.signals.connect(ext.tally.on_outcome, signal=scale_signals.outcome)
        for sig in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(ext.tally.on_item, signal=sig)
        return ext

    def _fingerprint(self, request: Any) -> str | None:
        """The fingerprint outcomes carry (scrapy_scale.outcomes.emit: the frontier's, else Scrapy's)."""
        fp = request.meta.get(meta.FINGERPRINT)
        if fp:
            return str(fp)
        fingerprinter = getattr(self.crawler, "request_fingerprinter", None)
        return fingerprinter.fingerprint(request).hex() if fingerprinter is not None else None

    def spider_opened(self, spider: Spider) -> None:
        self.started = time.monotonic()
        self.job = settings_core.JOB.get(self.crawler.settings) or spider.name

    def spider_closed(self, spider: Spider, reason: str) -> None:
        self.reason = reason

    def engine_stopped(self) -> None:
        # after the stats dump and "Spider closed": the summary is the last thing printed
        if self.done or self.reason is None:
            return
        self.done = True
        try:
            logger.info("\n".join(self.lines()))
        except Exception:  # noqa: BLE001 - never turn a finished crawl into a failure
            logger.exception("run summary failed")

    def lines(self) -> list[str]:
        stats = self.crawler.stats.get_stats() if self.crawler.stats else {}
        elapsed = stats.get("elapsed_time_seconds")
        if not isinstance(elapsed, int | float):
            elapsed = time.monotonic() - self.started if self.started is not None else 0.0
        job = self.job or "?"
        frontier = self.frontier_reader(self.crawler, job)
        store = store_url(self.crawler)
        facts = RunFacts(
            job=job,
            reason=self.reason or "?",
            duration=float(elapsed),
            store_url=store,
            frontier=frontier[0] if frontier else None,
            frontier_failed=frontier[1] if frontier else {},
            status_command=status_command(self.crawler, job) if frontier else None,
            frontier_dead=frontier[2] if frontier and len(frontier) > 2 else 0,
            item_dead_letter=_dead_letter_table(self.crawler) if store else None,
            egress_pool="egress_pool" in ScaleContext.of(self.crawler).extra,
        )
        if ScaleContext.of(self.crawler).outcomes_on:
            t = self.tally
            facts.outcomes, facts.retries, facts.gave_up = (
                t.ordered(t.outcomes),
                t.ordered(t.retries),
                t.ordered(t.gave_up),
            )
        dead = dead_letters(stats, facts)
        code = settings_core.EXIT_CODE_DEAD_LETTERS.get(self.crawler.settings)
        if dead and code:
            exitcode.request(code, f"the run has {dead:,} dead letters (SCALE_EXIT_CODE_DEAD_LETTERS)", self.crawler)
        facts.exit_status = exitcode.requested(self.crawler)
        return render(stats, facts)


def _dead_letter_table(crawler: Crawler) -> str:
    import scrapy_scale.storage.settings  # noqa: F401 - declares the names read below

    s = crawler.settings
    return str(storage_settings.DEAD_LETTER.get(s) or f"{storage_settings.COLLECTION.get(s)}_dead_letter")
