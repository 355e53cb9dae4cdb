"""The run summary's text: :func:`render`, a pure function of the crawl's stats and a few
facts (:class:`RunFacts`), and :class:`OutcomeTally`, what the summary counted itself from
the outcome signal. Testable without a reactor; the extension is
:class:`scrapy_scale.monitor.summary.RunSummary`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale import stats_keys as K
from scrapy_scale.errors import ItemDeadLettered
from scrapy_scale.outcomes.model import CLASSES, FailureClass, Outcome

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
    #: what resumes the unfinished requests (None: the same `scrapy crawl` again; under
    #: scrapyd a new scrapyd job of the spider, see :func:`scrapy_scale.monitor.summary.resume_how`)
    resume_how: str | None = None
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
    return facts.frontier_dead + _num(stats, K.STORE_DEAD_LETTERED)


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

    @property
    def followed(self) -> int:
        """Requests followed now: items seen before their final outcome, or a done outcome
        waiting for the items it announced (0 once every request is accounted for)."""
        return len(self._early) + len(self._waiting)

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
    pages = _num(stats, K.SCRAPY_RESPONSES) or _num(stats, K.SCRAPY_RESPONSES_RECEIVED)
    rate = f" ({pages / facts.duration:.1f}/s)" if facts.duration > 0 and pages else ""
    fetched = f"{pages:,} responses{rate}"
    no_answer = _num(stats, K.SCRAPY_DOWNLOAD_EXCEPTIONS)
    if no_answer:
        fetched += f"; {no_answer:,} attempts got no response (refused, reset, timed out)"
    lines.append(row("pages", fetched))

    items = _num(stats, K.SCRAPY_ITEMS_SCRAPED)
    if facts.store_url:
        item_text = f"{items:,} stored in {facts.store_url}"
        if K.STORE_WRITTEN in stats:  # upserts: new rows vs rows of an earlier run updated
            ins, upd = _num(stats, K.STORE_INSERTED), _num(stats, K.STORE_UPDATED)
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
    elif K.SCRAPY_RETRY_COUNT in stats or K.SCRAPY_RETRY_MAX_REACHED in stats:  # Scrapy's own RetryMiddleware
        lines.append(
            row(
                "retries",
                f"{_num(stats, K.SCRAPY_RETRY_COUNT):,} retries; gave up on {_num(stats, K.SCRAPY_RETRY_MAX_REACHED):,} requests",
            )
        )

    seen = [c for c in MEANING if outcomes.get(c) or retries.get(c) or gave_up.get(c)]
    width = max((len(c) for c in seen), default=0) + 2  # "egress_failed: the proxy failed", aligned
    for i, c in enumerate(seen):
        meaning = MEANING[c] if facts.egress_pool else MEANING_WITHOUT_POOL.get(c, MEANING[c])
        lines.append(row("" if i else "classes", f"{c + ':':<{width}}{meaning}"))

    if facts.frontier is not None:
        shown = {
            s: int(facts.frontier.get(s, 0)) for s in FRONTIER_STATES if s in _ALWAYS_SHOWN or facts.frontier.get(s)
        }
        text = ", ".join(f"{v:,} {s}" for s, v in shown.items())
        if facts.frontier_failed:
            text += f" (failed: {_counts(facts.frontier_failed)})"
        lines.append(row("frontier", text))
        if any(shown.get(s) for s in ("pending", "delayed", "leased")):
            how = facts.resume_how or "the same `scrapy crawl` again"
            lines.append(row("", f"{how} resumes the unfinished requests"))
    in_memory = by_type(stats, K.FRONTIER_UNSERIALIZABLE_TYPE)
    if in_memory:
        lines.append(
            row(
                "not stored",
                f"{sum(in_memory.values()):,} requests kept in memory only, "
                f"not resumable (values of type {_counts(in_memory)})",
            )
        )

    items_dead = _num(stats, K.STORE_DEAD_LETTERED)
    if facts.frontier_dead or items_dead:
        parts = []
        if facts.frontier_dead:
            parts.append(f"{facts.frontier_dead:,} frontier records could not be read and were not crawled")
        if items_dead:
            where = f" (in {facts.item_dead_letter})" if facts.item_dead_letter else ""
            parts.append(f"{items_dead:,} items could not be stored{where}")
        lines.append(row("dead letters", "; ".join(parts)))

    logged = _num(stats, K.SCRAPY_ERRORS_LOGGED)
    if logged:
        lines.append(row("errors", f"{logged:,} ERROR lines in the log above"))

    if facts.status_command:
        lines.append(row("look further", facts.status_command))
    if facts.exit_status:
        lines.append(row("exit status", f"{facts.exit_status[0]}: {facts.exit_status[1]}"))
    return lines
