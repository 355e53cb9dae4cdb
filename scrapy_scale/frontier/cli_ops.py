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
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale import config, settings_core
from scrapy_scale.errors import ScaleError
from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.frontier.codec import RecordRules
from scrapy_scale.frontier.seeding import UrlSeeds
from scrapy_scale.frontier.store import (
    COUNT_KEYS,
    FrontierError,
    FrontierStore,
    Status,
    open_store,
)
from scrapy_scale.outcomes.model import DONE_CLASSES, FailureClass
from scrapy_scale.redact import redact_url

#: seconds a command keeps retrying an unreachable Redis before it gives up
REDIS_GIVE_UP = 10.0

#: seeds per store call (one SQLite transaction: 1.6 times faster than 10,000 at a million
#: seeds, and holds the write lock for about 0.6 s; Redis: script calls of SEED_CALL)
SEED_BATCH = 50_000

#: failure classes a record can be failed with (done classes never are)
FAILED_CLASSES = tuple(c.value for c in FailureClass if c not in DONE_CLASSES)


class OpError(ScaleError, RuntimeError):
    """A command cannot do what was asked; the message says why and what to do."""


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
        if self.store.runs():
            return True
        return any(self.store.counts().values())

    def status(self) -> dict[str, Any]:
        """The job's state as plain JSON-able data (see :func:`format_status`)."""
        st: Status = self.store.status()
        run = st.run
        now = self.store.clock()
        live = st.live_workers(now)
        return {
            "job": st.job,
            "frontier": self.where,
            "run": None
            if run is None
            else {
                "id": run.run_id,
                "started_at": run.started_at,
                "ended_at": run.ended_at,
                "state": run_state(run.ended_at, live),
                # when a worker was last heard from, while the run is interrupted
                "no_live_worker_since": st.last_seen() if run.ended_at is None and not live else None,
            },
            "live_workers": live,
            "workers": {
                w: {"last_beat": at, "alive_until": until, "live": until >= now}
                for w, (at, until) in sorted(st.workers.items())
            },
            "counts": {k: int(st.counts.get(k, 0)) for k in COUNT_KEYS},
            "total": sum(int(st.counts.get(k, 0)) for k in COUNT_KEYS),
            "failed_by_class": dict(sorted(st.failed_by_class.items())),
            "oldest_pending_age": st.oldest_pending_age,
            "oldest_pending_exact": st.oldest_pending_exact,
            "average_wait": st.average_wait,
            "leases_by_worker": dict(sorted(st.leases_by_worker.items())),
            "dead_letters": st.dead_letters,
            "drained": st.drained,
            # of the delayed: retries waiting for their backoff (or their site's turn after
            # it); the rest are first attempts the pacer put back until their site's turn
            "delayed_retries": st.delayed_retries,
            "delayed_paced": None
            if st.delayed_retries is None
            else max(0, int(st.counts.get("delayed", 0)) - st.delayed_retries),
            "last_eligible_at": st.last_eligible_at,
        }

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
    if not job or not job.strip():
        raise OpError("the job name is empty")
    # every SCALE_* setting, as a crawl would check them, without opening an egress source (a
    # file, a provider): a command that reads the frontier must not depend on it
    config.validate_all(settings, read_sources=False)
    url = frontier_settings.frontier_url(settings)
    state_dir = settings_core.STATE_DIR.get(settings)
    scheme = urlsplit(url).scheme
    where = redact_url(url)
    if scheme == "sqlite" and must_exist:
        from scrapy_scale.frontier.sqlite import SqliteStore

        path = SqliteStore.path_from_url(url, state_dir)
        if not os.path.exists(path):
            raise OpError(
                f"no frontier at {path} (no crawl has used it yet); run the command where the "
                "crawl runs, or give -s SCALE_FRONTIER_URL=... / -s SCALE_STATE_DIR=..."
            )
    try:
        store = open_store(url, job, state_dir=state_dir, connect=False)
        if hasattr(store, "retry_for"):
            store.retry_for = REDIS_GIVE_UP  # a command must not wait forever for Redis
        store.open()
    except FrontierError as e:
        raise OpError(str(e)) from None
    try:
        ops = JobOps(store, where, RecordRules.for_crawl(None, settings))
        if must_exist and not ops.exists():
            others = [j for j in known_jobs(store) if j != job]
            hint = f"; known jobs: {', '.join(others)}" if others else "; no job has run there yet"
            raise OpError(f"unknown job {job!r} in the frontier at {where}{hint}")
        yield ops
    except FrontierError as e:
        raise OpError(str(e)) from None
    finally:
        store.close()


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


def known_jobs(store: FrontierStore) -> list[str]:
    """Names of the jobs that have had a run in ``store``'s frontier (best effort:
    reads the backend's layout; [] when it cannot tell)."""
    try:
        from scrapy_scale.frontier.redis_store import RedisStore
    except ImportError:  # the redis extra is not installed
        RedisStore = None  # type: ignore[assignment,misc]  # noqa: N806
    from scrapy_scale.frontier.sqlite import SqliteStore

    try:
        if isinstance(store, SqliteStore):
            rows = store.db.execute("SELECT DISTINCT job FROM runs ORDER BY job").fetchall()
            return [str(r[0]) for r in rows]
        if RedisStore is not None and isinstance(store, RedisStore):
            names = set()
            for key in store.r.scan_iter(match="scale:{*}:runs", count=1000):
                names.add(key[len("scale:{") : -len("}:runs")])
            return sorted(names)
    except Exception:  # noqa: BLE001 - only a hint in an error message
        return []
    return []


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def run_state(ended_at: float | None, live_workers: Sequence[str]) -> str:
    """``finished``; ``running`` while a worker is alive; else ``interrupted`` (Ctrl-C,
    kill -9, a crash at startup: the run is unfinished and nobody works on it)."""
    if ended_at is not None:
        return "finished"
    return "running" if live_workers else "interrupted"


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
        oldest = f">= {oldest}"  # many domains: the first ones in service order were looked at
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
