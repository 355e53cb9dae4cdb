"""The persisted frontier: a Scrapy scheduler over a SQLite or Redis store.

``scrapy_scale.frontier.Scheduler`` is the scheduler; :mod:`.store` the store
interface, :func:`.backends.open_store` its factory (the backends live in
:mod:`.backends`), :mod:`.status` the read-only status; see docs/frontier.md.
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
        from scrapy_scale.frontier.scheduler import Scheduler

        return Scheduler
    raise AttributeError(name)
