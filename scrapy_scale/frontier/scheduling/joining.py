"""A worker joins its job's run at open: its id, the run, its leases taken back.

Plain Python over the store (called from the scheduler's ``attach``, before the store
thread starts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scrapy_scale.frontier.scheduling import scrapy_scheduler_settings
from scrapy_scale.frontier.store import FrontierStore

logger = logging.getLogger(__name__)


def pick_worker(store: FrontierStore, worker: str, claim: Callable[[], str] | None, start_over: str | None) -> str:
    """This worker's id: ``worker``, or a claimed ``host/N`` slot; the job starts over
    first when ``start_over`` (the Scrapy setting asking for it) and no one else crawls it."""
    if claim is not None:
        worker = claim()
    if start_over:
        worker = scrapy_scheduler_settings.start_over(store, start_over, worker, claim)
    return worker


@dataclass
class Joined:
    run: Any
    reclaimed: int
    counts: dict[str, int]


def join_run(store: FrontierStore, worker: str, beat: Callable[[], None]) -> Joined:
    """Join (or start) the run, say this worker is alive (``beat``), take back its leases."""
    warning = store.durability_warning()
    if warning:
        logger.warning("frontier: %s", warning)
    run = store.begin_run()
    beat()
    reclaimed = store.reclaim(worker)
    joined = Joined(run, reclaimed, store.counts())
    logger.info(
        "frontier %s job %r run %d (%s) worker %s: %s; took back %d lease(s)",
        type(store).__name__,
        store.job,
        run.run_id,
        "resumed" if run.resumed else "new",
        worker,
        joined.counts,
        reclaimed,
    )
    return joined
