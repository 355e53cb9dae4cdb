"""The persisted frontier: a Scrapy scheduler over a SQLite or Redis store.

``scrapy_scale.frontier.Scheduler`` is the scheduler; :mod:`.store` the store interface
and :mod:`.settings` the ``SCALE_FRONTIER_*`` settings. Four rooms: :mod:`.records` (what
a record is, the codec), :mod:`.scheduling` (the scheduler and its units),
:mod:`.backends` (SQLite, Redis, :func:`open_store`), :mod:`.ops` (status, the CLI's
operations); former flat paths still import (:mod:`scrapy_scale.moved`). See docs/frontier.md.
"""

from __future__ import annotations

from typing import Any

from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.store import (
    EnqueueResult,
    FrontierError,
    FrontierStore,
    Leased,
    NewRequest,
    State,
    Status,
)

__all__ = [
    "EnqueueResult",
    "FrontierError",
    "FrontierStore",
    "Leased",
    "NewRequest",
    "Scheduler",
    "State",
    "Status",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name == "Scheduler":  # imported lazily: it pulls in Twisted
        from scrapy_scale.frontier.scheduling.scheduler import Scheduler

        return Scheduler
    raise AttributeError(name)
