"""Logging that stays readable at scale: the first few of each kind loud, the rest quiet."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any


class FirstFew:
    """Log the first ``n`` messages of each kind at ``level``, later ones at DEBUG."""

    def __init__(self, logger: logging.Logger, n: int = 5, level: int = logging.WARNING):
        self.logger = logger
        self.n = n
        self.level = level
        self.seen: Counter[str] = Counter()

    def __call__(self, kind: str, msg: str, *args: Any, level: int | None = None, **kw: Any) -> None:
        self.seen[kind] += 1
        count = self.seen[kind]
        if count <= self.n:
            if count == self.n:
                msg += " (further " + kind.replace("%", "%%") + " messages at DEBUG level)"
            self.logger.log(self.level if level is None else level, msg, *args, **kw)
        else:
            self.logger.debug(msg, *args, **kw)
