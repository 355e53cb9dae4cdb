"""What ``scrapy scale status|seed|reset|requeue`` do, over the frontier store API.

Plain Python (no Twisted), so the command stays thin and the operations are
usable from scripts::

    from scrapy.utils.project import get_project_settings
    with open_job(get_project_settings(), "catalog") as ops:
        print(format_status(ops.status()))

The store is the one a crawl with the same settings would use:
``SCALE_FRONTIER_URL``, else ``frontier.db`` under ``JOBDIR`` / ``SCALE_STATE_DIR``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from scrapy_scale.frontier.ops import status
from scrapy_scale.frontier.ops.status import known_jobs, run_state
from scrapy_scale.frontier.records.codec import RecordRules
from scrapy_scale.frontier.records.seeding import UrlSeeds
from scrapy_scale.frontier.store import COUNT_KEYS, FrontierStore
from scrapy_scale.outcomes.model import DONE_CLASSES, FailureClass

#: seeds per store call (one SQLite transaction: 1.6 times faster than 10,000 at a million
#: seeds, and holds the write lock for about 0.6 s; Redis: script calls of SEED_CALL)
SEED_BATCH = 50_000

#: failure classes a record can be failed with (done classes never are)
FAILED_CLASSES = tuple(c.value for c in FailureClass if c not in DONE_CLASSES)


#: a command cannot do what was asked; the message says why and what to do (the
#: frontier's status error: opening the job's frontier fails with it too)
OpError = status.StatusError

__all__ = ["JobOps", "OpError", "format_status", "known_jobs", "open_job", "run_state"]


class JobOps:
    """Operations on one job's frontier (an open store)."""

    def __init__(self, store: FrontierStore, where: str, rules: RecordRules | None = None):
        self.store = store
        self.where = where
        #: what a seed may be (SCALE_FRONTIER_SCHEMES)
        self.rules = rules or RecordRules()

    @property
    def job(self) -> str:
        return self.store.job

    def exists(self) -> bool:
        """Has this job ever had a run or a record in this frontier?"""
        return status.job_exists(self.store)

    def status(self) -> dict[str, Any]:
        """The job's state as plain JSON-able data (see :func:`format_status`)."""
        return status.status_of(self.store, self.where)

    def seed(self, urls: Sequence[str], priority: int = 0) -> int:
        """Enqueue ``urls`` (deduplicated like any request); returns how many were new.
        Nothing is enqueued when one of them is not an absolute URL of an allowed scheme."""
        seeds = UrlSeeds(self.rules, priority)
        bad = [u for u in urls if not seeds.valid(u)]
        if bad:
            raise OpError(f"{self._not_a_url()}: {', '.join(bad)}")
        self.store.reopen_run()
        return self._write_behind(seeds, urls)

    def seed_file(self, path: str, priority: int = 0, urls: Sequence[str] = ()) -> tuple[int, int]:
        """Enqueue ``urls`` and the URLs of a file, one a line (blank lines skipped), as
        :meth:`seed` does: nothing is enqueued when one is not a URL it accepts (the file
        is read twice: checked, then enqueued in batches of :data:`SEED_BATCH`, each one
        transaction). Returns (how many were new, how many URLs there were)."""
        seeds = UrlSeeds(self.rules, priority)
        bad = [repr(u) for u in urls if not seeds.valid(u)]
        n = len(urls)
        for lineno, url in _lines(path):
            n += 1
            if not seeds.valid(url):
                bad.append(f"line {lineno}: {url!r}")
        if bad:
            more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
            raise OpError(f"{path}: {self._not_a_url()}: {', '.join(bad[:10])}{more}; nothing was enqueued")
        self.store.reopen_run()
        return self._write_behind(seeds, itertools.chain(urls, (url for _, url in _lines(path)))), n

    def _write_behind(self, seeds: UrlSeeds, urls: Iterable[str]) -> int:
        """Enqueue ``urls`` in batches of :data:`SEED_BATCH`, in order, each one written by
        a thread while this one makes the next batch's records: the store's write runs
        without the GIL (in SQLite, or waiting for Redis). Returns how many were new."""
        added = 0
        with ThreadPoolExecutor(1, thread_name_prefix="scale-seed") as pool:
            writing: Future[int] | None = None
            chunk: list[str] = []
            for url in urls:
                chunk.append(url)
                if len(chunk) >= SEED_BATCH:
                    records, chunk = seeds.records(chunk), []
                    added += writing.result() if writing is not None else 0
                    writing = pool.submit(self.store.enqueue_new, records)
            records = seeds.records(chunk)
            added += writing.result() if writing is not None else 0
            return added + (self.store.enqueue_new(records) if records else 0)

    def _not_a_url(self) -> str:
        schemes = self.rules.schemes
        what = "http(s)" if schemes == {"http", "https"} else f"({', '.join(sorted(schemes))})"
        return f"not an absolute {what} URL"

    def reset(self) -> int:
        """Forget every record of the job (run history stays); returns how many there were."""
        n = sum(self.store.counts().values())
        self.store.reset()
        return n

    def requeue(self, cls: str) -> int:
        """Put the job's terminal failures of class ``cls`` back to pending."""
        present = self.store.status().failed_by_class
        if cls not in FAILED_CLASSES and cls not in present:
            known = ", ".join(FAILED_CLASSES)
            here = ", ".join(f"{k} ({v})" for k, v in sorted(present.items())) or "none"
            hint = " (done classes are never failed)" if cls in {c.value for c in DONE_CLASSES} else ""
            raise OpError(f"unknown failure class {cls!r}{hint}; classes: {known}; this job's failures: {here}")
        return self.store.requeue(cls)


@contextmanager
def open_job(settings: Any, job: str, must_exist: bool = True) -> Iterator[JobOps]:
    """Open the frontier of ``job`` as a crawl with ``settings`` would.

    ``must_exist``: fail with :class:`OpError` (naming the known jobs when the
    backend can list them) unless the job has a run or records there.
    """
    with status.open_frontier(settings, job, must_exist=must_exist) as store:
        yield JobOps(store, status.where(settings), RecordRules.for_crawl(None, settings))


def _lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, URL) of the non-blank lines of a file, stripped."""
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                url = line.strip()
                if url:
                    yield lineno, url
    except (OSError, UnicodeDecodeError) as e:
        raise OpError(f"cannot read {path}: {e}") from None


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def _when(t: float, now: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) + f", {_age(max(0.0, now - t))} ago"


def format_status(st: dict[str, Any], now: float | None = None) -> str:
    """The status as the text ``scrapy scale status`` prints."""
    now = time.time() if now is None else now
    lines = [f"job {st['job']}  (frontier {st['frontier']})"]
    run = st["run"]
    if run is None:
        lines.append("run: none yet")
    else:
        ended = run["ended_at"]
        state = run["state"]
        if state == "interrupted" and run.get("no_live_worker_since") is not None:
            state = f"interrupted (no live worker since {_when(run['no_live_worker_since'], now)})"
        lines.append(
            f"run {run['id']}: {state}, started {_age(now - run['started_at'])} ago"
            + (f", ended {_age(now - ended)} ago" if ended is not None else "")
        )
        live = st.get("live_workers") or []
        lines.append("live workers: " + (", ".join(live) if live else "none"))
    c = st["counts"]
    lines.append("state     count")
    for k in COUNT_KEYS:
        lines.append(f"{k:<9} {c[k]:>7}")
        if k == "delayed" and c[k] and st.get("delayed_retries") is not None:
            lines.append(f"  {'retries':<16} {st['delayed_retries']:>7}  (waiting for their backoff)")
            lines.append(f"  {'held by pacing':<16} {st['delayed_paced']:>7}  (waiting for their site's turn)")
    lines.append(f"{'total':<9} {st['total']:>7}")
    if st["failed_by_class"]:
        lines.append("failed by class: " + ", ".join(f"{k} {v}" for k, v in st["failed_by_class"].items()))
    oldest = _age(st["oldest_pending_age"])
    if st["oldest_pending_age"] is not None and not st.get("oldest_pending_exact", True):
        oldest = f">= {oldest}"  # not every pending record was looked at (many domains, long queues)
    lines.append(f"oldest pending: {oldest}   average wait: {_age(st['average_wait'])}")
    last = st.get("last_eligible_at")
    if c["delayed"] and isinstance(last, int | float) and math.isfinite(last):
        lines.append(f"last delayed request eligible: in {_age(max(0.0, last - now))}")
    leases = st["leases_by_worker"]
    if leases:
        lines.append("leases by worker: " + ", ".join(f"{w} {n}" for w, n in leases.items()))
    else:
        lines.append("leases by worker: none")
    if st["dead_letters"]:
        lines.append(f"dead letters: {st['dead_letters']}")
    lines.append("drained: yes" if st["drained"] else "drained: no")
    return "\n".join(lines)
