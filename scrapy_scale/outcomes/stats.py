"""Outcome stats: a subscriber of the outcome signal that counts into Scrapy's stats.

It counts exactly the outcomes every other subscriber receives (metrics will count
the same events), so stats and what a subscriber counted never disagree. Besides the
``scale/...`` keys it writes Scrapy's own RetryMiddleware keys (``retry/count``,
``retry/max_reached``, ``retry/reason_count/<reason>``, named as Scrapy names them),
so existing dashboards and monitors keep working.

Installed once per crawler by the outcome middlewares (:meth:`OutcomeStats.install`).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from scrapy import signals as scrapy_signals
from scrapy.utils.response import response_status_message

from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as K
from scrapy_scale.context import ScaleContext
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.outcomes.policy import BROKEN_PAGE

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_scale.outcomes")

#: why a chain was given up once its retries were spent (Scrapy's retry/max_reached)
_SPENT = frozenset({"budget", "deadline", BROKEN_PAGE})

#: how many (class, reason) groups are kept and reported at close
TOP_ERRORS = 10
_MAX_GROUPS = 1000


def scrapy_reason(outcome: Outcome) -> str:
    """The reason Scrapy's RetryMiddleware would give: ``"503 Service Unavailable"`` for a
    status, the exception's dotted class name for a download exception, else ours."""
    if outcome.exception:
        return outcome.exception
    if outcome.status is not None and outcome.status >= 400:  # a block page (200) keeps our reason
        return response_status_message(outcome.status)
    return outcome.reason or outcome.cls.value


class OutcomeStats:
    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        self._inc = crawler.stats.inc_value  # bound once: attribute access on stats is slow
        self.errors: Counter[tuple[str, str]] = Counter()
        crawler.signals.connect(self.on_outcome, signal=scale_signals.outcome)
        crawler.signals.connect(self.spider_closed, signal=scrapy_signals.spider_closed)

    @classmethod
    def install(cls, crawler: Crawler) -> OutcomeStats:
        return ScaleContext.of(crawler).shared(OutcomeStats, lambda: cls(crawler))

    def on_outcome(self, outcome: Outcome, **kwargs: Any) -> None:
        inc = self._inc
        cls = outcome.cls.value
        if outcome.internal:
            inc((K.INTERNAL if outcome.final else K.RETRY_INTERNAL) + cls)
            if not outcome.final:
                self._scrapy_retry(outcome)
            return
        if outcome.final:
            inc(K.OUTCOME + cls)
            inc(K.retry_depth(outcome.attempt))
            if outcome.gave_up:
                inc(K.GAVE_UP + cls)
                if outcome.gave_up_why in _SPENT:  # as Scrapy: retries spent, not refused
                    inc(K.SCRAPY_RETRY_MAX_REACHED)
                if outcome.gave_up_why == BROKEN_PAGE:
                    inc(K.RETRY_BROKEN_PAGE)
            if outcome.fallback:
                inc(K.FALLBACK)
        else:
            inc(K.RETRY + cls)
            if not outcome.callback_retry:  # get_retry_request counted Scrapy's keys itself
                self._scrapy_retry(outcome)
        if outcome.cls is not FailureClass.OK:
            key = (cls, outcome.reason)
            if key in self.errors or len(self.errors) < _MAX_GROUPS:
                self.errors[key] += 1
            else:
                self.errors[(cls, "(other reasons)")] += 1

    def _scrapy_retry(self, outcome: Outcome) -> None:
        self._inc(K.SCRAPY_RETRY_COUNT)
        self._inc(K.SCRAPY_RETRY_REASON + scrapy_reason(outcome))

    def spider_closed(self, spider: Any, reason: str) -> None:
        top = self.errors.most_common(TOP_ERRORS)
        if not top:
            return
        lines = []
        for (cls, why), n in top:
            self.crawler.stats.set_value(K.error_group(cls, why), n)
            lines.append(f"  {n:>8}  {cls:<14} {why or '-'}")
        logger.info("Top error groups (class, reason) of %d:\n%s", len(self.errors), "\n".join(lines))
