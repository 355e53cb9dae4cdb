"""Opening a SQLite file that other processes may be opening at the same moment.

SQLite's busy timeout does not cover everything a first open does: switching a new file
to WAL, and a schema write that must upgrade a read lock while another connection waits
to write, return "database is locked" at once rather than wait (SQLite gives up to avoid
a deadlock). Two workers started together on one store file hit that. The setup steps are
idempotent (``PRAGMA``, ``CREATE ... IF NOT EXISTS``, ``INSERT OR IGNORE``), so they are
simply run again, with a growing pause, until the busy timeout is spent.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable

LOCKED = ("database is locked", "database table is locked", "database is busy")


def is_locked(e: BaseException) -> bool:
    return isinstance(e, sqlite3.OperationalError) and any(t in str(e).lower() for t in LOCKED)


def setup_retrying(
    db: sqlite3.Connection,
    setup: Callable[[sqlite3.Connection], None],
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> None:
    """Run ``setup(db)``; while it fails only because another connection holds the lock,
    roll back and run it again, for at most ``timeout`` seconds. Other errors pass through."""
    rng = rng or random.Random()
    deadline = clock() + timeout
    pause = 0.01
    while True:
        try:
            setup(db)
            return
        except sqlite3.OperationalError as e:
            if not is_locked(e) or clock() >= deadline:
                raise
            if db.in_transaction:
                db.execute("ROLLBACK")
            sleep(pause * (0.5 + rng.random()))
            pause = min(pause * 2, 0.5)


def statements(script: str) -> list[str]:
    """The statements of a SQL script (triggers included), to run them inside one
    transaction (``executescript`` commits first)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
