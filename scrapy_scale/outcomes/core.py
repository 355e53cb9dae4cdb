"""The outcome package's per-crawler parts, built once from the settings.

:class:`OutcomeCore` holds what both outcome middlewares use: the classifier, the
retry decider, the emitter, the delayed-retry holder, the parse checks and the
hand-off of a response's verdict from the downloader middleware to the spider
middleware (which sends the final outcome once the callback's output is consumed).
It reacts to nothing itself: every reactor is a subscriber of the outcome signal.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.settings import BaseSettings
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_scale import config
from scrapy_scale import stats_keys as K
from scrapy_scale.clock import Clock, Randomness, wall
from scrapy_scale.context import ScaleContext
from scrapy_scale.outcomes import settings as oset
from scrapy_scale.outcomes._log import FirstFew
from scrapy_scale.outcomes.classify import BlockPageDetector, Classifier
from scrapy_scale.outcomes.emit import OutcomeEmitter
from scrapy_scale.outcomes.holding import DelayedRetries
from scrapy_scale.outcomes.late import NO_LATE, LatePolicy
from scrapy_scale.outcomes.parse_tracker import ParseTracker
from scrapy_scale.outcomes.policy import RetryPolicy, build_policies
from scrapy_scale.outcomes.retry import RetryDecider
from scrapy_scale.outcomes.stats import OutcomeStats

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_scale.outcomes")


def _scrapy_retry_enabled(settings: BaseSettings) -> bool:
    from scrapy.downloadermiddlewares.retry import RetryMiddleware
    from scrapy.utils.conf import build_component_list

    mws = build_component_list(settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES"))
    for mw in mws:
        try:
            obj = load_object(mw) if isinstance(mw, str) else mw
        except (ImportError, ValueError, AttributeError, NameError):
            continue
        if obj is RetryMiddleware:
            return True
    return False


def project_set(settings: BaseSettings, name: str) -> bool:
    """Did the project (not Scrapy's defaults) set ``name``?"""
    return (settings.getpriority(name) or 0) > 0


def _detectors(crawler: Crawler) -> list[BlockPageDetector]:
    out: list[BlockPageDetector] = []
    for path in oset.BLOCK_DETECTORS.get(crawler.settings):
        try:
            dcls = load_object(path)
        except (ImportError, ValueError, AttributeError, NameError) as e:
            raise config.ScaleSettingError(oset.BLOCK_DETECTORS.name, f"cannot import {path!r}: {e}") from None
        if not hasattr(dcls, "detect"):
            raise config.ScaleSettingError(oset.BLOCK_DETECTORS.name, f"{path} has no detect(response, request) method")
        out.append(build_from_crawler(dcls, crawler) if hasattr(dcls, "from_crawler") else dcls())
    return out


def _late_policy(s: Any, retry_times: int | None) -> LatePolicy:
    """SCALE_RETRY_LATE; a RETRY_TIMES set by the project is the whole budget, as in
    Scrapy (no late retries), unless the project sets SCALE_RETRY_LATE too."""
    if retry_times is not None and s.get(oset.RETRY_LATE.name) is None:
        return NO_LATE
    policy: LatePolicy = oset.RETRY_LATE.get(s)
    return policy


def _exception_classes(values: list[Any]) -> list[type[BaseException]]:
    """RETRY_EXCEPTIONS as classes (dotted paths imported, as Scrapy's RetryMiddleware does)."""
    out = []
    for v in values:
        try:
            obj = load_object(v) if isinstance(v, str) else v
        except (ImportError, ValueError, AttributeError, NameError) as e:
            raise config.ScaleSettingError("RETRY_EXCEPTIONS", f"cannot import {v!r}: {e}") from None
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            raise config.ScaleSettingError("RETRY_EXCEPTIONS", f"{v!r} is not an exception class")
        out.append(obj)
    return out


def _give_up_level(settings: BaseSettings) -> int | None:
    if not project_set(settings, "RETRY_GIVE_UP_LOG_LEVEL"):
        return None
    lv = settings.get("RETRY_GIVE_UP_LOG_LEVEL")
    level = lv if isinstance(lv, int) else logging.getLevelName(str(lv).upper())
    return level if isinstance(level, int) else None


class OutcomeCore:
    @classmethod
    def of(cls, crawler: Crawler) -> OutcomeCore:
        """The crawler's one core, kept in its ``ScaleContext`` (made on first use)."""
        return ScaleContext.of(crawler).shared(cls, lambda: cls(crawler))

    def __init__(self, crawler: Crawler, clock: Clock = wall, rng: Randomness | None = None):
        self.crawler = crawler
        self.clock = clock
        self.stats = crawler.stats
        self.context = ScaleContext.of(crawler)
        s = crawler.settings
        retry_codes = None
        if project_set(s, "RETRY_HTTP_CODES"):
            retry_codes = frozenset(int(x) for x in s.getlist("RETRY_HTTP_CODES"))
        retry_exceptions = None
        if project_set(s, "RETRY_EXCEPTIONS"):
            retry_exceptions = _exception_classes(s.getlist("RETRY_EXCEPTIONS"))
        self.classifier = Classifier(
            oset.FAILURE_RULES.get(s), _detectors(crawler), retry_codes, retry_exceptions, clock=clock
        )
        retry_times = s.getint("RETRY_TIMES") if project_set(s, "RETRY_TIMES") else None
        policies = build_policies(oset.RETRY_POLICY.get(s), retry_times, _give_up_level(s))
        self.warn_first = FirstFew(logger)
        self.policy = RetryPolicy(
            policies,
            retry_after_max=oset.RETRY_AFTER_MAX.get(s),
            clock=clock,
            rng=rng or Randomness(),
            warn=self._warn_counted,
            late=_late_policy(s, retry_times),
        )
        self.emitter = OutcomeEmitter(crawler, retry_after_max=self.policy.retry_after_max)
        self.decider = RetryDecider(
            self.policy,
            enabled=s.getbool("RETRY_ENABLED"),
            priority_adjust=s.getint("RETRY_PRIORITY_ADJUST"),
            build=self.emitter.build,
        )
        self.decider.paced = lambda: self.context.pacer is not None
        # DelayedRetries before the stats: at close, abandoned retries are counted before the report
        self.delayed = DelayedRetries(crawler, self.emitter, clock)
        self.parsing = ParseTracker(crawler, self.classifier, self.emitter, oset.CRITICAL_FIELDS.get(s), clock)
        OutcomeStats.install(crawler)
        if self.decider.enabled and _scrapy_retry_enabled(s):
            logger.warning(
                "Scrapy's RetryMiddleware is still enabled next to scrapy_scale's retry policy: requests "
                "may be retried twice. Set DOWNLOADER_MIDDLEWARES['scrapy.downloadermiddlewares.retry."
                "RetryMiddleware'] = None (the scrapy_scale add-on does this)."
            )

    def _warn_counted(self, kind: str, msg: str, *args: Any) -> None:
        self.stats.inc_value(K.WARNED + kind)
        self.warn_first(kind, msg, *args)
