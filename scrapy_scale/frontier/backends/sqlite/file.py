"""The SQLite frontier's file (:class:`SqliteFile`): its connection, the check of its
layout and integrity at open, one write transaction, the job's sequence numbers.

One file (WAL, ``synchronous=NORMAL``: survives kill -9) may hold many jobs. Every write
is one ``BEGIN IMMEDIATE`` transaction (:class:`.schema.Tx`).
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import urlsplit

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.backends.sqlite.schema import LAYOUT, SCHEMA, STATE_NAMES, Tx
from scrapy_scale.frontier.store import FrontierError
from scrapy_scale.sqlite_open import setup_retrying, statements


class SqliteFile:
    """The open file of one job's frontier: owned by the store, shared by its units."""

    def __init__(self, path: str, job: str, clock: clock_mod.Clock = clock_mod.wall):
        self.path = path
        self.job = job
        self.clock = clock
        self._db: sqlite3.Connection | None = None
        #: SEED_CACHE_KIB set on this connection
        self.seed_cache = False

    @staticmethod
    def path_from_url(url: str, state_dir: str = ".scale") -> str:
        """``sqlite:///abs.db`` and ``sqlite:////abs.db`` -> ``/abs.db``;
        ``sqlite://rel/f.db`` -> ``rel/f.db``; ``sqlite://`` -> ``{state_dir}/frontier.db``."""
        parts = urlsplit(url)
        path = (parts.netloc or "") + parts.path
        if path in ("", "/"):
            return os.path.join(state_dir, "frontier.db")
        if path.startswith("//"):  # sqlite:////abs/path
            path = path[1:]
        return path

    def open(self) -> None:
        if self._db is not None:
            return
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise FrontierError(
                f"cannot open the SQLite frontier {self.path!r}: {e}; check the folder exists and "
                "is writable, or set SCALE_FRONTIER_URL / SCALE_STATE_DIR"
            ) from None
        try:
            setup_retrying(db, self._setup, 60)
        except FrontierError:
            db.close()
            raise
        except sqlite3.DatabaseError as e:
            db.close()
            if "malformed" in str(e) or "corrupt" in str(e):
                raise FrontierError(self.corrupt_message(str(e))) from None
            raise FrontierError(
                f"{self.path!r} is not a usable scrapy-scale frontier ({e}); move the file away "
                "or point SCALE_FRONTIER_URL at another file"
            ) from None
        self._db = db

    def _setup(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=60000")
        # one write transaction from the layout check to the layout row, so a process opening
        # the file at the same moment sees either no tables or a whole frontier
        db.execute("BEGIN IMMEDIATE")
        existing = self._check_layout(db)
        if existing:
            self._check_intact(db)
        for statement in statements(SCHEMA):
            db.execute(statement)
        db.execute("INSERT OR IGNORE INTO scale_meta (key, value) VALUES ('layout', ?)", (str(LAYOUT),))
        db.execute("INSERT OR IGNORE INTO jobs (job) VALUES (?)", (self.job,))
        db.execute("COMMIT")

    def _check_layout(self, db: sqlite3.Connection) -> bool:
        """Refuse a file of another program or layout; True when it is an existing frontier."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return False
        if "scale_meta" not in tables:
            raise FrontierError(
                f"{self.path!r} is a SQLite file of another program (tables: {', '.join(sorted(tables))}); "
                "point SCALE_FRONTIER_URL at another file or move this one away"
            )
        row = db.execute("SELECT value FROM scale_meta WHERE key='layout'").fetchone()
        if row is None or row[0] != str(LAYOUT):
            found = row[0] if row else "none"
            raise FrontierError(
                f"the frontier file {self.path!r} has layout {found}, this version of scrapy-scale "
                f"reads layout {LAYOUT}; finish or drop that job with the version that wrote it, "
                "or move the file away to start over"
            )
        return True

    def _check_intact(self, db: sqlite3.Connection) -> None:
        """A corrupt file (garbled pages) or counters that disagree with the records would
        hang the crawl later (leases that never come, a job that never drains): refuse it now."""
        problems = [r[0] for r in db.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise FrontierError(self.corrupt_message("; ".join(str(p) for p in problems)[:300]))
        counted = {st: n for st, n in db.execute("SELECT state, n FROM counts WHERE job=?", (self.job,)) if n}
        real = dict(db.execute("SELECT state, COUNT(*) FROM requests WHERE job=? GROUP BY state", (self.job,)))
        if counted != real:
            named = {STATE_NAMES.get(k, k): v for k, v in counted.items()}
            found = {STATE_NAMES.get(k, k): v for k, v in real.items()}
            raise FrontierError(
                self.corrupt_message(
                    f"inconsistent: the counters say {named}, the records are {found} (job {self.job!r})"
                )
            )

    def corrupt_message(self, problem: str) -> str:
        return (
            f"the SQLite frontier {self.path!r} is corrupt ({problem}); the crawl cannot use it. "
            f"Check it with `sqlite3 {self.path} 'PRAGMA integrity_check'`, then restore it from a backup, "
            "or salvage what sqlite3's `.recover` can into a new file, or move it away to start the job over "
            "(its records are lost)"
        )

    def fatal_error(self, error: BaseException) -> str | None:
        """The corrupt-file message for an error no retry can help, else None."""
        # a DatabaseError other than an OperationalError (busy, locked, disk full, I/O, which
        # may pass): malformed or not a database, corrupt; retrying can never help
        if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
            return self.corrupt_message(f"{type(error).__name__}: {error}")
        return None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
            self.seed_cache = False

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise FrontierError("the SQLite frontier is not open")
        return self._db

    def tx(self) -> Tx:
        """``with file.tx() as db:`` one write transaction (nested: part of the outer one)."""
        return Tx(self.db)

    def next_seq(self, db: sqlite3.Connection, k: int = 1) -> int:
        """The first of ``k`` new sequence numbers of the job (its records' order)."""
        (seq,) = db.execute("UPDATE jobs SET seq = seq + ? WHERE job=? RETURNING seq", (k, self.job)).fetchone()
        return int(seq) - k + 1
