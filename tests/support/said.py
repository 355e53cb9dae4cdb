"""The warnings a logger (and its children) gives while a test listens: hostile-value tests
count them, since each bad value read back must give ONE warning per kind."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class Said(logging.Handler):
    """The messages of WARNING and above, in order."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def listening(logger: str) -> Iterator[Said]:
    """A :class:`Said` on ``logger`` while the block runs."""
    h = Said()
    log = logging.getLogger(logger)
    log.addHandler(h)
    try:
        yield h
    finally:
        log.removeHandler(h)
