"""The process exit status of a crawl that ran to its end but must not look successful.

Scrapy's ``scrapy crawl`` (and ``runspider``) exits 1 only when the crawler could not
start: a crawl that ran exits 0 whatever happened in it, and the command's ``exitcode``
is out of reach of extensions. Any component calls :func:`request` (a status and why);
the first call installs a wrapper around :func:`sys.exit`, so the ``sys.exit(0)`` with
which ``scrapy.cmdline.execute`` ends becomes ``sys.exit(status)``. A non-zero status
of Scrapy's own wins, and so does an earlier request with a higher status.

Scripts that drive ``CrawlerProcess`` themselves read :func:`requested` after the crawl.

A request belongs to the crawl that made it (``crawler``; kept in the crawler's
``ScaleContext``): :func:`requested` with a crawler answers for that crawl alone, so the run summary of a later crawl in the same
process (a ``CrawlerProcess`` running several spiders, a test run) does not report an
earlier crawl's status. The process exit status is the highest over all its crawls.
Used for dead letters (``SCALE_EXIT_CODE_DEAD_LETTERS``) and for a frontier that had to
stop the crawl; the same call serves any later layer that judges a run (for example a
data-quality check: set the finish reason by closing the spider, and the exit status here).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, NoReturn

from scrapy_scale.context import ScaleContext

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_requested: tuple[int, str] | None = None
_original_exit = sys.exit


def _higher(old: tuple[int, str] | None, status: int, why: str) -> tuple[int, str]:
    return (status, why) if old is None or status > old[0] else old


def request(status: int, why: str, crawler: Any = None) -> None:
    """Make the process exit with ``status`` (1-255) at its normal end, for ``why``; the
    request belongs to ``crawler``'s crawl when given. The highest status requested wins;
    0 is ignored."""
    global _requested
    if not 0 < status < 256:
        return
    with _lock:
        _requested = _higher(_requested, status, why)
        if crawler is not None:
            ctx = ScaleContext.of(crawler)
            ctx.exit_request = _higher(ctx.exit_request, status, why)
        if sys.exit is not _exit:
            sys.exit = _exit
    logger.debug("exit status %d requested: %s", status, why)


def requested(crawler: Any = None) -> tuple[int, str] | None:
    """``(status, why)`` requested so far for ``crawler``'s crawl, or (no crawler) in
    this process; None when none was."""
    if crawler is not None:
        return ScaleContext.of(crawler).exit_request
    return _requested


def reset() -> None:
    """Forget the process's request and restore :func:`sys.exit` (tests, or a process
    running several crawls); a crawl's own request goes with its crawler."""
    global _requested
    with _lock:
        _requested = None
        if sys.exit is _exit:
            sys.exit = _original_exit


def exit_status(status: Any) -> Any:
    """What ``sys.exit(status)`` exits with once a status was requested."""
    if _requested is not None and status in (None, 0):
        return _requested[0]
    return status


def _exit(status: Any = None) -> NoReturn:
    _original_exit(exit_status(status))
