"""A crawl that cannot start stops with one clear ERROR line, not a traceback.

Scrapy lets an exception raised while a crawler starts (an add-on, a component's
``from_crawler``) escape its crawl task, and asyncio (or Twisted, for the Deferred-based
``CrawlerProcess``) then logs it as ``Task exception was never retrieved`` with a
36-line traceback whose last line is the message. :func:`reporting` wraps those
places: a :class:`~scrapy_scale.config.ScaleSettingError` is logged once as
``Cannot start: bad setting NAME = VALUE: what is wrong`` and re-raised, so the crawl still fails
(``scrapy crawl`` exits with status 1); :func:`cannot_start` does the same for another
error that stops a start (a frontier that cannot be reached). The traceback logged
afterwards for that same error, or for one it caused (Scrapy's engine, closing a spider
it never opened, raises ``Engine slot not assigned`` from it), is dropped at every log
level, DEBUG included, which is Scrapy's default: a filter on the ``asyncio`` and
``twisted`` loggers. (The Deferred-based ``CrawlerProcess``, used with
``FORCE_CRAWLER_PROCESS`` or a non-asyncio reactor, also has Twisted print an unhandled
Deferred error straight to stderr, past logging: there the ERROR line still comes first,
the traceback after it.)
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from scrapy_scale.config import ScaleSettingError

logger = logging.getLogger("scrapy_scale")

#: loggers through which Scrapy's runners report a crawl that failed to start
RUNNER_LOGGERS = ("asyncio", "twisted")
#: attributes marking an error reported, and one whose traceback is to stay out of the log
_REPORTED = "_scale_reported"
_HIDE = "_scale_hide_traceback"


F = TypeVar("F", bound=Callable[..., Any])


def reports_setting_errors(fn: F) -> F:
    """Decorator of a ``from_crawler(cls, crawler)`` (or any method): a ScaleSettingError
    it raises is reported (:func:`reporting`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with reporting():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextmanager
def reporting() -> Iterator[None]:
    """Log a ScaleSettingError raised in the block as one ERROR line, then re-raise it."""
    try:
        yield
    except ScaleSettingError as e:
        report(e)
        raise


def report(error: ScaleSettingError) -> None:
    """Log ``error`` as one ERROR line (once, however many wrappers it crosses)."""
    cannot_start(error, error.line())


def cannot_start(error: BaseException, what: str) -> None:
    """Log ``Cannot start: WHAT`` once for ``error``, which the caller raises (or lets
    go on): the runners' tracebacks of it stay out of the log."""
    if getattr(error, _REPORTED, False):
        return
    setattr(error, _REPORTED, True)
    logger.error("Cannot start: %s", what)
    setattr(error, _HIDE, True)
    _install_filter()


class HideReported(logging.Filter):
    """Drops a runner's log record of an error :func:`report` already logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or not _hidden(exc)


def _hidden(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 10:  # the error itself, or one it caused
        if getattr(exc, _HIDE, False):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


_filter = HideReported()


def _install_filter() -> None:
    for name in RUNNER_LOGGERS:
        log = logging.getLogger(name)
        if _filter not in log.filters:
            log.addFilter(_filter)
