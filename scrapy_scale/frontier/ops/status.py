"""The frontier's public, read-only status and state paths.

What other packages (the monitor, the run summary) and ``scrapy scale status`` read of a
job's frontier, without knowing its backend:

- :func:`state_path`: the SQLite file the frontier of these settings uses (None: Redis);
- :func:`open_frontier`: the job's store, opened as a crawl with these settings would;
- :func:`status_of` / :func:`read_status`: the job's state as plain JSON-able data;
- :class:`StatusReader`: the same, read again and again through one connection.

Plain Python (no Twisted).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from scrapy_scale import config
from scrapy_scale.config import core_settings
from scrapy_scale.errors import ScaleError
from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.frontier.backends import open_store, sqlite_path
from scrapy_scale.frontier.store import COUNT_KEYS, FrontierError, FrontierStore, Status
from scrapy_scale.redact import redact_url

#: seconds a reader keeps retrying an unreachable Redis before it gives up
REDIS_GIVE_UP = 10.0


class StatusError(ScaleError, RuntimeError):
    """The frontier cannot be read as asked; the message says why and what to do."""


def state_path(settings: Any) -> str | None:
    """The SQLite file of the frontier a crawl with ``settings`` uses (None: not SQLite)."""
    return sqlite_path(frontier_settings.frontier_url(settings), core_settings.STATE_DIR.get(settings))


def where(settings: Any) -> str:
    """The frontier's URL as it may be shown (credentials out)."""
    return redact_url(frontier_settings.frontier_url(settings))


def job_exists(store: FrontierStore) -> bool:
    """Has this job ever had a run or a record in this frontier?"""
    if store.runs():
        return True
    return any(store.counts().values())


@contextmanager
def open_frontier(settings: Any, job: str, must_exist: bool = True) -> Iterator[FrontierStore]:
    """Open the frontier of ``job`` as a crawl with ``settings`` would.

    ``must_exist``: fail with :class:`StatusError` (naming the known jobs when the
    backend can list them) unless the job has a run or records there.
    """
    if not job or not job.strip():
        raise StatusError("the job name is empty")
    # every SCALE_* setting, as a crawl would check them, without opening an egress source (a
    # file, a provider): a command that reads the frontier must not depend on it
    config.validate_all(settings, read_sources=False)
    url = frontier_settings.frontier_url(settings)
    path = state_path(settings)
    if path is not None and must_exist and not os.path.exists(path):
        raise StatusError(
            f"no frontier at {path} (no crawl has used it yet); run the command where the "
            "crawl runs, or give -s SCALE_FRONTIER_URL=... / -s SCALE_STATE_DIR=..."
        )
    try:
        store = open_store(url, job, state_dir=core_settings.STATE_DIR.get(settings), connect=False)
        store.give_up_after(REDIS_GIVE_UP)  # a reader must not wait forever for Redis
        store.open()
    except FrontierError as e:
        raise StatusError(str(e)) from None
    try:
        if must_exist and not job_exists(store):
            others = [j for j in known_jobs(store) if j != job]
            hint = f"; known jobs: {', '.join(others)}" if others else "; no job has run there yet"
            raise StatusError(f"unknown job {job!r} in the frontier at {redact_url(url)}{hint}")
        yield store
    except FrontierError as e:
        raise StatusError(str(e)) from None
    finally:
        store.close()


def known_jobs(store: FrontierStore) -> list[str]:
    """Names of the jobs that have had a run in ``store``'s frontier (best effort: [] when
    it cannot tell)."""
    try:
        return store.known_jobs()
    except Exception:  # noqa: BLE001 - only a hint in an error message
        return []


def run_state(ended_at: float | None, live_workers: Sequence[str]) -> str:
    """``finished``; ``running`` while a worker is alive; else ``interrupted`` (Ctrl-C,
    kill -9, a crash at startup: the run is unfinished and nobody works on it)."""
    if ended_at is not None:
        return "finished"
    return "running" if live_workers else "interrupted"


def status_of(store: FrontierStore, where: str) -> dict[str, Any]:
    """The job's state as plain JSON-able data (``where``: the frontier as shown)."""
    st: Status = store.status()
    run = st.run
    now = store.clock()
    live = st.live_workers(now)
    return {
        "job": st.job,
        "frontier": where,
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


def read_status(settings: Any, job: str, must_exist: bool = True) -> dict[str, Any]:
    """The status of ``job``'s frontier, read once (a connection opened and closed)."""
    with open_frontier(settings, job, must_exist=must_exist) as store:
        return status_of(store, where(settings))


class StatusReader:
    """Reads the status of ``job``'s frontier through one connection of its own, opened at
    the first read, again after a failed one; not thread-safe (one thread reads)."""

    def __init__(self, settings: Any, job: str):
        self.settings = settings
        self.job = job
        self._stack: ExitStack | None = None
        self._store: FrontierStore | None = None

    def read(self) -> dict[str, Any]:
        """The status now (raises what opening or reading raised: then :meth:`close`)."""
        if self._store is None:
            stack = ExitStack()
            self._store = stack.enter_context(open_frontier(self.settings, self.job, must_exist=False))
            self._stack = stack
        return status_of(self._store, where(self.settings))

    def close(self) -> None:
        """Close the connection (the next read opens another)."""
        stack, self._stack, self._store = self._stack, None, None
        if stack is not None:
            stack.close()
