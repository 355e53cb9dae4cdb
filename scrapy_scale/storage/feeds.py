"""Feeds across a crash: every item that reached the item store reaches every configured
feed (``FEEDS``, ``-o``, scrapyd's items file) at least once, across ``kill -9`` and resume.

Scrapy's feeds live in the crawl's process (a file buffer, or a temporary file uploaded
at the end), so a killed crawl loses the items it had stored and acked but not yet
written out, and the resumed run never produces them again (the frontier acked their
pages). The fix is a small local journal per process, only when Scrapy's FeedExporter is
enabled:

- :class:`FeedJournal` (plain Python, no reactor): the keys of the items this process
  stored while its feeds were open, one JSON string a line in
  ``<state dir>/feed_journal/<job>/<process>.keys``. The keys of a written batch are
  appended in one ``write`` before the batch's items are released to ``item_scraped`` --
  so before their pages can be acked. A clean close of the feeds (Scrapy's
  ``feed_exporter_closed``, no ``feedexport/failed_count``) deletes the journal.
- A journal whose process is dead (:func:`process_token`: pid and start time, so a reused
  pid is not mistaken for the owner) is *adopted* by the next crawl of the job on this
  host (an atomic rename, so two workers starting together do not both take it); the
  crawl re-sends those items, read back from the item store by key, to its own feeds
  before it crawls, and deletes them with its own journal when its feeds close cleanly.

A feed can then hold an item twice (written out before the kill, and re-sent): see
docs/storage.md for how to deduplicate. The journal is read-back state: a line that is not
a key, or a key the store does not have, is skipped, with one warning per crawl.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from scrapy_scale.pids import pid_alive

logger = logging.getLogger(__name__)

FOLDER = "feed_journal"
SUFFIX = ".keys"


def process_token(pid: int) -> str:
    """``PID-STARTTIME`` of a process of this host (``PID`` alone where /proc is not readable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f"{pid}-{f.read().rsplit(')', 1)[1].split()[19]}"
    except (OSError, IndexError):
        return str(pid)


def token_alive(token: str) -> bool:
    """Is the process that wrote a journal named ``token`` still running?"""
    pid_text = token.split("-", 1)[0]
    if not pid_text.isdigit():
        return False  # not a journal of ours: treat as dead, its lines are checked anyway
    pid = int(pid_text)
    return pid_alive(pid) and process_token(pid) == token


def journal_folder(state_dir: str, job: str) -> Path:
    return Path(state_dir) / FOLDER / (re.sub(r"[^A-Za-z0-9._-]", "_", job) or "_")


def owner_of(path: Path) -> str:
    """The token of the process a journal file belongs to."""
    return path.name.removesuffix(SUFFIX).split("~", 1)[0]


class FeedJournal:
    """The keys of items stored by this process while its feeds were open."""

    def __init__(self, folder: Path, token: str | None = None):
        self.folder = folder
        self.token = token or process_token(os.getpid())
        self.path = folder / f"{self.token}{SUFFIX}"
        self._fd: int | None = None
        #: journal lines that were not a key (counted by :meth:`keys_in`)
        self.bad_lines = 0

    def open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def add(self, keys: Iterable[str]) -> None:
        """Append ``keys`` in one write (survives a kill -9 of this process once it returns)."""
        data = "".join(json.dumps(k) + "\n" for k in keys).encode()
        if data and self._fd is not None:
            os.write(self._fd, data)

    def orphans(self) -> list[Path]:
        """Journals of this job left by processes that are no longer running."""
        try:
            found = sorted(self.folder.glob("*" + SUFFIX))
        except OSError:
            return []
        return [p for p in found if owner_of(p) != self.token and not token_alive(owner_of(p))]

    def adopt(self, orphan: Path) -> Path | None:
        """Make ``orphan`` this process's (deleted with its journal); None when another
        process took it first."""
        mine = self.folder / f"{self.token}~{uuid.uuid4().hex[:8]}{SUFFIX}"
        try:
            os.rename(orphan, mine)
        except FileNotFoundError:
            return None
        return mine

    def keys_in(self, path: Path) -> Iterator[str]:
        """The keys of a journal file, once each; lines that are not a key are counted in
        :attr:`bad_lines` and skipped."""
        seen: set[str] = set()
        try:
            with open(path, "rb") as f:
                for raw in f:
                    try:
                        key = json.loads(raw)
                    except ValueError:
                        key = None
                    if not isinstance(key, str) or not key:
                        self.bad_lines += 1
                        continue
                    if key not in seen:
                        seen.add(key)
                        yield key
        except OSError:
            self.bad_lines += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def clear(self, resent: Iterable[Path] = ()) -> None:
        """The feeds closed cleanly: forget this process's journal and the adopted
        journals whose items were re-sent (an adopted journal that could not be re-sent
        stays, for the next run)."""
        self.close()
        for p in (self.path, *resent):
            p.unlink(missing_ok=True)
