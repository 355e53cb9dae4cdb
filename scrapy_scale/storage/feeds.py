"""Feeds across a crash: every item that reached the item store reaches every configured
feed (``FEEDS``, ``-o``, scrapyd's items file) at least once, across ``kill -9`` and resume.

Scrapy's feeds live in the crawl's process (a file buffer, or a temporary file uploaded
at the end), so a killed crawl loses the items it had stored and acked but not yet
written out, and the resumed run never produces them again (the frontier acked their
pages). The fix is a small local journal per process, only when Scrapy's FeedExporter is
enabled:

- :class:`FeedJournal` (plain Python, no reactor): the keys of the items this process
  stored while its feeds were open, one JSON line each (the key, or ``[key, class path]``
  for an item that is not a dict) in ``<state dir>/feed_journal/<job>-<hash>/<process>.keys``.
  The lines of a written batch are appended in full before the batch's items are
  released to ``item_scraped`` -- so before their pages can be acked. A clean close of the
  feeds (Scrapy's ``feed_exporter_closed``, no ``feedexport/failed_count``) deletes the
  journal.
- The owner holds an exclusive ``flock`` on its journal for its life. A journal that
  nobody holds and whose process is dead (:func:`process_token`: pid and start time, so a
  reused pid is not mistaken for the owner) is *adopted* by the next crawl of the job (the
  lock taken without waiting, then an atomic rename, so two workers starting together do
  not both take it, and a worker of another host sharing the folder keeps its own); the
  crawl re-sends those items, read back from the item store by key, to its own feeds
  before it crawls, and deletes them with its own journal when its feeds close cleanly.

- The journal also records where this process began writing each local feed file
  (:mod:`scrapy_scale.storage.feed_files`): the next run cuts those files back before it
  re-sends, so each stored item is in the job's local feed output exactly once.

A feed the journal has no record of (stdout, a storage other than a local file) can
hold an item twice (written out before the kill, and re-sent): see docs/storage.md. The
journal is read-back state: a line that is neither an entry nor a sound feed record, or a
key the store does not have, is skipped, with one warning per crawl.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from scrapy_scale.errors import ScaleError
from scrapy_scale.pids import pid_alive
from scrapy_scale.storage.feed_files import CUT_MARK, FeedFile, parse_record

logger = logging.getLogger(__name__)

FOLDER = "feed_journal"
SUFFIX = ".keys"
#: longest journal line read back (a key is 40-odd characters, a class path far less)
MAX_LINE = 4096

#: one journal entry: an item key and the dotted path of the item's class (None: a dict)
Entry = tuple[str, str | None]


class JournalWriteError(ScaleError, OSError):
    """The journal could not be written: items of the batch must not be acked."""


def process_token(pid: int) -> str:
    """``PID-STARTTIME`` of a process of this host (``PID`` alone where /proc is not readable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f"{pid}-{f.read().rsplit(')', 1)[1].split()[19]}"
    except (OSError, IndexError):
        return str(pid)


def token_alive(token: str) -> bool:
    """Is the process that wrote a journal named ``token`` still running on this host?"""
    pid_text = token.split("-", 1)[0]
    if not pid_text.isdigit():
        return False  # not a journal of ours: treat as dead, its lines are checked anyway
    pid = int(pid_text)
    return pid_alive(pid) and process_token(pid) == token


def journal_folder(state_dir: str, job: str) -> Path:
    """The job's journal folder: its name cleaned for a file system, plus a short hash of
    the raw name (``shop/de`` and ``shop_de`` get folders of their own)."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", job)[:80] or "_"
    digest = hashlib.sha1(job.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return Path(state_dir) / FOLDER / f"{clean}-{digest}"


def owner_of(path: Path) -> str:
    """The token of the process a journal file belongs to."""
    return path.name.removesuffix(SUFFIX).split("~", 1)[0]


def _lock(fd: int) -> bool:
    """Take the exclusive lock of a journal without waiting; False when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def encode_entries(entries: Iterable[Entry]) -> bytes:
    return "".join(json.dumps(k if c is None else [k, c]) + "\n" for k, c in entries).encode()


def parse_line(raw: bytes) -> Entry | None:
    """One journal line, or None when it is not an entry (any error: it is read-back state)."""
    try:
        value = json.loads(raw)
    except Exception:  # noqa: BLE001 - ValueError, RecursionError ([[[[...), anything else
        return None
    if isinstance(value, str) and value:
        return value, None
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and value[0]
        and isinstance(value[1], str)
    ):
        return value[0], value[1] or None
    return None


class FeedJournal:
    """The keys of items stored by this process while its feeds were open."""

    def __init__(self, folder: Path, token: str | None = None):
        self.folder = folder
        self.token = token or process_token(os.getpid())
        self.path = folder / f"{self.token}{SUFFIX}"
        self._fd: int | None = None
        #: open, locked descriptors of the journals this process adopted
        self._adopted: dict[Path, int] = {}
        #: journal lines that were not an entry (counted by :meth:`entries_in`)
        self.bad_lines = 0

    def open(self) -> None:
        """Create this process's journal, locked before it gets its name (so no other process
        can find it unlocked)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{self.token}~{uuid.uuid4().hex[:8]}.new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(tmp, self.path)
        self._fd = fd

    def fileno(self) -> int | None:
        """The descriptor of this process's journal, locked while it is open (None: closed)."""
        return self._fd

    def add(self, entries: Iterable[Entry]) -> None:
        """Append ``entries`` in full (survives a kill -9 of this process once it returns).
        Raises :class:`JournalWriteError` when they could not all be written."""
        data = encode_entries(entries)
        if not data or self._fd is None:
            return
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                if n <= 0:
                    raise OSError("write returned 0")
                view = view[n:]
        except OSError as e:
            raise JournalWriteError(f"cannot write the feed journal {self.path}: {e}") from e

    def add_feed_file(self, feed: FeedFile) -> None:
        """Record where this process begins writing a local feed file (before it writes).
        Raises :class:`JournalWriteError`."""
        if self._fd is None:
            return
        data = (json.dumps(feed.record()) + "\n").encode()
        try:
            if os.write(self._fd, data) != len(data):
                raise OSError("short write")
        except OSError as e:
            raise JournalWriteError(f"cannot write the feed journal {self.path}: {e}") from e

    def feed_files_in(self, path: Path) -> list[FeedFile]:
        """The feed records of a journal file still in force (those before a cut mark are
        void: their files were cut back already); unsound ones count in :attr:`bad_lines`."""
        found: list[FeedFile] = []
        try:
            with open(path, "rb") as f:
                for raw in _lines(f):
                    if raw is None or not raw.startswith(b"{"):
                        continue  # entries (and overlong lines): counted by entries_in
                    if raw.rstrip(b"\n") == CUT_MARK.rstrip(b"\n"):
                        found.clear()
                        continue
                    try:
                        record = parse_record(json.loads(raw))
                    except Exception:  # noqa: BLE001 - read-back state
                        record = None
                    if record is None:
                        self.bad_lines += 1
                    else:
                        found.append(record)
        except OSError:
            self.bad_lines += 1
        return found

    def void_feed_files(self, paths: Iterable[Path]) -> list[str]:
        """Mark the feed records of these (adopted) journals done: their files were cut back,
        and must never be cut again (this run writes past that point). The errors."""
        errors = []
        for p in paths:
            try:
                fd = os.open(p, os.O_WRONLY | os.O_APPEND)
                try:
                    if os.write(fd, CUT_MARK) != len(CUT_MARK):
                        raise OSError("short write")
                finally:
                    os.close(fd)
            except OSError as e:
                errors.append(f"{p}: {e}")
        return errors

    def orphans(self) -> list[Path]:
        """Journals of this job left by processes that are no longer running here."""
        try:
            found = sorted(self.folder.glob("*" + SUFFIX))
        except OSError:
            return []
        return [p for p in found if owner_of(p) != self.token and not token_alive(owner_of(p))]

    def adopt(self, orphan: Path) -> Path | None:
        """Make ``orphan`` this process's (locked, deleted with its journal); None when its
        owner still holds it (a live worker, maybe of another host) or another process took
        it first."""
        try:
            fd = os.open(orphan, os.O_RDONLY)
        except OSError:
            return None
        if not _lock(fd):
            os.close(fd)
            return None
        mine = self.folder / f"{self.token}~{uuid.uuid4().hex[:8]}{SUFFIX}"
        try:
            if os.fstat(fd).st_ino != os.stat(orphan).st_ino:
                raise FileNotFoundError(orphan)  # taken and replaced between open and lock
            os.rename(orphan, mine)
        except OSError:
            os.close(fd)
            return None
        self._adopted[mine] = fd
        return mine

    def entries_in(self, path: Path) -> Iterator[Entry]:
        """The entries of a journal file, once per key; lines that are not an entry (or
        longer than :data:`MAX_LINE`) are counted in :attr:`bad_lines` and skipped."""
        seen: set[str] = set()
        try:
            with open(path, "rb") as f:
                for raw in _lines(f):
                    if raw is not None and raw.startswith(b"{"):
                        continue  # a feed record: read by feed_files_in
                    entry = parse_line(raw) if raw is not None else None
                    if entry is None:
                        self.bad_lines += 1
                    elif entry[0] not in seen:
                        seen.add(entry[0])
                        yield entry
        except OSError:
            self.bad_lines += 1

    def keys_in(self, path: Path) -> Iterator[str]:
        """The keys of a journal file, once each (see :meth:`entries_in`)."""
        return (k for k, _ in self.entries_in(path))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for fd in self._adopted.values():
            os.close(fd)
        self._adopted.clear()

    def clear(self, resent: Iterable[Path] = ()) -> None:
        """The feeds closed cleanly: forget this process's journal and the adopted
        journals whose items were re-sent (an adopted journal that could not be re-sent
        stays, for the next run). Deleted before their locks are released."""
        for p in (self.path, *resent):
            p.unlink(missing_ok=True)
        self.close()


def _lines(f: BinaryIO) -> Iterator[bytes | None]:
    """The lines of ``f``, None for one longer than :data:`MAX_LINE` (read past, never held)."""
    while raw := f.readline(MAX_LINE + 1):
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            while (rest := f.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield raw
