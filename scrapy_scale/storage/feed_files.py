"""Local feed files across a crash: exactly once (see docs/storage.md#feeds-across-a-crash).

A process with a feed journal (:mod:`scrapy_scale.storage.feeds`) records in it, before a
single byte of a local feed file is written, where its writing begins: the file's
absolute path, its size when this process opened it (the end of older runs' output for
``-o``, 0 for ``-O`` or a new file), and its device and inode. Every byte past that
point is then the output of this process, and each of those items is in its journal.

When the process was killed, the next run of the job *cuts back* each such file to where
the killed run began (a file it began empty is removed): the killed run's output goes,
a JSON array or XML document it left unterminated with it, and the run re-sends all of
the killed run's stored items, read from the store, once. So each stored item is in the
job's feed output exactly once, without reading a feed back (the cost is one truncate per
file). A file that is no longer the one recorded (another inode, or shorter than where
the run began) is left as it is, and gets the items re-sent (at least once).

Plain Python, apart from :class:`JournaledFileFeedStorage` (Scrapy's ``FileFeedStorage``
telling the journal where it begins).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from scrapy.extensions.feedexport import FileFeedStorage

#: longest path a record may name (read-back state)
MAX_PATH = 4096
#: the journal line that voids the feed records before it (their files were cut back)
CUT_MARK = b'{"feeds_cut": 1}\n'


@dataclass(frozen=True)
class FeedFile:
    """Where a process began writing a local feed file."""

    path: str
    start: int
    dev: int
    ino: int

    def record(self) -> dict[str, Any]:
        return {"feed": self.path, "start": self.start, "dev": self.dev, "ino": self.ino}

    @property
    def to_create(self) -> bool:
        """A record made before this process created the file (no inode yet): an empty
        file at that path after a kill is one it created and wrote nothing to."""
        return self.ino == 0


def will_create(path: str) -> FeedFile:
    """The record a process makes before it creates a feed file at ``path`` (inode 0, which
    no file has), so a kill between creating it and recording it leaves no file unknown."""
    return FeedFile(path, 0, 0, 0)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 else None


def parse_record(value: Any) -> FeedFile | None:
    """A feed record read back from a journal, or None when it is not a sound one."""
    if not isinstance(value, dict):
        return None
    path = value.get("feed")
    start, dev, ino = (_count(value.get(k)) for k in ("start", "dev", "ino"))
    if (
        not isinstance(path, str)
        or not os.path.isabs(path)
        or len(path) > MAX_PATH
        or "\x00" in path
        or start is None
        or dev is None
        or ino is None
    ):
        return None
    return FeedFile(path, start, dev, ino)


@dataclass
class CutReport:
    """What :func:`cut_back` did, for its one WARNING line."""

    #: (path, size before, size after) of files cut back to where a killed run began
    cut: list[tuple[str, int, int]] = field(default_factory=list)
    #: (path, size before) of files a killed run had begun empty: removed
    removed: list[tuple[str, int]] = field(default_factory=list)
    #: (path, why) of files left as they are (their items may appear twice)
    left: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.cut or self.removed or self.left)

    def text(self) -> str:
        parts = [f"cut back {p} from {a} to {b} bytes" for p, a, b in self.cut]
        parts += [f"removed {p} ({n} bytes, begun by that run)" for p, n in self.removed]
        parts += [f"left {p} as it is ({why}: its items may appear twice there)" for p, why in self.left]
        return "; ".join(parts)


def cut_back(files: Iterable[FeedFile]) -> CutReport:
    """Cut each file back to where the earliest of its records began (records of another
    file at that path are ignored; a file none of them matches is left as it is)."""
    by_path: dict[str, list[FeedFile]] = {}
    for f in files:
        by_path.setdefault(f.path, []).append(f)
    report = CutReport()
    for path, records in by_path.items():
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue  # removed since (by the user, or an earlier cut): nothing of it left
        except OSError as e:
            report.left.append((path, f"cannot read it: {e.strerror}"))
            continue
        mine = [r.start for r in records if (r.dev, r.ino) == (st.st_dev, st.st_ino)]
        if not mine and stat.S_ISREG(st.st_mode) and st.st_size == 0 and any(r.to_create for r in records):
            mine = [0]  # created by the killed run, killed before it said which file: empty
        if not stat.S_ISREG(st.st_mode) or not mine:
            report.left.append((path, "another file than the killed run wrote"))
            continue
        start = min(mine)
        if st.st_size < start:
            report.left.append((path, f"shorter ({st.st_size} bytes) than where the killed run began ({start})"))
            continue
        try:
            if start == 0:
                os.unlink(path)
                report.removed.append((path, st.st_size))
            elif st.st_size > start:
                os.truncate(path, start)
                report.cut.append((path, st.st_size, start))
        except OSError as e:
            report.left.append((path, f"cannot change it: {e.strerror}"))
    return report


class JournaledFileFeedStorage(FileFeedStorage):
    """Scrapy's local file storage (``-o``, ``-O``, ``FEEDS``, scrapyd's items file), which
    tells :attr:`on_open` where its writing begins before the exporter writes a byte.
    Made per feed journal by :func:`storage_for`."""

    on_open: Callable[[FeedFile], None]

    def open(self, spider: Any) -> IO[bytes]:
        if not os.path.exists(self.path):
            self.on_open(will_create(os.path.abspath(self.path)))
        f = super().open(spider)
        try:
            st = os.fstat(f.fileno())
            self.on_open(FeedFile(os.path.abspath(self.path), st.st_size, st.st_dev, st.st_ino))
        except BaseException:
            f.close()
            raise
        return f


def storage_for(on_open: Callable[[FeedFile], None]) -> type[JournaledFileFeedStorage]:
    """A :class:`JournaledFileFeedStorage` class that reports to ``on_open``."""
    return type("JournaledFileFeedStorage", (JournaledFileFeedStorage,), {"on_open": staticmethod(on_open)})
